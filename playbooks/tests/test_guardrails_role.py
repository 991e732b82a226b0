"""The guardrails role: its ValidatingAdmissionPolicies reject the jobs they should, with the exact
message, and admit the rest; the role is idempotent, changes nothing in --check, and absent removes it.

The bindings are scoped (guardrails_namespace_selector) to namespaces labelled for this module run, so jobs
that other tests create elsewhere on the shared cluster are not affected while this module runs.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from mpiplat import jobs
from mpiplat.kube import MPIJOB, TRAINJOB, Kind, Kube

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = "playbooks/tests/guardrails.yml"
VAP_GROUP, VAP_VERSION = "admissionregistration.k8s.io", "v1"
COMPONENT = "mpiplat.io/component=guardrails"
POLICIES = {"mpiplat-gpu-quota", "mpiplat-worker-count", "mpiplat-job-name"}
ISTIO = "mpiplat-istio-sidecar"
LATENCY_LIMIT_S = 2.0
LATENCIES: dict[str, float] = {}
RUN_LABEL = {"mpiplat.io/guardrails-test": uuid.uuid4().hex[:8]}
# The worker range the role enforces here: the local inventory's, which the play reads.
_LOCAL = yaml.safe_load((ROOT / "inventories/local/group_vars/all/main.yml").read_text())
LO, HI = _LOCAL["guardrails_min_workers"], _LOCAL["guardrails_max_workers"]

pytestmark = pytest.mark.cluster


# ---- running the role

def _play(env: dict[str, str], *args: str, **settings) -> subprocess.CompletedProcess:
    """ansible-playbook of the guardrails role, bound to this run's namespaces, with `settings` as extra vars."""
    extra = {"guardrails_namespace_selector": {"matchLabels": RUN_LABEL}, **settings}
    return subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "inventories/local/hosts.yml", PLAYBOOK,
         "-e", json.dumps(extra), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def _changed(run: subprocess.CompletedProcess) -> int:
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    recap = re.search(r"localhost\s+: ok=\d+\s+changed=(\d+)", run.stdout)
    assert recap, run.stdout[-2000:]
    return int(recap.group(1))


def _ours(kube: Kube, plural: str) -> set[str]:
    """Names of our ValidatingAdmissionPolicies (plural validatingadmissionpolicies) or their bindings."""
    items = kube.custom.list_cluster_custom_object(VAP_GROUP, VAP_VERSION, plural, label_selector=COMPONENT)
    return {i["metadata"]["name"] for i in items["items"]}


def _policies(kube: Kube) -> set[str]:
    return _ours(kube, "validatingadmissionpolicies")


def _bindings(kube: Kube) -> set[str]:
    return _ours(kube, "validatingadmissionpolicybindings")


def _namespace(kube: Kube) -> str:
    """A new namespace the bindings apply in."""
    name = f"gr-{uuid.uuid4().hex[:8]}"
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=name, labels={"mpiplat.io/test": "guardrails", **RUN_LABEL})))
    return name


@pytest.fixture(scope="module")
def ns(kube: Kube):
    name = _namespace(kube)
    yield name
    kube.core.delete_namespace(name)


@pytest.fixture(scope="module")
def role(kube: Kube, ns: str, ansible_env: dict[str, str], request: pytest.FixtureRequest):
    """The role applied twice with its defaults (bound to this run's namespaces); state absent at teardown, then
    the guardrails put back as the site installed them (every namespace), for the tests that follow on this cluster."""
    try:
        first = _play(ansible_env)
        second = _play(ansible_env)
        yield {"first": first, "second": second}
    finally:
        gone = _play(ansible_env, guardrails_state="absent")
        assert gone.returncode == 0, (gone.stdout + gone.stderr)[-3000:]
        assert _policies(kube) == set() and _bindings(kube) == set()
        back = _play(ansible_env, guardrails_namespace_selector=_LOCAL.get("guardrails_namespace_selector", {}))
        assert back.returncode == 0, (back.stdout + back.stderr)[-3000:]
        if LATENCIES:  # the figures, shown even when output is captured
            with request.config.pluginmanager.get_plugin("capturemanager").global_and_fixture_disabled():
                print("\nguardrails rejection latency: " + ", ".join(
                    f"{k} {v * 1000:.1f} ms" for k, v in sorted(LATENCIES.items())))


# ---- submitting jobs

def _create(kube: Kube, kind: Kind, obj: dict, dry_run: bool = False) -> dict:
    ns = obj["metadata"]["namespace"]
    return kube.custom.create_namespaced_custom_object(kind.group, kind.version, ns, kind.plural, obj,
                                                       dry_run="All" if dry_run else None)


def _denial(err: ApiException) -> str:
    """The message of a ValidatingAdmissionPolicy denial, without the API server's prefix."""
    message = json.loads(err.body)["message"]
    match = re.search(r"ValidatingAdmissionPolicy '[^']+' with binding '[^']+' denied request: (.*)$", message, re.S)
    assert match, message
    return match.group(1)


def reject(kube: Kube, kind: Kind, obj: dict, label: str) -> str:
    """Submit `obj`, which must be rejected; returns the policy's message and records the latency.

    A new policy or binding reaches the API server's admission informers a moment after it is written,
    so dry-run probes wait (up to 15 s) until the rejection is in force; the measured request is a real one.
    """
    deadline = time.monotonic() + 15
    while True:
        try:
            _create(kube, kind, obj, dry_run=True)
        except ApiException as err:
            if err.status not in (403, 422):
                raise
            break
        assert time.monotonic() < deadline, f"{label}: {kind.plural}/{obj['metadata']['name']} was admitted"
        time.sleep(0.2)
    start = time.perf_counter()
    with pytest.raises(ApiException) as err:
        _create(kube, kind, obj)
    LATENCIES[label] = elapsed = time.perf_counter() - start
    assert elapsed < LATENCY_LIMIT_S, f"{label}: rejection took {elapsed:.3f}s"
    return _denial(err.value)


def admit(kube: Kube, kind: Kind, obj: dict) -> dict:
    return _create(kube, kind, obj)


def admitted_eventually(kube: Kube, kind: Kind, obj: dict) -> None:
    """Dry-run `obj` until it is admitted (a removed policy leaves the admission informers a moment later)."""
    deadline = time.monotonic() + 15
    while True:
        try:
            _create(kube, kind, obj, dry_run=True)
            return
        except ApiException as err:
            if err.status not in (403, 422) or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def mpijob(ns: str, name: str = "train", **kw) -> dict:
    """A suspended MPIJob (no pods: nothing is scheduled and the namespace's GPU usage stays as set)."""
    return jobs.mpijob(jobs.MPIJob(name=name, namespace=ns, suspend=True, **kw))


def trainjob(ns: str, name: str = "train", gpus_per_node: int = 0, **kw) -> dict:
    obj = jobs.trainjob(jobs.TrainJob(name=name, namespace=ns, suspend=True, **kw))
    if gpus_per_node:
        obj["spec"]["trainer"]["resourcesPerNode"] = {"limits": {jobs.GPU_RESOURCE: str(gpus_per_node)}}
    return obj


# ---- the role itself

def test_role_applies_the_policies_idempotently(kube, role):
    assert _changed(role["first"]) > 0
    assert _changed(role["second"]) == 0, role["second"].stdout[-3000:]
    assert _policies(kube) == POLICIES
    assert _bindings(kube) == POLICIES
    for name in POLICIES:
        vap = kube.custom.get_cluster_custom_object(VAP_GROUP, VAP_VERSION, "validatingadmissionpolicies", name)
        assert vap["metadata"]["labels"] == {"app.kubernetes.io/part-of": "mpiplat",
                                             "mpiplat.io/component": "guardrails"}
        assert "mpiplat" in {m["manager"] for m in vap["metadata"]["managedFields"]}
        # The API server type-checked the CEL against the MPIJob and TrainJob schemas without complaint.
        assert vap["status"]["observedGeneration"] == vap["metadata"]["generation"]
        assert not vap["status"].get("typeChecking", {}).get("expressionWarnings"), vap["status"]
        binding = kube.custom.get_cluster_custom_object(VAP_GROUP, VAP_VERSION,
                                                        "validatingadmissionpolicybindings", name)
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert binding["spec"]["matchResources"]["namespaceSelector"] == {"matchLabels": RUN_LABEL}
    quota_ref = kube.custom.get_cluster_custom_object(VAP_GROUP, VAP_VERSION, "validatingadmissionpolicybindings",
                                                      "mpiplat-gpu-quota")["spec"]["paramRef"]
    assert quota_ref == {"selector": {"matchLabels": {"mpiplat.io/gpu-quota": "true"}},
                         "parameterNotFoundAction": "Allow"}


def test_istio_policy_is_not_installed_by_default(kube, role):
    assert ISTIO not in _policies(kube) | _bindings(kube)


def test_check_mode_changes_nothing(kube, role, ns, ansible_env):
    before = kube.custom.get_cluster_custom_object(VAP_GROUP, VAP_VERSION, "validatingadmissionpolicies",
                                                   "mpiplat-worker-count")
    assert _changed(_play(ansible_env, "--check", guardrails_max_workers=50)) > 0
    assert _changed(_play(ansible_env, "--check", guardrails_state="absent")) > 0
    assert _policies(kube) == POLICIES
    after = kube.custom.get_cluster_custom_object(VAP_GROUP, VAP_VERSION, "validatingadmissionpolicies",
                                                  "mpiplat-worker-count")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_bad_settings_fail_before_any_change(kube, role, ns, ansible_env):
    run = _play(ansible_env, guardrails_min_workers=8, guardrails_max_workers=4)
    assert run.returncode != 0
    out = " ".join(run.stdout.split())
    assert "guardrails_min_workers is 8 and guardrails_max_workers is 4" in out, run.stdout[-2000:]
    assert re.search(r"changed=0\b", run.stdout)


# ---- (a) GPU quota

def _wait_for_quota(kube: Kube, ns: str, predicate, what: str) -> None:
    """Watch the quota `gpus` until predicate(status) holds."""
    w = watch.Watch()
    for event in w.stream(kube.core.list_namespaced_resource_quota, ns, field_selector="metadata.name=gpus",
                          timeout_seconds=120):
        if predicate(event["object"].status):
            w.stop()
            return
    pytest.fail(f"the quota never {what}")


@pytest.fixture(scope="module")
def gpu_quota(kube: Kube, ns: str, role):
    """Quota 32 GPUs, 24 of them used by three pending pods of 8 GPUs (nodeSelector matches no node, so
    they hold no GPUs of the shared cluster's nodes, yet count against the quota)."""
    key = f"requests.{jobs.GPU_RESOURCE}"
    kube.core.create_namespaced_resource_quota(ns, {
        "apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "gpus", "labels": {"mpiplat.io/gpu-quota": "true"}},
        "spec": {"hard": {key: "32"}}})
    # Until the quota controller has filled in status.hard, quota admission refuses pods that need the quota.
    _wait_for_quota(kube, ns, lambda st: st is not None and (st.hard or {}).get(key) == "32", "got its status")
    for i in range(3):
        kube.core.create_namespaced_pod(ns, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"gpu-user-{i}"},
            "spec": {"nodeSelector": {"mpiplat.io/no-such-node": "true"},
                     "containers": [{"name": "c", "image": "busybox",
                                     "resources": {"limits": {jobs.GPU_RESOURCE: "8"}}}]}})
    _wait_for_quota(kube, ns, lambda st: st is not None and (st.used or {}).get(key) == "24", "counted 24 GPUs used")


def test_gpu_quota_rejects_an_mpijob_over_what_is_left(kube, ns, gpu_quota):
    msg = reject(kube, MPIJOB, mpijob(ns, workers=20, gpus_per_worker=2), "gpu-quota MPIJob")
    assert msg == "Requested 40 GPUs (20 workers x 2 GPUs); namespace quota 32, used 24, available 8"


def test_gpu_quota_counts_launcher_gpus(kube, ns, gpu_quota):
    obj = mpijob(ns, workers=4, gpus_per_worker=2)
    obj["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["resources"]["limits"][
        jobs.GPU_RESOURCE] = "1"
    msg = reject(kube, MPIJOB, obj, "gpu-quota MPIJob+launcher")
    assert msg == ("Requested 9 GPUs (4 workers x 2 GPUs + launcher 1 GPU); namespace quota 32, used 24, "
                   "available 8")


def test_gpu_quota_rejects_a_trainjob_over_what_is_left(kube, ns, gpu_quota):
    msg = reject(kube, TRAINJOB, trainjob(ns, num_nodes=5, gpus_per_node=2), "gpu-quota TrainJob")
    assert msg == "Requested 10 GPUs (5 nodes x 2 GPUs); namespace quota 32, used 24, available 8"


def test_gpu_quota_admits_jobs_within_what_is_left_and_checks_updates_that_raise_it(kube, ns, gpu_quota):
    admit(kube, MPIJOB, mpijob(ns, "fits", workers=4, gpus_per_worker=2))  # exactly the 8 left
    admit(kube, MPIJOB, mpijob(ns, "no-gpus", workers=50))
    admit(kube, TRAINJOB, trainjob(ns, "fits", num_nodes=4, gpus_per_node=2))
    # An update that does not raise the job's GPUs passes; one that does is checked.
    kube.patch(MPIJOB, "fits", {"metadata": {"labels": {"team": "a"}}}, ns)
    with pytest.raises(ApiException) as err:
        kube.patch(MPIJOB, "fits", {"spec": {"mpiReplicaSpecs": {"Worker": {"replicas": 20}}}}, ns)
    assert _denial(err.value) == "Requested 40 GPUs (20 workers x 2 GPUs); namespace quota 32, used 24, available 8"


def test_gpu_quota_is_not_enforced_without_a_labelled_quota(kube, role):
    # parameterNotFoundAction Allow: where no quota carries the label, GPUs are not limited (the other
    # policies still apply there).
    other = _namespace(kube)
    try:
        _create(kube, MPIJOB, mpijob(other, workers=64, gpus_per_worker=8), dry_run=True)
        assert reject(kube, MPIJOB, mpijob(other, workers=1), "worker-count (no quota)").startswith(
            "MPIJob worker count 1")
    finally:
        kube.core.delete_namespace(other)


# ---- (b) worker count

@pytest.mark.parametrize(("kind", "obj", "expected"), [
    (MPIJOB, lambda ns: mpijob(ns, workers=LO - 1),
     f"MPIJob worker count {LO - 1} is outside the allowed range {LO}..{HI}"),
    (MPIJOB, lambda ns: mpijob(ns, workers=HI + 1),
     f"MPIJob worker count {HI + 1} is outside the allowed range {LO}..{HI}"),
    (TRAINJOB, lambda ns: trainjob(ns, num_nodes=LO - 1),
     f"TrainJob numNodes {LO - 1} is outside the allowed range {LO}..{HI}"),
], ids=["mpijob-below", "mpijob-above", "trainjob-below"])
def test_worker_count_outside_the_range_is_rejected(kube, ns, role, kind, obj, expected, request):
    assert reject(kube, kind, obj(ns), f"worker-count {request.node.callspec.id}") == expected


def test_worker_count_within_the_range_is_admitted(kube, ns, role):
    admit(kube, MPIJOB, mpijob(ns, "fewest-workers", workers=LO))
    admit(kube, MPIJOB, mpijob(ns, "most-workers", workers=HI))
    admit(kube, TRAINJOB, trainjob(ns, "fewest-nodes", num_nodes=LO))


# ---- (c) names with dots

def test_dotted_mpijob_name_is_rejected(kube, ns, role):
    obj = mpijob(ns, "resnet-v1")
    obj["metadata"]["name"] = "resnet.v1"
    assert reject(kube, MPIJOB, obj, "job-name MPIJob") == (
        'MPIJob name "resnet.v1" contains dots, which break MPI hostfiles (pod host names are built from '
        'the job name); use a name without dots, e.g. "resnet-v1"')
    admit(kube, MPIJOB, mpijob(ns, "resnet-v1"))


def test_dotted_trainjob_name_is_rejected(kube, ns, role):
    # The TrainJob CRD's own validation rejects dots before admission policies run; the policy is a backstop.
    obj = trainjob(ns, "bert-large", num_nodes=2)
    obj["metadata"]["name"] = "bert.large"
    with pytest.raises(ApiException) as err:
        _create(kube, TRAINJOB, obj)
    assert err.value.status in (403, 422)
    assert "bert.large" in json.loads(err.value.body)["message"]
    admit(kube, TRAINJOB, trainjob(ns, "bert-large", num_nodes=2))


# ---- (d) Istio sidecar opt-out

def _without_istio_label(obj: dict, replica: str) -> dict:
    del obj["spec"]["mpiReplicaSpecs"][replica]["template"]["metadata"]["labels"]["sidecar.istio.io/inject"]
    return obj


def test_istio_policy_requires_the_opt_out_on_launcher_and_worker(kube, role, ns, ansible_env):
    try:
        assert _changed(_play(ansible_env, guardrails_istio=True)) > 0
        assert ISTIO in _policies(kube) and ISTIO in _bindings(kube)
        for replica in ("Launcher", "Worker"):
            obj = _without_istio_label(mpijob(ns, f"mesh-{replica.lower()}"), replica)
            assert reject(kube, MPIJOB, obj, f"istio {replica}") == (
                f"MPIJob {replica} pod template does not disable Istio sidecar injection; add the label "
                f'sidecar.istio.io/inject: "false" to spec.mpiReplicaSpecs.{replica}.template.metadata.labels')
        admit(kube, MPIJOB, mpijob(ns, "mesh-labelled"))
        annotated = _without_istio_label(mpijob(ns, "mesh-annotated"), "Worker")
        annotated["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"] = {
            "sidecar.istio.io/inject": "false"}
        admit(kube, MPIJOB, annotated)
    finally:
        off = _play(ansible_env)
    assert _changed(off) > 0
    assert ISTIO not in _policies(kube) | _bindings(kube)
    assert _policies(kube) == POLICIES
    # Without the Istio policy the same job is admitted.
    admitted_eventually(kube, MPIJOB, _without_istio_label(mpijob(ns, "mesh-worker"), "Worker"))
