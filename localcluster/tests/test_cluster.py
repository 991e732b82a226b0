"""Proofs against the real local reference cluster: real apiserver, real upstream controllers."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from mpiplat import jobs
from mpiplat.conformance.placement import placement
from mpiplat.kube import (
    CLUSTERQUEUE,
    LOCALQUEUE,
    MPIJOB,
    RESOURCEFLAVOR,
    TRAINJOB,
    WORKLOAD,
    Kube,
    has_condition,
    wait_gone,
)

pytestmark = pytest.mark.cluster


def _simulated():
    """Placement on the KWOK nodes: these jobs rely on the simulated pod lifecycle (localcluster/stages.yaml)
    or on GPUs, which only the KWOK nodes have (the real node, where there is one, gets the rest)."""
    return placement(real=False, kwok_nodes=True)


def _pods(kube: Kube, namespace: str, selector: str = "") -> list:
    return kube.core.list_namespaced_pod(namespace, label_selector=selector).items


def test_openmpi_mpijob_lifecycle_hostfile_and_ssh_secret(kube, namespace):
    spec = jobs.MPIJob(name="pi", namespace=namespace, workers=2,
                       launcher_annotations={jobs.COMPLETE_AFTER: "4s"}, **_simulated())
    kube.create(MPIJOB, jobs.mpijob(spec))
    seen: list[str] = []

    def progress(obj: dict) -> bool:
        for ctype in ("Created", "Running", "Succeeded", "Failed"):
            if has_condition(obj, ctype) and ctype not in seen:
                seen.append(ctype)
        return "Succeeded" in seen or "Failed" in seen

    kube.wait_for(MPIJOB, "pi", namespace, progress, timeout=120, what="Succeeded")
    assert seen == ["Created", "Running", "Succeeded"]

    hostfile = kube.core.read_namespaced_config_map("pi-config", namespace).data["hostfile"].splitlines()
    assert hostfile == [f"pi-worker-0.pi.{namespace}.svc slots=1", f"pi-worker-1.pi.{namespace}.svc slots=1"]
    secret = kube.core.read_namespaced_secret("pi-ssh", namespace)
    assert set(secret.data) >= {"ssh-privatekey", "ssh-publickey"}

    kube.delete(MPIJOB, "pi", namespace)
    wait_gone(lambda: kube.core.read_namespaced_secret("pi-ssh", namespace), 60, "Secret pi-ssh")
    wait_gone(lambda: kube.core.read_namespaced_config_map("pi-config", namespace), 60, "ConfigMap pi-config")


def test_trainjob_on_mpi_runtime_completes_through_trainer_and_jobset(kube, namespace):
    kube.create(TRAINJOB, jobs.trainjob(jobs.TrainJob(name="ds", namespace=namespace, num_nodes=2,
                                                      **_simulated())))
    done = kube.wait_for(TRAINJOB, "ds", namespace,
                         lambda o: has_condition(o, "Complete") or has_condition(o, "Failed"),
                         timeout=120, what="Complete")
    assert has_condition(done, "Complete"), done.get("status")
    hostfile = kube.core.read_namespaced_config_map("ds-mpi-hostfile", namespace).data["hostfile"]
    assert "ds-node-0-0.ds slots=1" in hostfile
    assert _pods(kube, namespace, "jobset.sigs.k8s.io/jobset-name=ds")


def test_kueue_keeps_job_suspended_without_pods_until_admitted(kube, namespace):
    flavor, cq = f"{namespace}-flavor", f"{namespace}-cq"
    kube.create(RESOURCEFLAVOR, {"apiVersion": RESOURCEFLAVOR.api_version, "kind": "ResourceFlavor",
                                 "metadata": {"name": flavor}})

    def quota(gpus: int) -> dict:
        return {"resourceGroups": [{
            "coveredResources": ["cpu", "memory", jobs.GPU_RESOURCE],
            "flavors": [{"name": flavor, "resources": [
                {"name": "cpu", "nominalQuota": "100"}, {"name": "memory", "nominalQuota": "1000Gi"},
                {"name": jobs.GPU_RESOURCE, "nominalQuota": gpus}]}]}]}

    kube.create(CLUSTERQUEUE, {"apiVersion": CLUSTERQUEUE.api_version, "kind": "ClusterQueue",
                               "metadata": {"name": cq},
                               "spec": {"namespaceSelector": {}, **quota(0)}})
    try:
        kube.create(LOCALQUEUE, {"apiVersion": LOCALQUEUE.api_version, "kind": "LocalQueue",
                                 "metadata": {"name": "lq", "namespace": namespace},
                                 "spec": {"clusterQueue": cq}})
        spec = jobs.MPIJob(name="queued", namespace=namespace, workers=2, gpus_per_worker=1, queue="lq",
                           **_simulated())
        created = kube.create(MPIJOB, jobs.mpijob(spec))
        assert created["spec"]["runPolicy"]["suspend"] is True  # set by kueue's webhook

        # A Workload appears and stays pending (no GPU quota); the job keeps zero pods.
        deadline = time.monotonic() + 30
        while not kube.list(WORKLOAD, namespace) and time.monotonic() < deadline:
            time.sleep(0.5)
        workloads = kube.list(WORKLOAD, namespace)
        assert len(workloads) == 1
        time.sleep(3)
        wl = kube.list(WORKLOAD, namespace)[0]
        assert not has_condition(wl, "QuotaReserved") and not has_condition(wl, "Admitted")
        assert kube.get(MPIJOB, "queued", namespace)["spec"]["runPolicy"]["suspend"] is True
        assert _pods(kube, namespace) == []

        kube.patch(CLUSTERQUEUE, cq, {"spec": quota(8)})
        done = kube.wait_for(MPIJOB, "queued", namespace,
                             lambda o: has_condition(o, "Succeeded") or has_condition(o, "Failed"),
                             timeout=120, what="Succeeded after admission")
        assert has_condition(done, "Succeeded"), done.get("status")
        assert has_condition(kube.list(WORKLOAD, namespace)[0], "Admitted")
    finally:
        kube.delete(MPIJOB, "queued", namespace)
        kube.delete(LOCALQUEUE, "lq", namespace)
        kube.delete(CLUSTERQUEUE, cq)
        kube.delete(RESOURCEFLAVOR, flavor)


def test_failure_injection_sets_reason_and_exit_code(kube, namespace):
    spec = jobs.MPIJob(
        name="oom", namespace=namespace, workers=2,
        launcher_annotations={jobs.COMPLETE_AFTER: "60s"},
        worker_labels={jobs.FAIL_LABEL: "true"},
        worker_annotations={jobs.FAIL_REASON: "OOMKilled", jobs.FAIL_EXIT_CODE: "137", jobs.FAIL_DELAY: "1s"},
        **_simulated())
    kube.create(MPIJOB, jobs.mpijob(spec))
    selector = "training.kubeflow.org/job-name=oom,training.kubeflow.org/job-role=worker"
    w = watch.Watch()
    terminated = None
    for ev in w.stream(kube.core.list_namespaced_pod, namespace, label_selector=selector, timeout_seconds=90):
        statuses = ev["object"].status.container_statuses or []
        if ev["object"].status.phase == "Failed" and statuses and statuses[0].state.terminated:
            terminated = statuses[0].state.terminated
            w.stop()
    assert terminated is not None, "no worker failed within 90s"
    assert (terminated.reason, terminated.exit_code) == ("OOMKilled", 137)


def test_the_restricted_v2_emulation_writes_what_openshifts_scc_admission_writes(kube, namespace):
    """OpenShift's restricted-v2, emulated by admission policies (localcluster/scc.py): a new namespace gets its
    ranges and SELinux level in OpenShift's annotations (and again when an update drops them); a pod's containers
    that set no runAsUser get the range's first UID in their own securityContext, with restricted-v2's defaults,
    the pod its fsGroup, seccomp and SELinux level and `openshift.io/scc: restricted-v2`; a UID outside the range
    and what restricted-v2 forbids are refused in OpenShift's words, in a namespace with no Pod Security label
    (this one) too; kube-system is exempt."""
    from mpiplat.localcluster import scc

    annotations = kube.core.read_namespace(namespace).metadata.annotations or {}
    assert annotations.get(scc.UID_RANGE) == annotations.get(scc.GROUP_RANGE) == scc.uid_range(namespace)
    assert annotations.get(scc.MCS) == scc.mcs(namespace)
    first = int(scc.uid_range(namespace).split("/")[0])
    last = first + scc.BLOCK - 1
    pods = f"/api/v1/namespaces/{namespace}/pods"

    def pod(security: dict | None = None, **spec) -> dict:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "uid"},
                "spec": {"containers": [{"name": "c", "image": "mpiplat.local/pause:1",
                                         **({"securityContext": security} if security else {})}], **spec}}

    def refusal(p: dict) -> str:
        with pytest.raises(ApiException) as refused:
            kube.dry_run_create(pods, p)
        return json.loads(refused.value.body)["message"]

    made = kube.dry_run_create(pods, pod())
    assert made["metadata"]["annotations"][scc.SCC_ANNOTATION] == "restricted-v2"
    assert made["spec"]["securityContext"] == {"fsGroup": first, "seccompProfile": {"type": "RuntimeDefault"},
                                               "seLinuxOptions": {"level": scc.mcs(namespace)}}
    restricted = {"runAsNonRoot": True, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert made["spec"]["containers"][0]["securityContext"] == {"runAsUser": first, **restricted}
    assert kube.dry_run_create(pods, pod({"runAsUser": last}))["spec"]["containers"][0]["securityContext"] == \
        {"runAsUser": last, **restricted}
    at_pod = kube.dry_run_create(pods, pod(securityContext={"runAsUser": last}))
    assert "runAsUser" not in at_pod["spec"]["containers"][0]["securityContext"]  # the pod's applies
    assert kube.dry_run_create(pods, pod({"capabilities": {"drop": ["NET_RAW"]}}))["spec"]["containers"][0][
        "securityContext"]["capabilities"] == {"drop": ["NET_RAW", "ALL"]}
    prefix = 'unable to validate against any security context constraint: [provider "restricted-v2": '
    assert (prefix + f'.containers[0].runAsUser: Invalid value: 1000: must be in the ranges: [{first}, {last}]]') \
        in refusal(pod({"runAsUser": 1000}))
    said = refusal(pod({"privileged": True, "allowPrivilegeEscalation": True, "capabilities": {"add": ["SYS_ADMIN"]}},
                       hostNetwork=True, volumes=[{"name": "h", "hostPath": {"path": "/"}}]))
    for words in (".spec.securityContext.hostNetwork: Invalid value: true: Host network is not allowed to be used",
                  ".containers[0].privileged: Invalid value: true: Privileged containers are not allowed",
                  ".containers[0].allowPrivilegeEscalation: Invalid value: true: Allowing privilege escalation for "
                  "containers is not allowed",
                  '.containers[0].capabilities.add: Invalid value: "SYS_ADMIN": capability may not be added',
                  'spec.volumes[0]: Invalid value: "hostPath": hostPath volumes are not allowed to be used'):
        assert words in said, said
    assert prefix in said, said
    kube.dry_run_create(pods, pod({"capabilities": {"add": ["NET_BIND_SERVICE"]}}))  # restricted-v2 allows it
    kube.dry_run_create("/api/v1/namespaces/kube-system/pods", pod({"runAsUser": 1000}))
    kube.core.patch_namespace(namespace, [{"op": "remove", "path": "/metadata/annotations/"
                                           + scc.UID_RANGE.replace("/", "~1")}])
    assert (kube.core.read_namespace(namespace).metadata.annotations or {}).get(scc.UID_RANGE) == \
        scc.uid_range(namespace)
