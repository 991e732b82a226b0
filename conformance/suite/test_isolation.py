"""ISO: isolation and security of job pods."""

from __future__ import annotations

import pytest
from kubernetes import client

from mpiplat import jobs
from mpiplat.conformance.placement import Placement, pod_spec
from mpiplat.conformance.watch import JOB_LABEL, ROLE_LABEL, all_running, wait_pods
from mpiplat.kube import MPIJOB, label_selector


@pytest.mark.requirement("ISO-02")
def test_job_pods_get_no_api_token(kube, run, mpijob_spec):
    ns = run.namespace()
    kube.create(MPIJOB, jobs.mpijob(mpijob_spec("tokenless", ns, workers=2,
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


def _namespace_with_team_policies(kube, run, settings) -> str:
    """A throwaway namespace holding copies of the first team namespace's NetworkPolicies."""
    team = settings.teams[0]
    net = client.NetworkingV1Api(kube.api_client)
    policies = net.list_namespaced_network_policy(team.namespace).items
    assert policies, f"team namespace {team.namespace} has no NetworkPolicies"
    ns = run.namespace()
    for pol in policies:
        body = kube.api_client.sanitize_for_serialization(pol)
        body["metadata"] = {"name": pol.metadata.name, "namespace": ns}
        net.create_namespaced_network_policy(ns, body)
    return ns


@pytest.mark.requirement("ISO-03")
def test_team_network_policies_deny_other_namespaces_and_allow_the_job(kube, run, settings, mpijob_spec):
    """The team namespace's NetworkPolicies, laid onto a running MPIJob: every job pod is selected by
    a policy, no rule admits other namespaces, and workers admit the launcher (SSH) and each other.
    (Objects only here; the cluster profile proves enforcement with a probe pod.)"""
    net = client.NetworkingV1Api(kube.api_client)
    ns = _namespace_with_team_policies(kube, run, settings)
    spec = mpijob_spec("np", ns, workers=2, launcher_annotations={jobs.COMPLETE_AFTER: "60s"})
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


PROBE_PORT = 2222  # the workers' sshd
PROBE_FOR_S = 10


def _probe(kube, ns: str, name: str, ip: str, image: str, labels: dict[str, str], placed: Placement,
           within: float = PROBE_FOR_S) -> str:
    """A pod that tries to connect to ip:PROBE_PORT for up to `within` seconds; returns OPEN as soon
    as one connection succeeds, else CLOSED. (A network plugin programs a new pod's policy rules a
    moment after the pod starts, so one early attempt could be refused although the pod is admitted.)"""
    tries = int(within / 0.5)
    script = (f"for i in $(seq {tries}); do if timeout 1 bash -c '</dev/tcp/{ip}/{PROBE_PORT}' 2>/dev/null; "
              "then echo OPEN; exit 0; fi; sleep 0.5; done; echo CLOSED")
    pod_security = {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}}
    container_security = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    kube.core.create_namespaced_pod(ns, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
        "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False, "securityContext": pod_security,
                 **pod_spec(placed),
                 "containers": [{"name": "probe", "image": image, "command": ["bash", "-c", script],
                                 "securityContext": container_security,
                                 "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}]}})
    wait_pods(kube, ns, f"mpiplat.io/probe={labels['mpiplat.io/probe']}",
              lambda pods: bool(pods) and pods[0].status.phase in ("Succeeded", "Failed"), timeout=180)
    return kube.core.read_namespaced_pod_log(name, ns).strip()


@pytest.mark.requirement("ISO-03", needs=["pod_network"])
def test_network_policies_are_enforced_for_a_running_job(kube, run, settings, place, mpijob_spec):
    """Real traffic: a probe pod in another namespace cannot reach a worker's SSH port, while a pod
    inside the job's namespace with the launcher's role can."""
    ns = _namespace_with_team_policies(kube, run, settings)
    image = settings.images["OpenMPI"]
    spec = mpijob_spec("np", ns, real=True, workers=2, image=image, command=["sleep", "600"])
    kube.create(MPIJOB, jobs.mpijob(spec))
    pods = wait_pods(kube, ns, f"{JOB_LABEL}=np,{ROLE_LABEL}=worker", all_running(2), timeout=300)
    ip = pods[0].status.pod_ip
    inside = _probe(kube, ns, "probe-inside", ip, image,
                    {"mpiplat.io/probe": "inside", JOB_LABEL: "np", ROLE_LABEL: "launcher"}, place(real=True))
    outsider_ns = run.namespace()
    outside = _probe(kube, outsider_ns, "probe-outside", ip, image, {"mpiplat.io/probe": "outside"},
                     place(real=True))
    assert inside == "OPEN", f"a launcher-role pod in the job's namespace could not reach {ip}:{PROBE_PORT}: {inside}"
    assert outside == "CLOSED", (f"a pod in namespace {outsider_ns} reached worker {ip}:{PROBE_PORT}: the "
                                 "NetworkPolicies exist but are not enforced (does the cluster's CNI support them?)")
