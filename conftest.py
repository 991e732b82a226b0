"""Shared test fixtures: the local reference cluster (started on demand, reused when up), throwaway
namespaces, and the environment for running playbooks against the cluster."""

from __future__ import annotations

import os
import uuid

import pytest
from kubernetes import client

from mpiplat.kube import Kube, wait_default_service_account
from mpiplat.localcluster import cluster


@pytest.fixture(scope="session")
def kube() -> Kube:
    if os.environ.get("MPIPLAT_OFFLINE"):  # make test's offline lane runs beside the cluster lane
        pytest.fail("this test uses the local cluster: mark it `cluster`")
    if not cluster.status()["healthy"]:
        cluster.up()
    return Kube(str(cluster.kubeconfig_path()))


@pytest.fixture
def namespace(kube: Kube):
    """A labelled namespace deleted after the test."""
    name = f"lc-{uuid.uuid4().hex[:8]}"
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=name, labels={"mpiplat.io/test": "localcluster"})))
    # Under load the default ServiceAccount took seconds, and failed a test that created a pod at once.
    wait_default_service_account(kube.core, name, 120)
    yield name
    kube.core.delete_namespace(name)


@pytest.fixture(scope="session")
def ansible_env(kube: Kube) -> dict[str, str]:
    """Environment for ansible-playbook against the local cluster."""
    from mpiplat.localcluster.build import binary

    return dict(os.environ, KUBECONFIG=str(cluster.kubeconfig_path()), MPIPLAT_HELM=str(binary("helm")),
                ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")


def pytest_collection_modifyitems(items):
    """Tests marked `last` (e.g. `mpiplat cluster down`) run after every other test."""
    items.sort(key=lambda item: item.get_closest_marker("last") is not None)
