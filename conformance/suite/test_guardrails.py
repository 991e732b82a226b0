"""Admission guardrails (ValidatingAdmissionPolicies installed by the guardrails role)."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mpiplat import jobs
from mpiplat.kube import MPIJOB

QUOTA_LABEL = {"mpiplat.io/gpu-quota": "true"}  # guardrails_quota_selector's default


def _rejected(kube, manifest: dict) -> tuple[str, float]:
    start = time.monotonic()
    try:
        kube.create(MPIJOB, manifest)
    except ApiException as err:
        elapsed = time.monotonic() - start
        assert err.status in (400, 403, 422), err
        return json.loads(err.body)["message"], elapsed
    kube.delete(MPIJOB, manifest["metadata"]["name"], manifest["metadata"]["namespace"])
    pytest.fail(f"{manifest['metadata']['name']} was admitted")


def _job(settings, name: str, ns: str, **kw) -> dict:
    return jobs.mpijob(jobs.MPIJobSpec(name=name, namespace=ns, image=settings.images["OpenMPI"],
                                       gpu_resource=settings.gpu_resource, **kw))


@pytest.mark.requirement("FAIL-03")
def test_request_above_the_namespace_gpu_quota_is_rejected_at_submit(kube, run, settings):
    ns = run.namespace()
    gpu = settings.gpu_resource
    kube.core.create_namespaced_resource_quota(ns, client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="gpus", labels=QUOTA_LABEL),
        spec=client.V1ResourceQuotaSpec(hard={f"requests.{gpu}": "8"})))
    kube.core.create_namespaced_pod(ns, client.V1Pod(
        metadata=client.V1ObjectMeta(name="gpu-user"),
        spec=client.V1PodSpec(automount_service_account_token=False, containers=[client.V1Container(
            name="c", image="busybox", resources=client.V1ResourceRequirements(
                requests={gpu: "4"}, limits={gpu: "4"}))])))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        used = (kube.core.read_namespaced_resource_quota("gpus", ns).status.used or {}).get(f"requests.{gpu}")
        if used == "4":
            break
        time.sleep(0.3)
    message, elapsed = _rejected(kube, _job(settings, "greedy", ns, workers=3, gpus_per_worker=2))
    run.record("FAIL-03", "quota rejection latency", elapsed, "s", settings.thresholds["quota_rejection_s"])
    assert "Requested 6 GPUs (3 workers x 2 GPUs); namespace quota 8, used 4, available 4" in message, message
    assert elapsed < settings.thresholds["quota_rejection_s"]
    assert kube.core.list_namespaced_pod(ns, label_selector="training.kubeflow.org/job-name=greedy").items == []
    kube.create(MPIJOB, _job(settings, "modest", ns, workers=2, gpus_per_worker=2,
                             launcher_annotations={jobs.COMPLETE_AFTER: "2s"}))  # 4 fit: admitted


@pytest.mark.requirement("JOB-05")
@pytest.mark.parametrize("workers", ["below", "above"])
def test_worker_counts_outside_the_range_are_rejected_at_submit(kube, run, settings, workers):
    lo, hi = int(settings.thresholds["min_workers"]), int(settings.thresholds["max_workers"])
    count = lo - 1 if workers == "below" else hi + 1
    ns = run.namespace()
    message, _ = _rejected(kube, _job(settings, f"n{count}", ns, workers=max(count, 1)))
    assert f"MPIJob worker count {count} is outside the allowed range {lo}..{hi}" in message, message


@pytest.mark.requirement("ISO-04")
def test_names_that_break_hostfiles_are_rejected(kube, run, settings):
    ns = run.namespace()
    manifest = _job(settings, "train-v1", ns, workers=2)
    manifest["metadata"]["name"] = "train.v1"
    message, _ = _rejected(kube, manifest)
    assert 'MPIJob name "train.v1" contains dots, which break MPI hostfiles' in message, message
    assert message.endswith('e.g. "train-v1"'), message
