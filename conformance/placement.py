"""Where a job's pods go: the one placement rule of the suite (and of the repo's tests that make pods).

A job that runs real pods gets the settings' node selector and tolerations only, so on a cluster that
mixes simulated (KWOK) nodes with real ones it lands on a real node. A job that relies on simulated
behaviour (the KWOK Stages of localcluster/stages.yaml: mpiplat.jobs.COMPLETE_AFTER, FAIL_*) or needs
more nodes or GPUs than the real node has is put on the KWOK nodes where the cluster has any
(mpiplat.jobs.KWOK_NODE_SELECTOR and KWOK_TOLERATION); elsewhere it gets the settings' placement too.

Where pods asked to go is not where they ran: a test's evidence comes from `ran_on`, the nodes its pods
were bound to.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TypedDict

from mpiplat import jobs
from mpiplat.conformance.capabilities import is_kwok
from mpiplat.kube import Kube

# The scheduler's event on a pod it bound (kube-scheduler's "Scheduled" reason).
SCHEDULED = re.compile(r"^Successfully assigned (?P<namespace>[^/\s]+)/(?P<pod>\S+) to (?P<node>\S+)$")


class Placement(TypedDict):
    """Keyword arguments of jobs.MPIJob and jobs.TrainJob (pod spec nodeSelector, tolerations)."""

    node_selector: dict[str, str]
    tolerations: list[dict]


def placement(*, real: bool, kwok_nodes: bool, node_selector: Mapping[str, str] | None = None,
              tolerations: Iterable[Mapping] = ()) -> Placement:
    """The node selector and tolerations of a job's pods.

    node_selector, tolerations: the base placement (the settings', merged with a test's own).
    real: the job runs real pods: the base placement only.
    kwok_nodes: the cluster has KWOK nodes; with real=False the job goes there (the KWOK selector
    and toleration are added to the base).
    """
    selector = dict(node_selector or {})
    tols = [dict(t) for t in tolerations]
    if not real and kwok_nodes:
        selector.update(jobs.KWOK_NODE_SELECTOR)
        if jobs.KWOK_TOLERATION not in tols:
            tols.append(dict(jobs.KWOK_TOLERATION))
    return Placement(node_selector=selector, tolerations=tols)


def level(*, real: bool, kwok_nodes: bool) -> str:
    """The evidence level of pods placed by `placement` with the same arguments: `simulated` on the KWOK
    nodes, else `real` (on a cluster without KWOK nodes every pod runs for real)."""
    return "real" if real or not kwok_nodes else "simulated"


def pod_spec(p: Placement) -> dict:
    """The placement as fields of a Pod's spec, for pods the suite makes itself."""
    return {**({"nodeSelector": dict(p["node_selector"])} if p["node_selector"] else {}),
            **({"tolerations": [dict(t) for t in p["tolerations"]]} if p["tolerations"] else {})}


def ran_on(kube: Kube, namespaces: Iterable[str]) -> set[str]:
    """The evidence levels the pods of `namespaces` showed: `simulated` for each bound to a KWOK node, `real`
    for each bound to another node; none for pods never bound. Pods still there are read by their
    spec.nodeName, pods gone since (a finished job's workers) by the scheduler's Scheduled events."""
    bound: set[str] = set()
    for ns in namespaces:
        bound |= {p.spec.node_name for p in kube.core.list_namespaced_pod(ns).items if p.spec.node_name}
        for ev in kube.core.list_namespaced_event(ns, field_selector="reason=Scheduled").items:
            found = SCHEDULED.match(ev.message or "")
            if found and found["namespace"] == ns:
                bound.add(found["node"])
    if not bound:
        return set()
    nodes = {n.metadata.name: n for n in kube.core.list_node().items}
    # A node deleted since is left out: whether it was KWOK's cannot be told.
    return {"simulated" if is_kwok(nodes[name]) else "real" for name in bound if name in nodes}
