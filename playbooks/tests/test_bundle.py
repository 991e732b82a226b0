"""`mpiplat bundle`: charts, manifests, images.txt and checksums from the pinned module zips."""

from __future__ import annotations

import subprocess
import tarfile

import pytest
import yaml

from mpiplat import bundle
from mpiplat.versions import VERSIONS_FILE, load


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "b"
    bundle.make(out, log=lambda *_: None)
    return out


def test_bundle_holds_every_pinned_chart_and_manifest(made):
    comps = load()
    charts = {p.name for p in (made / "charts").iterdir()}
    assert charts == {"jobset-0.12.0.tgz", "kueue-0.19.2.tgz", "kubeflow-trainer-2.3.0.tgz"}
    assert {p.name for p in (made / "manifests").iterdir()} == {"mpi-operator.yaml", "trainer-runtimes.yaml"}
    kinds = {d["kind"] for d in bundle.manifest_docs(made / "manifests" / "mpi-operator.yaml")}
    assert {"CustomResourceDefinition", "Deployment", "Namespace"} <= kinds
    assert (made / "versions.yml").read_text() == VERSIONS_FILE.read_text()
    assert "gpu-operator" in (made / "MISSING.txt").read_text()
    assert comps["trainer"].version == "v2.3.0"


def test_trainer_chart_vendors_its_dependencies_at_the_pinned_versions(made):
    with tarfile.open(made / "charts" / "kubeflow-trainer-2.3.0.tgz") as tgz:
        versions = {dep: yaml.safe_load(tgz.extractfile(f"kubeflow-trainer/charts/{dep}/Chart.yaml"))["version"]
                    for dep in ("jobset", "lws")}
    assert versions == {"jobset": "0.12.0", "lws": "0.8.0"}


def test_images_txt_lists_the_pinned_images(made):
    images = (made / "images.txt").read_text().split()
    assert "registry.k8s.io/kueue/kueue:v0.19.2" in images
    assert "docker.io/mpioperator/mpi-operator:0.8.2" in images
    assert "ghcr.io/kubeflow/trainer/deepspeed-runtime:v2.3.0" in images
    assert not [i for i in images if "staging" in i or i.endswith(":main")]


def test_checksums_detect_a_changed_file(made, tmp_path):
    assert bundle.verify(made) == []
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(made), str(copy)], check=True)
    (copy / "images.txt").write_text("tampered\n")
    assert bundle.verify(copy) == ["images.txt"]


def test_bundle_refuses_a_non_empty_directory(tmp_path):
    (tmp_path / "x").write_text("")
    with pytest.raises(bundle.BundleError, match="not empty"):
        bundle.make(tmp_path)


def test_image_filter_drops_chart_defaults_the_pins_override():
    comps = load()
    rendered = ["image: us-central1-docker.pkg.dev/k8s-staging-images/kueue/kueue:release-0.19\n"
                "  - image: quay.io/brancz/kube-rbac-proxy:v0.18.0\n"]
    images = bundle.images(comps, rendered)
    assert "quay.io/brancz/kube-rbac-proxy:v0.18.0" in images
    assert not [i for i in images if "staging" in i]
