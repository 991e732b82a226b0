"""UPG: an upgrade of the stack while a team has jobs running, queued and suspended (profile `upgrade`).

    pytest conformance/suite --profile upgrade --phase before [--settings S]    # then upgrade the stack
    pytest conformance/suite --profile upgrade --phase after [--settings S]     # minutes or days later

--phase before starts, in a namespace of its own (conformance/upgrading.py): a real MPIJob and a real TrainJob
that run until --phase after releases them (upgrade.job_seconds at most), a real job whose ClusterQueue borrows
its quota from the cohort, a job queued behind them and a suspended job. It records them, and the controllers'
and CRDs' versions, in the cluster. Its rows are partial: --phase after judges them. It releases those jobs, waits
for them, checks the stack, runs new jobs on the three MPIs and deletes the namespace (not with --keep).
"""

from __future__ import annotations

import time
from datetime import datetime

import pytest
from kubernetes import client
from kubernetes.utils import parse_quantity

from mpiplat import jobs
from mpiplat.conformance import runtimes, upgrading, workloads
from mpiplat.conformance.upgrading import CRD, DEPLOYMENT, rolled_out
from mpiplat.conformance.watch import JOB_LABEL, condition_times, submit_job, wait_pods, wait_workload_job
from mpiplat.conformance.workloads import results
from mpiplat.diagnose import diagnose
from mpiplat.kube import CLUSTERQUEUE, MPIJOB, TRAINJOB, WORKLOAD, condition, has_condition
from mpiplat.upgrade import COMPONENTS, component_of
from mpiplat.versions import pin

BEFORE, AFTER = pytest.mark.phase("before"), pytest.mark.phase("after")
JUDGED_AFTER = "--phase before: started and recorded, to be judged by --phase after"
ARGS = ["--counts", "1000", "--dtypes", "int64"]  # one small Allreduce case a round
STACK_GROUPS = ("kubeflow.org", "trainer.kubeflow.org", "jobset.x-k8s.io", "kueue.x-k8s.io")
START_TIMEOUT_S = 300  # for a job's pods to run (the real node may pull or start slowly)
END_MARGIN_S = 300  # after a job's own duration, for it to end


def _long(seconds: float) -> list[str]:
    """The allreduce arguments of a job that runs until --phase after releases it, `seconds` at most."""
    return ARGS + ["--for-seconds", f"{seconds:g}", "--until-exists", upgrading.RELEASED_PATH]


def _mpijob(mpijob_spec, name: str, ns: str, seconds: float = 0, **kw):
    """A real 2-worker allreduce MPIJob; `seconds`: it runs until released, that long at most. Its workers ask for
    little CPU (they sleep between rounds): a controller's rolling update needs room for its new pod beside the old
    one, and on the local cluster's real node the jobs' default requests left Kueue's new pod Pending."""
    return mpijob_spec(name, ns, real=True, workers=2, workload="allreduce", memory="256Mi", cpu="20m",
                       workload_args=_long(seconds) if seconds else ARGS, **kw)


def _requests(manifest: dict) -> dict[str, int]:
    """cpu (millicores) and memory (bytes) that Kueue counts for an MPIJob: every replica's requests (limits
    where a request is not set, as the API server defaults them)."""
    total = {"cpu": 0, "memory": 0}
    for replica in manifest["spec"]["mpiReplicaSpecs"].values():
        for c in replica["template"]["spec"]["containers"]:
            res = c.get("resources") or {}
            for r in total:
                q = (res.get("requests") or {}).get(r) or (res.get("limits") or {}).get(r)
                if q:
                    total[r] += int(parse_quantity(q) * (1000 if r == "cpu" else 1)) * replica.get("replicas", 1)
    return total


@pytest.fixture(scope="module")
def upgrade(pytestconfig, kube, run, settings, mpijob_spec):
    """The recorded upgrade: made now (--phase before: `lend` has quota for two of its jobs), or found (--phase
    after, which removes it when the module ends, unless --keep)."""
    try:
        if pytestconfig.getoption("--phase") == "before":
            need = _requests(jobs.mpijob(_mpijob(mpijob_spec, "sizing", "default")))
            rec = upgrading.begin(kube, run.id, settings.namespace_prefix,
                                  {"cpu": f"{2 * need['cpu']}m", "memory": str(2 * need["memory"])})
            kube.core.create_namespaced_config_map(rec.namespace, workloads.configmap(rec.namespace))
        else:
            rec = upgrading.find(kube)
            rec.release()
    except upgrading.UpgradeStateError as err:
        pytest.fail(str(err), pytrace=False)
    yield rec
    if pytestconfig.getoption("--phase") == "after" and not pytestconfig.getoption("--keep"):
        left = upgrading.remove(kube, rec)
        if left:
            raise RuntimeError(f"left after removing the recorded upgrade: {left}")


@pytest.fixture
def used(request, upgrade) -> str:
    """The recorded upgrade's namespace, as one this test's pods ran in (its evidence)."""
    request.node._mpiplat_namespaces_used = [upgrade.namespace]
    return upgrade.namespace


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def _controllers(kube) -> dict[str, list[dict]]:
    """Each component's controller Deployments: version (from the image), where, whether rolled out, image."""
    found: dict[str, list[dict]] = {}
    for d in kube.list(DEPLOYMENT, None):
        meta = d["metadata"]
        for container in d["spec"]["template"]["spec"]["containers"]:
            got = component_of(container["image"])
            if not got:
                continue
            found.setdefault(got[0], []).append({"version": got[1], "where": f"{meta['namespace']}/{meta['name']}",
                                                 "rolled": rolled_out(d), "image": container["image"]})
    return found


def _rollouts(kube, component: str) -> list[tuple[datetime, str]]:
    """When each ReplicaSet of `component`'s controller was made, and its image: a Deployment keeps one for each
    template it rolled out (up to its revisionHistoryLimit), so the upgrade's rollouts show there."""
    return sorted((rs.metadata.creation_timestamp, c.image)
                  for rs in client.AppsV1Api(kube.api_client).list_replica_set_for_all_namespaces().items
                  for c in rs.spec.template.spec.containers if (component_of(c.image) or ("",))[0] == component)


def _spanned(kube, evidence, what: str, start: datetime | None, end: datetime | None, component: str) -> str:
    """Whether `component`'s controller was rolled out (a ReplicaSet made) while the job ran: a sentence for a
    failure's message; the row is partial where the upgrade did not reach that controller during the job."""
    during = [(t, image) for t, image in _rollouts(kube, component) if start and start < t and (end is None or t < end)]
    if during:
        return "; ".join(f"the {component} controller was rolled out to {image} at {t:%H:%M:%S} while {what} ran "
                         "(the upgrade)" for t, image in during)
    evidence.partial(f"{what} ran {start and f'{start:%H:%M:%S}'} to {end and f'{end:%H:%M:%S}'}; no rollout of the "
                     f"{component} controller meanwhile: the upgrade did not reach it while the job ran (it runs "
                     "until --phase after, upgrade.job_seconds at most: run --phase after sooner, or raise that)")
    return f"the {component} controller was not rolled out while {what} ran"


def _recorded(upgrade, role: str) -> dict:
    job = upgrade.data.get("jobs", {}).get(role)
    if not job:
        pytest.fail(f"--phase before recorded no {role!r} job (see its report): nothing to judge", pytrace=False)
    return job


def _start(kube, upgrade, role: str, spec) -> None:
    """Submit a real MPIJob, wait until it runs, and record it."""
    submit_job(kube, spec)
    seen = condition_times(kube, MPIJOB, spec.name, spec.namespace, until=("Running", "Succeeded", "Failed"),
                           timeout=START_TIMEOUT_S)
    if "Running" not in seen:
        pytest.fail(f"{spec.namespace}/{spec.name} did not run ({', '.join(seen)}): "
                    f"{diagnose(kube, spec.namespace, spec.name)}")
    upgrade.job(role, kind="MPIJob", apiVersion=MPIJOB.api_version, plural=MPIJOB.plural, name=spec.name)


def _reserved(kube) -> tuple[dict, dict]:
    """Per (ClusterQueue, flavor, resource): the quota each ClusterQueue's status says is reserved, and that of
    the Workloads holding quota there (admitted, not finished)."""
    said, held = {}, {}
    for cq in kube.list(CLUSTERQUEUE, None):
        for f in (cq.get("status") or {}).get("flavorsReservation") or []:
            for r in f.get("resources") or []:
                said[(cq["metadata"]["name"], f["name"], r["name"])] = parse_quantity(r.get("total") or 0)
    for w in kube.list(WORKLOAD, None):
        admission = (w.get("status") or {}).get("admission")
        if not admission or not has_condition(w, "QuotaReserved") or has_condition(w, "Finished"):
            continue
        for ps in admission.get("podSetAssignments") or []:
            for r, q in (ps.get("resourceUsage") or {}).items():
                key = (admission["clusterQueue"], (ps.get("flavors") or {}).get(r, "?"), r)
                held[key] = held.get(key, 0) + parse_quantity(q)
    return said, held


# --phase before: record, then start each job in its state.

@BEFORE
@pytest.mark.read_only
@pytest.mark.requirement("UPG-05")
def test_before_the_controllers_versions_are_recorded(kube, upgrade, evidence):
    found = _controllers(kube)
    versions = {c: min(v["version"] for v in found[c]) for c in COMPONENTS if c in found}
    upgrade.note("versions", versions)
    evidence.partial(f"{JUDGED_AFTER}; running: " + ", ".join(f"{c} {v}" for c, v in versions.items()))


@BEFORE
@pytest.mark.read_only
@pytest.mark.requirement("UPG-06")
def test_before_the_crds_versions_are_recorded(kube, upgrade, evidence):
    crds = {c["metadata"]["name"]: {"served": sorted(v["name"] for v in c["spec"]["versions"] if v.get("served")),
                                    "stored": sorted((c.get("status") or {}).get("storedVersions") or [])}
            for c in kube.list(CRD, None) if c["spec"]["group"] in STACK_GROUPS}
    assert crds, f"no CRD of the stack's groups {STACK_GROUPS} is installed"
    upgrade.note("crds", crds)
    evidence.partial(f"{JUDGED_AFTER}; {len(crds)} CRDs of the stack")


@BEFORE
@pytest.mark.requirement("UPG-01", needs=["pod_network"])
def test_before_a_real_mpijob_runs(kube, upgrade, used, settings, mpijob_spec, evidence):
    _start(kube, upgrade, "long", _mpijob(mpijob_spec, "long", used, settings.upgrade["job_seconds"], queue="lq-lend"))
    evidence.partial(JUDGED_AFTER)


@BEFORE
@pytest.mark.requirement("UPG-04", needs=["pod_network"])
def test_before_a_real_mpijob_runs_on_borrowed_quota(kube, upgrade, used, settings, mpijob_spec, evidence):
    """`borrow` has no quota of its own: its job runs on what `lend` lends."""
    _start(kube, upgrade, "borrower",
           _mpijob(mpijob_spec, "borrower", used, settings.upgrade["job_seconds"], queue="lq-borrow"))
    name = upgrade.cluster_queue("borrow")
    until = kube.deadline(30)
    while True:
        cq = kube.get(CLUSTERQUEUE, name)
        borrowed = [r for f in (cq.get("status") or {}).get("flavorsReservation") or []
                    for r in f.get("resources") or [] if parse_quantity(r.get("borrowed") or 0) > 0]
        if borrowed or time.monotonic() > until:
            break
        time.sleep(1)
    assert borrowed, f"ClusterQueue {name} runs a job but borrows nothing: {cq.get('status')}"
    evidence.partial(JUDGED_AFTER)


@BEFORE
@pytest.mark.requirement("UPG-03", needs=["pod_network"])
def test_before_a_real_trainjob_runs(kube, upgrade, used, settings, trainjob_spec, evidence):
    """On a copy of the MPI runtime with the settings' image (runtimes.copy), as JOB-04's real TrainJob."""
    image = settings.images["OpenMPI"]
    runtimes.copy(kube, jobs.MPI_RUNTIME, used, image)
    spec = trainjob_spec("train", used, real=True, num_nodes=2, runtime=jobs.MPI_RUNTIME,
                         runtime_kind="TrainingRuntime", image=image, workload="allreduce",
                         workload_args=_long(settings.upgrade["job_seconds"]))
    manifest = jobs.trainjob(spec)
    runtimes.wait_seen(kube, manifest)
    kube.create(TRAINJOB, manifest)
    wait_pods(kube, used, f"{runtimes.JOBSET_LABEL}=train,{runtimes.REPLICATED_JOB_LABEL}=launcher",
              lambda ps: any(p.status.phase == "Running" for p in ps), timeout=START_TIMEOUT_S)
    upgrade.job("train", kind="TrainJob", apiVersion=TRAINJOB.api_version, plural=TRAINJOB.plural, name="train")
    evidence.partial(JUDGED_AFTER)


@BEFORE
@pytest.mark.requirement("UPG-02", needs=["pod_network"])
def test_before_a_job_is_queued_and_another_suspended(kube, upgrade, used, mpijob_spec, evidence):
    """The queued job waits for `lend`'s quota, which UPG-01's and UPG-04's jobs hold; the suspended one is not
    queued (no queue name): mpi-operator holds it."""
    if not {"long", "borrower"} <= set(upgrade.data.get("jobs", {})):
        pytest.skip("UPG-01's and UPG-04's jobs are not running: nothing would hold this job in the queue")
    submit_job(kube, _mpijob(mpijob_spec, "queued", used, queue="lq-lend"))
    time.sleep(5)  # Kueue tries to admit it meanwhile
    workload = next((w for w in kube.list(WORKLOAD, used)
                     if any(o.get("name") == "queued" for o in w["metadata"].get("ownerReferences", []))), None)
    assert workload, f"{used}/queued has no Workload: Kueue does not manage it"
    pending = condition(workload, "QuotaReserved")
    assert not has_condition(workload, "QuotaReserved"), f"{used}/queued was admitted at once: {pending}"
    upgrade.job("queued", kind="MPIJob", apiVersion=MPIJOB.api_version, plural=MPIJOB.plural, name="queued")
    submit_job(kube, _mpijob(mpijob_spec, "suspended", used, suspend=True))
    # As long as a start may take: a loaded API server slows mpi-operator, which exits when it cannot renew its
    # Lease in time and is restarted with a back-off (the CI of 0894fcd saw no status after 60 s).
    condition_times(kube, MPIJOB, "suspended", used, until=("Suspended",), timeout=START_TIMEOUT_S)
    assert not kube.core.list_namespaced_pod(used, label_selector=f"{JOB_LABEL}=suspended").items
    upgrade.job("suspended", kind="MPIJob", apiVersion=MPIJOB.api_version, plural=MPIJOB.plural, name="suspended")
    evidence.partial(f"{JUDGED_AFTER}; queued: {(pending or {}).get('message', 'no QuotaReserved condition yet')}")


# --phase after: the stack first (read-only), then each job, then new jobs.

@AFTER
@pytest.mark.read_only
@pytest.mark.requirement("UPG-05")
def test_after_the_controllers_run_the_pinned_versions(kube, upgrade):
    found, before = _controllers(kube), upgrade.data.get("versions", {})
    wrong = []
    for c in COMPONENTS:
        want = pin(c)["version"]
        if c not in found:
            wrong.append(f"{c}: no Deployment runs its controller (pinned {want})")
        wrong += [f"{c}: {d['where']} runs {d['version']} ({d['image']}), pinned {want}" for d in found.get(c, [])
                  if d["version"] != want]
        wrong += [f"{c}: {d['where']} has not finished rolling out" for d in found.get(c, [])
                  if d["version"] == want and not d["rolled"]]
    assert not wrong, "; ".join(wrong) + " (before the upgrade: " + (
        ", ".join(f"{c} {v}" for c, v in before.items()) or "not recorded") + ")"


@AFTER
@pytest.mark.read_only
@pytest.mark.requirement("UPG-06")
def test_after_every_crd_version_in_use_is_still_served(kube, upgrade):
    recorded = upgrade.data.get("crds")
    assert recorded, "--phase before recorded no CRD (see its report): nothing to compare"
    lost = []
    for name, before in recorded.items():
        crd = kube.find(CRD, name)
        if crd is None:
            lost.append(f"CRD {name} is gone")
            continue
        served = {v["name"] for v in crd["spec"]["versions"] if v.get("served")}
        stored = set(before["stored"]) | set((crd.get("status") or {}).get("storedVersions") or [])
        lost += [f"{name}: {v} holds stored objects but is no longer served" for v in sorted(stored - served)]
    for role, job in upgrade.data.get("jobs", {}).items():
        try:
            kube.get_path(f"/apis/{job['apiVersion']}/namespaces/{upgrade.namespace}/{job['plural']}/{job['name']}")
        except Exception as err:  # the API's answer, whatever it is, is the finding
            lost.append(f"the {role} {job['kind']} recorded before cannot be read at {job['apiVersion']}: "
                        f"{getattr(err, 'reason', None) or err}")
    assert not lost, "; ".join(lost)


@AFTER
@pytest.mark.requirement("UPG-01", needs=["pod_network"])
def test_after_the_mpijob_that_ran_across_the_upgrade_succeeded(kube, upgrade, used, settings, evidence):
    _recorded(upgrade, "long")
    failure = None
    try:
        wait_workload_job(kube, "long", used, "allreduce", ranks=2,
                          timeout=settings.upgrade["job_seconds"] + END_MARGIN_S)
    except AssertionError as err:
        failure = err
    status = kube.get(MPIJOB, "long", used).get("status") or {}
    spanned = _spanned(kube, evidence, "the MPIJob", _time(status.get("startTime")),
                       _time(status.get("completionTime")), "mpi-operator")
    if failure:
        raise AssertionError(f"{spanned}; {failure}") from failure


@AFTER
@pytest.mark.requirement("UPG-03", needs=["pod_network"])
def test_after_the_trainjob_that_ran_across_the_upgrade_completed(kube, upgrade, used, settings, evidence):
    _recorded(upgrade, "train")
    seen = condition_times(kube, TRAINJOB, "train", used, until=("Complete", "Failed"),
                           timeout=settings.upgrade["job_seconds"] + END_MARGIN_S)
    job = kube.get(TRAINJOB, "train", used)
    done = condition(job, "Complete") or condition(job, "Failed") or {}
    spanned = _spanned(kube, evidence, "the TrainJob", _time(job["metadata"]["creationTimestamp"]),
                       _time(done.get("lastTransitionTime")), "trainer")
    launchers = kube.core.list_namespaced_pod(
        used, label_selector=f"{runtimes.JOBSET_LABEL}=train,{runtimes.REPLICATED_JOB_LABEL}=launcher").items
    log = kube.core.read_namespaced_pod_log(launchers[-1].metadata.name, used) if launchers else ""
    assert "Complete" in seen, f"{used}/train did not complete ({seen}); {spanned}\n--- launcher log\n{log[-2000:]}"
    results.assert_passed(results.parse(log), "allreduce", ranks=2)


@AFTER
@pytest.mark.requirement("UPG-02", needs=["pod_network"])
def test_after_the_queued_job_was_admitted_and_the_suspended_one_resumes(kube, upgrade, used, settings):
    _recorded(upgrade, "queued")
    _recorded(upgrade, "suspended")
    wait_workload_job(kube, "queued", used, "allreduce", ranks=2,
                      timeout=settings.upgrade["job_seconds"] + END_MARGIN_S)
    kube.patch(MPIJOB, "suspended", {"spec": {"runPolicy": {"suspend": False}}}, used)
    wait_workload_job(kube, "suspended", used, "allreduce", ranks=2, timeout=START_TIMEOUT_S)


@AFTER
@pytest.mark.requirement("UPG-04", needs=["pod_network"])
def test_after_quota_usage_equals_the_jobs_alive(kube, upgrade, used, settings):
    """Once the borrowing job has ended, every ClusterQueue's reserved quota (its status) equals that of its
    admitted, unfinished Workloads, and `borrow` borrows nothing. Kueue writes a ClusterQueue's status a moment
    after a change: the two must agree within 30 s."""
    _recorded(upgrade, "borrower")
    wait_workload_job(kube, "borrower", used, "allreduce", ranks=2,
                      timeout=settings.upgrade["job_seconds"] + END_MARGIN_S)
    until = kube.deadline(30)
    while True:
        said, held = _reserved(kube)
        differ = {k: (said.get(k, 0), held.get(k, 0)) for k in set(said) | set(held)
                  if said.get(k, 0) != held.get(k, 0)}
        if not differ or time.monotonic() > until:
            break
        time.sleep(1)
    assert not differ, "quota reserved that no job holds, or held but not counted: " + "; ".join(
        f"ClusterQueue {cq} flavor {f} {r}: status {s}, jobs {h}" for (cq, f, r), (s, h) in sorted(differ.items()))


@AFTER
@pytest.mark.requirement("UPG-07", needs=["pod_network"])
def test_after_new_mpijobs_run_on_the_three_mpis(kube, run, mpijob_spec):
    ns = run.namespace()
    kube.core.create_namespaced_config_map(ns, workloads.configmap(ns))
    names = {impl: f"new-{impl.lower()}" for impl in ("OpenMPI", "Intel", "MPICH")}
    for impl, name in names.items():
        submit_job(kube, _mpijob(mpijob_spec, name, ns, implementation=impl))
    failed = []
    for impl, name in names.items():
        try:
            wait_workload_job(kube, name, ns, "allreduce", ranks=2, timeout=START_TIMEOUT_S)
        except AssertionError as err:
            failed.append(f"{impl}: {str(err)[:1500]}")
    assert not failed, "\n".join(failed)
