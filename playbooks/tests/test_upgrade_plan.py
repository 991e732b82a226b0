"""upgrade.yml's plan, on a bare cluster (`make test`'s helm lane, before its install): controllers whose images
say they would be downgraded or skip a minor are refused, each named with what to do, before any change."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client

from mpiplat.versions import pin

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.cluster, pytest.mark.bare]


def _deployment(name: str, image: str) -> client.V1Deployment:
    labels = {"app": name}
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1DeploymentSpec(replicas=0, selector=client.V1LabelSelector(match_labels=labels),
                                     template=client.V1PodTemplateSpec(
                                         metadata=client.V1ObjectMeta(labels=labels),
                                         spec=client.V1PodSpec(containers=[client.V1Container(
                                             name="manager", image=image)]))))


def _minor(version: str, by: int) -> str:
    major, minor, _ = version.lstrip("v").split(".")
    return f"v{major}.{int(minor) + by}.0"


def test_a_downgrade_and_a_skipped_minor_are_refused_before_any_change(kube, namespace, ansible_env):
    jobset, kueue, mpi = pin("jobset"), pin("kueue"), pin("mpi-operator", pin("mpi-operator")["previous"])
    newer, older = _minor(jobset["version"], 1), _minor(kueue["previous"], -1)
    apps = client.AppsV1Api(kube.api_client)
    for name, image in (("jobset-controller-manager", pin("jobset", newer)["images"][0]),
                        ("kueue-controller-manager", pin("kueue", older)["images"][0]),
                        ("mpi-operator", mpi["images"][0])):  # the previous pin: one minor back, allowed
        apps.create_namespaced_deployment(namespace, _deployment(name, image))
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "inventories/local/hosts.yml",
         "playbooks/upgrade.yml", "-e", "jobset_mode=helm", "-e", "kubeflow_trainer_mode=helm",
         "-e", "kueue_mode=helm", "-e", "mpi_operator_mode=manifests"],
        cwd=ROOT, env=ansible_env, capture_output=True, text=True, timeout=300)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0, out[-3000:]
    assert f"jobset: installed {newer} is newer than the target {jobset['version']}; downgrades are not " \
           "supported" in out, out[-3000:]
    assert (f"kueue: installed {older}, target {kueue['version']}: upgrades go from") in out, out[-3000:]
    assert f"only; upgrade to {kueue['previous']} first (site.yml -e kueue_version={kueue['previous']})" in out
    assert "mpi-operator:" not in out.split("cannot upgrade:")[1], "the previous pin is one minor back: allowed"
    recap = re.search(r"localhost\s*: ok=\d+\s+changed=(\d+)", out)
    assert recap and recap.group(1) == "0", out[-2000:]
    assert "PLAY [Preflight checks" not in out  # refused in the plan, before site.yml
