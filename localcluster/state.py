"""Which local cluster, and where it keeps its state: instance name, state dir, kubeconfig, logs, ports.

State lives outside the repo in $MPIPLAT_STATE (default ~/.local/state/mpiplat):
  kwok/clusters/mpiplat/   kwokctl's workdir (kubeconfig.yaml, pki, logs, pids)
  pki/                     the local webhook CA and serving certificate
  <controller>/            each controller's config; logs/<controller>.log; pids/<controller>.pid

$MPIPLAT_CLUSTER names another cluster beside it (state in $MPIPLAT_STATE-<name>, its own control-plane
ports, its real node and host controllers in a network namespace of their own), e.g. `helm` (bare) for the
molecule scenario that installs the upstream charts, or `faults` for the fault matrix.
"""

from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from mpiplat.errors import MpiplatError

NAME = "mpiplat"  # kwokctl's cluster name inside an instance's workdir
DEFAULT_INSTANCE = "mpiplat"  # the full cluster in the host's network namespace
VETH_PREFIX = "mpnode"  # host end of the veth pair into another cluster's node's network namespace
# Control-plane ports of the default instance, chosen by us so that `down` can prove them free.
# Another instance shifts them all down by a multiple of 10 derived from its name.
CONTROL_PLANE_PORTS = {"kube-apiserver": 32765, "etcd": 32764, "kube-controller-manager": 32763,
                       "kube-scheduler": 32762, "kwok-controller": 32761, "etcd-peer": 32766}


class ClusterError(MpiplatError, RuntimeError):
    """The cluster could not be brought to the asked state. The first line says what is wrong and
    what to do (the CLI prints only that line); details may follow."""


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


@dataclass(frozen=True)
class Network:
    """Where this cluster's node and host controllers live: `netns` False for the host's network namespace."""

    netns: bool
    pod_subnet: str
    node_ip: str  # the bridge's address: node IP, kubelet and health endpoints
    api_ip: str  # the API server's advertised address, as the node, its pods and the controllers reach it
    veth: str = ""  # host end of the pair into the namespace (netns only)
    peer_ip: str = ""  # the namespace's end of it: where the host reaches the controllers
    cgroup_root: str = ""  # the kubelet's cgroupRoot (netns only)


def network() -> Network:
    if instance() == DEFAULT_INSTANCE:
        return Network(False, "10.244.0.0/24", "10.244.0.1", "10.244.0.1")
    n = 1 + zlib.crc32(instance().encode()) % 250
    return Network(True, f"10.244.{n}.0/24", f"10.244.{n}.1", f"10.245.{n}.1", veth=f"{VETH_PREFIX}{n}",
                   peer_ip=f"10.245.{n}.2", cgroup_root=f"/mpiplat-{instance()}")


def base_state_dir() -> Path:
    """The default cluster's state directory; another's is beside it, named <this>-<instance>."""
    default = Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "mpiplat"
    return Path(os.environ.get("MPIPLAT_STATE", default))


def state_dir() -> Path:
    base, name = base_state_dir(), instance()
    return base if name == DEFAULT_INSTANCE else base.with_name(f"{base.name}-{name}")


def all_state_dirs() -> list[Path]:
    """The state directories of every local cluster of this host."""
    base = base_state_dir()
    return [d for d in [base, *sorted(base.parent.glob(f"{base.name}-*"))] if d.is_dir()]


def kubernetes_file() -> Path:
    """The Kubernetes version this cluster runs, as `up` chose it (versions.yml kubernetes.matrix)."""
    return state_dir() / "kubernetes-version"


def kubernetes_version() -> str:
    """The version kubernetes_file() holds; "" where the cluster has none (not up: the pin's default)."""
    try:
        return kubernetes_file().read_text().strip()
    except FileNotFoundError:
        return ""


def kwok_workdir() -> Path:
    return state_dir() / "kwok"


def kwok_cluster_dir() -> Path:
    """kwokctl's directory of this instance's control plane (pids/, logs/, kubeconfig.yaml)."""
    return kwok_workdir() / "clusters" / NAME


def kubeconfig_path() -> Path:
    return kwok_cluster_dir() / "kubeconfig.yaml"


def node_ns_pid_file() -> Path:
    """The pid file of the process holding the namespaces of a cluster's node (netns only)."""
    return state_dir() / "pids" / "node-ns.pid"


def log_file(name: str) -> Path:
    """The log of a host-run controller."""
    return state_dir() / "logs" / f"{name}.log"
