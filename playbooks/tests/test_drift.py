"""plugins/module_utils/drift.py, which the module mpiplat.platform.crds uses: which desired objects a re-run
must apply, because the cluster does not hold them as written."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("drift", ROOT / "plugins" / "module_utils" / "drift.py")
drift = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(drift)

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "mpijobs.kubeflow.org", "labels": {"mpiplat.io/component": "mpi_operator"},
                 "creationTimestamp": None},
    "spec": {"group": "kubeflow.org", "versions": [{"name": "v2beta1", "served": True, "storage": True,
                                                    "schema": {"openAPIV3Schema": {"type": "object"}}}]},
    "status": {},
}


def _live(obj: dict) -> dict:
    """What the API server returns for `obj`: defaults and fields of its own added."""
    live = copy.deepcopy(obj)
    live["metadata"].update(creationTimestamp="2026-11-27T00:00:00Z", resourceVersion="42", uid="u",
                            annotations={"other": "x"})
    live["spec"]["conversion"] = {"strategy": "None"}
    live["status"] = {"conditions": [{"type": "Established", "status": "True"}]}
    return live


def test_an_object_the_cluster_holds_as_written_is_not_applied_again():
    assert drift.holds(_live(CRD), CRD)


def test_a_missing_object_is_applied():
    assert not drift.holds(None, CRD)


def test_drift_in_what_we_write_is_applied_again():
    changed = _live(CRD)
    changed["spec"]["versions"][0]["served"] = False
    assert not drift.holds(changed, CRD)
    unlabelled = _live(CRD)
    del unlabelled["metadata"]["labels"]
    assert not drift.holds(unlabelled, CRD)
    extra_version = _live(CRD)
    extra_version["spec"]["versions"].append({"name": "v1", "served": True, "storage": False})
    assert not drift.holds(extra_version, CRD)


def test_a_new_pin_is_applied():
    newer = copy.deepcopy(CRD)
    newer["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"] = "v0.9"
    assert not drift.holds(_live(CRD), newer)


def test_a_quantity_written_as_a_number_matches_its_served_text():
    quota = {"kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "t"}, "spec": {"hard": {"pods": 10}}}
    served = copy.deepcopy(quota)
    served["spec"]["hard"]["pods"] = "10"
    assert drift.holds(served, quota)
    served["spec"]["hard"]["pods"] = "11"
    assert not drift.holds(served, quota)
