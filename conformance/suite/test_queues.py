"""INS-03 and SCH/FAIL rows that go through the teams' Kueue queues."""

from __future__ import annotations

import time

import pytest
from kubernetes.client.exceptions import ApiException

from mpiplat import jobs
from mpiplat.conformance.watch import JOB_LABEL, condition_times
from mpiplat.diagnose import diagnose
from mpiplat.kube import CLUSTERQUEUE, MPIJOB, TRAINJOB, WORKLOAD, has_condition
from mpiplat.queues import gpu_capacity


def _team(settings, i: int = 0):
    if len(settings.teams) <= i:
        pytest.skip(f"needs {i + 1} team(s) in the settings file")
    return settings.teams[i]


def _job(mpijob_spec, name: str, ns: str, workers: int, **kw) -> dict:
    return jobs.mpijob(mpijob_spec(name, ns, workers=workers, gpus_per_worker=1, queue="lq", **kw))


def _workload(kube, ns: str, job: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [w for w in kube.list(WORKLOAD, ns)
                 if any(o.get("name") == job for o in w["metadata"].get("ownerReferences", []))]
        if found:
            return found[0]
        time.sleep(0.3)
    raise TimeoutError(f"no Workload for {ns}/{job} after {timeout}s")


def _pods(kube, ns: str, job: str) -> list:
    return kube.core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}={job}").items


def _kueue_suspends(kube, kind, manifest: dict) -> bool:
    """Whether Kueue's webhook suspends a queue-labelled job: a server-side dry run, which changes nothing."""
    created = kube.custom.create_namespaced_custom_object(kind.group, kind.version, manifest["metadata"]["namespace"],
                                                          kind.plural, manifest, dry_run="All")
    spec = created["spec"]
    return bool(spec.get("runPolicy", {}).get("suspend") if kind == MPIJOB else spec.get("suspend"))


@pytest.mark.read_only
@pytest.mark.requirement("INS-03")
def test_kueue_integrations_and_every_team_queue_active(kube, settings, mpijob_spec, trainjob_spec):
    # Kueue manages a framework when its webhook suspends that framework's queued jobs until admission.
    ns = "default"
    probes = {"kubeflow.org/mpijob": (MPIJOB, jobs.mpijob(mpijob_spec("ins03-probe", ns, queue="lq"))),
              "trainer.kubeflow.org/trainjob": (TRAINJOB, jobs.trainjob(trainjob_spec("ins03-probe", ns, queue="lq")))}
    unmanaged = []
    for framework, (kind, manifest) in probes.items():
        try:
            if not _kueue_suspends(kube, kind, manifest):
                unmanaged.append(f"{framework}: a queued job was not suspended (the integration is off)")
        except ApiException as err:
            unmanaged.append(f"{framework}: dry run answered {err.status} {err.reason}: {(err.body or '')[:300]}")
    assert not unmanaged, "Kueue does not manage: " + "; ".join(unmanaged)
    inactive = []
    for team in settings.teams:
        try:
            cq = kube.get(CLUSTERQUEUE, team.cluster_queue)
        except ApiException as err:
            inactive.append(f"{team.cluster_queue}: {err.status}")
            continue
        if not has_condition(cq, "Active"):
            inactive.append(team.cluster_queue)
    assert not inactive, f"ClusterQueues missing or not Active: {inactive}"


@pytest.mark.requirement("SCH-01")
def test_gang_two_jobs_that_fit_alone_but_not_together(kube, run, settings, mpijob_spec):
    team = _team(settings)
    cap = gpu_capacity(kube, team.cluster_queue, settings.gpu_resource)
    size = cap.available // 2 + 1
    if cap.available < 2 or size > cap.available:
        pytest.skip(f"ClusterQueue {team.cluster_queue} has {cap.available} GPUs available; needs 2 or more idle")
    ns = run.namespace(team)
    kube.create(MPIJOB, _job(mpijob_spec, "first", ns, size, launcher_annotations={jobs.COMPLETE_AFTER: "8s"}))
    condition_times(kube, MPIJOB, "first", ns, until=("Running",), timeout=120)
    kube.create(MPIJOB, _job(mpijob_spec, "second", ns, size, launcher_annotations={jobs.COMPLETE_AFTER: "3s"}))
    wl = _workload(kube, ns, "second")
    time.sleep(3)
    wl = kube.get(WORKLOAD, wl["metadata"]["name"], ns)
    assert not has_condition(wl, "QuotaReserved"), "the second job was admitted although it cannot fit"
    assert _pods(kube, ns, "second") == [], "the queued job has pods: no gang admission"
    run.record("SCH-01", "GPUs per job (each fits alone)", size)


@pytest.mark.requirement("SCH-02")
def test_queued_job_is_admitted_when_quota_frees(kube, run, settings, mpijob_spec):
    team = _team(settings)
    cap = gpu_capacity(kube, team.cluster_queue, settings.gpu_resource)
    if cap.available < 3:
        pytest.skip(f"ClusterQueue {team.cluster_queue} has {cap.available} idle GPUs; needs 3 or more")
    ns = run.namespace(team)
    # The hog leaves one GPU free: too few for the next job's 2 workers until the hog finishes.
    kube.create(MPIJOB, _job(mpijob_spec, "hog", ns, cap.available - 1,
                             launcher_annotations={jobs.COMPLETE_AFTER: "8s"}))
    condition_times(kube, MPIJOB, "hog", ns, until=("Running",), timeout=120)
    kube.create(MPIJOB, _job(mpijob_spec, "next", ns, 2, launcher_annotations={jobs.COMPLETE_AFTER: "2s"}))
    wl = _workload(kube, ns, "next")
    assert not has_condition(kube.get(WORKLOAD, wl["metadata"]["name"], ns), "QuotaReserved")
    seen = condition_times(kube, MPIJOB, "next", ns, until=("Succeeded", "Failed"), timeout=180)
    assert "Succeeded" in seen, seen
    assert has_condition(kube.get(MPIJOB, "hog", ns), "Succeeded")


@pytest.mark.requirement("SCH-03")
def test_cohort_borrowing_between_two_teams(kube, run, settings, mpijob_spec):
    team, other = _team(settings, 0), _team(settings, 1)
    cap = gpu_capacity(kube, team.cluster_queue, settings.gpu_resource)
    if cap.borrowable < 1 or cap.nominal - cap.reserved < 0:
        pytest.skip(f"{team.cluster_queue} cannot borrow (no cohort with idle GPUs from {other.cluster_queue})")
    ns = run.namespace(team)
    size = cap.nominal - cap.reserved + 1  # one GPU more than its own quota: only borrowing admits it
    kube.create(MPIJOB, _job(mpijob_spec, "borrower", ns, size, launcher_annotations={jobs.COMPLETE_AFTER: "5s"}))
    seen = condition_times(kube, MPIJOB, "borrower", ns, until=("Succeeded", "Failed"), timeout=180)
    assert "Succeeded" in seen, seen
    run.record("SCH-03", "GPUs borrowed from the cohort", size - (cap.nominal - cap.reserved))


@pytest.mark.requirement("SCH-05")
def test_pods_that_cannot_become_ready_are_evicted_and_requeued(kube, run, settings, mpijob_spec):
    team = _team(settings)
    ns = run.namespace(team)
    # The settings' selector plus one that no node matches: admitted, never schedulable.
    kube.create(MPIJOB, _job(mpijob_spec, "stuck", ns, 2, node_selector={"mpiplat.io/no-such-node": "true"}))
    wl = _workload(kube, ns, "stuck")
    name = wl["metadata"]["name"]
    start = time.monotonic()
    timeout = settings.thresholds["pods_ready_timeout_s"]
    evicted = kube.wait_for(WORKLOAD, name, ns, lambda w: has_condition(w, "Evicted")
                            or (w.get("status", {}).get("requeueState") or {}).get("count", 0) > 0,
                            timeout=timeout, what="eviction for PodsReadyTimeout")
    run.record("SCH-05", "admission -> eviction (waitForPodsReady)", time.monotonic() - start, "s")
    reasons = {c["type"]: c.get("reason") for c in evicted["status"].get("conditions", [])}
    assert reasons.get("Evicted") == "PodsReadyTimeout" or evicted["status"].get("requeueState"), reasons
    job = kube.get(MPIJOB, "stuck", ns)
    assert job["spec"]["runPolicy"]["suspend"] is True or evicted["status"].get("requeueState"), "not requeued"


@pytest.mark.requirement("FAIL-04")
def test_job_larger_than_the_cluster_waits_with_a_clear_message(kube, run, settings, mpijob_spec, request):
    team = _team(settings)
    cap = gpu_capacity(kube, team.cluster_queue, settings.gpu_resource)
    ns = run.namespace(team)
    needs = cap.nominal + cap.borrowable + 8
    kube.create(MPIJOB, _job(mpijob_spec, "huge", ns, needs))
    wl = _workload(kube, ns, "huge")
    time.sleep(3)
    assert not has_condition(kube.get(WORKLOAD, wl["metadata"]["name"], ns), "QuotaReserved")
    assert _pods(kube, ns, "huge") == []
    found = diagnose(kube, ns, "huge", settings.gpu_resource)
    request.node._mpiplat_diagnosis = str(found)
    assert found.state in ("Queued", "Suspended", "Created"), str(found)
    assert f"job needs {needs}" in found.cause and f"has {cap.nominal} GPUs" in found.cause, str(found)
