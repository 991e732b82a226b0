"""What the cluster under test can prove: detected, then overridden by settings.

A cluster may mix KWOK nodes (simulated: they run no container) with real ones, as the local reference
cluster does with its real node. `simulated`: there are KWOK nodes; `pod_network`: a real node takes
pods; `gpus`: a real node that takes pods advertises GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mpiplat.kube import Kube

NAMES = ("simulated", "gpus", "pod_network")
WHY_NOT = {
    "simulated": "needs simulated (KWOK) nodes, as on the local reference cluster",
    "gpus": "needs real GPU nodes (not KWOK, schedulable, Ready, advertising GPUs)",
    "pod_network": "needs real pods and pod networking (a schedulable, Ready node that is not KWOK)",
}


@dataclass(frozen=True)
class Capabilities:
    simulated: bool
    gpus: bool
    pod_network: bool
    overridden: tuple[str, ...] = ()
    # Detected only, never overridden: whether the cluster has KWOK nodes, where the suite places the
    # jobs that rely on simulated behaviour (mpiplat.conformance.placement).
    kwok_nodes: bool = False

    def missing(self, needs: list[str]) -> list[str]:
        return [n for n in needs if not getattr(self, n)]

    def as_dict(self) -> dict:
        return {n: getattr(self, n) for n in NAMES} | {"overridden": list(self.overridden)}


def is_kwok(node) -> bool:
    """A node KWOK manages (annotation kwok.x-k8s.io/node=fake) or labels as such (type=kwok)."""
    return ((node.metadata.annotations or {}).get("kwok.x-k8s.io/node") == "fake"
            or (node.metadata.labels or {}).get("type") == "kwok")


def tolerates(tolerations: Iterable[Mapping], taint) -> bool:
    """Whether a pod with `tolerations` tolerates `taint` (Kubernetes' matching rules)."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.effect:
            continue
        if t.get("operator", "Equal") == "Exists":
            if not t.get("key") or t["key"] == taint.key:
                return True
        elif t.get("key") == taint.key and (t.get("value") or "") == (taint.value or ""):
            return True
    return False


def takes_pods(node, tolerations: Iterable[Mapping] = ()) -> bool:
    """A node the suite's pods can run on: not cordoned, Ready, and every NoSchedule/NoExecute taint
    tolerated by `tolerations` (the settings')."""
    tolerations = list(tolerations)
    ready = any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))
    blocking = [t for t in (node.spec.taints or []) if t.effect in ("NoSchedule", "NoExecute")]
    return (ready and not node.spec.unschedulable
            and all(tolerates(tolerations, t) for t in blocking))


def gpus(node, gpu_resource: str) -> int:
    """The node's allocatable GPUs."""
    return int((node.status.allocatable or {}).get(gpu_resource, "0"))


def free_gpus(kube: Kube, node, gpu_resource: str) -> int:
    """The node's allocatable GPUs less what its running and pending pods request."""
    pods = kube.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node.metadata.name}").items
    used = sum(int((c.resources.requests or {}).get(gpu_resource, 0) if c.resources else 0)
               for p in pods if p.status.phase not in ("Succeeded", "Failed") for c in p.spec.containers)
    return gpus(node, gpu_resource) - used


def detect(kube: Kube, gpu_resource: str, overrides: dict[str, bool] | None = None,
           tolerations: Iterable[Mapping] = ()) -> Capabilities:
    """From the nodes: `simulated` when some are KWOK nodes; `pod_network` when a node that is not KWOK
    takes pods (see takes_pods; `tolerations` are the settings'); `gpus` when such a node advertises
    `gpu_resource`. KWOK nodes advertise GPUs but run nothing, so they never count for either."""
    nodes = kube.core.list_node().items
    tolerations = list(tolerations)
    kwok = [n for n in nodes if is_kwok(n)]
    real = [n for n in nodes if not is_kwok(n)]
    # Pods that request GPUs also tolerate a taint named after the resource where the cluster taints its
    # GPU nodes that way (the ExtendedResourceToleration admission plugin adds it).
    gpu_tolerations = [*tolerations, {"key": gpu_resource, "operator": "Exists"}]
    detected = {"simulated": bool(kwok),
                "gpus": any(gpus(n, gpu_resource) > 0 and takes_pods(n, gpu_tolerations) for n in real),
                "pod_network": any(takes_pods(n, tolerations) for n in real)}
    overrides = overrides or {}
    return Capabilities(**{**detected, **overrides}, overridden=tuple(sorted(overrides)), kwok_nodes=bool(kwok))
