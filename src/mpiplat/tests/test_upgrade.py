"""The upgrade's rules on a versions file of its own: one minor at a time, from the previous pin, never down."""

from __future__ import annotations

import pytest

from mpiplat import upgrade
from mpiplat.versions import VersionsError, load, pin

VERSIONS = """
components:
  jobset: {version: v0.12.0, previous: v0.11.1, module: m, build: none}
  trainer: {version: v2.3.0, previous: v2.2.0, module: m, build: none}
  mpi-operator: {version: v0.8.2, previous: v0.7.0, module: m, build: none}
  kueue: {version: v0.19.2, module: m, build: none}
"""


@pytest.fixture
def versions(tmp_path):
    path = tmp_path / "versions.yml"
    path.write_text(VERSIONS)
    return path


def test_from_the_previous_pins_each_component_moves_one_minor_in_order(versions):
    changes = upgrade.plan({"jobset": "v0.11.1", "trainer": "v2.2.0", "mpi-operator": "v0.7.0",
                            "kueue": "v0.19.0"}, path=versions)
    assert [(c.component, c.kind) for c in changes] == [
        ("jobset", "minor"), ("trainer", "minor"), ("mpi-operator", "minor"), ("kueue", "patch")]
    assert str(changes[0]) == "jobset: v0.11.1 -> v0.12.0 (minor)"


def test_nothing_installed_is_an_install_and_the_pins_are_unchanged(versions):
    assert {c.kind for c in upgrade.plan({}, path=versions)} == {"install"}
    pins = {"jobset": "v0.12.0", "trainer": "v2.3.0", "mpi-operator": "v0.8.2", "kueue": "v0.19.2"}
    assert {c.kind for c in upgrade.plan(pins, path=versions)} == {"unchanged"}


def test_a_skipped_minor_a_downgrade_and_a_bad_version_are_refused_together(versions):
    with pytest.raises(upgrade.UpgradeRefused) as err:
        upgrade.plan({"jobset": "v0.10.0", "trainer": "v2.4.0", "mpi-operator": "latest",
                      "kueue": "v0.18.2"}, path=versions)
    msg = str(err.value)
    assert "jobset: installed v0.10.0, target v0.12.0: upgrades go from v0.11.x or v0.12.x only; upgrade to " \
           "v0.11.1 first (site.yml -e jobset_version=v0.11.1)" in msg
    assert "trainer: installed v2.4.0 is newer than the target v2.3.0; downgrades are not supported" in msg
    assert "mpi-operator: version 'latest' does not look like vX.Y.Z" in msg
    # kueue has no previous pin here: only a patch upgrade is allowed.
    assert "kueue: installed v0.18.2, target v0.19.2: upgrades go from v0.19.x only; uninstall it first" in msg
    assert msg.endswith("Nothing was changed.")


def test_a_target_version_is_reached_from_its_own_minor_only(versions):
    assert [c.kind for c in upgrade.plan({"jobset": "v0.11.0"}, {"jobset": "v0.11.1"}, path=versions)][0] == "patch"
    with pytest.raises(upgrade.UpgradeRefused, match="jobset: installed v0.10.0, target v0.11.1: upgrades go from "
                                                     r"v0.11.x only"):
        upgrade.plan({"jobset": "v0.10.0"}, {"jobset": "v0.11.1"}, path=versions)


def test_the_pinned_previous_versions_are_one_minor_back():
    for name in upgrade.COMPONENTS:
        entry = pin(name)
        assert entry.get("previous"), f"{name} has no previous pin in versions.yml"
        assert [c.kind for c in upgrade.plan({name: entry["previous"]}) if c.component == name] == ["minor"]


def test_installed_versions_are_read_from_the_controllers_images_through_a_mirror_too():
    images = ["registry.k8s.io/jobset/jobset:v0.11.1",
              "mirror.example.com/mpiplat/mpioperator/mpi-operator:0.7.0",  # the pin's tag is {number}
              "registry.k8s.io/kueue/kueue:v0.19.2", "registry.k8s.io/kueue/kueue:v0.18.2",  # half upgraded
              "ghcr.io/kubeflow/trainer/trainer-controller-manager:latest",  # no version: not read
              "quay.io/other/jobset:v9.0.0",  # another image of the same name: not JobSet's path
              "registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.15.0"]
    assert upgrade.installed(images) == {"jobset": "v0.11.1", "mpi-operator": "v0.7.0", "kueue": "v0.18.2"}


def test_the_previous_components_are_the_current_ones_at_their_previous_pins(tmp_path):
    current, previous = load(), load(previous=True)
    for name, comp in current.items():
        want = comp.extra.get("previous") or comp.version
        assert (previous[name].version, previous[name].module) == (want, comp.module), name
    bad = tmp_path / "versions.yml"
    bad.write_text("components:\n  jobset: {version: v0.12.0, previous: latest, module: m, build: none}\n")
    with pytest.raises(VersionsError, match=r"components.jobset.previous must look like vX.Y.Z, got 'latest'"):
        load(bad)
