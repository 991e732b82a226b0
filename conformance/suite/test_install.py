"""INS: the stack is installed and healthy."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mpiplat.versions import load

pytestmark = pytest.mark.read_only

# Components whose CRDs the stack installs; versions.yml pins each one's served CRD versions (served_crds).
STACK = ("mpi-operator", "trainer", "jobset", "kueue")
LEGACY_CRDS = ("pytorchjobs.kubeflow.org", "tfjobs.kubeflow.org", "xgboostjobs.kubeflow.org")
PROBE_NAMESPACE = "default"  # namespaced dry runs need an existing namespace; they create nothing


def _crd(kube, name: str):
    try:
        return kube.apiext.read_custom_resource_definition(name)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def _served(crd) -> list[str]:
    return sorted(v.name for v in crd.spec.versions if v.served)


def _api_message(err: ApiException) -> str:
    try:
        return json.loads(err.body)["message"]
    except (TypeError, ValueError, KeyError):
        return f"{err.status} {err.reason}"


# ---- INS-01: controllers judged through the API server

def _lease_renewed(kube, name: str) -> tuple[bool, str]:
    """A leader-election Lease `name` (any namespace) whose renewTime advances while we watch: its
    holder runs now. Judged by the Lease's own clock, so the skew between this machine and the
    cluster does not matter."""
    coord = client.CoordinationV1Api(kube.api_client)
    leases = coord.list_lease_for_all_namespaces(field_selector=f"metadata.name={name}").items
    if not leases:
        return False, f"no leader-election Lease {name} in any namespace"
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


def _webhook_rejects(kube, create, webhook: str) -> tuple[bool, str]:
    """Dry-run `create` (an object the controller's validating webhook must reject) on the server. A
    rejection by that webhook proves it serves; "failed calling webhook" proves it does not."""
    try:
        create()
    except ApiException as err:
        msg = _api_message(err)
        if "failed calling webhook" in msg:
            return False, f"its webhook does not answer: {msg}"
        if "denied the request" in msg and webhook in msg.split("denied the request")[0]:
            return True, "its admission webhook answered a dry run"
        return False, f"a dry run that its webhook should reject got {err.status}: {msg}"
    return False, "a dry run that its webhook should reject was admitted: no webhook of it is registered"


def _trainer_webhook(kube) -> tuple[bool, str]:
    # Trainer's runtime validator requires the `node` container in the trainer ancestor's job.
    runtime = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": {"generateName": "mpiplat-probe-"},
        "spec": {"template": {"spec": {"replicatedJobs": [{
            "name": "node", "replicas": 2,
            "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                         "spec": {"template": {"spec": {"containers": [{"name": "probe", "image": "busybox"}],
                                                        "restartPolicy": "Never"}}}}}]}}}}
    return _webhook_rejects(kube, lambda: kube.custom.create_cluster_custom_object(
        "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", runtime, dry_run="All"), "trainer")


def _jobset_webhook(kube) -> tuple[bool, str]:
    # JobSet's validator requires the network subdomain to be a DNS name.
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"generateName": "mpiplat-probe-", "namespace": PROBE_NAMESPACE},
        "spec": {"network": {"subdomain": "Not_A_DNS_Name"}, "replicatedJobs": [{
            "name": "w", "replicas": 1,
            "template": {"spec": {"template": {"spec": {"containers": [{"name": "probe", "image": "busybox"}],
                                                        "restartPolicy": "Never"}}}}}]}}
    return _webhook_rejects(kube, lambda: kube.custom.create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", PROBE_NAMESPACE, "jobsets", jobset, dry_run="All"), "jobset")


# (controller, what its Deployment's name contains, evidence where no Deployment runs it)
CONTROLLERS = (
    ("mpi-operator", "mpi-operator", lambda kube: _lease_renewed(kube, "mpi-operator")),
    ("trainer", "trainer", _trainer_webhook),
    ("jobset", "jobset", _jobset_webhook),
)


def _controller_health(kube, deployments, controller: str, match: str, evidence) -> tuple[bool, str]:
    """Where the controller runs as Deployment(s): their availability. Otherwise (e.g. the local
    reference cluster runs controllers as host processes) what it does through the API server."""
    found = [d for d in deployments if match in d.metadata.name]
    if found:
        seen = [f"Deployment {d.metadata.namespace}/{d.metadata.name} {d.status.available_replicas or 0}/"
                f"{d.spec.replicas if d.spec.replicas is not None else 1} available" for d in found]
        return all((d.status.available_replicas or 0) >= 1 for d in found), "; ".join(seen)
    ok, seen = evidence(kube)
    return ok, f"no Deployment; {seen}"


@pytest.mark.requirement("INS-01")
def test_mpijob_and_trainer_apis_are_served_and_controllers_healthy(kube):
    wanted = {"mpijobs.kubeflow.org": "v2beta1", "trainjobs.trainer.kubeflow.org": "v1alpha1",
              "trainingruntimes.trainer.kubeflow.org": "v1alpha1",
              "clustertrainingruntimes.trainer.kubeflow.org": "v1alpha1"}
    for name, version in wanted.items():
        crd = _crd(kube, name)
        assert crd is not None, f"CRD {name} is missing"
        assert version in _served(crd), f"CRD {name} serves {_served(crd)}, not {version}"
    deployments = client.AppsV1Api(kube.api_client).list_deployment_for_all_namespaces().items
    verdicts = {c: _controller_health(kube, deployments, c, match, evidence) for c, match, evidence in CONTROLLERS}
    unhealthy = {c: seen for c, (ok, seen) in verdicts.items() if not ok}
    assert not unhealthy, "controllers not healthy: " + "; ".join(f"{c}: {seen}" for c, seen in unhealthy.items())


# ---- INS-02

@pytest.mark.requirement("INS-02")
def test_no_conflicting_mpijob_v1_and_crd_versions_as_pinned(kube):
    crd = _crd(kube, "mpijobs.kubeflow.org")
    assert crd is not None, "CRD mpijobs.kubeflow.org is missing"
    assert _served(crd) == ["v2beta1"], f"MPIJob CRD serves {_served(crd)}: Training Operator v1 conflicts"
    legacy = [name for name in LEGACY_CRDS if _crd(kube, name) is not None]
    assert not legacy, f"Training Operator v1 CRD(s) installed: {legacy}"
    comps = load()
    wrong = []
    for comp_name in STACK:
        comp = comps[comp_name]
        pinned = comp.extra.get("served_crds")
        assert pinned, f"versions.yml: components.{comp_name}.served_crds is missing"
        for name, versions in sorted(pinned.items()):
            live = _crd(kube, name)
            if live is None:
                wrong.append(f"{name} ({comp_name} {comp.version}) is missing")
            elif _served(live) != sorted(versions):
                wrong.append(f"{name} ({comp_name} {comp.version}) serves {_served(live)}, pinned {sorted(versions)}")
    assert not wrong, "CRD versions not as pinned: " + "; ".join(wrong)


@pytest.mark.requirement("INS-04")
def test_gpu_nodes_advertise_gpus(kube, settings, run):
    gpu_nodes = {n.metadata.name: int(n.status.allocatable.get(settings.gpu_resource, "0"))
                 for n in kube.core.list_node().items
                 if int((n.status.allocatable or {}).get(settings.gpu_resource, "0")) > 0 and not n.spec.unschedulable}
    assert gpu_nodes, f"no schedulable node advertises {settings.gpu_resource}"
    run.record("INS-04", "schedulable GPU nodes", len(gpu_nodes))
    run.record("INS-04", "GPUs advertised", sum(gpu_nodes.values()))


@pytest.mark.requirement("INS-04", needs=["gpus"])
def test_gpu_operator_cluster_policy_ready(kube):
    try:
        policies = kube.custom.list_cluster_custom_object("nvidia.com", "v1", "clusterpolicies")["items"]
    except ApiException as err:
        pytest.fail(f"no ClusterPolicy API ({err.status}): the GPU Operator is not installed")
    assert policies and all(p.get("status", {}).get("state") == "ready" for p in policies), \
        [(p["metadata"]["name"], p.get("status", {}).get("state")) for p in policies]


@pytest.mark.requirement("INS-05")
def test_monitoring_dashboard_and_rules_present_and_valid(kube):
    cms = kube.core.list_config_map_for_all_namespaces(label_selector="grafana_dashboard=1").items
    ours = [c for c in cms if c.metadata.name == "mpiplat-mpijob-overview-dashboard"]
    assert ours, "the MPIJob Overview dashboard ConfigMap is missing (run site.yml with the monitoring role)"
    dashboard = json.loads(next(iter(ours[0].data.values())))
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    if _crd(kube, "prometheusrules.monitoring.coreos.com"):
        rules = kube.custom.list_cluster_custom_object("monitoring.coreos.com", "v1", "prometheusrules")["items"]
        assert any(r["metadata"]["name"] == "mpiplat-mpi-training" for r in rules)
