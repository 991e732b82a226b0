"""The real node `real-0`: kubelet, containerd, runc and CNI, kube-proxy, kube-router (NetworkPolicy
only) and local-path-provisioner as host processes, running real pods from locally built images;
CoreDNS as a pod behind the kube-dns Service, as on any cluster.

Its network (`network()`): the bridge mpiplat0 with the node IP and the node's pods, masqueraded
when they leave the node (CoreDNS forwards other names to the host's resolver). The default
cluster's node lives in the host's network namespace: 10.244.0.1 on the bridge is also where the API
server is advertised, so pods reach it through the `kubernetes` Service. Another cluster's node
(MPIPLAT_CLUSTER, e.g. molecule `helm` beside the default one) lives in network and mount namespaces
of its own, held by one process (`sleep`, pid file node-ns.pid) and reached through a veth pair, so
its kube-proxy, kube-router and kubelet keep their iptables, ipsets, host paths (/run, /var/lib,
/var/log are its own tmpfs) and cgroups (under its own cgroup root) apart from the default node's.

While the real node exists the KWOK nodes are tainted kwok.x-k8s.io/node=fake:NoSchedule, so a pod
that does not ask for a simulated node runs for real, as on any cluster, and controllers installed
from upstream charts (which tolerate no such taint) land on the real node; simulated work asks for
KWOK nodes with a toleration and a node selector (mpiplat.conformance.placement).

Everything it writes is under <state>/node; what it changes elsewhere on the host is recorded
first and put back by `down` (mpiplat.localcluster.hoststate).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from mpiplat.localcluster import build, certs, hoststate, processes, scc
from mpiplat.localcluster.kubectl import apply, kubectl
from mpiplat.localcluster.state import (
    ClusterError,
    Network,
    control_plane_ports,
    instance,
    kwok_cluster_dir,
    log_file,
    network,
    node_ns_pid_file,
    state_dir,
)

NAME = "real-0"
BRIDGE = "mpiplat0"
SERVICE_RANGE = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service
DNS_IP = "10.96.0.10"  # the kube-dns Service: CoreDNS, a pod in kube-system like on any cluster
KWOK_TAINT = {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
LABELS = {"mpiplat.io/node-pool": "real", "type": "real"}
PORTS = {"kubelet": 31180, "kubelet-healthz": 31181, "kube-proxy-healthz": 31182, "kube-proxy-metrics": 31183,
         "kube-router-api": 31184, "kube-router-health": 31185}
PODFILTER = Path(__file__).with_name("podfilter.py")  # kube-router's relay to the API server: the real node's pods
# What the node needs from Debian: command -> package.
DEBIAN = {"runc": "runc", "/usr/lib/cni/bridge": "containernetworking-plugins", "iptables": "iptables",
          "ipset": "ipset", "conntrack": "conntrack", "socat": "socat", "mmdebstrap": "mmdebstrap"}
CNI_BIN = "/usr/lib/cni"
# What a node in its own namespaces mounts a tmpfs on: the paths kubelet, containerd and libcni use
# whatever their flags (see hoststate.HOST_PATHS) are under them, and none of them is needed there.
PRIVATE_MOUNTS = ("/run", "/var/lib", "/var/log")
CADVISOR_SOCKET = Path("/run/containerd/containerd.sock")  # where cAdvisor looks for containerd unless told


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
    net = network()
    options = {"kubeApiserverCertSANs": [net.api_ip, SERVICE_IP]}
    # A node in its own network namespace: the API server, on the host, calls webhooks and aggregated
    # APIs at their pods' IPs (routed into the namespace), not at Service IPs only that node serves.
    routing = [{"key": "enable-aggregator-routing", "value": "true"}] if net.netns else []
    patches = [
        {"name": "kube-apiserver", "extraArgs": [
            {"key": "bind-address", "value": "0.0.0.0", "override": True},
            {"key": "advertise-address", "value": net.api_ip},
            *routing,
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

def _server() -> str:
    """The API server as the node's processes reach it."""
    return f"https://{network().api_ip}:{control_plane_ports()['kube-apiserver']}"


def _kubeconfig(name: str, crt: Path | None = None, key: Path | None = None, server: str | None = None) -> Path:
    """NAME.kubeconfig in the node's directory: the API server as the node reaches it, as the user of the client
    certificate `crt`; or `server`, a plain-HTTP relay that authenticates for its clients (podfilter.py)."""
    path = node_dir() / f"{name}.kubeconfig"
    cluster = {"server": server} if server else {"server": _server(),
                                                  "certificate-authority": str(_kwok_pki() / "ca.crt")}
    user = {"client-certificate": str(crt), "client-key": str(key)} if crt else {}
    _write(path, yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": "local", "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": "local", "user": name}}],
    }))
    return path


def _kwok_pki() -> Path:
    return kwok_cluster_dir() / "pki"


def _admin_kubeconfig() -> Path:
    """The cluster's admin kubeconfig, pointed at the address the node reaches (the provisioner)."""
    conf = yaml.safe_load((kwok_cluster_dir() / "kubeconfig.yaml").read_text())
    for cluster in conf["clusters"]:
        cluster["cluster"]["server"] = _server()
    path = node_dir() / "admin.kubeconfig"
    _write(path, yaml.safe_dump(conf))
    return path


def _kube_router_argv(exe: str) -> list[str]:
    """kube-router behind podfilter.py, which shows it the real node's pods only (see there why), on the node's
    loopback, passing its requests on as the cluster's admin."""
    user = yaml.safe_load((kwok_cluster_dir() / "kubeconfig.yaml").read_text())["users"][0]["user"]
    relay = f"127.0.0.1:{PORTS['kube-router-api']}"
    path = _kubeconfig("kube-router", server=f"http://{relay}")
    return [sys.executable, "-I", "-S", str(PODFILTER), f"--listen={relay}", f"--server={_server()}",
            f"--ca={_kwok_pki() / 'ca.crt'}", f"--cert={user['client-certificate']}", f"--key={user['client-key']}",
            f"--node={NAME}", "--",
            exe, f"--kubeconfig={path}", f"--hostname-override={NAME}",
            "--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--enable-cni=false",
            f"--health-port={PORTS['kube-router-health']}"]


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
    net = network()
    return {"cniVersion": "1.0.0", "name": "mpiplat", "plugins": [{
        "type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": True, "hairpinMode": True,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": net.pod_subnet, "gateway": net.node_ip}]],
                 "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(node_dir() / "cni" / "ipam")},
    }]}


def kubelet_config() -> dict:
    d, net = node_dir(), network()
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": net.node_ip, "port": PORTS["kubelet"], "readOnlyPort": 0,
        "healthzBindAddress": net.node_ip, "healthzPort": PORTS["kubelet-healthz"],
        **({"cgroupRoot": net.cgroup_root} if net.cgroup_root else {}),
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
    net = network()
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables", "hostnameOverride": NAME, "clusterCIDR": net.pod_subnet,
        "healthzBindAddress": f"{net.node_ip}:{PORTS['kube-proxy-healthz']}",
        "metricsBindAddress": f"{net.node_ip}:{PORTS['kube-proxy-metrics']}",
        "nodePortAddresses": [f"{net.node_ip}/32"],
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
    health_port: int | None

    def pid_file(self) -> Path:
        return state_dir() / "pids" / f"{self.name}.pid"

    @property
    def health(self) -> str | None:
        return f"http://{network().node_ip}:{self.health_port}/healthz" if self.health_port else None


# kube-router resyncs its whole firewall (iptables-save/restore, ipsets) after any change of a pod it sees: the
# real node's only (podfilter.py). It runs at the CPU priority of the other daemons: niced (10, its own autogroup)
# it was starved under CI's load, and a new pod's rules came so late that a job's first connections were refused
# or an outside probe got through (ISO-03, CI23 and CI24).

PROCESSES = (
    NodeProcess("containerd", None),
    NodeProcess("kubelet", PORTS["kubelet-healthz"]),
    NodeProcess("kube-proxy", PORTS["kube-proxy-healthz"]),
    NodeProcess("kube-router", PORTS["kube-router-health"]),
    NodeProcess("local-path-provisioner", None),
)
# PersistentVolumes in directories on the real node, made by local-path-provisioner's helper pods.
STORAGE_NAMESPACE = "local-path-storage"
STORAGE_CLASS = "local-path"
STORAGE_SA = "local-path-provisioner"
STORAGE_CONFIGMAP = "local-path-config"


@functools.cache  # a built binary's path names its version: its flags never change
def _has_flag(exe: str, flag: str) -> bool:
    """Whether a binary takes `flag` (its --help lists it): what differs between the Kubernetes versions of
    versions.yml's matrix is told here, from the binary itself."""
    return f"  {flag} " in subprocess.run([exe, "--help"], capture_output=True, text=True).stdout


def _cadvisor_link(say: Callable[[str], None]) -> None:
    """cAdvisor, in the kubelet, names containers by pod only if it reaches the node's containerd; without that the
    dashboard's per-pod queries have no data (MON-03). Up to 1.36 the kubelet passes it `--containerd`; from 1.37,
    which dropped the flag, cAdvisor asks CADVISOR_SOCKET, so that becomes a link to the node's socket in the node's
    mount namespace (a tmpfs of its own, or the host's, where `down` removes it as it does all new under
    /run/containerd) unless something else is there."""
    if _has_flag(str(build.binary("kubelet")), "--containerd"):
        return
    link = CADVISOR_SOCKET
    got = subprocess.run([*_enter(), "sh", "-c", f'[ -e {link} ] || [ -L {link} ] || {{ mkdir -p {link.parent} && '
                          f'ln -s {_sock()} {link}; }}; readlink {link}'], capture_output=True, text=True).stdout
    if got.strip() != str(_sock()):
        say(f"  warning: {link} is not this node's containerd, so the kubelet's cAdvisor reports no container by pod "
            "(the dashboard's per-pod panels, MON-03)")


def _argv(proc: NodeProcess) -> list[str]:
    d, exe = node_dir(), str(build.binary(proc.name))
    if proc.name == "containerd":
        return [exe, "--config", str(d / "containerd.toml")]
    if proc.name == "kubelet":
        return [exe, f"--config={d / 'kubelet.yaml'}", f"--kubeconfig={d / 'kubelet.kubeconfig'}",
                f"--hostname-override={NAME}", f"--node-ip={network().node_ip}", f"--root-dir={d / 'kubelet'}",
                f"--cert-dir={d / 'kubelet-pki'}", "--node-labels=" + ",".join(f"{k}={v}" for k, v in LABELS.items()),
                # cAdvisor's own flag (deprecated in the kubelet, no config field; gone in 1.37, see _cadvisor_link).
                *([f"--containerd={_sock()}"] if _has_flag(exe, "--containerd") else [])]
    if proc.name == "kube-proxy":
        return [exe, f"--config={d / 'kube-proxy.yaml'}"]
    if proc.name == "local-path-provisioner":
        return [exe, "start", f"--config={d / 'local-path' / 'config.json'}", f"--kubeconfig={_admin_kubeconfig()}",
                f"--namespace={STORAGE_NAMESPACE}", f"--configmap-name={STORAGE_CONFIGMAP}",
                f"--service-account-name={STORAGE_SA}", f"--helper-pod-file={d / 'local-path' / 'helper-pod.yaml'}"]
    if proc.name == "kube-router":
        return _kube_router_argv(exe)
    raise KeyError(proc.name)


def _start(proc: NodeProcess, say: Callable[[str], None] = print) -> None:
    if processes.running_pid(proc.pid_file()):
        return
    if proc.name == "kubelet":  # each start, as `cluster upgrade` may bring a kubelet without --containerd
        _cadvisor_link(say)
    log = log_file(proc.name)
    log.parent.mkdir(parents=True, exist_ok=True)
    proc.pid_file().parent.mkdir(parents=True, exist_ok=True)
    env = processes.daemon_env(PATH=f"{build.binary('containerd-shim-runc-v2').parent}:{os.environ.get('PATH', '')}")
    with open(log, "ab") as out:
        p = subprocess.Popen([*_enter(), *_argv(proc)], stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, cwd=node_dir(), env=env, start_new_session=True)
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
    """Record the host before the node changes it (kept from the first of several `up`s). The
    kernel-wide sysctls are the ones found before the first of this host's real nodes started."""
    kernel = hoststate.hold(instance())
    if not network().netns:  # a node in its own namespaces changes nothing else on the host
        hoststate.record(snapshot_file(), kernel)


# ---------------------------------------------------------------- a node in its own namespaces

def _enter(mount: bool = True) -> list[str]:
    """argv prefix that runs a command in the node's namespaces (nothing for the host's)."""
    return processes.in_node_net(*(["--mount", f"--wd={node_dir()}"] if mount else []))


def _link_exists(ns: list[str], link: str) -> bool:
    return subprocess.run([*ns, "ip", "link", "show", link], capture_output=True).returncode == 0


def _namespaces() -> None:
    """Start the process that holds the node's network and mount namespaces, with a tmpfs of
    its own on each of PRIVATE_MOUNTS, unless it runs."""
    pidf = node_ns_pid_file()
    if processes.running_pid(pidf):
        return
    pidf.parent.mkdir(parents=True, exist_ok=True)
    mounts = " && ".join(f"mount -t tmpfs -o mode=755 mpiplat-node {p}" for p in PRIVATE_MOUNTS)
    log = log_file("node-ns")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:  # unshare and sh exec: the pid is sleep's
        p = subprocess.Popen(["unshare", "--net", "--mount", "--propagation", "private", "--", "sh", "-c",
                              f"{mounts} && exec sleep infinity"], stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    pidf.write_text(str(p.pid))
    deadline = time.monotonic() + 10
    while _comm(p.pid) != "sleep":
        if p.poll() is not None or time.monotonic() > deadline:
            raise ClusterError(f"could not make the namespaces of node {NAME}: see {log}\n{processes.tail(log)}")
        time.sleep(0.05)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _veth(net: Network) -> None:
    """The veth pair from the host into the namespace: the API server's address on the host end,
    a route to the node's pods through it, and the namespace's default route back."""
    ns = _enter(mount=False)
    if not _link_exists([], net.veth):
        _sh("ip", "link", "add", net.veth, "type", "veth", "peer", "name", "eth0", "netns",
            str(processes.node_ns_pid()))
    _address([], net.veth, f"{net.api_ip}/30")
    _address(ns, "eth0", f"{net.peer_ip}/30")
    for link in ("lo", "eth0"):
        _sh(*ns, "ip", "link", "set", link, "up")
    _sh("ip", "link", "set", net.veth, "up")
    _sh(*ns, "ip", "route", "replace", "default", "via", net.api_ip)
    _sh("ip", "route", "replace", net.pod_subnet, "via", net.peer_ip, "dev", net.veth)


def _address(ns: list[str], link: str, cidr: str) -> None:
    shown = subprocess.run([*ns, "ip", "-o", "addr", "show", "dev", link], capture_output=True, text=True).stdout
    if f" {cidr} " not in shown:
        _sh(*ns, "ip", "addr", "add", cidr, "dev", link)


def _cgroup_dirs() -> list[Path]:
    """The kubelet's cgroup root in each cgroup hierarchy (a node in its own namespaces only)."""
    root = network().cgroup_root.strip("/")
    if not root:
        return []
    tops = {h.resolve() for h in hoststate.CGROUP_ROOT.iterdir() if (h / "cgroup.procs").exists()}
    return [top / root for top in sorted(tops)]


def _cgroups() -> None:
    """The kubelet needs its cgroup root to exist; cpuset's starts with its parent's CPUs and memory nodes."""
    for d in _cgroup_dirs():
        d.mkdir(exist_ok=True)
        for f in ("cpuset.cpus", "cpuset.mems"):
            if (d / f).exists() and not (d / f).read_text().strip():
                (d / f).write_text((d.parent / f).read_text())


def _network() -> None:
    """The bridge and its address before the kubelet starts (its node IP), and bridged traffic
    through iptables (kube-router's policies see it); in its own namespaces, the veth pair first."""
    net = network()
    if net.netns:
        _namespaces()
        _veth(net)
    ns = _enter(mount=False)
    if not _link_exists(ns, BRIDGE):
        _sh(*ns, "ip", "link", "add", BRIDGE, "type", "bridge")
    _address(ns, BRIDGE, f"{net.node_ip}/24")
    _sh(*ns, "ip", "link", "set", BRIDGE, "up")
    for name in ("net.bridge.bridge-nf-call-iptables", "net.ipv4.ip_forward"):
        _sh(*ns, "sh", "-c", f"echo 1 > /proc/sys/{name.replace('.', '/')}")


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

    # Root, to make and remove the volumes' directories on the node (the image's own user is not).
    helper = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "helper-pod"},
              "spec": {"securityContext": {"runAsUser": 0},
                       "containers": [{"name": "helper", "image": images.LOCAL_IMAGES["OpenMPI"],
                                       "imagePullPolicy": "IfNotPresent"}]}}
    config = {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                               "paths": [str(node_dir() / "local-path")]}]}
    return {"config.json": json.dumps(config), "helperPod.yaml": yaml.safe_dump(helper),
            "setup": '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"\n',
            "teardown": '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"\n'}


def storage_objects() -> list[dict]:
    """The provisioner's namespace (a system one: exempt from the restricted-v2 emulation), service account
    (its helper pods'), ConfigMap and StorageClass."""
    meta = {"namespace": STORAGE_NAMESPACE}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": STORAGE_NAMESPACE,
                                                              "labels": scc.EXEMPT_RUN_LEVEL}},
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


def start_process(name: str, timeout: float = 90, say: Callable[[str], None] = print) -> None:
    """Start one of the node's processes (`PROCESSES`) unless it runs, and wait until it is healthy."""
    proc = _process(name)
    _start(proc, say)
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


def up(say: Callable[[str], None], image_registry: str = "") -> None:
    """Start the node's processes (those not running), import its images (the controllers' also as
    `image_registry` names them, see images.tag_mirrored), wait until it is Ready and the cluster DNS
    answers."""
    from concurrent.futures import ThreadPoolExecutor

    from mpiplat.localcluster import images

    start = time.monotonic()
    _network()
    _cgroups()
    _write_configs()
    containerd = _process("containerd")
    _start(containerd)
    _wait_healthy(containerd)
    with ThreadPoolExecutor(1) as pool:
        imported = pool.submit(images.import_into, ctr())  # meanwhile the kubelet registers the node
        apply(storage_objects())
        # kube-router, kube-proxy and the provisioner need the Node object the kubelet registers (kube-proxy 1.37
        # exits when its node's addresses change, from none to the node IP).
        early = [_process("kubelet")]
        late = [p for p in PROCESSES if p not in early and p is not containerd]
        for proc in early:
            _start(proc, say)
        for proc in early:
            _wait_healthy(proc, timeout=90)
        _wait_ready()
        for proc in late:
            _start(proc)
        for proc in late:
            _wait_healthy(proc)
        imported.result()
    if image_registry:
        images.tag_mirrored(ctr(), image_registry)
    apply(dns_objects())
    kubectl("-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=120s")
    say(f"  real node {NAME}: Ready ({time.monotonic() - start:.1f}s; "
        f"{', '.join(p.name for p in PROCESSES)}; CoreDNS pod)")


def check_running() -> None:
    """Refuse unless this cluster's real node (its containerd) is running."""
    if not process_running("containerd"):
        raise ClusterError(f"cluster {instance()} has no running real node to load images into: run "
                           "`mpiplat cluster up` first (not --no-real-node)")


def load_images(names: list[str] | None, image_registry: str = "", stream=None) -> list[str]:
    """Import the named images (all by default; built first when missing) into the running node's
    containerd, and name the controllers' also as `image_registry` does (images.tag_mirrored); e.g. the
    previous pins' controller images before playbooks/upgrade.yml's first install. Returns the names imported."""
    from mpiplat.localcluster import images

    check_running()
    imported = images.import_into(ctr(), names, stream=stream)
    if image_registry:
        images.tag_mirrored(ctr(), image_registry, stream=stream)
    return imported


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
    kernel = hoststate.release(instance())  # the kernel-wide sysctls, when this was the last real node
    if network().netns:
        _down_namespaces(kernel, say)
        return
    before = hoststate.load(snapshot_file())
    if before is None:
        return
    if kernel is None:  # another cluster's node still runs: the last one puts them back
        before["sysctls"] = {k: v for k, v in before["sysctls"].items() if k not in hoststate.KERNEL_SYSCTLS}
    left = hoststate.restore(before, [str(node_dir())], say)
    if left:
        raise ClusterError(f"the host differs from before `mpiplat cluster up` after `down`: {left[0]}"
                           + (f" (and {len(left) - 1} more)" if len(left) > 1 else "")
                           + "; fix it by hand, then run `mpiplat cluster down` again\n" + "\n".join(left))
    snapshot_file().unlink(missing_ok=True)  # a concurrent `down` may have restored it first
    shutil.rmtree(node_dir(), ignore_errors=True)
    say("  host restored (sysctls, iptables, ipsets, links, mounts, paths, cgroups)")


def _down_namespaces(kernel: dict[str, str] | None, say: Callable[[str], None]) -> None:
    """Stop the process holding the node's namespaces (the veth pair goes with them), remove its
    cgroup root, write back the kernel-wide sysctls when `kernel` has them."""
    net, pidf = network(), node_ns_pid_file()
    pid = processes.running_pid(pidf)
    if pid:
        processes.stop_pid(pid, grace=2)
        say(f"  removed the namespaces of {NAME}")
    pidf.unlink(missing_ok=True)
    for d in _cgroup_dirs():
        hoststate.remove_cgroup(d)
    for name, val in (kernel or {}).items():
        hoststate.write_sysctl(name, val, say)
    deadline = time.monotonic() + 10  # the kernel deletes a namespace's links after its last process
    while True:
        left = [f"cgroup {d}" for d in _cgroup_dirs() if d.exists()]
        if _link_exists([], net.veth):
            left.append(f"link {net.veth}")
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if left:
        raise ClusterError(f"node {NAME} of cluster {instance()} left {', '.join(left)} after `down`: remove "
                           "them by hand (`ip link delete`, `rmdir`), then run `mpiplat cluster down` again")
    shutil.rmtree(node_dir(), ignore_errors=True)


def _coredns_pid() -> int | None:
    """CoreDNS of this cluster's node: the one in its cgroup root (a node in its own namespaces), or
    under the host's kubepods."""
    root = network().cgroup_root or ""
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and (p / "cmdline").read_bytes().startswith(b"/coredns\0"):
                cgroups = (p / "cgroup").read_text()
                if (f"{root}/kubepods" if root else ":/kubepods") in cgroups:
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
    """The node's ports on the host (another cluster's node has them in its own network namespace)."""
    return [] if network().netns else sorted(PORTS.values())
