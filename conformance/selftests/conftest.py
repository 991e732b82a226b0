"""Fixtures shared by the suite's selftests."""

from __future__ import annotations

import pytest

# From a TrainJob down to the pod spec its runtime patch sets.
RUNTIME_PATCH_TO_POD_SPEC = ("spec", "runtimePatches", 0, "trainingRuntimeSpec", "template", "spec",
                             "replicatedJobs", 0, "template", "spec", "template", "spec")


def _runtime_pod_spec(schema: dict, manifest: dict) -> tuple[dict, dict]:
    """The pod spec schema node and the manifest's patch there. The Trainer's schema is structural: the
    API server prunes unknown fields rather than refusing them, so every field on the way must be one
    the schema names."""
    node, patch = schema, manifest
    for key in RUNTIME_PATCH_TO_POD_SPEC:
        if isinstance(key, int):
            node, patch = node["items"], patch[key]
            continue
        assert set(patch) <= set(node["properties"]), (key, set(patch) - set(node["properties"]))
        node, patch = node["properties"][key], patch[key]
    assert set(patch) <= set(node["properties"]), set(patch) - set(node["properties"])
    return node, patch


@pytest.fixture
def runtime_pod_spec():
    return _runtime_pod_spec
