"""The MPIJob SDK: create, watch, read the logs of and diagnose MPIJobs from Python.

    from mpiplat import Client, MPIJob

    jobs = Client()                      # the cluster and namespace kubectl would use
    jobs.create(MPIJob(name="pi", workers=2, command=["python3", "pi.py"]))
    print(jobs.wait_for_completion("pi", timeout=600).phase)

`Client` is synchronous; `AsyncClient` has the same methods as coroutines (asyncio). Both build their
manifests with mpiplat.jobs (the one builder) and talk to the API through mpiplat.kube. Every API error
becomes a JobError that says what to do (a missing CRD, RBAC, a quota, a guardrail, too few GPUs).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import functools
import inspect
import json
import queue
import re
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from mpiplat import overview
from mpiplat.diagnose import Diagnosis, diagnose
from mpiplat.errors import MpiplatError
from mpiplat.jobs import CLUSTER_IMAGES, GPU_RESOURCE, IMPLEMENTATIONS, INDEX_LABEL, JOB_LABEL, ROLE_LABEL, MPIJob
from mpiplat.kube import MPIJOB, WORKLOAD, Kube, condition, has_condition
from mpiplat.refusals import pod_refusal


class JobError(MpiplatError):
    """An MPIJob operation failed; the message says why and what to do."""


class NotInstalled(JobError):
    """The cluster serves no MPIJob API: the MPI Operator is not installed."""


class JobNotFound(JobError, LookupError):
    pass


class Forbidden(JobError, PermissionError):
    """RBAC refuses the caller the verb on mpijobs in the namespace."""


class Denied(JobError):
    """Admission refused the job: a ResourceQuota or a guardrail (ValidatingAdmissionPolicy)."""


class NotEnoughGPUs(JobError):
    """The job asks for more GPUs than the cluster's nodes have."""


class PodsRefused(JobError):
    """Before submission: the namespace's Pod Security or security context constraints (OpenShift's SCCs, or a
    policy in their words) would refuse the job's pods, so the operator could never start them. `refusals` maps
    each refused replica (Launcher, Worker) to the API server's own message."""

    def __init__(self, message: str, refusals: dict[str, str]):
        super().__init__(message)
        self.refusals = refusals


class JobTimeout(JobError, TimeoutError):
    """A wait ended before the job reached the state; `status` is its last one."""

    def __init__(self, message: str, status: JobStatus):
        super().__init__(message)
        self.status = status


# What `phase` can be, in the order a job passes them. Queued: suspended by Kueue, waiting for quota.
PHASES = ("Pending", "Queued", "Suspended", "Created", "Running", "Succeeded", "Failed")
FINISHED = ("Succeeded", "Failed")
# What each `wait(until=...)` waits for; a job that finished otherwise ends the wait too. Suspended: once the
# operator (or Kueue) has stopped the job, not as soon as runPolicy.suspend is set.
UNTIL = {"succeeded": ("Succeeded",), "failed": ("Failed",), "running": ("Running", "Succeeded"),
         "suspended": ("Suspended", "Queued"), "finished": FINISHED}
WAIT_FOR = tuple(UNTIL)
WHICH = ("launcher", "workers", "all")  # or a worker's index
FOLLOW_DRAIN_S = 3.0  # how long follow_logs reads on once the job has finished
_VAP_DENIAL = re.compile(r"ValidatingAdmissionPolicy '([^']+)' with binding '[^']*' denied request: (.*)", re.S)


@dataclass
class JobStatus:
    name: str
    namespace: str
    phase: str
    message: str = ""
    queue: str | None = None
    conditions: list[dict] = field(default_factory=list)
    replicas: dict[str, dict] = field(default_factory=dict)  # Launcher/Worker: active, succeeded, failed
    start_time: str | None = None
    completion_time: str | None = None
    diagnosis: Diagnosis | None = None  # wait_for_completion sets it when the job failed or timed out

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED

    @property
    def succeeded(self) -> bool:
        return self.phase == "Succeeded"


def job_status(obj: dict) -> JobStatus:
    """The phase and the rest of an MPIJob object as the API server returned it."""
    status = obj.get("status") or {}
    meta = obj["metadata"]
    job = MPIJob.from_manifest(obj)
    phase = next((t for t in ("Failed", "Succeeded", "Running") if has_condition(obj, t)), None)
    if phase is None:
        if (obj["spec"].get("runPolicy") or {}).get("suspend"):
            phase = "Queued" if job.queue else "Suspended"
        else:
            phase = "Created" if has_condition(obj, "Created") else "Pending"
    latest = max(status.get("conditions") or [], key=lambda c: c.get("lastTransitionTime") or "", default={})
    return JobStatus(name=meta["name"], namespace=meta["namespace"], phase=phase, message=latest.get("message", ""),
                     queue=job.queue, conditions=list(status.get("conditions") or []),
                     replicas=dict(status.get("replicaStatuses") or {}), start_time=status.get("startTime"),
                     completion_time=status.get("completionTime"))


@dataclass(frozen=True)
class LogLine:
    pod: str
    text: str
    time: datetime.datetime | None = None

    def format(self, timestamps: bool = False) -> str:
        stamp = f"{self.time.isoformat(timespec='milliseconds')} " if timestamps and self.time else ""
        return f"[{self.pod}] {stamp}{self.text}"


def _log_line(pod: str, raw: str) -> LogLine:
    """A line of a log read with timestamps=True ("2026-11-24T12:00:00.123456789Z text")."""
    stamp, _, text = raw.partition(" ")
    try:  # Python parses microseconds, not the kubelet's nanoseconds
        when = datetime.datetime.fromisoformat(re.sub(r"(\.\d{6})\d+", r"\1", stamp.replace("Z", "+00:00")))
    except ValueError:
        return LogLine(pod, raw)
    return LogLine(pod, text, when)


# ---------------------------------------------------------------- pod admission refusals
REPLICAS = ("Launcher", "Worker")


def replica_pod(manifest: dict, replica: str) -> dict | None:
    """The Pod the operator would create from a replica's template, for a dry run (None if the job has no such
    replica)."""
    spec = manifest["spec"]["mpiReplicaSpecs"].get(replica)
    if not spec:
        return None
    template = spec.get("template") or {}
    meta = template.get("metadata") or {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{manifest['metadata']['name']}-{replica.lower()}-dryrun",
                         "namespace": manifest["metadata"]["namespace"],
                         **{k: meta[k] for k in ("labels", "annotations") if k in meta}},
            "spec": template.get("spec") or {}}


def _api_message(err: ApiException) -> str:
    try:
        return json.loads(err.body or "{}").get("message") or err.reason or ""
    except ValueError:
        return err.body or err.reason or ""


class Client:
    """MPIJobs on one cluster. namespace: where jobs without one go (default: the kubeconfig context's, else
    "default", like kubectl). kubeconfig, context: like kubectl's flags ($KUBECONFIG, ~/.kube/config)."""

    def __init__(self, namespace: str | None = None, *, kubeconfig: str | None = None, context: str | None = None,
                 kube: Kube | None = None):
        self.kube = kube or Kube(kubeconfig, context)
        self.namespace = namespace or self.kube.namespace

    # ---------------------------------------------------------------- errors
    @contextlib.contextmanager
    def _explained(self, verb: str, namespace: str, name: str | None = None):
        try:
            yield
        except ApiException as err:
            raise self._explain(err, verb, namespace, name) from err

    def _explain(self, err: ApiException, verb: str, namespace: str, name: str | None) -> JobError:
        message = _api_message(err)
        ref = f"MPIJob {namespace}/{name}" if name else f"MPIJobs in namespace {namespace}"
        if err.status == 404:
            if not self.installed():
                return NotInstalled("the MPI Operator is not installed: the cluster serves no kubeflow.org/v2beta1 "
                                    "mpijobs (ask the platform admin to run the installer, playbooks/site.yml)")
            if message.startswith("namespaces "):
                return JobError(f"namespace {namespace!r} does not exist ({message}); pick one with -n/--namespace "
                                "or the kubeconfig context's namespace")
            return JobNotFound(f"{ref} not found")
        if err.status == 409:
            return JobError(f"{ref} already exists; delete it first (mpiplat job delete {name}) or pick another name")
        denial = _VAP_DENIAL.search(message)
        if denial:
            return Denied(f"the cluster's guardrail {denial.group(1)} refuses {ref}: {denial.group(2).strip()}")
        if err.status == 403 and "exceeded quota" in message:
            detail = message.partition("forbidden: ")[2] or message
            return Denied(f"the namespace's ResourceQuota refuses {ref}: {detail}")
        if err.status == 403:
            allowed, user = self._access(verb, namespace)
            if allowed is False:
                return Forbidden(f"user {user} lacks {verb!r} on mpijobs in namespace {namespace}; ask the platform "
                                 f"admin for a Role that grants it (check: kubectl auth can-i {verb} "
                                 f"mpijobs.kubeflow.org -n {namespace})")
            return Denied(f"admission refuses {ref}: {message}")
        if err.status == 422:
            return Denied(f"the API server refuses {ref}: {message}")
        return JobError(f"{ref}: the API server answered {err.status} {err.reason}: {message}")

    def _access(self, verb: str, namespace: str) -> tuple[bool | None, str]:
        """Whether the caller may `verb` mpijobs in `namespace` (None: unknown), and who the caller is."""
        user = self.whoami() or "the current user"
        try:
            review = client.AuthorizationV1Api(self.kube.api_client).create_self_subject_access_review(
                client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
                    resource_attributes=client.V1ResourceAttributes(
                        namespace=namespace, verb=verb, group=MPIJOB.group, resource=MPIJOB.plural))))
        except ApiException:
            return None, user
        return bool(review.status.allowed), user

    def whoami(self) -> str | None:
        """The user name the API server sees for this client (SelfSubjectReview); None where it does not say."""
        with contextlib.suppress(ApiException, HTTPError, AttributeError):
            review = client.AuthenticationV1Api(self.kube.api_client).create_self_subject_review(
                {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
            return review.status.user_info.username or None
        return None

    def installed(self) -> bool:
        """Whether the cluster serves kubeflow.org/v2beta1 mpijobs (API discovery, open to every user)."""
        try:
            found = self.kube.get_path(f"/apis/{MPIJOB.api_version}")
        except ApiException:
            return False
        return any(r.get("name") == MPIJOB.plural for r in (found or {}).get("resources", []))

    def _check_gpus(self, job: MPIJob) -> None:
        """Refuse a job no node set of this cluster can ever hold (skipped where nodes cannot be listed)."""
        if not job.gpus_per_worker:
            return
        try:
            nodes = self.kube.core.list_node(_request_timeout=10).items
        except ApiException:
            return
        have = [int(str((n.status.allocatable or {}).get(job.gpu_resource, "0")))
                for n in nodes if not n.spec.unschedulable]
        most, total, asked = max(have, default=0), sum(have), job.gpus_per_worker * job.workers
        if job.gpus_per_worker > most:
            raise NotEnoughGPUs(f"each worker requests {job.gpus_per_worker} {job.gpu_resource}, but no node has "
                                f"more than {most} allocatable ({len(have)} schedulable nodes, {total} in all)")
        if asked > total:
            raise NotEnoughGPUs(f"the job requests {asked} {job.gpu_resource} ({job.workers} workers x "
                                f"{job.gpus_per_worker}), but the cluster's nodes have {total} allocatable in all")

    def _check_pods(self, manifest: dict) -> None:
        """Refuse a job whose pods the namespace's Pod Security or security context constraints would refuse: a
        server-side dry run creates a Pod from each replica's template (admission runs, nothing is stored). Where
        the dry run itself fails (RBAC: the user may not create pods, a webhook without dry run, ...), no check."""
        namespace = manifest["metadata"]["namespace"]
        refused: dict[str, tuple[str, list[str]]] = {}
        messages: dict[str, str] = {}
        for replica in REPLICAS:
            pod = replica_pod(manifest, replica)
            if pod is None:
                continue
            try:
                self.kube.dry_run_create(f"/api/v1/namespaces/{namespace}/pods", pod)
            except ApiException as err:
                message = _api_message(err)
                why = pod_refusal(message) if err.status in (403, 422) else None
                if why:
                    refused[replica], messages[replica] = why, message
            except (HTTPError, OSError, ValueError):  # no answer, or not one we read: no check
                return
        if not refused:
            return
        by_reason: dict[tuple[str, tuple[str, ...]], list[str]] = {}
        for replica, (policy, reasons) in refused.items():
            by_reason.setdefault((policy, tuple(reasons)), []).append(replica)
        raise PodsRefused(". ".join(
            f"the {' and '.join(replicas)} pods would be refused by namespace {namespace}'s {policy}: "
            + "; ".join(reasons) for (policy, reasons), replicas in by_reason.items()), messages)

    # ---------------------------------------------------------------- lifecycle
    def create(self, job: MPIJob | dict, *, check_gpus: bool = True, check_pods: bool = True) -> MPIJob:
        """Submit a job (an MPIJob, or a manifest dict); returns it as the API server stored it. Before that,
        check_gpus: refuse a job no node set can hold (NotEnoughGPUs); check_pods: refuse a job whose pods the
        namespace's Pod Security or security context constraints would refuse (PodsRefused; two dry-run calls)."""
        if isinstance(job, dict):
            job = MPIJob.from_manifest(job)
        manifest = job.manifest()  # validates before any API call
        if not job.image and (image := self.default_images().get(job.implementation)):
            job = dataclasses.replace(job, image=image)  # the cluster's image for its MPI (else upstream's)
            manifest = job.manifest()
        namespace = job.namespace or self.namespace
        manifest["metadata"]["namespace"] = namespace
        if check_gpus:
            self._check_gpus(job)
        if check_pods:
            self._check_pods(manifest)
        with self._explained("create", namespace, job.name):
            return MPIJob.from_manifest(self.kube.create(MPIJOB, manifest))

    def default_images(self) -> dict[str, str]:
        """The cluster's MPI images per implementation, as its installer names them (jobs.CLUSTER_IMAGES); {} where
        it names none or the ConfigMap cannot be read: then a job without an image gets upstream's."""
        namespace, name = CLUSTER_IMAGES
        try:
            found = self.kube.core.read_namespaced_config_map(name, namespace, _request_timeout=10)
        except ApiException:
            return {}
        return {k: v.strip() for k, v in (found.data or {}).items() if k in IMPLEMENTATIONS and v and v.strip()}

    def get(self, name: str, namespace: str | None = None) -> MPIJob:
        namespace = namespace or self.namespace
        with self._explained("get", namespace, name):
            return MPIJob.from_manifest(self.kube.get(MPIJOB, name, namespace))

    def list(self, namespace: str | None = None, *, all_namespaces: bool = False,
             label_selector: str = "") -> list[MPIJob]:
        namespace = namespace or self.namespace
        with self._explained("list", "(all)" if all_namespaces else namespace):
            if all_namespaces:
                items = self.kube.custom.list_cluster_custom_object(
                    MPIJOB.group, MPIJOB.version, MPIJOB.plural, label_selector=label_selector)["items"]
            else:
                items = self.kube.list(MPIJOB, namespace, label_selector)
        return [MPIJob.from_manifest(o) for o in items]

    def delete(self, name: str, namespace: str | None = None, *, wait: bool = False, timeout: float = 120) -> None:
        """Delete a job and its pods (foreground); with wait, return once it is gone."""
        namespace = namespace or self.namespace
        with self._explained("delete", namespace, name):
            self.kube.get(MPIJOB, name, namespace)
            self.kube.delete(MPIJOB, name, namespace)
        deadline = time.monotonic() + timeout
        while wait:
            try:
                self.kube.get(MPIJOB, name, namespace)
            except ApiException as err:
                if err.status == 404:
                    return
                raise self._explain(err, "get", namespace, name) from err
            if time.monotonic() > deadline:
                raise JobTimeout(f"MPIJob {namespace}/{name} still exists {timeout:.0f}s after its deletion",
                                 self.status(name, namespace))
            time.sleep(0.5)

    def status(self, name: str, namespace: str | None = None) -> JobStatus:
        namespace = namespace or self.namespace
        with self._explained("get", namespace, name):
            return job_status(self.kube.get(MPIJOB, name, namespace))

    def wait(self, name: str, namespace: str | None = None, *, until: str = "finished",
             timeout: float = 600) -> JobStatus:
        """Watch the job until it is `until` (one of WAIT_FOR) or finished otherwise; returns its status then
        (check `.phase`). Raises JobTimeout, with the last status, at `timeout`."""
        if until not in WAIT_FOR:
            raise JobError(f"until is {until!r}; allowed: {', '.join(WAIT_FOR)}")
        namespace = namespace or self.namespace
        last = self.status(name, namespace)
        reached = UNTIL[until]
        with self._explained("watch", namespace, name):
            for obj in self.kube.watch_object(MPIJOB, name, namespace, timeout):
                last = job_status(obj)
                if last.phase in reached or last.finished:
                    return last
        raise JobTimeout(f"MPIJob {namespace}/{name} is {last.phase}, not {until}, after {timeout:.0f}s"
                         + (f": {last.message}" if last.message else ""), last)

    def wait_for_completion(self, name: str, namespace: str | None = None, *, timeout: float = 600) -> JobStatus:
        """Wait until the job succeeds or fails; the status carries a diagnosis when it failed. At the timeout,
        JobTimeout carries the last status with a diagnosis of why it is not done."""
        namespace = namespace or self.namespace
        try:
            result = self.wait(name, namespace, until="finished", timeout=timeout)
        except JobTimeout as err:
            err.status.diagnosis = self.diagnose(name, namespace)
            raise JobTimeout(f"{err}; {err.status.diagnosis.cause}", err.status) from None
        if result.phase == "Failed":
            result.diagnosis = self.diagnose(name, namespace)
        return result

    def diagnose(self, name: str, namespace: str | None = None, gpu_resource: str = GPU_RESOURCE) -> Diagnosis:
        namespace = namespace or self.namespace
        with self._explained("get", namespace, name):
            return diagnose(self.kube, namespace, name, gpu_resource)

    # ---------------------------------------------------------------- many jobs, queues
    def namespaces(self, candidates: list[str] | None = None) -> list[str] | None:
        """Where the caller may list MPIJobs: None for every namespace, else the namespaces of `candidates`
        (default: those the caller may list, else its context's) where it may."""
        with self._explained("list", "(all)"):
            return overview.namespaces(self.kube, candidates)

    def summaries(self, namespace: str | None = None, *, all_namespaces: bool = False,
                  kinds: tuple[str, ...] = overview.KINDS) -> list[overview.JobSummary]:
        """Every MPIJob and TrainJob (`kinds`) in the namespace, or in all, newest first: phase, queue and
        position, workers ready of total, GPUs and times, in a few API calls (a job list's rows)."""
        namespace = None if all_namespaces else namespace or self.namespace
        with self._explained("list", namespace or "(all)"):
            return overview.summaries(self.kube, namespace, kinds)

    def cluster_queues(self) -> list[overview.QueueSummary]:
        """Every Kueue ClusterQueue's nominal, used and borrowed GPUs and its pending workloads in order."""
        with self._explained("list", "(all)"):
            return overview.cluster_queues(self.kube)

    # ---------------------------------------------------------------- suspend / resume
    def workload(self, name: str, namespace: str | None = None) -> dict | None:
        """The job's Kueue Workload, if Kueue manages it."""
        namespace = namespace or self.namespace
        uid = self.get(name, namespace).source["metadata"]["uid"]
        try:
            found = self.kube.list(WORKLOAD, namespace)
        except ApiException:
            return None
        return next((w for w in found if any(o.get("uid") == uid for o in w["metadata"].get("ownerReferences", []))),
                    None)

    def suspend(self, name: str, namespace: str | None = None) -> str:
        return self._set_active(name, namespace or self.namespace, False)

    def resume(self, name: str, namespace: str | None = None) -> str:
        return self._set_active(name, namespace or self.namespace, True)

    def _set_active(self, name: str, namespace: str, active: bool) -> str:
        """Kueue owns runPolicy.suspend of a job it manages (it would undo a change there), so a queued job is
        suspended and resumed through its Workload's spec.active; any other job through runPolicy.suspend."""
        wl = self.workload(name, namespace)
        if wl is not None:
            with self._explained("patch", namespace, name):
                self.kube.patch(WORKLOAD, wl["metadata"]["name"], {"spec": {"active": active}}, namespace)
            return (f"{'re' if active else 'de'}activated Kueue Workload {wl['metadata']['name']}: Kueue "
                    + ("queues the job again and resumes it once admitted" if active else
                       "suspends the job and frees its quota"))
        with self._explained("patch", namespace, name):
            self.kube.patch(MPIJOB, name, {"spec": {"runPolicy": {"suspend": not active}}}, namespace)
        return f"set runPolicy.suspend to {str(not active).lower()} (the job has no Kueue Workload)"

    # ---------------------------------------------------------------- pods, logs, describe
    def pods(self, name: str, namespace: str | None = None, which: str | int = "all") -> list[client.V1Pod]:
        """The job's pods, launcher first then workers by index. which: launcher, workers, all or an index."""
        namespace = namespace or self.namespace
        if not (which in WHICH or (isinstance(which, int) and not isinstance(which, bool) and which >= 0)):
            raise JobError(f"which is {which!r}; allowed: {', '.join(WHICH)} or a worker index (an integer >= 0)")
        selector = f"{JOB_LABEL}={name}"
        if which == "launcher":
            selector += f",{ROLE_LABEL}=launcher"
        elif which != "all":
            selector += f",{ROLE_LABEL}=worker" + (f",{INDEX_LABEL}={which}" if isinstance(which, int) else "")
        with self._explained("list", namespace, name):
            pods = self.kube.core.list_namespaced_pod(namespace, label_selector=selector).items

        def order(pod):
            labels = pod.metadata.labels or {}
            return labels.get(ROLE_LABEL) != "launcher", int(labels.get(INDEX_LABEL, -1)), pod.metadata.name
        return sorted(pods, key=order)

    def logs(self, name: str, namespace: str | None = None, which: str | int = "launcher", *,
             grep: str | None = None, tail: int | None = None) -> list[LogLine]:
        """The logs of the job's pods (which: launcher, workers, all or a worker's index), one list ordered by
        time. Pods whose container has not started yet have no log; JobError if none has one."""
        namespace = namespace or self.namespace
        pattern = re.compile(grep) if grep else None
        pods = self.pods(name, namespace, which)
        lines, why = [], []
        for pod in pods:
            try:
                raw = self.kube.core.read_namespaced_pod_log(
                    pod.metadata.name, namespace, container=pod.spec.containers[0].name, timestamps=True,
                    **({"tail_lines": tail} if tail else {}))
            except ApiException as err:
                why.append(f"{pod.metadata.name}: {_api_message(err)}")
                continue
            lines += [_log_line(pod.metadata.name, line) for line in raw.splitlines()]
        if not pods or (why and len(why) == len(pods)):
            job = self.status(name, namespace)
            raise JobError(f"MPIJob {namespace}/{name} ({job.phase}) has no {which} pod with a log yet"
                           + (f": {'; '.join(why)}" if why else ""))
        lines.sort(key=lambda ln: (ln.time or datetime.datetime.min.replace(tzinfo=datetime.UTC), ln.pod))
        return [ln for ln in lines if not pattern or pattern.search(ln.text)]

    def follow_logs(self, name: str, namespace: str | None = None, which: str | int = "launcher", *,
                    grep: str | None = None, timeout: float | None = None, poll: float = 1.0) -> Iterator[LogLine]:
        """Yield the logs' lines as the pods write them, from the start, until the job has finished (then the
        streams get FOLLOW_DRAIN_S to end: a worker kept by cleanPodPolicy None runs on) or `timeout` seconds
        have passed (JobTimeout). Pods that start later (a launcher WaitForWorkersReady creates late) join in."""
        namespace = namespace or self.namespace
        deadline = None if timeout is None else time.monotonic() + timeout
        pattern = re.compile(grep) if grep else None
        lines: queue.Queue = queue.Queue()
        streaming: dict[str, threading.Thread] = {}
        responses: list = []

        def stream(pod: str, container: str) -> None:
            try:
                resp = self.kube.core.read_namespaced_pod_log(pod, namespace, container=container, follow=True,
                                                               timestamps=True, _preload_content=False)
                responses.append(resp)
                for raw in _lines(resp):
                    lines.put(_log_line(pod, raw))
            except ApiException as err:
                lines.put(LogLine(pod, f"(log unavailable: {_api_message(err)})"))
            except Exception:  # noqa: BLE001 - the response was closed when following ended
                pass
            finally:
                lines.put(pod)

        done_at = None
        try:
            while True:
                if done_at is None:
                    if self.status(name, namespace).finished:
                        done_at = time.monotonic()
                    for pod in self.pods(name, namespace, which):
                        started = any(cs.state and (cs.state.running or cs.state.terminated)
                                      for cs in pod.status.container_statuses or [])
                        if started and pod.metadata.name not in streaming:
                            t = threading.Thread(target=stream, daemon=True,
                                                 args=(pod.metadata.name, pod.spec.containers[0].name))
                            streaming[pod.metadata.name] = t
                            t.start()
                if deadline is not None and time.monotonic() > deadline:
                    status = self.status(name, namespace)
                    raise JobTimeout(f"MPIJob {namespace}/{name} is {status.phase}, not finished, after "
                                     f"{timeout:.0f}s of following its logs", status)
                try:
                    item = lines.get(timeout=poll)
                except queue.Empty:
                    if done_at is not None and lines.empty() and (
                            not any(t.is_alive() for t in streaming.values())
                            or time.monotonic() - done_at > FOLLOW_DRAIN_S):
                        return
                    continue
                if isinstance(item, LogLine) and (not pattern or pattern.search(item.text)):
                    yield item
        finally:
            for resp in responses:
                resp.close()

    def describe(self, name: str, namespace: str | None = None) -> dict:
        """Everything about a job in one dict: status, queue state, pods, events and the diagnosis."""
        namespace = namespace or self.namespace
        status = self.status(name, namespace)
        pods = self.pods(name, namespace)
        wl = self.workload(name, namespace)
        queue_state = None
        if wl is not None:
            reserved = condition(wl, "QuotaReserved") or {}
            queue_state = {
                "workload": wl["metadata"]["name"], "local_queue": wl["spec"].get("queueName"),
                "cluster_queue": (wl.get("status", {}).get("admission") or {}).get("clusterQueue"),
                "admitted": has_condition(wl, "Admitted"), "active": wl["spec"].get("active", True),
                "reason": "" if reserved.get("status") == "True" else reserved.get("message", ""),
                "position": self._queue_position(wl, namespace)}
        names = {name, *(p.metadata.name for p in pods)}
        with self._explained("list", namespace, name):
            events = [e for e in self.kube.core.list_namespaced_event(namespace).items
                      if e.involved_object.name in names]
        events.sort(key=lambda e: e.last_timestamp or e.event_time or e.metadata.creation_timestamp)
        return {
            "status": status,
            "queue": queue_state,
            "pods": [{"name": p.metadata.name, "role": (p.metadata.labels or {}).get(ROLE_LABEL, ""),
                      "phase": p.status.phase, "node": p.spec.node_name or "",
                      "ready": all(cs.ready for cs in p.status.container_statuses or []) and bool(
                          p.status.container_statuses),
                      "restarts": sum(cs.restart_count for cs in p.status.container_statuses or []),
                      "reason": _pod_reason(p)} for p in pods],
            "events": [{"object": f"{e.involved_object.kind}/{e.involved_object.name}", "type": e.type,
                        "reason": e.reason, "message": e.message, "count": e.count or 1,
                        "time": str(e.last_timestamp or e.event_time or "")} for e in events[-25:]],
            "diagnosis": self.diagnose(name, namespace),
        }

    def _queue_position(self, wl: dict, namespace: str) -> int | None:
        """The Workload's position in its LocalQueue (0: next): Kueue's visibility API's, or where the cluster does
        not serve it, its place in Kueue's order among the queue's pending workloads (overview.queue_order)."""
        if has_condition(wl, "QuotaReserved") or not wl["spec"].get("queueName"):
            return None
        try:
            found = overview.queue_positions(self.kube, namespace, wl["spec"]["queueName"])
        except ApiException:
            return None
        return found.get((namespace, wl["metadata"]["name"]))


def _pod_reason(pod: client.V1Pod) -> str:
    """Why the pod's containers stopped or wait (e.g. "Error, exit 1", "OOMKilled, exit 137", "ImagePullBackOff"),
    the last run's where the container restarted; "" while they run."""
    for cs in pod.status.container_statuses or []:
        state = cs.state
        done = (state and state.terminated) or (cs.last_state and cs.last_state.terminated)
        if state and state.waiting and state.waiting.reason not in (None, "ContainerCreating"):
            return state.waiting.reason + (f" (last: {done.reason}, exit {done.exit_code})" if done else "")
        if done:
            return f"{done.reason or 'Terminated'}, exit {done.exit_code}"
    return pod.status.reason or ""


def _lines(resp) -> Iterator[str]:
    """The lines of a streamed (follow=True) log response."""
    buf = b""
    for chunk in resp.stream(4096, decode_content=True):
        buf += chunk
        *done, buf = buf.split(b"\n")
        for line in done:
            yield line.decode(errors="replace")
    if buf:
        yield buf.decode(errors="replace")


class AsyncClient:
    """Client's public methods as asyncio coroutines, made from Client's own (below the class), so that the two
    cannot drift: each runs the synchronous call in a thread of this client's pool, so `max_concurrency`
    requests are in flight at once and the event loop never blocks. follow_logs is an async iterator."""

    def __init__(self, namespace: str | None = None, *, kubeconfig: str | None = None, context: str | None = None,
                 kube: Kube | None = None, max_concurrency: int = 32):
        self.sync = Client(namespace, kubeconfig=kubeconfig, context=context, kube=kube)
        self.namespace = self.sync.namespace
        self._pool = ThreadPoolExecutor(max_concurrency, thread_name_prefix="mpiplat-sdk")

    async def _run(self, method: str, *args, **kwargs):
        call = functools.partial(getattr(self.sync, method), *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    async def follow_logs(self, name: str, namespace: str | None = None, which: str | int = "launcher", *,
                          grep: str | None = None, timeout: float | None = None,
                          poll: float = 1.0) -> AsyncIterator[LogLine]:
        lines = self.sync.follow_logs(name, namespace, which, grep=grep, timeout=timeout, poll=poll)
        loop = asyncio.get_running_loop()
        end = object()
        while (line := await loop.run_in_executor(self._pool, next, lines, end)) is not end:
            yield line

    async def close(self) -> None:
        self._pool.shutdown(wait=False)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


def _coroutine(name: str):
    """Client.<name> as a coroutine method of AsyncClient, with its signature and docstring."""
    @functools.wraps(getattr(Client, name))
    async def call(self: AsyncClient, *args, **kwargs):
        return await self._run(name, *args, **kwargs)
    return call


for _name, _method in inspect.getmembers(Client, inspect.isfunction):
    if not _name.startswith("_") and _name not in vars(AsyncClient):
        setattr(AsyncClient, _name, _coroutine(_name))
del _name, _method
