"""The filter mpiplat.platform.manifest_docs (plugins/filter/patch_docs.py): a pinned manifest's text as
labelled objects, with JSON patches of its documents, and a clear error where a patch names no document or
does not apply."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "patch_docs", ROOT / "plugins" / "filter" / "patch_docs.py")
patch_docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(patch_docs)

DOCS = [
    {"kind": "Namespace", "metadata": {"name": "mpi-operator"}},
    {"kind": "Deployment", "metadata": {"name": "mpi-operator", "namespace": "mpi-operator"},
     "spec": {"template": {"spec": {"containers": [{"name": "mpi-operator", "args": ["-alsologtostderr"]}]}}}},
]
ADD_FLAG = {"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "--monitoring-port=8081"}


def test_a_patch_changes_only_its_document_and_leaves_the_input_alone():
    out = patch_docs.apply_patches(DOCS, [{"kind": "Deployment", "name": "mpi-operator", "ops": [ADD_FLAG]}])
    assert out[1]["spec"]["template"]["spec"]["containers"][0]["args"] == ["-alsologtostderr", "--monitoring-port=8081"]
    assert out[0] == DOCS[0]
    assert DOCS[1]["spec"]["template"]["spec"]["containers"][0]["args"] == ["-alsologtostderr"]
    assert patch_docs.apply_patches(DOCS, []) == DOCS


def test_a_patch_that_names_no_document_fails_naming_it_and_what_there_is():
    with pytest.raises(AnsibleFilterError, match=r"mpi-operator manifest: Deployment/operator: no such document "
                                                 r"to patch \(documents of that kind: \['Deployment/mpi-operator'\]\)"):
        patch_docs.apply_patches(DOCS, [{"kind": "Deployment", "name": "operator", "ops": [ADD_FLAG]}],
                                          "mpi-operator")


def test_a_patch_that_does_not_apply_fails_naming_the_document():
    bad = {"op": "replace", "path": "/spec/template/spec/containers/0/ports/0", "value": {}}
    with pytest.raises(AnsibleFilterError, match=r"Deployment/mpi-operator: patch .* does not apply"):
        patch_docs.apply_patches(DOCS, [{"kind": "Deployment", "name": "mpi-operator", "ops": [bad]}])


def test_the_manifest_text_becomes_its_objects_labelled_and_patched():
    text = "# a comment\n---\n{}---\n\n---\n{}---\nnot: an object\n".format(*map(yaml.safe_dump, DOCS))
    out = patch_docs.manifest_docs(text, {"app.kubernetes.io/part-of": "mpiplat"},
                                           [{"kind": "Deployment", "name": "mpi-operator", "ops": [ADD_FLAG]}],
                                           "mpi-operator")
    assert [d["kind"] for d in out] == ["Namespace", "Deployment"]  # documents without a kind are dropped
    assert all(d["metadata"]["labels"] == {"app.kubernetes.io/part-of": "mpiplat"} for d in out)
    assert out[1]["spec"]["template"]["spec"]["containers"][0]["args"][-1] == "--monitoring-port=8081"


def test_a_manifest_that_is_not_yaml_fails_naming_the_component():
    with pytest.raises(AnsibleFilterError, match=r"mpi-operator manifest: not YAML"):
        patch_docs.manifest_docs("kind: [unclosed", {}, [], "mpi-operator")


def test_a_releases_aggregated_cluster_roles_are_found_by_its_helm_annotations():
    def role(name, release, namespace="kueue-system", aggregated=True):
        return {"metadata": {"name": name, "annotations": {"meta.helm.sh/release-name": release,
                                                           "meta.helm.sh/release-namespace": namespace}},
                **({"aggregationRule": {"clusterRoleSelectors": [{}]}} if aggregated else {})}
    roles = [role("kueue-batch-admin-role", "kueue"), role("kueue-manager-role", "kueue", aggregated=False),
             role("kueue-other-ns", "kueue", namespace="elsewhere"), role("jobset-admin", "jobset"),
             {"metadata": {"name": "system:aggregate-to-admin"}, "aggregationRule": {}}]
    assert patch_docs.aggregated_roles(roles, "kueue", "kueue-system") == ["kueue-batch-admin-role"]
    assert patch_docs.aggregated_roles([], "kueue", "kueue-system") == []
