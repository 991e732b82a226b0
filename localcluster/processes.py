"""The upstream controllers, kube-state-metrics and Prometheus as host processes: which ports they use,
starting, stopping, health.

Each controller's pid is in <state>/pids/<name>.pid and its output in <state>/logs/<name>.log. The default
cluster's listen on 127.0.0.1. Another cluster's (MPIPLAT_CLUSTER) run in its real node's network namespace
and listen on that namespace's address (`address()`), so each cluster has the same ports, its own; there they
reach the API server at its advertised address.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from mpiplat.localcluster import build
from mpiplat.localcluster.state import (
    ClusterError,
    all_state_dirs,
    control_plane_ports,
    instance,
    kubeconfig_path,
    log_file,
    network,
    node_ns_pid_file,
    state_dir,
)

LOOPBACK = "127.0.0.1"
SUPERVISE = Path(__file__).with_name("supervise.py")
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")  # hard-coded in kueue's main.go
OURS = "mpiplat-localcluster"  # marks a certificate there as written by a local cluster


@dataclass(frozen=True)
class Controller:
    """One upstream controller run as a host process, listening on `address()` only."""

    name: str  # also the binary's name
    component: str  # entry in versions.yml
    health_port: int
    health_path: str = "/readyz"
    webhook_port: int | None = None  # serves https://ADDRESS:PORT when set
    metrics_port: int | None = None

    @property
    def ports(self) -> tuple[int, ...]:
        """Every port it listens on."""
        return tuple(p for p in (self.webhook_port, self.metrics_port, self.health_port) if p)

    @property
    def health_url(self) -> str:
        return f"http://{address()}:{self.health_port}{self.health_path}"

    def argv(self, kubeconfig: Path, confdir: Path) -> list[str]:
        if self.name == "prometheus":  # Debian's package, as promtool
            return [debian_prometheus(), f"--config.file={confdir / 'config.yaml'}",
                    f"--storage.tsdb.path={confdir / 'data'}", "--storage.tsdb.retention.time=1d",
                    f"--web.listen-address={address()}:{self.health_port}", "--web.enable-lifecycle"]
        if self.name == "prometheus-rules":  # ours: the Prometheus Operator's part, PrometheusRules to rule files
            return [sys.executable, "-m", "mpiplat.localcluster.rulesync", f"--kubeconfig={kubeconfig}",
                    f"--rules-dir={prometheus_rules_dir()}", f"--prometheus={prometheus_url()}",
                    f"--listen={address()}:{self.health_port}"]
        exe = str(build.binary(self.name))
        if self.name == "kube-state-metrics":  # health: its own telemetry port
            return [exe, f"--kubeconfig={kubeconfig}", f"--host={address()}", f"--port={self.metrics_port}",
                    f"--telemetry-host={address()}", f"--telemetry-port={self.health_port}",
                    f"--resources={','.join(KUBE_STATE_RESOURCES)}"]
        if self.name == "mpi-operator":  # flags only; health is fixed upstream on :8080
            return [exe, f"--kubeConfig={kubeconfig}", "--lock-namespace=mpi-operator",
                    f"--monitoring-port={self.metrics_port}", "--threadiness=8", "--kube-api-qps=500",
                    "--kube-api-burst=1000", "--controller-queue-rate-limit=100",
                    "--controller-queue-burst=1000", "-alsologtostderr"]
        extra = ["--leader-elect=false"] if self.name == "jobset" else []
        return [exe, f"--config={confdir / 'config.yaml'}", f"--kubeconfig={kubeconfig}", *extra]


# Every port we choose lies below Linux's ephemeral range (32768-60999), where any outgoing
# connection could hold it when a controller starts (8080 is mpi-operator's own, fixed upstream).
CONTROLLERS = (
    Controller("mpi-operator", "mpi-operator", health_port=8080, health_path="/healthz", metrics_port=31171),
    Controller("kueue", "kueue", health_port=31174, webhook_port=31172, metrics_port=31173),
    Controller("jobset", "jobset", health_port=31177, webhook_port=31175, metrics_port=31176),
    Controller("trainer-controller-manager", "trainer", health_port=31179, webhook_port=31178),
    Controller("kube-state-metrics", "kube-state-metrics", health_port=31187, health_path="/metrics",
               metrics_port=31186),
    Controller("prometheus", "prometheus", health_port=31188, health_path="/-/ready"),
    Controller("prometheus-rules", "prometheus-operator", health_port=31189, health_path="/healthz"),
)
# What kube-state-metrics exports: the objects the monitoring role's dashboard and alerts query.
KUBE_STATE_RESOURCES = ("jobs", "namespaces", "nodes", "pods")


def debian_prometheus() -> str:
    exe = shutil.which("prometheus")
    if not exe:
        raise ClusterError("prometheus not found: the local cluster runs Debian's (`apt-get install prometheus`, "
                           "which also gives promtool)")
    return exe


def address() -> str:
    """Where this cluster's controllers listen: 127.0.0.1, or the address of its node's network namespace."""
    net = network()
    return net.peer_ip if net.netns else LOOPBACK


def prometheus_url() -> str:
    """This cluster's Prometheus (conformance/settings/local.yml names the default cluster's)."""
    return f"http://{address()}:{controller('prometheus').health_port}"


def prometheus_rules_dir() -> Path:
    """Where the local Prometheus reads its rule files from (rulesync writes them)."""
    return conf_dir(controller("prometheus")) / "rules"


def node_ns_pid() -> int:
    """The pid of the process holding the namespaces of this cluster's node (netns only)."""
    pid = running_pid(node_ns_pid_file())
    if not pid:
        raise ClusterError(f"the namespaces of the real node of cluster {instance()} are gone: run "
                           "`mpiplat cluster down`, then `mpiplat cluster up` again")
    return pid


# The Go garbage collector of every daemon of a local cluster (control plane, node, controllers) runs at a
# quarter of its default frequency: the machine is CPU-bound and has memory to spare (GC was an eighth of the
# API server's CPU under CI's load; its heap goal grew from about 0.4 to 1.5 GB). GOMEMLIMIT caps each heap.
# A cluster is about 15 Go daemons: each runs Go code on a quarter of the cores (at least one). With all of them
# (2 cores), their schedulers' spinning and wake-ups cost a fifth of the CPU of 150 pods' churn, for the same
# wall time (docs/localcluster.md "At scale").
GO_RUNTIME = {"GOGC": "400", "GOMEMLIMIT": "3GiB", "GOMAXPROCS": str(max(1, (os.cpu_count() or 1) // 4))}


def daemon_env(**extra: str) -> dict[str, str]:
    """The environment a local cluster's daemon starts with: ours, GO_RUNTIME and `extra`."""
    return {**os.environ, **GO_RUNTIME, **extra}


def in_node_net(*options: str) -> list[str]:
    """argv prefix that runs a command in the network namespace of this cluster's node and controllers (with
    nsenter's `options`, e.g. its mount namespace too); nothing for the host's."""
    return ["nsenter", f"--target={node_ns_pid()}", "--net", *options, "--"] if network().netns else []


def controllers_kubeconfig() -> Path:
    """The kubeconfig the controllers use: the cluster's own, or, in a node's network namespace, a copy
    that reaches the API server at its advertised address."""
    net = network()
    if not net.netns:
        return kubeconfig_path()
    conf = yaml.safe_load(kubeconfig_path().read_text())
    for entry in conf.get("clusters", []):
        entry["cluster"]["server"] = f"https://{net.api_ip}:{control_plane_ports()['kube-apiserver']}"
    path, text = state_dir() / "controllers.kubeconfig", yaml.safe_dump(conf)
    if not path.is_file() or path.read_text() != text:  # a running controller may read it now: replace whole
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.chmod(0o600)
        tmp.replace(path)
    return path


def all_ports() -> list[int]:
    """Every host port this instance listens on (another's controllers listen in their own namespace)."""
    controllers = set() if network().netns else {p for c in CONTROLLERS for p in c.ports}
    return sorted(set(control_plane_ports().values()) | controllers)


def controller(name: str) -> Controller:
    """The controller of CONTROLLERS called `name`."""
    return next(c for c in CONTROLLERS if c.name == name)


def conf_dir(ctl: Controller) -> Path:
    """Where start() writes a controller's config.yaml, and its other files go."""
    return state_dir() / ctl.name


def pid_file(ctl: Controller) -> Path:
    """The pid of its supervise.py, whose process group the controller is in."""
    return state_dir() / "pids" / f"{ctl.name}.pid"


def restarts_file(ctl: Controller) -> Path:
    return state_dir() / "pids" / f"{ctl.name}.restarts"


def restarts(ctl: Controller) -> int:
    """How often its supervisor restarted it since it was started."""
    try:
        return int(restarts_file(ctl).read_text())
    except (OSError, ValueError):
        return 0


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def running_pid(path: Path) -> int | None:
    """The pid in a pid file if that process is alive."""
    pid = read_pid(path)
    return pid if pid and alive(pid) else None


def http_ok(url: str, timeout: float = 2.0) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=ctx) as resp:
            return resp.status == 200
    except (OSError, ValueError):
        return False


def port_open(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket() as s:
        s.settimeout(0.3)
        return s.connect_ex((host, port)) == 0


def start(ctl: Controller, pki: Path, config: dict | None) -> None:
    """Start a controller unless it runs; `config` is written to <state>/<name>/config.yaml."""
    if running_pid(pid_file(ctl)):
        return
    busy = [p for p in ctl.ports if port_open(p, address())]
    if busy:
        raise ClusterError(f"cannot start {ctl.name}: port(s) {busy} already in use by another process; "
                           "free them (`ss -ltnp` shows which) or run `mpiplat cluster down`")
    confdir = conf_dir(ctl)
    confdir.mkdir(parents=True, exist_ok=True)
    kubeconfig = controllers_kubeconfig()
    env = daemon_env(KUBECONFIG=str(kubeconfig))
    if config is not None:
        (confdir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    if ctl.name == "trainer-controller-manager":
        # trainer has no certDir setting: it serves $TMPDIR/k8s-webhook-server/serving-certs.
        certdir = confdir / "tmp" / "k8s-webhook-server" / "serving-certs"
        certdir.mkdir(parents=True, exist_ok=True)
        for f in ("tls.crt", "tls.key"):
            shutil.copy2(pki / f, certdir / f)
        env["TMPDIR"] = str(confdir / "tmp")
    if ctl.name == "kueue":
        install_kueue_metrics_certs(pki)
    log = log_file(ctl.name)
    log.parent.mkdir(parents=True, exist_ok=True)
    pid_file(ctl).parent.mkdir(parents=True, exist_ok=True)
    restarts_file(ctl).unlink(missing_ok=True)
    # Under supervise.py, which restarts it when it exits, as a real cluster restarts a controller's pod.
    supervised = [sys.executable, "-I", "-S", str(SUPERVISE), "--restarts", str(restarts_file(ctl)),
                  "--health", ctl.health_url, "--"]
    with open(log, "ab") as out:
        proc = subprocess.Popen([*supervised, *in_node_net(), *ctl.argv(kubeconfig, confdir)], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=confdir, env=env,
                                start_new_session=True)
    pid_file(ctl).write_text(str(proc.pid))


def healthy(ctl: Controller) -> bool:
    """Whether its health endpoint answers 200; a ClusterError if the process has exited."""
    if not running_pid(pid_file(ctl)):
        log = log_file(ctl.name)
        raise ClusterError(f"{ctl.name} exited while starting: see {log}, fix the cause, then run "
                           f"`mpiplat cluster up` again\nlast lines of {log}:\n{tail(log)}")
    return http_ok(ctl.health_url)


def stop_pid(pid: int, grace: float = 10.0) -> None:
    """SIGTERM the process group, SIGKILL it after `grace` seconds."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    except PermissionError:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.1)
    if alive(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:  # reap if it is our child
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def stop(ctl: Controller) -> bool:
    """Stop a controller if its pid file names one; whether there was one."""
    pid = read_pid(pid_file(ctl))
    if pid:
        stop_pid(pid)
    pid_file(ctl).unlink(missing_ok=True)
    restarts_file(ctl).unlink(missing_ok=True)
    return bool(pid)


def tail(path: Path, n: int = 15) -> str:
    try:
        return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-n:])
    except OSError:
        return ""


def rss_mib(pid: int) -> int:
    """Resident memory of a process and the others of its process group (a supervisor's controller), MiB."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if entry != str(pid) and int(Path(f"/proc/{entry}/stat").read_text().rsplit(") ", 1)[1].split()[2]) != pid:
                continue
            for line in Path(f"/proc/{entry}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total // 1024


# ---------------------------------------------------------------- Kueue's metrics certificate

def install_kueue_metrics_certs(pki: Path) -> None:
    """Kueue reads its metrics certificate from a fixed path: put ours there unless one is (another local
    cluster's does as well: Prometheus does not verify it)."""
    if (KUEUE_METRICS_CERTS / "tls.crt").exists():
        return
    try:
        KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
        for f in ("tls.crt", "tls.key"):
            shutil.copy2(pki / f, KUEUE_METRICS_CERTS / f)
        (KUEUE_METRICS_CERTS / OURS).write_text("written by mpiplat's local cluster; its last `down` removes it\n")
    except PermissionError as err:
        raise ClusterError(f"cannot write {KUEUE_METRICS_CERTS} (Kueue reads its metrics certificate from that "
                           "fixed path): create it writable by you, or run `mpiplat cluster up` as root") from err


def remove_kueue_metrics_certs() -> None:
    """Remove the metrics certificate if a local cluster put it there (whichever) and no other cluster's Kueue
    runs."""
    others = [d for d in all_state_dirs() if d != state_dir()]
    if (KUEUE_METRICS_CERTS / OURS).is_file() and not any(running_pid(d / "pids" / "kueue.pid") for d in others):
        shutil.rmtree(KUEUE_METRICS_CERTS, ignore_errors=True)
