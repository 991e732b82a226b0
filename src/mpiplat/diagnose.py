"""`mpiplat diagnose NAMESPACE/JOB`: read a job, its pods, events and Kueue workload; name the root
cause and a remedy."""

from __future__ import annotations

from dataclasses import dataclass, field

from kubernetes.client.exceptions import ApiException

from mpiplat import queues
from mpiplat.jobs import GPU_RESOURCE, INDEX_LABEL, JOB_LABEL, ROLE_LABEL
from mpiplat.kube import LOCALQUEUE, MPIJOB, TRAINJOB, WORKLOAD, Kube, condition, has_condition

_PULL = "check the image name and tag, the pull secret, or the registry mirror (mpiplat_image_registry)"
REMEDIES = {
    "OOMKilled": "raise the {role} memory limit (resources.limits.memory) or lower the per-rank batch size",
    "ErrImagePull": _PULL,
    "ImagePullBackOff": _PULL,
    "CreateContainerConfigError": "a referenced ConfigMap or Secret is missing; check the pod's events",
    "Evicted": "the node ran out of resources; set requests equal to limits for MPI pods",
}


@dataclass
class Diagnosis:
    job: str
    state: str
    cause: str
    remedy: str
    details: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"{self.job}: {self.state}", f"cause:  {self.cause}", f"remedy: {self.remedy}"]
        return "\n".join(lines + [f"  - {d}" for d in self.details])


def _gpus(quantity) -> int:
    try:
        return int(str(quantity))
    except ValueError:
        return 0


def _pod_failure(pod) -> tuple[str, int | None, str] | None:
    for cs in (pod.status.container_statuses or []):
        term = cs.state.terminated if cs.state else None
        if term and (term.exit_code or 0) != 0:
            return term.reason or "Error", term.exit_code, cs.name
        waiting = cs.state.waiting if cs.state else None
        if waiting and waiting.reason in REMEDIES:
            return waiting.reason, None, cs.name
    if pod.status.reason == "Evicted":
        return "Evicted", None, ""
    return None


def _queued(kube: Kube, namespace: str, name: str, gpu_resource: str) -> Diagnosis | None:
    workloads = [w for w in kube.list(WORKLOAD, namespace)
                 if any(o.get("name") == name for o in w["metadata"].get("ownerReferences", []))]
    if not workloads:
        return None
    wl = workloads[0]
    if has_condition(wl, "Admitted") or has_condition(wl, "QuotaReserved"):
        return None
    needs = 0
    for ps in wl["spec"].get("podSets", []):
        for c in ps["template"]["spec"].get("containers", []):
            res = c.get("resources", {})
            needs += _gpus(res.get("requests", {}).get(gpu_resource, res.get("limits", {}).get(gpu_resource, 0))) \
                * ps.get("count", 1)
    cq_name = (wl.get("status", {}).get("admission") or {}).get("clusterQueue")
    lq_message = (condition(wl, "QuotaReserved") or {}).get("message", "")
    cq_name = cq_name or _cluster_queue_of(kube, namespace, wl["spec"].get("queueName", ""))
    cap = None
    if cq_name:
        try:
            cap = queues.gpu_capacity(kube, cq_name, gpu_resource)
        except (ApiException, KeyError):
            pass
    if cap is not None:
        cause = (f"queued: ClusterQueue {cq_name} has {cap.nominal} GPUs, {cap.reserved} in use, "
                 f"{cap.borrowable} borrowable now (at most {cap.borrow_ceiling}); job needs {needs}")
        remedy = ("the job can never fit: lower its GPU request or raise the queue's nominal quota / borrowing limit"
                  if needs > cap.most else
                  "it starts when running jobs (of this queue or its cohort) release quota; or raise the queue's quota")
    else:
        cause = f"queued in {wl['spec'].get('queueName')}: {lq_message}"
        remedy = "check the LocalQueue and ClusterQueue"
    return Diagnosis(f"{namespace}/{name}", "Queued", cause, remedy, [lq_message] if lq_message else [])


def _cluster_queue_of(kube: Kube, namespace: str, local_queue: str) -> str | None:
    try:
        return kube.get(LOCALQUEUE, local_queue, namespace)["spec"]["clusterQueue"]
    except (ApiException, KeyError):
        return None


def diagnose(kube: Kube, namespace: str, name: str, gpu_resource: str = GPU_RESOURCE) -> Diagnosis:
    job_ref = f"{namespace}/{name}"
    try:
        job, kind = kube.get(MPIJOB, name, namespace), "MPIJob"
    except ApiException as err:
        if err.status != 404:
            raise
        try:
            job, kind = kube.get(TRAINJOB, name, namespace), "TrainJob"
        except ApiException as err2:
            if err2.status == 404:
                return Diagnosis(job_ref, "NotFound", f"no MPIJob or TrainJob {job_ref}",
                                 "check the namespace and name (kubectl get mpijobs,trainjobs -A)")
            raise
    state = next((t for t in ("Failed", "Succeeded", "Complete", "Running", "Suspended", "Created")
                  if has_condition(job, t)), "Pending")
    selector = f"{JOB_LABEL}={name}" if kind == "MPIJob" else f"jobset.sigs.k8s.io/jobset-name={name}"
    pods = kube.core.list_namespaced_pod(namespace, label_selector=selector).items
    details = [f"pod {p.metadata.name}: {p.status.phase}" for p in pods]

    failures = []
    for pod in pods:
        failure = _pod_failure(pod)
        if failure:
            labels = pod.metadata.labels or {}
            failures.append((labels.get(ROLE_LABEL, "pod"), labels.get(INDEX_LABEL), pod.metadata.name, *failure))
    # Workers first: a launcher failure usually follows a worker's death and hides it.
    failures.sort(key=lambda f: (f[0] != "worker", f[2]))
    if failures:
        role, index, pod, reason, code, container = failures[0]
        who = f"{role} {index}" if index is not None else role
        exit_part = f" (exit {code})" if code is not None else ""
        remedy = REMEDIES.get(reason, f"read the log: kubectl -n {namespace} logs {pod} -c {container}")
        cause = f"{who} {reason}{exit_part}"
        more = [f"{f[0]} {f[1] if f[1] is not None else ''} {f[3]} (exit {f[4]})".replace("  ", " ")
                for f in failures[1:]]
        return Diagnosis(job_ref, state, cause, remedy.format(role=role), more + details)

    queued = _queued(kube, namespace, name, gpu_resource)
    if queued:
        queued.state = state if state != "Pending" else "Queued"
        return queued

    events = kube.core.list_namespaced_event(namespace).items
    unschedulable = [e for e in events if e.reason == "FailedScheduling"
                     and any(e.involved_object.name == p.metadata.name for p in pods)]
    if unschedulable:
        msg = unschedulable[-1].message
        return Diagnosis(job_ref, state, f"pods cannot be scheduled: {msg}",
                         "free or add nodes with the requested resources, or relax the node selector/tolerations",
                         details)
    if state in ("Succeeded", "Complete"):
        return Diagnosis(job_ref, state, "the job succeeded", "nothing to do", details)
    if state == "Failed":
        msg = (condition(job, "Failed") or {}).get("message", "")
        return Diagnosis(job_ref, state, f"job failed: {msg}", "read the launcher log", details)
    return Diagnosis(job_ref, state, "no problem found", "wait, or watch the job's events", details)
