"""SCALE: many concurrent MPIJobs, and one large one."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes.client.exceptions import ApiException

from mpiplat import jobs
from mpiplat.conformance.watch import (
    JOB_LABEL,
    ROLE_LABEL,
    all_running,
    condition_times,
    percentile,
    pods_left,
    submit,
    submit_job,
    wait_pods,
)
from mpiplat.diagnose import diagnose
from mpiplat.kube import MPIJOB, WORKLOAD, ConditionWatch, owner_name

SUBMITTERS = 16  # client threads submitting at once, as CI pipelines or a notebook's loop would


def _peak(spans: list[tuple[float, float]]) -> int:
    """The most (start, end) spans open at one time."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = open_now = 0
    for _, step in events:
        open_now += step
        most = max(most, open_now)
    return most


def _release(kube, namespace: str, pod: str) -> None:
    """End a held launcher now: the simulated nodes complete it at its new COMPLETE_AFTER (real pods ignore it)."""
    try:
        kube.core.patch_namespaced_pod(pod, namespace, {"metadata": {"annotations": {jobs.COMPLETE_AFTER: "0s"}}})
    except ApiException as err:
        if err.status != 404:  # a pod gone meanwhile needs no release
            raise


@pytest.mark.requirement("SCALE-01")
def test_many_concurrent_mpijobs_across_namespaces_all_complete(kube, run, settings, mpijob_spec):
    """`scale_jobs` MPIJobs of 2 workers, submitted at once by SUBMITTERS threads into `scale_namespaces`
    namespaces that take turns among the settings' teams (each its team's LocalQueue, so Kueue admits every
    job), are all admitted, Running and Succeeded. Launchers are held until every job was seen Running (at
    most `scale_all_running_s` each, on simulated nodes), so a cluster that meets that target has every job
    Running at once; then the test releases them, and waits until the operator has deleted the ended jobs'
    workers (cleanPodPolicy Running), so that the next timed row does not pay for their deletion.

    Figures against the catalog's targets: submit -> admitted p95 (Kueue), admitted -> Running p95 (the job's
    pods created, scheduled and started) and first submission -> every job Running (or already Succeeded).
    Reported beside them: the API's create latency and submit -> Created (mpi-operator; under a burst it
    measures the operator's throughput, JOB-06 holds one job's to its target) p50/p95/p99, submit ->
    admitted's two parts p50/p95 (submit -> Workload created: Kueue's job reconciler; Workload created ->
    admitted: its scheduler), admitted -> Running p50 and the most jobs Running at once. Fails on a target
    missed, on a job that does not succeed, on workers not deleted within 120 s, or on an eviction (Kueue's
    waitForPodsReady gave up on a job whose pods were too slow to start)."""
    t = settings.thresholds
    count, spaces = int(t["scale_jobs"]), int(t["scale_namespaces"])
    teams = [team for team in settings.teams if team.cluster_queue]
    if not teams:
        pytest.skip("no team in the settings has a ClusterQueue: SCALE-01 measures admission through Kueue")
    hold = max(5, int(t["scale_all_running_s"]))  # the longest a launcher runs unless released
    namespaces = [run.namespace(teams[i % len(teams)]) for i in range(spaces)]
    keys = [(namespaces[i % spaces], f"s{i}") for i in range(count)]
    manifests = [jobs.mpijob(mpijob_spec(name, ns, workers=2, queue="lq",
                                         launcher_annotations={jobs.COMPLETE_AFTER: f"{hold}s"}))
                 for ns, name in keys]
    job_watch = ConditionWatch(kube, MPIJOB, namespaces, ("Created", "Running", "Succeeded", "Failed"))
    workload_watch = ConditionWatch(kube, WORKLOAD, namespaces, ("Admitted", "Evicted"), name_of=owner_name)
    try:
        first = time.monotonic()

        def _submit(manifest: dict) -> tuple[float, float]:
            start = time.monotonic()
            _, latency = submit(kube, MPIJOB, manifest)
            return start, latency

        with ThreadPoolExecutor(SUBMITTERS) as pool:
            submitted = list(pool.map(_submit, manifests))
            job_watch.wait_any(keys, ("Running", "Succeeded", "Failed"), timeout=kube.waited(hold + 600))
            launchers = [(ns, pod.metadata.name) for ns in namespaces for pod in kube.core.list_namespaced_pod(
                ns, label_selector=f"{ROLE_LABEL}=launcher").items]
            list(pool.map(lambda key: _release(kube, *key), launchers))
        job_watch.wait_any(keys, ("Succeeded", "Failed"), timeout=kube.waited(hold + 60))
        workload_watch.wait_for([(ns, name, "Admitted") for ns, name in keys], timeout=kube.waited(10))
        # The row ends when the finished jobs' workers are gone, so the next timed row does not pay for them.
        ended = time.monotonic()
        workers_left = pods_left(kube, namespaces, f"{ROLE_LABEL}=worker", 120)
        workers_gone_s = time.monotonic() - ended
    finally:
        job_watch.stop()
        workload_watch.stop()
    jobs_seen, wl_seen = job_watch.seen, workload_watch.seen

    def since_submit(condition: str, seen: dict) -> list[float]:
        return [seen[(ns, name, condition)] - start
                for (ns, name), (start, _) in zip(keys, submitted, strict=True) if (ns, name, condition) in seen]

    def reached_running(ns: str, name: str) -> float | None:
        return jobs_seen.get((ns, name, "Running"), jobs_seen.get((ns, name, "Succeeded")))

    latencies = [latency for _, latency in submitted]
    to_created, to_admitted = since_submit("Created", jobs_seen), since_submit("Admitted", wl_seen)
    wl_first = workload_watch.first_seen
    to_workload = [wl_first[key] - start for key, (start, _) in zip(keys, submitted, strict=True) if key in wl_first]
    workload_to_admitted = [wl_seen[(ns, n, "Admitted")] - wl_first[(ns, n)] for ns, n in keys
                            if (ns, n) in wl_first and (ns, n, "Admitted") in wl_seen]
    running = {k: reached_running(*k) for k in keys}
    admitted_to_running = [running[(ns, n)] - wl_seen[(ns, n, "Admitted")] for ns, n in keys
                           if running[(ns, n)] is not None and (ns, n, "Admitted") in wl_seen]
    all_running_s = max(running.values()) - first if None not in running.values() else float("inf")
    peak = _peak([(running[(ns, n)], jobs_seen[(ns, n, "Succeeded")]) for ns, n in keys
                  if running[(ns, n)] is not None and (ns, n, "Succeeded") in jobs_seen])
    evicted = sorted(f"{ns}/{n}" for ns, n in keys if (ns, n, "Evicted") in wl_seen)
    not_succeeded = sorted(f"{ns}/{n}" for ns, n in keys if (ns, n, "Succeeded") not in jobs_seen)

    run.record("SCALE-01", "concurrent MPIJobs (2 workers each)", count)
    run.record("SCALE-01", "namespaces", spaces)
    for pct in (50, 95, 99):
        run.record("SCALE-01", f"API create latency p{pct}", percentile(latencies, pct) * 1000, "ms")
    for pct in (50, 95, 99) if to_created else ():
        run.record("SCALE-01", f"submit -> Created p{pct}", percentile(to_created, pct), "s")
    for figure, values in (("submit -> Workload created", to_workload),
                           ("Workload created -> admitted", workload_to_admitted)):
        for pct in (50, 95) if values else ():
            run.record("SCALE-01", f"{figure} p{pct}", percentile(values, pct), "s")
    p95_admitted = percentile(to_admitted, 95) if to_admitted else float("inf")
    run.record("SCALE-01", "submit -> admitted p95", p95_admitted, "s", t["submit_to_admitted_p95_s"])
    p95_to_running = percentile(admitted_to_running, 95) if admitted_to_running else float("inf")
    if admitted_to_running:
        run.record("SCALE-01", "admitted -> Running p50", percentile(admitted_to_running, 50), "s")
    run.record("SCALE-01", "admitted -> Running p95", p95_to_running, "s", t["admitted_to_running_s"])
    run.record("SCALE-01", "first submission -> every job Running", all_running_s, "s", t["scale_all_running_s"])
    run.record("SCALE-01", "most jobs Running at once", peak)
    run.record("SCALE-01", "jobs evicted (waitForPodsReady)", len(evicted))
    run.record("SCALE-01", "every job ended -> its workers deleted", workers_gone_s, "s")
    first_left = not_succeeded[0].split("/") if not_succeeded else None
    problems = [f"{len(not_succeeded)} jobs did not succeed: {not_succeeded[:5]}; the first: "
                f"{diagnose(kube, *first_left)}" if first_left else "",
                f"{len(evicted)} jobs evicted by Kueue: {evicted[:5]}" if evicted else "",
                f"{workers_left} worker pods of ended jobs left {workers_gone_s:.0f}s after the last ended "
                "(cleanPodPolicy Running deletes them)" if workers_left else "",
                f"submit -> admitted p95 {p95_admitted:.1f}s > {t['submit_to_admitted_p95_s']}s"
                if p95_admitted > t["submit_to_admitted_p95_s"] else "",
                f"admitted -> Running p95 {p95_to_running:.1f}s > {t['admitted_to_running_s']}s"
                if p95_to_running > t["admitted_to_running_s"] else "",
                f"every job Running after {all_running_s:.1f}s > {t['scale_all_running_s']}s"
                if all_running_s > t["scale_all_running_s"] else ""]
    assert not any(problems), "; ".join(p for p in problems if p)


@pytest.mark.requirement("SCALE-02")
def test_one_large_mpijob_runs_with_every_worker_in_its_hostfile(kube, run, settings, mpijob_spec):
    """One MPIJob of `scale_workers` workers: all of them Running within admitted_to_running_s of submission
    (it carries no queue label, so it is admitted at once), the hostfile lists each, and the job succeeds."""
    workers = int(settings.thresholds["scale_workers"])
    ns = run.namespace()
    start = time.monotonic()
    submit_job(kube, mpijob_spec("big", ns, workers=workers, cpu="10m", memory="16Mi",
                                 launcher_annotations={jobs.COMPLETE_AFTER: "10s"}))
    wait_pods(kube, ns, f"{JOB_LABEL}=big,{ROLE_LABEL}=worker", all_running(workers), timeout=300)
    to_running = time.monotonic() - start
    hostfile = kube.core.read_namespaced_config_map("big-config", ns).data["hostfile"].splitlines()
    target = settings.thresholds["admitted_to_running_s"]
    run.record("SCALE-02", "workers", workers)
    run.record("SCALE-02", "submit -> all workers Running", to_running, "s", target)
    seen = condition_times(kube, MPIJOB, "big", ns, until=("Succeeded", "Failed"), timeout=300)
    assert sorted(hostfile) == sorted(f"big-worker-{i}.big.{ns}.svc slots=1" for i in range(workers))
    assert "Succeeded" in seen, seen
    assert to_running < target
