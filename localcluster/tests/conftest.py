"""Fixtures: the local reference cluster (started on demand, reused when up) and throwaway namespaces."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client

from localcluster import cluster
from mpiplat.kube import Kube


@pytest.fixture(scope="session")
def kube() -> Kube:
    if not cluster.status()["healthy"]:
        cluster.up()
    return Kube(str(cluster.kubeconfig_path()))


@pytest.fixture
def namespace(kube: Kube):
    """A labelled namespace deleted after the test."""
    name = f"lc-{uuid.uuid4().hex[:8]}"
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=name, labels={"mpiplat.io/test": "localcluster"})))
    yield name
    kube.core.delete_namespace(name)
