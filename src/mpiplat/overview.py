"""Many jobs and queues at once, in a few API calls: what a console's job list and queue page show.

The SDK's Client.summaries, .namespaces and .cluster_queues call these; the dashboard reads them through it.
"""

from __future__ import annotations

import datetime
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mpiplat.jobs import GPU_RESOURCE, JOB_LABEL, ROLE_LABEL, MPIJob
from mpiplat.kube import CLUSTERQUEUE, LOCALQUEUE, MPIJOB, TRAINJOB, WORKLOAD, Kind, Kube, condition, has_condition
from mpiplat.queues import capacity, held

JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"  # on a TrainJob's pods (its JobSet has the TrainJob's name)
VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta1"
KINDS = ("MPIJob", "TrainJob")


@dataclass
class JobSummary:
    """One row of a job list. phase: an MPIJob's as JobStatus has it; a TrainJob's the same words
    (Queued/Suspended, Created, Running, Succeeded, Failed)."""

    kind: str
    namespace: str
    name: str
    phase: str
    queue: str | None = None  # LocalQueue
    cluster_queue: str | None = None  # where admitted
    position: int | None = None  # in its LocalQueue while pending (Kueue's visibility API)
    workers: int = 0
    workers_ready: int = 0
    gpus: int = 0  # the whole job's
    created: str | None = None
    started: str | None = None
    finished: str | None = None
    message: str = ""
    waiting: str = ""  # why Kueue has not admitted it yet: Kueue's words, and ours where we know more
    nodes: tuple[str, ...] = ()  # where its worker pods are placed

    def duration(self, now: datetime.datetime | None = None) -> float | None:
        """Seconds from start to finish (or to now while it runs)."""
        if not self.started:
            return None
        end = _time(self.finished) if self.finished else (now or datetime.datetime.now(datetime.UTC))
        return max(0.0, (end - _time(self.started)).total_seconds())


@dataclass
class PendingWorkload:
    namespace: str
    name: str  # the Workload's
    job: str  # its owner's name
    local_queue: str
    position: int | None
    gpus: int


@dataclass
class QueueSummary:
    """A ClusterQueue's GPUs: its own (nominal), in use (reserved by admitted workloads), borrowed from its
    cohort (in use beyond nominal), and its pending workloads in Kueue's order."""

    name: str
    cohort: str
    nominal: int
    used: int
    borrowed: int
    borrowable: int
    active: bool
    pending: list[PendingWorkload] = field(default_factory=list)
    admitted: int = 0


def _time(stamp: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _list(kube: Kube, kind: Kind, namespace: str | None, selector: str = "") -> list[dict]:
    if namespace is None:
        return kube.custom.list_cluster_custom_object(kind.group, kind.version, kind.plural,
                                                      label_selector=selector)["items"]
    return kube.list(kind, namespace, selector)


def _pods(kube: Kube, namespace: str | None, selector: str) -> list[client.V1Pod]:
    if namespace is None:
        return kube.core.list_pod_for_all_namespaces(label_selector=selector).items
    return kube.core.list_namespaced_pod(namespace, label_selector=selector).items


def _ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _trainjob_phase(obj: dict) -> str:
    for ctype, phase in (("Failed", "Failed"), ("Complete", "Succeeded")):
        if has_condition(obj, ctype):
            return phase
    if (obj.get("spec") or {}).get("suspend"):
        return "Queued" if (obj["metadata"].get("labels") or {}).get("kueue.x-k8s.io/queue-name") else "Suspended"
    jobs = (obj.get("status") or {}).get("jobsStatus") or []
    return "Running" if any((j.get("active") or 0) > 0 for j in jobs) else "Created"


def _gpus(resources: dict | None, resource: str) -> int:
    limits = (resources or {}).get("limits") or {}
    return int(str(limits.get(resource, 0)))


def summaries(kube: Kube, namespace: str | None, kinds: tuple[str, ...] = KINDS,
              gpu_resource: str = GPU_RESOURCE) -> list[JobSummary]:
    """Every job of `kinds` in `namespace` (None: all namespaces), newest first, with its queue state, from
    one list call per kind, one for the jobs' Workloads and their pods, and one per LocalQueue with pending
    jobs. A kind the cluster does not serve (404) has no jobs; a forbidden one raises ApiException."""
    from mpiplat.sdk import job_status  # the one phase rule for MPIJobs

    calls = {"workloads": lambda: _list(kube, WORKLOAD, namespace)}
    if "MPIJob" in kinds:
        calls["MPIJob"] = lambda: _list(kube, MPIJOB, namespace)
        calls["mpi-pods"] = lambda: _pods(kube, namespace, f"{ROLE_LABEL}=worker")
    if "TrainJob" in kinds:
        calls["TrainJob"] = lambda: _list(kube, TRAINJOB, namespace)
        calls["train-pods"] = lambda: _pods(kube, namespace, JOBSET_LABEL)
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = {k: pool.submit(f) for k, f in calls.items()}
    found: dict[str, list] = {}
    for key, fut in futures.items():
        try:
            found[key] = fut.result()
        except ApiException as err:
            if err.status != 404 and not (key == "workloads" and err.status == 403):
                raise
            found[key] = []
    by_owner = {o["uid"]: w for w in found["workloads"] for o in w["metadata"].get("ownerReferences") or []}
    ready: dict[tuple[str, str], int] = {}
    placed: dict[tuple[str, str, str], set[str]] = {}
    for key, label in (("mpi-pods", JOB_LABEL), ("train-pods", JOBSET_LABEL)):
        for pod in found.get(key, []):
            owner = (pod.metadata.labels or {}).get(label)
            if owner and _ready(pod):
                ready[(key, pod.metadata.namespace, owner)] = ready.get((key, pod.metadata.namespace, owner), 0) + 1
            if owner and pod.spec.node_name:
                placed.setdefault((key, pod.metadata.namespace, owner), set()).add(pod.spec.node_name)
    rows: list[JobSummary] = []
    for obj in found.get("MPIJob", []):
        job, st, meta = MPIJob.from_manifest(obj), job_status(obj), obj["metadata"]
        rows.append(JobSummary("MPIJob", meta["namespace"], meta["name"], st.phase, queue=job.queue,
                               workers=job.workers, gpus=job.workers * _worker_gpus(obj, gpu_resource),
                               workers_ready=ready.get(("mpi-pods", meta["namespace"], meta["name"]), 0),
                               created=meta.get("creationTimestamp"), started=st.start_time,
                               finished=st.completion_time, message=st.message,
                               nodes=tuple(sorted(placed.get(("mpi-pods", meta["namespace"], meta["name"]), ())))))
    for obj in found.get("TrainJob", []):
        meta, spec = obj["metadata"], obj.get("spec") or {}
        trainer = spec.get("trainer") or {}
        nodes = int(trainer.get("numNodes") or 1)
        done = condition(obj, "Complete") or condition(obj, "Failed")
        latest = max((obj.get("status") or {}).get("conditions") or [],
                      key=lambda c: c.get("lastTransitionTime") or "", default={})
        rows.append(JobSummary("TrainJob", meta["namespace"], meta["name"], _trainjob_phase(obj),
                               queue=(meta.get("labels") or {}).get("kueue.x-k8s.io/queue-name"), workers=nodes,
                               gpus=nodes * _gpus(trainer.get("resourcesPerNode"), gpu_resource),
                               workers_ready=ready.get(("train-pods", meta["namespace"], meta["name"]), 0),
                               created=meta.get("creationTimestamp"),
                               started=(condition(obj, "Created") or {}).get("lastTransitionTime"),
                               finished=(done or {}).get("lastTransitionTime") if done and done.get(
                                   "status") == "True" else None, message=latest.get("message", ""),
                               nodes=tuple(sorted(placed.get(("train-pods", meta["namespace"], meta["name"]), ())))))
    # Each row with its job's Workload (the rows were made in the order of these objects).
    queued = [(row, wl) for row, obj in zip(rows, found.get("MPIJob", []) + found.get("TrainJob", []), strict=True)
              if (wl := by_owner.get(obj["metadata"]["uid"])) is not None]
    for row, wl in queued:
        row.queue = wl["spec"].get("queueName") or row.queue
        row.cluster_queue = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue")
    pending = [(row, wl) for row, wl in queued if not has_condition(wl, "QuotaReserved") and not row.finished]
    pending_queues = {(row.namespace, row.queue) for row, _ in pending}
    positions = _positions(kube, pending_queues, found["workloads"])
    for row, wl in queued:
        row.position = positions.get((row.namespace, wl["metadata"]["name"]))
    holds = _held_queues(kube, pending_queues)
    for row, wl in pending:
        kueue = (condition(wl, "QuotaReserved") or {}).get("message", "")
        behind = f"{row.position} job(s) ahead of it in LocalQueue {row.queue}" if row.position else ""
        row.waiting = "; ".join(p for p in (holds.get((row.namespace, row.queue), ""),
                                            f"Kueue: {kueue}" if kueue else behind) if p)
    rows.sort(key=lambda r: r.created or "", reverse=True)
    return rows


def _held_queues(kube: Kube, queues: set[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """(namespace, LocalQueue) -> why it is held ("LocalQueue q is held (stopPolicy: Hold)"), for those of `queues`
    whose stopPolicy holds them; those the caller may not read are left out."""
    out = {}
    for ns, name in queues:
        try:
            why = held(kube.find(LOCALQUEUE, name, ns) if name else None)
        except ApiException:
            continue
        if why:
            out[(ns, name)] = f"LocalQueue {name} {why}"
    return out


def _worker_gpus(obj: dict, resource: str) -> int:
    worker = ((obj["spec"].get("mpiReplicaSpecs") or {}).get("Worker") or {}).get("template") or {}
    return sum(_gpus(c.get("resources"), resource) for c in (worker.get("spec") or {}).get("containers") or [])


def queue_order(wl: dict) -> tuple:
    """Kueue's order of pending workloads: higher priority first, then the earlier time it entered the queue (its
    eviction's, if it was evicted, else its creation's)."""
    evicted = condition(wl, "Evicted") or {}
    since = evicted.get("lastTransitionTime") if evicted.get("status") == "True" else None
    return -(wl["spec"].get("priority") or 0), since or wl["metadata"].get("creationTimestamp") or "", \
        wl["metadata"]["name"]


def _positions(kube: Kube, queues: set[tuple[str, str]], workloads: list[dict]) -> dict[tuple[str, str], int]:
    """(namespace, Workload name) -> its position in its LocalQueue (0: next), for the pending ones of `queues`:
    Kueue's own (its visibility API), or where the cluster does not serve that API to the caller, the position
    in Kueue's order (queue_order) among the queue's pending workloads."""
    def one(ns_queue: tuple[str, str]) -> list[dict] | None:
        ns, lq = ns_queue
        try:
            return kube.get_path(f"{VISIBILITY}/namespaces/{ns}/localqueues/{lq}/pendingworkloads").get("items", [])
        except ApiException:
            return None
    out = {}
    if queues:
        with ThreadPoolExecutor(min(8, len(queues))) as pool:
            for (ns, lq), items in zip(queues, pool.map(one, queues), strict=True):
                if items is None:
                    items = [{"metadata": w["metadata"], "positionInLocalQueue": n} for n, w in enumerate(sorted(
                        (w for w in workloads if w["metadata"]["namespace"] == ns and w["spec"].get("queueName") == lq
                         and not has_condition(w, "QuotaReserved") and not has_condition(w, "Finished")),
                        key=queue_order))]
                for w in items:
                    out[(ns, w["metadata"]["name"])] = w.get("positionInLocalQueue")
    return out


def queue_positions(kube: Kube, namespace: str, local_queue: str) -> dict[tuple[str, str], int]:
    """The positions of one LocalQueue's pending workloads, as _positions gives them."""
    return _positions(kube, {(namespace, local_queue)}, kube.list(WORKLOAD, namespace))


def namespaces(kube: Kube, candidates: list[str] | None, resource: str = MPIJOB.plural,
               group: str = MPIJOB.group) -> list[str] | None:
    """The namespaces in which the caller may list `resource`: None when it may list them in every namespace
    (one cluster-wide list serves), else those of `candidates` (default: the namespaces the caller may list,
    else its context's) that it may, each asked of the API server (SelfSubjectAccessReview)."""
    authz = client.AuthorizationV1Api(kube.api_client)

    def allowed(ns: str | None) -> bool:
        review = authz.create_self_subject_access_review(client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=client.V1ResourceAttributes(
                namespace=ns, verb="list", group=group, resource=resource))))
        return bool(review.status.allowed)

    if allowed(None):
        return None
    if candidates is None:
        try:
            candidates = [n.metadata.name for n in kube.core.list_namespace().items]
        except ApiException:
            candidates = [kube.namespace]
    if not candidates:
        return []
    with ThreadPoolExecutor(min(16, len(candidates))) as pool:
        return [ns for ns, ok in zip(candidates, pool.map(allowed, candidates), strict=True) if ok]


def cluster_queues(kube: Kube, gpu_resource: str = GPU_RESOURCE) -> list[QueueSummary]:
    """Every ClusterQueue's GPUs and pending workloads in order (Kueue's own where its visibility API answers, else
    queue_order), by cohort then name."""
    listed = kube.custom.list_cluster_custom_object(CLUSTERQUEUE.group, CLUSTERQUEUE.version, CLUSTERQUEUE.plural)
    cqs = {c["metadata"]["name"]: c for c in listed["items"]}
    workloads = _list(kube, WORKLOAD, None)
    lq_cq = {(q["metadata"]["namespace"], q["metadata"]["name"]): (q.get("spec") or {}).get("clusterQueue")
             for q in _list(kube, LOCALQUEUE, None)}
    out = []
    for name, cq in cqs.items():
        cap = capacity(cqs, name, gpu_resource)
        mine = [w for w in workloads if _cluster_queue(w, lq_cq) == name]
        try:
            order = [(w["metadata"]["namespace"], w["metadata"]["name"], w.get("positionInClusterQueue"))
                     for w in kube.get_path(f"{VISIBILITY}/clusterqueues/{name}/pendingworkloads").get("items", [])]
        except ApiException:
            order = []
        rank = {(ns, n): pos for ns, n, pos in order}
        pending = [w for w in mine if not has_condition(w, "QuotaReserved") and not has_condition(w, "Finished")]
        pending.sort(key=lambda w: (rank.get((w["metadata"]["namespace"], w["metadata"]["name"]), 1 << 30),
                                    queue_order(w)))
        out.append(QueueSummary(
            name=name, cohort=(cq["spec"].get("cohortName") or cq["spec"].get("cohort") or ""), nominal=cap.nominal,
            used=cap.reserved, borrowed=max(0, cap.reserved - cap.nominal), borrowable=cap.borrowable,
            active=has_condition(cq, "Active"),
            admitted=sum(1 for w in mine if has_condition(w, "Admitted") and not has_condition(w, "Finished")),
            pending=[PendingWorkload(w["metadata"]["namespace"], w["metadata"]["name"],
                                     ((w["metadata"].get("ownerReferences") or [{}])[0]).get("name", ""),
                                     w["spec"].get("queueName", ""),
                                     rank.get((w["metadata"]["namespace"], w["metadata"]["name"])),
                                     _workload_gpus(w, gpu_resource)) for w in pending]))
    out.sort(key=lambda q: (q.cohort, q.name))
    return out


def _cluster_queue(wl: dict, lq_cq: dict) -> str | None:
    """Where a Workload is admitted, else where its LocalQueue sends it."""
    admitted = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue")
    return admitted or lq_cq.get((wl["metadata"]["namespace"], wl["spec"].get("queueName")))


def _workload_gpus(wl: dict, resource: str) -> int:
    total = 0
    for ps in wl["spec"].get("podSets") or []:
        spec = (ps.get("template") or {}).get("spec") or {}
        total += int(ps.get("count") or 1) * sum(_gpus(c.get("resources"), resource)
                                                 for c in spec.get("containers") or [])
    return total
