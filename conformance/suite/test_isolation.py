"""ISO: isolation and security of job pods."""

from __future__ import annotations

import pytest
from kubernetes import client

from conformance.watch import JOB_LABEL, ROLE_LABEL, all_running, wait_pods
from mpiplat import jobs
from mpiplat.kube import MPIJOB, label_selector


@pytest.mark.requirement("ISO-02")
def test_job_pods_get_no_api_token(kube, run, settings):
    ns = run.namespace()
    kube.create(MPIJOB, jobs.mpijob(jobs.MPIJobSpec(name="tokenless", namespace=ns, workers=2,
                                                    image=settings.images["OpenMPI"],
                                                    launcher_annotations={jobs.COMPLETE_AFTER: "60s"})))
    pods = wait_pods(kube, ns, f"{JOB_LABEL}=tokenless", all_running(3), timeout=120)
    for pod in pods:
        mounts = [m.mount_path for c in pod.spec.containers for m in (c.volume_mounts or [])]
        assert "/var/run/secrets/kubernetes.io/serviceaccount" not in mounts, pod.metadata.name
        assert pod.spec.service_account_name in (None, "default")


ROLE_CHECKS = ("create", "get", "list", "delete")


def _allowed(kube, user: str, ns: str, verb: str, resource: str, group: str, subresource: str = "") -> bool:
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=user, resource_attributes=client.V1ResourceAttributes(
            namespace=ns, verb=verb, group=group, resource=resource, subresource=subresource or None)))
    return client.AuthorizationV1Api(kube.api_client).create_subject_access_review(review).status.allowed


@pytest.mark.requirement("ISO-01")
def test_rbac_matrix_for_the_three_roles_in_own_and_other_namespace(kube, run):
    own, other = run.namespace(), run.namespace()
    rbac = client.RbacAuthorizationV1Api(kube.api_client)
    roles = {"admin": "mpijob-admin", "user": "mpijob-user", "viewer": "mpijob-viewer"}
    for who, role in roles.items():
        rbac.create_namespaced_role_binding(own, client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name=f"conf-{who}"),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=role),
            subjects=[client.RbacV1Subject(kind="User", name=f"conf-{who}", api_group="rbac.authorization.k8s.io")]))
    expected_own = {
        "admin": {"create": True, "get": True, "list": True, "delete": True, "logs": True},
        "user": {"create": True, "get": True, "list": True, "delete": True, "logs": True},
        "viewer": {"create": False, "get": True, "list": True, "delete": False, "logs": True},
    }
    actual = {}
    for who in roles:
        for ns, label in ((own, "own"), (other, "other")):
            row = {verb: _allowed(kube, f"conf-{who}", ns, verb, "mpijobs", "kubeflow.org") for verb in ROLE_CHECKS}
            row["logs"] = _allowed(kube, f"conf-{who}", ns, "get", "pods", "", "log")
            actual[(who, label)] = row
    expected = {(who, "own"): row for who, row in expected_own.items()}
    expected |= {(who, "other"): dict.fromkeys(ROLE_CHECKS + ("logs",), False) for who in roles}
    assert actual == expected


def _pods(kube, ns: str, selector: dict | None) -> set[str]:
    return {p.metadata.name for p in kube.core.list_namespaced_pod(ns, label_selector=label_selector(selector)).items}


@pytest.mark.requirement("ISO-03")
def test_team_network_policies_deny_other_namespaces_and_allow_the_job(kube, run, settings):
    """The team namespace's NetworkPolicies, laid onto a running MPIJob: every job pod is selected by
    a policy, no rule admits other namespaces, and workers admit the launcher (SSH) and each other.
    (Objects only here; the cluster profile proves enforcement with a probe pod.)"""
    team = settings.teams[0]
    net = client.NetworkingV1Api(kube.api_client)
    policies = net.list_namespaced_network_policy(team.namespace).items
    assert policies, f"team namespace {team.namespace} has no NetworkPolicies"
    ns = run.namespace()
    for pol in policies:
        body = kube.api_client.sanitize_for_serialization(pol)
        body["metadata"] = {"name": pol.metadata.name, "namespace": ns}
        net.create_namespaced_network_policy(ns, body)
    spec = jobs.MPIJobSpec(name="np", namespace=ns, workers=2, image=settings.images["OpenMPI"],
                           launcher_annotations={jobs.COMPLETE_AFTER: "60s"})
    kube.create(MPIJOB, jobs.mpijob(spec))
    pods = wait_pods(kube, ns, f"{JOB_LABEL}=np", all_running(3), timeout=120)
    workers = {p.metadata.name for p in pods if p.metadata.labels.get(ROLE_LABEL) == "worker"}
    launcher = {p.metadata.name for p in pods} - workers
    selected: set[str] = set()
    admitted: dict[str, set[str]] = {w: set() for w in workers}
    ssh_from_launcher = False
    for pol in net.list_namespaced_network_policy(ns).items:
        spec = kube.api_client.sanitize_for_serialization(pol.spec)
        if "Ingress" not in spec.get("policyTypes", ["Ingress"]):
            continue
        targets = _pods(kube, ns, spec.get("podSelector"))
        selected |= targets
        for rule in spec.get("ingress") or []:
            peers = rule.get("from")
            assert peers, f"{pol.metadata.name} admits every source"
            for peer in peers:
                assert set(peer) == {"podSelector"}, f"{pol.metadata.name} admits other namespaces: {peer}"
                sources = _pods(kube, ns, peer["podSelector"])
                for w in workers & targets:
                    admitted[w] |= sources
                ports = [(p.get("port"), p.get("protocol", "TCP")) for p in rule.get("ports") or []]
                if workers & targets and launcher & sources and (not ports or (2222, "TCP") in ports):
                    ssh_from_launcher = True
    assert launcher | workers <= selected, "some job pods are not covered by any ingress policy"
    assert all(launcher | (workers - {w}) <= admitted[w] for w in workers), admitted
    assert ssh_from_launcher
