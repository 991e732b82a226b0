"""What the `upgrade` profile's `--phase before` leaves in the cluster for `--phase after` (UPG rows).

The before phase makes a namespace of its own, which outlives its run, labelled LABEL=<its run id>, with Pod
Security `restricted` as a team's. Its jobs queue in a cohort of two ClusterQueues of its own over one
ResourceFlavor of its own: `lend` (nominal quota for two of its jobs) and `borrow` (none: what it runs is
borrowed from `lend`). What it recorded (the jobs, the controllers' versions, the CRDs' versions) is in the
ConfigMap CONFIGMAP there, so `after` may run on another day, from another machine. `after` finds it by the
label, releases the long jobs (`release`: they run until then, or upgrade.job_seconds at most, so that they span
the upgrade however long it takes), and `remove` deletes all of it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mpiplat.conformance.run import POD_SECURITY, REQUEST_TIMEOUT_S
from mpiplat.errors import MpiplatError
from mpiplat.jobs import WORKLOADS_CONFIGMAP, WORKLOADS_DIR
from mpiplat.kube import CLUSTERQUEUE, LOCALQUEUE, RESOURCEFLAVOR, Kind, Kube, wait_default_service_account

LABEL = "mpiplat.io/conformance-upgrade"  # its value: the before phase's run id
CONFIGMAP = "mpiplat-upgrade"
RELEASED = "upgrade-released"  # the key `release` adds to the namespace's workloads ConfigMap
RELEASED_PATH = f"{WORKLOADS_DIR}/{RELEASED}"  # where the long jobs' ranks see it (allreduce --until-exists)
QUEUES = ("lend", "borrow")  # LocalQueue lq-<role> -> ClusterQueue <prefix>-upgrade-<id>-<role>
REMOVE = (f"kubectl delete namespace -l {LABEL} && kubectl delete clusterqueues,resourceflavors.kueue.x-k8s.io "
          f"-l {LABEL}")
DEPLOYMENT = Kind("apps", "v1", "deployments")
CRD = Kind("apiextensions.k8s.io", "v1", "customresourcedefinitions")


def rolled_out(deployment: dict) -> bool:
    """Whether a Deployment (as the API returns it) runs its current template only: observed, and every replica
    updated and available, none of an older one left."""
    meta, want, status = deployment["metadata"], deployment["spec"].get("replicas", 1), deployment.get("status") or {}
    return (status.get("observedGeneration", 0) >= meta["generation"] and status.get("replicas", 0) == want
            and status.get("updatedReplicas", 0) == want == status.get("availableReplicas", 0))


class UpgradeStateError(MpiplatError, RuntimeError):
    """No recorded upgrade where one is needed, or one where none may be."""


@dataclass
class Recorded:
    kube: Kube
    namespace: str
    data: dict = field(default_factory=dict)  # run_id, started, jobs, versions, crds: the ConfigMap's state.json

    def cluster_queue(self, role: str) -> str:
        return f"{self.namespace}-{role}"

    def note(self, key: str, value) -> None:
        """Record `value` under `key` in the ConfigMap, at once: what is noted survives a failed test."""
        self.data[key] = value
        body = {"data": {"state.json": json.dumps(self.data, indent=1, sort_keys=True)}}
        self.kube.core.patch_namespaced_config_map(CONFIGMAP, self.namespace, body, _request_timeout=REQUEST_TIMEOUT_S)

    def job(self, role: str, **fields) -> None:
        self.note("jobs", {**self.data.get("jobs", {}), role: fields})

    def release(self) -> None:
        """Let the long jobs end: add RELEASED to the workloads ConfigMap their pods mount. The kubelet updates the
        pods' copy within a minute or so; each job then ends after the round it is in."""
        body = {"data": {RELEASED: _now()}}
        try:
            self.kube.core.patch_namespaced_config_map(WORKLOADS_CONFIGMAP, self.namespace, body,
                                                       _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as err:
            if err.status != 404:  # none: the before phase started no job
                raise


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _found(kube: Kube) -> list[client.V1Namespace]:
    return kube.core.list_namespace(label_selector=LABEL, _request_timeout=REQUEST_TIMEOUT_S).items


def begin(kube: Kube, run_id: str, prefix: str, quota: dict[str, str]) -> Recorded:
    """The before phase's namespace, queues and ConfigMap; `quota` (cpu, memory) is `lend`'s nominal quota.
    Refused while an earlier before phase's namespace is still there."""
    earlier = _found(kube)
    if earlier:
        ns = earlier[0].metadata
        raise UpgradeStateError(
            f"an upgrade is recorded already: namespace {ns.name}, made by --phase before of run "
            f"{ns.labels.get(LABEL)} on {ns.creation_timestamp:%Y-%m-%d %H:%M} UTC. Judge it with --phase after, "
            f"or remove it first: {REMOVE}")
    name = f"{prefix}-upgrade-{run_id}"
    labels = {LABEL: run_id, "app.kubernetes.io/part-of": "mpiplat-conformance"}
    rec = Recorded(kube, name, {"run_id": run_id, "started": _now()})
    flavor = name
    kube.create(RESOURCEFLAVOR, {"apiVersion": RESOURCEFLAVOR.api_version, "kind": "ResourceFlavor",
                                 "metadata": {"name": flavor, "labels": labels}, "spec": {}})
    for role in QUEUES:
        nominal = quota if role == "lend" else {r: "0" for r in quota}
        kube.create(CLUSTERQUEUE, {
            "apiVersion": CLUSTERQUEUE.api_version, "kind": "ClusterQueue",
            "metadata": {"name": rec.cluster_queue(role), "labels": labels},
            "spec": {"cohortName": name, "namespaceSelector": {"matchLabels": {LABEL: run_id}},
                     "resourceGroups": [{"coveredResources": sorted(quota), "flavors": [{
                         "name": flavor,
                         "resources": [{"name": r, "nominalQuota": nominal[r]} for r in sorted(quota)]}]}]}})
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=name, labels={**labels, **POD_SECURITY})), _request_timeout=REQUEST_TIMEOUT_S)
    for role in QUEUES:
        kube.create(LOCALQUEUE, {"apiVersion": LOCALQUEUE.api_version, "kind": "LocalQueue",
                                 "metadata": {"name": f"lq-{role}", "namespace": name},
                                 "spec": {"clusterQueue": rec.cluster_queue(role)}})
    kube.core.create_namespaced_config_map(name, {"metadata": {"name": CONFIGMAP, "labels": labels},
                                                  "data": {"state.json": "{}"}})
    rec.note("run_id", run_id)
    wait_default_service_account(kube.core, name, 60, _request_timeout=REQUEST_TIMEOUT_S)
    return rec


def find(kube: Kube) -> Recorded:
    """The upgrade a before phase recorded; refused when there is none, or more than one."""
    found = _found(kube)
    if not found:
        raise UpgradeStateError(f"no upgrade is recorded on this cluster (no namespace labelled {LABEL}): run "
                                "--phase before first, then upgrade the stack, then --phase after")
    if len(found) > 1:
        raise UpgradeStateError(f"{len(found)} recorded upgrades: namespaces {[n.metadata.name for n in found]}; "
                                f"keep one (kubectl delete namespace NAME)")
    name = found[0].metadata.name
    try:
        cm = kube.core.read_namespaced_config_map(CONFIGMAP, name, _request_timeout=REQUEST_TIMEOUT_S)
    except ApiException as err:
        raise UpgradeStateError(f"namespace {name} has no ConfigMap {CONFIGMAP} ({err.reason}): its before phase "
                                f"did not get far; remove it ({REMOVE}) and run --phase before again") from err
    return Recorded(kube, name, json.loads((cm.data or {}).get("state.json") or "{}"))


def remove(kube: Kube, rec: Recorded, timeout: float = 180) -> list[str]:
    """Delete the recorded upgrade's namespace, then its ClusterQueues and ResourceFlavor (Kueue holds a
    ClusterQueue until its workloads are gone); what is still there after `timeout` seconds."""
    selector = f"{LABEL}={rec.data.get('run_id') or rec.namespace.rsplit('-upgrade-', 1)[-1]}"
    try:
        kube.core.delete_namespace(rec.namespace, _request_timeout=REQUEST_TIMEOUT_S)
    except ApiException as err:
        if err.status != 404:
            raise
    left: list[str] = []
    until = time.monotonic() + timeout
    for kind in (CLUSTERQUEUE, RESOURCEFLAVOR):
        for obj in kube.list(kind, None, label_selector=selector):
            kube.delete(kind, obj["metadata"]["name"])
    while time.monotonic() < until:
        left = [f"namespace {n.metadata.name}" for n in _found(kube) if n.metadata.name == rec.namespace]
        left += [f"{kind.plural} {o['metadata']['name']}" for kind in (CLUSTERQUEUE, RESOURCEFLAVOR)
                 for o in kube.list(kind, None, label_selector=selector)]
        if not left:
            break
        time.sleep(1)
    return left
