"""The upgrade path, previous pins -> current pins, with jobs on both sides, on a bare cluster whose controllers run
as real pods: `make test`'s upgrade lane (.ci/stages.py). Its cluster, with the previous controllers' images in its
node, and both bundles are made in the install stage; by hand:

    export MPIPLAT_CLUSTER=upgrade MPIPLAT_BUNDLE=/tmp/to MPIPLAT_PREVIOUS_BUNDLE=/tmp/from
    mpiplat cluster up --bare --image-registry mirror.example.com/mpiplat
    mpiplat cluster images --load --image-registry mirror.example.com/mpiplat \\
        --only kueue-previous --only jobset-previous --only trainer-previous --only mpi-operator-previous
    mpiplat bundle /tmp/from --previous && mpiplat bundle /tmp/to
    eval "$(mpiplat cluster env)" && pytest -m upgrade

Then, in order: site.yml with the previous pins; the `upgrade` profile's --phase before; upgrade.yml with Kueue's
new image missing, which upgrades the components before Kueue, undoes Kueue's release and says how to resume;
upgrade.yml, and again at once, which changes nothing; each upgrade fault (a controller left at its old version, a
CRD version dropped while a job uses it) fails its row for its reason, and is undone; --phase after passes every
row.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubernetes import client

from mpiplat.conformance.upgrading import DEPLOYMENT, rolled_out
from mpiplat.upgrade import COMPONENTS, VERSION_VARS, installed
from mpiplat.versions import pin, split_image

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
HELM_VARS = "@molecule/helm/group_vars/all.yml"  # the bare cluster's stack: controllers from a bundle, as pods
PLAY_TIMEOUT_S = 1500
JOB_SECONDS = 1500  # the most the long jobs run: --phase after releases them (its waits end well before)

pytestmark = [pytest.mark.cluster, pytest.mark.upgrade, pytest.mark.timeout(3600)]  # five playbooks, four phases


def _bundle(var: str) -> str:
    path = os.environ.get(var)
    if not path or not Path(path, "SHA256SUMS").is_file():
        pytest.fail(f"${var} must name a bundle (`mpiplat bundle DIR{' --previous' if 'PREVIOUS' in var else ''}`); "
                    f"got {path!r}")
    return path


def _play(env, playbook: str, *extra: str, fails: bool = False) -> str:
    try:
        proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "inventories/local/hosts.yml", playbook,
                               "-e", HELM_VARS, *extra], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=PLAY_TIMEOUT_S)
    except subprocess.TimeoutExpired as err:
        so_far = (err.stdout or b"").decode(errors="replace") if isinstance(err.stdout, bytes) else err.stdout or ""
        raise AssertionError(f"{playbook} still ran after {PLAY_TIMEOUT_S} s; its output so far:\n"
                             f"{so_far[-6000:]}") from err
    out = proc.stdout + proc.stderr
    assert (proc.returncode != 0) == fails, f"{playbook} exited {proc.returncode}:\n{out[-4000:]}"
    return out


def _running(kube, want: dict[str, str], timeout: float = 120) -> None:
    """Wait until each component's controller runs the version `want` says, rolled out."""
    until = time.monotonic() + timeout
    while True:
        got = installed([c["image"] for d in kube.list(DEPLOYMENT, None) if rolled_out(d)
                         for c in d["spec"]["template"]["spec"]["containers"]])
        if got == want or time.monotonic() > until:
            break
        time.sleep(2)
    assert got == want, f"running {got}, expected {want}"


def _changed(out: str) -> list[str]:
    """The tasks a playbook run reports changed."""
    changed, task = [], ""
    for line in out.splitlines():
        if line.startswith("TASK ["):
            task = line.split("[", 1)[1].rsplit("]", 1)[0]
        elif line.startswith("changed:") and task not in changed:
            changed.append(task)
    recap = re.search(r"localhost\s*: ok=\d+\s+changed=(\d+)", out)
    assert recap, out[-2000:]
    return changed


def _phase(env, phase: str, settings: Path, report: Path, *extra: str) -> dict:
    """Run the `upgrade` profile's phase; its results.json rows."""
    subprocess.run([str(BIN / "pytest"), "conformance/suite", "--profile", "upgrade", "--phase", phase,
                    "--settings", str(settings), "--report-dir", str(report), "-p", "no:cacheprovider", *extra],
                   cwd=ROOT, env=env, timeout=1800)
    return json.loads((report / "results.json").read_text())["requirements"]


def _status(rows: dict, rid: str) -> tuple[str, str]:
    return rows[rid]["status"], rows[rid]["message"]


def _rolled_out(kube, ns: str, name: str, timeout: float = 180) -> None:
    until = time.monotonic() + timeout
    while not rolled_out(kube.get(DEPLOYMENT, name, ns)):
        if time.monotonic() > until:
            raise TimeoutError(f"deployment {ns}/{name} did not roll out in {timeout:.0f}s")
        time.sleep(1)


def test_previous_to_current_with_jobs_running_queued_and_suspended(kube, ansible_env, tmp_path):
    previous_bundle, bundle = _bundle("MPIPLAT_PREVIOUS_BUNDLE"), _bundle("MPIPLAT_BUNDLE")
    settings = tmp_path / "settings.yml"
    previous_pins = [a for c in COMPONENTS for a in ("-e", f"{VERSION_VARS[c]}={pin(c)['previous']}")]
    _play(ansible_env, "playbooks/site.yml", "-e", f"mpiplat_bundle_dir={previous_bundle}",
          "-e", f"mpiplat_conformance_settings={settings}", *previous_pins)
    settings.write_text(settings.read_text() + f"upgrade:\n  job_seconds: {JOB_SECONDS}\n")

    before = _phase(ansible_env, "before", settings, tmp_path / "before")
    assert {rid: s for rid, r in before.items() if (s := r["status"]) != "not run"} == {
        f"UPG-0{i}": "partial" for i in range(1, 7)}, before

    upgrade = ["playbooks/upgrade.yml", "-e", f"mpiplat_bundle_dir={bundle}",
               "-e", f"mpiplat_conformance_settings={tmp_path / 'settings-after-upgrade.yml'}"]
    # A failed step: Kueue's new image cannot be pulled. The components before it are upgraded; its release is undone
    # and the old Kueue runs on; the message says how to resume, and the next run does.
    apps = client.AppsV1Api(kube.api_client)
    missing = {"kueue_values": {"controllerManager": {"manager": {"image": {"tag": "v0.0.0-missing"}}}},
               "kueue_wait_timeout": 30}
    failed = " ".join(_play(ansible_env, *upgrade, "-e", json.dumps(missing), fails=True).split())
    assert "kueue: helm could not install or upgrade release kueue to " in failed and "and undid it (atomic): what " \
        "ran before runs on. Nothing after it was changed. Fix the cause, then run the same playbook again" in failed, \
        failed[-3000:]
    _running(kube, {c: pin(c)["previous" if c == "kueue" else "version"] for c in COMPONENTS})
    _play(ansible_env, *upgrade)
    assert _changed(_play(ansible_env, *upgrade)) == [], "a re-run of upgrade.yml changed these tasks"

    # Fault: a controller left at its old version. UPG-05 fails naming it; undone, it rolls back out.
    deployment = apps.read_namespaced_deployment("mpi-operator", "mpi-operator")
    image = deployment.spec.template.spec.containers[0].image
    previous = pin("mpi-operator")["previous"]
    old = f"{image.rsplit(':', 1)[0]}:{split_image(pin('mpi-operator', previous)['images'][0])[2]}"
    patch = {"spec": {"template": {"spec": {"containers": [{"name": deployment.spec.template.spec.containers[0].name,
                                                            "image": old}]}}}}
    apps.patch_namespaced_deployment("mpi-operator", "mpi-operator", patch)
    try:
        _rolled_out(kube, "mpi-operator", "mpi-operator")
        rows = _phase(ansible_env, "after", settings, tmp_path / "fault-version", "--only", "UPG-05", "--keep")
        status, message = _status(rows, "UPG-05")
        assert status == "failed" and f"mpi-operator: mpi-operator/mpi-operator runs {previous}" in message, \
            (status, message)
    finally:
        patch["spec"]["template"]["spec"]["containers"][0]["image"] = image
        apps.patch_namespaced_deployment("mpi-operator", "mpi-operator", patch)
        _rolled_out(kube, "mpi-operator", "mpi-operator")

    # Fault: the MPIJob CRD's version no longer served while the recorded jobs use it. UPG-06 fails naming it.
    crds = client.ApiextensionsV1Api(kube.api_client)
    crd = "mpijobs.kubeflow.org"
    version = crds.read_custom_resource_definition(crd).spec.versions[0].name
    served = [{"op": "replace", "path": "/spec/versions/0/served", "value": False}]
    crds.patch_custom_resource_definition(crd, served)
    try:
        rows = _phase(ansible_env, "after", settings, tmp_path / "fault-crd", "--only", "UPG-06", "--keep")
        status, message = _status(rows, "UPG-06")
        assert status == "failed" and f"{crd}: {version} holds stored objects but is no longer served" in message \
            and "the long MPIJob recorded before cannot be read at kubeflow.org/" in message, \
            (status, message)
    finally:
        served[0]["value"] = True
        crds.patch_custom_resource_definition(crd, served)

    after = _phase(ansible_env, "after", settings, tmp_path / "after", "--strict-verdicts")
    assert {rid: r["status"] for rid, r in after.items() if r["status"] != "not run"} == {
        f"UPG-0{i}": "passed" for i in range(1, 8)}, {rid: r["message"] for rid, r in after.items()
                                                      if rid.startswith("UPG")}
    assert after["UPG-01"]["evidence"] == "real", after["UPG-01"]
