"""Which local cluster, and where it keeps its state: instance name, state dir, kubeconfig, logs, ports.

State lives outside the repo in $MPIPLAT_STATE (default ~/.local/state/mpiplat):
  kwok/clusters/mpiplat/   kwokctl's workdir (kubeconfig.yaml, pki, logs, pids)
  pki/                     the local webhook CA and serving certificate
  <controller>/            each controller's config; logs/<controller>.log; pids/<controller>.pid

$MPIPLAT_CLUSTER names another, bare cluster beside it (state in $MPIPLAT_STATE-<name>, its own
control-plane ports), e.g. `helm` for the molecule scenario that installs the upstream charts.
"""

from __future__ import annotations

import os
import re
import zlib
from pathlib import Path

from mpiplat.errors import MpiplatError

NAME = "mpiplat"  # kwokctl's cluster name inside an instance's workdir
DEFAULT_INSTANCE = "mpiplat"  # the full cluster; other instances are bare
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


def state_dir() -> Path:
    default = Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "mpiplat"
    base = Path(os.environ.get("MPIPLAT_STATE", default))
    name = instance()
    return base if name == DEFAULT_INSTANCE else base.with_name(f"{base.name}-{name}")


def kwok_workdir() -> Path:
    return state_dir() / "kwok"


def kwok_cluster_dir() -> Path:
    """kwokctl's directory of this instance's control plane (pids/, logs/, kubeconfig.yaml)."""
    return kwok_workdir() / "clusters" / NAME


def kubeconfig_path() -> Path:
    return kwok_cluster_dir() / "kubeconfig.yaml"


def log_file(name: str) -> Path:
    """The log of a host-run controller."""
    return state_dir() / "logs" / f"{name}.log"
