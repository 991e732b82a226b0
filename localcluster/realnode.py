"""The real node `real-0`: kubelet, containerd, runc and CNI, kube-proxy, kube-router (NetworkPolicy
only) and local-path-provisioner as host processes, running real pods from locally built images;
CoreDNS as a pod behind the kube-dns Service, as on any cluster.

Its network: the bridge mpiplat0 with 10.244.0.1 (the node IP, where the API server is advertised,
so pods reach it through the `kubernetes` Service) and pods in 10.244.0.0/24, masqueraded when
they leave the node (CoreDNS forwards other names to the host's resolver).

While the real node exists the KWOK nodes are tainted kwok.x-k8s.io/node=fake:NoSchedule, so a pod
that does not ask for a simulated node runs for real, as on any cluster, and controllers installed
from upstream charts (which tolerate no such taint) land on the real node; simulated work asks for
KWOK nodes with a toleration and a node selector (mpiplat.conformance.placement).

Everything it writes is under <state>/node; what it changes elsewhere on the host is recorded
first and put back by `down` (mpiplat.localcluster.hoststate).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from mpiplat.localcluster import build, certs, hoststate, processes
from mpiplat.localcluster.kubectl import apply, kubectl
from mpiplat.localcluster.state import (
    DEFAULT_INSTANCE,
    ClusterError,
    control_plane_ports,
    instance,
    kwok_cluster_dir,
    log_file,
    state_dir,
)

NAME = "real-0"
BRIDGE = "mpiplat0"
POD_SUBNET = "10.244.0.0/24"
NODE_IP = "10.244.0.1"  # the bridge's address: node IP and advertised API server
SERVICE_RANGE = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service
DNS_IP = "10.96.0.10"  # the kube-dns Service: CoreDNS, a pod in kube-system like on any cluster
KWOK_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
LABELS = {"mpiplat.io/node-pool": "real", "type": "real"}
PORTS = {"kubelet": 31180, "kubelet-healthz": 31181, "kube-proxy-healthz": 31182, "kube-proxy-metrics": 31183,
         "kube-router-health": 31185}
# What the node needs from Debian: command -> package.
DEBIAN = {"runc": "runc", "/usr/lib/cni/bridge": "containernetworking-plugins", "iptables": "iptables",
          "ipset": "ipset", "conntrack": "conntrack", "socat": "socat", "mmdebstrap": "mmdebstrap"}
CNI_BIN = "/usr/lib/cni"


def node_dir() -> Path:
    return state_dir() / "node"


def snapshot_file() -> Path:
    return state_dir() / "host-before.json"


def _sock() -> Path:
    return node_dir() / "containerd" / "containerd.sock"


def _pki() -> Path:
    return node_dir() / "pki"


def ctr() -> list[str]:
    """argv prefix of `ctr` against the node's containerd, in the Kubernetes namespace."""
    return [str(build.binary("ctr")), "--address", str(_sock()), "-n", "k8s.io"]


def missing_packages() -> list[str]:
    """Debian packages the node needs that are not installed."""
    return sorted({pkg for exe, pkg in DEBIAN.items() if not (Path(exe).exists() if exe.startswith("/")
                                                              else shutil.which(exe))})


def check_host() -> None:
    """Stop before any change when the host cannot run the node."""
    if os.geteuid() != 0:
        raise ClusterError("the real node needs root (kubelet, containerd, iptables): run `mpiplat cluster up` as "
                           "root, or start the cluster without it (`mpiplat cluster up --no-real-node`)")
    missing = missing_packages()
    if missing:
        raise ClusterError(f"the real node needs Debian packages {', '.join(missing)}: "
                           f"`apt-get install -y {' '.join(missing)}`, or `mpiplat cluster up --no-real-node`")


# ---------------------------------------------------------------- the control plane's part

def apiserver_patches() -> tuple[dict, list[dict]]:
    """kwokctl options and componentsPatches the real node needs: an API server pods can reach,
    able to dial the kubelet (logs, exec); kwok-controller leaving the real node alone."""
    ca_crt, ca_key = certs.ensure_ca(_pki() / "kubelet-client-ca", "mpiplat kubelet client CA")
    crt, key = certs.issue_client(ca_crt, ca_key, "kube-apiserver-kubelet-client", ["system:masters"],
                                  _pki() / "apiserver-kubelet-client")
    options = {"kubeApiserverCertSANs": [NODE_IP, SERVICE_IP]}
    patches = [
        {"name": "kube-apiserver", "extraArgs": [
            {"key": "bind-address", "value": "0.0.0.0", "override": True},
            {"key": "advertise-address", "value": NODE_IP},
            {"key": "service-cluster-ip-range", "value": SERVICE_RANGE},
            {"key": "kubelet-preferred-address-types", "value": "InternalIP,Hostname"},
            {"key": "kubelet-client-certificate", "value": str(crt)},
            {"key": "kubelet-client-key", "value": str(key)},
        ]},
        {"name": "kwok-controller", "extraArgs": [
            {"key": "manage-all-nodes", "value": "false", "override": True},
            {"key": "manage-nodes-with-annotation-selector", "value": "kwok.x-k8s.io/node=fake"},
        ]},
    ]
    return options, patches


# ---------------------------------------------------------------- configs

def _kubeconfig(name: str, crt: Path, key: Path) -> Path:
    path = node_dir() / f"{name}.kubeconfig"
    server = f"https://127.0.0.1:{control_plane_ports()['kube-apiserver']}"
    _write(path, yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": "local", "cluster": {"server": server,
                                                   "certificate-authority": str(_kwok_pki() / "ca.crt")}}],
        "users": [{"name": name, "user": {"client-certificate": str(crt), "client-key": str(key)}}],
        "contexts": [{"name": name, "context": {"cluster": "local", "user": name}}],
    }))
    return path


def _kwok_pki() -> Path:
    return kwok_cluster_dir() / "pki"


def _admin_kubeconfig() -> Path:
    return kwok_cluster_dir() / "kubeconfig.yaml"


def containerd_config() -> str:
    d = node_dir()
    from mpiplat.localcluster import images

    return f"""version = 3
root = "{d / 'containerd' / 'root'}"
state = "{d / 'containerd' / 'state'}"

[grpc]
  address = "{_sock()}"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{images.PAUSE_IMAGE}"

[plugins."io.containerd.cri.v1.runtime"]
  # root here lacks CAP_SYS_RESOURCE: runc cannot lower a pause container's oom_score_adj to -998
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{CNI_BIN}"]
    conf_dir = "{d / 'cni' / 'net.d'}"
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "{shutil.which('runc') or '/usr/sbin/runc'}"
        Root = "{d / 'runc'}"
        SystemdCgroup = false

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""


def cni_config() -> dict:
    return {"cniVersion": "1.0.0", "name": "mpiplat", "plugins": [{
        "type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": True, "hairpinMode": True,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET, "gateway": NODE_IP}]],
                 "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(node_dir() / "cni" / "ipam")},
    }]}


def kubelet_config() -> dict:
    d = node_dir()
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": NODE_IP, "port": PORTS["kubelet"], "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": PORTS["kubelet-healthz"],
        "containerRuntimeEndpoint": f"unix://{_sock()}",
        "cgroupDriver": "cgroupfs", "failCgroupV1": False, "failSwapOn": False,
        "podLogsDir": str(d / "pod-logs"), "volumePluginDir": str(d / "volume-plugins"),
        "clusterDNS": [DNS_IP], "clusterDomain": "cluster.local", "resolvConf": "/etc/resolv.conf",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(d / "pki" / "kubelet-client-ca" / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
        # Local images are never pulled again: keep them whatever the disk use.
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "serializeImagePulls": False, "maxPods": 110,
        "nodeStatusUpdateFrequency": "4s", "syncFrequency": "10s",
    }


def kube_proxy_config(kubeconfig: Path) -> dict:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables", "hostnameOverride": NAME, "clusterCIDR": POD_SUBNET,
        "healthzBindAddress": f"127.0.0.1:{PORTS['kube-proxy-healthz']}",
        "metricsBindAddress": f"127.0.0.1:{PORTS['kube-proxy-metrics']}",
        "nodePortAddresses": [f"{NODE_IP}/32"],
        "iptables": {"localhostNodePorts": False},
        # Leave the host's conntrack settings alone.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }


COREFILE = """.:53 {
    errors
    health :8080
    ready :8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
    forward . /etc/resolv.conf
    cache 5
}
"""


def dns_objects() -> list[dict]:
    """CoreDNS as the cluster's DNS: a Deployment in kube-system labelled k8s-app=kube-dns behind
    the kube-dns Service, as NetworkPolicies written for real clusters expect (the teams' egress
    policy admits exactly that). It reads the API through the `kubernetes` Service."""
    from mpiplat.localcluster import images

    ns, labels = "kube-system", {"k8s-app": "kube-dns"}
    meta = {"name": "coredns", "namespace": ns}
    rules = [{"apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
              "verbs": ["list", "watch"]},
             {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]
    probe = {"periodSeconds": 2, "timeoutSeconds": 1}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "mpiplat:coredns"}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "mpiplat:coredns"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "mpiplat:coredns"},
         "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": ns}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"Corefile": COREFILE}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {**meta, "labels": labels},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
             "metadata": {"labels": labels},
             "spec": {"serviceAccountName": "coredns", "dnsPolicy": "Default",
                      "priorityClassName": "system-cluster-critical",
                      "nodeSelector": {"kubernetes.io/hostname": NAME},
                      "containers": [{
                          "name": "coredns", "image": images.COREDNS_IMAGE, "imagePullPolicy": "IfNotPresent",
                          "args": ["-conf", "/etc/coredns/Corefile"],
                          "ports": [{"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                    {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"}],
                          "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}],
                          "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}, **probe},
                          "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, **probe},
                          "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "170Mi"}},
                      }],
                      "volumes": [{"name": "config", "configMap": {"name": "coredns"}}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kube-dns", "namespace": ns, "labels": labels},
         "spec": {"clusterIP": DNS_IP, "selector": labels,
                  "ports": [{"name": "dns", "port": 53, "protocol": "UDP"},
                            {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}},
    ]


# ---------------------------------------------------------------- processes

@dataclass(frozen=True)
class NodeProcess:
    """One process of the real node; `health` is None when running is enough."""

    name: str  # also its binary's name
    health: str | None

    def pid_file(self) -> Path:
        return state_dir() / "pids" / f"{self.name}.pid"


PROCESSES = (
    NodeProcess("containerd", None),
    NodeProcess("kubelet", f"http://127.0.0.1:{PORTS['kubelet-healthz']}/healthz"),
    NodeProcess("kube-proxy", f"http://127.0.0.1:{PORTS['kube-proxy-healthz']}/healthz"),
    NodeProcess("kube-router", f"http://127.0.0.1:{PORTS['kube-router-health']}/healthz"),
    NodeProcess("local-path-provisioner", None),
)
# PersistentVolumes in directories on the real node, made by local-path-provisioner's helper pods.
STORAGE_NAMESPACE = "local-path-storage"
STORAGE_CLASS = "local-path"
STORAGE_SA = "local-path-provisioner"
STORAGE_CONFIGMAP = "local-path-config"


def _argv(proc: NodeProcess) -> list[str]:
    d, exe = node_dir(), str(build.binary(proc.name))
    if proc.name == "containerd":
        return [exe, "--config", str(d / "containerd.toml")]
    if proc.name == "kubelet":
        return [exe, f"--config={d / 'kubelet.yaml'}", f"--kubeconfig={d / 'kubelet.kubeconfig'}",
                f"--hostname-override={NAME}", f"--node-ip={NODE_IP}", f"--root-dir={d / 'kubelet'}",
                f"--cert-dir={d / 'kubelet-pki'}", "--node-labels=" + ",".join(f"{k}={v}" for k, v in LABELS.items()),
                # cAdvisor's own flag (deprecated in the kubelet, no config field): without it cAdvisor looks for
                # /run/containerd and reports no container by pod, which the dashboard's panels query.
                f"--containerd={_sock()}"]
    if proc.name == "kube-proxy":
        return [exe, f"--config={d / 'kube-proxy.yaml'}"]
    if proc.name == "local-path-provisioner":
        return [exe, "start", f"--config={d / 'local-path' / 'config.json'}", f"--kubeconfig={_admin_kubeconfig()}",
                f"--namespace={STORAGE_NAMESPACE}", f"--configmap-name={STORAGE_CONFIGMAP}",
                f"--service-account-name={STORAGE_SA}", f"--helper-pod-file={d / 'local-path' / 'helper-pod.yaml'}"]
    if proc.name == "kube-router":
        return [exe, f"--kubeconfig={_admin_kubeconfig()}", f"--hostname-override={NAME}",
                "--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--enable-cni=false",
                f"--health-port={PORTS['kube-router-health']}"]
    raise KeyError(proc.name)


def _start(proc: NodeProcess) -> None:
    if processes.running_pid(proc.pid_file()):
        return
    log = log_file(proc.name)
    log.parent.mkdir(parents=True, exist_ok=True)
    proc.pid_file().parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PATH=f"{build.binary('containerd-shim-runc-v2').parent}:{os.environ.get('PATH', '')}")
    with open(log, "ab") as out:
        p = subprocess.Popen(_argv(proc), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             cwd=node_dir(), env=env, start_new_session=True)
    proc.pid_file().write_text(str(p.pid))


def healthy(proc: NodeProcess) -> bool:
    pid = processes.running_pid(proc.pid_file())
    if not pid:
        return False
    if proc.name == "containerd":
        with socket.socket(socket.AF_UNIX) as s:
            return s.connect_ex(str(_sock())) == 0
    return processes.http_ok(proc.health) if proc.health else True


def _wait_healthy(proc: NodeProcess, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not healthy(proc):
        if not processes.running_pid(proc.pid_file()):
            log = log_file(proc.name)
            raise ClusterError(f"{proc.name} of the real node exited while starting: see {log}, then run "
                               f"`mpiplat cluster down` and `mpiplat cluster up`\nlast lines of {log}:\n"
                               f"{processes.tail(log)}")
        if time.monotonic() > deadline:
            raise ClusterError(f"{proc.name} of the real node not healthy after {timeout:.0f}s: see "
                               f"{log_file(proc.name)}, then retry `mpiplat cluster up`")
        time.sleep(0.2)


# ---------------------------------------------------------------- up / down

def _sh(*cmd: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ClusterError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}): {proc.stderr.strip()}")


def record_host() -> None:
    """Record the host before the node changes it (kept from the first of several `up`s)."""
    hoststate.record(snapshot_file())


def _network() -> None:
    """The bridge and its address before the kubelet starts (its node IP), and bridged traffic
    through iptables (kube-router's policies see it)."""
    if subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True).returncode != 0:
        _sh("ip", "link", "add", BRIDGE, "type", "bridge")
    if NODE_IP not in subprocess.run(["ip", "-o", "addr", "show", "dev", BRIDGE], capture_output=True,
                                     text=True).stdout:
        _sh("ip", "addr", "add", f"{NODE_IP}/24", "dev", BRIDGE)
    _sh("ip", "link", "set", BRIDGE, "up")
    for name in ("net.bridge.bridge-nf-call-iptables", "net.ipv4.ip_forward"):
        Path("/proc/sys", *name.split(".")).write_text("1")


def _write(path: Path, text: str) -> None:
    """Write a config file only when its content changes (kube-proxy exits when its file is touched)."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def _write_configs() -> None:
    d = node_dir()
    for sub in ("containerd", "cni/net.d", "kubelet", "pod-logs", "volume-plugins", "local-path"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    files = _storage_files()
    _write(d / "local-path" / "config.json", files["config.json"])
    _write(d / "local-path" / "helper-pod.yaml", files["helperPod.yaml"])
    _write(d / "containerd.toml", containerd_config())
    _write(d / "cni" / "net.d" / "10-mpiplat.conflist", json.dumps(cni_config(), indent=1))
    kwok_ca = (_kwok_pki() / "ca.crt", _kwok_pki() / "ca.key")
    crt, key = certs.issue_client(*kwok_ca, f"system:node:{NAME}", ["system:nodes"], _pki() / "kubelet")
    _kubeconfig("kubelet", crt, key)
    crt, key = certs.issue_client(*kwok_ca, "system:kube-proxy", [], _pki() / "kube-proxy")
    _write(d / "kube-proxy.yaml", yaml.safe_dump(kube_proxy_config(_kubeconfig("kube-proxy", crt, key))))
    _write(d / "kubelet.yaml", yaml.safe_dump(kubelet_config()))


def _storage_files() -> dict[str, str]:
    """local-path-provisioner's config, helper pod and scripts (also its ConfigMap's data)."""
    from mpiplat.localcluster import images

    helper = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "helper-pod"},
              "spec": {"containers": [{"name": "helper", "image": images.LOCAL_IMAGES["OpenMPI"],
                                       "imagePullPolicy": "IfNotPresent"}]}}
    config = {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                               "paths": [str(node_dir() / "local-path")]}]}
    return {"config.json": json.dumps(config), "helperPod.yaml": yaml.safe_dump(helper),
            "setup": '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"\n',
            "teardown": '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"\n'}


def storage_objects() -> list[dict]:
    """The provisioner's namespace, service account (its helper pods'), ConfigMap and StorageClass."""
    meta = {"namespace": STORAGE_NAMESPACE}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": STORAGE_NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": STORAGE_SA, **meta}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": STORAGE_CONFIGMAP, **meta},
         "data": _storage_files()},
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
         "metadata": {"name": STORAGE_CLASS,
                      "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
         "provisioner": "rancher.io/local-path", "volumeBindingMode": "WaitForFirstConsumer",
         "reclaimPolicy": "Delete"},
    ]


def node_ready() -> bool:
    out = kubectl("get", "node", NAME, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
                  check=False)
    return out.stdout.strip() == "True"


def _process(name: str) -> NodeProcess:
    return next(p for p in PROCESSES if p.name == name)


def start_process(name: str, timeout: float = 90) -> None:
    """Start one of the node's processes (`PROCESSES`) unless it runs, and wait until it is healthy."""
    proc = _process(name)
    _start(proc)
    _wait_healthy(proc, timeout=timeout)


def stop_process(name: str) -> bool:
    """Stop one of the node's processes (whether it ran); `start_process` or `up` starts it again."""
    proc = _process(name)
    pid = processes.running_pid(proc.pid_file())
    if pid:
        processes.stop_pid(pid)
    proc.pid_file().unlink(missing_ok=True)
    return bool(pid)


def process_running(name: str) -> bool:
    return bool(processes.running_pid(_process(name).pid_file()))


def _wait_ready(timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not node_ready():
        if time.monotonic() > deadline:
            raise ClusterError(f"node {NAME} not Ready after {timeout:.0f}s: see {log_file('kubelet')}, then retry "
                               "`mpiplat cluster up`")
        time.sleep(0.5)


def up(say: Callable[[str], None]) -> None:
    """Start the node's processes (those not running), import its images, wait until it is Ready
    and the cluster DNS answers."""
    from concurrent.futures import ThreadPoolExecutor

    from mpiplat.localcluster import images

    start = time.monotonic()
    _network()
    _write_configs()
    containerd = _process("containerd")
    _start(containerd)
    _wait_healthy(containerd)
    with ThreadPoolExecutor(1) as pool:
        imported = pool.submit(images.import_into, ctr())  # meanwhile the kubelet registers the node
        apply(storage_objects())
        # kube-router and the provisioner need the Node object the kubelet registers.
        early = [_process("kubelet"), _process("kube-proxy")]
        late = [p for p in PROCESSES if p not in early and p is not containerd]
        for proc in early:
            _start(proc)
        for proc in early:
            _wait_healthy(proc, timeout=90)
        _wait_ready()
        for proc in late:
            _start(proc)
        for proc in late:
            _wait_healthy(proc)
        imported.result()
    apply(dns_objects())
    kubectl("-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=120s")
    say(f"  real node {NAME}: Ready ({time.monotonic() - start:.1f}s; "
        f"{', '.join(p.name for p in PROCESSES)}; CoreDNS pod)")


def _ours(pid: int) -> bool:
    """Whether a process belongs to this node (its command line names the node's directory)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return str(node_dir()) in cmd or str(_sock()) in cmd


def _stray_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and int(p.name) != os.getpid()
            and _ours(int(p.name))]


def down(say: Callable[[str], None]) -> None:
    """Stop the node (kube-router, CoreDNS, kube-proxy, kubelet, containers, containerd) and put
    the host back as the first `up` found it. Safe after a failed or interrupted `up`."""
    for proc in reversed(PROCESSES[1:]):
        if stop_process(proc.name):
            say(f"  stopped {proc.name}")
    runc = shutil.which("runc")
    roots = sorted(p for p in (node_dir() / "runc").glob("*") if p.is_dir())  # one per containerd namespace
    for root in roots if runc else []:  # containers left by the kubelet
        listed = subprocess.run([runc, "--root", str(root), "list", "-q"], capture_output=True,
                                text=True).stdout.split()
        for cid in listed:
            subprocess.run([runc, "--root", str(root), "delete", "--force", cid], capture_output=True)
        if listed:
            say(f"  removed {len(listed)} container(s)")
    if stop_process("containerd"):
        say("  stopped containerd")
    for pid in _stray_pids():  # shims, and anything of an interrupted `up`
        processes.stop_pid(pid, grace=2)
    before = hoststate.load(snapshot_file())
    if before is None:
        return
    left = hoststate.restore(before, [str(node_dir())], say)
    if left:
        raise ClusterError(f"the host differs from before `mpiplat cluster up` after `down`: {left[0]}"
                           + (f" (and {len(left) - 1} more)" if len(left) > 1 else "")
                           + "; fix it by hand, then run `mpiplat cluster down` again\n" + "\n".join(left))
    snapshot_file().unlink(missing_ok=True)  # a concurrent `down` may have restored it first
    shutil.rmtree(node_dir(), ignore_errors=True)
    say("  host restored (sysctls, iptables, ipsets, links, mounts, paths, cgroups)")


def _coredns_pid() -> int | None:
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and (p / "cmdline").read_bytes().startswith(b"/coredns\0"):
                return int(p.name)
        except OSError:
            pass
    return None


def status() -> dict:
    out = {}
    for proc in PROCESSES:
        pid = processes.read_pid(proc.pid_file())
        running = bool(pid and processes.alive(pid))
        out[proc.name] = {"running": running, "pid": pid, "healthy": running and healthy(proc),
                          "log": str(log_file(proc.name))}
    pid = _coredns_pid()  # a pod: its health is its Deployment's
    ready = kubectl("-n", "kube-system", "get", "deployment", "coredns", "-o", "jsonpath={.status.readyReplicas}",
                    check=False).stdout.strip() == "1"
    out["coredns (pod)"] = {"running": bool(pid), "pid": pid, "healthy": bool(pid) and ready,
                            "log": "kubectl -n kube-system logs deploy/coredns"}
    return out


def all_ports() -> list[int]:
    """The node's ports (only the default instance runs a real node)."""
    return sorted(PORTS.values()) if instance() == DEFAULT_INSTANCE else []
