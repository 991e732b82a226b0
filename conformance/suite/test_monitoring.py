"""MON: the cluster's Prometheus (settings `prometheus`) sees MPI training: a failed job, a job that waits
too long for quota, and the data behind each query of the MPIJob Overview dashboard."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime

import pytest

from mpiplat import jobs
from mpiplat.conformance import capabilities as caps
from mpiplat.conformance.watch import (
    JOB_LABEL,
    ROLE_LABEL,
    all_running,
    condition_times,
    submit_job,
    wait_pods,
)
from mpiplat.kube import MPIJOB
from mpiplat.queues import gpu_capacity

DASHBOARD = "mpiplat-mpijob-overview-dashboard"
# cAdvisor's block I/O counters: absent where the kernel does not account block I/O to containers' cgroups.
DISK_IO = ("container_fs_reads_bytes_total", "container_fs_writes_bytes_total")
RISE_SLACK_S = 2  # how much earlier than a job's Failed condition (1 s resolution) its failure may be counted
PENDING_WAIT_MAX_S = 300  # MON-02 waits for MPIJobPendingTooLong to fire only where its threshold is below this


def _ts(value: str) -> float:
    """Prometheus's RFC 3339 time (nanoseconds) as epoch seconds."""
    return datetime.fromisoformat(re.sub(r"(\.\d{6})\d+", r"\1", value.replace("Z", "+00:00"))).timestamp()


def _rule(prometheus, name: str) -> dict:
    """The loaded alerting rule `name`, once evaluated."""
    rules = prometheus.evaluated_alerting_rules([name])
    assert name in rules, (f"alert rule {name} is not loaded in Prometheus (it has {sorted(rules)}): "
                           "the monitoring role's PrometheusRule must be selected by this Prometheus")
    rule = rules[name]
    assert rule["health"] == "ok", f"alert rule {name}: health {rule['health']}: {rule.get('lastError')}"
    return rule


def _other_failures(kube, ns: str, name: str, since: float, until: float) -> list[str]:
    """The MPIJobs of the whole cluster other than ns/name that failed between `since` and `until` (epoch s)."""
    found = []
    for job in kube.custom.list_cluster_custom_object(MPIJOB.group, MPIJOB.version, MPIJOB.plural)["items"]:
        meta = job["metadata"]
        if (meta["namespace"], meta["name"]) == (ns, name):
            continue
        for cond in (job.get("status") or {}).get("conditions") or []:
            if cond["type"] == "Failed" and cond["status"] == "True" \
                    and since <= _ts(cond["lastTransitionTime"]) <= until:
                found.append(f"{meta['namespace']}/{meta['name']}")
    return found


def _alert(prometheus, name: str, state: str = "firing", **labels: str) -> dict | None:
    """The alert `name` in `state` (pending or firing) whose labels include `labels`, if any."""
    for alert in prometheus.alerts():
        if alert["labels"].get("alertname") == name and alert["state"] == state \
                and labels.items() <= alert["labels"].items():
            return alert
    return None


@pytest.mark.requirement("MON-01")
@pytest.mark.before_failures
def test_failed_mpijob_reaches_prometheus_and_fires_mpijobfailed(kube, run, settings, capabilities, mpijob_spec,
                                                                 prometheus, evidence):
    """A job that fails raises mpi_operator_jobs_failed_total in Prometheus within metric_visible_s (SC-016:
    from its Failed condition to the first scraped sample that counts it), and MPIJobFailed is firing at the
    first evaluation of its rule that follows, within failed_to_alert_s.
    The counter has no labels, so the rise must be this job's alone: no earlier than its Failed condition (less
    RISE_SLACK_S, the condition's 1 s resolution), and by one, or by more only where no other MPIJob in the
    cluster failed meanwhile (mpi-operator counts a failure once per sync that sees it before its cache has the
    Failed condition: twice under load); another job's failure fails the test. The alert is this job's only where
    it was not already firing (the suite runs this test before those whose jobs fail); otherwise the row is partial."""
    t = settings.thresholds
    _rule(prometheus, "MPIJobFailed")
    already = _alert(prometheus, "MPIJobFailed")
    base = prometheus.query("sum(mpi_operator_jobs_failed_total)")
    assert base, ("Prometheus has no mpi_operator_jobs_failed_total: it does not scrape the MPI Operator, which "
                  "serves /metrics only when started with --monitoring-port (roles/monitoring/README.md)")
    before, offset = float(base[0]["value"][1]), prometheus.clock_offset()
    ns = run.namespace()
    if capabilities.simulated:  # the launcher fails on its KWOK node
        spec = mpijob_spec("fails", ns, workers=2, launcher_labels={jobs.FAIL_LABEL: "true"},
                           launcher_annotations={jobs.FAIL_DELAY: "1s", jobs.FAIL_EXIT_CODE: "1"})
    elif capabilities.pod_network:  # mpirun fails on real pods
        spec = mpijob_spec("fails", ns, real=True, workers=2, command=["false"])
    else:
        pytest.skip(f"MON-01: {caps.WHY_NOT['simulated']}, or {caps.WHY_NOT['pod_network']}")
    start, local_submit = time.monotonic(), time.time()
    submitted = local_submit + offset
    submit_job(kube, spec)
    seen = condition_times(kube, MPIJOB, "fails", ns, until=("Failed", "Succeeded"), timeout=120, start=start)
    assert "Failed" in seen, f"the job made to fail ended {list(seen)}"
    failed = submitted + seen["Failed"]  # on Prometheus's clock
    visible = alerted = None
    until = kube.deadline(max(t["metric_visible_s"], t["failed_to_alert_s"]) + 30)
    while alerted is None and time.monotonic() < until:
        if visible is None:
            rises = sorted((t1, v1 - v0 if v1 >= v0 else v1)  # v1 < v0: the operator restarted
                           for series in prometheus.samples("mpi_operator_jobs_failed_total", "5m")
                           for (_, v0), (t1, v1) in zip(series, series[1:], strict=False)
                           if t1 >= submitted and v1 != v0)
            if rises:
                at, by = rises[0]
                others = [] if by == 1 else _other_failures(
                    kube, ns, "fails", local_submit - RISE_SLACK_S, at - offset + RISE_SLACK_S)
                assert not others and at >= failed - RISE_SLACK_S, (
                    f"mpi_operator_jobs_failed_total rose by {by:g} at {at - failed:+.1f}s from this job's Failed "
                    f"condition; other MPIJobs failed meanwhile ({', '.join(others) or 'none'}), so the rise "
                    "cannot be told to be this job's")
                visible = at
        if visible is not None:
            rule, alert = _rule(prometheus, "MPIJobFailed"), _alert(prometheus, "MPIJobFailed")
            evaluated = _ts(rule["lastEvaluation"])
            if alert and evaluated >= visible:
                alerted = max(evaluated, _ts(alert["activeAt"]))
        time.sleep(0.5)
    assert visible is not None, (f"the job's failure never reached Prometheus: mpi_operator_jobs_failed_total "
                                 f"stayed {before:g} (scrape target health: {_health(prometheus, 'mpi')})")
    # Shown as measured: a scrape can count the failure up to RISE_SLACK_S before the watch saw the condition,
    # a negative figure (any earlier rise failed above).
    run.record("MON-01", "job Failed -> failure counted in Prometheus", visible - failed, "s", t["metric_visible_s"])
    assert alerted is not None, f"MPIJobFailed is not firing {kube.waited(t['failed_to_alert_s'] + 30):.0f}s after " \
                                "Prometheus counted the failure"
    run.record("MON-01", "job Failed -> MPIJobFailed firing", alerted - failed, "s", t["failed_to_alert_s"])
    if already:
        evidence.partial("MPIJobFailed was already firing for an earlier failure when the job was submitted: "
                         "that it fired for this one is not shown")
    assert visible - failed <= t["metric_visible_s"]
    assert alerted - failed <= t["failed_to_alert_s"]


def _health(prometheus, job: str) -> list[str]:
    return [f"{x['labels'].get('job')} {x['health']} {x.get('lastError', '')}".strip()
            for x in prometheus.targets() if job in x["labels"].get("job", "")]


@pytest.mark.requirement("MON-02")
def test_job_queued_too_long_fires_mpijobpendingtoolong(kube, run, settings, mpijob_spec, prometheus, evidence):
    """A job that asks more GPUs than its team's ClusterQueue can ever admit (FAIL-04's) waits;
    MPIJobPendingTooLong then fires for that ClusterQueue once the rule's threshold (`for`) has passed. Where
    the threshold is above PENDING_WAIT_MAX_S, the row checks that the alert is pending, and is partial."""
    teams = [team for team in settings.teams if team.cluster_queue]
    if not teams:
        pytest.skip("no team in the settings has a ClusterQueue: MON-02 needs one to queue a job")
    team = teams[0]
    evidence.at_most("objects", "its job waits for quota by design: no pod runs")
    threshold = float(_rule(prometheus, "MPIJobPendingTooLong")["duration"])
    ns = run.namespace(team)
    start = time.monotonic()
    already = _alert(prometheus, "MPIJobPendingTooLong", cluster_queue=team.cluster_queue)
    cap = gpu_capacity(kube, team.cluster_queue, settings.gpu_resource)
    per_worker = (cap.nominal + cap.borrowable) // 2 + 4  # 2 workers: more than the queue can ever admit
    submit_job(kube, mpijob_spec("waits", ns, workers=2, gpus_per_worker=per_worker, queue="lq"))
    wanted = "pending" if threshold > PENDING_WAIT_MAX_S else "firing"
    until, found = kube.deadline(min(threshold, PENDING_WAIT_MAX_S) + 30), None
    while found is None and time.monotonic() < until:
        found = _alert(prometheus, "MPIJobPendingTooLong", wanted, cluster_queue=team.cluster_queue)
        time.sleep(0.5)
    waited_s = time.monotonic() - start
    pods = kube.core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}=waits").items
    assert pods == [], f"the job that asks {2 * per_worker} GPUs got pods: {[p.metadata.name for p in pods]}"
    assert found is not None, (f"MPIJobPendingTooLong is not {wanted} for ClusterQueue {team.cluster_queue} "
                               f"{waited_s:.0f}s after a job started waiting there (threshold {threshold:g}s); "
                               f"Kueue's scrape target: {_health(prometheus, 'kueue')}")
    if wanted == "pending":
        evidence.partial(f"MPIJobPendingTooLong waits {threshold:g}s, above the {PENDING_WAIT_MAX_S}s this row "
                         "waits: it was seen pending, not firing")
    elif already:
        evidence.partial("MPIJobPendingTooLong already fired for this ClusterQueue before the job was submitted")
    else:
        run.record("MON-02", "job waiting -> MPIJobPendingTooLong firing", waited_s, "s")
        assert waited_s >= threshold, f"it fired {waited_s:.1f}s after the job started waiting, before {threshold:g}s"


def _dashboard(kube) -> dict:
    cms = kube.core.list_config_map_for_all_namespaces(field_selector=f"metadata.name={DASHBOARD}").items
    assert cms, f"the dashboard ConfigMap {DASHBOARD} is missing (run site.yml with the monitoring role)"
    return json.loads(next(iter(cms[0].data.values())))


@pytest.mark.requirement("MON-03")
def test_dashboard_queries_return_data_for_a_running_job(kube, run, capabilities, mpijob_spec, prometheus, evidence):
    """The installed MPIJob Overview dashboard, for a job running on real pods beside one that finished: each
    panel query, with $namespace and $job set to them, and the queries behind both variables return data.
    DCGM's GPU panels need GPU nodes: elsewhere they are left out and the row is partial."""
    if not capabilities.pod_network:
        pytest.skip(f"MON-03: {caps.WHY_NOT['pod_network']} (container metrics come from the kubelet)")
    dashboard = _dashboard(kube)
    down = [t for t in _health(prometheus, "") if " up" not in t]  # before any job: a Prometheus that answers
    ns = run.namespace()
    submit_job(kube, mpijob_spec("done", ns, real=True, workers=2))
    condition_times(kube, MPIJOB, "done", ns, until=("Succeeded", "Failed"), timeout=120)
    submit_job(kube, mpijob_spec("busy", ns, real=True, workers=2, command=["sleep", "60"]))
    wait_pods(kube, ns, f"{JOB_LABEL}=busy,{ROLE_LABEL}=launcher", all_running(1), timeout=120)
    queries = {"variable namespace": f'kube_pod_info{{namespace="{ns}"}}',
               "variable job": f'mpi_operator_job_info{{namespace="{ns}",launcher="busy-launcher"}}'}
    for panel in dashboard["panels"]:
        for i, target in enumerate(panel.get("targets", [])):
            expr = target["expr"].replace("$namespace", ns).replace("$job", "busy")
            queries[f"panel {panel['id']} {panel['title']!r} query {i + 1}"] = expr
    gpu = sorted(k for k, q in queries.items() if "DCGM_" in q)
    if not capabilities.gpus:
        evidence.partial(f"the GPU panels need DCGM metrics from GPU nodes; not checked: {gpu}")
        queries = {k: q for k, q in queries.items() if k not in gpu}
    disk = {k for k, q in queries.items() if any(m in q for m in DISK_IO)}

    def no_block_io() -> bool:  # cAdvisor reports this job's containers, and no block I/O of any container
        return bool(prometheus.query(f'container_cpu_usage_seconds_total{{namespace="{ns}",container!=""}}')) \
            and not any(prometheus.query(f"count({m})") for m in DISK_IO)

    until = kube.deadline(90)  # the duration panel's subquery steps by 1m: a job's first step can be a minute away
    empty = sorted(queries)
    while empty and time.monotonic() < until and not (set(empty) <= disk and no_block_io()):
        time.sleep(1)
        empty = [k for k in empty if not prometheus.query(queries[k])]
    if set(empty) & disk and no_block_io():
        evidence.partial(f"the nodes account no block I/O to containers: the kubelet's cAdvisor exports no "
                         f"{' or '.join(DISK_IO)} at all, so {sorted(set(empty) & disk)} have no data")
        empty = [k for k in empty if k not in disk]
    assert not empty, f"dashboard queries without data: {[(k, queries[k]) for k in empty]}; scrape targets " \
                      f"not up when the test began: {down}"
    run.record("MON-03", "dashboard queries with data", len(queries))
