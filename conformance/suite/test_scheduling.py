"""SCH: placement (no queue needed)."""

from __future__ import annotations

import pytest

from mpiplat import jobs
from mpiplat.conformance.watch import JOB_LABEL, ROLE_LABEL, all_running, wait_pods
from mpiplat.kube import MPIJOB


@pytest.mark.requirement("SCH-04")
def test_workers_land_only_on_nodes_matching_the_gpu_selector(kube, run, settings, mpijob_spec):
    gpu_nodes = [n for n in kube.core.list_node().items
                 if int((n.status.allocatable or {}).get(settings.gpu_resource, "0")) > 0]
    assert gpu_nodes, "no GPU nodes"
    selector = dict(settings.node_selector)
    zone = gpu_nodes[0].metadata.labels.get("topology.kubernetes.io/zone")
    if not selector and zone:
        selector = {"topology.kubernetes.io/zone": zone}
    matching = {n.metadata.name for n in gpu_nodes
                if all((n.metadata.labels or {}).get(k) == v for k, v in selector.items())}
    assert matching and len(matching) < len(kube.core.list_node().items), "selector must exclude some nodes"
    ns = run.namespace()
    spec = mpijob_spec("placed", ns, workers=4, gpus_per_worker=1, node_selector=selector,
                       launcher_annotations={jobs.COMPLETE_AFTER: "60s"})
    kube.create(MPIJOB, jobs.mpijob(spec))
    pods = wait_pods(kube, ns, f"{JOB_LABEL}=placed,{ROLE_LABEL}=worker", all_running(4), timeout=120)
    assert {p.spec.node_name for p in pods} <= matching, (selector, [(p.metadata.name, p.spec.node_name) for p in pods])
