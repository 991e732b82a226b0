"""What the cluster under test can prove: detected, then overridden by settings."""

from __future__ import annotations

from dataclasses import dataclass

from mpiplat.kube import Kube

NAMES = ("simulated", "gpus", "pod_network")
WHY_NOT = {
    "simulated": "needs the local reference cluster (KWOK nodes)",
    "gpus": "needs real GPU nodes (schedulable, advertising GPUs, running real pods)",
    "pod_network": "needs real pods and pod networking (KWOK nodes run no containers)",
}


@dataclass(frozen=True)
class Capabilities:
    simulated: bool
    gpus: bool
    pod_network: bool
    overridden: tuple[str, ...] = ()

    def missing(self, needs: list[str]) -> list[str]:
        return [n for n in needs if not getattr(self, n)]

    def as_dict(self) -> dict:
        return {n: getattr(self, n) for n in NAMES} | {"overridden": list(self.overridden)}


def detect(kube: Kube, gpu_resource: str, overrides: dict[str, bool] | None = None) -> Capabilities:
    nodes = kube.core.list_node().items
    kwok = [n for n in nodes if (n.metadata.annotations or {}).get("kwok.x-k8s.io/node") == "fake"
            or (n.metadata.labels or {}).get("type") == "kwok"]
    simulated = bool(nodes) and len(kwok) == len(nodes)
    gpus = any(int((n.status.allocatable or {}).get(gpu_resource, "0")) > 0 and not n.spec.unschedulable
               for n in nodes)
    # Real GPU workloads need real pods: KWOK nodes advertise GPUs but run nothing.
    detected = {"simulated": simulated, "gpus": gpus and not simulated, "pod_network": not simulated}
    overrides = overrides or {}
    return Capabilities(**{**detected, **overrides}, overridden=tuple(sorted(overrides)))
