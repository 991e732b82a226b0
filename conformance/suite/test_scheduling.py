"""SCH: placement (no queue needed)."""

from __future__ import annotations

import dataclasses

import pytest

from mpiplat import jobs
from mpiplat.conformance import capabilities as caps
from mpiplat.conformance.watch import JOB_LABEL, ROLE_LABEL, all_running, submit_job, wait_pods

WORKERS = 4  # one GPU each
# Node labels a GPU selector may use, most meaningful first; the node's own name is the last resort.
SELECTOR_KEYS = ("nvidia.com/gpu.product", "topology.kubernetes.io/zone", "mpiplat.io/rack", "kubernetes.io/hostname")


def _candidates(kube, settings, placed: dict) -> list:
    """GPU nodes that a job with placement `placed` (node selector, tolerations) may run on."""
    gpu = settings.gpu_resource
    return [n for n in kube.core.list_node().items
            if caps.gpus(n, gpu) > 0
            and caps.takes_pods(n, [*placed["tolerations"], {"key": gpu, "operator": "Exists"}])
            and all((n.metadata.labels or {}).get(k) == v for k, v in placed["node_selector"].items())]


@pytest.mark.requirement("SCH-04")
def test_workers_land_only_on_nodes_matching_the_gpu_selector(kube, run, settings, place, mpijob_spec):
    """A job whose workers select a label value (a GPU product, zone, rack, or else one node's name) that
    only some of the GPU nodes it could otherwise use carry runs every worker on those nodes. The selector
    always excludes usable GPU nodes with room, so the check is never vacuous.
    Fails on a cluster whose scheduler ignores node selectors (a worker lands elsewhere), or where the
    selected nodes do not take the workers (they stay Pending)."""
    gpu = settings.gpu_resource
    nodes = _candidates(kube, settings, place())
    if len(nodes) < 2:
        pytest.skip(f"needs 2 GPU nodes that take the suite's pods to show a selector excluding one; found "
                    f"{[n.metadata.name for n in nodes]}")
    free = {n.metadata.name: caps.free_gpus(kube, n, gpu) for n in nodes}
    selector, matching = None, set()
    for key in SELECTOR_KEYS:
        for value in sorted({(n.metadata.labels or {}).get(key) for n in nodes} - {None}):
            chosen = {n.metadata.name for n in nodes if (n.metadata.labels or {}).get(key) == value}
            if chosen != set(free) and sum(free[c] for c in chosen) >= WORKERS:
                selector, matching = {key: value}, chosen
                break
        if selector:
            break
    if not selector:
        pytest.skip(f"no node label picks some, not all, of the GPU nodes {sorted(free)} with {WORKERS} GPUs free")
    ns = run.namespace()
    spec = mpijob_spec("placed", ns, workers=WORKERS, gpus_per_worker=1, node_selector=selector,
                       launcher_annotations={jobs.COMPLETE_AFTER: "60s"})
    submit_job(kube, spec)
    pods = wait_pods(kube, ns, f"{JOB_LABEL}=placed,{ROLE_LABEL}=worker", all_running(WORKERS), timeout=120)
    elsewhere = [(p.metadata.name, p.spec.node_name) for p in pods if p.spec.node_name not in matching]
    assert not elsewhere, f"workers outside the nodes matching {selector} ({sorted(matching)}): {elsewhere}"
    run.record("SCH-04", f"GPU nodes excluded by the selector {selector}", len(free) - len(matching))


@pytest.mark.requirement("SCH-04")
def test_workers_land_on_tainted_gpu_nodes_only_with_a_toleration(kube, run, settings, place, mpijob_spec):
    """A GPU node tainted NoSchedule: a job pinned to it whose workers tolerate the taint runs there; the same
    job without that toleration is not scheduled (its workers are Unschedulable, for the taint).
    Fails on a cluster whose scheduler ignores taints (the second job runs), or where a tolerating job still
    cannot land on the tainted node. Skipped where no usable GPU node carries such a taint."""
    gpu = settings.gpu_resource
    found = None
    for node in _candidates(kube, settings, place()):
        taints = [t for t in node.spec.taints or [] if t.effect in ("NoSchedule", "NoExecute")
                  and t.key != gpu]  # pods that request GPUs may be given a toleration of that key at admission
        if taints and caps.free_gpus(kube, node, gpu) >= 2:
            found = (node.metadata.name, taints[0])
            break
    if not found:
        pytest.skip("no GPU node the suite's pods may use carries a NoSchedule/NoExecute taint (other than "
                    f"{gpu}): tolerations cannot be shown on this cluster")
    name, taint = found
    pin = {"kubernetes.io/hostname": name}
    ns = run.namespace()
    tolerating = mpijob_spec("tolerant", ns, workers=2, gpus_per_worker=1, node_selector=pin,
                             launcher_annotations={jobs.COMPLETE_AFTER: "60s"})
    assert any(caps.tolerates([t], taint) for t in tolerating.tolerations), (tolerating.tolerations, taint)
    intolerant = dataclasses.replace(tolerating, name="intolerant",
                                     tolerations=[t for t in tolerating.tolerations if not caps.tolerates([t], taint)])
    submit_job(kube, tolerating)
    submit_job(kube, intolerant)
    pods = wait_pods(kube, ns, f"{JOB_LABEL}=tolerant,{ROLE_LABEL}=worker", all_running(2), timeout=120)
    assert {p.spec.node_name for p in pods} == {name}, [(p.metadata.name, p.spec.node_name) for p in pods]

    def unschedulable(ps) -> bool:
        return len(ps) >= 2 and all(any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
                                        for c in p.status.conditions or []) for p in ps)

    def placed(ps) -> list:
        return [(p.metadata.name, p.spec.node_name) for p in ps if p.spec.node_name]

    try:  # until both are held, or one is placed (then at once)
        held = wait_pods(kube, ns, f"{JOB_LABEL}=intolerant,{ROLE_LABEL}=worker",
                         lambda ps: unschedulable(ps) or bool(placed(ps)), timeout=60)
    except TimeoutError as err:
        pytest.fail(f"workers without a toleration of {taint.key}={taint.value or ''}:{taint.effect} were not held "
                    f"off node {name}: {err}")
    assert not placed(held), (f"workers without a toleration of {taint.key}={taint.value or ''}:{taint.effect} were "
                              f"not held off node {name}: the scheduler placed them: {placed(held)}")
    added = [p.metadata.name for p in held if caps.tolerates([t.to_dict() for t in p.spec.tolerations or []], taint)]
    assert not added, f"admission gave {added} a toleration of the taint: cannot show that taints are honoured"
    reasons = {c.message for p in held for c in p.status.conditions or [] if c.type == "PodScheduled"}
    assert any("taint" in (m or "") for m in reasons), f"unschedulable, but not for the taint: {reasons}"
