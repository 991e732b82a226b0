"""Evidence is where pods ran (placement.ran_on), against the local cluster: a pod bound to a KWOK node
shows `simulated`, one bound to the real node `real`, a deleted pod still counts by the scheduler's event,
and a namespace whose pods never ran shows nothing."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from mpiplat import jobs
from mpiplat.conformance.placement import ran_on

pytestmark = pytest.mark.cluster


def _pod(name: str, **spec) -> client.V1Pod:
    # Bound is enough: the image need not exist, so no container has to start.
    return client.V1Pod(metadata=client.V1ObjectMeta(name=name), spec=client.V1PodSpec(
        containers=[client.V1Container(name="c", image="mpiplat.local/none:0")], **spec))


def _bound(kube, namespace: str, names: list[str], timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while any(not kube.core.read_namespaced_pod(n, namespace).spec.node_name for n in names):
        assert time.monotonic() < end, f"pods {names} not bound within {timeout}s"
        time.sleep(0.5)


def test_the_nodes_pods_were_bound_to_give_the_levels(kube, namespace):
    assert ran_on(kube, [namespace]) == set()
    kube.core.create_namespaced_pod(namespace, _pod("on-kwok", node_selector=jobs.KWOK_NODE_SELECTOR,
                                                    tolerations=[client.V1Toleration(**jobs.KWOK_TOLERATION)]))
    kube.core.create_namespaced_pod(namespace, _pod("unbindable", node_selector={"mpiplat.io/no-such": "node"}))
    _bound(kube, namespace, ["on-kwok"])
    assert ran_on(kube, [namespace]) == {"simulated"}
    # Gone since: the scheduler's Scheduled event still names its node.
    kube.core.delete_namespaced_pod("on-kwok", namespace, grace_period_seconds=0)
    assert ran_on(kube, [namespace]) == {"simulated"}
    kube.core.create_namespaced_pod(namespace, _pod("on-real"))  # the real node takes untolerated pods
    _bound(kube, namespace, ["on-real"])
    assert ran_on(kube, [namespace]) == {"simulated", "real"}
