"""Whether a controller runs, judged through the API server only (INS-01, INS-03).

A customer cluster runs each controller as a Deployment; the local reference cluster runs them as host
processes (localcluster/processes.py), which no Deployment or pod stands for. So a controller is judged
by what both kinds of cluster show through the API server: its Deployment's availability and Ready pods
where it has one, and in every case what only a live controller does: a leader-election Lease it keeps
renewing, or an admission webhook that answers a dry run. Never by the processes or files of the
machine the suite runs on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mpiplat.kube import Kube

# (healthy, what was seen), or None where a probe found nothing to judge (e.g. no Lease: leader election off)
Evidence = tuple[bool, str] | None


def api_message(err: ApiException) -> str:
    try:
        return json.loads(err.body)["message"]
    except (TypeError, ValueError, KeyError):
        return f"{err.status} {err.reason}"


def lease_renewed(kube: Kube, name: str, required: bool = True) -> Evidence:
    """A leader-election Lease `name` (any namespace) whose renewTime advances while we watch: its
    holder runs now. Judged by the Lease's own clock, so the skew between this machine and the
    cluster does not matter. Without such a Lease: a failure if `required`, else None."""
    coord = client.CoordinationV1Api(kube.api_client)
    leases = coord.list_lease_for_all_namespaces(field_selector=f"metadata.name={name}").items
    if not leases:
        return (False, f"no leader-election Lease {name} in any namespace") if required else None
    lease = max(leases, key=lambda le: le.spec.renew_time or datetime.min.replace(tzinfo=UTC))
    where, first = f"{lease.metadata.namespace}/{name}", lease.spec.renew_time
    watch_s = (lease.spec.lease_duration_seconds or 15) + 5  # a live holder renews well within its duration
    deadline = time.monotonic() + watch_s
    while time.monotonic() < deadline:
        time.sleep(0.5)
        lease = coord.read_namespaced_lease(name, lease.metadata.namespace)
        if lease.spec.holder_identity and lease.spec.renew_time and lease.spec.renew_time != first:
            return True, f"Lease {where} renewed by {lease.spec.holder_identity}"
    return False, (f"leader-election Lease {where} (holder {lease.spec.holder_identity or 'none'}) last renewed "
                   f"{first.isoformat() if first else 'never'}, not renewed during the {watch_s}s watched")


def webhook_rejects(create: Callable[[], object], webhook: str) -> Evidence:
    """Dry-run `create` (an object the controller's validating webhook must reject) on the server. A
    rejection by that webhook proves it serves; "failed calling webhook" proves it does not."""
    try:
        create()
    except ApiException as err:
        msg = api_message(err)
        if "failed calling webhook" in msg:
            return False, f"its webhook does not answer: {msg}"
        if "denied the request" in msg and webhook in msg.split("denied the request")[0]:
            return True, "its admission webhook answered a dry run"
        return False, f"a dry run that its webhook should reject got {err.status}: {msg}"
    return False, "a dry run that its webhook should reject was admitted: no webhook of it is registered"


def deployment_ready(kube: Kube, d) -> tuple[bool, str]:
    """A Deployment is healthy when it is Available and as many of its pods are Ready as it wants (>= 1)."""
    want = d.spec.replicas if d.spec.replicas is not None else 1
    available = any(c.type == "Available" and c.status == "True" for c in (d.status.conditions or []))
    selector = ",".join(f"{k}={v}" for k, v in (d.spec.selector.match_labels or {}).items())
    pods = kube.core.list_namespaced_pod(d.metadata.namespace, label_selector=selector).items if selector else []
    ready = [p for p in pods if not p.metadata.deletion_timestamp
             and any(c.type == "Ready" and c.status == "True" for c in (p.status.conditions or []))]
    ok = available and want >= 1 and len(ready) >= want
    return ok, (f"Deployment {d.metadata.namespace}/{d.metadata.name} {'Available' if available else 'not Available'}, "
                f"{len(ready)}/{want} pods Ready")


def deployments(kube: Kube) -> list:
    return client.AppsV1Api(kube.api_client).list_deployment_for_all_namespaces().items


def controller_health(kube: Kube, all_deployments: list, match: str,
                      probes: list[Callable[[Kube], Evidence]]) -> tuple[bool, str]:
    """Healthy when its Deployment(s) (name containing `match`), where it has any, are Available with
    every pod Ready, and every probe that found something to judge passes; at least one of the two kinds
    of evidence must exist. A Deployment alone is not enough where a probe fails: it can look Available
    while its controller does not work (e.g. a webhook whose Service points nowhere)."""
    found = [d for d in all_deployments if match in d.metadata.name]
    seen = [deployment_ready(kube, d) for d in found]
    live = [e for e in (probe(kube) for probe in probes) if e is not None]
    parts = [text for _, text in seen] or ["no Deployment (not run as pods of this cluster)"]
    parts += [text for _, text in live]
    if not found and not live:
        return False, "; ".join([*parts, "and nothing of it seen through the API (no Lease, no webhook)"])
    return all(ok for ok, _ in seen) and all(ok for ok, _ in live), "; ".join(parts)
