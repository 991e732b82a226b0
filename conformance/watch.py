"""Watch-based timing helpers for the suite (no sleep loops where a figure is measured)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable

from kubernetes import watch

from mpiplat.conformance.workloads import results
from mpiplat.diagnose import diagnose
from mpiplat.jobs import JOB_LABEL, ROLE_LABEL, MPIJob
from mpiplat.kube import MPIJOB, Kind, Kube, has_condition
from mpiplat.sdk import Client

__all__ = ["JOB_LABEL", "ROLE_LABEL"]  # re-exported for the suite's tests

# Every wait of the suite goes through its `kube` (Kube(wait_scale=timeouts.wait_scale)): kube.wait_for() scales
# its timeout, kube.waited()/kube.deadline() scale the suite's own waits.


def submit(kube: Kube, kind: Kind, manifest: dict) -> tuple[dict, float]:
    """Create the object; returns it and the API call's latency in seconds."""
    start = time.monotonic()
    obj = kube.create(kind, manifest)
    return obj, time.monotonic() - start


def submit_job(kube: Kube, job: MPIJob | dict) -> MPIJob:
    """Submit an MPIJob (built with mpiplat.jobs.MPIJob, or a manifest) through the SDK, as a user would. No GPU
    check first: the suite submits jobs that must queue, not be refused; and no dry run of its pods (two calls
    more per job, in the measured submits): the tests see their pods run or not."""
    return Client(kube=kube).create(job, check_gpus=False, check_pods=False)


def condition_times(kube: Kube, kind: Kind, name: str, namespace: str, until: tuple[str, ...],
                    timeout: float, start: float | None = None) -> dict[str, float]:
    """Seconds from `start` (default now) at which each condition type was first seen True,
    watching until one of `until` is True (for kube.waited(timeout) seconds). Order of insertion is the order seen.
    An MPIJob that times out is diagnosed in the TimeoutError."""
    start = start if start is not None else time.monotonic()
    seen: dict[str, float] = {}

    def check(obj: dict) -> bool:
        for c in (obj.get("status") or {}).get("conditions") or []:
            if c.get("status") == "True" and c["type"] not in seen:
                seen[c["type"]] = time.monotonic() - start
        return any(has_condition(obj, u) for u in until)

    try:
        kube.wait_for(kind, name, namespace, check, timeout, what=" or ".join(until))
    except TimeoutError as err:
        if kind is not MPIJOB:
            raise
        raise TimeoutError(f"{err}; diagnosis: {diagnose(kube, namespace, name)}") from err
    return seen


def wait_pods(kube: Kube, namespace: str, selector: str, done: Callable[[list], bool], timeout: float) -> list:
    """Watch pods matching `selector` until done(pods) holds (for kube.waited(timeout) seconds); returns the pods.
    Where the selector names a job (JOB_LABEL=name), a TimeoutError holds its diagnosis."""
    timeout = kube.waited(timeout)
    pods = {p.metadata.name: p for p in kube.core.list_namespaced_pod(namespace, label_selector=selector).items}
    if done(list(pods.values())):
        return list(pods.values())
    deadline = time.monotonic() + timeout
    w = watch.Watch()
    while time.monotonic() < deadline:
        for ev in w.stream(kube.core.list_namespaced_pod, namespace, label_selector=selector,
                           timeout_seconds=max(1, int(deadline - time.monotonic()))):
            pod = ev["object"]
            if ev["type"] == "DELETED":
                pods.pop(pod.metadata.name, None)
            else:
                pods[pod.metadata.name] = pod
            if done(list(pods.values())):
                w.stop()
                return list(pods.values())
    job = dict(term.split("=", 1) for term in selector.split(",") if "=" in term).get(JOB_LABEL)
    raise TimeoutError(f"pods {namespace}/{selector}: condition not reached in {timeout:.0f}s; "
                       f"{[(p.metadata.name, p.status.phase) for p in pods.values()]}"
                       + (f"; diagnosis: {diagnose(kube, namespace, job)}" if job else ""))


def pods_left(kube: Kube, namespaces: list[str], selector: str, timeout: float) -> int:
    """Wait until `namespaces` hold no pod matching `selector` (terminating ones count) or kube.waited(timeout)
    passes; returns how many are left. A row that made many pods calls it before it ends, so that the next
    timed row does not pay for their deletion. Polled as raw JSON: hundreds of typed pods a second would cost
    this client seconds of CPU."""
    end = kube.deadline(timeout)
    while True:
        left = sum(len(json.loads(kube.core.list_namespaced_pod(ns, label_selector=selector,
                                                                _preload_content=False).data)["items"])
                   for ns in namespaces)
        if not left or time.monotonic() > end:
            return left
        time.sleep(1)


def all_running(count: int) -> Callable[[list], bool]:
    return lambda pods: len(pods) >= count and all(p.status.phase == "Running" for p in pods)


def pull_failure(pods: list) -> bool:
    """Whether a container of `pods` cannot pull its image (it would wait for it forever)."""
    return any(cs.state and cs.state.waiting and cs.state.waiting.reason in ("ErrImagePull", "ImagePullBackOff")
               for p in pods for cs in (p.status.container_statuses or []))


def percentile(values: list[float], pct: float) -> float:
    """The nearest-rank percentile: the smallest value with at least pct % of the values at or below it."""
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, math.ceil(pct / 100 * len(ordered)) - 1))
    return ordered[k]


def run_workload_job(kube: Kube, manifest: dict, program: str, ranks: int, timeout: float) -> list[dict]:
    """Submit a workload MPIJob, wait for it to end, and return its program's result records from
    the launcher's log. Fails with the job's diagnosis, or the program's own failed check."""
    submit_job(kube, manifest)
    records, _ = wait_workload_job(kube, manifest["metadata"]["name"], manifest["metadata"]["namespace"], program,
                                   ranks, timeout)
    return records


def wait_workload_job(kube: Kube, name: str, ns: str, program: str, ranks: int, timeout: float,
                      start: float | None = None) -> tuple[list[dict], dict[str, float]]:
    """Wait for a submitted workload MPIJob to end; its program's result records from the launcher's log
    and condition_times (seconds from `start`, default now). Fails like run_workload_job."""
    try:
        seen = condition_times(kube, MPIJOB, name, ns, until=("Succeeded", "Failed"), timeout=timeout, start=start)
    except TimeoutError as err:
        raise AssertionError(f"{ns}/{name} did not end: {err}\n{diagnose(kube, ns, name)}") from err
    launchers = kube.core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}={name},{ROLE_LABEL}=launcher").items
    log = kube.core.read_namespaced_pod_log(launchers[-1].metadata.name, ns) if launchers else ""
    if "Succeeded" not in seen:
        raise AssertionError(f"{ns}/{name} did not succeed: {diagnose(kube, ns, name)}\n"
                             f"--- launcher log\n{log[-3000:]}")
    return results.assert_passed(results.parse(log), program, ranks=ranks), seen
