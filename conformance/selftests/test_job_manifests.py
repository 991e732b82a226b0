"""What the suite's real jobs are built with: the TrainJob a workload runs in (JOB-04: its launcher command,
its runtime patch, and that both fit the pinned Trainer's TrainJob schema and MPI runtimes) and the MPIJob
launcher's restart policy (JOB-11). No cluster."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from mpiplat import jobs
from mpiplat.conformance.placement import placement
from mpiplat.versions import load, module_dir

TRAINER_RUNTIMES = ("deepspeed_distributed.yaml", "mlx_distributed.yaml")


def _workload_trainjob(**kw) -> dict:
    return jobs.trainjob(jobs.TrainJob(name="mpi", namespace="ns", workload="allreduce",
                                       workload_args=["--counts", "1"], **kw))


def test_a_workload_trainjob_runs_mpirun_on_the_launcher_with_the_program_mounted_on_every_mpi_job():
    body = _workload_trainjob(runtime="rt", runtime_kind="TrainingRuntime", image="img:1")["spec"]
    assert body["runtimeRef"] == {"name": "rt", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"}
    assert body["trainer"]["image"] == "img:1" and body["trainer"]["numNodes"] == 2
    assert "command" not in body["trainer"]  # args: the image's entrypoint runs first
    command = body["trainer"]["args"]
    assert command[:2] == ["sh", "-c"] and command[3] == "mpi"  # $0: the subdomain, the TrainJob's name
    assert command[4:] == ["mpirun", "--allow-run-as-root", "--bind-to", "none",
                           "python3", f"{jobs.WORKLOADS_DIR}/allreduce.py", "--counts", "1"]
    [patch] = body["runtimePatches"]
    assert patch["manager"] == "mpiplat.io/workload"
    replicated = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert [r["name"] for r in replicated] == list(jobs.TRAINER_MPI_JOBS)
    for r in replicated:
        assert r["template"]["spec"]["template"]["spec"] == {
            "volumes": [{"name": "workloads", "configMap": {"name": jobs.WORKLOADS_CONFIGMAP}}],
            "containers": [{"name": "node", "volumeMounts": [
                {"name": "workloads", "mountPath": jobs.WORKLOADS_DIR, "readOnly": True}]}]}


def test_placement_and_workload_are_two_runtime_patches():
    body = _workload_trainjob(**placement(real=False, kwok_nodes=True))["spec"]
    assert [p["manager"] for p in body["runtimePatches"]] == ["mpiplat.io/placement", "mpiplat.io/workload"]
    # Without either, the TrainJob is the runtime's own (the default: a ClusterTrainingRuntime).
    plain = jobs.trainjob(jobs.TrainJob(name="ds"))["spec"]
    assert "runtimePatches" not in plain and "command" not in plain["trainer"]
    assert plain["runtimeRef"]["kind"] == "ClusterTrainingRuntime"


@pytest.mark.parametrize("kw, message", [
    ({"workload": "allreduce", "command": ["true"]}, r"command \['true'\] and workload 'allreduce' are both set"),
    ({"workload": "../x"}, r"workload '\.\./x' is invalid; allowed: a program name"),
    ({"runtime_kind": "Runtime"}, r"runtime_kind 'Runtime' is unknown; allowed: ClusterTrainingRuntime, "
                                  r"TrainingRuntime"),
    ({"workload": "pi", "placed_jobs": []}, r"placed_jobs is \[\]; allowed: the names of the runtime's"),
])
def test_bad_trainjob_parameters_are_refused_naming_the_field(kw, message):
    with pytest.raises(jobs.JobSpecError, match=message):
        jobs.trainjob(jobs.TrainJob(name="ds", **kw))


# ---------------------------------------------------------------- the launcher waits for its own name

def _fake_bin(tmp_path: Path, resolves_after: int) -> dict[str, str]:
    """PATH with `hostname`, `sleep` (instant) and `getent` that fails `resolves_after` times (-1: always)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    count = tmp_path / "tries"
    count.write_text("0")
    scripts = {
        "hostname": "#!/bin/sh\necho mpi-launcher-0-0\n",
        "sleep": "#!/bin/sh\nexit 0\n",
        "getent": f"#!/bin/sh\nn=$(cat {count}); echo $((n+1)) > {count}; echo \"$@\" >> {tmp_path / 'asked'}\n"
                  f"[ {resolves_after} -ge 0 ] && [ \"$n\" -ge {resolves_after} ]\n",
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def _launch(env: dict[str, str], program: list[str]) -> subprocess.CompletedProcess:
    command = jobs.trainjob_launcher_command("mpi", program)
    assert command[4] == "mpirun"
    # The same shell script, with `echo` in mpirun's place: what it would run, and when.
    return subprocess.run([*command[:4], "echo", "ran", *command[5:]], env=env, capture_output=True, text=True,
                          timeout=60, check=False)


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")
def test_the_launcher_runs_mpirun_once_its_own_name_resolves(tmp_path):
    env = _fake_bin(tmp_path, resolves_after=3)
    done = _launch(env, ["python3", "x.py"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ran", "--allow-run-as-root", "--bind-to", "none", "python3", "x.py"]
    assert (tmp_path / "tries").read_text().strip() == "4"
    assert set((tmp_path / "asked").read_text().splitlines()) == {"hosts mpi-launcher-0-0.mpi"}
    assert done.stderr == "mpiplat: waited 3s for mpi-launcher-0-0.mpi to resolve\n"
    at_once = _launch(_fake_bin(tmp_path / "again", resolves_after=0), ["true"])
    assert at_once.returncode == 0 and at_once.stderr == "" and at_once.stdout.split()[0] == "ran"
    assert (tmp_path / "again" / "tries").read_text().strip() == "1"


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")
def test_the_launcher_gives_up_waiting_and_lets_mpirun_report(tmp_path):
    done = _launch(_fake_bin(tmp_path, resolves_after=-1), ["true"])
    assert done.returncode == 0 and done.stdout.split()[0] == "ran"
    assert (tmp_path / "tries").read_text().strip() == str(jobs.TRAINJOB_DNS_WAIT_S)
    assert f"waited {jobs.TRAINJOB_DNS_WAIT_S}s" in done.stderr


# ---------------------------------------------------------------- an MPIJob launcher waits for SSH to its workers

def _ssh_bin(tmp_path: Path, hostfile: str, answers_after: dict[str, int]) -> dict[str, str]:
    """PATH with `sleep` (instant), `sed` reading `hostfile` in the operator's file's place, and `ssh` that
    refuses each host `answers_after[host]` times (-1: always), counting tries per host."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    (tmp_path / "hostfile").write_text(hostfile)
    cases = "".join(f'  {host}) limit={n};;\n' for host, n in answers_after.items())
    scripts = {
        "sleep": "#!/bin/sh\nexit 0\n",
        "sed": (f'#!/bin/sh\n[ "$2" = {jobs.HOSTFILE} ] || exit 9\n'
                f'exec {shutil.which("sed")} "$1" {tmp_path / "hostfile"}\n'),
        "ssh": ("#!/bin/sh\nfor a; do h=$prev; prev=$a; done\n"  # the host, then the remote command
                f'f={tmp_path}/tries-$h; n=$(cat "$f" 2>/dev/null || echo 0); echo $((n+1)) > "$f"\n'
                f'case "$h" in\n{cases}esac\n'
                '[ "$limit" -ge 0 ] && [ "$n" -ge "$limit" ] && exit 0\n'
                'echo "ssh: connect to host $h port 2222: Connection refused" >&2; exit 255\n'),
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def _mpijob_launch(env: dict[str, str], implementation: str = "OpenMPI") -> subprocess.CompletedProcess:
    """The launcher's command with `echo ran` for mpirun; its stderr without the first line, which must say
    who it ran as."""
    command = jobs.mpijob(jobs.MPIJob(name="j", implementation=implementation, command=["python3", "x.py"]))[
        "spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["args"]
    assert command[4] == "mpirun" and command[-2:] == ["python3", "x.py"]
    done = subprocess.run([*command[:4], "echo", "ran", *command[5:]], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    first, _, rest = done.stderr.partition("\n")
    assert first == f"{jobs.LAUNCHER_IDENTITY} {os.getuid()}, gid {os.getgid()}", done.stderr
    done.stderr = rest
    return done


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")
@pytest.mark.parametrize("implementation, hostfile", [
    ("OpenMPI", "j-worker-0.j.ns.svc slots=2\nj-worker-1.j.ns.svc slots=2\n"),
    ("Intel", "j-worker-0.j.ns.svc:2\nj-worker-1.j.ns.svc:2\n"),
])
def test_the_mpijob_launcher_runs_mpirun_once_every_worker_answers_over_ssh(tmp_path, implementation, hostfile):
    env = _ssh_bin(tmp_path, hostfile, {"j-worker-0.j.ns.svc": 2, "j-worker-1.j.ns.svc": 0})
    done = _mpijob_launch(env, implementation)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "ran" and done.stdout.split()[-2:] == ["python3", "x.py"]
    assert (tmp_path / "tries-j-worker-0.j.ns.svc").read_text().strip() == "3"
    assert (tmp_path / "tries-j-worker-1.j.ns.svc").read_text().strip() == "1"
    assert done.stderr == "mpiplat: waited 2s for the workers to answer over SSH\n"


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")
def test_the_mpijob_launcher_names_the_workers_that_never_answer_then_lets_mpirun_report(tmp_path):
    env = _ssh_bin(tmp_path, "a slots=1\nb slots=1\nc slots=1\n", {"a": -1, "b": 0, "c": -1})
    done = _mpijob_launch(env)
    assert done.returncode == 0 and done.stdout.split()[0] == "ran"
    assert (tmp_path / "tries-a").read_text().strip() == str(jobs.LAUNCHER_SSH_WAIT_S)
    assert (tmp_path / "tries-c").read_text().strip() == "1"  # the wait is spent: one try
    assert done.stderr.splitlines() == [
        "ssh: connect to host a port 2222: Connection refused", "mpiplat: worker a did not answer over SSH",
        "ssh: connect to host c port 2222: Connection refused", "mpiplat: worker c did not answer over SSH"]


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")
def test_the_mpijob_launcher_waits_at_most_its_seconds_when_each_try_is_slow(tmp_path, monkeypatch):
    """The cluster's DNS down: each name lookup times out, so each try takes seconds. The wait is bounded by
    LAUNCHER_SSH_WAIT_S seconds as well as tries: at 3, a slow worker gets two tries of 2 s, not three, and
    the next one try."""
    monkeypatch.setattr(jobs, "LAUNCHER_SSH_WAIT_S", 3)
    env = _ssh_bin(tmp_path, "a slots=1\nb slots=1\n", {"a": -1, "b": -1})
    (tmp_path / "bin" / "ssh").write_text(
        f'#!/bin/sh\nf={tmp_path}/tries; echo $(( $(cat "$f" 2>/dev/null || echo 0) + 1 )) > "$f"\n'
        f'{shutil.which("sleep")} 2\necho "ssh: Could not resolve hostname: Temporary failure in name resolution" >&2\n'
        'exit 255\n')
    done = _mpijob_launch(env)
    assert done.returncode == 0 and done.stdout.split()[0] == "ran"
    assert (tmp_path / "tries").read_text().strip() == "3"  # a twice (4 s > 3), then b once
    assert [line for line in done.stderr.splitlines() if line.startswith("mpiplat:")] == [
        "mpiplat: worker a did not answer over SSH", "mpiplat: worker b did not answer over SSH"]


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")
def test_the_mpijob_launcher_stops_waiting_when_ssh_cannot_succeed(tmp_path):
    """No passwd entry for the launcher's uid (an image that is not made for OpenShift's arbitrary UIDs): ssh fails
    the same way every time, so the launcher does not wait out LAUNCHER_SSH_WAIT_S, and fails without mpirun
    (whose Hydra would wait for its proxies for ever)."""
    env = _ssh_bin(tmp_path, "a slots=1\nb slots=1\n", {"a": -1, "b": -1})
    (tmp_path / "bin" / "ssh").write_text(
        f'#!/bin/sh\nf={tmp_path}/tries; echo $(( $(cat "$f" 2>/dev/null || echo 0) + 1 )) > "$f"\n'
        'echo "No user exists for uid 1000680000" >&2; exit 255\n')
    done = _mpijob_launch(env)
    assert done.returncode == 1 and "ran" not in done.stdout
    assert (tmp_path / "tries").read_text().strip() == "2"  # one try per worker
    assert done.stderr.splitlines() == [
        "No user exists for uid 1000680000", "mpiplat: worker a did not answer over SSH",
        "No user exists for uid 1000680000", "mpiplat: worker b did not answer over SSH",
        "mpiplat: ssh cannot log in, and waiting will not change that: mpirun not started"]


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("python3") is None, reason="needs bash and python3")
@pytest.mark.parametrize("refused", [False, True], ids=["connects", "refused"])
def test_the_mpijob_launcher_waits_until_every_worker_can_connect_back_to_it(tmp_path, monkeypatch, refused):
    """mpirun's daemons (Hydra's proxies) connect from the workers back to the launcher, a new pod whose address
    the workers' policies may not admit yet: each worker, over ssh, must reach a port the launcher listens on.
    The ssh here runs the remote command on this machine; `refused` points it at a port nobody listens on."""
    monkeypatch.setattr(jobs, "LAUNCHER_SSH_WAIT_S", 2)
    env = _ssh_bin(tmp_path, "a slots=1\nb slots=1\n", {})
    port = r"s#/dev/tcp/\([^/]*\)/[0-9]*#/dev/tcp/\1/1#" if refused else ""
    (tmp_path / "bin" / "ssh").write_text(
        f'#!/bin/sh\nfor a; do last=$a; done\necho x >> {tmp_path}/tries\n'
        f'exec {shutil.which("bash")} -c "$(printf %s "$last" | {shutil.which("sed")} \'{port}\')"\n')
    done = _mpijob_launch(env)
    assert done.returncode == 0 and done.stdout.split()[0] == "ran", done.stderr
    tries = len((tmp_path / "tries").read_text().split())
    if refused:
        assert tries == 3, done.stderr  # a twice (the wait spent), then b once
        assert [line for line in done.stderr.splitlines() if line.startswith("mpiplat: worker")] == [
            "mpiplat: worker a could not connect back to the launcher",
            "mpiplat: worker b could not connect back to the launcher"]
        assert "mpiplat: cannot connect back to the launcher at " in done.stderr
    else:
        assert tries == 2 and done.stderr == "", done.stderr
    # This launch's listeners only (their environment names tmp_path): a cluster's real launchers on this host
    # run the same listener.
    listeners = [pid for pid in subprocess.run(["pgrep", "-f", "s.listen.64"], capture_output=True,
                                               text=True).stdout.split() if _environ_names(pid, str(tmp_path))]
    assert listeners == [], "the launcher left its listener running"


def _environ_names(pid: str, text: str) -> bool:
    try:
        return text.encode() in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone, or not ours to read
        return False


# ---------------------------------------------------------------- against the pinned Trainer

@pytest.fixture(scope="module")
def trainer_root() -> Path:
    if shutil.which("go") is None:
        pytest.skip("needs the go command to fetch the pinned Trainer module")
    return module_dir(load()["trainer"])


def test_the_workload_runtime_patch_fits_the_pinned_trainjob_schema(trainer_root, runtime_pod_spec):
    crd = yaml.safe_load((trainer_root / "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml").read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == jobs.TRAINJOB_API.split("/")[1]]
    schema = version["schema"]["openAPIV3Schema"]
    manifest = _workload_trainjob(runtime_kind="TrainingRuntime", image="img:1")
    jsonschema.validate(manifest, schema)
    # Each runtime kind the builder allows is a pinned CRD; a TrainingRuntime lives in the TrainJob's namespace.
    for kind in jobs.RUNTIME_KINDS:
        runtime_crd = yaml.safe_load(
            (trainer_root / f"manifests/base/crds/trainer.kubeflow.org_{kind.lower()}s.yaml").read_text())
        assert runtime_crd["spec"]["names"]["kind"] == kind
        assert runtime_crd["spec"]["scope"] == ("Cluster" if kind.startswith("Cluster") else "Namespaced")
    node, patch = runtime_pod_spec(schema, manifest)
    assert set(patch) == {"volumes", "containers"}
    container = node["properties"]["containers"]["items"]
    assert set(patch["containers"][0]) <= set(container["properties"])
    # No image or command in a container patch: why the suite copies a runtime to run its own image.
    assert not {"image", "command"} & set(container["properties"])


def test_a_trainjob_env_is_the_trainers_env_list_and_fits_the_pinned_schema(trainer_root):
    crd = yaml.safe_load((trainer_root / "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml").read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == jobs.TRAINJOB_API.split("/")[1]]
    manifest = jobs.trainjob(jobs.TrainJob(name="env", env={"OMPI_MCA_orte_default_hostfile": "/tmp/h", "N": 2}))
    assert manifest["spec"]["trainer"]["env"] == [{"name": "OMPI_MCA_orte_default_hostfile", "value": "/tmp/h"},
                                                  {"name": "N", "value": "2"}]
    jsonschema.validate(manifest, version["schema"]["openAPIV3Schema"])
    assert "env" not in jobs.trainjob(jobs.TrainJob(name="plain"))["spec"]["trainer"]


@pytest.mark.parametrize("runtime_file", TRAINER_RUNTIMES)
def test_the_pinned_mpi_runtimes_have_the_jobs_and_container_the_trainjob_patches(trainer_root, runtime_file):
    """Trainer's webhook rejects a patch of a job or container the runtime lacks; trainer.image and command
    reach the `node` container of the job labelled trainjob-ancestor-step=trainer, the launcher."""
    runtime = yaml.safe_load((trainer_root / "manifests/base/runtimes" / runtime_file).read_text())
    assert runtime["spec"]["mlPolicy"]["mpi"]["runLauncherAsNode"] is True
    assert runtime["spec"]["mlPolicy"]["mpi"]["mpiImplementation"] == "OpenMPI"
    replicated = {j["name"]: j for j in runtime["spec"]["template"]["spec"]["replicatedJobs"]}
    assert set(jobs.TRAINER_MPI_JOBS) <= set(replicated)
    for name in jobs.TRAINER_MPI_JOBS:
        assert jobs.TRAINER_CONTAINER in {c["name"] for c in replicated[name]["template"]["spec"]["template"]["spec"]
                                          ["containers"]}
    ancestors = {name for name, j in replicated.items()
                 if (j["template"].get("metadata") or {}).get("labels", {}).get(
                     "trainer.kubeflow.org/trainjob-ancestor-step") == "trainer"}
    assert ancestors == {"launcher"}


# ---------------------------------------------------------------- the MPIJob launcher's restart policy

def test_a_launcher_may_keep_its_failed_pod():
    """restartPolicy Never keeps a failed launcher pod and its log (OnFailure, the operator's default: the Job
    controller deletes it at the backoff limit); it is the builder's default, and None leaves it to the operator."""
    def launcher(**kw) -> dict:
        return jobs.mpijob(jobs.MPIJob(name="nr", **kw))["spec"]["mpiReplicaSpecs"]["Launcher"]

    assert launcher()["restartPolicy"] == "Never"
    assert "restartPolicy" not in launcher(launcher_restart_policy=None)
    # On the replica spec, where mpi-operator reads it (it overrides the pod template's).
    assert launcher(launcher_restart_policy="Never")["restartPolicy"] == "Never"
    assert "restartPolicy" not in launcher(launcher_restart_policy="Never")["template"]["spec"]
    worker = jobs.mpijob(jobs.MPIJob(name="nr", launcher_restart_policy="Never"))["spec"]["mpiReplicaSpecs"]
    assert "restartPolicy" not in worker["Worker"]
    with pytest.raises(jobs.JobSpecError, match=r"launcher_restart_policy is 'Always'; allowed: Never, OnFailure"):
        launcher(launcher_restart_policy="Always")


def test_the_launcher_creation_policy_is_the_builders_choice_with_wait_for_workers_ready_by_default():
    """WaitForWorkersReady by default: mpi-operator creates the launcher only once every worker is Ready (the
    workers' readinessProbe is their sshd), so mpirun never races a worker that is not up."""
    def policy(**kw) -> str:
        return jobs.mpijob(jobs.MPIJob(name="lc", **kw))["spec"]["launcherCreationPolicy"]

    assert policy() == "WaitForWorkersReady"
    assert policy(launcher_creation_policy="AtStartup") == "AtStartup"
    worker = jobs.mpijob(jobs.MPIJob(name="lc"))["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert worker["containers"][0]["readinessProbe"]["tcpSocket"]["port"] == jobs.SSH_PORT
    with pytest.raises(jobs.JobSpecError, match=r"launcher_creation_policy is 'Later'; allowed: WaitForWorkersReady, "
                                                r"AtStartup"):
        policy(launcher_creation_policy="Later")


# ---------------------------------------------------------------- OpenShift's restricted-v2, Pod Security restricted

RESTRICTED = {"runAsNonRoot": True, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
              "seccompProfile": {"type": "RuntimeDefault"}}


def _pod_specs(manifest: dict) -> dict[str, dict]:
    return {role: spec["template"]["spec"] for role, spec in manifest["spec"]["mpiReplicaSpecs"].items()}


@pytest.mark.parametrize("implementation", jobs.IMPLEMENTATIONS)
@pytest.mark.parametrize("extra", [{}, {"workload": "allreduce", "pvc": "data"}], ids=["plain", "workload-pvc"])
def test_the_builders_pods_meet_pod_security_restricted_and_take_the_clusters_uid(implementation, extra):
    """Every container sets what Pod Security `restricted` asks, and no runAsUser or fsGroup: the cluster's
    apply (OpenShift: the namespace's first UID and group). Programs go in args, so the image's entrypoint
    (which gives an arbitrary UID its user) runs first."""
    for role, pod in _pod_specs(jobs.mpijob(jobs.MPIJob(name="j", implementation=implementation, **extra))).items():
        assert "fsGroup" not in (pod.get("securityContext") or {}), role
        [container] = pod["containers"]
        assert container["securityContext"] == RESTRICTED, role
        assert "command" not in container and container["args"], role


def test_a_chosen_uid_is_kept_and_root_is_only_by_choice():
    chosen = jobs.mpijob(jobs.MPIJob(name="j", run_as_user=1000680001, pvc="data"))
    for pod in _pod_specs(chosen).values():
        assert pod["containers"][0]["securityContext"] == {"runAsUser": 1000680001, **RESTRICTED}
        assert pod["securityContext"] == {"fsGroup": 1000680001}
    root = _pod_specs(jobs.mpijob(jobs.MPIJob(name="j", run_as_user=0)))["Worker"]["containers"][0]
    assert root["securityContext"] == {"runAsUser": 0, "runAsNonRoot": False}
    assert root["args"] == ["/usr/sbin/sshd", "-De", "-p", "2222"]
    with pytest.raises(jobs.JobSpecError, match=r"run_as_user is -1; allowed: a uid >= 0, or None"):
        jobs.mpijob(jobs.MPIJob(name="j", run_as_user=-1))


@pytest.mark.parametrize("runtime_file", TRAINER_RUNTIMES)
def test_the_pinned_mpi_runtimes_are_made_restricted(trainer_root, runtime_file):
    """Trainer's runtimes fix uid 1000 (runAsUser, runAsGroup, fsGroup), which restricted-v2 refuses outside the
    namespace's range, and set nothing of what Pod Security `restricted` asks; restricted_runtime makes every pod
    take the cluster's UID with the restricted fields, and its command runs after the image's entrypoint."""
    upstream = yaml.safe_load((trainer_root / "manifests/base/runtimes" / runtime_file).read_text())
    pods = [j["template"]["spec"]["template"]["spec"] for j in upstream["spec"]["template"]["spec"]["replicatedJobs"]]
    assert any(c.get("securityContext", {}).get("runAsUser") for p in pods for c in p["containers"])
    made = jobs.restricted_runtime(upstream)
    assert made["spec"]["mlPolicy"] == upstream["spec"]["mlPolicy"]
    for rjob, before in zip(made["spec"]["template"]["spec"]["replicatedJobs"], pods, strict=True):
        pod = rjob["template"]["spec"]["template"]["spec"]
        assert not {"runAsUser", "runAsGroup", "fsGroup"} & set(pod.get("securityContext") or {}), rjob["name"]
        for container, was in zip(pod["containers"], before["containers"], strict=True):
            assert container["securityContext"] == RESTRICTED, rjob["name"]
            assert "command" not in container
            assert container.get("args", []) == [*was.get("command", []), *was.get("args", [])]
