"""Admission guardrails (ValidatingAdmissionPolicies installed by the guardrails role)."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mpiplat import jobs
from mpiplat.conformance.placement import pod_spec
from mpiplat.conformance.watch import submit_job
from mpiplat.kube import MPIJOB

QUOTA_LABEL = {"mpiplat.io/gpu-quota": "true"}  # guardrails_quota_selector's default
# How long a new ResourceQuota (the gpu-quota policy's params object) may take to reach the API server's
# policy informer: typically under a second; until then the policy lets jobs through (parameterNotFoundAction
# Allow). Only a missing or unbound policy comes near this bound.
POLICY_SYNC_TIMEOUT_S = 30


def _rejected(kube, manifest: dict) -> tuple[str, float]:
    start = time.monotonic()
    try:
        kube.create(MPIJOB, manifest)
    except ApiException as err:
        elapsed = time.monotonic() - start
        assert err.status in (400, 403, 422), err
        return json.loads(err.body)["message"], elapsed
    kube.delete(MPIJOB, manifest["metadata"]["name"], manifest["metadata"]["namespace"])
    pytest.fail(f"MPIJob {manifest['metadata']['name']} was admitted: no admission policy rejected it (are the "
                "guardrails installed and bound to this namespace? `kubectl get validatingadmissionpolicybindings`; "
                "the guardrails role installs them)")


def _wait_for_quota(kube, ns: str, name: str, done, what: str, timeout: float = 30) -> None:
    until, timeout = kube.deadline(timeout), kube.waited(timeout)
    while True:
        status = kube.core.read_namespaced_resource_quota(name, ns).status
        if status is not None and done(status):
            return
        if time.monotonic() >= until:
            pytest.fail(f"ResourceQuota {ns}/{name} {what} within {timeout:.0f}s; its status: {status}")
        time.sleep(0.2)


def _wait_until_policy_rejects(kube, manifest: dict, policy: str, timeout: float = POLICY_SYNC_TIMEOUT_S) -> None:
    """Dry-run `manifest` on the server until an admission policy rejects it: a policy whose params object was
    just created or changed holds only once the API server's policy informer has seen it."""
    meta = manifest["metadata"]
    until, timeout = kube.deadline(timeout), kube.waited(timeout)
    while True:
        try:
            kube.custom.create_namespaced_custom_object(MPIJOB.group, MPIJOB.version, meta["namespace"],
                                                        MPIJOB.plural, manifest, dry_run="All")
        except ApiException as err:
            if err.status in (400, 403, 422):
                return
            raise
        if time.monotonic() >= until:
            pytest.fail(f"{policy} still admitted MPIJob {meta['name']} (server-side dry run) {timeout:.0f}s after "
                        f"its params were in place: the guardrail is missing, unbound in namespace "
                        f"{meta['namespace']}, or not enforcing (install it with the guardrails role)")
        time.sleep(0.2)


def _job(mpijob_spec, name: str, ns: str, **kw) -> dict:
    return jobs.mpijob(mpijob_spec(name, ns, **kw))


@pytest.mark.requirement("FAIL-03")
def test_request_above_the_namespace_gpu_quota_is_rejected_at_submit(kube, run, settings, place, mpijob_spec):
    ns = run.namespace()
    gpu = settings.gpu_resource
    key = f"requests.{gpu}"
    kube.core.create_namespaced_resource_quota(ns, client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="gpus", labels=QUOTA_LABEL),
        spec=client.V1ResourceQuotaSpec(hard={key: "8"})))
    # Until the quota controller has filled in status.hard, quota admission refuses pods that need the quota.
    _wait_for_quota(kube, ns, "gpus", lambda st: (st.hard or {}).get(key) == "8", "got no status.hard")
    kube.core.create_namespaced_pod(ns, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpu-user"},
        "spec": {"automountServiceAccountToken": False, **pod_spec(place()), "containers": [{
            "name": "c", "image": "busybox", "securityContext": jobs.security_context(None),
            "resources": {"requests": {gpu: "4"}, "limits": {gpu: "4"}}}]}})
    _wait_for_quota(kube, ns, "gpus", lambda st: (st.used or {}).get(key) == "4", "did not count the pod's 4 GPUs")
    greedy = _job(mpijob_spec, "greedy", ns, workers=3, gpus_per_worker=2)
    # The policy must have seen the quota (and its used 4) before a submit can be judged.
    _wait_until_policy_rejects(kube, greedy, "the GPU-quota guardrail (ValidatingAdmissionPolicy mpiplat-gpu-quota)")
    message, elapsed = _rejected(kube, greedy)
    run.record("FAIL-03", "quota rejection latency", elapsed, "s", settings.thresholds["quota_rejection_s"])
    assert "Requested 6 GPUs (3 workers x 2 GPUs); namespace quota 8, used 4, available 4" in message, message
    assert elapsed < settings.thresholds["quota_rejection_s"]
    assert kube.core.list_namespaced_pod(ns, label_selector="training.kubeflow.org/job-name=greedy").items == []
    submit_job(kube, _job(mpijob_spec, "modest", ns, workers=2, gpus_per_worker=2,
                             launcher_annotations={jobs.COMPLETE_AFTER: "2s"}))  # 4 fit: admitted


@pytest.mark.requirement("JOB-05")
@pytest.mark.parametrize("workers", ["below", "above"])
def test_worker_counts_outside_the_range_are_rejected_at_submit(kube, run, settings, mpijob_spec, workers, evidence):
    """min_workers - 1 and max_workers + 1 (settings thresholds) are rejected at submit, with a message that
    names the count and the range. Fails on a cluster without the worker-count guardrail, or with a wider range."""
    lo, hi = int(settings.thresholds["min_workers"]), int(settings.thresholds["max_workers"])
    count = lo - 1 if workers == "below" else hi + 1
    evidence.at_most("objects", "the job is refused at submit")
    ns = run.namespace()
    manifest = _job(mpijob_spec, f"n{count}", ns, workers=max(count, 1))
    manifest["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = count  # 0 where min_workers is 1
    message, _ = _rejected(kube, manifest)
    assert f"MPIJob worker count {count} is outside the allowed range {lo}..{hi}" in message, message


@pytest.mark.requirement("ISO-04")
def test_names_that_break_hostfiles_are_rejected(kube, run, mpijob_spec, evidence):
    evidence.at_most("objects", "the job is refused at submit")
    ns = run.namespace()
    manifest = _job(mpijob_spec, "train-v1", ns, workers=2)
    manifest["metadata"]["name"] = "train.v1"
    message, _ = _rejected(kube, manifest)
    assert 'MPIJob name "train.v1" contains dots, which break MPI hostfiles' in message, message
    assert message.endswith('e.g. "train-v1"'), message


ISTIO_INJECTOR = ".sidecar-injector.istio.io"  # how the names of Istio's injection webhooks end
ISTIO_OPT_OUT = "sidecar.istio.io/inject"


@pytest.mark.requirement("ISO-04")
def test_no_istio_sidecar_can_be_injected_into_mpijob_pods(kube, run, mpijob_spec, evidence):
    """Where Istio's sidecar injector is registered (a MutatingWebhookConfiguration webhook named
    *.sidecar-injector.istio.io), an MPIJob whose pod templates do not opt out, as upstream's examples do not,
    is refused at submit (server-side dry run; the guardrails role's istio-sidecar policy says how to opt
    out). A sidecar would intercept the launcher's SSH to the workers and keep finished pods running. Where
    no injector is registered, nothing can inject one now, and the test is partial: the guard is not
    exercised. Fails on a cluster that registers the injector and admits such a job."""
    injectors = sorted(f"{c.metadata.name}/{w.name}"
                       for c in client.AdmissionregistrationV1Api(kube.api_client)
                       .list_mutating_webhook_configuration().items
                       for w in c.webhooks or [] if w.name.endswith(ISTIO_INJECTOR))
    if not injectors:
        evidence.at_most("objects", "no Istio sidecar injector is registered: nothing can inject a sidecar")
        evidence.partial("no Istio sidecar injector is registered: injection is off now, but what keeps it off "
                         "for MPI pods once Istio is installed (the guardrails' istio-sidecar policy) is not exercised")
        return
    evidence.at_most("objects", f"Istio's injector ({', '.join(injectors)}) and a server-side dry run")
    ns = run.namespace()
    manifest = _job(mpijob_spec, "meshed", ns, workers=2)
    for replica in manifest["spec"]["mpiReplicaSpecs"].values():
        replica["template"]["metadata"].get("labels", {}).pop(ISTIO_OPT_OUT, None)
        replica["template"]["metadata"].get("annotations", {}).pop(ISTIO_OPT_OUT, None)
    try:
        kube.dry_run_create(f"/apis/{MPIJOB.group}/{MPIJOB.version}/namespaces/{ns}/{MPIJOB.plural}", manifest)
    except ApiException as err:
        assert err.status in (400, 403, 422), err
        message = json.loads(err.body)["message"]
        assert ISTIO_OPT_OUT in message, f"refused, but not for the Istio opt-out: {message}"
        return
    pytest.fail(f"Istio's sidecar injector is registered ({', '.join(injectors)}) and an MPIJob whose pod templates "
                f"do not set {ISTIO_OPT_OUT}: \"false\" was admitted (a server-side dry run): its pods would get a "
                "sidecar that intercepts the launcher's SSH to the workers. Install the guardrails with "
                "guardrails_istio: true")
