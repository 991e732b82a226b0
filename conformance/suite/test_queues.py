"""INS-03 and SCH/FAIL rows that go through the teams' Kueue queues."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from mpiplat import jobs
from mpiplat.conformance import capabilities as caps
from mpiplat.conformance import health
from mpiplat.conformance.run import RUN_LABEL
from mpiplat.conformance.watch import (
    JOB_LABEL,
    ROLE_LABEL,
    all_running,
    condition_times,
    submit_job,
    wait_pods,
)
from mpiplat.diagnose import diagnose
from mpiplat.kube import (
    CLUSTERQUEUE,
    LOCALQUEUE,
    MPIJOB,
    RESOURCEFLAVOR,
    TOPOLOGY,
    TRAINJOB,
    WORKLOAD,
    Kind,
    condition,
    has_condition,
)
from mpiplat.queues import gpu_capacity

PROBE_NAMESPACE = "default"  # namespaced dry runs need an existing namespace; they create nothing
WORKLOAD_PRIORITY_CLASS = Kind("kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses")
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"  # names a job's Kueue WorkloadPriorityClass
# How long the suite waits for Kueue to admit a job that fits, or to make room for it by preemption.
ADMISSION_TIMEOUT_S = 120
LONG = "600s"  # a job that must still run when the test is over (it is deleted then)


def _team(settings, i: int = 0):
    if len(settings.teams) <= i:
        pytest.skip(f"needs {i + 1} team(s) in the settings file")
    return settings.teams[i]


def _job(mpijob_spec, name: str, ns: str, workers: int, gpus_per_worker: int = 1, **kw) -> dict:
    return jobs.mpijob(mpijob_spec(name, ns, workers=workers, gpus_per_worker=gpus_per_worker, queue="lq", **kw))


def _shape(gpus: int, min_workers: int) -> tuple[int, int]:
    """(workers, GPUs per worker) of a job of `gpus` GPUs: at most 2 GPUs a worker (the workers then fit
    nodes that other pods partly use) and at least `min_workers` workers (the guardrail's minimum)."""
    for per in (2, 1):
        if gpus % per == 0 and gpus // per >= min_workers:
            return gpus // per, per
    pytest.skip(f"a job of {gpus} GPUs cannot have {min_workers} workers or more (settings thresholds.min_workers)")


def _sized_job(mpijob_spec, settings, name: str, ns: str, gpus: int, **kw) -> dict:
    workers, per = _shape(gpus, int(settings.thresholds["min_workers"]))
    return _job(mpijob_spec, name, ns, workers, gpus_per_worker=per, **kw)


def _after(duration: str) -> dict:
    return {"launcher_annotations": {jobs.COMPLETE_AFTER: duration}}


def _workload(kube, ns: str, job: str, timeout: float = 30) -> dict:
    until, timeout = kube.deadline(timeout), kube.waited(timeout)
    while time.monotonic() < until:
        found = [w for w in kube.list(WORKLOAD, ns)
                 if any(o.get("name") == job for o in w["metadata"].get("ownerReferences", []))]
        if found:
            return found[0]
        time.sleep(0.3)
    raise TimeoutError(f"no Workload for {ns}/{job} after {timeout:.0f}s")


def _pods(kube, ns: str, job: str) -> list:
    return kube.core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}={job}").items


def _ts(value: str) -> datetime:
    """An API timestamp (RFC 3339, whole seconds) as an aware datetime."""
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _since(obj: dict, ctype: str) -> datetime | None:
    """When condition `ctype` last became True (its lastTransitionTime), or None while it is not True."""
    c = condition(obj, ctype)
    return _ts(c["lastTransitionTime"]) if c and c.get("status") == "True" else None


def _admitted(kube, ns: str, job: str, timeout: float = ADMISSION_TIMEOUT_S, why: str = "") -> dict:
    """The job's Workload once it holds quota (QuotaReserved True); fails with its last status otherwise."""
    name = _workload(kube, ns, job)["metadata"]["name"]
    try:
        return kube.wait_for(WORKLOAD, name, ns, lambda w: has_condition(w, "QuotaReserved"), timeout=timeout,
                             what="quota reservation (admission)")
    except TimeoutError as err:
        pytest.fail(f"{ns}/{job} was not admitted within {kube.waited(timeout):.0f}s{why}; {err}")


def _remove_jobs(kube, ns: str, timeout: float = 120) -> None:
    """Delete the namespace's MPIJobs and wait until their Workloads are gone, so that their quota (and a
    preempted job, which Kueue would admit again) is free for the tests that follow."""
    for job in kube.list(MPIJOB, ns):
        kube.delete(MPIJOB, job["metadata"]["name"], ns)
    until = kube.deadline(timeout)
    while kube.list(WORKLOAD, ns) and time.monotonic() < until:
        time.sleep(0.5)


def _capacity(kube, settings, cluster_queue: str, timeout: float = 30):
    """gpu_capacity of the ClusterQueue once the ClusterQueues' status has caught up with their Workloads:
    Kueue writes it a moment after an admission or a job's end, and the suite sizes its jobs by it (a stale
    figure makes a job that should need to borrow, or to preempt, fit)."""
    until = kube.deadline(timeout)
    while True:
        holding: dict[str, int] = {}
        for w in kube.custom.list_cluster_custom_object(WORKLOAD.group, WORKLOAD.version, WORKLOAD.plural)["items"]:
            cq = ((w.get("status") or {}).get("admission") or {}).get("clusterQueue")
            if cq and has_condition(w, "QuotaReserved") and not has_condition(w, "Finished"):
                holding[cq] = holding.get(cq, 0) + 1
        cqs = kube.custom.list_cluster_custom_object(CLUSTERQUEUE.group, CLUSTERQUEUE.version, CLUSTERQUEUE.plural)
        reserving = {c["metadata"]["name"]: int((c.get("status") or {}).get("reservingWorkloads") or 0)
                     for c in cqs["items"]}
        stale = [name for name, n in reserving.items() if n != holding.get(name, 0)]
        if not stale or time.monotonic() > until:
            return gpu_capacity(kube, cluster_queue, settings.gpu_resource)
        time.sleep(0.5)


def _workloads_by_queue(kube) -> dict[str, dict[str, int]]:
    """Per ClusterQueue, its unfinished Workloads that reserve quota and those that wait, counted from the
    Workloads themselves: Kueue's ClusterQueue status counters can lag (a waiting Workload deleted with its
    namespace stays in pendingWorkloads until something else updates the ClusterQueue)."""
    lqs = {(q["metadata"]["namespace"], q["metadata"]["name"]): q["spec"].get("clusterQueue")
           for q in kube.custom.list_cluster_custom_object(LOCALQUEUE.group, LOCALQUEUE.version,
                                                           LOCALQUEUE.plural)["items"]}
    out: dict[str, dict[str, int]] = {}
    for w in kube.custom.list_cluster_custom_object(WORKLOAD.group, WORKLOAD.version, WORKLOAD.plural)["items"]:
        admitted = ((w.get("status") or {}).get("admission") or {}).get("clusterQueue")
        reserving = bool(admitted) and has_condition(w, "QuotaReserved")
        if has_condition(w, "Finished") or (w["metadata"].get("deletionTimestamp") and not reserving):
            continue
        cq = admitted if reserving else lqs.get((w["metadata"]["namespace"], w["spec"].get("queueName")))
        if cq:
            counts = out.setdefault(cq, {"reserving": 0, "pending": 0})
            counts["reserving" if reserving else "pending"] += 1
    return out


def _idle_capacity(kube, settings, cluster_queue: str, timeout: float = 60):
    """_capacity of the ClusterQueue once every ClusterQueue of its cohort holds and queues nothing: the
    rows that show an order of events (who waits, who is admitted, who is preempted) need no other job
    to end or arrive meanwhile. Waits up to kube.waited(timeout) seconds, then skips, naming the busy queues."""
    until, timeout = kube.deadline(timeout), kube.waited(timeout)
    while True:
        cap = _capacity(kube, settings, cluster_queue)
        cqs = kube.custom.list_cluster_custom_object(CLUSTERQUEUE.group, CLUSTERQUEUE.version, CLUSTERQUEUE.plural)
        cohort = next((_cohort(c) for c in cqs["items"] if c["metadata"]["name"] == cluster_queue), "")
        members = {c["metadata"]["name"] for c in cqs["items"]
                   if c["metadata"]["name"] == cluster_queue or (cohort and _cohort(c) == cohort)}
        busy = {name: st for name, st in _workloads_by_queue(kube).items() if name in members}
        if not busy:
            return cap
        if time.monotonic() > until:
            pytest.skip(f"needs ClusterQueue {cluster_queue} and its cohort idle; after {timeout:.0f}s still busy: "
                        f"{busy}")
        time.sleep(1)


def _cq_gpus(kube, name: str, gpu: str) -> dict[str, int]:
    """The ClusterQueue's GPU reservation from its status: {"total": n, "borrowed": n}."""
    cq = kube.get(CLUSTERQUEUE, name)
    out = {"total": 0, "borrowed": 0}
    for flavor in (cq.get("status") or {}).get("flavorsReservation") or []:
        for r in flavor.get("resources") or []:
            if r["name"] == gpu:
                out["total"] += int(str(r.get("total", 0)))
                out["borrowed"] += int(str(r.get("borrowed", 0)))
    return out


def _kueue_suspends(kube, kind, manifest: dict) -> bool:
    """Whether Kueue's webhook suspends a queue-labelled job: a server-side dry run, which changes nothing."""
    created = kube.custom.create_namespaced_custom_object(kind.group, kind.version, manifest["metadata"]["namespace"],
                                                          kind.plural, manifest, dry_run="All")
    spec = created["spec"]
    return bool(spec.get("runPolicy", {}).get("suspend") if kind == MPIJOB else spec.get("suspend"))


# ---- INS-03

# The Lease of a Kueue that elects a leader (its chart's leaderElection.resourceName), and the key of
# its manager configuration in the ConfigMap a Kueue Deployment mounts (the chart's kueue-manager-config).
KUEUE_LEASE = "c1f6bfd2.kueue.x-k8s.io"
KUEUE_CONFIG_KEY = "controller_manager_config.yaml"
FRAMEWORKS = {"kubeflow.org/mpijob": MPIJOB, "trainer.kubeflow.org/trainjob": TRAINJOB}


def _kueue_deployment_configs(kube, deployments: list) -> dict[str, dict]:
    """Kueue's manager configuration, by 'namespace/ConfigMap', from the ConfigMaps its Deployments mount."""
    out = {}
    for d in deployments:
        if "kueue" not in d.metadata.name:
            continue
        for vol in d.spec.template.spec.volumes or []:
            if not vol.config_map:
                continue
            try:
                cm = kube.core.read_namespaced_config_map(vol.config_map.name, d.metadata.namespace)
            except ApiException as err:
                if err.status == 404:
                    continue
                raise
            text = (cm.data or {}).get(KUEUE_CONFIG_KEY)
            if text:
                out[f"{d.metadata.namespace}/{cm.metadata.name}"] = yaml.safe_load(text) or {}
    return out


@pytest.mark.read_only
@pytest.mark.requirement("INS-03")
def test_kueue_integrations_and_every_team_queue_active(kube, settings, mpijob_spec, trainjob_spec, request):
    """Kueue is healthy: its Deployment Available with Ready pods where it runs as one, its leader-election
    Lease renewed where it elects a leader, its webhook answering (mpiplat.conformance.health; the local
    cluster runs Kueue as a host process without leader election, so there its webhook is the evidence).
    Its configuration, from the ConfigMap its Deployment mounts where it has one, lists the mpijob and
    trainjob integrations, and it does manage both: a queued job of each is suspended on a dry run. Every
    ClusterQueue of the cluster is Active and the settings' teams' ClusterQueues exist.
    Fails on a cluster whose Kueue is stopped (its webhook does not answer), runs without the mpijob or
    trainjob integration, or has a ClusterQueue that is not Active (e.g. its ResourceFlavor is missing)."""
    ns = PROBE_NAMESPACE
    probes = {"kubeflow.org/mpijob": (MPIJOB, jobs.mpijob(mpijob_spec("ins03-probe", ns, queue="lq"))),
              "trainer.kubeflow.org/trainjob": (TRAINJOB, jobs.trainjob(trainjob_spec("ins03-probe", ns, queue="lq")))}
    suspended, unmanaged, unreachable = [], [], []
    for framework, (kind, manifest) in probes.items():
        try:
            if _kueue_suspends(kube, kind, manifest):
                suspended.append(framework)
            else:
                unmanaged.append(f"{framework}: a queued job was not suspended (the integration is off)")
        except ApiException as err:
            msg = health.api_message(err)
            (unreachable if "failed calling webhook" in msg else unmanaged).append(
                f"{framework}: dry run answered {err.status}: {msg[:300]}")

    def webhook(_kube) -> health.Evidence:
        if unreachable:
            return False, "its webhook does not answer: " + "; ".join(unreachable)
        return (True, f"its webhook suspended queued jobs ({', '.join(suspended)}) on dry runs") if suspended else None

    deployments = health.deployments(kube)
    ok, seen = health.controller_health(kube, deployments, "kueue", [
        lambda k: health.lease_renewed(k, KUEUE_LEASE, required=False), webhook])
    configs = _kueue_deployment_configs(kube, deployments)
    request.node._mpiplat_diagnosis = f"Kueue: {seen}; configuration: " + (
        ", ".join(configs) if configs else "no ConfigMap (not run as a Deployment here), judged by its webhook")
    assert ok, f"Kueue is not healthy: {seen}"
    lacking = {where: sorted(set(FRAMEWORKS) - set((conf.get("integrations") or {}).get("frameworks") or []))
               for where, conf in configs.items()}
    assert not any(lacking.values()), f"Kueue's configuration lacks integrations: {lacking}"
    assert not unmanaged, "Kueue does not manage: " + "; ".join(unmanaged)
    listed = kube.custom.list_cluster_custom_object(CLUSTERQUEUE.group, CLUSTERQUEUE.version, CLUSTERQUEUE.plural)
    cqs = {c["metadata"]["name"]: c for c in listed["items"]}
    absent = [t.cluster_queue for t in settings.teams if t.cluster_queue and t.cluster_queue not in cqs]
    inactive = [f"{name} ({(condition(cq, 'Active') or {}).get('reason', 'no Active condition')}: "
                f"{(condition(cq, 'Active') or {}).get('message', '')})"
                for name, cq in sorted(cqs.items()) if not has_condition(cq, "Active")]
    assert not absent, f"the settings' ClusterQueues {absent} do not exist"
    assert not inactive, f"ClusterQueues not Active: {inactive}"


# ---- SCH

@pytest.mark.requirement("SCH-01")
def test_gang_two_jobs_that_fit_alone_but_not_together(kube, run, settings, mpijob_spec):
    team = _team(settings)
    cap = _idle_capacity(kube, settings, team.cluster_queue)
    size = cap.available // 2 + 1
    if cap.available < 2 or size > cap.available:
        pytest.skip(f"ClusterQueue {team.cluster_queue} has {cap.available} GPUs available; needs 2 or more idle")
    ns = run.namespace(team)
    try:
        submit_job(kube, _job(mpijob_spec, "first", ns, size, launcher_annotations={jobs.COMPLETE_AFTER: "8s"}))
        condition_times(kube, MPIJOB, "first", ns, until=("Running",), timeout=120)
        submit_job(kube, _job(mpijob_spec, "second", ns, size, launcher_annotations={jobs.COMPLETE_AFTER: "3s"}))
        wl = _workload(kube, ns, "second")
        time.sleep(3)
        wl = kube.get(WORKLOAD, wl["metadata"]["name"], ns)
        assert not has_condition(wl, "QuotaReserved"), "the second job was admitted although it cannot fit"
        assert _pods(kube, ns, "second") == [], "the queued job has pods: no gang admission"
        run.record("SCH-01", "GPUs per job (each fits alone)", size)
    finally:
        _remove_jobs(kube, ns)


# How long the first job of SCH-02 runs: ample for submitting the queued job while it runs.
HOG_S = 15


@pytest.mark.requirement("SCH-02")
def test_queued_job_is_admitted_when_quota_frees(kube, run, settings, mpijob_spec, request):
    """A job waits while a first one (the hog) holds too many of the team's GPUs for both, and is admitted
    automatically once the hog finishes. Shown by the API's own timestamps: the queued job's Workload was
    created before the hog's Succeeded, and got its quota (QuotaReserved) no earlier than that.
    Fails on a cluster where the queued job is never admitted (Kueue stopped, or a finished job's quota never
    released), or is admitted while the hog still runs (quota not enforced)."""
    team = _team(settings)
    lo = int(settings.thresholds["min_workers"])
    cap = _idle_capacity(kube, settings, team.cluster_queue)
    nxt = 2 * lo  # the queued job: lo workers x 2 GPUs
    hog = cap.available - nxt + 2  # leaves 2 GPUs free: too few for the queued job until the hog finishes
    if hog < lo:
        pytest.skip(f"ClusterQueue {team.cluster_queue} has {cap.available} GPUs available; needs {3 * lo - 2}")
    ns = run.namespace(team)
    try:
        submit_job(kube, _sized_job(mpijob_spec, settings, "hog", ns, hog, **_after(f"{HOG_S}s")))
        condition_times(kube, MPIJOB, "hog", ns, until=("Running",), timeout=ADMISSION_TIMEOUT_S)
        submit_job(kube, _job(mpijob_spec, "next", ns, lo, gpus_per_worker=2, **_after("2s")))
        created = _ts(_workload(kube, ns, "next")["metadata"]["creationTimestamp"])
        admitted = _since(_admitted(kube, ns, "next", timeout=ADMISSION_TIMEOUT_S + 30,
                                    why=" after the first job finished"), "QuotaReserved")
        first = kube.get(MPIJOB, "hog", ns)
        finished = _since(first, "Succeeded")
        assert finished, f"the first job has not succeeded although the queued one was admitted: {first.get('status')}"
        request.node._mpiplat_diagnosis = (f"queued job's Workload created {created:%H:%M:%S}, first job Succeeded "
                                           f"{finished:%H:%M:%S}, queued job admitted {admitted:%H:%M:%S} (UTC)")
        assert created < finished, (f"the queued job's Workload was created at {created:%H:%M:%S}, not before the "
                                    f"first job finished at {finished:%H:%M:%S}: it never had to wait (the cluster "
                                    f"was slower than the first job's {HOG_S} s)")
        assert admitted >= finished, (f"the queued job got its quota at {admitted:%H:%M:%S}, before the first job "
                                      f"finished at {finished:%H:%M:%S}: both ran although they do not fit together")
        seen = condition_times(kube, MPIJOB, "next", ns, until=("Succeeded", "Failed"), timeout=180)
        assert "Succeeded" in seen, seen
        run.record("SCH-02", "first job Succeeded -> queued job admitted", (admitted - finished).total_seconds(), "s")
    finally:
        _remove_jobs(kube, ns)


def _cohort(cq: dict) -> str:
    return cq["spec"].get("cohortName") or cq["spec"].get("cohort") or ""


@pytest.mark.requirement("SCH-03")
def test_cohort_borrowing_between_two_teams(kube, run, settings, mpijob_spec):
    """A team's job of one GPU more than its own free quota is admitted on a GPU borrowed from the other team
    of its cohort (its ClusterQueue's status counts it as borrowed) and completes.
    Fails on a cluster whose teams' ClusterQueues share no cohort, or whose limits allow no borrowing
    (borrowingLimit 0, or the other team's lendingLimit 0): the job then waits."""
    team, other = _team(settings, 0), _team(settings, 1)
    cap = _idle_capacity(kube, settings, team.cluster_queue)
    assert cap.borrow_ceiling >= 1, (f"ClusterQueue {team.cluster_queue} can borrow no GPU from its cohort (no cohort "
                                     f"shared with {other.cluster_queue}, or borrowingLimit/lendingLimit 0)")
    if cap.borrowable < 1:
        pytest.skip(f"the cohort of {team.cluster_queue} has no idle GPU to lend now (busy)")
    ns = run.namespace(team)
    own = cap.nominal - cap.reserved
    size = max(own + 1, int(settings.thresholds["min_workers"]))  # one GPU more than its own quota has free
    try:
        submit_job(kube, _job(mpijob_spec, "borrower", ns, size, **_after("10s")))
        _admitted(kube, ns, "borrower", why=f" ({size} GPUs; its own quota has {own} free)")
        until = kube.deadline(15)  # the ClusterQueue's status follows the admission within a moment
        while (held := _cq_gpus(kube, team.cluster_queue, settings.gpu_resource))["borrowed"] < size - own \
                and time.monotonic() < until:
            time.sleep(0.5)
        assert held["borrowed"] >= size - own, (f"ClusterQueue {team.cluster_queue} reports {held['borrowed']} GPUs "
                                                f"borrowed while a job of {size} GPUs runs on {own} of its own")
        seen = condition_times(kube, MPIJOB, "borrower", ns, until=("Succeeded", "Failed"), timeout=180)
        assert "Succeeded" in seen, seen
        run.record("SCH-03", "GPUs borrowed from the cohort", held["borrowed"])
    finally:
        _remove_jobs(kube, ns)


def _weight(cq: dict) -> float:
    return float(str((cq["spec"].get("fairSharing") or {}).get("weight", "1")))


def _share(cq: dict) -> str:
    fs = (cq.get("status") or {}).get("fairSharing")
    return "absent (Kueue's fairSharing is not enabled)" if fs is None else f"weightedShare {fs.get('weightedShare')}"


@pytest.mark.requirement("SCH-07")
def test_fair_sharing_lets_the_team_that_borrows_less_preempt_the_one_that_borrows_more(kube, run, settings,
                                                                                         mpijob_spec, request):
    """Two idle teams of one cohort. Team A borrows b GPUs of team B's quota (a job of its nominal quota + b).
    Team B then submits a job of its nominal quota + 1: it needs to borrow as well, so Kueue's classical
    preemption (which reclaims only for a queue within its nominal quota) would leave it waiting. Under fair
    sharing its share after admission (1 borrowed GPU, by weight) is below team A's (b), so Kueue preempts team
    A's job (Preempted reason InCohortFairSharing) and admits team B's; the ClusterQueues report their shares.
    Fails on a cluster whose Kueue runs without fairSharing in its configuration (team B's job waits), or whose
    two teams share no cohort."""
    a, b = _team(settings, 0), _team(settings, 1)
    cq_a, cq_b = kube.get(CLUSTERQUEUE, a.cluster_queue), kube.get(CLUSTERQUEUE, b.cluster_queue)
    assert _cohort(cq_a) and _cohort(cq_a) == _cohort(cq_b), (
        f"ClusterQueues {a.cluster_queue} (cohort {_cohort(cq_a) or 'none'}) and {b.cluster_queue} (cohort "
        f"{_cohort(cq_b) or 'none'}) share no cohort: no fair sharing between the two teams")
    cap_a, cap_b = _idle_capacity(kube, settings, a.cluster_queue), _capacity(kube, settings, b.cluster_queue)
    w_a, w_b = _weight(cq_a), _weight(cq_b)
    # b borrowed GPUs of team A against team B's 1: preemption needs 1 / w_b < b / w_a.
    lend = min(cap_a.borrowable, 8)
    if w_b <= 0 or lend * w_b <= w_a or cap_b.borrow_ceiling < 1:
        pytest.skip(f"{a.cluster_queue} may borrow {cap_a.borrowable} GPUs (weight {w_a:g}) and {b.cluster_queue} "
                    f"{cap_b.borrow_ceiling} (weight {w_b:g}): too little to show fair sharing")
    ns_a, ns_b = run.namespace(a), run.namespace(b)
    try:
        submit_job(kube, _sized_job(mpijob_spec, settings, "greedy", ns_a, cap_a.nominal + lend, **_after(LONG)))
        greedy = _admitted(kube, ns_a, "greedy")["metadata"]["name"]
        until = kube.deadline(15)  # the ClusterQueue's status follows the admission within a moment
        while True:
            before = kube.get(CLUSTERQUEUE, a.cluster_queue)
            if float(((before.get("status") or {}).get("fairSharing") or {}).get("weightedShare") or 0) > 0 \
                    or time.monotonic() > until:
                break
            time.sleep(0.5)
        if (before.get("status") or {}).get("fairSharing") is None:
            pytest.fail(f"ClusterQueue {a.cluster_queue} reports no status.fairSharing while team {a.name} borrows "
                        f"{lend} GPUs: Kueue's fairSharing is not enabled, so no job is preempted by fair share")
        submit_job(kube, _sized_job(mpijob_spec, settings, "modest", ns_b, cap_b.nominal + 1, **_after("5s")))
        why = (f": team {a.name} borrows {lend} GPUs, team {b.name}'s job would borrow 1, yet Kueue did not preempt "
               f"by fair share; ClusterQueue {a.cluster_queue} status.fairSharing: {_share(before)}")
        _admitted(kube, ns_b, "modest", why=why)
        preempted = kube.wait_for(WORKLOAD, greedy, ns_a, lambda w: has_condition(w, "Preempted"), timeout=30,
                                  what="Preempted condition")
        reason = condition(preempted, "Preempted").get("reason")
        request.node._mpiplat_diagnosis = condition(preempted, "Preempted").get("message", "")
        assert reason == "InCohortFairSharing", (f"team {a.name}'s job was preempted for {reason}, not by fair "
                                                 f"sharing (InCohortFairSharing); {a.cluster_queue} {_share(before)}")
        share = ((before.get("status") or {}).get("fairSharing") or {}).get("weightedShare")
        if share is not None:
            run.record("SCH-07", f"weighted share of {a.cluster_queue} while borrowing {lend} GPUs", share)
        run.record("SCH-07", f"GPUs borrowed by {a.cluster_queue} before {b.cluster_queue} reclaimed by fair share",
                   lend)
    finally:
        _remove_jobs(kube, ns_a)
        _remove_jobs(kube, ns_b)


@pytest.mark.requirement("SCH-08")
def test_priority_preemption_within_a_queue(kube, run, settings, mpijob_spec, request):
    """In one team's ClusterQueue, filled by a low-priority job (all its own and borrowable GPUs): a second job
    of the same priority waits, and a high-priority one preempts the low one (Preempted reason InClusterQueue)
    and is admitted. Priorities are two Kueue WorkloadPriorityClasses of this run (cluster-scoped, labelled
    with the run id), deleted at the test's end.
    Fails on a cluster whose ClusterQueue has preemption.withinClusterQueue Never (the urgent job waits), or
    whose Kueue ignores priorities (the equal-priority job preempts, or the urgent one waits)."""
    team = _team(settings)
    lo = int(settings.thresholds["min_workers"])
    cap = _idle_capacity(kube, settings, team.cluster_queue)
    if cap.available < lo:
        pytest.skip(f"needs ClusterQueue {team.cluster_queue} to have {lo} GPUs or more; it has {cap.available}")
    ns = run.namespace(team)
    classes = {"low": (f"{settings.namespace_prefix}-{run.id}-low", 100),
               "high": (f"{settings.namespace_prefix}-{run.id}-high", 10000)}
    try:
        for name, value in classes.values():
            kube.create(WORKLOAD_PRIORITY_CLASS, {"apiVersion": WORKLOAD_PRIORITY_CLASS.api_version,
                                                  "kind": "WorkloadPriorityClass",
                                                  "metadata": {"name": name, "labels": {RUN_LABEL: run.id}},
                                                  "value": value, "description": "mpiplat conformance SCH-08"})
        low, high = ({PRIORITY_LABEL: classes[k][0]} for k in ("low", "high"))
        submit_job(kube, _sized_job(mpijob_spec, settings, "bulk", ns, cap.available, labels=low, **_after(LONG)))
        bulk = _admitted(kube, ns, "bulk")["metadata"]["name"]
        submit_job(kube, _job(mpijob_spec, "peer", ns, lo, labels=low, **_after("5s")))
        peer = _workload(kube, ns, "peer")["metadata"]["name"]
        time.sleep(5)  # Kueue's scheduler tries a pending workload within a second or two
        assert not has_condition(kube.get(WORKLOAD, bulk, ns), "Preempted"), \
            "a job of the same priority preempted the running one"
        assert not has_condition(kube.get(WORKLOAD, peer, ns), "QuotaReserved"), "the queue admitted more than it holds"
        submit_job(kube, _job(mpijob_spec, "urgent", ns, lo, labels=high, **_after("5s")))
        policy = kube.get(CLUSTERQUEUE, team.cluster_queue)["spec"].get("preemption")
        urgent = _admitted(kube, ns, "urgent", why=f": the high-priority job did not preempt the low-priority one "
                                                   f"(ClusterQueue {team.cluster_queue} preemption: {policy})")
        preempted = kube.wait_for(WORKLOAD, bulk, ns, lambda w: has_condition(w, "Preempted"), timeout=30,
                                  what="Preempted condition")
        reason = condition(preempted, "Preempted").get("reason")
        request.node._mpiplat_diagnosis = condition(preempted, "Preempted").get("message", "")
        assert reason == "InClusterQueue", f"the low-priority job was preempted for {reason}, not InClusterQueue"
        assert urgent["spec"].get("priority") == classes["high"][1], urgent["spec"]
        run.record("SCH-08", "GPUs of the preempted low-priority job", cap.available)
    finally:
        _remove_jobs(kube, ns)
        for name, _ in classes.values():
            kube.delete(WORKLOAD_PRIORITY_CLASS, name)


def _flavors(kube, cluster_queue: str | None, resource: str):
    """(name, spec) of each ResourceFlavor in which the ClusterQueue has quota of `resource`, in its order (Kueue
    tries them in that order); each read when it is reached."""
    cq = (kube.find(CLUSTERQUEUE, cluster_queue) if cluster_queue else None) or {}
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        if resource in group.get("coveredResources", []):
            for entry in group.get("flavors") or []:
                yield entry["name"], (kube.find(RESOURCEFLAVOR, entry["name"]) or {}).get("spec") or {}


def _takes_flavor(node, spec: dict, tolerations) -> bool:
    """Whether a pod with `tolerations` that Kueue gives ResourceFlavor `spec` (its node labels as a selector,
    its tolerations) can run on `node`."""
    labels = node.metadata.labels or {}
    return all(labels.get(k) == v for k, v in (spec.get("nodeLabels") or {}).items()) \
        and caps.takes_pods(node, [*tolerations, *(spec.get("tolerations") or [])])


def _one_node(kube, settings, team) -> tuple[str, bool]:
    """(hostname label, real) of a node where a job of `team`'s queue can run: it has the node labels of the
    first ResourceFlavor of the team's ClusterQueue (Kueue gives its pods that flavor's selector and
    tolerations) and takes the suite's pods; a real one where there is one, else a KWOK one (simulated)."""
    name, flavor = next(_flavors(kube, team.cluster_queue, "cpu"), (None, None))
    if name is None:
        pytest.fail(f"team {team.name}'s ClusterQueue {team.cluster_queue} has no flavor with cpu quota")
    for node in sorted(kube.core.list_node().items, key=lambda n: (caps.is_kwok(n), n.metadata.name)):
        real = not caps.is_kwok(node)
        labels = node.metadata.labels or {}
        if HOSTNAME_LABEL in labels and all(labels.get(k) == v for k, v in settings.node_selector.items()) \
                and _takes_flavor(node, flavor, [*settings.tolerations, *([] if real else [jobs.KWOK_TOLERATION])]):
            return labels[HOSTNAME_LABEL], real
    pytest.fail(f"no node has the labels of ResourceFlavor {name} ({flavor.get('nodeLabels')}) and the settings' "
                f"node_selector and takes the suite's pods: team {team.name}'s jobs cannot run")


@pytest.mark.requirement("SCH-05")
def test_pods_that_cannot_become_ready_are_evicted_and_requeued(kube, run, settings, mpijob_spec):
    """A job that starts partially: its two workers are pinned to one node and may not share it (a required
    pod anti-affinity), so one runs there and the other can never be scheduled; on a real node where the team's
    flavor has one (else a KWOK node: simulated; the local cluster's flavors place on its KWOK GPU nodes).
    Kueue's waitForPodsReady must evict it once its timeout passes (Workload condition Evicted, reason
    PodsReadyTimeout) and remove its pods, the running one too, which would otherwise hold its share of the
    node for ever; and requeue it (admitted again after the backoff, later than the eviction, and the job
    resumed). Both waits are settings thresholds.pods_ready_timeout_s.
    Fails on a cluster whose Kueue has no waitForPodsReady: Kueue then gives the admitted job's Workload no
    PodsReady condition (it sets one, False until the pods are ready, only with waitForPodsReady on), which
    shows at once, and the partly started job keeps its running worker and its quota; or that never admits an
    evicted job again (e.g. requeuingStrategy backoffLimitCount 0 deactivates it)."""
    team = _team(settings)
    node, real = _one_node(kube, settings, team)
    ns = run.namespace(team)
    timeout = settings.thresholds["pods_ready_timeout_s"]
    workers = f"{JOB_LABEL}=stuck,{ROLE_LABEL}=worker"
    manifest = _job(mpijob_spec, "stuck", ns, 2, gpus_per_worker=0, real=real, node_selector={HOSTNAME_LABEL: node},
                    **_after(LONG))
    # mpi-operator v0.8 creates a queued job's launcher while the job is suspended, whatever its
    # launcherCreationPolicy (kubeflow/mpi-operator#615): it must not end the job (mpirun failing on the missing
    # worker) before Kueue evicts it.
    replicas = manifest["spec"]["mpiReplicaSpecs"]
    replicas["Launcher"]["template"]["spec"]["containers"][0]["args"] = ["sleep", LONG.rstrip("s")]
    replicas["Worker"]["template"]["spec"]["affinity"] = {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {JOB_LABEL: "stuck", ROLE_LABEL: "worker"}},
            "topologyKey": HOSTNAME_LABEL}]}}
    try:
        submit_job(kube, manifest)
        name = _admitted(kube, ns, "stuck")["metadata"]["name"]
        start = time.monotonic()
        first = wait_pods(kube, ns, workers, lambda pods: len(pods) >= 2 and any(
            p.status.phase == "Running" for p in pods), timeout=120)
        running = [p.metadata.name for p in first if p.status.phase == "Running"]
        assert len(running) == 1, (f"both workers run on {node} although they may not share a node: the scheduler "
                                   "ignores required pod anti-affinity, so the job did not start partially")
        try:
            kube.wait_for(WORKLOAD, name, ns, lambda w: condition(w, "PodsReady") is not None, timeout=30,
                          what="a PodsReady condition")
        except TimeoutError:
            pytest.fail(f"the admitted job's Workload {name} has no PodsReady condition {kube.waited(30):.0f}s "
                        f"after it started partially ({running[0]} running on {node}): Kueue's waitForPodsReady is "
                        "off, so a job whose pods never all become ready keeps its running pods and its quota")
        try:
            evicted = kube.wait_for(WORKLOAD, name, ns, lambda w: (condition(w, "Evicted") or {}).get("reason")
                                    == "PodsReadyTimeout" and has_condition(w, "Evicted"), timeout=timeout,
                                    what="eviction for PodsReadyTimeout")
        except TimeoutError as err:
            pytest.fail(f"the partly started job was not evicted within {kube.waited(timeout):.0f}s "
                        f"(pods_ready_timeout_s); {running[0]} still holds {node}: is Kueue's waitForPodsReady "
                        f"on? {err}")
        run.record("SCH-05", "admission -> eviction (waitForPodsReady)", time.monotonic() - start, "s")
        at = _ts(condition(evicted, "Evicted")["lastTransitionTime"])
        try:
            again = kube.wait_for(WORKLOAD, name, ns, lambda w: (_since(w, "QuotaReserved") or at) > at,
                                  timeout=timeout, what="admission after the eviction")
        except TimeoutError as err:
            pytest.fail(f"the evicted job was not admitted again within {kube.waited(timeout):.0f}s "
                        f"(pods_ready_timeout_s): not requeued; {err}")
        run.record("SCH-05", "eviction -> admitted again (requeue backoff)",
                   (_since(again, "QuotaReserved") - at).total_seconds(), "s")
        old = {p.metadata.uid: p.metadata.name for p in first}
        until = kube.deadline(60)
        while old.keys() & {p.metadata.uid for p in _pods(kube, ns, "stuck")} and time.monotonic() < until:
            time.sleep(0.5)
        left = sorted(old[u] for u in old.keys() & {p.metadata.uid for p in _pods(kube, ns, "stuck")})
        assert not left, f"the evicted job's pods {left} were not removed (the running one holds its node)"
        kube.wait_for(MPIJOB, "stuck", ns, lambda j: j["spec"]["runPolicy"].get("suspend") is False, timeout=60,
                      what="resumed (runPolicy.suspend false) after the re-admission")
    finally:
        _remove_jobs(kube, ns)


# ---- SCH-06

HOSTNAME_LABEL = "kubernetes.io/hostname"


@dataclass(frozen=True)
class _Topology:
    """A team whose GPU quota is in a flavor placed by Kueue's Topology Aware Scheduling, and the domains of
    the level its tests require: {level value: [nodes of the flavor that take the suite's pods]}."""

    team: object
    name: str
    level: str
    domains: dict


def _topology(kube, settings, place) -> _Topology:
    """The first settings team whose ClusterQueue has GPU quota in a ResourceFlavor that names a Kueue Topology.
    The level its jobs require is the Topology's finest level above the hostname (a rack, where the levels are
    zone, rack, host), or its only one. Fails where no team has one: no job of theirs is placed by topology."""
    gpu = settings.gpu_resource
    for team in settings.teams:
        for name, spec in _flavors(kube, team.cluster_queue, gpu):
            if not spec.get("topologyName"):
                continue
            topology = kube.find(TOPOLOGY, spec["topologyName"])
            if not topology:
                pytest.fail(f"ResourceFlavor {name} names Topology {spec['topologyName']}, which does not exist: "
                            "Kueue's Topology Aware Scheduling cannot place its jobs")
            levels = [lv["nodeLabel"] for lv in topology["spec"]["levels"]]
            level = levels[-2] if len(levels) > 1 and levels[-1] == HOSTNAME_LABEL else levels[-1]
            tolerations = [*place()["tolerations"], {"key": gpu, "operator": "Exists"}]
            domains: dict[str, list] = {}
            for node in kube.core.list_node().items:
                labels = node.metadata.labels or {}
                if level in labels and caps.gpus(node, gpu) > 0 and _takes_flavor(node, spec, tolerations):
                    domains.setdefault(labels[level], []).append(node)
            if not domains:
                pytest.fail(f"no node of ResourceFlavor {name} that takes the suite's pods has the label {level} "
                            f"(a level of Topology {spec['topologyName']})")
            return _Topology(team, spec["topologyName"], level, domains)
    pytest.fail("no ClusterQueue of the settings' teams has GPU quota in a ResourceFlavor that names a Kueue "
                "Topology (spec.topologyName): Kueue's Topology Aware Scheduling places none of their jobs")


@pytest.mark.requirement("SCH-06")
def test_a_job_that_requires_one_rack_gets_all_its_workers_in_one_rack(kube, run, settings, place, mpijob_spec):
    """A job of the topology team (_topology) that requires one domain of its level (one rack) and needs more
    GPUs than any one node has free, so it must span hosts, runs every worker in one domain, with the ranks of
    each host consecutive (Kueue orders them by the pods' replica index). Where each domain is one node, the job
    fits one node and shows only that.
    Fails on a cluster whose Kueue does not place by topology (the default scheduler spreads the workers over
    racks), or where no team's flavor names a Topology."""
    tas = _topology(kube, settings, place)
    gpu, team = settings.gpu_resource, tas.team
    cap = _idle_capacity(kube, settings, team.cluster_queue)
    free = {n.metadata.name: caps.free_gpus(kube, n, gpu) for nodes in tas.domains.values() for n in nodes}
    room = max(sum(free[n.metadata.name] for n in nodes) for nodes in tas.domains.values())
    # Just more than any one node has free, where a domain has that much room; else all a domain's room.
    size = min(room if room <= max(free.values()) else max(free.values()) + 2, room, cap.available)
    workers, per = _shape(size, int(settings.thresholds["min_workers"]))
    if cap.available < workers * per:
        pytest.skip(f"ClusterQueue {team.cluster_queue} has {cap.available} GPUs available; needs {size}")
    ns = run.namespace(team)
    try:
        submit_job(kube, _job(mpijob_spec, "one-rack", ns, workers, per, required_topology=tas.level,
                              launcher_annotations={jobs.COMPLETE_AFTER: LONG}))
        _admitted(kube, ns, "one-rack", why=f" (it needs {workers * per} GPUs in one {tas.level}; the "
                  f"largest room in one is {room})")
        pods = wait_pods(kube, ns, f"{JOB_LABEL}=one-rack,{ROLE_LABEL}=worker", all_running(workers), timeout=120)
        node_domain = {n.metadata.name: value for value, nodes in tas.domains.items() for n in nodes}
        placed = sorted((int(p.metadata.labels[jobs.INDEX_LABEL]), p.spec.node_name) for p in pods)
        domains = sorted({node_domain.get(node, f"{node} (not a node of the flavor)") for _, node in placed})
        assert len(domains) == 1, (
            f"the workers of a job that requires one {tas.level} are in {len(domains)} of them ({domains}): "
            f"Kueue's Topology Aware Scheduling did not keep them together; rank -> node: {placed}")
        hosts = [node for i, (_, node) in enumerate(placed) if i == 0 or placed[i - 1][1] != node]
        assert len(hosts) == len(set(hosts)), (
            f"the ranks on each host are not consecutive (rank -> node: {placed}): Kueue's Topology Aware "
            "Scheduling did not order them by replica index")
        run.record("SCH-06", f"GPUs of a job that requires one {tas.level}", workers * per)
        run.record("SCH-06", f"hosts its workers span in {tas.level} {domains[0]}", len(hosts))
    finally:
        _remove_jobs(kube, ns)


@pytest.mark.requirement("SCH-06")
def test_a_job_larger_than_any_rack_waits_saying_so(kube, run, settings, place, mpijob_spec, evidence):
    """A job of the topology team that requires one domain (one rack) and needs more GPUs than the largest
    domain has, but no more than the team's quota, is not admitted: its Workload waits with Kueue's message
    that the Topology cannot fit its pods, and it has no pods.
    Fails on a cluster whose Kueue does not place by topology (it admits the job over several racks). Skipped
    where the team's quota is not larger than one domain (the job would wait for quota instead)."""
    evidence.at_most("objects", "the job waits for a rack by design: no pod runs")
    tas = _topology(kube, settings, place)
    gpu, team = settings.gpu_resource, tas.team
    largest = max(sum(caps.gpus(n, gpu) for n in nodes) for nodes in tas.domains.values())
    cap = _idle_capacity(kube, settings, team.cluster_queue)
    workers, per = _shape(largest + 2, int(settings.thresholds["min_workers"]))
    if cap.available < workers * per:
        pytest.skip(f"ClusterQueue {team.cluster_queue} has {cap.available} GPUs available, not more than the "
                    f"{largest} of the largest {tas.level}: a job too large for one would wait for quota")
    ns = run.namespace(team)
    try:
        submit_job(kube, _job(mpijob_spec, "too-big", ns, workers, per, required_topology=tas.level))
        name = _workload(kube, ns, "too-big")["metadata"]["name"]

        def decided(w) -> bool:
            c = condition(w, "QuotaReserved") or {}
            return c.get("status") == "True" or "topology" in (c.get("message") or "").lower()

        try:
            wl = kube.wait_for(WORKLOAD, name, ns, decided, timeout=30, what="Kueue's decision")
        except TimeoutError as err:
            pytest.fail(f"a job of {workers * per} GPUs, more than any one {tas.level} has ({largest}), neither "
                        f"admitted nor held for its topology: {err}")
        reserved = condition(wl, "QuotaReserved") or {}
        assert reserved.get("status") != "True", (
            f"a job that requires one {tas.level} and needs {workers * per} GPUs, more than any one has ({largest}), "
            f"was admitted: Kueue's Topology Aware Scheduling does not hold it to one {tas.level}")
        assert f'topology "{tas.name}"' in reserved.get("message", ""), reserved
        assert _pods(kube, ns, "too-big") == [], "the job that waits has pods"
        run.record("SCH-06", f"GPUs of the largest {tas.level}", largest)
        run.record("SCH-06", "GPUs of the job that waits", workers * per)
    finally:
        _remove_jobs(kube, ns)


@pytest.mark.requirement("FAIL-04")
def test_job_larger_than_the_cluster_waits_with_a_clear_message(kube, run, settings, mpijob_spec, request, evidence):
    evidence.at_most("objects", "the job waits for quota by design: no pod runs")
    team = _team(settings)
    cap = _capacity(kube, settings, team.cluster_queue)
    ns = run.namespace(team)
    needs = cap.nominal + cap.borrowable + 8
    submit_job(kube, _job(mpijob_spec, "huge", ns, needs))
    wl = _workload(kube, ns, "huge")
    time.sleep(3)
    assert not has_condition(kube.get(WORKLOAD, wl["metadata"]["name"], ns), "QuotaReserved")
    assert _pods(kube, ns, "huge") == []
    found = diagnose(kube, ns, "huge", settings.gpu_resource)
    request.node._mpiplat_diagnosis = str(found)
    assert found.state in ("Queued", "Suspended", "Created"), str(found)
    assert f"job needs {needs}" in found.cause and f"has {cap.nominal} GPUs" in found.cause, str(found)
