"""Preflight checks its tools before any change: with a component in helm mode, or teams to install
with our chart, and no helm binary, site.yml and uninstall.yml fail in preflight's input checks, which
run before any cluster access, with a message that names the binary and MPIPLAT_HELM. No cluster is
needed: KUBECONFIG points nowhere, so a run that got past the inputs would fail at the cluster instead.
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
LOCAL = "inventories/local/hosts.yml"
HELM_CHECK = "TASK [mpiplat.platform.preflight : Check that helm is an executable file]"
CLUSTER_STEP = "TASK [mpiplat.platform.preflight : Read the cluster version and API groups]"


def _run(playbook: str, inventory: str, tmp_path: Path, *extra: str, **env: str) -> str:
    run_env = dict(os.environ, KUBECONFIG=str(tmp_path / "no-kubeconfig"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_FORCE_COLOR="0", **env)
    proc = subprocess.run([PLAYBOOK, "-i", inventory, playbook, *extra], cwd=ROOT, env=run_env,
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]  # every case here fails, at the helm check or at the cluster
    return out


def _changed(out: str) -> str:
    recap = re.search(r"localhost\s+: ok=\d+\s+changed=(\d+)", out)
    assert recap, out[-2000:]
    return recap.group(1)


@pytest.mark.parametrize("playbook, extra", [
    ("playbooks/site.yml", []),
    ("playbooks/uninstall.yml", ["-e", "mpiplat_confirm_uninstall=true"]),
], ids=["site", "uninstall"])
def test_missing_helm_fails_in_preflight_before_any_change(playbook, extra, tmp_path):
    out = _run(playbook, LOCAL, tmp_path, *extra, MPIPLAT_HELM="/nonexistent")
    failed = out[out.index(HELM_CHECK):]
    assert re.search(r"helm binary not found: mpiplat_helm_binary=/nonexistent is not an executable file; +needed by"
                     r" tenancy", " ".join(failed.split())), failed[:3000]
    assert "MPIPLAT_HELM" in failed
    assert _changed(out) == "0"
    assert CLUSTER_STEP not in out  # not even read from the cluster
    assert "PLAY [Install or upgrade the MPI training stack]" not in out
    assert "PLAY [Uninstall the MPI training stack]" not in out


def test_missing_helm_on_path_names_the_components_that_need_it(tmp_path):
    # This machine's PATH without the folders that hold a helm (the example inventory sets no mpiplat_helm_binary).
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if d and not (Path(d) / "helm").exists())
    out = _run("playbooks/site.yml", "inventories/examples/kubernetes", tmp_path, PATH=path)
    message = " ".join(out[out.index(HELM_CHECK):].split())
    assert "helm binary not found: no helm on PATH (mpiplat_helm_binary is not set)" in message
    assert "needed by jobset_mode=helm, kubeflow_trainer_mode=helm, kueue_mode=helm, gpu_operator_mode=helm" in message
    assert _changed(out) == "0" and CLUSTER_STEP not in out


def test_an_executable_helm_passes_the_check(tmp_path):
    helm = tmp_path / "helm"
    helm.write_text("#!/bin/sh\necho v3.19.5\n")
    helm.chmod(0o755)
    out = _run("playbooks/site.yml", LOCAL, tmp_path, MPIPLAT_HELM=str(helm))
    assert f"helm: {helm}" in out
    assert "helm binary not found" not in out
    assert CLUSTER_STEP in out  # got past the inputs, then failed at the (missing) cluster
    assert _changed(out) == "0"


def test_helm_is_not_required_when_nothing_uses_it(tmp_path):
    # Local inventory: every component preinstalled; without teams the tenancy role calls no helm either.
    out = _run("playbooks/site.yml", LOCAL, tmp_path, "-e", '{"mpiplat_teams": []}', MPIPLAT_HELM="/nonexistent")
    assert "helm binary not found" not in out
    assert CLUSTER_STEP in out
