"""charts/mpi-tenant rendered by `helm template`: objects, values, NetworkPolicy selectors and schema failures."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from helmcli import CHARTS, Helm

TEAM = "team-cv"
BASE = {"team": TEAM}

COMMON_LABELS = {
    "app.kubernetes.io/managed-by": "Helm",
    "app.kubernetes.io/part-of": "mpiplat",
    "mpiplat.io/team": TEAM,
}
ROLE = "training.kubeflow.org/job-role"
JOBSET = "jobset.sigs.k8s.io/jobset-name"

# Values that switch on every optional object, to check labels and namespaces everywhere.
FULL = {
    "team": TEAM,
    "commonLabels": {"cost-center": "cv-1234"},
    "namespace": {"keepOnUninstall": True, "annotations": {"owner": "cv-leads"}},
    "rbac": {
        "admins": [{"kind": "Group", "name": "cv-leads"}],
        "users": [{"kind": "Group", "name": "data-scientists"}, {"kind": "ServiceAccount", "name": "ci"}],
        "viewers": [{"kind": "User", "name": "auditor@example.com"}],
    },
    "networkPolicy": {
        "ingress": {"allowSameNamespace": True, "allowFromNamespaces": [{"kubernetes.io/metadata.name": "monitoring"}]},
        "egress": {"apiServer": {"cidrs": ["10.0.0.1/32"]}},
    },
}


def kinds(objs: list[dict[str, Any]]) -> Counter:
    return Counter(o["kind"] for o in objs)


def of_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def named(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, got {[o['metadata']['name'] for o in of_kind(objs, kind)]}"
    return found[0]


def policies(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o["spec"] for o in of_kind(objs, "NetworkPolicy")}


@pytest.fixture(scope="module")
def defaults(mpi_tenant: Helm) -> list[dict[str, Any]]:
    return mpi_tenant.template(BASE)


# --- objects, names, labels ----------------------------------------------------------------------


def test_defaults_render_the_tenant_objects(defaults):
    assert kinds(defaults) == Counter(
        {"Namespace": 1, "ResourceQuota": 1, "LimitRange": 1, "LocalQueue": 1, "NetworkPolicy": 6})
    assert sorted(policies(defaults)) == sorted(f"{TEAM}-{n}" for n in [
        "deny-ingress", "mpijob-launcher-to-worker", "mpijob-worker-to-worker", "mpijob-worker-to-launcher",
        "trainjob-pods", "egress"])


def test_full_values_render_every_optional_object(render):
    objs = render(FULL)
    assert kinds(objs) == Counter({"Namespace": 1, "RoleBinding": 3, "ResourceQuota": 1, "LimitRange": 1,
                                   "LocalQueue": 1, "NetworkPolicy": 8})


@pytest.mark.parametrize("values", [BASE, FULL], ids=["defaults", "full"])
def test_every_object_carries_the_common_labels(render, values):
    for obj in render(values):
        labels = obj["metadata"]["labels"]
        assert COMMON_LABELS.items() <= labels.items(), f"{obj['kind']} {obj['metadata']['name']}: {labels}"
        assert labels["app.kubernetes.io/name"] == "mpi-tenant"
        if values is FULL:
            assert labels["cost-center"] == "cv-1234"


@pytest.mark.parametrize("values, namespace", [
    (BASE, TEAM),
    ({**FULL, "namespace": {"name": "cv-training"}}, "cv-training"),
], ids=["team-name", "namespace.name"])
def test_every_namespaced_object_lands_in_the_team_namespace(render, values, namespace):
    objs = render(values, "--namespace", "mpiplat-tenants")
    assert named(objs, "Namespace", namespace)["metadata"].get("namespace") is None
    for obj in objs:
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == namespace, f"{obj['kind']} {obj['metadata']['name']}"


def test_namespace_labels_pod_security_and_kueue(defaults):
    labels = named(defaults, "Namespace", TEAM)["metadata"]["labels"]
    assert labels["mpiplat.io/team"] == TEAM
    assert labels["kueue.openshift.io/managed"] == "true"
    # restricted is enforced, not only audited: MPI pods that run as non-root pass it (README "Pod Security").
    for level in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{level}"] == "restricted", level
        assert labels[f"pod-security.kubernetes.io/{level}-version"] == "latest", level
    assert "annotations" not in named(defaults, "Namespace", TEAM)["metadata"]


@pytest.mark.parametrize("enforce", ["baseline", "privileged"])
def test_namespace_label_values_are_configurable(render, enforce):
    """A team whose images need root can still get a looser level than the restricted default."""
    objs = render({**BASE, "namespace": {
        "kueueManagedLabel": "", "labels": {"tier": "gold"},
        "podSecurity": {"enforce": enforce, "audit": "", "warn": "", "version": "v1.34"}}})
    labels = named(objs, "Namespace", TEAM)["metadata"]["labels"]
    assert labels["tier"] == "gold"
    assert "kueue.openshift.io/managed" not in labels
    assert labels["pod-security.kubernetes.io/enforce"] == enforce
    assert labels["pod-security.kubernetes.io/enforce-version"] == "v1.34"
    assert not any(k.startswith(("pod-security.kubernetes.io/audit", "pod-security.kubernetes.io/warn"))
                   for k in labels)


def test_keep_on_uninstall_annotates_the_namespace(render):
    annotations = named(render(FULL), "Namespace", TEAM)["metadata"]["annotations"]
    assert annotations == {"helm.sh/resource-policy": "keep", "owner": "cv-leads"}


def test_namespace_create_false_omits_the_namespace(render):
    objs = render({**BASE, "namespace": {"create": False}})
    assert "Namespace" not in kinds(objs)
    assert kinds(objs)["NetworkPolicy"] == 6
    assert {o["metadata"]["namespace"] for o in objs} == {TEAM}


# --- RBAC -------------------------------------------------------------------------------------------


def test_no_role_bindings_without_subjects(defaults):
    assert of_kind(defaults, "RoleBinding") == []


def test_role_bindings_bind_the_subjects_to_the_cluster_roles(render):
    objs = render(FULL)
    refs = {rb["metadata"]["name"]: rb["roleRef"] for rb in of_kind(objs, "RoleBinding")}
    assert refs == {
        f"{TEAM}-{group}": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}
        for group, role in [("admins", "mpijob-admin"), ("users", "mpijob-user"), ("viewers", "mpijob-viewer")]
    }
    assert named(objs, "RoleBinding", f"{TEAM}-users")["subjects"] == [
        {"kind": "Group", "name": "data-scientists", "apiGroup": "rbac.authorization.k8s.io"},
        {"kind": "ServiceAccount", "name": "ci", "namespace": TEAM},
    ]
    assert named(objs, "RoleBinding", f"{TEAM}-viewers")["subjects"] == [
        {"kind": "User", "name": "auditor@example.com", "apiGroup": "rbac.authorization.k8s.io"}]


def test_role_binding_cluster_roles_and_service_account_namespace_are_configurable(render):
    objs = render({**BASE, "rbac": {
        "users": [{"kind": "ServiceAccount", "name": "runner", "namespace": "ci-system"}],
        "clusterRoles": {"user": "custom-mpijob-user"}}})
    [rb] = of_kind(objs, "RoleBinding")
    assert rb["roleRef"]["name"] == "custom-mpijob-user"
    assert rb["subjects"] == [{"kind": "ServiceAccount", "name": "runner", "namespace": "ci-system"}]


def test_rbac_create_false_renders_no_bindings(render):
    assert of_kind(render({**FULL, "rbac": {**FULL["rbac"], "create": False}}), "RoleBinding") == []


# --- quota, limits, queue --------------------------------------------------------------------------


def test_resource_quota_defaults(defaults):
    quota = named(defaults, "ResourceQuota", f"{TEAM}-quota")
    assert quota["metadata"]["labels"]["mpiplat.io/gpu-quota"] == "true"  # the guardrail's params selector
    assert quota["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "0",
        "requests.cpu": "64",
        "requests.memory": "256Gi",
        "limits.memory": "256Gi",
        "pods": "200",
    }


def test_resource_quota_values(render):
    objs = render({**BASE, "quota": {
        "gpuResourceName": "amd.com/gpu", "gpus": 32, "requestsCpu": 1000000, "requestsMemory": "2048Gi",
        "limitsMemory": None, "pods": None, "extra": {"count/mpijobs.kubeflow.org": 20, "requests.storage": "1Ti"}}})
    assert named(objs, "ResourceQuota", f"{TEAM}-quota")["spec"]["hard"] == {
        "requests.amd.com/gpu": "32",
        "requests.cpu": "1000000",  # a number from a values file, not 1e+06
        "requests.memory": "2048Gi",
        "count/mpijobs.kubeflow.org": "20",
        "requests.storage": "1Ti",
    }


def test_quota_values_from_set_flags(render):
    objs = render(BASE, "--set", "quota.gpus=8", "--set", "quota.requestsCpu=1.5")
    hard = named(objs, "ResourceQuota", f"{TEAM}-quota")["spec"]["hard"]
    assert hard["requests.nvidia.com/gpu"] == "8"
    assert hard["requests.cpu"] == "1.5"


def test_limit_range_defaults(defaults):
    limits = named(defaults, "LimitRange", f"{TEAM}-limits")["spec"]["limits"]
    assert limits == [{
        "type": "Container",
        "default": {"memory": "4Gi"},
        "defaultRequest": {"cpu": "500m", "memory": "1Gi"},
        "max": {"memory": "512Gi"},
    }]


def test_limit_range_gpu_maximum_gives_non_gpu_containers_a_zero_limit(render):
    objs = render({**BASE, "quota": {"gpuResourceName": "nvidia.com/gpu"}, "limitRange": {
        "maxGpus": 8, "default": {"cpu": 4, "memory": "8Gi"}, "max": {"cpu": 64, "memory": "512Gi"}}})
    [limit] = named(objs, "LimitRange", f"{TEAM}-limits")["spec"]["limits"]
    assert limit["max"] == {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}
    assert limit["default"] == {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "0"}


def test_quota_and_limit_range_can_be_switched_off(render):
    objs = render({**BASE, "quota": {"enabled": False}, "limitRange": {"enabled": False}})
    assert {"ResourceQuota", "LimitRange"}.isdisjoint(kinds(objs))


def test_local_queue_defaults(defaults):
    queue = named(defaults, "LocalQueue", f"{TEAM}-queue")
    assert queue["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert queue["spec"] == {"clusterQueue": TEAM}


def test_local_queue_values(render):
    objs = render({**BASE, "localQueue": {
        "name": "cv", "clusterQueue": "gpu-shared", "apiVersion": "kueue.x-k8s.io/v1beta1"}})
    queue = named(objs, "LocalQueue", "cv")
    assert queue["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert queue["spec"] == {"clusterQueue": "gpu-shared"}
    assert "LocalQueue" not in kinds(render({**BASE, "localQueue": {"create": False}}))


# --- NetworkPolicies ---------------------------------------------------------------------------------


def test_deny_ingress_selects_every_pod_and_allows_nothing(defaults):
    assert policies(defaults)[f"{TEAM}-deny-ingress"] == {"podSelector": {}, "policyTypes": ["Ingress"]}


@pytest.mark.parametrize("values", [BASE, FULL], ids=["defaults", "full"])
def test_no_ingress_rule_admits_other_namespaces_unless_listed(render, values):
    """Pods in other namespaces cannot reach team pods: every ingress peer is a same-namespace podSelector,
    except the namespaces listed in networkPolicy.ingress.allowFromNamespaces."""
    allowed = [{"namespaceSelector": {"matchLabels": sel}}
               for sel in values.get("networkPolicy", {}).get("ingress", {}).get("allowFromNamespaces", [])]
    for name, spec in policies(render(values)).items():
        for rule in spec.get("ingress", []):
            assert rule.get("from"), f"{name}: a rule without 'from' admits every source"
            for peer in rule["from"]:
                assert set(peer) == {"podSelector"} or peer in allowed, f"{name}: {peer}"


def test_mpijob_launcher_reaches_workers_on_ssh_only(defaults):
    assert policies(defaults)[f"{TEAM}-mpijob-launcher-to-worker"] == {
        "podSelector": {"matchLabels": {ROLE: "worker"}},
        "policyTypes": ["Ingress"],
        "ingress": [{
            "from": [{"podSelector": {"matchLabels": {ROLE: "launcher"}}}],
            "ports": [{"protocol": "TCP", "port": 2222}],
        }],
    }


def test_mpijob_workers_reach_each_other_and_the_launcher_on_all_ports(defaults):
    nps = policies(defaults)
    assert nps[f"{TEAM}-mpijob-worker-to-worker"] == {
        "podSelector": {"matchLabels": {ROLE: "worker"}},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {"matchLabels": {ROLE: "worker"}}}]}],
    }
    assert nps[f"{TEAM}-mpijob-worker-to-launcher"] == {
        "podSelector": {"matchLabels": {ROLE: "launcher"}},
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {"matchLabels": {ROLE: "worker"}}}]}],
    }


def test_launcher_to_worker_ports_empty_opens_all_ports(render):
    objs = render({**BASE, "networkPolicy": {"mpiJob": {"launcherToWorkerPorts": []}}})
    [rule] = policies(objs)[f"{TEAM}-mpijob-launcher-to-worker"]["ingress"]
    assert "ports" not in rule
    objs = render({**BASE, "networkPolicy": {"mpiJob": {"launcherToWorkerPorts": [{"port": 22}]}}})
    [rule] = policies(objs)[f"{TEAM}-mpijob-launcher-to-worker"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 22}]


def test_trainjob_jobset_pods_reach_each_other(defaults):
    exists = {"matchExpressions": [{"key": JOBSET, "operator": "Exists"}]}
    assert policies(defaults)[f"{TEAM}-trainjob-pods"] == {
        "podSelector": exists,
        "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": exists}]}],
    }


def test_mpijob_and_trainjob_policies_can_be_switched_off(render):
    objs = render({**BASE, "networkPolicy": {"mpiJob": {"enabled": False}, "trainJob": {"enabled": False}}})
    assert sorted(policies(objs)) == [f"{TEAM}-deny-ingress", f"{TEAM}-egress"]


def test_egress_allows_dns_and_the_namespace_only(defaults):
    assert policies(defaults)[f"{TEAM}-egress"] == {
        "podSelector": {},
        "policyTypes": ["Egress"],
        "egress": [
            {
                "to": [{
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                }],
                "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
            },
            {"to": [{"podSelector": {}}]},
        ],
    }


OPENSHIFT_DNS = {
    "to": [{
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "openshift-dns"}},
        "podSelector": {"matchLabels": {"dns.operator.openshift.io/daemonset-dns": "default"}},
    }],
    "ports": [{"protocol": "UDP", "port": 5353}, {"protocol": "TCP", "port": 5353}],
}


def test_egress_dns_openshift_preset(render):
    objs = render({**BASE, "networkPolicy": {"egress": {"dns": {"preset": "openshift-dns"}}}})
    assert policies(objs)[f"{TEAM}-egress"]["egress"][0] == OPENSHIFT_DNS


def test_egress_api_server_dns_and_extra_rules_are_values(render):
    """DNS overrides replace the default selectors (not merged into them), the API server and extra rules
    follow it, and the same-namespace rule can be left out."""
    https = {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"port": 443, "protocol": "TCP"}]}
    objs = render({**BASE, "networkPolicy": {"egress": {
        "dns": {
            "namespaceSelector": {"kubernetes.io/metadata.name": "openshift-dns"},
            "podSelector": {"dns.operator.openshift.io/daemonset-dns": "default"},
            "ports": [{"port": 5353, "protocol": "UDP"}, {"port": 5353, "protocol": "TCP"}],
        },
        "allowSameNamespace": False,
        "apiServer": {"cidrs": ["10.0.0.1/32", "fd00::1/128"], "ports": [6443]},
        "extraRules": [https],
    }}})
    dns, api, extra = policies(objs)[f"{TEAM}-egress"]["egress"]
    assert dns == OPENSHIFT_DNS
    assert api == {"to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}, {"ipBlock": {"cidr": "fd00::1/128"}}],
                   "ports": [{"protocol": "TCP", "port": 6443}]}
    assert extra == https


def test_egress_restrict_false_renders_no_egress_policy(render):
    objs = render({**BASE, "networkPolicy": {"egress": {"restrict": False}}})
    assert f"{TEAM}-egress" not in policies(objs)
    assert all("Egress" not in spec["policyTypes"] for spec in policies(objs).values())


def test_ingress_opt_ins(render):
    nps = policies(render(FULL))
    assert nps[f"{TEAM}-allow-same-namespace"] == {
        "podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": {}}]}]}
    assert nps[f"{TEAM}-allow-from-namespaces"] == {
        "podSelector": {}, "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]}],
    }


def test_network_policy_enabled_false_renders_none(render):
    assert "NetworkPolicy" not in kinds(render({**FULL, "networkPolicy": {"enabled": False}}))


# --- bad values fail and name the field ---------------------------------------------------------------


@pytest.mark.parametrize("values, field", [
    ({}, "team"),
    ({"team": ""}, "/team"),
    ({"team": "team.cv"}, "/team"),
    ({"team": "TeamCV"}, "/team"),
    ({"team": "-cv"}, "/team"),
    ({"team": "x" * 64}, "/team"),
    ({**BASE, "namespace": {"name": "team.cv"}}, "/namespace/name"),
    ({**BASE, "foo": 1}, "'foo'"),
    ({**BASE, "quota": {"gpu": 8}}, "'gpu'"),
    ({**BASE, "quota": {"gpus": -1}}, "/quota/gpus"),
    ({**BASE, "quota": {"gpus": 1.5}}, "/quota/gpus"),
    ({**BASE, "quota": {"gpus": "8"}}, "/quota/gpus"),
    ({**BASE, "quota": {"requestsMemory": "lots"}}, "/quota/requestsMemory"),
    ({**BASE, "quota": {"requestsCpu": -2}}, "/quota/requestsCpu"),
    ({**BASE, "quota": {"gpuResourceName": "gpu"}}, "/quota/gpuResourceName"),
    ({**BASE, "quota": {"extra": {"count/mpijobs.kubeflow.org": "many"}}}, "/quota/extra/count~1mpijobs.kubeflow.org"),
    ({**BASE, "limitRange": {"max": {"memory": "big"}}}, "/limitRange/max/memory"),
    ({**BASE, "limitRange": {"maxGpus": -1}}, "/limitRange/maxGpus"),
    ({**BASE, "rbac": {"users": "data-scientists"}}, "/rbac/users"),
    ({**BASE, "rbac": {"admins": [{"kind": "Robot", "name": "r2"}]}}, "/rbac/admins/0/kind"),
    ({**BASE, "rbac": {"viewers": [{"kind": "User"}]}}, "/rbac/viewers/0"),
    ({**BASE, "namespace": {"podSecurity": {"enforce": "strict"}}}, "/namespace/podSecurity/enforce"),
    ({**BASE, "namespace": {"labels": "tier=gold"}}, "/namespace/labels"),
    ({**BASE, "namespace": {"create": "yes"}}, "/namespace/create"),
    ({**BASE, "localQueue": {"apiVersion": "kueue.x-k8s.io/v1"}}, "/localQueue/apiVersion"),
    ({**BASE, "localQueue": {"clusterQueue": "Shared_Queue"}}, "/localQueue/clusterQueue"),
    ({**BASE, "networkPolicy": {"mpiJob": {"launcherToWorkerPorts": [{"port": 70000}]}}},
     "/networkPolicy/mpiJob/launcherToWorkerPorts/0/port"),
    ({**BASE, "networkPolicy": {"mpiJob": {"launcherToWorkerPorts": [{"port": 22, "protocol": "ICMP"}]}}},
     "/networkPolicy/mpiJob/launcherToWorkerPorts/0/protocol"),
    ({**BASE, "networkPolicy": {"ingress": {"allowFromNamespaces": [{}]}}},
     "/networkPolicy/ingress/allowFromNamespaces/0"),
    ({**BASE, "networkPolicy": {"egress": {"apiServer": {"cidrs": ["10.0.0.1"]}}}},
     "/networkPolicy/egress/apiServer/cidrs/0"),
    ({**BASE, "networkPolicy": {"egress": {"dns": {"preset": "coredns"}}}}, "/networkPolicy/egress/dns/preset"),
    ({**BASE, "namespace": {"kueueManagedLabel": "kueue managed"}}, "/namespace/kueueManagedLabel"),
    ({**BASE, "networkPolicy": {"egress": {"extraRules": [{"to": [], "port": 443}]}}},
     "/networkPolicy/egress/extraRules/0"),
])
def test_bad_values_fail_and_name_the_field(mpi_tenant, values, field):
    proc = mpi_tenant.run("template", values)
    assert proc.returncode != 0, f"rendered although {field} is wrong:\n{proc.stdout[:500]}"
    assert field in proc.stderr, proc.stderr


def test_missing_team_says_it_is_required(mpi_tenant):
    proc = mpi_tenant.run("template", {})
    assert proc.returncode != 0
    assert "missing property 'team'" in proc.stderr


def test_missing_team_is_caught_without_the_schema(mpi_tenant):
    proc = mpi_tenant.run("template", {}, "--skip-schema-validation")
    assert proc.returncode != 0
    assert "team is required" in proc.stderr


def test_limit_range_maximum_without_default_limit_fails(mpi_tenant):
    proc = mpi_tenant.run("template", {**BASE, "limitRange": {"max": {"cpu": 64}}})
    assert proc.returncode != 0
    assert "limitRange.default.cpu must be set when limitRange.max.cpu is set" in proc.stderr


# --- helm lint -----------------------------------------------------------------------------------------


def test_helm_lint_passes_on_defaults(mpi_tenant):
    proc = mpi_tenant.run("lint", None, "--strict", "-f", str(CHARTS / "mpi-tenant" / "ci" / "default-values.yaml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


def test_helm_lint_without_team_fails(mpi_tenant):
    proc = mpi_tenant.run("lint", None)
    assert proc.returncode != 0
    assert "missing property 'team'" in proc.stdout + proc.stderr
