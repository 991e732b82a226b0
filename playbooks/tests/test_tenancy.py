"""Tenancy role and tenants.yml on the local cluster: two teams get ClusterQueues in one cohort, a
namespace each with RoleBindings, quota, LocalQueue and NetworkPolicies; the RBAC matrix holds (checked
with SubjectAccessReviews); the NetworkPolicies select exactly the pods of a running MPIJob they are
meant for; one team can be removed and re-added without touching the other; state absent removes it all.

Everything here is named tn-* (teams, namespaces, flavor) except the ClusterRoles mpijob-admin/-user/-viewer,
which the role always creates under those names (state absent keeps them while other teams' releases are left,
as site.yml's teams are in `make test`).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from mpiplat import jobs
from mpiplat.conformance.placement import placement, pod_spec
from mpiplat.conformance.watch import condition_times
from mpiplat.diagnose import diagnose
from mpiplat.kube import CLUSTERQUEUE, LOCALQUEUE, MPIJOB, RESOURCEFLAVOR, TOPOLOGY, has_condition, label_selector

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
ROLE_PLAY = "playbooks/tests/tenancy_role.yml"
FLAVOR, TAS_FLAVOR, TOPOLOGY_NAME = "tn-h100", "tn-h100-racks", "tn-racks"
TOPOLOGY_LEVELS = ["mpiplat.io/rack", "kubernetes.io/hostname"]
ALPHA, BETA = "tn-alpha", "tn-beta"
CLUSTER_ROLES = ("mpijob-admin", "mpijob-user", "mpijob-viewer")
RELEASE_NS = "mpiplat-tenants"

# The test's own cohort: in site.yml's (mpiplat) its teams would lend to the suite's teams, which run beside it.
COHORT = "tn-pool"
TEAMS = {
    # The test's own flavors and Topology (not the inventory's, which site.yml's teams use).
    "tenancy_flavors": [{"name": FLAVOR, "node_labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
                        {"name": TAS_FLAVOR, "node_labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                         "topology": TOPOLOGY_NAME}],
    "tenancy_topologies": [{"name": TOPOLOGY_NAME, "levels": TOPOLOGY_LEVELS}],
    "mpiplat_teams": [
        {"name": ALPHA, "gpus": 8, "cpu": 64, "memory": "512Gi", "lending_limit_gpus": 4, "cohort": COHORT,
         "admins": [{"kind": "User", "name": "tn-alpha-lead"}],
         "users": [{"kind": "User", "name": "tn-alpha-dev"}],
         "viewers": [{"kind": "Group", "name": "tn-alpha-auditors"}]},
        {"name": BETA, "gpus": 4, "borrowing_limit_gpus": 2, "cohort": COHORT,
         "preemption": {"withinClusterQueue": "Never"},
         "admins": [{"kind": "User", "name": "tn-beta-lead"}],
         "users": [{"kind": "Group", "name": "tn-beta-devs"}],
         "viewers": [{"kind": "User", "name": "tn-beta-auditor"}]},
    ],
}

pytestmark = pytest.mark.cluster


def _run(env: dict, vars_file: Path, *args: str, playbook: str = ROLE_PLAY) -> tuple[int, str, int | None]:
    """ansible-playbook on the local inventory: (rc, output, changed count from the recap)."""
    proc = subprocess.run([PLAYBOOK, "-i", "inventories/local/hosts.yml", playbook, "-e", f"@{vars_file}", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    recap = re.search(r"localhost\s+: ok=\d+\s+changed=(\d+)", out)
    return proc.returncode, out, int(recap.group(1)) if recap else None


def _gone(read, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            read()
        except ApiException as err:
            if err.status == 404:
                return True
            raise
        time.sleep(1)
    return False


def _releases(kube) -> set[str]:
    try:
        secrets = kube.core.list_namespaced_secret(RELEASE_NS, label_selector="owner=helm,status=deployed").items
    except ApiException as err:
        if err.status == 404:
            return set()
        raise
    # Only this test's teams: site.yml may have installed the inventory's teams in the same namespace.
    return {s.metadata.labels["name"] for s in secrets} & {f"tenant-{ALPHA}", f"tenant-{BETA}"}


@pytest.fixture(scope="module")
def tenancy(kube, ansible_env, tmp_path_factory):
    """The role applied for both teams (twice: the second run must change nothing); removed at the end."""
    vars_file = tmp_path_factory.mktemp("tenancy") / "teams.yml"
    vars_file.write_text(yaml.safe_dump(TEAMS))
    env = ansible_env
    try:
        rc, out, _ = _run(env, vars_file)
        assert rc == 0, out[-4000:]
        rc, out, changed = _run(env, vars_file)
        assert rc == 0 and changed == 0, out[-4000:]
        rc, out, changed = _run(env, vars_file, "--check")
        assert rc == 0 and changed == 0, out[-4000:]
        yield env, vars_file
    finally:
        _run(env, vars_file, "-e", "state=absent")


# ---- ClusterQueues, LocalQueues, quotas


def test_cluster_queues_are_active_in_one_cohort_with_the_team_quotas(kube, tenancy):
    alpha, beta = kube.get(CLUSTERQUEUE, ALPHA), kube.get(CLUSTERQUEUE, BETA)
    for cq, ns in ((alpha, ALPHA), (beta, BETA)):
        assert has_condition(cq, "Active"), cq.get("status")
        assert cq["spec"]["cohortName"] == COHORT
        assert cq["spec"]["namespaceSelector"] == {"matchLabels": {"mpiplat.io/team": ns}}
        assert cq["spec"]["resourceGroups"][0]["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
        assert [f["name"] for f in cq["spec"]["resourceGroups"][0]["flavors"]] == [FLAVOR]

    def quotas(cq):
        return {r["name"]: {k: str(v) for k, v in r.items() if k != "name"}
                for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]}

    assert quotas(alpha) == {"cpu": {"nominalQuota": "64"}, "memory": {"nominalQuota": "512Gi"},
                             "nvidia.com/gpu": {"nominalQuota": "8", "lendingLimit": "4"}}
    assert quotas(beta) == {"cpu": {"nominalQuota": "32"}, "memory": {"nominalQuota": "256Gi"},
                            "nvidia.com/gpu": {"nominalQuota": "4", "borrowingLimit": "2"}}
    assert alpha["spec"]["preemption"]["reclaimWithinCohort"] == "Any"
    assert alpha["spec"]["preemption"]["withinClusterQueue"] == "LowerPriority"
    assert beta["spec"]["preemption"]["withinClusterQueue"] == "Never"
    assert str(alpha["spec"]["fairSharing"]["weight"]) == "1"
    flavor = kube.get(RESOURCEFLAVOR, FLAVOR)
    assert flavor["spec"]["nodeLabels"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert kube.get(RESOURCEFLAVOR, TAS_FLAVOR)["spec"]["topologyName"] == TOPOLOGY_NAME
    levels = kube.get(TOPOLOGY, TOPOLOGY_NAME)["spec"]["levels"]
    assert [lv["nodeLabel"] for lv in levels] == TOPOLOGY_LEVELS


def test_each_team_namespace_has_a_local_queue_to_its_cluster_queue_and_a_gpu_quota(kube, tenancy):
    # ResourceQuota GPUs: nominal plus what the team can borrow in the cohort (alpha: 8 + beta's 4;
    # beta: 4 + min(its borrowing limit 2, alpha's lending limit 4)).
    for team, gpus in ((ALPHA, "12"), (BETA, "6")):
        lq = kube.get(LOCALQUEUE, f"{team}-queue", team)
        assert lq["spec"]["clusterQueue"] == team
        assert has_condition(lq, "Active"), lq.get("status")
        quota = kube.core.read_namespaced_resource_quota(f"{team}-quota", team)
        assert quota.spec.hard["requests.nvidia.com/gpu"] == gpus
        assert "requests.cpu" not in quota.spec.hard  # cpu and memory are the ClusterQueue's to admit
    assert _releases(kube) >= {f"tenant-{ALPHA}", f"tenant-{BETA}"}


# ---- RBAC

VERBS = [("create", "mpijobs", ""), ("get", "mpijobs", ""), ("list", "mpijobs", ""), ("delete", "mpijobs", ""),
         ("get", "pods", "log")]
# Team alpha's subjects, as bound by the chart's RoleBindings.
SUBJECTS = {"admin": {"user": "tn-alpha-lead"},
            "user": {"user": "tn-alpha-dev"},
            "viewer": {"user": "tn-someone", "groups": ["tn-alpha-auditors"]}}
OWN = {"admin": {"create mpijobs": True, "get mpijobs": True, "list mpijobs": True, "delete mpijobs": True,
                 "get pods/log": True},
       "user": {"create mpijobs": True, "get mpijobs": True, "list mpijobs": True, "delete mpijobs": True,
                "get pods/log": True},
       "viewer": {"create mpijobs": False, "get mpijobs": True, "list mpijobs": True, "delete mpijobs": False,
                  "get pods/log": True}}


def _allowed(kube, subject: dict, namespace: str, verb: str, resource: str, subresource: str) -> bool:
    group = "kubeflow.org" if resource == "mpijobs" else ""
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=subject["user"], groups=subject.get("groups"),
        resource_attributes=client.V1ResourceAttributes(namespace=namespace, verb=verb, group=group,
                                                        resource=resource, subresource=subresource or None)))
    return client.AuthorizationV1Api(kube.api_client).create_subject_access_review(review).status.allowed


def test_rbac_matrix_own_namespace_versus_the_other_team(kube, tenancy):
    expected = {(role, where, f"{verb} {res}{'/' + sub if sub else ''}"):
                (OWN[role][f"{verb} {res}{'/' + sub if sub else ''}"] if where == "own" else False)
                for role in SUBJECTS for where in ("own", "other") for verb, res, sub in VERBS}
    actual = {(role, where, f"{verb} {res}{'/' + sub if sub else ''}"):
              _allowed(kube, subject, ALPHA if where == "own" else BETA, verb, res, sub)
              for role, subject in SUBJECTS.items() for where in ("own", "other") for verb, res, sub in VERBS}
    assert actual == expected


def test_users_cannot_touch_queues_or_quotas_and_beta_subjects_only_reach_beta(kube, tenancy):
    dev = SUBJECTS["user"]
    assert not _allowed(kube, dev, ALPHA, "patch", "resourcequotas", "")
    assert not _allowed(kube, dev, ALPHA, "update", "mpijobs", "")  # users create and delete, admins edit
    assert _allowed(kube, SUBJECTS["admin"], ALPHA, "update", "mpijobs", "")
    assert _allowed(kube, {"user": "x", "groups": ["tn-beta-devs"]}, BETA, "create", "mpijobs", "")
    assert not _allowed(kube, {"user": "x", "groups": ["tn-beta-devs"]}, ALPHA, "get", "mpijobs", "")
    assert not _allowed(kube, {"user": "tn-beta-auditor"}, ALPHA, "get", "pods", "log")


def test_cluster_roles_aggregate_into_admin_edit_and_view(kube, tenancy):
    rbac = client.RbacAuthorizationV1Api(kube.api_client)
    for builtin, ours in (("admin", "mpijob-admin"), ("edit", "mpijob-user"), ("view", "mpijob-viewer")):
        labels = rbac.read_cluster_role(ours).metadata.labels
        assert labels[f"rbac.authorization.k8s.io/aggregate-to-{builtin}"] == "true"
        rules = rbac.read_cluster_role(builtin).rules or []
        assert any("mpijobs" in (r.resources or []) and "kubeflow.org" in (r.api_groups or []) for r in rules), builtin


# ---- NetworkPolicies against the pods of a running MPIJob


def _pods(kube, namespace: str, selector: dict | None) -> set[str]:
    pods = kube.core.list_namespaced_pod(namespace, label_selector=label_selector(selector)).items
    return {p.metadata.name for p in pods}


def _wait_for_pods(kube, namespace: str, want, timeout: float = 120) -> set[str]:
    """Watch the namespace's pods until want(names of running pods) holds."""
    deadline = time.monotonic() + timeout
    running: set[str] = set()
    while time.monotonic() < deadline:
        listing = kube.core.list_namespaced_pod(namespace)
        running = {p.metadata.name for p in listing.items if p.status.phase == "Running"}
        if want(running):
            return running
        w = watch.Watch()
        for _ in w.stream(kube.core.list_namespaced_pod, namespace, resource_version=listing.metadata.resource_version,
                          timeout_seconds=max(1, int(deadline - time.monotonic()))):
            w.stop()  # something changed: list again
    raise TimeoutError(f"pods in {namespace}: only {sorted(running)} running after {timeout:.0f}s")


def _mpijob_and_bystander(kube, name: str):
    """A running MPIJob (2 workers, 1 GPU each, through the team's LocalQueue) and a plain pod, both on
    the KWOK nodes (simulated: the job's GPUs, the pods' images)."""
    simulated = placement(real=False, kwok_nodes=True)
    spec = jobs.MPIJob(name=name, namespace=ALPHA, workers=2, gpus_per_worker=1, queue=f"{ALPHA}-queue",
                       launcher_annotations={jobs.COMPLETE_AFTER: "60s"}, **simulated)
    kube.create(MPIJOB, jobs.mpijob(spec))
    # The team namespace enforces Pod Security restricted and, like restricted-v2, assigns the UID: no runAsUser.
    kube.core.create_namespaced_pod(ALPHA, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tn-bystander", "labels": {"app": "notebook"}},
        "spec": {"automountServiceAccountToken": False, **pod_spec(simulated), "containers": [{
            "name": "c", "image": "busybox", "command": ["sleep", "3600"],
            "securityContext": jobs.security_context(None)}]}})


def test_network_policies_select_exactly_the_intended_pods_of_a_running_mpijob(kube, tenancy):
    name = "tn-np"
    _mpijob_and_bystander(kube, name)
    try:
        workers = {f"{name}-worker-0", f"{name}-worker-1"}
        running = _wait_for_pods(kube, ALPHA, lambda r: workers | {"tn-bystander"} <= r
                                 and any(p.startswith(f"{name}-launcher") for p in r))
        launcher = {p for p in running if p.startswith(f"{name}-launcher")}
        assert len(launcher) == 1, running
        everyone = workers | launcher | {"tn-bystander"}
        assert _pods(kube, ALPHA, None) == everyone

        # Each policy: (pods it selects, pods its ingress rules admit, ports)
        expected = {
            f"{ALPHA}-deny-ingress": (everyone, None, None),
            f"{ALPHA}-egress": (everyone, None, None),
            f"{ALPHA}-mpijob-launcher-to-worker": (workers, launcher, [(2222, "TCP")]),
            f"{ALPHA}-mpijob-worker-to-worker": (workers, workers, None),
            f"{ALPHA}-mpijob-worker-to-launcher": (launcher, workers, None),
            f"{ALPHA}-trainjob-pods": (set(), set(), None),
        }
        policies = client.NetworkingV1Api(kube.api_client).list_namespaced_network_policy(ALPHA).items
        assert {p.metadata.name for p in policies} == set(expected)
        actual = {}
        for pol in policies:
            spec = kube.api_client.sanitize_for_serialization(pol.spec)
            ingress = spec.get("ingress")
            peers = ports = None
            if ingress is not None:
                assert len(ingress) == 1, pol.metadata.name
                rule = ingress[0]
                assert all(set(peer) == {"podSelector"} for peer in rule["from"]), rule  # same namespace only
                peers = set().union(*(_pods(kube, ALPHA, peer["podSelector"]) for peer in rule["from"]))
                ports = [(p["port"], p["protocol"]) for p in rule["ports"]] if rule.get("ports") else None
            actual[pol.metadata.name] = (_pods(kube, ALPHA, spec["podSelector"]), peers, ports)
        assert actual == expected
        # deny-ingress admits nothing; egress is restricted for every pod.
        deny = next(p for p in policies if p.metadata.name == f"{ALPHA}-deny-ingress")
        assert deny.spec.policy_types == ["Ingress"] and not deny.spec.ingress
        egress = next(p for p in policies if p.metadata.name == f"{ALPHA}-egress")
        assert egress.spec.policy_types == ["Egress"]
    finally:
        kube.delete(MPIJOB, name, ALPHA)
        kube.core.delete_namespaced_pod("tn-bystander", ALPHA, grace_period_seconds=0)
        assert _gone(lambda: kube.core.read_namespaced_pod("tn-bystander", ALPHA))


# ---- tenants.yml


# A hand-built MPIJob as users write them from the upstream examples, but restricted: no runAsUser, the fields
# Pod Security `restricted` asks, programs in args (the image's entrypoint gives the UID a user). Real pods.
RESTRICTED_CONTAINER = {"runAsNonRoot": True, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "RuntimeDefault"}}
HAND_BUILT = f"""
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {{name: tn-anyuid, namespace: {ALPHA}}}
spec:
  slotsPerWorker: 1
  sshAuthMountPath: /home/mpiuser/.ssh
  launcherCreationPolicy: WaitForWorkersReady
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          containers:
          - name: launcher
            image: mpiplat.local/openmpi:1
            securityContext: {RESTRICTED_CONTAINER}
            args: [mpirun, -n, "2", sh, -c, 'echo "rank uid $(id -u) gid $(id -g) user $(whoami)"']
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: worker
            image: mpiplat.local/openmpi:1
            securityContext: {RESTRICTED_CONTAINER}
            args: [/usr/sbin/sshd, -De, -f, /home/mpiuser/.sshd_config]
            readinessProbe: {{tcpSocket: {{port: 2222}}}}
"""


def test_a_hand_built_mpijob_runs_in_a_team_namespace_as_its_first_uid(kube, tenancy):
    """The team namespace enforces Pod Security `restricted` and, as OpenShift's restricted-v2 (emulated by the
    local cluster), has a UID range: an MPIJob whose pods set no runAsUser runs there for real, its ranks as the
    range's first UID with group 0 and the image's user; a pod asking for uid 1000 is refused in OpenShift's words."""
    labels = kube.core.read_namespace(ALPHA).metadata.labels or {}
    assert labels.get("pod-security.kubernetes.io/enforce") == "restricted", labels
    uid_range = (kube.core.read_namespace(ALPHA).metadata.annotations or {})["openshift.io/sa.scc.uid-range"]
    first = int(uid_range.split("/")[0])
    job = yaml.safe_load(HAND_BUILT)
    kube.create(MPIJOB, job)
    try:
        seen = condition_times(kube, MPIJOB, "tn-anyuid", ALPHA, until=("Succeeded", "Failed"), timeout=300)
        assert "Succeeded" in seen, f"{seen}: {diagnose(kube, ALPHA, 'tn-anyuid')}"
        [launcher] = [p for p in kube.core.list_namespaced_pod(ALPHA, label_selector=label_selector(
            {jobs.JOB_LABEL: "tn-anyuid", jobs.ROLE_LABEL: "launcher"})).items if p.status.phase == "Succeeded"]
        said = re.findall(r"^rank uid (\d+) gid (\d+) user (\S+)$",
                          kube.core.read_namespaced_pod_log(launcher.metadata.name, ALPHA), re.MULTILINE)
        assert said == [(str(first), "0", "mpiuser")] * 2, said
    finally:
        kube.custom.delete_namespaced_custom_object(MPIJOB.group, MPIJOB.version, ALPHA, MPIJOB.plural, "tn-anyuid")
    with pytest.raises(ApiException) as refused:
        kube.dry_run_create(f"/api/v1/namespaces/{ALPHA}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "tn-uid-1000"},
            "spec": {"containers": [{"name": "c", "image": "mpiplat.local/openmpi:1",
                                     "securityContext": {**RESTRICTED_CONTAINER, "runAsUser": 1000}}]}})
    assert ".containers[0].runAsUser: Invalid value: 1000: must be in the ranges: [" in \
        json.loads(refused.value.body)["message"]


def test_tenants_playbook_removes_one_team_leaves_the_other_and_re_adds_it(kube, tenancy):
    env, vars_file = tenancy
    alpha_before = kube.get(CLUSTERQUEUE, ALPHA)
    alpha_ns_uid = kube.core.read_namespace(ALPHA).metadata.uid

    rc, out, _ = _run(env, vars_file, "-e", f"tenant={BETA}", "-e", "tenant_state=absent",
                      playbook="playbooks/tenants.yml")
    assert rc == 0, out[-4000:]
    assert _gone(lambda: kube.get(CLUSTERQUEUE, BETA))
    assert _gone(lambda: kube.core.read_namespace(BETA), timeout=120)
    assert f"tenant-{BETA}" not in _releases(kube)
    # The other team and the shared objects are untouched.
    alpha_after = kube.get(CLUSTERQUEUE, ALPHA)
    assert (alpha_after["metadata"]["uid"], alpha_after["metadata"]["generation"]) == (
        alpha_before["metadata"]["uid"], alpha_before["metadata"]["generation"])
    assert has_condition(alpha_after, "Active")
    assert kube.core.read_namespace(ALPHA).metadata.uid == alpha_ns_uid
    assert f"tenant-{ALPHA}" in _releases(kube)
    assert kube.core.list_namespaced_secret(RELEASE_NS, label_selector=f"name=tenant-{ALPHA}").items[0] \
        .metadata.labels["version"] == "1"
    rbac = client.RbacAuthorizationV1Api(kube.api_client)
    for role in CLUSTER_ROLES:
        rbac.read_cluster_role(role)
    kube.get(RESOURCEFLAVOR, FLAVOR)

    rc, out, changed = _run(env, vars_file, "-e", f"tenant={BETA}", "-e", "tenant_state=absent",
                            playbook="playbooks/tenants.yml")
    assert rc == 0 and changed == 0, out[-4000:]

    rc, out, _ = _run(env, vars_file, "-e", f"tenant={BETA}", playbook="playbooks/tenants.yml")
    assert rc == 0, out[-4000:]
    assert has_condition(kube.get(CLUSTERQUEUE, BETA), "Active")
    assert kube.get(LOCALQUEUE, f"{BETA}-queue", BETA)["spec"]["clusterQueue"] == BETA
    assert f"tenant-{BETA}" in _releases(kube)
    assert _allowed(kube, {"user": "tn-beta-lead"}, BETA, "delete", "mpijobs", "")
    rc, out, changed = _run(env, vars_file, "-e", f"tenant={BETA}", playbook="playbooks/tenants.yml")
    assert rc == 0 and changed == 0, out[-4000:]
    assert kube.get(CLUSTERQUEUE, ALPHA)["metadata"]["generation"] == alpha_before["metadata"]["generation"]


def test_a_token_automount_changed_by_hand_is_reported_by_check_and_put_back(kube, tenancy):
    """FR-024: the role owns automountServiceAccountToken of each team namespace's default ServiceAccount
    (tenancy_automount_service_account_token: false). Turned on by hand, --check reports the one change
    and makes none; a run turns it off again."""
    env, vars_file = tenancy

    def automount() -> bool | None:
        return kube.core.read_namespaced_service_account("default", ALPHA).automount_service_account_token

    assert automount() is False
    kube.core.patch_namespaced_service_account("default", ALPHA, {"automountServiceAccountToken": True})
    try:
        rc, out, changed = _run(env, vars_file, "-e", f"tenant={ALPHA}", "--check", playbook="playbooks/tenants.yml")
        assert rc == 0 and changed == 1, out[-4000:]
        assert automount() is True
        rc, out, changed = _run(env, vars_file, "-e", f"tenant={ALPHA}", playbook="playbooks/tenants.yml")
        assert rc == 0 and changed == 1, out[-4000:]
        assert automount() is False
    finally:
        kube.core.patch_namespaced_service_account("default", ALPHA, {"automountServiceAccountToken": False})


def test_tenants_playbook_refuses_a_team_that_is_not_in_mpiplat_teams(kube, tenancy):
    env, vars_file = tenancy
    rc, out, changed = _run(env, vars_file, "-e", "tenant=tn-nobody", playbook="playbooks/tenants.yml")
    assert rc != 0 and changed == 0, out[-3000:]
    assert "tn-nobody is not in mpiplat_teams ['tn-alpha', 'tn-beta']" in " ".join(out.split())
    with pytest.raises(ApiException):
        kube.get(CLUSTERQUEUE, "tn-nobody")


# ---- bad input fails in preflight, before any change

BAD = {
    "negative_gpus": ([{"name": "tn-x", "gpus": -1}], r"mpiplat_teams item tn-x: gpus=-1 \(allowed: an integer >= 0\)"),
    "lending_over_nominal": ([{"name": "tn-x", "gpus": 2, "lending_limit_gpus": 3}],
                             r"lending_limit_gpus=3 is more than gpus=2"),
    "unknown_flavor": ([{"name": "tn-x", "flavor": "a100"}],
                       r"flavor=a100 is not in tenancy_flavors \(allowed: gpu-h100, gpu-h100-racks\)"),
    "duplicate_names": ([{"name": "tn-x"}, {"name": "tn-x"}], r"duplicates \['tn-x'\]"),
    "shared_namespace": ([{"name": "tn-x"}, {"name": "tn-y", "namespace": "tn-x"}],
                         r"namespaces \['tn-x', 'tn-x'\]: duplicates \['tn-x'\]"),
    "limit_without_cohort": ([{"name": "tn-x", "cohort": "", "borrowing_limit_gpus": 1}],
                             r"borrowing_limit_gpus=1 but cohort is empty"),
    "unknown_field": ([{"name": "tn-x", "gpu": 4}], r"mpiplat_teams\.gpu\. Supported parameters include"),
    "bad_preemption": ([{"name": "tn-x", "preemption": {"reclaimWithinCohort": "Always"}}],
                       r"reclaimWithinCohort must be one of: Never, LowerPriority, Any, got: Always"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_team_input_fails_in_preflight_naming_field_value_and_allowed(case, ansible_env, tmp_path):
    teams, expect = BAD[case]
    vars_file = tmp_path / "teams.yml"
    vars_file.write_text(yaml.safe_dump({"mpiplat_teams": teams}))
    rc, out, changed = _run(ansible_env, vars_file, playbook="playbooks/preflight.yml")
    assert rc != 0 and changed == 0, out[-3000:]
    assert re.search(expect, " ".join(out.split())), out[-3000:]
    # Bad input fails before the first module runs (the helm check's stat, seconds on a loaded host).
    assert "Find the helm binary" not in out, out[-3000:]


# ---- state absent (runs last in this module)


def test_state_absent_removes_everything_the_role_created(kube, tenancy):
    env, vars_file = tenancy
    rc, out, _ = _run(env, vars_file, "-e", "state=absent")
    assert rc == 0, out[-4000:]
    for team in (ALPHA, BETA):
        assert _gone(lambda t=team: kube.get(CLUSTERQUEUE, t))
        assert _gone(lambda t=team: kube.core.read_namespace(t), timeout=120)
    assert _gone(lambda: kube.get(RESOURCEFLAVOR, FLAVOR))
    assert _gone(lambda: kube.get(RESOURCEFLAVOR, TAS_FLAVOR))
    assert _gone(lambda: kube.get(TOPOLOGY, TOPOLOGY_NAME))
    rbac = client.RbacAuthorizationV1Api(kube.api_client)
    assert not _releases(kube)
    try:
        others = kube.core.list_namespaced_secret(RELEASE_NS, label_selector="owner=helm").items
    except ApiException as err:
        assert err.status == 404
        others = []
    if others:  # other teams' releases (e.g. site.yml's) keep the shared namespace and ClusterRoles
        assert kube.core.read_namespace(RELEASE_NS).status.phase == "Active"
        for role in CLUSTER_ROLES:
            rbac.read_cluster_role(role)
        assert "are kept" in out, out[-4000:]
    else:
        assert _gone(lambda: kube.core.read_namespace(RELEASE_NS), timeout=120)
        for role in CLUSTER_ROLES:
            assert _gone(lambda r=role: rbac.read_cluster_role(r))
    rc, out, changed = _run(env, vars_file, "-e", "state=absent")
    assert rc == 0 and changed == 0, out[-4000:]

