"""Bring the local cluster up, take it down, report its health.

`up` creates (or restarts, or reuses) the control plane with kwokctl, then, unless bare, the
restricted-v2 emulation (scc); it adds the fake nodes, then, unless bare, the upstream CRDs, the
host-run controllers, their webhook configurations and Trainer's runtimes. Another cluster
(MPIPLAT_CLUSTER) runs its controllers in its real node's network namespace (see processes).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from mpiplat.localcluster import build, certs, configs, nodes, processes, realnode, scc, webhooks
from mpiplat.localcluster.kubectl import apply, kubectl
from mpiplat.localcluster.progress import progress
from mpiplat.localcluster.state import (
    DEFAULT_INSTANCE,
    NAME,
    ClusterError,
    control_plane_ports,
    instance,
    kubeconfig_path,
    kubernetes_file,
    kubernetes_version,
    kwok_cluster_dir,
    kwok_workdir,
    log_file,
    state_dir,
)
from mpiplat.versions import kubernetes_pin, load, version_tuple

NAMESPACES = ("mpi-operator", "kueue-system", "kubeflow-system")
CONTROL_PLANE = ("kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok-controller")
PLAIN_EVERY = 10.0  # seconds between progress lines when stdout is not a terminal


REGISTRY = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9._-]+)*")


def _say(msg: str) -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------- kubectl and kwokctl

def _kwokctl(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    bins = build.cluster_components()
    kubectl_bin = build.binary("kubectl", bins)
    env = processes.daemon_env(KWOK_WORKDIR=str(kwok_workdir()), KWOK_KUBECTL_BINARY=str(kubectl_bin),
                               PATH=f"{kubectl_bin.parent}:{os.environ.get('PATH', '')}")  # kwokctl's daemons too
    proc = subprocess.run([str(build.binary("kwokctl", bins)), *args], capture_output=True, text=True,
                          env=env, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise ClusterError(f"kwokctl {' '.join(args[:2])} failed (exit {proc.returncode}): see the logs in "
                           f"{kwok_cluster_dir() / 'logs'}, then run `mpiplat cluster down` and "
                           f"`mpiplat cluster up`\n{proc.stdout}{proc.stderr}")
    return proc


def _apiserver_ready() -> bool:
    if not kubeconfig_path().exists():
        return False
    return kubectl("get", "--raw", "/readyz", check=False).returncode == 0


# ---------------------------------------------------------------- waiting

def _wait(what: str, ok: Callable[[], bool], timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise ClusterError(f"{what} not ready after {timeout:.0f}s: see {log}, then retry `mpiplat cluster up`")
        time.sleep(0.25)


def _wait_controllers(start: float, timeout: float = 90) -> None:
    """Wait until every controller answers its health check, saying which are still awaited."""
    pending = list(processes.CONTROLLERS)
    deadline = time.monotonic() + timeout
    with progress("waiting for " + ", ".join(c.name for c in pending), every=PLAIN_EVERY) as work:
        while pending:
            for ctl in [c for c in pending if processes.healthy(c)]:
                pending.remove(ctl)
                _say(f"  {ctl.name}: healthy ({time.monotonic() - start:.1f}s)")
            if not pending:
                break
            work.label = "waiting for " + ", ".join(c.name for c in pending)
            if time.monotonic() > deadline:
                ctl = pending[0]
                raise ClusterError(f"{ctl.name} not healthy after {timeout:.0f}s: see {log_file(ctl.name)}, "
                                   "then retry `mpiplat cluster up`")
            time.sleep(0.25)


def _retry(fn: Callable[[], None], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except ClusterError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


# ---------------------------------------------------------------- up / down / status

def _real_node_marker() -> Path:
    """Present when this instance's control plane was created for a real node."""
    return state_dir() / "real-node"


def all_ports() -> list[int]:
    """Every port this instance listens on."""
    return sorted(set(processes.all_ports()) | set(realnode.all_ports()))


def real_node_enabled() -> bool:
    return _real_node_marker().exists()


def _control_plane(comps, start: float, real: bool) -> None:
    if kwok_cluster_dir().exists() and real != real_node_enabled():
        raise ClusterError(f"cluster {instance()} was created {'without' if real else 'with'} the real node: run "
                           "`mpiplat cluster down` first, or repeat `up` with the same choice"
                           f"{'' if real else ' (without --no-real-node)'}")
    if _apiserver_ready():
        _say("control plane: already running")
        return
    logs = kwok_cluster_dir() / "logs"
    with progress("starting the control plane", every=PLAIN_EVERY):
        if kwok_cluster_dir().exists():
            _say("control plane: restarting existing cluster")
            _kwokctl("start", "cluster", f"--name={NAME}")
        else:
            _say("control plane: creating with kwokctl (binary runtime)")
            busy = [p for p in control_plane_ports().values() if processes.port_open(p)]
            if busy:
                raise ClusterError(f"cluster {instance()}: control-plane ports {busy} are in use by something else: "
                                   "free them (`ss -ltnp` shows which), or name another cluster with MPIPLAT_CLUSTER")
            options, patches = realnode.apiserver_patches() if real else ({}, [])
            if real:
                _real_node_marker().touch()
            _kwokctl("create", "cluster", f"--name={NAME}", f"--config={configs.kwok_config(comps, options, patches)}",
                     f"--kubeconfig={state_dir() / 'kwokctl-contexts.yaml'}",
                     "--disable-qps-limits", "--wait=90s")
        _wait("kube-apiserver", _apiserver_ready, 90, logs)
    _say(f"  kube-apiserver ready ({time.monotonic() - start:.1f}s)")


def _controllers_marker() -> Path:
    """Exists once `up` has started the controllers (not bare): `status` expects them."""
    return state_dir() / "controllers"


def up(node_pools: str | None = None, bare: bool = False, real_node: bool = True, image_registry: str = "",
       kubernetes: str = "") -> None:
    """Start (or reuse) the cluster. bare: control plane and nodes only, no upstream CRDs or
    controllers, for installing the upstream components with Helm (molecule scenario `helm`).
    real_node: add the real node real-0 (another cluster's in namespaces of its own, see realnode).
    image_registry: the real node also has the controller images as this mirror names them.
    kubernetes: a version or minor of versions.yml's kubernetes.matrix (default: the one it runs, else the pin)."""
    from mpiplat.localcluster import images

    start = time.monotonic()
    real = real_node
    if not bare and not real and instance() != DEFAULT_INSTANCE:
        raise ClusterError(f"MPIPLAT_CLUSTER={instance()}: another cluster's controllers run in its real node's "
                           "network namespace: drop --no-real-node, or start it with --bare")
    if image_registry and not REGISTRY.fullmatch(image_registry):
        raise ClusterError(f"--image-registry {image_registry!r} is not a registry: give host[:port][/path], "
                           "e.g. mirror.example.com/mpiplat, without a scheme")
    if image_registry and not real:
        raise ClusterError("--image-registry names images on the real node: drop it, or drop --no-real-node")
    running = kubernetes_version()
    version = kubernetes_pin(kubernetes) if kubernetes else running or load()["kubernetes"].version
    if running and running != version:
        raise ClusterError(f"cluster {instance()} runs Kubernetes {running}, not {version}: run `mpiplat cluster "
                           "down` first, or repeat `up` without --kubernetes")
    comps = load(kubernetes=version)
    # Bad input (node pools, a missing checkout, a bad local value, a host that cannot run the real
    # node) stops before any build or change.
    pools = nodes.load(Path(node_pools)) if node_pools else nodes.load()
    if not bare:
        configs.kueue_vars()
        processes.debian_prometheus()
    if real:
        realnode.check_host()
    build.build(kubernetes=version)
    if real:
        images.ensure_built()
    state_dir().mkdir(parents=True, exist_ok=True)
    kubernetes_file().write_text(version + "\n")
    if real:
        realnode.record_host()

    _control_plane(comps, start, real)
    if not bare:  # before any namespace of the cluster's users
        _retry(lambda: apply(scc.manifests()), 30)
        _say("  OpenShift restricted-v2 emulation: namespaces' UID ranges and the pods' UIDs (admission policies)")
    apply(nodes.manifests(pools, [realnode.KWOK_TAINT] if real else []))
    _say(f"  nodes: {sum(p['count'] for p in pools)} fake nodes from {len(pools)} pool(s)"
         + (f", tainted {realnode.KWOK_TAINT['key']}" if real else ""))
    if real:
        with progress(f"starting the real node {realnode.NAME}", every=PLAIN_EVERY):
            realnode.up(_say, image_registry)
    if bare:
        _say(f"bare cluster up in {time.monotonic() - start:.1f}s (Kubernetes {version}; no upstream CRDs or "
             f"controllers); export KUBECONFIG={kubeconfig_path()}")
        return

    crd_objs = webhooks.crds(comps)
    with progress(f"applying {len(crd_objs)} CRDs", every=PLAIN_EVERY):
        apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": scc.EXEMPT_RUN_LEVEL}}
               for ns in NAMESPACES])
        apply(crd_objs)
        kubectl("wait", "--for=condition=Established", "--timeout=60s",
                *[f"crd/{c['metadata']['name']}" for c in crd_objs])
    _say(f"  CRDs: {len(crd_objs)} established")

    pki = state_dir() / "pki"
    ca = certs.ensure(pki, processes.address())
    apply(configs.prometheus_rbac())
    ns, name = configs.PROMETHEUS_SA
    configs.write_prometheus_files(kubectl("create", "token", name, f"--namespace={ns}",
                                           "--duration=8760h").stdout.strip())
    _controllers_marker().touch()
    for ctl in processes.CONTROLLERS:
        processes.start(ctl, pki, configs.controller_config(ctl, pki))
    _wait_controllers(start)
    apply(webhooks.webhook_configs(comps, ca.read_bytes()))
    runtimes = webhooks.training_runtimes(comps)
    _retry(lambda: apply(runtimes), 30)
    _say(f"  ClusterTrainingRuntimes: {', '.join(r['metadata']['name'] for r in runtimes)}")
    _say(f"cluster up in {time.monotonic() - start:.1f}s (Kubernetes {version}); export KUBECONFIG={kubeconfig_path()}")


def kwok_component(name: str) -> dict:
    """A control plane component as kwokctl runs it (binary, args, workDir, ports), from its kwok.yaml."""
    for doc in yaml.safe_load_all((kwok_cluster_dir() / "kwok.yaml").read_text()):
        for comp in (doc or {}).get("components") or []:
            if comp["name"] == name:
                return comp
    raise ClusterError(f"no component {name} in {kwok_cluster_dir() / 'kwok.yaml'}: is the cluster up?")


# Where a restarted control plane component says it is ready: kube-scheduler's /readyz waits for its informers
# (its /healthz answers before); kube-controller-manager has only /healthz.
READY_PATH = {"kube-scheduler": "/readyz"}


def restart_component(name: str, argv: list[str], timeout: float = 90) -> None:
    """Stop a kwokctl-run component and start `argv` in its place (its workDir, log and pid file, so that
    `mpiplat cluster status` and `down` find it), until it says it is ready (READY_PATH, else /healthz). None
    elects a leader (configs.CONTROLLER_MANAGER_PATCH, SCHEDULER_PATCH): the new one works once it is ready."""
    comp, pid_path = kwok_component(name), kwok_cluster_dir() / "pids" / f"{name}.pid"
    pid = processes.running_pid(pid_path)
    if pid:
        processes.stop_pid(pid)
    with open(kwok_cluster_dir() / "logs" / f"{name}.log", "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=comp["workDir"], env=processes.daemon_env(), start_new_session=True)
    pid_path.write_text(str(proc.pid))
    url = f"https://127.0.0.1:{comp['ports'][0]['port']}{READY_PATH.get(name, '/healthz')}"
    deadline = time.monotonic() + timeout
    while not processes.http_ok(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise ClusterError(f"{name} not ready after its restart ({url}): see "
                               f"{kwok_cluster_dir() / 'logs' / name}.log")
        time.sleep(0.25)


# The order kubeadm upgrades a control plane in, then the node's own: each healthy before the next.
UPGRADE_ORDER = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
NODE_UPGRADE_ORDER = ("kubelet", "kube-proxy")


def upgrade(kubernetes: str) -> None:
    """Upgrade the running cluster's Kubernetes to a version of the matrix one minor up (or a later patch), as
    kubeadm orders it: the control plane first (UPGRADE_ORDER, one at a time, each healthy before the next),
    then the real node's kubelet and kube-proxy. Pods keep running: containerd is not restarted."""
    running = kubernetes_version() or load()["kubernetes"].version
    target = kubernetes_pin(kubernetes)
    (_, rmin, rpatch), (_, tmin, tpatch) = version_tuple(running), version_tuple(target)
    if not (tmin == rmin + 1 or (tmin == rmin and tpatch > rpatch)):
        raise ClusterError(f"cluster {instance()} runs Kubernetes {running}: an upgrade goes one minor up (or to a "
                           f"later patch), not to {target}: upgrade a minor at a time")
    if not _apiserver_ready():
        raise ClusterError(f"cluster {instance()} is not running: `mpiplat cluster up` first")
    start = time.monotonic()
    build.build(only=["kubernetes"], kubernetes=target)
    comps = load(kubernetes=target)
    _say(f"upgrading Kubernetes {running} -> {target}: the control plane, then the node")
    # kwokctl runs its components through links in its bin/, and names the binaries in its kwok.yaml (read again
    # by `kwokctl start cluster` after a stop): both point at the new version's.
    config = kwok_cluster_dir() / "kwok.yaml"
    config.write_text(config.read_text().replace(f"/kubernetes/{running}/", f"/kubernetes/{target}/")
                      .replace(f"kubeVersion: {running}", f"kubeVersion: {target}"))
    for name in UPGRADE_ORDER:
        link = kwok_cluster_dir() / "bin" / name
        link.unlink(missing_ok=True)
        link.symlink_to(build.binary(name, comps))
        comp = kwok_component(name)
        with progress(f"restarting {name} at {target}", every=PLAIN_EVERY):
            restart_component(name, [comp["binary"], *comp["args"]])
        _say(f"  {name} {target} healthy ({time.monotonic() - start:.1f}s)")
    kubernetes_file().write_text(target + "\n")  # kubectl and the node's binaries from here on
    if real_node_enabled():
        for name in NODE_UPGRADE_ORDER:
            with progress(f"restarting the real node's {name} at {target}", every=PLAIN_EVERY):
                realnode.stop_process(name)
                realnode.start_process(name, say=_say)
            _say(f"  {name} {target} healthy ({time.monotonic() - start:.1f}s)")
    _say(f"cluster upgraded to Kubernetes {target} in {time.monotonic() - start:.1f}s")


def down() -> None:
    """Stop every process of this instance, put the host back as `up` found it, check its ports
    are free, remove its state."""
    for ctl in processes.CONTROLLERS:
        if processes.stop(ctl):
            _say(f"  stopped {ctl.name}")
    realnode.down(_say)
    if kwok_cluster_dir().exists():
        for pidf in (kwok_cluster_dir() / "pids").glob("*.pid"):
            pid = processes.running_pid(pidf)
            if pid:
                processes.stop_pid(pid, grace=5)
        _kwokctl("delete", "cluster", f"--name={NAME}",
                 f"--kubeconfig={state_dir() / 'kwokctl-contexts.yaml'}", check=False)
        shutil.rmtree(kwok_cluster_dir(), ignore_errors=True)
        _say("  deleted control plane")
    busy = [p for p in all_ports() if processes.port_open(p)]
    if busy:
        raise ClusterError(f"ports {busy} still in use after `mpiplat cluster down`: find the process with "
                           "`ss -ltnp`, stop it, then run `mpiplat cluster down` again")
    processes.remove_kueue_metrics_certs()
    shutil.rmtree(state_dir(), ignore_errors=True)
    _say("cluster down: no process or port left")


def status() -> dict:
    """Each component's pid, whether it runs and is healthy, its resident memory, and a controller's restarts."""
    comps: dict[str, dict] = {}
    for name in CONTROL_PLANE:
        pid = processes.read_pid(kwok_cluster_dir() / "pids" / f"{name}.pid")
        comps[name] = {"running": bool(pid and processes.alive(pid)), "pid": pid}
    comps["kube-apiserver"]["healthy"] = comps["kube-apiserver"]["running"] and _apiserver_ready()
    for ctl in processes.CONTROLLERS if _controllers_marker().exists() else ():  # none when bare
        pid = processes.read_pid(processes.pid_file(ctl))
        running = bool(pid and processes.alive(pid))
        comps[ctl.name] = {"running": running, "pid": pid, "healthy": running and processes.http_ok(ctl.health_url),
                           "log": str(log_file(ctl.name)), "restarts": processes.restarts(ctl)}
    if real_node_enabled():
        comps |= realnode.status()
    for c in comps.values():
        c.setdefault("healthy", c["running"])
        c["rss_mib"] = processes.rss_mib(c["pid"]) if c["running"] else 0
    return {"kubeconfig": str(kubeconfig_path()), "healthy": all(c["healthy"] for c in comps.values()),
            "rss_mib": sum(c["rss_mib"] for c in comps.values()), "components": comps}


def _state(component: dict) -> str:
    if component["healthy"]:
        return "healthy"
    return "running, not healthy" if component["running"] else "stopped"


def unhealthy(report: dict) -> str:
    """Each component of a status() report that is not healthy: its state, restarts and its log's last lines."""
    said = []
    for name, c in report["components"].items():
        if c["healthy"]:
            continue
        restarted = f", restarted {c['restarts']}x" if c.get("restarts") else ""
        log = f"; last lines of {c['log']}:\n{processes.tail(Path(c['log']), 8)}" if c.get("log") else ""
        said.append(f"{name}: {_state(c)}{restarted}{log}")
    return "\n".join(said) or "every component healthy"


def print_status(report: dict) -> None:
    for name, c in report["components"].items():
        state = _state(c)
        restarted = f"  restarted {c['restarts']}x (see {c['log']})" if c.get("restarts") else ""
        print(f"  {name:28} {state:22} {c['rss_mib']:>5} MiB{restarted}")
    print(f"cluster: {'healthy' if report['healthy'] else 'NOT healthy'}; resident memory "
          f"{report['rss_mib']} MiB; KUBECONFIG={report['kubeconfig']}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `mpiplat cluster ...`")
