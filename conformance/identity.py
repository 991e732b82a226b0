"""Who a job's pods run as: a namespace's UID range (OpenShift's restricted-v2), and a real MPIJob whose ranks
report their identity from inside (the whoami workload), for JOB-11 and ISO-05."""

from __future__ import annotations

import random
import re
import time

from mpiplat import jobs
from mpiplat.conformance import workloads
from mpiplat.conformance.watch import (
    JOB_LABEL,
    ROLE_LABEL,
    all_running,
    pull_failure,
    submit_job,
    wait_pods,
    wait_workload_job,
)
from mpiplat.diagnose import diagnose
from mpiplat.kube import Kube

# Where a cluster assigns no UID: a random one from OpenShift's own span of namespace ranges, which no image
# knows, as restricted-v2 would assign.
ARBITRARY_UIDS = (1_000_000_000, 2_000_000_000)


def uid_range(kube: Kube, namespace: str) -> tuple[int, int] | None:
    """The namespace's UID range as (first, last), or None where the cluster assigns none (no annotation)."""
    value = (kube.core.read_namespace(namespace).metadata.annotations or {}).get(jobs.UID_RANGE)
    if not value:
        return None
    first, _, size = value.partition("/")
    return int(first), int(first) + int(size or 1) - 1


def arbitrary_uid() -> int:
    return random.randint(*ARBITRARY_UIDS)


def _failed_container(pods: list) -> bool:
    """A container that exited with an error or waits to restart after one (it will not come up by itself)."""
    return any(p.status.phase == "Failed" or any(
        (cs.state and cs.state.waiting and cs.state.waiting.reason == "CrashLoopBackOff")
        or (cs.last_state and cs.last_state.terminated and cs.last_state.terminated.exit_code)
        for cs in (p.status.container_statuses or [])) for p in pods)


RESTRICTED_SCCS = ("restricted-v2", "restricted")  # what every user and ServiceAccount gets on OpenShift


def extra_grants(pods) -> list[str]:
    """The pods admitted under an SCC looser than restricted-v2 or restricted (OpenShift's openshift.io/scc
    annotation: a grant to the pods' ServiceAccount or to whoever created them); none where pods carry no SCC."""
    return [f"{p.metadata.name} (SCC {scc})" for p in pods
            if (scc := (p.metadata.annotations or {}).get(jobs.SCC_ANNOTATION)) and scc not in RESTRICTED_SCCS]


def no_extra_grant(ns: str, name: str, pods) -> None:
    """Fails naming the pods of job `ns/name` that were admitted with an extra grant (extra_grants)."""
    granted = extra_grants(pods)
    if granted:
        raise AssertionError(f"{ns}/{name}: pods admitted with an extra grant: {', '.join(granted)}; every job's "
                             f"pods must run under {' or '.join(RESTRICTED_SCCS)} (someone granted their "
                             "ServiceAccount a looser SCC, e.g. `oc adm policy add-scc-to-user anyuid`)")


def run_whoami_job(kube: Kube, spec: jobs.MPIJob, expect_uid: int, timeout: float = 300) -> tuple[dict, dict]:
    """Submit `spec` (a real MPIJob of 2 workers) running the whoami workload, expecting every rank to run as
    `expect_uid` on its own worker; returns whoami's record and the times it took (s): worker created ->
    running (slowest), submit -> workers Running, submit -> Succeeded. Fails with the job's diagnosis when a
    worker cannot pull, exits or restarts (e.g. its sshd finds no user), or the job does not succeed, and when
    the launcher's own first line (jobs.LAUNCHER_IDENTITY) names another uid."""
    ns, name = spec.namespace, spec.name
    kube.core.create_namespaced_config_map(ns, workloads.configmap(ns))
    spec.workload, spec.workload_args = "whoami", ["--expect-uid", str(expect_uid), "--min-hosts", "2"]
    spec.launcher_restart_policy = "Never"  # a failed launcher keeps its log for the report
    start = time.monotonic()
    submit_job(kube, spec)
    running = all_running(2)
    try:
        workers = wait_pods(kube, ns, f"{JOB_LABEL}={name},{ROLE_LABEL}=worker",
                            lambda pods: running(pods) or pull_failure(pods) or _failed_container(pods), timeout=120)
    except TimeoutError as err:
        no_extra_grant(ns, name, kube.core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}={name}").items)
        raise AssertionError(f"{ns}/{name}: the workers did not run: {err}\n{diagnose(kube, ns, name)}") from err
    no_extra_grant(ns, name, workers)  # before what a looser SCC lets happen (another UID, a failure)
    if pull_failure(workers):
        raise AssertionError(f"{ns}/{name}: the workers cannot pull image {spec.image}: {diagnose(kube, ns, name)}")
    if not running(workers) or _failed_container(workers):
        logs = "\n".join(f"--- {p.metadata.name}\n{_log(kube, p)[-1000:]}" for p in workers)
        raise AssertionError(f"{ns}/{name}: a worker failed: {diagnose(kube, ns, name)}\n{logs}")
    to_running = time.monotonic() - start
    [found], seen = wait_workload_job(kube, name, ns, "whoami", ranks=2, timeout=timeout, start=start)
    assert found["uids"] == found["euids"] == [expect_uid] * 2, found
    [launcher] = kube.core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}={name},{ROLE_LABEL}=launcher").items
    said = re.search(rf"^{re.escape(jobs.LAUNCHER_IDENTITY)} (\d+)", _log(kube, launcher), re.MULTILINE)
    assert said and int(said.group(1)) == expect_uid, (
        f"{ns}/{name}: the launcher ran as uid {said.group(1) if said else '? (it did not say)'}, not {expect_uid}")
    assert sorted(found["hosts"]) == sorted(p.metadata.name for p in workers), found
    created_to_running = max((p.status.container_statuses[0].state.running.started_at
                              - p.metadata.creation_timestamp).total_seconds() for p in workers)
    return found, {"created_to_running": created_to_running, "to_running": to_running,
                   "to_succeeded": seen["Succeeded"]}


def _log(kube: Kube, pod) -> str:
    """A pod's log, its previous container's when it restarted (what it said before it exited)."""
    statuses = pod.status.container_statuses or []
    previous = any(cs.restart_count for cs in statuses)
    try:
        return kube.core.read_namespaced_pod_log(pod.metadata.name, pod.metadata.namespace, previous=previous)
    except Exception as err:  # the log is context for the failure, not the failure
        return f"(no log: {err})"
