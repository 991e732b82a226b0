"""The served CRD versions pinned in versions.yml (which INS-02 checks a cluster against, without Go)
are those of the pinned modules' CRD files (no cluster; the modules come through the Go module proxy)."""

from __future__ import annotations

import shutil

import pytest
import yaml

from mpiplat.versions import load, module_dir

COMPONENTS = load()
WITH_CRDS = sorted(name for name, comp in COMPONENTS.items()
                   if comp.extra.get("crds") or comp.extra.get("served_crds"))


def _served_in_module(comp) -> dict[str, list[str]]:
    root = module_dir(comp)
    served: dict[str, list[str]] = {}
    for pattern in comp.extra["crds"]:
        paths = sorted(root.glob(pattern))
        assert paths, f"{comp.name} {comp.version}: no file matches crds pattern {pattern!r} in {root}"
        for path in paths:
            for doc in yaml.safe_load_all(path.read_text()):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    served[doc["metadata"]["name"]] = sorted(v["name"] for v in doc["spec"]["versions"]
                                                             if v.get("served"))
    return served


def test_the_stack_pins_served_crds():
    assert {"mpi-operator", "trainer", "jobset", "kueue"} <= set(WITH_CRDS)


@pytest.mark.skipif(shutil.which("go") is None, reason="needs the go command to fetch the pinned modules")
@pytest.mark.parametrize("name", WITH_CRDS)
def test_served_crds_match_the_modules_crd_files(name):
    comp = COMPONENTS[name]
    assert comp.extra.get("crds"), f"versions.yml: components.{name} has served_crds but no crds globs"
    pinned = {crd: sorted(versions) for crd, versions in (comp.extra.get("served_crds") or {}).items()}
    actual = _served_in_module(comp)
    assert pinned == actual, (
        f"versions.yml components.{name}.served_crds does not match {comp.module}@{comp.version}'s CRD files; "
        f"set it to: {actual}")
