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
from mpiplat.kube import (
    CLUSTERQUEUE,
    LOCALQUEUE,
    MPIJOB,
    TRAINJOB,
    WORKLOAD,
    Kube,
    condition,
    has_condition,
    label_selects,
)
from mpiplat.refusals import pod_refusal

_PULL = "check the image name and tag, the pull secret, or the registry mirror (mpiplat_image_registry)"
_PASSWD_FIX = ("make /etc/passwd group-0 writable and complete it in the entrypoint (set args, not command, so the "
               "entrypoint runs), or use nss_wrapper; see docs/sdk.md 'Your own image'")
_KEY_FIX = ("mount the key where the user looks (sshAuthMountPath under the user's home, not /root/.ssh, whose mode "
            "0600 makes it root-only) or set fsGroup")
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
# What the launcher's log shows when Hydra's proxies (MPICH, Intel MPI), started on the workers over ssh, cannot
# call mpiexec back at the host name it gave them (the launcher's own hostname), as copied from real runs
# (src/mpiplat/tests/test_diagnose.py): the connect error, and before it the resolver's where the name did not
# resolve. Groups: proxy (the worker's hostname), host, port; error.
_PROXY_LINE = r"\[(?:proxy|bstrap):[\d:]+@(?P<proxy>[^\]\s]+)\][^\n]*?"  # "[proxy:0@<worker>] <where>: "
_PROXY_NO_SERVER = re.compile(_PROXY_LINE + r"unable to connect to server (?P<host>\S+) at port (?P<port>\d+)")
# MPICH's resolver error names the host; Intel MPI's does not.
_PROXY_UNRESOLVED = re.compile(_PROXY_LINE + r"(?P<error>unable to get host address for (?P<host>\S+)[^\n]*"
                                             r"|getaddrinfo returned error[^\n]*)")
# The job builder's launcher (jobs.launcher_command) when a worker could not connect back to it in its wait.
_BUILDER_NO_CALLBACK = re.compile(r"mpiplat: cannot connect back to the launcher at (?P<host>[^:\s]+):"
                                  r"(?P<port>\d+)\s*\nmpiplat: worker (?P<proxy>\S+) could not connect back")
# Open MPI (ORTE, 4.x): a worker's daemon that mpirun lost, and daemons that never called mpirun back.
_DAEMON_LOST = re.compile(r"ORTE has lost communication with a remote daemon\.(?:.*\n){0,4}?.*Remote daemon:\s*\S+ "
                          r"on node (?P<host>\S+)")
_DAEMONS_SILENT = re.compile(r"An ORTE daemon has unexpectedly failed after launch and before\s+communicating back "
                             r"to mpirun|ORTE was unable to reliably start one or more daemons")
# What a pod's log shows when its uid has no passwd entry (OpenShift's restricted-v2 runs pods as an arbitrary
# uid with group 0): the client ssh and some sshd refuse to go on, so do Python's getpass and coreutils.
_USER_UNKNOWN = (
    re.compile(r"No user exists for uid (?P<uid>\d+)"),  # OpenSSH
    re.compile(r"You don't exist, go away!"),  # older OpenSSH ssh
    re.compile(r"getpwuid\(\): uid not found: (?P<uid>\d+)"),  # Python: KeyError from getpass.getuser(), pwd
    re.compile(r"cannot find name for user ID (?P<uid>\d+)"),  # whoami, id -un
    # Our MPI images' entrypoint, where it may not write /etc/passwd (group 0 may)
    re.compile(r"uid (?P<uid>\d+) has no passwd entry and cannot add one"),
)
# An SSH key the pod's uid cannot read: the client's identity, sshd's host key (the job's key, for mpi-operator).
_KEY_UNREADABLE = (
    re.compile(r'Load key "(?P<path>[^"]+)": Permission denied'),  # ssh
    # sshd, then "sshd: no hostkeys available -- exiting." (it says the same where the file is missing)
    re.compile(r"Unable to load host key: (?P<path>\S+)"),
)
# A non-root sshd whose uid has no passwd entry still starts (OpenSSH 9.2), then refuses the login:
# "Invalid user mpiuser from 10.244.0.7 port 40312"; the client says "mpiuser@<host>: Permission denied (...)".
_LOGIN_UNKNOWN = re.compile(r"Invalid user (?P<user>\S+) from \S+")
_LOGIN_REFUSED = re.compile(r"(?P<user>[^@\s]+)@(?P<host>[^:\s]+): Permission denied \((?P<methods>[^)]*)\)")
# Kueue's Topology Aware Scheduling on a pod set no domain of the required level can hold.
TOPOLOGY_WAIT = re.compile(r'topology "[^"]+" (allows to fit only|doesn\'t allow to fit)')
LOG_TAIL_LINES = 500  # mpirun's last words are at the end of the launcher's log
LOG_TIMEOUT_S = 10
LOG_READS_MAX = 3  # crashed pods whose logs diagnose reads: a uid's or key's trouble shows in each


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


@dataclass(frozen=True)
class LauncherUnreachable:
    """A worker whose Hydra proxy (`proxy`, its hostname) could not connect back to mpiexec at `host`:`port`;
    `unresolved` is the resolver's error where the name did not resolve."""

    proxy: str
    host: str
    port: int
    unresolved: str = ""


@dataclass(frozen=True)
class DaemonLost:
    """Open MPI's daemon on `host` that mpirun lost contact with."""

    host: str


@dataclass(frozen=True)
class LoginRefused:
    """A host whose sshd refused mpirun's ssh login as `user`."""

    host: str
    user: str
    methods: str = ""


@dataclass(frozen=True)
class UserUnknown:
    """A process that found no passwd entry for its uid (`uid` where the message gives it), as `said`."""

    said: str
    uid: int | None = None


@dataclass(frozen=True)
class KeyUnreadable:
    """An SSH key at `path` that ssh (`host_key` False) or sshd (True) could not load, as `said`."""

    path: str
    said: str
    host_key: bool = False


@dataclass(frozen=True)
class LoginUnknown:
    """sshd that knows no `user`, the name a client logs in as, as `said`."""

    user: str
    said: str


def identity_failure(log: str) -> UserUnknown | KeyUnreadable | LoginUnknown | None:
    """The first sign in a pod's log that its uid has no passwd entry or cannot read its SSH key, else None."""
    found: list[tuple[int, UserUnknown | KeyUnreadable | LoginUnknown]] = []
    for rx in _USER_UNKNOWN:
        if m := rx.search(log):
            found.append((m.start(), UserUnknown(m[0], int(m["uid"]) if m.groupdict().get("uid") else None)))
    for rx in _KEY_UNREADABLE:
        if m := rx.search(log):
            found.append((m.start(), KeyUnreadable(m["path"], m[0], host_key=m[0].startswith("Unable"))))
    if m := _LOGIN_UNKNOWN.search(log):
        found.append((m.start(), LoginUnknown(m["user"], m[0])))
    return min(found, key=lambda f: f[0])[1] if found else None


Failure = RankSignalled | Unreachable | LoginRefused | LauncherUnreachable | DaemonLost


def launcher_log_failure(log: str) -> Failure | None:
    """The first failure mpirun reports in a launcher's log that names a host, else None."""
    found: list[tuple[int, Failure]] = []
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
    if m := _LOGIN_REFUSED.search(log):
        found.append((m.start(), LoginRefused(m["host"], m["user"], m["methods"])))
    if m := _PROXY_NO_SERVER.search(log):
        why = next((u["error"].strip() for u in _PROXY_UNRESOLVED.finditer(log, 0, m.end())
                    if u["proxy"] == m["proxy"] and u["host"] in (None, m["host"])), "")
        found.append((m.start(), LauncherUnreachable(m["proxy"], m["host"], int(m["port"]), why)))
    if m := _BUILDER_NO_CALLBACK.search(log):
        found.append((m.start(), LauncherUnreachable(m["proxy"], m["host"], int(m["port"]))))
    if m := _DAEMON_LOST.search(log):
        found.append((m.start(), DaemonLost(m["host"])))
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


def policies_selecting(policies: list[dict], labels: dict[str, str], direction: str) -> list[str]:
    """Names of the NetworkPolicies (API dicts, one namespace) that isolate a pod with `labels` for
    `direction` ("Ingress" or "Egress"): only what they allow reaches (leaves) it."""
    names = []
    for pol in policies:
        spec = pol.get("spec") or {}
        types = spec.get("policyTypes") or (["Ingress", "Egress"] if spec.get("egress") else ["Ingress"])
        if direction in types and label_selects(spec.get("podSelector"), labels):
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
    local_queue = wl["spec"].get("queueName", "")
    held = _local_queue_held(kube, namespace, local_queue)
    if held:
        return Diagnosis(f"{namespace}/{name}", "Queued", held[0], held[1], [lq_message] if lq_message else [])
    cq_name = cq_name or _cluster_queue_of(kube, namespace, local_queue)
    stopped = _cluster_queue_stopped(kube, cq_name) if cq_name else None
    if stopped:
        cause, remedy = stopped
        return Diagnosis(f"{namespace}/{name}", "Queued", cause, remedy, [lq_message] if lq_message else [])
    cap = None
    if cq_name:
        try:
            cap = queues.gpu_capacity(kube, cq_name, gpu_resource)
        except (ApiException, KeyError):
            pass
    arithmetic = (f"ClusterQueue {cq_name} has {cap.nominal} GPUs, {cap.reserved} in use, {cap.borrowable} "
                  f"borrowable now (at most {cap.borrow_ceiling}); job needs {needs}") if cap is not None else ""
    if cap is not None and needs > cap.available:  # the arithmetic is the cause only where the job does not fit
        remedy = ("the job can never fit: lower its GPU request or raise the queue's nominal quota / borrowing limit"
                  if needs > cap.most else
                  "it starts when running jobs (of this queue or its cohort) release quota; or raise the queue's quota")
        return Diagnosis(f"{namespace}/{name}", "Queued", f"queued: {arithmetic}", remedy,
                         [lq_message] if lq_message else [])
    if lq_message:  # Kueue's own reason, first
        return Diagnosis(f"{namespace}/{name}", "Queued", f"queued: Kueue says: {lq_message}",
                         _kueue_remedy(lq_message, namespace, cq_name or "", local_queue),
                         [arithmetic] if arithmetic else [])
    if cap is not None:
        return Diagnosis(f"{namespace}/{name}", "Queued", f"queued: {arithmetic}",
                         "Kueue gives no reason yet: it admits in order, and this job's turn has not come; watch "
                         f"kubectl -n {namespace} get workloads", [])
    return Diagnosis(f"{namespace}/{name}", "Queued", f"queued in {local_queue}: Kueue gives no reason yet",
                     "check the LocalQueue and ClusterQueue", [])


_NAMESPACE_MISMATCH = re.compile(r"namespace doesn't match ClusterQueue selector", re.I)


def _kueue_remedy(message: str, namespace: str, cq: str, local_queue: str) -> str:
    """What to do about the reason Kueue gives on a Workload it does not admit."""
    if _NAMESPACE_MISMATCH.search(message):
        return (f"ClusterQueue {cq or '(the LocalQueue ' + local_queue + ' names)'}'s namespaceSelector does not "
                f"select namespace {namespace}: fix the selector (kubectl get clusterqueue {cq} -o "
                f"jsonpath='{{.spec.namespaceSelector}}') or the namespace's labels")
    if "insufficient" in message or "quota" in message:
        return ("it starts when running jobs release the quota Kueue names; or ask for less, or raise the "
                "ClusterQueue's quota for that resource")
    if "flavor" in message.lower():
        return "no ResourceFlavor of the ClusterQueue fits the job's pods (node labels, taints): check its flavors"
    return f"act on Kueue's reason; kubectl -n {namespace} describe workloads shows it"


def _local_queue_held(kube: Kube, namespace: str, name: str) -> tuple[str, str] | None:
    """(cause, remedy) where LocalQueue `name` is held by its stopPolicy; None otherwise, or where unreadable."""
    try:
        why = queues.held(kube.find(LOCALQUEUE, name, namespace) if name else None)
    except ApiException:
        return None
    if why is None:
        return None
    return (f"queued: LocalQueue {namespace}/{name} {why}: it admits no job",
            f"release it when its owner agrees: kubectl -n {namespace} patch localqueue {name} --type=merge "
            "-p '{\"spec\":{\"stopPolicy\":\"None\"}}'")


def _cluster_queue_stopped(kube: Kube, name: str) -> tuple[str, str] | None:
    """(cause, remedy) where ClusterQueue `name` admits nothing whatever its quota: held by its stopPolicy, or
    not Active (e.g. a ResourceFlavor it names is missing); None otherwise, or where it cannot be read."""
    try:
        cq = kube.find(CLUSTERQUEUE, name)
    except ApiException:  # e.g. 403: a team member may not read ClusterQueues
        return None
    found = queues.admits_nothing(cq) if cq is not None else None
    if found is None:
        return None
    how, why = found
    if how == "held":
        return (f"queued: ClusterQueue {name} {why}: it admits no job whatever its quota",
                f"release it when its owner agrees: kubectl patch clusterqueue {name} --type=merge "
                "-p '{\"spec\":{\"stopPolicy\":\"None\"}}'")
    return (f"queued: ClusterQueue {name} {why}",
            f"fix what its Active condition names (kubectl get clusterqueue {name} -o yaml), e.g. create the "
            "ResourceFlavors it lists")


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
    if state not in ("Succeeded", "Complete"):
        # A worker that exited or crash-loops may say why in its log: no passwd entry for its uid, an SSH key it
        # cannot read (its sshd's host key). The launcher's log is read below.
        found = _identity_of_crashed_pods(kube, namespace, pods)
        if found:
            cause, remedy = found
            return Diagnosis(job_ref, state, cause, remedy, [f"{f[0]} {f[3]} (exit {f[4]})" for f in failures]
                             + details)
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

    replicas = (job.get("spec") or {}).get("mpiReplicaSpecs") or {}
    expected = sum(int((r or {}).get("replicas", 1)) for r in replicas.values())
    events = None  # the namespace's events, listed once where a check below needs them
    if kind == "MPIJob" and len(pods) < expected and state not in ("Succeeded", "Complete"):
        try:
            events = kube.core.list_namespaced_event(namespace).items
        except ApiException:  # who may not read events gets the checks that need none
            events = None
        refused = _refused_pods(events or [], name, (job.get("metadata") or {}).get("uid"))
        if refused:
            return Diagnosis(job_ref, state, refused[0], refused[1], details)
    if kind == "MPIJob" and state != "Suspended" and not (job.get("spec", {}).get("runPolicy") or {}).get("suspend"):
        stuck = _launcher_still_suspended(kube, namespace, name)
        if stuck:
            return Diagnosis(job_ref, state, stuck[0], stuck[1], details)
    if kind == "MPIJob" and state == "Pending" and not pods and not job.get("status"):
        return Diagnosis(job_ref, state, "the MPI Operator has not picked up the job (no status, no pods)",
                         "check that the MPI Operator runs (kubectl get pods -A -l app=mpi-operator) and read its log",
                         details)
    if events is None:
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


_REFUSED_BY = {  # who refused, in pod_refusal's words -> what to do
    "security context constraints": "set no runAsUser, fsGroup or privileges the namespace's SCC does not allow "
                                    "(restricted-v2: leave the UID to the cluster, drop capabilities)",
}
_REFUSAL_WORDS = (("exceeded quota", "a ResourceQuota", "ask for less, or raise the namespace's ResourceQuota "
                   "(kubectl describe resourcequota)"),
                  ("LimitRange", "a LimitRange", "fit the pods' requests and limits into the namespace's LimitRange "
                   "(kubectl describe limitrange)"),
                  ("admission webhook", "an admission webhook", "read the webhook's message; its owner decides"),
                  ("ValidatingAdmissionPolicy", "an admission policy", "read the policy's message; its owner "
                   "decides"))


def _refused_pods(events: list, name: str, uid: str | None = None) -> tuple[str, str] | None:
    """(cause, remedy) where the API server refused the pods of MPIJob `name`, by the namespace's `events`
    (mpi-operator's on the MPIJob, the Job controller's on its launcher Job): SCC, Pod Security, quota, LimitRange, a
    webhook or policy, named in their own words."""
    mine = {("MPIJob", name), ("Job", f"{name}-launcher")}
    refusals = [e for e in events if (e.involved_object.kind, e.involved_object.name) in mine
                and "forbidden" in (e.message or "")
                and not (uid and e.involved_object.kind == "MPIJob" and getattr(e.involved_object, "uid", None)
                         not in (None, uid))]  # not a deleted job's of the same name
    if not refusals:
        return None
    message = refusals[-1].message or ""
    what = "the launcher" if refusals[-1].involved_object.kind == "Job" else "the operator's"
    found = pod_refusal(message)
    if found:
        who, reasons = found
        remedy = _REFUSED_BY.get(who, "give the pods what Pod Security requires (restricted: runAsNonRoot, no "
                                 "privilege escalation, capabilities drop ALL, seccomp RuntimeDefault)")
        return f"the cluster refuses {what} pods: {who}: {'; '.join(reasons)}", remedy
    for words, who, remedy in _REFUSAL_WORDS:
        if words in message:
            return f"the cluster refuses {what} pods ({who}): {message}", remedy
    return f"the cluster refuses {what} pods: {message}", "read the refusal: the API server names what it refuses"


def _launcher_still_suspended(kube: Kube, namespace: str, name: str) -> tuple[str, str] | None:
    """(cause, remedy) where the MPIJob runs again (resumed) but its launcher Job stays suspended: the operator
    could not resume it (mpi-operator v0.8.2 without `update` on jobs/status: kubeflow/mpi-operator#830)."""
    try:
        launcher = client.BatchV1Api(kube.api_client).read_namespaced_job(f"{name}-launcher", namespace)
    except (ApiException, AttributeError):
        return None
    if not (launcher.spec and launcher.spec.suspend) or not (launcher.status and launcher.status.start_time):
        return None
    return ("the job is resumed, but its launcher Job stays suspended: the MPI Operator cannot resume a launcher "
            "that had started",
            "read the operator's log (kubectl -n mpi-operator logs deploy/mpi-operator): \"cannot update resource "
            "jobs/status\" means its ClusterRole lacks update on batch jobs/status (kubeflow/mpi-operator#830; the "
            "mpi_operator role grants it)")


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


def _main_container(pod, role: str) -> str:
    """The name of a pod's container named `role` (as the job builder names them), else of its first."""
    names = [c.name for c in (pod.spec.containers if pod.spec else None) or []] \
        or [cs.name for cs in pod.status.container_statuses or []]
    return role if role in names or not names else names[0]


def _pod_log(kube: Kube, namespace: str, pod, container: str) -> str:
    """The end of a container's log, and of its previous run's where it restarted."""
    texts = []
    restarted = any(cs.name == container and (cs.restart_count or 0) > 0
                    for cs in (pod.status.container_statuses or []))
    for previous in ((False, True) if restarted else (False,)):
        try:
            texts.append(kube.core.read_namespaced_pod_log(pod.metadata.name, namespace, container=container,
                                                           previous=previous, tail_lines=LOG_TAIL_LINES,
                                                           _request_timeout=LOG_TIMEOUT_S) or "")  # None: empty
        except (ApiException, HTTPError, OSError):  # not started yet, a simulated pod (no log), a node away
            pass
    return "\n".join(reversed(texts))


def _crashed(pod) -> list[str]:
    """The containers of `pod` that exited non-zero, now or before a restart (a crash loop), for a reason that has
    no remedy of its own (REMEDIES: OOMKilled)."""
    names = []
    for cs in pod.status.container_statuses or []:
        ended = [t for t in ((cs.state.terminated if cs.state else None),
                             (cs.last_state.terminated if cs.last_state else None)) if t and (t.exit_code or 0) != 0]
        if ended and ended[0].reason not in REMEDIES:
            names.append(cs.name)
    return names


def _who(pod) -> str:
    """'worker 1 (j-worker-1)', 'launcher (j-launcher-x)', or the pod's name where it has no MPIJob role."""
    labels = pod.metadata.labels or {}
    role, index = labels.get(ROLE_LABEL), labels.get(INDEX_LABEL)
    if not role:
        return pod.metadata.name
    return f"{role}{f' {index}' if index is not None else ''} ({pod.metadata.name})"


def _run_as_user(pod, container: str) -> int | None:
    """The uid the pod's spec runs `container` as (OpenShift's SCC writes it there), else None."""
    spec = pod.spec
    if spec is None:
        return None
    for c in spec.containers or []:
        if c.name == container and c.security_context and c.security_context.run_as_user is not None:
            return c.security_context.run_as_user
    return spec.security_context.run_as_user if spec.security_context else None


def _identity_cause(found: UserUnknown | KeyUnreadable | LoginUnknown, pod, container: str) -> tuple[str, str]:
    """(cause, remedy) for a pod whose log says its uid has no passwd entry or cannot read its SSH key."""
    uid = found.uid if isinstance(found, UserUnknown) and found.uid is not None else _run_as_user(pod, container)
    user = f"uid {uid}" if uid is not None else "the container's uid"
    if isinstance(found, KeyUnreadable):
        what = (f"sshd cannot load its host key {found.path}" if found.host_key else
                f"ssh cannot read the key {found.path}")
        missing = " (or nothing is there)" if found.host_key else ""
        return (f"{_who(pod)}: {what} ({found.said})",
                f"{user} cannot read the SSH key at {found.path}{missing}: {_KEY_FIX}")
    if isinstance(found, LoginUnknown):
        return (f"{_who(pod)}: sshd knows no user {found.user}, the name the launcher logs in as ({found.said})",
                f"the image has no passwd entry named {found.user} for {user}, the pod's: {_PASSWD_FIX}")
    cause = f"{_who(pod)}: no passwd entry for {user} ({found.said})"
    if "cannot add one" in found.said:  # our MPI images' entrypoint
        return cause, ("the image's entrypoint cannot write /etc/passwd, which group 0 may write: run the pod with "
                       "group 0 (runAsGroup unset or 0) and a writable root filesystem")
    return cause, (f"the image has no passwd entry for {user} (OpenShift's restricted-v2 SCC, or a runAsUser, "
                   f"picks a uid the image does not know): {_PASSWD_FIX}")


def _identity_of_crashed_pods(kube: Kube, namespace: str, pods) -> tuple[str, str] | None:
    """(cause, remedy) from the log of a pod other than the launcher that exited or crash-loops, where it says
    that its uid has no passwd entry or cannot read its SSH key; else None. Reads LOG_READS_MAX logs at most."""
    crashed = [(p, c) for p in sorted(pods, key=lambda p: p.metadata.name)
               if (p.metadata.labels or {}).get(ROLE_LABEL) != "launcher" for c in _crashed(p)]
    for pod, container in crashed[:LOG_READS_MAX]:
        found = identity_failure(_pod_log(kube, namespace, pod, container))
        if found:
            return _identity_cause(found, pod, container)
    return None


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


def stuck_launcher(kube: Kube, namespace: str, name: str) -> Diagnosis | None:
    """The diagnosis of a Running MPIJob whose launcher's log already reports a failure that mpirun may wait on
    forever (MPICH's Hydra after an unresolved worker), else None: a wait can end there instead of timing out."""
    job = kube.find(MPIJOB, name, namespace)
    if job is None or not has_condition(job, "Running") or has_condition(job, "Failed"):
        return None
    pods = kube.core.list_namespaced_pod(namespace, label_selector=f"{JOB_LABEL}={name}").items
    found = _from_launcher_log(kube, namespace, name, job, pods)
    return Diagnosis(f"{namespace}/{name}", "Running", *found, [f"pod {p.metadata.name}: {p.status.phase}"
                                                                for p in pods]) if found else None


def _from_launcher_log(kube: Kube, namespace: str, name: str, job: dict, pods) -> tuple[str, str] | None:
    """(cause, remedy) from mpirun's report in the newest launcher's log that names a worker, else None."""
    launchers = sorted((p for p in pods if (p.metadata.labels or {}).get(ROLE_LABEL) == "launcher"),
                       key=lambda p: p.metadata.creation_timestamp, reverse=True)
    for launcher in launchers:
        container = _main_container(launcher, "launcher")
        log = _pod_log(kube, namespace, launcher, container)
        found = launcher_log_failure(log)
        where = pod_of_host(found.proxy if isinstance(found, LauncherUnreachable) else found.host, name) \
            if found else None
        # A uid without a passwd entry or a key it cannot read stops ssh: mpirun's ssh failures follow from it. A
        # rank killed by a signal had started, and that is the report to give.
        ident = identity_failure(log)
        if ident and not (isinstance(found, RankSignalled) and where):
            return _identity_cause(ident, launcher, container)
        if not found and _DAEMONS_SILENT.search(log):
            return ("MPI start-up failed: Open MPI's daemons on the workers never called mpirun back",
                    f"the daemons connect to the launcher's address on TCP ports mpirun picks: NetworkPolicies of "
                    f"namespace {namespace} must let the job's workers reach its launcher on any TCP port (or fix "
                    f"the ports: --mca oob_tcp_static_ipv4_ports); read the log (kubectl -n {namespace} logs "
                    f"{launcher.metadata.name})")
        if not found or not where:
            continue
        role, index = where
        who = f"{role} {index}" if index is not None else role
        log_cmd = f"kubectl -n {namespace} logs {launcher.metadata.name}"
        if isinstance(found, LoginRefused):
            return _login_refused(kube, namespace, found, role, index, who, pods)
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
        if isinstance(found, LauncherUnreachable):
            return _launcher_unreachable(kube, namespace, name, found, who, log_cmd)
        if isinstance(found, DaemonLost):
            return (f"MPI communication failed: mpirun lost {who}'s Open MPI daemon ({found.host})",
                    f"the {role} died or the network between the pods broke: check the {role} pod (kubectl -n "
                    f"{namespace} describe pod) and the NetworkPolicies of namespace {namespace} ({log_cmd})")
        if found.error.startswith("Could not resolve hostname"):
            cause = f"MPI communication failed: {who} unreachable: its name does not resolve (ssh: {found.error})"
            return cause, _unresolved_remedy(kube, namespace, name, found.host)
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


def _launcher_unreachable(kube: Kube, namespace: str, name: str, found: LauncherUnreachable, who: str,
                          log_cmd: str) -> tuple[str, str]:
    """(cause, remedy) for a worker whose Hydra proxy could not call mpiexec back."""
    if found.unresolved:
        short = "." not in found.host
        return (f"MPI start-up failed: {who}'s Hydra proxy cannot reach mpiexec on the launcher: the name "
                f"{found.host} does not resolve ({found.unresolved})",
                ("mpiexec gives its proxies its own hostname, and a pod's short hostname is not a DNS name in the "
                 "cluster (only <pod>.<subdomain>.<namespace>.svc is): " if short else
                 "the cluster DNS does not answer for the launcher's name: ")
                + "make mpiexec pass its IP address instead: set I_MPI_HYDRA_IFACE=eth0 (Intel MPI) or "
                  f"HYDRA_IFACE=eth0 (MPICH) in the launcher's environment, or mpirun -iface eth0 ({log_cmd})")
    return (f"MPI start-up failed: {who} cannot connect back to the launcher at {found.host} port {found.port}",
            f"check the NetworkPolicies of namespace {namespace}: the job's workers must reach its launcher on the "
            f"TCP ports mpirun listens on (any, unless I_MPI_PORT_RANGE or MPIR_CVAR_CH3_PORT_RANGE fix them) "
            f"({log_cmd})")


def _ready_endpoints(kube: Kube, namespace: str, service: str) -> list[dict] | None:
    """The ready endpoints of a Service's EndpointSlices; None where it has none or they cannot be read."""
    try:
        slices = kube.call_path("GET", f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
                                query=[("labelSelector", f"kubernetes.io/service-name={service}")])["items"]
    except (ApiException, HTTPError, OSError, KeyError):
        return None
    return [e for s in slices for e in s.get("endpoints") or [] if (e.get("conditions") or {}).get("ready")] \
        if slices else None


def _cluster_dns_ready(kube: Kube) -> bool | None:
    """Whether the cluster DNS Service (kube-system/kube-dns; OpenShift's openshift-dns/dns-default) has a ready
    endpoint; None where neither is found or they cannot be read."""
    for ns, svc in (("kube-system", "kube-dns"), ("openshift-dns", "dns-default")):
        ready = _ready_endpoints(kube, ns, svc)
        if ready is not None:
            return bool(ready)
    return None


def _unresolved_remedy(kube: Kube, namespace: str, name: str, host: str) -> str:
    """Why a job's pod name did not resolve for mpirun: the cluster DNS down; the name served now, so it came
    after mpirun had started (a pod is Ready before the DNS serves its record); or the pod not in the job's
    Service at all."""
    dns = _cluster_dns_ready(kube)
    if dns is False:
        return ("the cluster DNS has no ready server: check CoreDNS (kubectl -n kube-system get deploy,pods -l "
                "k8s-app=kube-dns)")
    pod = host.split(".", 1)[0]
    if any(e.get("hostname") == pod for e in _ready_endpoints(kube, namespace, name) or []):
        return (f"{pod} is in the job's Service {name} now: its DNS record came after mpirun had started (a pod is "
                "Ready before the cluster DNS serves its name; kubeflow/mpi-operator#443). Rerun the job, or make the "
                "launcher wait until every host of its hostfile resolves before mpirun (a loop over getent hosts)")
    return (f"the cluster DNS does not answer for the job's hostnames: check CoreDNS (kubectl -n kube-system get "
            f"deploy,pods -l k8s-app=kube-dns), the job's headless Service {name} in {namespace} and its endpoints "
            f"({pod} must be there, Ready), and that NetworkPolicies let the job's pods reach DNS (UDP and TCP 53)")


def _login_refused(kube: Kube, namespace: str, found: LoginRefused, role: str, index: int | None, who: str,
                   pods) -> tuple[str, str]:
    """(cause, remedy) for a pod whose sshd refused mpirun's login: from its log where it says why."""
    pod = next((p for p in pods if (p.metadata.labels or {}).get(ROLE_LABEL) == role
                and (p.metadata.labels or {}).get(INDEX_LABEL) == (str(index) if index is not None else None)), None)
    if pod is not None:
        container = _main_container(pod, role)
        if ident := identity_failure(_pod_log(kube, namespace, pod, container)):
            return _identity_cause(ident, pod, container)
    log_cmd = f"kubectl -n {namespace} logs {pod.metadata.name}" if pod is not None else f"the {role}'s sshd log"
    return (f"MPI communication failed: {who}'s sshd refused the launcher's login as {found.user} "
            f"({found.user}@{found.host}: Permission denied ({found.methods}))",
            f"check that the {role}'s sshd runs as {found.user} and that both pods mount the job's SSH Secret at "
            f"sshAuthMountPath, the user's ~/.ssh ({log_cmd})")


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
