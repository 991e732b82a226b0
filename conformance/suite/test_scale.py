"""SCALE: many concurrent MPIJobs, and one large one."""

from __future__ import annotations

import time

import pytest

from mpiplat import jobs
from mpiplat.conformance.watch import (
    JOB_LABEL,
    ROLE_LABEL,
    all_running,
    condition_times,
    percentile,
    submit,
    submit_job,
    wait_pods,
)
from mpiplat.kube import MPIJOB, has_condition


@pytest.mark.requirement("SCALE-01")
def test_many_concurrent_mpijobs_across_namespaces_all_complete(kube, run, settings, mpijob_spec):
    count, spaces = int(settings.thresholds["scale_jobs"]), int(settings.thresholds["scale_namespaces"])
    namespaces = [run.namespace() for _ in range(spaces)]
    latencies = []
    start = time.monotonic()
    names = []
    for i in range(count):
        ns = namespaces[i % spaces]
        _, latency = submit(kube, MPIJOB, jobs.mpijob(mpijob_spec(
            f"s{i}", ns, workers=2, launcher_annotations={jobs.COMPLETE_AFTER: "5s"})))
        latencies.append(latency)
        names.append((ns, f"s{i}"))
    for ns, name in names:
        condition_times(kube, MPIJOB, name, ns, until=("Succeeded", "Failed"), timeout=600)
    total = time.monotonic() - start
    failed = [n for ns, n in names if not has_condition(kube.get(MPIJOB, n, ns), "Succeeded")]
    run.record("SCALE-01", "concurrent MPIJobs", count)
    run.record("SCALE-01", "namespaces", spaces)
    run.record("SCALE-01", "API create latency p50", percentile(latencies, 50) * 1000, "ms")
    run.record("SCALE-01", "API create latency p99", percentile(latencies, 99) * 1000, "ms")
    run.record("SCALE-01", "all jobs submitted -> all Succeeded", total, "s")
    assert not failed, f"jobs not Succeeded: {failed}"


@pytest.mark.requirement("SCALE-02")
def test_one_hundred_worker_mpijob_runs(kube, run, settings, mpijob_spec):
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
    assert len(hostfile) == workers
    assert "Succeeded" in seen, seen
    assert to_running < target
