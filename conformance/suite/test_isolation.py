"""ISO: isolation and security of job pods."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from mpiplat import jobs, queues
from mpiplat.conformance import identity
from mpiplat.conformance.health import api_message
from mpiplat.conformance.placement import Placement, pod_spec
from mpiplat.conformance.watch import JOB_LABEL, ROLE_LABEL, all_running, submit_job, wait_pods
from mpiplat.kube import CLUSTERQUEUE, LOCALQUEUE, MPIJOB, label_selector, label_selects
from mpiplat.sdk import replica_pod

TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
# What a job pod's ServiceAccount may not do in its namespace: (verb, API group, resource, subresource).
SA_MUST_NOT = (("get", "", "secrets", ""), ("list", "", "secrets", ""), ("create", "", "pods", ""),
               ("create", "", "pods", "exec"), ("create", "kubeflow.org", "mpijobs", ""),
               ("delete", "kubeflow.org", "mpijobs", ""), ("create", "rbac.authorization.k8s.io", "rolebindings", ""))


def _api_tokens(pod) -> list[str]:
    """Where a pod gets a Kubernetes API token: containers' mounts of a projected serviceAccountToken
    volume, or of anything at the token path."""
    token_volumes = {v.name for v in pod.spec.volumes or [] if v.projected
                     and any(src.service_account_token for src in v.projected.sources or [])}
    return [f"{c.name}:{m.mount_path}" for c in [*(pod.spec.init_containers or []), *pod.spec.containers]
            for m in c.volume_mounts or [] if m.name in token_volumes or m.mount_path.startswith(TOKEN_PATH)]


def _team_service_account(kube, team, ns: str) -> tuple[bool | None, str]:
    """The team namespace's default ServiceAccount's automountServiceAccountToken, laid onto the test
    namespace's own default ServiceAccount (as ISO-03 lays the team's NetworkPolicies onto its own
    namespace), and what was found."""
    try:
        automount = kube.core.read_namespaced_service_account("default", team.namespace).automount_service_account_token
    except ApiException as err:
        if err.status != 404:
            raise
        return None, f"team namespace {team.namespace} has no default ServiceAccount"
    until = kube.deadline(30)  # Kubernetes creates a new namespace's default ServiceAccount
    while automount is not None:
        try:
            kube.core.patch_namespaced_service_account("default", ns, {"automountServiceAccountToken": automount})
            break
        except ApiException as err:
            if err.status != 404 or time.monotonic() > until:
                raise
            time.sleep(0.5)
    return automount, (f"team namespace {team.namespace}'s default ServiceAccount sets automountServiceAccountToken "
                       f"{str(automount).lower()}" if automount is not None else
                       f"team namespace {team.namespace}'s default ServiceAccount leaves automountServiceAccountToken "
                       "unset (a token by default)")


def _allowed(kube, user: str, ns: str, verb: str, resource: str, group: str, subresource: str = "",
             groups: list[str] | None = None) -> bool:
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=user, groups=groups, resource_attributes=client.V1ResourceAttributes(
            namespace=ns, verb=verb, group=group, resource=resource, subresource=subresource or None)))
    return client.AuthorizationV1Api(kube.api_client).create_subject_access_review(review).status.allowed


@pytest.mark.requirement("ISO-02")
def test_job_pods_get_no_api_token_by_default(kube, run, settings, mpijob_spec, request):
    """The cluster's policy, not our job builder, keeps API tokens out of job pods: a job whose pod templates
    leave automountServiceAccountToken unset is submitted to a namespace labelled for the first team (so
    policies bound by that label apply) that carries the team namespace's default-ServiceAccount setting (the
    tenancy role sets it false). Its pods must mount no API token, or an admission policy must reject the job
    with a message about the token. And the ServiceAccount those pods run as in the team namespace may not
    read secrets, create pods, exec into them, manage MPIJobs or bind roles there (least privilege).
    Fails on a cluster where nothing prevents the token (a plain namespace's default ServiceAccount, no
    guardrail), or where the team's job ServiceAccount was granted rights (e.g. edit bound to it)."""
    team = settings.teams[0]
    ns = run.namespace(team)
    automount, policy = _team_service_account(kube, team, ns)
    spec = mpijob_spec("token", ns, workers=2, automount_service_account_token=None,
                       launcher_annotations={jobs.COMPLETE_AFTER: "60s"})
    how = ""
    try:
        kube.create(MPIJOB, jobs.mpijob(spec))
    except ApiException as err:
        if err.status not in (400, 403, 422):
            raise
        message = json.loads(err.body or "{}").get("message", str(err))
        assert "token" in message.lower() or "automount" in message.lower(), \
            f"the job was rejected, but not for its API token: {message}"
        how = f"an admission policy rejects a job that does not turn the token off: {message}"
    accounts = {"default"}
    if not how:
        pods = wait_pods(kube, ns, f"{JOB_LABEL}=token", lambda ps: len(ps) >= 3, timeout=120)  # 2 workers + launcher
        tokens = {p.metadata.name: found for p in pods if (found := _api_tokens(p))}
        assert not tokens, (f"pods of a job that leaves automountServiceAccountToken unset got an API token: {tokens}; "
                            f"nothing in the cluster prevents it: {policy}, and no admission policy rejected or "
                            "changed the job (the tenancy role's tenancy_automount_service_account_token: false)")
        accounts = {p.spec.service_account_name or "default" for p in pods}
        how = (policy if automount is False else "an admission policy set the pods' automountServiceAccountToken "
               f"{sorted({str(p.spec.automount_service_account_token) for p in pods})}")
    request.node._mpiplat_diagnosis = f"no API token in job pods: {how}"
    granted = [f"{sa}: {verb} {resource}{'/' + sub if sub else ''}" for sa in sorted(accounts)
               for verb, group, resource, sub in SA_MUST_NOT
               if _allowed(kube, f"system:serviceaccount:{team.namespace}:{sa}", team.namespace, verb, resource,
                           group, sub, groups=["system:serviceaccounts", f"system:serviceaccounts:{team.namespace}",
                                               "system:authenticated"])]
    assert not granted, (f"job pods' ServiceAccount in team namespace {team.namespace} is not least-privilege: "
                         f"{granted}")


ROLE_CHECKS = ("create", "get", "list", "delete")


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


VIEWER_ROLE = "mpijob-viewer"
# What a team's viewers may not do in their team namespace: (verb, API group, resource, subresource).
VIEWER_MUST_NOT = (("create", "kubeflow.org", "mpijobs", ""), ("delete", "kubeflow.org", "mpijobs", ""),
                   ("patch", "kubeflow.org", "mpijobs", ""), ("create", "", "pods", ""),
                   ("create", "", "pods", "exec"), ("get", "", "secrets", ""))


def _subject_groups(subject) -> tuple[str, list[str] | None]:
    """(user, groups) for a SubjectAccessReview of a RoleBinding subject (a Group is reviewed as a member)."""
    if subject.kind == "Group":
        return "mpiplat-conformance-member", [subject.name, "system:authenticated"]
    return subject.name, ["system:authenticated"]


@pytest.mark.requirement("ISO-01")
def test_team_viewers_can_read_but_not_change_jobs_in_their_namespace(kube, settings, evidence):
    """The teams' own bindings, not only the roles: every subject a team namespace binds to the viewer role
    (ClusterRole mpijob-viewer) may list MPIJobs there but not create, delete or patch them, create pods, exec
    into them or read secrets, through any binding. Fails on a cluster where a team's viewer is also bound to
    a broader role (e.g. the built-in edit), naming the bindings that grant it."""
    evidence.at_most("objects", "SubjectAccessReviews of the teams' RoleBindings")
    rbac = client.RbacAuthorizationV1Api(kube.api_client)
    wrong, viewers_seen = [], 0
    for team in settings.teams:
        ns = team.namespace
        bindings = rbac.list_namespaced_role_binding(ns).items
        viewers = [s for b in bindings if b.role_ref.kind == "ClusterRole" and b.role_ref.name == VIEWER_ROLE
                   for s in b.subjects or [] if s.kind in ("User", "Group")]
        for subject in viewers:
            viewers_seen += 1
            user, groups = _subject_groups(subject)
            assert _allowed(kube, user, ns, "list", "mpijobs", "kubeflow.org", groups=groups), \
                f"team {team.name}'s viewer {subject.kind} {subject.name} cannot list MPIJobs in {ns}"
            granted = [f"{verb} {resource}{'/' + sub if sub else ''}" for verb, group, resource, sub in VIEWER_MUST_NOT
                       if _allowed(kube, user, ns, verb, resource, group, sub, groups=groups)]
            if granted:
                through = [f"{b.metadata.name} -> {b.role_ref.kind} {b.role_ref.name}" for b in bindings
                           if any(s.kind == subject.kind and s.name == subject.name for s in b.subjects or [])
                           and b.role_ref.name != VIEWER_ROLE]
                wrong.append(f"{subject.kind} {subject.name} in {ns} may {', '.join(granted)} (RoleBindings naming "
                             f"it besides {VIEWER_ROLE}: {', '.join(through) or 'none: a ClusterRoleBinding?'})")
    if not viewers_seen:
        evidence.partial(f"no team namespace binds anyone to {VIEWER_ROLE}: the teams' viewers were not checked")
    assert not wrong, ("team viewers may change jobs: " + "; ".join(wrong)
                       + ". Viewers must only read: remove the extra bindings (the tenancy role binds viewers to "
                       f"{VIEWER_ROLE} only)")


TEAM_ROLES = ("mpijob-admin", "mpijob-user", "mpijob-viewer")  # the ClusterRoles the tenancy role binds teams to
# What a team's members may not do in another team's namespace: (verb, API group, resource, subresource).
OTHER_TEAM_MUST_NOT = (("get", "kubeflow.org", "mpijobs", ""), ("list", "kubeflow.org", "mpijobs", ""),
                       ("create", "kubeflow.org", "mpijobs", ""), ("delete", "kubeflow.org", "mpijobs", ""),
                       ("get", "", "pods", "log"))


@pytest.mark.requirement("ISO-01")
def test_team_members_cannot_reach_another_teams_jobs(kube, settings, evidence):
    """The teams' own subjects, across teams: whoever a team namespace binds to a team role (mpijob-admin,
    -user, -viewer) may not read, create or delete MPIJobs, or read pod logs, in another team's namespace,
    unless that namespace binds them to a team role too. Fails on a cluster where a binding in one team's
    namespace (or a ClusterRoleBinding) lets another team's members in, naming the bindings there."""
    evidence.at_most("objects", "SubjectAccessReviews of the teams' RoleBindings")
    rbac = client.RbacAuthorizationV1Api(kube.api_client)
    bindings = {team.namespace: rbac.list_namespaced_role_binding(team.namespace).items for team in settings.teams}
    members = {ns: {(s.kind, s.name) for b in found
                    if b.role_ref.kind == "ClusterRole" and b.role_ref.name in TEAM_ROLES
                    for s in b.subjects or [] if s.kind in ("User", "Group")}
               for ns, found in bindings.items()}
    wrong, checked = [], 0
    for ns, subjects in members.items():
        for other in (o for o in members if o != ns):
            for kind, name in sorted(subjects - members[other]):
                checked += 1
                user, groups = _subject_groups(client.RbacV1Subject(kind=kind, name=name))
                granted = [f"{verb} {resource}{'/' + sub if sub else ''}"
                           for verb, group, resource, sub in OTHER_TEAM_MUST_NOT
                           if _allowed(kube, user, other, verb, resource, group, sub, groups=groups)]
                if granted:
                    through = [f"{b.metadata.name} -> {b.role_ref.kind} {b.role_ref.name}" for b in bindings[other]
                               if any(s.kind == kind and s.name == name for s in b.subjects or [])]
                    wrong.append(f"{kind} {name} of {ns} may {', '.join(granted)} in {other} (RoleBindings there "
                                 f"naming it: {', '.join(through) or 'none: a ClusterRoleBinding?'})")
    if not checked:
        evidence.partial("fewer than two team namespaces bind anyone to a team role: access across teams was "
                         "not checked")
    assert not wrong, ("a team's members reach another team's jobs: " + "; ".join(wrong)
                       + ". Bind each team's members in its own namespace only (the tenancy role does)")


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
def test_team_network_policies_deny_other_namespaces_and_allow_the_job(kube, run, settings, mpijob_spec, evidence):
    """The team namespace's NetworkPolicies, laid onto a running MPIJob: every job pod is selected by
    a policy, no rule admits other namespaces, and workers admit the launcher (SSH) and each other.
    (Objects only here; the cluster profile proves enforcement with a probe pod.)"""
    evidence.at_most("objects", "the policies exist and select the job's pods; no traffic was tried")
    net = client.NetworkingV1Api(kube.api_client)
    ns = _namespace_with_team_policies(kube, run, settings)
    spec = mpijob_spec("np", ns, workers=2, launcher_annotations={jobs.COMPLETE_AFTER: "60s"})
    submit_job(kube, spec)
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
    assert ssh_from_launcher, (f"no NetworkPolicy of team namespace {settings.teams[0].namespace} admits the launcher "
                               f"to the workers' SSH port (TCP {PROBE_PORT}): mpirun cannot start on the workers; "
                               "allow it (the mpi-tenant chart's networkPolicy.mpiJob.launcherToWorkerPorts)")


def _launcher_phase(kube, ns: str, job: str) -> tuple[str, str]:
    """The launcher pod's phase (Pending before the operator creates it) and its log."""
    pods = kube.core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}={job},{ROLE_LABEL}=launcher").items
    if not pods or pods[0].status.phase == "Pending":
        return "Pending", ""
    return pods[0].status.phase, kube.core.read_namespaced_pod_log(pods[0].metadata.name, ns)


def _wait_ranks_report(kube, ns: str, job: str, workers: set[str], timeout: float) -> None:
    """Wait until the launcher's log has a "rank on <worker>" line from every worker: mpirun reached
    them over SSH, its daemons called back, and the ranks' output came back."""
    until, timeout = kube.deadline(timeout), kube.waited(timeout)
    while True:
        phase, log = _launcher_phase(kube, ns, job)
        if all(f"rank on {w}" in log for w in workers):
            return
        if phase not in ("Pending", "Running") or time.monotonic() > until:
            tail = "\n".join(log.splitlines()[-15:])
            pytest.fail(f"under the team's NetworkPolicies the MPIJob's ranks did not all start within {timeout:.0f}s "
                        f"(launcher {phase}): the policies block the job's own traffic? Its log ends:"
                        f"\n{tail}")
        time.sleep(1)


PROBE_PORT = 2222  # the workers' sshd
PROBE_FOR_S = 10
# A deleted policy leaves the node's firewall at the network plugin's next sync: seconds.
UNGUARDED_WITHIN_S = 60


def _attempt(ip: str) -> str:
    """Shell: one connection attempt to ip:PROBE_PORT, true if it connected within a second."""
    return f"timeout 1 bash -c '</dev/tcp/{ip}/{PROBE_PORT}' 2>/dev/null"


def _until_refused(ip: str) -> str:
    """Shell: attempts every half second until one is refused (then goes on to what follows), printing OPEN
    and exiting if none is within SETTLE_WITHIN_S."""
    tries = SETTLE_WITHIN_S * 2
    return (f"for i in $(seq {tries}); do {_attempt(ip)} || break; [ $i = {tries} ] && {{ echo OPEN; exit 0; }}; "
            "sleep 0.5; done;")


def _start_probe(kube, ns: str, name: str, ip: str, image: str, labels: dict[str, str], placed: Placement,
                 within: float = PROBE_FOR_S, settle: bool = False) -> Callable[[], str]:
    """Starts a pod that tries to connect to ip:PROBE_PORT for up to `within` seconds and prints OPEN as
    soon as one connection succeeds, else CLOSED; returns a function that waits for it and returns that
    word. (A network plugin programs a new pod's policy rules a moment after the pod starts, so one early
    attempt could be refused although the pod is admitted.) With `settle`, the target is a new pod whose own
    rules may come late too (kube-router programs them at its next sync, after the pod is Running): the probe
    first waits up to SETTLE_WITHIN_S for one refused attempt, printing OPEN if none is; then every attempt of
    its `within` seconds must be refused."""
    tries = int(within / 0.5)
    script = f"for i in $(seq {tries}); do if {_attempt(ip)}; then echo OPEN; exit 0; fi; sleep 0.5; done; echo CLOSED"
    if settle:
        script = f"{_until_refused(ip)} {script}"
    pod_security = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    container_security = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    kube.core.create_namespaced_pod(ns, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
        "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False, "securityContext": pod_security,
                 **pod_spec(placed),
                 "containers": [{"name": "probe", "image": image, "command": ["bash", "-c", script],
                                 "securityContext": container_security,
                                 "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}]}})

    def result() -> str:
        wait_pods(kube, ns, f"mpiplat.io/probe={labels['mpiplat.io/probe']}",
                  lambda pods: bool(pods) and pods[0].status.phase in ("Succeeded", "Failed"), timeout=180)
        return kube.core.read_namespaced_pod_log(name, ns).strip()
    return result


SETTLE_WITHIN_S = 30
_LISTENER = "import socket\ns=socket.socket();s.bind(('',2222));s.listen(8)\nwhile 1:s.accept()[0].close()"


def _wait_until_enforced(kube, run, ns: str, image: str, placed: Placement) -> None:
    """A team's policies are in force long before its jobs start; these copies were made a moment ago, and a
    network plugin programs new policies at its next sync (kube-router: seconds, more under load). A job whose
    pods start while their rules change can have mpirun's first connections dropped. So wait until the
    policies hold: a listener pod in `ns` refuses a pod of another namespace (SETTLE_WITHIN_S at most)."""
    kube.core.create_namespaced_pod(ns, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "settle-target", "labels": {"mpiplat.io/probe": "target"}},
        "spec": {"automountServiceAccountToken": False, **pod_spec(placed),
                 "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                 "containers": [{"name": "listen", "image": image, "command": ["python3", "-c", _LISTENER],
                                 "readinessProbe": {"tcpSocket": {"port": PROBE_PORT}, "periodSeconds": 1},
                                 "securityContext": {"allowPrivilegeEscalation": False,
                                                     "capabilities": {"drop": ["ALL"]}},
                                 "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}]}})
    target = wait_pods(kube, ns, "mpiplat.io/probe=target", all_running(1), timeout=120)[0]
    script = f"{_until_refused(target.status.pod_ip)} echo CLOSED"
    outsider = run.namespace()
    kube.core.create_namespaced_pod(outsider, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "settle-probe", "labels": {"mpiplat.io/probe": "settle"}},
        "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False, **pod_spec(placed),
                 "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                 "containers": [{"name": "probe", "image": image, "command": ["bash", "-c", script],
                                 "securityContext": {"allowPrivilegeEscalation": False,
                                                     "capabilities": {"drop": ["ALL"]}},
                                 "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}]}})
    wait_pods(kube, outsider, "mpiplat.io/probe=settle",
              lambda pods: bool(pods) and pods[0].status.phase in ("Succeeded", "Failed"), timeout=180)
    said = kube.core.read_namespaced_pod_log("settle-probe", outsider).strip()
    kube.core.delete_namespaced_pod("settle-target", ns)
    if said != "CLOSED":
        pytest.fail(f"namespace {ns}'s copies of the team's NetworkPolicies are not enforced {SETTLE_WITHIN_S}s "
                    f"after their creation: a pod of namespace {outsider} still reaches a pod there ({said}); "
                    "does the cluster's CNI support NetworkPolicies?")


@pytest.mark.requirement("ISO-03", needs=["pod_network"])
def test_network_policies_are_enforced_for_a_running_job(kube, run, settings, place, mpijob_spec):
    """Real traffic under the team's policies: the job's own MPI traffic flows (mpirun starts its daemons
    on both workers and the job keeps running); a probe pod in another namespace cannot reach a worker's
    SSH port, while a pod inside the job's namespace with the launcher's role can. With the policies
    removed, the same outside probe connects: the probe can tell. Fails on a cluster whose network
    plugin ignores NetworkPolicies, or whose policies block the job's own traffic."""
    ns = _namespace_with_team_policies(kube, run, settings)
    image = settings.images["OpenMPI"]
    _wait_until_enforced(kube, run, ns, image, place(real=True))
    spec = mpijob_spec("np", ns, real=True, workers=2, image=image,
                       command=["sh", "-c", "echo rank on $(hostname); exec sleep 600"])
    submit_job(kube, spec)
    pods = wait_pods(kube, ns, f"{JOB_LABEL}=np,{ROLE_LABEL}=worker", all_running(2), timeout=300)
    ip = pods[0].status.pod_ip
    _wait_ranks_report(kube, ns, "np", {p.metadata.name for p in pods}, timeout=jobs.LAUNCHER_SSH_WAIT_S + 60)
    outsider_ns = run.namespace()
    # Both probes at once: the outside one takes its whole PROBE_FOR_S when the policies hold.
    probes = [_start_probe(kube, ns, "probe-inside", ip, image,
                           {"mpiplat.io/probe": "inside", JOB_LABEL: "np", ROLE_LABEL: "launcher"}, place(real=True)),
              _start_probe(kube, outsider_ns, "probe-outside", ip, image, {"mpiplat.io/probe": "outside"},
                           place(real=True), settle=True)]
    inside, outside = (probe() for probe in probes)
    assert inside == "OPEN", f"a launcher-role pod in the job's namespace could not reach {ip}:{PROBE_PORT}: {inside}"
    assert outside == "CLOSED", (f"a pod in namespace {outsider_ns} reached worker {ip}:{PROBE_PORT}: the "
                                 f"NetworkPolicies exist but are not enforced on the job's worker {SETTLE_WITHIN_S}s "
                                 "after it started (does the cluster's CNI support them?)")
    phase, _ = _launcher_phase(kube, ns, "np")
    assert phase == "Running", f"the job's launcher is {phase}: a worker is gone, so CLOSED proves nothing"
    # The probe can tell: with the team's policies removed, the same outsider connects.
    net = client.NetworkingV1Api(kube.api_client)
    for pol in net.list_namespaced_network_policy(ns).items:
        net.delete_namespaced_network_policy(pol.metadata.name, ns)
    unguarded = _start_probe(kube, outsider_ns, "probe-unguarded", ip, image, {"mpiplat.io/probe": "unguarded"},
                             place(real=True), within=UNGUARDED_WITHIN_S)()
    assert unguarded == "OPEN", (f"with the policies removed, a pod in namespace {outsider_ns} still could not "
                                 f"reach worker {ip}:{PROBE_PORT} ({unguarded}): the probe cannot tell enforcement "
                                 "from a broken pod network")


PSA_ENFORCE = "pod-security.kubernetes.io/enforce"


@pytest.mark.requirement("ISO-05")
@pytest.mark.read_only
def test_team_namespaces_enforce_pod_security_restricted(kube, settings):
    """Each configured team's namespace enforces Pod Security `restricted` (its label
    pod-security.kubernetes.io/enforce; the mpi-tenant chart's default), and the cluster really enforces it
    there: a server-side dry run of a privileged pod is refused by Pod Security. Fails on a team namespace that
    enforces less (baseline, privileged, no label), or a cluster that does not enforce Pod Security."""
    wrong = []
    for team in settings.teams:
        level = (kube.core.read_namespace(team.namespace).metadata.labels or {}).get(PSA_ENFORCE)
        if level != "restricted":
            wrong.append(f"team {team.name}'s namespace {team.namespace} enforces Pod Security "
                         f"{level or 'nothing (no ' + PSA_ENFORCE + ' label)'}, not restricted: set the tenancy "
                         "role's pod security level (mpi-tenant chart namespace.podSecurity.enforce) to restricted")
            continue
        refusal = _dry_run_object(kube, team.namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mpiplat-iso05-privileged"},
            "spec": {"containers": [{"name": "probe", "image": settings.images["OpenMPI"],
                                     "securityContext": {"privileged": True}}]}})
        if "PodSecurity" not in refusal:
            wrong.append(f"team {team.name}'s namespace {team.namespace} is labelled restricted, but a privileged pod "
                         f"was {'refused for another reason: ' + refusal if refusal else 'admitted'} (a dry run): "
                         "does the API server run the PodSecurity admission plugin?")
    assert not wrong, "; ".join(wrong)


@pytest.mark.requirement("ISO-06")
@pytest.mark.read_only
def test_each_team_can_run_a_job_in_its_own_namespace(kube, settings, mpijob_spec, evidence):
    """The suite runs its jobs in namespaces of its own; users run theirs in their team's. For each configured
    team, in the team's own namespace: a 2-worker MPIJob on the team's queue and one of its worker pods must be
    admitted, with every other object mpi-operator makes for it (its launcher pod and Job, Service, ConfigMap and SSH
    Secret; server-side dry runs: quota, LimitRange, Pod Security, admission policies and webhooks answer, nothing
    is created); the team's LocalQueue must not be held and point at a ClusterQueue that is Active, not held, selects
    the team's namespace and whose nominal quota holds the job's CPU, memory and GPUs. Fails naming
    the team and what blocks it, e.g. a ResourceQuota that allows no pod or no Secret, a LimitRange whose maximum is
    below the job's request, a namespaceSelector that does not select the team."""
    evidence.at_most("objects", "server-side dry runs and the queues' objects in each team's namespace")
    wrong = []
    for team in settings.teams:
        ns = team.namespace
        manifest = jobs.mpijob(mpijob_spec(f"{settings.namespace_prefix}-ready", ns, workers=2, queue=team.queue))
        try:
            kube.dry_run_create(f"/apis/{MPIJOB.group}/{MPIJOB.version}/namespaces/{ns}/{MPIJOB.plural}", manifest)
        except ApiException as err:
            if err.status not in (400, 403, 422):
                raise
            wrong.append(f"team {team.name}: an MPIJob is refused in its namespace {ns}: {api_message(err)}")
            continue
        for what, obj in _operator_objects(manifest):
            refusal = _dry_run_object(kube, ns, obj)
            if refusal:
                wrong.append(f"team {team.name}: {what} of its MPIJob is refused in its namespace {ns}: {refusal}")
        if team.queue:
            wrong += _queue_problems(kube, team, _requests(manifest, settings.gpu_resource))
    assert not wrong, "; ".join(wrong)


def _operator_objects(manifest: dict) -> list[tuple[str, dict]]:
    """What mpi-operator creates for an MPIJob (the objects a ResourceQuota, LimitRange or policy may refuse), as
    (what, object) with the operator's names."""
    name = manifest["metadata"]["name"]
    out = [(f"a {replica.lower()} pod", replica_pod(manifest, replica)) for replica in ("Worker", "Launcher")]
    launcher = out[-1][1]
    out += [("its launcher Job", {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"{name}-launcher"},
                                  "spec": {"template": {"metadata": {"labels": launcher["metadata"].get("labels", {})},
                                                        "spec": {**launcher["spec"], "restartPolicy": "Never"}}}}),
            ("its workers' Service", {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                                      "spec": {"clusterIP": "None", "selector": {JOB_LABEL: name}}}),
            ("its hostfile ConfigMap", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-config"},
                                        "data": {"hostfile": ""}}),
            ("its SSH Secret", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{name}-ssh"},
                                "type": "kubernetes.io/ssh-auth", "stringData": {"ssh-privatekey": "x"}})]
    return out


_PATHS = {"Pod": "pods", "Job": "jobs", "Service": "services", "ConfigMap": "configmaps", "Secret": "secrets"}


def _dry_run_object(kube, ns: str, obj: dict) -> str:
    """The API server's refusal of `obj` in `ns` (a server-side dry run); "" if admitted."""
    group = "/apis/batch/v1" if obj["kind"] == "Job" else "/api/v1"
    try:
        kube.dry_run_create(f"{group}/namespaces/{ns}/{_PATHS[obj['kind']]}", obj)
    except ApiException as err:
        if err.status in (400, 403, 422):
            return api_message(err)
        raise
    return ""


def _requests(manifest: dict, gpu: str) -> dict[str, float]:
    """What the job asks of its queue, per resource (cpu, memory, GPUs): its pods' requests (else limits)."""
    total = {"cpu": 0.0, "memory": 0.0, gpu: 0.0}
    for spec in manifest["spec"]["mpiReplicaSpecs"].values():
        for c in spec["template"]["spec"].get("containers", []):
            res = c.get("resources") or {}
            for key in total:
                value = (res.get("requests") or {}).get(key, (res.get("limits") or {}).get(key))
                if value is not None:
                    total[key] += float(parse_quantity(value)) * int(spec.get("replicas", 1))
    return total


def _queue_problems(kube, team, needs: dict[str, float]) -> list[str]:
    """Why the team's LocalQueue admits no job of `needs`: missing or held, or its ClusterQueue missing, held,
    inactive, not selecting the team's namespace, or with less nominal quota than the job needs."""
    lq = kube.find(LOCALQUEUE, team.queue, team.namespace)
    if lq is None:
        return [f"team {team.name}: its LocalQueue {team.queue} does not exist in {team.namespace}"]
    wrong = []
    if why := queues.held(lq):
        wrong.append(f"team {team.name}: its LocalQueue {team.queue} {why}: it admits no job")
    name = lq["spec"].get("clusterQueue", "")
    cq = kube.find(CLUSTERQUEUE, name)
    if cq is None:
        return wrong + [f"team {team.name}: its LocalQueue {team.queue} points at ClusterQueue {name!r}, which does "
                        "not exist"]
    found = queues.admits_nothing(cq)
    if found:
        wrong.append(f"team {team.name}: its ClusterQueue {name} {found[1]}: it admits no job")
    selector = cq["spec"].get("namespaceSelector")
    labels = kube.core.read_namespace(team.namespace).metadata.labels or {}
    if selector is None or not label_selects(selector, labels):  # Kueue: no selector selects no namespace
        wrong.append(f"team {team.name}: its ClusterQueue {name}'s namespaceSelector {json.dumps(selector)} does not "
                     f"select its namespace {team.namespace} (labels {json.dumps(labels)}): every job waits forever")
    for resource, need in needs.items():
        nominal = _nominal_quota(cq, resource)
        if need and nominal < need:
            wrong.append(f"team {team.name}: its ClusterQueue {name}'s nominal quota is {nominal:g} {resource}, a "
                         f"2-worker job needs {need:g}: the team cannot count on running one (only on borrowing)")
    return wrong


def _nominal_quota(cq: dict, resource: str) -> float:
    """What ClusterQueue `cq` holds of `resource` for its own jobs (its flavors' nominal quotas; borrowing from its
    cohort depends on the others' idle quota); 0 where no resource group covers it."""
    return sum(float(parse_quantity(r.get("nominalQuota", "0")))
               for group in (cq.get("spec") or {}).get("resourceGroups") or []
               if resource in group.get("coveredResources", [])
               for flavor in group.get("flavors") or [] for r in flavor.get("resources") or []
               if r.get("name") == resource)


@pytest.mark.requirement("ISO-05", needs=["pod_network"])
@pytest.mark.parametrize("implementation", jobs.IMPLEMENTATIONS)
def test_mpijob_runs_as_an_arbitrary_uid_with_group_0_under_restricted(kube, run, mpijob_spec, implementation):
    """A real MPIJob of 2 workers, as the job builder writes it (no runAsUser), in a namespace that enforces
    Pod Security `restricted`, runs as the UID the cluster assigns (the first of the namespace's
    openshift.io/sa.scc.uid-range, as OpenShift's restricted-v2 assigns it, in each container's securityContext)
    with group 0: whoami.py's 2 ranks, one on each worker, report that UID and gid 0. Where the cluster assigns
    none (vanilla Kubernetes), the job asks for a random high UID that no image knows. Fails on an MPI image whose
    ssh, sshd or MPI launcher needs a passwd entry or a fixed UID, or that needs a capability or privilege
    escalation (then Pod Security refuses its pods); on a cluster whose pods carry openshift.io/scc, when a pod
    of the job was admitted under an SCC other than restricted-v2 or restricted (an extra grant)."""
    ns = run.namespace()
    level = (kube.core.read_namespace(ns).metadata.labels or {}).get(PSA_ENFORCE)
    assert level == "restricted", f"the test namespace {ns} enforces Pod Security {level}, not restricted"
    assigned = identity.uid_range(kube, ns)
    uid = assigned[0] if assigned else identity.arbitrary_uid()
    name = "arbitrary-uid"
    spec = mpijob_spec(name, ns, real=True, implementation=implementation, workers=2,
                       run_as_user=None if assigned else uid)
    found, took = identity.run_whoami_job(kube, spec, uid)
    assert found["gids"] == [0, 0], f"the ranks ran with groups {found['gids']}, not 0: {found}"
    pods = kube.core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}={name}").items
    identity.no_extra_grant(ns, name, pods)  # the launcher's too
    if assigned:  # the cluster's UID, written into each container as OpenShift's SCC admission writes it
        other = [f"{p.metadata.name}/{c.name} runAsUser {c.security_context.run_as_user}" for p in pods
                 for c in p.spec.containers if c.security_context and c.security_context.run_as_user not in (None, uid)]
        assert not other, f"containers run as another UID than the namespace's {uid}: {', '.join(other)}"
    groups = sorted({f"fsGroup {sc.fs_group}, supplemental groups {sc.supplemental_groups or []}"
                     for p in pods if (sc := p.spec.security_context)} or {"no fsGroup or supplemental groups"})
    run.record("ISO-05", f"{implementation}: submit -> Succeeded (2 workers, "
               f"{'the namespace' if assigned else 'a random'} uid {uid}, gid 0; {'; '.join(groups)})",
               took["to_succeeded"], "s")
