"""The module mpiplat.platform.crds on the local cluster, with a CRD of this test's own: it applies a new CRD
and waits until Established, leaves one the cluster holds as written alone, applies again what drifted (a
label of ours changed by hand) or what a new pin changes, and in --check applies nothing. It renders a
chart's CRDs itself, labelled and annotated as asked, and fails, with the hint, on a CRD that is not there."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from mpiplat.kube import wait_gone

ROOT = Path(__file__).resolve().parents[2]
GROUP = f"t{uuid.uuid4().hex[:8]}.mpiplat.io"
NAME = f"widgets.{GROUP}"

pytestmark = pytest.mark.cluster


def _crd(description: str = "a widget") -> dict:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": NAME, "labels": {"app.kubernetes.io/part-of": "mpiplat"}},
        "spec": {"group": GROUP, "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "description": description,
                     "x-kubernetes-preserve-unknown-fields": True}}}]},
    }


def _module(env: dict, crd: dict | None = None, *args: str, ok: bool = True, **params) -> dict:
    """One run of the module through ansible (localhost) with `crd` as its definitions, or `params`: its
    JSON result."""
    params = params or {"definitions": [crd]}
    run = subprocess.run(
        [str(Path(sys.executable).with_name("ansible")), "localhost", "-m", "mpiplat.platform.crds",
         "-a", json.dumps({**params, "wait_timeout": 60}), *args],
        cwd=ROOT, env=dict(env, ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="json"),
        capture_output=True, text=True, timeout=120)
    assert (run.returncode == 0) == ok, (run.stdout + run.stderr)[-3000:]
    result = json.loads(run.stdout[run.stdout.index("{"):])
    return result["plays"][0]["tasks"][0]["hosts"]["localhost"]


@pytest.fixture
def own_crd(kube):
    """This test's CRD name; the CRD is deleted after the test, and gone before the next test (a deleted CRD
    stays, Terminating but still Established, until the API server's finalizer has run: the next test's apply
    and wait would see it, then lose it)."""
    yield NAME
    try:
        kube.apiext.delete_custom_resource_definition(NAME)
    except ApiException as err:
        if err.status != 404:
            raise
    wait_gone(lambda: kube.apiext.read_custom_resource_definition(NAME), 60, f"CRD {NAME}")


def _live(kube) -> dict:
    return kube.apiext.read_custom_resource_definition(NAME).to_dict()


def test_applies_what_changed_and_nothing_else(kube, ansible_env, own_crd):
    check = _module(ansible_env, _crd(), "--check")
    assert check["changed"] and check["applied"] == [NAME]
    with pytest.raises(ApiException):
        _live(kube)

    first = _module(ansible_env, _crd())
    assert first["changed"] and first["applied"] == [NAME]
    conditions = {c["type"]: c["status"] for c in _live(kube)["status"]["conditions"]}
    assert conditions["Established"] == "True"

    again = _module(ansible_env, _crd())
    assert not again["changed"] and again["applied"] == [] and again["names"] == [NAME]

    kube.apiext.patch_custom_resource_definition(
        NAME, {"metadata": {"labels": {"app.kubernetes.io/part-of": "someone-else"}}})
    drifted = _module(ansible_env, _crd())
    assert drifted["changed"] and drifted["applied"] == [NAME]
    assert _live(kube)["metadata"]["labels"]["app.kubernetes.io/part-of"] == "mpiplat"

    newer = _module(ansible_env, _crd("a widget, v2"))
    assert newer["changed"]
    schema = _live(kube)["spec"]["versions"][0]["schema"]["open_apiv3_schema"]
    assert schema["description"] == "a widget, v2"


def test_refuses_anything_but_a_crd_before_changing_anything(ansible_env):
    run = subprocess.run(
        [str(Path(sys.executable).with_name("ansible")), "localhost", "-m", "mpiplat.platform.crds",
         "-a", json.dumps({"definitions": [{"kind": "ConfigMap", "metadata": {"name": "x"}}]})],
        cwd=ROOT, env=ansible_env, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert re.search(r"definitions: ConfigMap/x is not a named CustomResourceDefinition", run.stdout), run.stdout


def test_renders_a_charts_crds_and_checks_that_crds_are_established(kube, ansible_env, own_crd, tmp_path):
    chart = tmp_path / "widgets"
    (chart / "crds").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: widgets\nversion: 0.1.0\n")
    (chart / "crds" / "widgets.yaml").write_text(json.dumps(_crd()))
    rendered = _module(ansible_env, chart={"ref": str(chart), "helm": ansible_env["MPIPLAT_HELM"],
                                           "release": "widgets", "namespace": "default"},
                       labels={"mpiplat.io/component": "widgets"}, annotations={"meta.helm.sh/release-name": "w"},
                       established=[NAME])
    assert rendered["changed"] and rendered["applied"] == [NAME], rendered
    meta = _live(kube)["metadata"]
    assert meta["labels"]["mpiplat.io/component"] == "widgets"
    assert meta["annotations"]["meta.helm.sh/release-name"] == "w"

    assert not _module(ansible_env, established=[NAME])["changed"]
    missing = _module(ansible_env, established=[NAME, f"gadgets.{GROUP}"], hint="install gadgets first", ok=False)
    assert missing["msg"] == f"CRDs missing or not Established: gadgets.{GROUP}: install gadgets first", missing
