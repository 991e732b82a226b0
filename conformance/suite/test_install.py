"""INS: the stack is installed and healthy."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes.client.exceptions import ApiException

from mpiplat.conformance import capabilities as caps
from mpiplat.conformance import health
from mpiplat.conformance.prometheus import Prometheus
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


# ---- INS-01: CRDs served, controllers judged through the API server (mpiplat.conformance.health)

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
    return health.webhook_rejects(lambda: kube.custom.create_cluster_custom_object(
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
    return health.webhook_rejects(lambda: kube.custom.create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", PROBE_NAMESPACE, "jobsets", jobset, dry_run="All"), "jobset")


# (controller, what its Deployment's name contains, what only the running controller does). mpi-operator
# always elects a leader (Lease mpi-operator in its --lock-namespace); Trainer and JobSet serve webhooks.
CONTROLLERS = (
    ("mpi-operator", "mpi-operator", [lambda kube: health.lease_renewed(kube, "mpi-operator")]),
    ("trainer", "trainer", [_trainer_webhook]),
    ("jobset", "jobset", [_jobset_webhook]),
)


def _served_and_listable(kube, name: str, version: str) -> str | None:
    """What is wrong with CRD `name` at `version` (None if nothing): it must be Established, serve the
    version, and the API server must answer a list at it."""
    crd = _crd(kube, name)
    if crd is None:
        return f"CRD {name} is missing"
    if not any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or [])):
        return f"CRD {name} is not Established"
    if version not in _served(crd):
        return f"CRD {name} serves {_served(crd)}, not {version}"
    try:
        kube.custom.list_cluster_custom_object(crd.spec.group, version, crd.spec.names.plural, limit=1)
    except ApiException as err:
        return f"CRD {name}: listing {crd.spec.group}/{version} {crd.spec.names.plural} answered {err.status}"
    return None


@pytest.mark.requirement("INS-01")
def test_mpijob_and_trainer_apis_are_served_and_controllers_healthy(kube, request):
    """CRDs Established, served and listable; mpi-operator, Trainer and JobSet healthy, judged through the API
    server (mpiplat.conformance.health): their Deployments Available with Ready pods where they run as
    Deployments, and in any case mpi-operator's leader-election Lease renewed and the Trainer and JobSet
    webhooks answering a dry run (the local cluster runs them as host processes: no Deployment there).
    Fails on a cluster whose mpi-operator is stopped or scaled to 0 (its Lease is not renewed), whose Trainer
    or JobSet webhook does not answer, or that lacks one of the CRDs."""
    wanted = {"mpijobs.kubeflow.org": "v2beta1", "trainjobs.trainer.kubeflow.org": "v1alpha1",
              "trainingruntimes.trainer.kubeflow.org": "v1alpha1",
              "clustertrainingruntimes.trainer.kubeflow.org": "v1alpha1"}
    wrong = [w for name, version in wanted.items() if (w := _served_and_listable(kube, name, version))]
    assert not wrong, "; ".join(wrong)
    deployments = health.deployments(kube)
    verdicts = {c: health.controller_health(kube, deployments, match, probes) for c, match, probes in CONTROLLERS}
    request.node._mpiplat_diagnosis = "; ".join(f"{c}: {seen}" for c, (_, seen) in verdicts.items())
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
def test_gpu_nodes_advertise_gpus(kube, settings, run, evidence):
    evidence.partial("DCGM metrics scrape is not checked: no test of the suite scrapes DCGM metrics yet")
    gpu_nodes = {n.metadata.name: caps.gpus(n, settings.gpu_resource) for n in kube.core.list_node().items
                 if caps.gpus(n, settings.gpu_resource) > 0 and not n.spec.unschedulable}
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


ALERTS = {"MPIJobFailed", "MPIJobPendingTooLong", "ClusterQueueStarved", "GPUsIdleWhileJobRuns"}
# How long a PrometheusRule may take to reach Prometheus (the Prometheus Operator's sync and reload).
RULES_LOADED_S = 30


@pytest.mark.requirement("INS-05")
def test_monitoring_dashboard_and_rules_present_and_valid(kube, settings, evidence):
    """The MPIJob Overview dashboard ConfigMap, and the PrometheusRule mpiplat-mpi-training with our alerts.
    Where the Prometheus Operator's PrometheusRule CRD is absent, no rule is in the cluster to evaluate:
    the row is then partial, never passed. Where the settings name a Prometheus, each alert of that
    PrometheusRule must be loaded there, with the same query and health ok (a Prometheus whose rule
    selector misses our PrometheusRule fails the row), within RULES_LOADED_S of the run (the Operator syncs
    and reloads after a change); otherwise the row judged objects only."""
    cms = kube.core.list_config_map_for_all_namespaces(label_selector="grafana_dashboard=1").items
    ours = [c for c in cms if c.metadata.name == "mpiplat-mpijob-overview-dashboard"]
    assert ours, "the MPIJob Overview dashboard ConfigMap is missing (run site.yml with the monitoring role)"
    dashboard = json.loads(next(iter(ours[0].data.values())))
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    if not _crd(kube, "prometheusrules.monitoring.coreos.com"):
        evidence.partial("the alert rules are not in the cluster: no PrometheusRule CRD (the Prometheus Operator "
                         "is not installed), so the monitoring role applied none and nothing evaluates them")
        return
    rules = kube.custom.list_cluster_custom_object("monitoring.coreos.com", "v1", "prometheusrules")["items"]
    found = [r for r in rules if r["metadata"]["name"] == "mpiplat-mpi-training"]
    assert found, "PrometheusRule mpiplat-mpi-training is missing (run site.yml with the monitoring role)"
    alerts = {rule.get("alert") for r in found for g in r["spec"].get("groups", []) for rule in g.get("rules", [])}
    assert ALERTS <= alerts, f"PrometheusRule mpiplat-mpi-training lacks the alerts {sorted(ALERTS - alerts)}"
    prometheus = Prometheus.from_settings(settings.prometheus)
    if prometheus is None:
        return
    wanted = {rule["alert"]: rule["expr"] for r in found for g in r["spec"]["groups"] for rule in g["rules"]
              if rule.get("alert")}
    until = kube.deadline(RULES_LOADED_S)
    while (missing := sorted(set(wanted) - set(loaded := prometheus.alerting_rules()))) and time.monotonic() < until:
        time.sleep(1)
    assert not missing, f"Prometheus at {prometheus.url} has not loaded the alerts {missing} of PrometheusRule " \
                        f"mpiplat-mpi-training within {RULES_LOADED_S}s (does its ruleSelector match the rule's " \
                        "labels?)"
    loaded = prometheus.evaluated_alerting_rules(list(wanted))
    differ = sorted(n for n, expr in wanted.items() if "".join(loaded[n]["query"].split()) != "".join(expr.split()))
    assert not differ, f"Prometheus evaluates other queries than PrometheusRule mpiplat-mpi-training for {differ}"
    sick = {n: loaded[n].get("lastError") for n in wanted if loaded[n]["health"] != "ok"}
    assert not sick, f"alert rules failing in Prometheus: {sick}"
    evidence.showed("real")
