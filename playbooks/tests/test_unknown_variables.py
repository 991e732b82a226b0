"""Variables that look like ours (role-name or mpiplat_ prefix) but that no role's argument_specs
declares get a warning with the closest known name; the run goes on. Preflight's input checks run
before any cluster access, so no cluster is needed (playbooks/tests/preflight_inputs.yml runs them alone).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
INPUTS = "playbooks/tests/preflight_inputs.yml"


@pytest.fixture(scope="module")
def helm_dir(tmp_path_factory) -> Path:
    """A folder with an executable `helm`: enough for preflight's helm check, which runs nothing."""
    folder = tmp_path_factory.mktemp("bin")
    (folder / "helm").write_text("#!/bin/sh\necho v3.19.5\n")
    (folder / "helm").chmod(0o755)
    return folder


def _inputs(helm_dir: Path, inventory: str, *extra: str) -> tuple[int, str]:
    # The local inventory reads MPIPLAT_HELM; the examples look helm up on PATH.
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", MPIPLAT_HELM=str(helm_dir / "helm"),
               PATH=f"{helm_dir}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run([PLAYBOOK, "-i", inventory, INPUTS, *extra], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split())


def _warned(out: str) -> list[str]:
    return sorted(set(re.findall(r"WARNING: (\w+) is not a known variable", out)))


def test_misspelt_variables_warn_with_the_closest_known_name_and_the_run_succeeds(helm_dir):
    rc, out = _inputs(helm_dir, "inventories/typo")
    assert rc == 0, out[-3000:]
    assert "kueue_namespce is not a known variable; did you mean kueue_namespace?" in out
    assert "mpiplat_gpu_resources is not a known variable; did you mean mpiplat_gpu_resource?" in out
    assert "guardrails_max_worker is not a known variable; did you mean guardrails_max_workers?" in out
    assert "tenancy_colour is not a known variable; no role declares it" in out
    # __-prefixed and unprefixed names are not ours to check.
    assert _warned(out) == ["guardrails_max_worker", "kueue_namespce", "mpiplat_gpu_resources", "tenancy_colour"]


def test_extra_vars_are_checked_too(helm_dir):
    rc, out = _inputs(helm_dir, "inventories/local/hosts.yml", "-e", "kueue_wait_for_pods_ready_timout=10m")
    assert rc == 0, out[-3000:]
    assert ("kueue_wait_for_pods_ready_timout is not a known variable; did you mean kueue_wait_for_pods_ready_timeout?"
            in out)


@pytest.mark.parametrize("inventory", ["inventories/local/hosts.yml", "inventories/examples/kubernetes",
                                       "inventories/examples/openshift-ai"])
def test_shipped_inventories_use_only_known_variables(inventory, helm_dir):
    rc, out = _inputs(helm_dir, inventory)
    assert rc == 0, out[-3000:]
    assert _warned(out) == []
