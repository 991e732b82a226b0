"""INS: the stack is installed and healthy."""

from __future__ import annotations

import json

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mpiplat.versions import load, module_dir

pytestmark = pytest.mark.read_only


def _crd(kube, name: str):
    try:
        return kube.apiext.read_custom_resource_definition(name)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def _served(crd) -> list[str]:
    return sorted(v.name for v in crd.spec.versions if v.served)


@pytest.mark.requirement("INS-01")
def test_mpijob_and_trainer_apis_are_served_and_controllers_healthy(kube, capabilities):
    assert _served(_crd(kube, "mpijobs.kubeflow.org")) == ["v2beta1"]
    for name in ("trainjobs", "trainingruntimes", "clustertrainingruntimes"):
        crd = _crd(kube, f"{name}.trainer.kubeflow.org")
        assert crd is not None, f"CRD {name}.trainer.kubeflow.org is missing"
        assert "v1alpha1" in _served(crd)
    if capabilities.simulated:
        from mpiplat.localcluster import cluster

        comps = cluster.status()["components"]
        unhealthy = [n for n in ("mpi-operator", "trainer-controller-manager", "jobset") if not comps[n]["healthy"]]
    else:
        deployments = client.AppsV1Api(kube.api_client).list_deployment_for_all_namespaces().items
        unhealthy = []
        for wanted in ("mpi-operator", "trainer", "jobset"):
            found = [d for d in deployments if wanted in d.metadata.name]
            if not found or not all((d.status.available_replicas or 0) >= 1 for d in found):
                unhealthy.append(wanted)
    assert not unhealthy, f"controllers not healthy: {unhealthy}"


@pytest.mark.requirement("INS-02")
def test_no_conflicting_mpijob_v1_and_crd_versions_as_pinned(kube):
    crd = _crd(kube, "mpijobs.kubeflow.org")
    assert _served(crd) == ["v2beta1"], f"MPIJob CRD serves {_served(crd)}: Training Operator v1 conflicts"
    for legacy in ("pytorchjobs.kubeflow.org", "tfjobs.kubeflow.org", "xgboostjobs.kubeflow.org"):
        assert _crd(kube, legacy) is None, f"Training Operator v1 CRD {legacy} is installed"
    comps = load()
    for comp_name in ("mpi-operator", "trainer", "jobset", "kueue"):
        comp = comps[comp_name]
        for pattern in comp.extra.get("crds", []):
            for path in sorted(module_dir(comp).glob(pattern)):
                for pinned in yaml.safe_load_all(path.read_text()):
                    if not pinned or pinned.get("kind") != "CustomResourceDefinition":
                        continue
                    live = _crd(kube, pinned["metadata"]["name"])
                    assert live is not None, f"{pinned['metadata']['name']} ({comp_name} {comp.version}) missing"
                    want = sorted(v["name"] for v in pinned["spec"]["versions"] if v.get("served"))
                    assert _served(live) == want, (pinned["metadata"]["name"], _served(live), want)


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
