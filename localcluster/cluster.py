"""The local reference cluster: kwokctl (binary runtime) plus the upstream controllers on the host.

State lives outside the repo in $MPIPLAT_STATE (default ~/.local/state/mpiplat):
  kwok/clusters/mpiplat/   kwokctl's workdir (kubeconfig.yaml, pki, logs, pids)
  pki/                     the local webhook CA and serving certificate
  <controller>/            each controller's config; logs/<controller>.log; pids/<controller>.pid

$MPIPLAT_CLUSTER names another, bare cluster beside it (state in $MPIPLAT_STATE-<name>, its own
control-plane ports), e.g. `helm` for the molecule scenario that installs the upstream charts.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
import zlib
from dataclasses import dataclass
from pathlib import Path

import yaml

from mpiplat.errors import MpiplatError
from mpiplat.localcluster import build, certs, nodes
from mpiplat.versions import Component, VersionsError, load, module_dir

NAME = "mpiplat"
STAGES = Path(__file__).with_name("stages.yaml")
UPSTREAM_STAGES = ("kustomize/stage/node/fast/node-initialize.yaml",
                   "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
                   "kustomize/stage/pod/fast/pod-ready.yaml",
                   "kustomize/stage/pod/fast/pod-delete.yaml")
DEFAULT_INSTANCE = "mpiplat"  # the full cluster; other instances are bare
# Control-plane ports of the default instance, chosen by us so that `down` can prove them free.
# Another instance shifts them all down by a multiple of 10 derived from its name.
CONTROL_PLANE_PORTS = {"kube-apiserver": 32765, "etcd": 32764, "kube-controller-manager": 32763,
                       "kube-scheduler": 32762, "kwok-controller": 32761, "etcd-peer": 32766}
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")  # hard-coded in kueue's main.go
NAMESPACES = ("mpi-operator", "kueue-system", "kubeflow-system")


class ClusterError(MpiplatError, RuntimeError):
    """The cluster could not be brought to the asked state; the message says what to do."""


def instance() -> str:
    """Which local cluster: $MPIPLAT_CLUSTER, default `mpiplat` (the full cluster)."""
    name = os.environ.get("MPIPLAT_CLUSTER", DEFAULT_INSTANCE)
    if not re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?", name):
        raise ClusterError(f"MPIPLAT_CLUSTER={name!r} is not allowed: use up to 32 lowercase letters, "
                           "digits and '-', starting and ending with a letter or digit")
    return name


def control_plane_ports() -> dict[str, int]:
    name = instance()
    if name == DEFAULT_INSTANCE:
        return dict(CONTROL_PLANE_PORTS)
    shift = 10 * (1 + zlib.crc32(name.encode()) % 150)  # 31261-32756: clear of the controllers' ports
    return {k: v - shift for k, v in CONTROL_PLANE_PORTS.items()}


def state_dir() -> Path:
    default = Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "mpiplat"
    base = Path(os.environ.get("MPIPLAT_STATE", default))
    name = instance()
    return base if name == DEFAULT_INSTANCE else base.with_name(f"{base.name}-{name}")


def kwok_workdir() -> Path:
    return state_dir() / "kwok"


def kubeconfig_path() -> Path:
    return kwok_workdir() / "clusters" / NAME / "kubeconfig.yaml"


def _say(msg: str) -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------- host-run controllers

@dataclass(frozen=True)
class Controller:
    """One upstream controller run as a host process."""

    name: str  # also the binary's name
    component: str  # entry in versions.yml
    health_url: str
    webhook_port: int | None = None  # serves https://127.0.0.1:PORT when set
    ports: tuple[int, ...] = ()  # every port it listens on

    def argv(self, kubeconfig: Path, confdir: Path) -> list[str]:
        exe = str(build.binary(self.name))
        if self.name == "mpi-operator":
            return [exe, f"--kubeConfig={kubeconfig}", "--lock-namespace=mpi-operator",
                    "--monitoring-port=31171", "--threadiness=4", "--kube-api-qps=100",
                    "--kube-api-burst=200", "--controller-queue-rate-limit=100",
                    "--controller-queue-burst=1000", "-alsologtostderr"]
        extra = ["--leader-elect=false"] if self.name == "jobset" else []
        return [exe, f"--config={confdir / 'config.yaml'}", f"--kubeconfig={kubeconfig}", *extra]


# Every port we choose lies below Linux's ephemeral range (32768-60999), where any outgoing
# connection could hold it when a controller starts.
CONTROLLERS = (
    Controller("mpi-operator", "mpi-operator", "http://127.0.0.1:8080/healthz", ports=(8080, 31171)),
    Controller("kueue", "kueue", "http://127.0.0.1:31174/readyz", 31172, (31172, 31173, 31174)),
    Controller("jobset", "jobset", "http://127.0.0.1:31177/readyz", 31175, (31175, 31176, 31177)),
    Controller("trainer-controller-manager", "trainer", "http://127.0.0.1:31179/readyz", 31178,
               (31178, 31179)),
)


def _controller_config(ctl: Controller, pki: Path) -> dict | None:
    """The config file each controller reads (mpi-operator takes flags only)."""
    if ctl.name == "kueue":
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": "kueue-system",
            "health": {"healthProbeBindAddress": "127.0.0.1:31174"},
            "metrics": {"bindAddress": "127.0.0.1:31173"},
            "webhook": {"host": "127.0.0.1", "port": ctl.webhook_port, "certDir": str(pki)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "clientConnection": {"qps": 100, "burst": 200},
            "manageJobsWithoutQueueName": False,
            "managedJobsNamespaceSelector": {"matchExpressions": [{
                "key": "kubernetes.io/metadata.name", "operator": "NotIn",
                "values": ["kube-system", "kueue-system"]}]},
            "waitForPodsReady": {"timeout": "30s", "blockAdmission": False,
                                 "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 5,
                                                       "backoffMaxSeconds": 60}},
            "integrations": {"frameworks": ["kubeflow.org/mpijob", "trainer.kubeflow.org/trainjob"]},
            "featureGates": {"VisibilityOnDemand": False},
        }
    if ctl.name == "jobset":
        return {
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
            "kind": "Configuration",
            "health": {"healthProbeBindAddress": "127.0.0.1:31177"},
            "metrics": {"bindAddress": "127.0.0.1:31176"},
            "webhook": {"host": "127.0.0.1", "port": ctl.webhook_port, "certDir": str(pki)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "clientConnection": {"qps": 100, "burst": 200},
        }
    if ctl.name == "trainer-controller-manager":
        return {
            "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
            "kind": "Configuration",
            "webhook": {"host": "127.0.0.1", "port": ctl.webhook_port},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": "127.0.0.1:31179"},
            "certManagement": {"enable": False},
        }
    return None


def _pid_file(ctl: Controller) -> Path:
    return state_dir() / "pids" / f"{ctl.name}.pid"


def log_file(name: str) -> Path:
    return state_dir() / "logs" / f"{name}.log"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _http_ok(url: str, timeout: float = 2.0) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=ctx) as resp:
            return resp.status == 200
    except (OSError, ValueError):
        return False


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.3)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _start_controller(ctl: Controller, kubeconfig: Path, pki: Path) -> None:
    pid = _read_pid(_pid_file(ctl))
    if pid and _alive(pid):
        return
    busy = [p for p in ctl.ports if _port_open(p)]
    if busy:
        raise ClusterError(f"cannot start {ctl.name}: port(s) {busy} already in use by another process; "
                           "free them or run `mpiplat cluster down`")
    confdir = state_dir() / ctl.name
    confdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, KUBECONFIG=str(kubeconfig))
    conf = _controller_config(ctl, pki)
    if conf is not None:
        (confdir / "config.yaml").write_text(yaml.safe_dump(conf, sort_keys=False))
    if ctl.name == "trainer-controller-manager":
        # trainer has no certDir setting: it serves $TMPDIR/k8s-webhook-server/serving-certs.
        certdir = confdir / "tmp" / "k8s-webhook-server" / "serving-certs"
        certdir.mkdir(parents=True, exist_ok=True)
        for f in ("tls.crt", "tls.key"):
            shutil.copy2(pki / f, certdir / f)
        env["TMPDIR"] = str(confdir / "tmp")
    log = log_file(ctl.name)
    log.parent.mkdir(parents=True, exist_ok=True)
    _pid_file(ctl).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(ctl.argv(kubeconfig, confdir), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=confdir, env=env, start_new_session=True)
    _pid_file(ctl).write_text(str(proc.pid))


def _stop_pid(pid: int, grace: float = 10.0) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    except PermissionError:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    if _alive(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:  # reap if it is our child
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


# ---------------------------------------------------------------- kubectl and upstream files

def kubectl(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [str(build.binary("kubectl")), f"--kubeconfig={kubeconfig_path()}", *args]
    proc = subprocess.run(cmd, input=input, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise ClusterError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def apply(objs: list[dict]) -> None:
    """Server-side apply of objects (field manager mpiplat-localcluster)."""
    if objs:
        kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=mpiplat-localcluster",
                "-f", "-", input=yaml.safe_dump_all(objs))


def _docs(paths: list[Path]) -> list[dict]:
    objs = []
    for p in paths:
        objs += [d for d in yaml.safe_load_all(p.read_text()) if d]
    return objs


def _files(comp: Component, key: str) -> list[Path]:
    pats = comp.extra.get(key) or []
    pats = [pats] if isinstance(pats, str) else pats
    if not pats:
        return []
    try:
        root = module_dir(comp)
    except VersionsError as err:
        raise ClusterError(str(err)) from err
    found = [Path(f) for pat in pats for f in sorted(glob.glob(str(root / pat)))]
    if pats and not found:
        raise ClusterError(f"{comp.name} {comp.version}: no files match {pats} in {root}")
    return found


def crds(comps: dict[str, Component]) -> list[dict]:
    docs = _docs([f for c in comps.values() for f in _files(c, "crds")])
    return [d for d in docs if d.get("kind") == "CustomResourceDefinition"]


# Webhooks served for the integrations we enable; kueue's pod/deployment/statefulset and other
# framework webhooks are left out (they fail closed and we do not run those integrations).
def _keep_webhook(component: str, path: str) -> bool:
    if component == "kueue":
        return "kueue-x-k8s-io" in path or path.endswith(("-mpijob", "-trainjob"))
    if component == "jobset":
        return "jobset-x-k8s-io" in path
    return True


def webhook_configs(comps: dict[str, Component], ca: bytes) -> list[dict]:
    """Upstream webhook configurations rewritten to url-based clientConfig on 127.0.0.1."""
    import base64

    bundle = base64.b64encode(ca).decode()
    out = []
    for ctl in CONTROLLERS:
        comp = comps[ctl.component]
        if not ctl.webhook_port:
            continue
        for doc in _docs(_files(comp, "webhooks")):
            hooks = []
            for hook in doc.get("webhooks") or []:
                path = hook["clientConfig"]["service"]["path"]
                if not _keep_webhook(comp.name, path):
                    continue
                hook["clientConfig"] = {"url": f"https://127.0.0.1:{ctl.webhook_port}{path}",
                                        "caBundle": bundle}
                hook["timeoutSeconds"] = 10
                hooks.append(hook)
            if hooks:
                doc["metadata"] = {"name": f"{comp.name}-{doc['metadata']['name']}",
                                   "labels": {"app.kubernetes.io/managed-by": "mpiplat-localcluster"}}
                doc["webhooks"] = hooks
                out.append(doc)
    return out


def training_runtimes(comps: dict[str, Component]) -> list[dict]:
    comp = comps["trainer"]
    tag = comp.version
    objs = _docs(_files(comp, "runtimes"))
    for obj in objs:
        for rjob in obj["spec"]["template"]["spec"]["replicatedJobs"]:
            for c in rjob["template"]["spec"]["template"]["spec"].get("containers", []):
                if ":" not in c["image"].rsplit("/", 1)[-1]:
                    c["image"] = f"{c['image']}:{tag}"
    return objs


# ---------------------------------------------------------------- up / down / status

def _kwokctl(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    bins = load()
    env = dict(os.environ, KWOK_WORKDIR=str(kwok_workdir()),
               KWOK_KUBECTL_BINARY=str(build.binary("kubectl", bins)),
               PATH=f"{build.binary('kubectl', bins).parent}:{os.environ.get('PATH', '')}")
    proc = subprocess.run([str(build.binary("kwokctl", bins)), *args], capture_output=True, text=True,
                          env=env, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise ClusterError(f"kwokctl {' '.join(args)} failed (exit {proc.returncode}):\n"
                           f"{proc.stdout}{proc.stderr}\nlogs: {kwok_workdir() / 'clusters' / NAME / 'logs'}")
    return proc


def _apiserver_ready() -> bool:
    if not kubeconfig_path().exists():
        return False
    return kubectl("get", "--raw", "/readyz", check=False).returncode == 0


def _kwok_config(comps: dict[str, Component]) -> Path:
    """A kwokctl config: local binaries, loopback binding, and our Stages."""
    k8s = comps["kubernetes"]
    ports = control_plane_ports()
    options = {
        "runtime": "binary",
        "kubeApiserverPort": ports["kube-apiserver"],
        "etcdPort": ports["etcd"],
        "etcdPeerPort": ports["etcd-peer"],
        "kubeControllerManagerPort": ports["kube-controller-manager"],
        "kubeSchedulerPort": ports["kube-scheduler"],
        "kwokControllerPort": ports["kwok-controller"],
        "kubeVersion": k8s.version.lstrip("v"),
        "bindAddress": "127.0.0.1",
        "kubeApiserverBinary": str(build.binary("kube-apiserver", comps)),
        "kubeControllerManagerBinary": str(build.binary("kube-controller-manager", comps)),
        "kubeSchedulerBinary": str(build.binary("kube-scheduler", comps)),
        "kubectlBinary": str(build.binary("kubectl", comps)),
        "etcdBinary": str(build.binary("etcd", comps)),
        "kwokControllerBinary": str(build.binary("kwok", comps)),
    }
    conf = {"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokctlConfiguration",
            "options": options}
    path = state_dir() / "kwokctl.yaml"
    kwok_dir = module_dir(comps["kwok"])
    docs = [conf] + _docs([kwok_dir / s for s in UPSTREAM_STAGES]) + _docs([STAGES])
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


def _wait(what: str, ok, timeout: float, hint: str) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise ClusterError(f"{what} not ready after {timeout:.0f}s; {hint}")
        time.sleep(0.25)


def up(node_pools: str | None = None, bare: bool = False) -> None:
    """Start (or reuse) the cluster. bare: control plane and nodes only, no upstream CRDs or
    controllers, for installing the upstream components with Helm (molecule scenario `helm`)."""
    start = time.monotonic()
    if not bare and instance() != DEFAULT_INSTANCE:
        raise ClusterError(f"MPIPLAT_CLUSTER={instance()}: only the default cluster ({DEFAULT_INSTANCE}) runs the "
                           "host controllers (their ports are fixed); start this one with --bare")
    comps = load()
    build.build()
    state_dir().mkdir(parents=True, exist_ok=True)
    pools = nodes.load(Path(node_pools)) if node_pools else nodes.load()

    if _apiserver_ready():
        _say("control plane: already running")
    else:
        cluster_dir = kwok_workdir() / "clusters" / NAME
        if cluster_dir.exists():
            _say("control plane: restarting existing cluster")
            _kwokctl("start", "cluster", f"--name={NAME}")
        else:
            _say("control plane: creating with kwokctl (binary runtime)")
            busy = [p for p in control_plane_ports().values() if _port_open(p)]
            if busy:
                raise ClusterError(f"cluster {instance()}: control-plane ports {busy} are in use by something else")
            _kwokctl("create", "cluster", f"--name={NAME}", f"--config={_kwok_config(comps)}",
                     f"--kubeconfig={state_dir() / 'kwokctl-contexts.yaml'}",
                     "--disable-qps-limits", "--wait=90s")
        _wait("kube-apiserver", _apiserver_ready, 90,
              f"see {kwok_workdir() / 'clusters' / NAME / 'logs'}")
    _say(f"  kube-apiserver ready ({time.monotonic() - start:.1f}s)")

    apply(nodes.manifests(pools))
    _say(f"  nodes: {sum(p['count'] for p in pools)} fake nodes from {len(pools)} pool(s)")

    if bare:
        _say(f"bare cluster up in {time.monotonic() - start:.1f}s (no upstream CRDs or controllers); "
             f"export KUBECONFIG={kubeconfig_path()}")
        return
    crd_objs = crds(comps)
    apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in NAMESPACES])
    apply(crd_objs)
    kubectl("wait", "--for=condition=Established", "--timeout=60s",
            *[f"crd/{c['metadata']['name']}" for c in crd_objs])
    _say(f"  CRDs: {len(crd_objs)} established")

    pki = state_dir() / "pki"
    ca = certs.ensure(pki)
    if not (KUEUE_METRICS_CERTS / "tls.crt").exists():
        KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
        for f in ("tls.crt", "tls.key"):
            shutil.copy2(pki / f, KUEUE_METRICS_CERTS / f)
    for ctl in CONTROLLERS:
        _start_controller(ctl, kubeconfig_path(), pki)
    for ctl in CONTROLLERS:
        _wait(ctl.name, lambda c=ctl: _healthy(c), 90,
              f"see {log_file(ctl.name)}")
        _say(f"  {ctl.name}: healthy ({time.monotonic() - start:.1f}s)")
    apply(webhook_configs(comps, ca.read_bytes()))
    runtimes = training_runtimes(comps)
    _retry(lambda: apply(runtimes), 30)
    _say(f"  ClusterTrainingRuntimes: {', '.join(r['metadata']['name'] for r in runtimes)}")
    _say(f"cluster up in {time.monotonic() - start:.1f}s; export KUBECONFIG={kubeconfig_path()}")


def _retry(fn, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except ClusterError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def _healthy(ctl: Controller) -> bool:
    pid = _read_pid(_pid_file(ctl))
    if not (pid and _alive(pid)):
        raise ClusterError(f"{ctl.name} exited; see {log_file(ctl.name)}:\n{_tail(log_file(ctl.name))}")
    return _http_ok(ctl.health_url)


def _tail(path: Path, n: int = 15) -> str:
    try:
        return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-n:])
    except OSError:
        return ""


def all_ports() -> list[int]:
    """Every port this instance listens on (only the default one runs the host controllers)."""
    controllers = {p for c in CONTROLLERS for p in c.ports} if instance() == DEFAULT_INSTANCE else set()
    return sorted(set(control_plane_ports().values()) | controllers)


def down() -> None:
    for ctl in CONTROLLERS:
        pid = _read_pid(_pid_file(ctl))
        if pid:
            _stop_pid(pid)
            _say(f"  stopped {ctl.name}")
        _pid_file(ctl).unlink(missing_ok=True)
    cluster_dir = kwok_workdir() / "clusters" / NAME
    if cluster_dir.exists():
        for pidf in (cluster_dir / "pids").glob("*.pid"):
            pid = _read_pid(pidf)
            if pid and _alive(pid):
                _stop_pid(pid, grace=5)
        _kwokctl("delete", "cluster", f"--name={NAME}",
                 f"--kubeconfig={state_dir() / 'kwokctl-contexts.yaml'}", check=False)
        shutil.rmtree(cluster_dir, ignore_errors=True)
        _say("  deleted control plane")
    busy = [p for p in all_ports() if _port_open(p)]
    if busy:
        raise ClusterError(f"ports still in use after down: {busy}")
    ours = state_dir() / "pki" / "tls.crt"
    theirs = KUEUE_METRICS_CERTS / "tls.crt"
    if ours.is_file() and theirs.is_file() and ours.read_bytes() == theirs.read_bytes():
        shutil.rmtree(KUEUE_METRICS_CERTS, ignore_errors=True)
    shutil.rmtree(state_dir(), ignore_errors=True)
    _say("cluster down: no process or port left")


def status() -> dict:
    comps: dict[str, dict] = {}
    cluster_dir = kwok_workdir() / "clusters" / NAME
    for name in ("kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok-controller"):
        pid = _read_pid(cluster_dir / "pids" / f"{name}.pid")
        comps[name] = {"running": bool(pid and _alive(pid)), "pid": pid}
    comps["kube-apiserver"]["healthy"] = comps["kube-apiserver"]["running"] and _apiserver_ready()
    for ctl in CONTROLLERS:
        pid = _read_pid(_pid_file(ctl))
        running = bool(pid and _alive(pid))
        comps[ctl.name] = {"running": running, "pid": pid,
                           "healthy": running and _http_ok(ctl.health_url), "log": str(log_file(ctl.name))}
    for c in comps.values():
        c.setdefault("healthy", c["running"])
        c["rss_mib"] = _rss_mib(c["pid"]) if c["running"] else 0
    return {"kubeconfig": str(kubeconfig_path()), "healthy": all(c["healthy"] for c in comps.values()),
            "rss_mib": sum(c["rss_mib"] for c in comps.values()), "components": comps}


def _rss_mib(pid: int) -> int:
    """Resident memory of a process, MiB (0 if unknown)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def print_status(report: dict) -> None:
    for name, c in report["components"].items():
        state = "healthy" if c["healthy"] else ("running, not healthy" if c["running"] else "stopped")
        print(f"  {name:28} {state:22} {c['rss_mib']:>5} MiB")
    print(f"cluster: {'healthy' if report['healthy'] else 'NOT healthy'}; resident memory "
          f"{report['rss_mib']} MiB; KUBECONFIG={report['kubeconfig']}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `mpiplat cluster ...`")
