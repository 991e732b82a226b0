"""JOB: MPIJob and TrainJob lifecycles through the real operators."""

from __future__ import annotations

import time

import pytest
from kubernetes.client.exceptions import ApiException

from mpiplat import jobs
from mpiplat.conformance import workloads
from mpiplat.conformance.watch import (
    JOB_LABEL,
    ROLE_LABEL,
    all_running,
    condition_times,
    percentile,
    run_workload_job,
    submit,
    wait_pods,
)
from mpiplat.kube import MPIJOB, TRAINJOB, has_condition

IMPLEMENTATIONS = [
    pytest.param("OpenMPI", "{host} slots={slots}", marks=pytest.mark.requirement("JOB-01"), id="OpenMPI"),
    pytest.param("Intel", "{host}:{slots}", marks=pytest.mark.requirement("JOB-02"), id="Intel"),
    pytest.param("MPICH", "{host}:{slots}", marks=pytest.mark.requirement("JOB-03"), id="MPICH"),
]


def _spec(settings, name: str, namespace: str, **kw) -> jobs.MPIJobSpec:
    impl = kw.pop("implementation", "OpenMPI")
    return jobs.MPIJobSpec(name=name, namespace=namespace, implementation=impl, image=settings.images[impl],
                           node_selector=dict(settings.node_selector), tolerations=list(settings.tolerations), **kw)


@pytest.mark.parametrize("implementation, line", IMPLEMENTATIONS)
def test_mpijob_runs_created_running_succeeded_with_full_hostfile(kube, run, settings, capabilities,
                                                                  implementation, line):
    """The allreduce workload (delivered by ConfigMap) runs on 3 workers x 2 slots; where pods run
    for real, the program's own check must pass on all 6 ranks."""
    ns = run.namespace()
    kube.core.create_namespaced_config_map(ns, workloads.configmap(ns))
    spec = _spec(settings, "hello", ns, implementation=implementation, workers=3, slots_per_worker=2,
                 workload="allreduce", launcher_annotations={jobs.COMPLETE_AFTER: "4s"})
    kube.create(MPIJOB, jobs.mpijob(spec))
    seen = condition_times(kube, MPIJOB, "hello", ns, until=("Succeeded", "Failed"), timeout=300)
    assert list(seen)[:3] == ["Created", "Running", "Succeeded"], seen
    hostfile = kube.core.read_namespaced_config_map("hello-config", ns).data["hostfile"].splitlines()
    assert hostfile == [line.format(host=f"hello-worker-{i}.hello.{ns}.svc", slots=2) for i in range(3)]
    if capabilities.pod_network:
        from mpiplat.conformance.workloads import results

        launcher = kube.core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}=hello,{ROLE_LABEL}=launcher").items
        log = kube.core.read_namespaced_pod_log(launcher[-1].metadata.name, ns)
        results.assert_passed(results.parse(log), "allreduce", ranks=6)


@pytest.mark.requirement("JOB-04")
def test_trainjob_on_mpi_runtime_completes(kube, run):
    ns = run.namespace()
    kube.create(TRAINJOB, jobs.trainjob(jobs.TrainJobSpec(name="ds", namespace=ns, num_nodes=2)))
    seen = condition_times(kube, TRAINJOB, "ds", ns, until=("Complete", "Failed"), timeout=180)
    assert "Complete" in seen and "Failed" not in seen, seen


@pytest.mark.requirement("JOB-05")
def test_worker_counts_and_slots_are_honoured(kube, run, settings):
    ns = run.namespace()
    lo, hi = int(settings.thresholds["min_workers"]), int(settings.thresholds["max_workers"])
    for workers in sorted({lo, min(hi, 5)}):
        name = f"w{workers}"
        kube.create(MPIJOB, jobs.mpijob(_spec(settings, name, ns, workers=workers, slots_per_worker=3,
                                              launcher_annotations={jobs.COMPLETE_AFTER: "60s"})))
        pods = wait_pods(kube, ns, f"{JOB_LABEL}={name},{ROLE_LABEL}=worker", all_running(workers), timeout=120)
        assert len(pods) == workers
        hostfile = kube.core.read_namespaced_config_map(f"{name}-config", ns).data["hostfile"].splitlines()
        assert len(hostfile) == workers and all(h.endswith("slots=3") for h in hostfile)


@pytest.mark.requirement("JOB-06")
def test_submit_latency_and_time_to_running(kube, run, settings):
    ns = run.namespace()
    created, running = [], []
    for i in range(10):
        name = f"lat{i}"
        start = time.monotonic()
        submit(kube, MPIJOB, jobs.mpijob(_spec(settings, name, ns, workers=2,
                                               launcher_annotations={jobs.COMPLETE_AFTER: "30s"})))
        seen = condition_times(kube, MPIJOB, name, ns, until=("Created",), timeout=60, start=start)
        created.append(seen["Created"])
        wait_pods(kube, ns, f"{JOB_LABEL}={name},{ROLE_LABEL}=worker", all_running(2), timeout=120)
        running.append(time.monotonic() - start)
    p50, p95 = percentile(created, 50), percentile(created, 95)
    target_created = settings.thresholds["submit_to_created_p95_s"]
    target_running = settings.thresholds["admitted_to_running_s"]
    run.record("JOB-06", "submit -> Created p50", p50, "s")
    run.record("JOB-06", "submit -> Created p95", p95, "s", target_created)
    # Jobs here carry no queue label, so they are admitted at submission.
    run.record("JOB-06", "submit/admitted -> all workers Running (max of 10)", max(running), "s", target_running)
    assert p95 < target_created
    assert max(running) < target_running


@pytest.mark.requirement("JOB-07")
def test_deleting_a_job_removes_everything_it_created(kube, run, settings):
    ns = run.namespace()
    kube.create(MPIJOB, jobs.mpijob(_spec(settings, "gone", ns, workers=2,
                                          launcher_annotations={jobs.COMPLETE_AFTER: "60s"})))
    wait_pods(kube, ns, f"{JOB_LABEL}=gone", all_running(3), timeout=120)  # 2 workers + launcher
    reads = {
        "launcher Job": lambda: kube.batch.read_namespaced_job("gone-launcher", ns),
        "Service": lambda: kube.core.read_namespaced_service("gone", ns),
        "ConfigMap": lambda: kube.core.read_namespaced_config_map("gone-config", ns),
        "SSH Secret": lambda: kube.core.read_namespaced_secret("gone-ssh", ns),
    }
    for read in reads.values():
        read()
    kube.delete(MPIJOB, "gone", ns)
    deadline = time.monotonic() + 60
    left = dict(reads)
    while left and time.monotonic() < deadline:
        for what, read in list(left.items()):
            try:
                read()
            except ApiException as err:
                if err.status == 404:
                    del left[what]
        time.sleep(0.5)
    pods = kube.core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}=gone").items
    assert not left, f"still present 60s after deletion: {sorted(left)}"
    assert not [p for p in pods if not p.metadata.deletion_timestamp], "pods still present"


@pytest.mark.requirement("JOB-08")
def test_ssh_key_material_is_unique_per_job(kube, run, settings):
    ns = run.namespace()
    for name in ("a", "b"):
        kube.create(MPIJOB, jobs.mpijob(_spec(settings, f"key-{name}", ns, workers=2,
                                              launcher_annotations={jobs.COMPLETE_AFTER: "60s"})))
    keys = {}
    deadline = time.monotonic() + 60
    while len(keys) < 2 and time.monotonic() < deadline:
        for name in ("a", "b"):
            try:
                keys[name] = kube.core.read_namespaced_secret(f"key-{name}-ssh", ns).data
            except ApiException:
                time.sleep(0.5)
    assert len(keys) == 2
    assert keys["a"]["ssh-privatekey"] != keys["b"]["ssh-privatekey"]
    assert keys["a"]["ssh-publickey"] != keys["b"]["ssh-publickey"]


@pytest.mark.requirement("JOB-09")
def test_suspended_job_has_no_pods_and_resumes_to_completion(kube, run, settings):
    ns = run.namespace()
    kube.create(MPIJOB, jobs.mpijob(_spec(settings, "later", ns, workers=2, suspend=True,
                                          launcher_annotations={jobs.COMPLETE_AFTER: "3s"})))
    condition_times(kube, MPIJOB, "later", ns, until=("Suspended",), timeout=60)
    time.sleep(3)  # give the operator time to (wrongly) create pods
    assert kube.core.list_namespaced_pod(ns).items == []
    kube.patch(MPIJOB, "later", {"spec": {"runPolicy": {"suspend": False}}}, ns)
    seen = condition_times(kube, MPIJOB, "later", ns, until=("Succeeded", "Failed"), timeout=120)
    assert "Succeeded" in seen, seen
    assert not has_condition(kube.get(MPIJOB, "later", ns), "Suspended")


@pytest.mark.requirement("JOB-10", needs=["pod_network"])
def test_checkpoint_on_a_shared_pvc_is_read_back_by_a_second_job(kube, run, settings):
    """checkpoint.py writes each rank's state to one PVC mounted by every worker (each rank must
    see every rank's file); a second job reads it back and verifies every byte."""
    ns = run.namespace()
    kube.core.create_namespaced_config_map(ns, workloads.configmap(ns))
    storage = settings.storage
    kube.core.create_namespaced_persistent_volume_claim(ns, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "ckpt"},
        "spec": {"accessModes": [storage["access_mode"]], "resources": {"requests": {"storage": storage["size"]}},
                 **({"storageClassName": storage["storage_class"]} if storage.get("storage_class") else {})}})
    found = {}
    for mode in ("write", "read"):
        spec = _spec(settings, f"ckpt-{mode}", ns, workers=2, slots_per_worker=2, workload="checkpoint",
                     workload_args=[mode, "--dir", "/data", "--step", "1"], pvc="ckpt", pvc_mount_path="/data")
        [found[mode]] = run_workload_job(kube, jobs.mpijob(spec), "checkpoint", ranks=4, timeout=600)
    assert found["write"]["files_seen"] == 4, found["write"]
    assert found["read"]["errors"] == [], found["read"]
    run.record("JOB-10", "hosts that shared the checkpoint volume", found["write"]["hosts"])
