"""`mpiplat diagnose NAMESPACE/JOB`: read a job, its pods, events and Kueue workload; name the root
cause and a remedy."""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from mpiplat import queues
from mpiplat.jobs import GPU_RESOURCE, INDEX_LABEL, JOB_LABEL, REQUIRED_TOPOLOGY, ROLE_LABEL, SSH_PORT
from mpiplat.kube import LOCALQUEUE, MPIJOB, TRAINJOB, WORKLOAD, Kube, condition, has_condition

_PULL = "check the image name and tag, the pull secret, or the registry mirror (mpiplat_image_registry)"
REMEDIES = {
    "OOMKilled": "raise the {role} memory limit (resources.limits.memory) or lower the per-rank batch size",
    "ErrImagePull": _PULL,
    "ImagePullBackOff": _PULL,
    "CreateContainerConfigError": "a referenced ConfigMap or Secret is missing; check the pod's events",
    "Evicted": "the node ran out of resources; set requests equal to limits for MPI pods",
}


# What mpirun prints in the launcher's log when a rank dies of a signal (as copied from real runs:
# src/mpiplat/tests/test_diagnose.py). Groups: host, signal, and rank where the implementation names it.
_RANK_SIGNALLED = (
    # Open MPI 4.1 (5.x says prterun and may wrap before "signal"):
    # "mpirun noticed that process rank 1 with PID 18 on node j-worker-1.j.ns.svc exited on signal 9 (Killed)."
    re.compile(r"noticed that process rank (?P<rank>\d+) with PID \d+ on node (?P<host>\S+) exited on\s+"
               r"signal (?P<signal>\d+)"),
    # Intel MPI (Hydra): "=   RANK 1 PID 16 RUNNING AT j-worker-1.j.ns.svc" / "=   KILLED BY SIGNAL: 9 (Killed)"
    re.compile(r"=\s+RANK (?P<rank>\d+) PID \d+ RUNNING AT (?P<host>\S+)\s*\n=\s+KILLED BY SIGNAL: (?P<signal>\d+)"),
    # MPICH (Hydra) prints this block only for a process a signal ended (!WIFEXITED), with the raw wait
    # status as "EXIT CODE", i.e. the signal number (+128 with a core dump):
    # "=   PID 14 RUNNING AT j-worker-1.j.ns.svc" / "=   EXIT CODE: 9"
    re.compile(r"BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\s*\n=\s+PID \d+ RUNNING AT (?P<host>\S+)"
               r"\s*\n=\s+EXIT CODE: (?P<signal>\d+)"),
)
# What the launcher's log shows when mpirun cannot reach a host: OpenSSH's own message (Open MPI and MPICH
# pass ssh's stderr through), or Intel MPI's, which hides ssh's message and gives its wait status.
_SSH_FAILED = (
    # "ssh: connect to host j-worker-1.j.ns.svc port 2222: Connection refused" (or "Connection timed out",
    # "No route to host")
    re.compile(r"ssh: connect to host (?P<host>\S+) port (?P<port>\d+): (?P<error>[^\r\n]+)"),
    # "[mpiexec@j-launcher] Error: Unable to run bstrap_proxy on j-worker-1.j.ns.svc (pid 13, exit code 65280)"
    re.compile(r"Unable to run bstrap_proxy on (?P<host>\S+) \(pid \d+, exit code (?P<status>\d+)\)"),
    # "ssh: Could not resolve hostname j-worker-1.j.ns.svc: Temporary failure in name resolution"
    re.compile(r"ssh: (?P<error>Could not resolve hostname (?P<host>[^:\s]+): [^\r\n]+)"),
)
# Kueue's Topology Aware Scheduling on a pod set no domain of the required level can hold.
TOPOLOGY_WAIT = re.compile(r'topology "[^"]+" (allows to fit only|doesn\'t allow to fit)')
LOG_TAIL_LINES = 500  # mpirun's last words are at the end of the launcher's log
LOG_TIMEOUT_S = 10


@dataclass(frozen=True)
class RankSignalled:
    """A rank that a signal ended, as mpirun reported it."""

    host: str
    signal: int
    rank: int | None = None


@dataclass(frozen=True)
class Unreachable:
    """A host mpirun could not reach over SSH: ssh's error, or (Intel MPI) ssh's exit status."""

    host: str
    port: int | None = None
    error: str = ""
    ssh_exit: int | None = None


def launcher_log_failure(log: str) -> RankSignalled | Unreachable | None:
    """The first failure mpirun reports in a launcher's log that names a host, else None."""
    found: list[tuple[int, RankSignalled | Unreachable]] = []
    for rx in _RANK_SIGNALLED:
        matches = list(rx.finditer(log))
        if matches:
            m = matches[0]
            # Intel MPI reports every rank of the host's proxy, its cleanup's victims too, in rank order:
            # the host is sure, the rank only where it reports one.
            ranks = {r["rank"] for r in matches if r["host"] == m["host"] and r.groupdict().get("rank")}
            found.append((m.start(), RankSignalled(m["host"], int(m["signal"]) & 0x7F,
                                                   int(ranks.pop()) if len(ranks) == 1 else None)))
    for rx in _SSH_FAILED:
        if m := rx.search(log):
            g = m.groupdict()
            status = int(g["status"]) if g.get("status") else None
            found.append((m.start(), Unreachable(m["host"], int(g["port"]) if g.get("port") else None,
                                                 (g.get("error") or "").strip(),
                                                 status >> 8 if status is not None else None)))
    return min(found, key=lambda f: f[0])[1] if found else None


def pod_of_host(host: str, job: str) -> tuple[str, int | None] | None:
    """(role, index) of an MPIJob's pod from a host name in its hostfile or in mpirun's messages:
    `<job>-worker-<i>` or `<job>-launcher`, alone or followed by a domain (`.<job>.<ns>.svc`)."""
    name = host.split(".", 1)[0]
    if m := re.fullmatch(rf"{re.escape(job)}-worker-(\d+)", name):
        return "worker", int(m[1])
    if name == f"{job}-launcher":
        return "launcher", None
    return None


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _label_selects(selector: dict | None, labels: dict[str, str]) -> bool:
    """Whether a LabelSelector (API dict; empty selects all) selects `labels`."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if (op == "In" and labels.get(key) not in values) or (op == "NotIn" and labels.get(key) in values) \
                or (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels):
            return False
    return True


def policies_selecting(policies: list[dict], labels: dict[str, str], direction: str) -> list[str]:
    """Names of the NetworkPolicies (API dicts, one namespace) that isolate a pod with `labels` for
    `direction` ("Ingress" or "Egress"): only what they allow reaches (leaves) it."""
    names = []
    for pol in policies:
        spec = pol.get("spec") or {}
        types = spec.get("policyTypes") or (["Ingress", "Egress"] if spec.get("egress") else ["Ingress"])
        if direction in types and _label_selects(spec.get("podSelector"), labels):
            names.append(pol["metadata"]["name"])
    return sorted(names)


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
    if TOPOLOGY_WAIT.search(lq_message):
        return Diagnosis(f"{namespace}/{name}", "Queued", f"queued: no domain of its Topology has room for all its "
                         f"pods: {lq_message}",
                         f"the job requires one domain of a Topology level ({REQUIRED_TOPOLOGY}); it starts when "
                         "running jobs free one. Ask for fewer pods, or require a coarser level", [lq_message])
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
    job, kind = kube.find(MPIJOB, name, namespace), "MPIJob"
    if job is None:
        job, kind = kube.find(TRAINJOB, name, namespace), "TrainJob"
    if job is None:
        return Diagnosis(job_ref, "NotFound", f"no MPIJob or TrainJob {job_ref}",
                         "check the namespace and name (kubectl get mpijobs,trainjobs -A)")
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
    if kind == "MPIJob" and state not in ("Succeeded", "Complete") and not (failures and failures[0][0] == "worker"):
        # No worker pod failed; mpirun's report in the launcher's log may name the worker (a rank killed
        # inside a running worker, an unreachable worker), also while the job still runs (MPICH waits on).
        from_log = _from_launcher_log(kube, namespace, name, job, pods)
        if from_log:
            cause, remedy = from_log
            more = [f"{f[0]} {f[3]} (exit {f[4]})" for f in failures]
            return Diagnosis(job_ref, state, cause, remedy, more + details)
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

    if kind == "MPIJob" and state == "Pending" and not pods and not job.get("status"):
        return Diagnosis(job_ref, state, "the MPI Operator has not picked up the job (no status, no pods)",
                         "check that the MPI Operator runs (kubectl get pods -A -l app=mpi-operator) and read its log",
                         details)
    events = kube.core.list_namespaced_event(namespace).items
    claims = _pending_claims(kube, namespace, pods, events)
    if claims:
        return Diagnosis(job_ref, state,
                         f"pods wait for PersistentVolumeClaims that are not Bound: {'; '.join(claims)}",
                         "check the claim's StorageClass and that its provisioner runs (kubectl get pvc,storageclass)",
                         details)
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
        remedy = "read the launcher log"
        if kind == "MPIJob" and not any((p.metadata.labels or {}).get(ROLE_LABEL) == "launcher" for p in pods):
            remedy = ("the launcher pod and its log are gone: with the launcher's restartPolicy OnFailure (the "
                      "default) the Job controller deletes it at the backoff limit; set restartPolicy: Never on "
                      "the Launcher to keep it")
        return Diagnosis(job_ref, state, f"job failed: {msg}", remedy, details)
    return Diagnosis(job_ref, state, "no problem found", "wait, or watch the job's events", details)


def _pending_claims(kube: Kube, namespace: str, pods, events) -> list[str]:
    """'claim (phase: its last event)' for each PersistentVolumeClaim of the Pending pods not Bound."""
    names = sorted({v.persistent_volume_claim.claim_name for p in pods if p.status.phase == "Pending"
                    for v in p.spec.volumes or [] if v.persistent_volume_claim})
    found = []
    for name in names:
        try:
            phase = kube.core.read_namespaced_persistent_volume_claim(name, namespace).status.phase
        except ApiException as err:
            if err.status != 404:
                raise
            phase = "missing"
        if phase != "Bound":
            said = [e.message for e in events if e.involved_object.kind == "PersistentVolumeClaim"
                    and e.involved_object.name == name]
            found.append(f"{name} ({phase}{': ' + said[-1] if said else ''})")
    return found


def _launcher_log(kube: Kube, namespace: str, pod) -> str:
    """The end of a launcher pod's log, and of its previous run's where the container restarted."""
    texts = []
    restarted = any((cs.restart_count or 0) > 0 for cs in (pod.status.container_statuses or []))
    for previous in ((False, True) if restarted else (False,)):
        try:
            texts.append(kube.core.read_namespaced_pod_log(pod.metadata.name, namespace, container="launcher",
                                                           previous=previous, tail_lines=LOG_TAIL_LINES,
                                                           _request_timeout=LOG_TIMEOUT_S))
        except (ApiException, HTTPError, OSError):  # not started yet, a simulated pod (no log), a node away
            pass
    return "\n".join(reversed(texts))


def _worker_labels(job: dict, name: str, index: int, pods) -> dict[str, str]:
    """Worker `index`'s labels: its pod's, or (the pod is gone, e.g. cleaned up after the failure) those
    mpi-operator gives it: the template's plus the job, role and index labels."""
    for p in pods:
        labels = p.metadata.labels or {}
        if labels.get(ROLE_LABEL) == "worker" and labels.get(INDEX_LABEL) == str(index):
            return dict(labels)
    template = job["spec"]["mpiReplicaSpecs"].get("Worker", {}).get("template", {})
    return {**(template.get("metadata", {}).get("labels") or {}), JOB_LABEL: name, ROLE_LABEL: "worker",
            INDEX_LABEL: str(index), "training.kubeflow.org/operator-name": "mpi-operator"}


def _from_launcher_log(kube: Kube, namespace: str, name: str, job: dict, pods) -> tuple[str, str] | None:
    """(cause, remedy) from mpirun's report in the newest launcher's log that names a worker, else None."""
    launchers = sorted((p for p in pods if (p.metadata.labels or {}).get(ROLE_LABEL) == "launcher"),
                       key=lambda p: p.metadata.creation_timestamp, reverse=True)
    for launcher in launchers:
        found = launcher_log_failure(_launcher_log(kube, namespace, launcher))
        where = pod_of_host(found.host, name) if found else None
        if not found or not where:
            continue
        role, index = where
        who = f"{role} {index}" if index is not None else role
        log_cmd = f"kubectl -n {namespace} logs {launcher.metadata.name}"
        if isinstance(found, RankSignalled):
            rank = f"MPI rank {found.rank}" if found.rank is not None else "an MPI rank"
            cause = (f"{who} ({found.host}): {rank} killed by signal {found.signal} "
                     f"({_signal_name(found.signal)}, exit {128 + found.signal})")
            if found.signal == signal.SIGKILL:
                remedy = (f"SIGKILL on a rank is most often the kernel's OOM killer at the {role}'s memory limit: "
                          f"raise the {role} memory limit (resources.limits.memory) or lower the per-rank batch "
                          "size; otherwise find what killed it (kubectl describe pod, the node's kernel log)")
            else:
                remedy = f"the rank crashed: read its output before mpirun's report ({log_cmd})"
            return cause, remedy
        if found.error.startswith("Could not resolve hostname"):
            cause = f"MPI communication failed: {who} unreachable: its name does not resolve (ssh: {found.error})"
            remedy = (f"the cluster DNS does not answer for the job's hostnames: check CoreDNS (kubectl -n kube-system "
                      f"get deploy,pods -l k8s-app=kube-dns), the job's headless Service {name} in {namespace}, and "
                      "that NetworkPolicies let the job's pods reach DNS (UDP and TCP 53)")
            return cause, remedy
        how = (f"ssh to {found.host} port {found.port}: {found.error}" if found.port is not None else
               f"ssh to {found.host} failed (exit {found.ssh_exit})")
        cause = f"MPI communication failed: {who} unreachable ({how})"
        ingress, egress = _policies_in_the_way(kube, namespace, name, job, pods, index, launchers[0])
        listed = "; ".join(filter(None, [
            f"NetworkPolicies that limit ingress to {who}: {', '.join(ingress)}" if ingress else "",
            f"that limit egress from the launcher: {', '.join(egress)}" if egress else ""]))
        remedy = (f"check the NetworkPolicies of namespace {namespace}: the job's pods must reach each other on "
                  f"TCP {found.port or SSH_PORT} (SSH) and on MPI's own ports"
                  + (f" ({listed}; kubectl -n {namespace} get networkpolicy -o yaml)" if listed else
                     " (none selects the job's pods: check the CNI and firewalls between nodes)")
                  + f"; if the network is open, check the {role}'s sshd and the job's SSH keys ({log_cmd})")
        return cause, remedy
    return None


def _policies_in_the_way(kube: Kube, namespace: str, name: str, job: dict, pods, index: int | None,
                         launcher) -> tuple[list[str], list[str]]:
    """Names of the NetworkPolicies that limit ingress to worker `index` and egress from the launcher."""
    policies = _network_policies(kube, namespace)
    ingress = policies_selecting(policies, _worker_labels(job, name, index, pods), "Ingress") \
        if index is not None else []
    return ingress, policies_selecting(policies, launcher.metadata.labels or {}, "Egress")


def _network_policies(kube: Kube, namespace: str) -> list[dict]:
    """The namespace's NetworkPolicies as API dicts; none where they cannot be listed."""
    try:
        found = client.NetworkingV1Api(kube.api_client).list_namespaced_network_policy(namespace).items
    except ApiException:  # e.g. not allowed to list them
        return []
    return [kube.api_client.sanitize_for_serialization(p) for p in found]
