"""FAIL: failures are detected fast and diagnosed with a cause and a remedy."""

from __future__ import annotations

import time

import pytest
from kubernetes import watch

from mpiplat import jobs
from mpiplat.conformance.watch import JOB_LABEL, ROLE_LABEL, all_running, condition_times, wait_pods
from mpiplat.diagnose import diagnose
from mpiplat.kube import MPIJOB


@pytest.mark.requirement("FAIL-01", needs=["simulated"])
def test_worker_oom_fails_the_job_fast_and_is_diagnosed(kube, run, settings, request):
    """KWOK failure injection: worker 1 is OOMKilled (exit 137); as on a real cluster, mpirun in the
    launcher then exits non-zero a moment later."""
    ns = run.namespace()
    spec = jobs.MPIJobSpec(name="oom", namespace=ns, workers=3, image=settings.images["OpenMPI"],
                           launcher_annotations={jobs.COMPLETE_AFTER: "120s"})
    kube.create(MPIJOB, jobs.mpijob(spec))
    workers = wait_pods(kube, ns, f"{JOB_LABEL}=oom,{ROLE_LABEL}=worker", all_running(3), timeout=120)
    launcher = wait_pods(kube, ns, f"{JOB_LABEL}=oom,{ROLE_LABEL}=launcher", all_running(1), timeout=60)[0]
    victim = next(p for p in workers if p.metadata.labels.get("training.kubeflow.org/replica-index") == "1")
    annotate = {"metadata": {"labels": {jobs.FAIL_LABEL: "true"}, "annotations": {
        jobs.FAIL_REASON: "OOMKilled", jobs.FAIL_EXIT_CODE: "137", jobs.FAIL_DELAY: "100ms"}}}
    kube.core.patch_namespaced_pod(victim.metadata.name, ns, annotate)
    w = watch.Watch()
    for ev in w.stream(kube.core.list_namespaced_pod, ns, field_selector=f"metadata.name={victim.metadata.name}",
                       timeout_seconds=60):
        if ev["object"].status.phase == "Failed":
            w.stop()
    died = time.monotonic()
    kube.core.patch_namespaced_pod(launcher.metadata.name, ns, {"metadata": {
        "labels": {jobs.FAIL_LABEL: "true"},
        "annotations": {jobs.FAIL_REASON: "Error", jobs.FAIL_EXIT_CODE: "1", jobs.FAIL_DELAY: "500ms"}}})
    condition_times(kube, MPIJOB, "oom", ns, until=("Failed",), timeout=60)
    detect = time.monotonic() - died
    target = settings.thresholds["failure_to_failed_s"]
    run.record("FAIL-01", "worker death -> job Failed", detect, "s", target)
    found = diagnose(kube, ns, "oom", settings.gpu_resource)
    request.node._mpiplat_diagnosis = str(found)
    assert detect < target
    assert found.cause == "worker 1 OOMKilled (exit 137)", str(found)
    assert "memory limit" in found.remedy


def _pull_failure(pods) -> bool:
    return any(cs.state and cs.state.waiting and cs.state.waiting.reason in ("ErrImagePull", "ImagePullBackOff")
               for p in pods for cs in (p.status.container_statuses or []))


@pytest.mark.requirement("FAIL-02", needs=["pod_network"])
def test_bad_image_holds_the_job_before_training_with_a_pull_reason(kube, run, settings):
    """Workers that cannot pull their image never become ready, so the launcher (mpirun) is never
    created: no rank starts training on a partial set of workers. The diagnosis names the pull error."""
    ns = run.namespace()
    spec = jobs.MPIJobSpec(name="badimage", namespace=ns, workers=2, image="registry.invalid/mpiplat/no-such-image:0",
                           node_selector=dict(settings.node_selector), tolerations=list(settings.tolerations))
    kube.create(MPIJOB, jobs.mpijob(spec))
    wait_pods(kube, ns, f"{JOB_LABEL}=badimage,{ROLE_LABEL}=worker", _pull_failure, timeout=180)
    launchers = kube.core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}=badimage,{ROLE_LABEL}=launcher")
    assert launchers.items == [], "a launcher started although the workers cannot pull their image"
    found = diagnose(kube, ns, "badimage", settings.gpu_resource)
    assert "ImagePull" in found.cause, str(found)
    assert "image" in found.remedy, str(found)
