"""The local reference cluster's public surface: kwokctl (binary runtime) plus the upstream
controllers as host processes. Callers use this module; the work is done in

  state       which instance, its state dir, kubeconfig, logs, control-plane ports, ClusterError
  configs     kwokctl's config and each controller's (Kueue's from the kueue role's template)
  processes   the host-run controllers: ports, pid files, start, stop, health
  realnode    the real node real-0 (kubelet, containerd, kube-proxy, CoreDNS, kube-router)
  hoststate   what the real node changes on the host, recorded by `up`, put back by `down`
  images      the node's images, built from Debian packages and PyPI without a registry
  webhooks    CRDs, webhook configurations and training runtimes from the pinned modules
  lifecycle   up, down, status
"""

from __future__ import annotations

from mpiplat.localcluster.lifecycle import all_ports, down, kubectl, print_status, status, unhealthy, up, upgrade
from mpiplat.localcluster.state import (
    ClusterError,
    control_plane_ports,
    instance,
    kubeconfig_path,
    kubernetes_file,
    kubernetes_version,
    log_file,
    state_dir,
)

__all__ = ["ClusterError", "all_ports", "control_plane_ports", "down", "instance", "kubeconfig_path", "kubectl",
           "kubernetes_file", "kubernetes_version", "log_file", "print_status", "state_dir", "status", "unhealthy",
           "up", "upgrade"]
