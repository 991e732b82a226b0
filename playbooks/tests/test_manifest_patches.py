"""roles/upstream_install's upstream_install_patch filter: JSON patches of the pinned manifests' documents,
and a clear error where a patch names no document or does not apply."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "patch_docs", ROOT / "roles" / "upstream_install" / "filter_plugins" / "patch_docs.py")
patch_docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(patch_docs)

DOCS = [
    {"kind": "Namespace", "metadata": {"name": "mpi-operator"}},
    {"kind": "Deployment", "metadata": {"name": "mpi-operator", "namespace": "mpi-operator"},
     "spec": {"template": {"spec": {"containers": [{"name": "mpi-operator", "args": ["-alsologtostderr"]}]}}}},
]
ADD_FLAG = {"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "--monitoring-port=8081"}


def test_a_patch_changes_only_its_document_and_leaves_the_input_alone():
    out = patch_docs.upstream_install_patch(DOCS, [{"kind": "Deployment", "name": "mpi-operator", "ops": [ADD_FLAG]}])
    assert out[1]["spec"]["template"]["spec"]["containers"][0]["args"] == ["-alsologtostderr", "--monitoring-port=8081"]
    assert out[0] == DOCS[0]
    assert DOCS[1]["spec"]["template"]["spec"]["containers"][0]["args"] == ["-alsologtostderr"]
    assert patch_docs.upstream_install_patch(DOCS, []) == DOCS


def test_a_patch_that_names_no_document_fails_naming_it_and_what_there_is():
    with pytest.raises(AnsibleFilterError, match=r"mpi-operator manifest: Deployment/operator: no such document "
                                                 r"to patch \(documents of that kind: \['Deployment/mpi-operator'\]\)"):
        patch_docs.upstream_install_patch(DOCS, [{"kind": "Deployment", "name": "operator", "ops": [ADD_FLAG]}],
                                          "mpi-operator")


def test_a_patch_that_does_not_apply_fails_naming_the_document():
    bad = {"op": "replace", "path": "/spec/template/spec/containers/0/ports/0", "value": {}}
    with pytest.raises(AnsibleFilterError, match=r"Deployment/mpi-operator: patch .* does not apply"):
        patch_docs.upstream_install_patch(DOCS, [{"kind": "Deployment", "name": "mpi-operator", "ops": [bad]}])
