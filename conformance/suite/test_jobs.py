"""JOB: MPIJob and TrainJob lifecycles through the real operators."""

from __future__ import annotations

import re
import time

import pytest
from kubernetes.client.exceptions import ApiException

from mpiplat import jobs
from mpiplat.conformance import identity, placement, runtimes, workloads
from mpiplat.conformance.health import api_message
from mpiplat.conformance.watch import (
    JOB_LABEL,
    ROLE_LABEL,
    all_running,
    condition_times,
    percentile,
    pods_left,
    pull_failure,
    run_workload_job,
    submit,
    submit_job,
    wait_pods,
)
from mpiplat.conformance.workloads import results
from mpiplat.diagnose import diagnose, stuck_launcher
from mpiplat.kube import MPIJOB, TRAINJOB, has_condition

IMPLEMENTATIONS = [
    pytest.param("OpenMPI", "{host} slots={slots}", marks=pytest.mark.requirement("JOB-01"), id="OpenMPI"),
    pytest.param("Intel", "{host}:{slots}", marks=pytest.mark.requirement("JOB-02"), id="Intel"),
    pytest.param("MPICH", "{host}:{slots}", marks=pytest.mark.requirement("JOB-03"), id="MPICH"),
]


@pytest.mark.parametrize("implementation, line", IMPLEMENTATIONS)
def test_mpijob_runs_created_running_succeeded_with_full_hostfile(kube, run, capabilities, mpijob_spec,
                                                                  implementation, line):
    """The allreduce workload (delivered by ConfigMap) runs on 2 workers x 2 slots; where pods run
    for real (on a real node, also of a cluster with KWOK nodes), the program's own check must pass
    on all 4 ranks; elsewhere the job is simulated. (6 ranks on the local real node's 2 cores made
    MPICH 4.0's ranks hang in MPI_Finalize in about half the runs.)"""
    ns = run.namespace()
    kube.core.create_namespaced_config_map(ns, workloads.configmap(ns))
    spec = mpijob_spec("hello", ns, real=capabilities.pod_network, implementation=implementation, workers=2,
                       slots_per_worker=2, workload="allreduce", launcher_annotations={jobs.COMPLETE_AFTER: "4s"},
                       # Sizes a small node runs in seconds even with 6 busy-polling ranks on 2 cores.
                       workload_args=["--counts", "1,1000,16384"],
                       # Two ranks a worker: two Intel MPI ranks with numpy took 130 MiB (the OOM killer's report)
                       # beside sshd and Hydra's proxy, over the builder's default 128Mi.
                       memory="256Mi")
    start = time.monotonic()
    submit_job(kube, spec)
    if capabilities.pod_network:  # a worker that cannot pull its image holds the job: say so at once
        pods = wait_pods(kube, ns, f"{JOB_LABEL}=hello", lambda ps: pull_failure(ps) or any(
            p.metadata.labels.get(ROLE_LABEL) == "launcher" for p in ps), timeout=300)
        if pull_failure(pods):
            pytest.fail(f"{implementation}: the workers cannot pull image {spec.image}: {diagnose(kube, ns, 'hello')}")
    seen = condition_times(kube, MPIJOB, "hello", ns, until=("Succeeded", "Failed"), timeout=300, start=start)
    if "Succeeded" not in seen:
        pytest.fail(f"{implementation}: the job did not succeed ({', '.join(seen)}): {diagnose(kube, ns, 'hello')}")
    assert list(seen)[:3] == ["Created", "Running", "Succeeded"], seen
    hostfile = kube.core.read_namespaced_config_map("hello-config", ns).data["hostfile"].splitlines()
    assert hostfile == [line.format(host=f"hello-worker-{i}.hello.{ns}.svc", slots=2) for i in range(2)]
    if capabilities.pod_network:
        launcher = kube.core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}=hello,{ROLE_LABEL}=launcher").items
        log = kube.core.read_namespaced_pod_log(launcher[-1].metadata.name, ns)
        results.assert_passed(results.parse(log), "allreduce", ranks=4)


@pytest.mark.requirement("JOB-04")
def test_trainjob_on_mpi_runtime_completes(kube, run, trainjob_spec, evidence):
    """A TrainJob of 2 nodes on the installed MPI ClusterTrainingRuntime (deepspeed-distributed) completes:
    on the cluster's KWOK nodes where it has them (simulated: the pods run nothing, and the row says so),
    elsewhere with the runtime's own image and command. This is the only test that runs the
    ClusterTrainingRuntime object itself, so the row shows what it showed at most."""
    ns = run.namespace()
    plain = trainjob_spec("ds", ns, num_nodes=2)
    if "simulated" in evidence.placed:
        evidence.at_most("simulated", f"the ClusterTrainingRuntime {jobs.MPI_RUNTIME} itself ran on KWOK nodes only "
                                      "(its pods run nothing); real ranks ran on a namespaced copy of it")
    kube.create(TRAINJOB, jobs.trainjob(plain))
    seen = condition_times(kube, TRAINJOB, "ds", ns, until=("Complete", "Failed"), timeout=180)
    assert "Complete" in seen and "Failed" not in seen, seen


@pytest.mark.requirement("JOB-04")
def test_trainjob_ranks_run_for_real_on_a_copy_of_the_mpi_runtime(kube, run, settings, capabilities, trainjob_spec):
    """Where pods run for real, Trainer's MPI plugin also runs real ranks: the allreduce workload (delivered
    by ConfigMap through a runtime patch) on 2 nodes, the launcher being one of them (runLauncherAsNode),
    with the SSH Secret, hostfile and Open MPI environment Trainer makes; the program's own check must pass
    on both ranks (the hostfile's 2 hosts of 1 slot each: one rank per pod). Its runtime is a TrainingRuntime
    copy of the ClusterTrainingRuntime whose only change is settings.images["OpenMPI"] for its images (see
    runtimes.copy). Skipped where no pod runs for real."""
    if not capabilities.pod_network:
        pytest.skip("no pod runs for real on this cluster: the ranks cannot run")
    ns = run.namespace()
    runtime = jobs.MPI_RUNTIME
    kube.core.create_namespaced_config_map(ns, workloads.configmap(ns))
    image = settings.images["OpenMPI"]
    runtimes.copy(kube, runtime, ns, image)
    name = "mpi"
    spec = trainjob_spec(name, ns, real=True, num_nodes=2, runtime=runtime, runtime_kind="TrainingRuntime",
                         image=image, workload="allreduce")
    runtimes.wait_seen(kube, jobs.trainjob(spec))
    start = time.monotonic()
    kube.create(TRAINJOB, jobs.trainjob(spec))
    seen = condition_times(kube, TRAINJOB, name, ns, until=("Complete", "Failed"), timeout=300, start=start)
    launchers = kube.core.list_namespaced_pod(
        ns, label_selector=f"{runtimes.JOBSET_LABEL}={name},{runtimes.REPLICATED_JOB_LABEL}=launcher").items
    launchers.sort(key=lambda p: (p.status.phase == "Succeeded", p.metadata.creation_timestamp))
    log = kube.core.read_namespaced_pod_log(launchers[-1].metadata.name, ns) if launchers else ""
    if "Complete" not in seen:
        raise AssertionError(f"{ns}/{name} did not complete: {seen}\n{diagnose(kube, ns, name)}\n"
                             f"--- launcher log\n{log[-3000:]}")
    results.assert_passed(results.parse(log), "allreduce", ranks=2)
    hostfile = kube.core.read_namespaced_config_map(f"{name}-mpi-hostfile", ns).data["hostfile"].splitlines()
    assert sorted(hostfile) == [f"{name}-{job}-0-0.{name} slots=1" for job in sorted(jobs.TRAINER_MPI_JOBS)]
    restarts = sum(cs.restart_count for p in launchers for cs in (p.status.container_statuses or []))
    waited = re.search(r"^mpiplat: waited (\d+)s for \S+ to resolve$", log, re.MULTILINE)
    run.record("JOB-04", "real TrainJob (2 nodes, Open MPI) submit -> Complete", seen["Complete"], "s")
    run.record("JOB-04", "real TrainJob launcher wait for its own DNS name", int(waited[1]) if waited else 0, "s")
    run.record("JOB-04", "real TrainJob launcher restarts", restarts)


@pytest.mark.requirement("JOB-04")
def test_trainjob_that_sets_a_reserved_mpi_variable_is_rejected_at_submit(kube, run, trainjob_spec, evidence):
    """Trainer validates a TrainJob against its runtime: on the MPI ClusterTrainingRuntime, a trainer env
    that sets a variable its MPI plugin owns (the hostfile's location) is refused at submit, naming
    spec.trainer.env. Nothing is created."""
    ns = run.namespace()
    evidence.at_most("objects", "the job is refused at submit")
    spec = trainjob_spec("reserved", ns, env={"OMPI_MCA_orte_default_hostfile": "/tmp/hostfile"})
    try:
        kube.create(TRAINJOB, jobs.trainjob(spec))
    except ApiException as err:
        msg = api_message(err)
        assert "failed calling webhook" not in msg, f"Trainer's TrainJob webhook does not answer: {msg}"
        assert err.status in (400, 403, 422) and "spec.trainer.env" in msg \
            and "OMPI_MCA_orte_default_hostfile" in msg, f"rejected, but not for its reserved variable: {msg}"
        return
    pytest.fail(f"{ns}/reserved, a TrainJob on {spec.runtime} that sets OMPI_MCA_orte_default_hostfile, was "
                "admitted: Trainer's validating webhook for TrainJobs is not registered or does not check "
                "the runtime's MPI policy")


@pytest.mark.requirement("JOB-05")
@pytest.mark.parametrize("bound", ["min", "max"])
def test_worker_counts_and_slots_are_honoured(kube, run, settings, mpijob_spec, bound):
    """The range's own ends, settings thresholds.min_workers and max_workers (the guardrail's range; just
    outside it, see test_guardrails.py), are accepted: the operator creates that many workers and the
    hostfile lists each of them with slotsPerWorker slots. Fails on a cluster whose guardrail range is
    narrower than the settings' (the job is rejected), or whose operator drops workers or slots."""
    workers = int(settings.thresholds[f"{bound}_workers"])
    ns = run.namespace()
    name = f"w{workers}"
    submit_job(kube, mpijob_spec(name, ns, workers=workers, slots_per_worker=3, cpu="10m",
                                                memory="16Mi", launcher_annotations={jobs.COMPLETE_AFTER: "60s"}))
    try:
        pods = wait_pods(kube, ns, f"{JOB_LABEL}={name},{ROLE_LABEL}=worker", lambda ps: len(ps) >= workers,
                         timeout=300)
        assert sorted(p.metadata.name for p in pods) == sorted(f"{name}-worker-{i}" for i in range(workers))
        hostfile = kube.core.read_namespaced_config_map(f"{name}-config", ns).data["hostfile"].splitlines()
        assert hostfile == [f"{name}-worker-{i}.{name}.{ns}.svc slots=3" for i in range(workers)], hostfile
    finally:
        # The largest job's pods go at once, not with the namespace, and before the next row: JOB-06's first job
        # waited 30 s behind its 512 pods' deletion on a slow host (CI34).
        kube.delete(MPIJOB, name, ns)
        pods_left(kube, [ns], f"{JOB_LABEL}={name}", 120)


@pytest.mark.requirement("JOB-06")
def test_submit_latency_and_time_to_running(kube, run, settings, mpijob_spec):
    """Jobs submitted one after another, each once the one before runs. 20 of them, so that the p95 is the 19th
    slowest, not the slowest one (as it is of 10)."""
    ns = run.namespace()
    created, running = [], []
    for i in range(20):
        name = f"lat{i}"
        start = time.monotonic()
        submit(kube, MPIJOB, jobs.mpijob(mpijob_spec(name, ns, workers=2,
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
    run.record("JOB-06", f"submit/admitted -> all workers Running (max of {len(running)})", max(running), "s",
               target_running)
    each = ", ".join(f"lat{i} {c:.2f}/{r:.1f}" for i, (c, r) in enumerate(zip(created, running, strict=True)))
    assert p95 < target_created, f"submit -> Created p95 {p95:.2f}s >= {target_created}s; each (Created/Running): " \
                                 f"{each}"
    assert max(running) < target_running, f"submit -> Running {max(running):.1f}s >= {target_running}s; each: {each}"


@pytest.mark.requirement("JOB-07")
def test_deleting_a_job_removes_everything_it_created(kube, run, mpijob_spec):
    """After the MPIJob is deleted, its pods (gone from the API, not merely terminating), launcher Job,
    Service, ConfigMap and SSH Secret, and the MPIJob itself, are all gone within 60 s. Fails on a cluster
    whose operator sets no owner references, or whose garbage collector or pod deletion does not finish
    (e.g. pods stuck terminating on a node that does not answer)."""
    ns = run.namespace()
    submit_job(kube, mpijob_spec("gone", ns, workers=2,
                                                launcher_annotations={jobs.COMPLETE_AFTER: "60s"}))
    wait_pods(kube, ns, f"{JOB_LABEL}=gone", all_running(3), timeout=120)  # 2 workers + launcher
    reads = {
        "MPIJob": lambda: kube.get(MPIJOB, "gone", ns),
        "launcher Job": lambda: kube.batch.read_namespaced_job("gone-launcher", ns),
        "Service": lambda: kube.core.read_namespaced_service("gone", ns),
        "ConfigMap": lambda: kube.core.read_namespaced_config_map("gone-config", ns),
        "SSH Secret": lambda: kube.core.read_namespaced_secret("gone-ssh", ns),
    }
    for read in reads.values():
        read()
    kube.delete(MPIJOB, "gone", ns)
    until = kube.deadline(60)
    left = dict(reads)
    pods = ["?"]
    while (left or pods) and time.monotonic() < until:
        for what, read in list(left.items()):
            try:
                read()
            except ApiException as err:
                if err.status == 404:
                    del left[what]
        pods = [f"{p.metadata.name} ({'terminating' if p.metadata.deletion_timestamp else p.status.phase})"
                for p in kube.core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}=gone").items]
        time.sleep(0.5)
    assert not left, f"still present {kube.waited(60):.0f}s after deletion: {sorted(left)}"
    assert not pods, f"pods still present {kube.waited(60):.0f}s after deletion: {pods}"


@pytest.mark.requirement("JOB-08")
def test_ssh_key_material_is_unique_per_job(kube, run, mpijob_spec):
    """Two MPIJobs get different SSH keys, and each one's running pods mount its own key, not the other's (the
    row's evidence is where those pods ran; reading the Secrets alone showed objects or more, by timing)."""
    ns = run.namespace()
    for name in ("a", "b"):
        submit_job(kube, mpijob_spec(f"key-{name}", ns, workers=2,
                                                    launcher_annotations={jobs.COMPLETE_AFTER: "60s"}))
    keys = {}
    until = kube.deadline(60)
    while len(keys) < 2 and time.monotonic() < until:
        for name in ("a", "b"):
            try:
                keys[name] = kube.core.read_namespaced_secret(f"key-{name}-ssh", ns).data
            except ApiException:
                time.sleep(0.5)
    missing = sorted(f"{ns}/key-{n}-ssh" for n in ("a", "b") if n not in keys)
    assert not missing, f"no SSH Secret {missing} within {kube.waited(60):.0f}s of the MPIJobs' creation"
    assert keys["a"]["ssh-privatekey"] != keys["b"]["ssh-privatekey"]
    assert keys["a"]["ssh-publickey"] != keys["b"]["ssh-publickey"]
    for name, other in (("a", "b"), ("b", "a")):
        pods = wait_pods(kube, ns, f"{JOB_LABEL}=key-{name}", all_running(3), timeout=120)  # 2 workers + launcher
        for pod in pods:
            mounted = {v.secret.secret_name for v in pod.spec.volumes or [] if v.secret}
            assert f"key-{name}-ssh" in mounted and f"key-{other}-ssh" not in mounted, (
                f"pod {ns}/{pod.metadata.name} of MPIJob key-{name} mounts the Secrets {sorted(mounted)}: "
                f"wanted its own key-{name}-ssh, not key-{other}-ssh")


@pytest.mark.requirement("JOB-09")
def test_suspended_job_has_no_pods_and_resumes_to_completion(kube, run, mpijob_spec):
    ns = run.namespace()
    submit_job(kube, mpijob_spec("later", ns, workers=2, suspend=True,
                                                launcher_annotations={jobs.COMPLETE_AFTER: "3s"}))
    condition_times(kube, MPIJOB, "later", ns, until=("Suspended",), timeout=60)
    time.sleep(3)  # give the operator time to (wrongly) create pods
    assert kube.core.list_namespaced_pod(ns).items == []
    kube.patch(MPIJOB, "later", {"spec": {"runPolicy": {"suspend": False}}}, ns)
    seen = condition_times(kube, MPIJOB, "later", ns, until=("Succeeded", "Failed"), timeout=120)
    assert "Succeeded" in seen, seen
    assert not has_condition(kube.get(MPIJOB, "later", ns), "Suspended")


@pytest.mark.requirement("JOB-10", needs=["pod_network"])
def test_checkpoint_on_a_shared_pvc_is_read_back_by_a_second_job(kube, run, settings, mpijob_spec):
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
        spec = mpijob_spec(f"ckpt-{mode}", ns, real=True, workers=2, slots_per_worker=2, workload="checkpoint",
                           workload_args=[mode, "--dir", "/data", "--step", "1"], pvc="ckpt", pvc_mount_path="/data")
        [found[mode]] = run_workload_job(kube, jobs.mpijob(spec), "checkpoint", ranks=4, timeout=600)
    assert found["write"]["files_seen"] == 4, found["write"]
    assert found["write"]["hosts"] == 2, found["write"]  # both workers wrote to the one volume
    assert found["read"]["errors"] == [], found["read"]
    run.record("JOB-10", "hosts that shared the checkpoint volume", found["write"]["hosts"])


@pytest.mark.requirement("JOB-12")
def test_no_launcher_exists_until_every_worker_is_ready(kube, run, capabilities, mpijob_spec):
    """With launcherCreationPolicy WaitForWorkersReady (the job builder's default; workers are Ready once their
    sshd answers): a job whose workers can never be scheduled (a node selector no node matches) gets its workers
    but no launcher; a job whose workers run (real pods where the cluster has them) gets its launcher no earlier
    than the last worker became Ready. Fails on an operator that creates the launcher at startup (AtStartup, or
    a version without the policy), or that ignores worker readiness."""
    ns = run.namespace()
    submit_job(kube, mpijob_spec("held", ns, workers=2,
                                                node_selector={"mpiplat.io/no-such-node": "true"}))
    wait_pods(kube, ns, f"{JOB_LABEL}=held,{ROLE_LABEL}=worker", lambda ps: len(ps) >= 2, timeout=60)
    time.sleep(3)  # give the operator time to (wrongly) create the launcher
    launchers = kube.core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}=held,{ROLE_LABEL}=launcher").items
    jobs_made = [j.metadata.name for j in kube.batch.list_namespaced_job(ns).items]
    pods = [p.metadata.name for p in launchers]
    assert not launchers and not jobs_made, (f"a launcher exists (Jobs {jobs_made}, pods {pods}) although no worker "
                                             "is Ready: launcherCreationPolicy WaitForWorkersReady is not honoured")
    submit_job(kube, mpijob_spec("ready", ns, real=capabilities.pod_network, workers=2,
                                                launcher_annotations={jobs.COMPLETE_AFTER: "5s"}))
    [launcher] = wait_pods(kube, ns, f"{JOB_LABEL}=ready,{ROLE_LABEL}=launcher", lambda ps: len(ps) >= 1,
                           timeout=120)[:1]
    created = kube.batch.read_namespaced_job("ready-launcher", ns).metadata.creation_timestamp
    workers = kube.core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}=ready,{ROLE_LABEL}=worker").items
    ready = {p.metadata.name: next((c.last_transition_time for c in p.status.conditions or []
                                    if c.type == "Ready" and c.status == "True"), None) for p in workers}
    late = {name: str(at) for name, at in ready.items() if at is None or at > created}
    assert len(workers) == 2 and not late, (f"launcher Job created {created}, before workers were Ready: {late} "
                                            f"(launcher pod {launcher.metadata.name})")


NON_ROOT_SSH = "/home/mpiuser/.ssh"  # the MPI user's ~/.ssh: where its ssh client and its sshd look


@pytest.mark.requirement("JOB-11", needs=["pod_network"])
@pytest.mark.parametrize("implementation", ["OpenMPI", "Intel"])
def test_non_root_mpijob_runs_every_rank_as_the_chosen_uid_on_its_own_worker(kube, run, mpijob_spec, implementation):
    """A real MPIJob of 2 workers whose launcher and workers run as a chosen non-root UID (runAsUser,
    runAsNonRoot) with the job's SSH keys at sshAuthMountPath /home/mpiuser/.ssh succeeds, and shows from inside
    that it ran as that user: whoami.py's 2 ranks report that UID (real and effective), one on each worker pod,
    and the launcher's own first line (`id -u`) names it too.
    The UID is one the namespace allows that is not its default (the second of an OpenShift-style range), else a
    random high one no image knows. It fails when a rank runs as another user, when the ranks do not span the
    workers, or when SSH does not work for the user (no passwd entry, keys where its ssh or its sshd do not
    look: the workers' sshd exits, or mpirun cannot log in)."""
    ns = run.namespace()
    found = identity.uid_range(kube, ns)
    uid = found[0] + 1 if found else identity.arbitrary_uid()
    name = "nonroot"
    spec = mpijob_spec(name, ns, real=True, implementation=implementation, workers=2, run_as_user=uid,
                       ssh_auth_mount_path=NON_ROOT_SSH)
    _, took = identity.run_whoami_job(kube, spec, uid)
    pods = kube.core.list_namespaced_pod(ns, label_selector=f"{JOB_LABEL}={name}").items
    for pod in pods:
        [container] = pod.spec.containers
        assert (container.security_context.run_as_user, container.security_context.run_as_non_root) == \
            (uid, True), pod.metadata.name
        assert NON_ROOT_SSH in {m.mount_path for m in container.volume_mounts or []}, pod.metadata.name
    run.record("JOB-11", f"{implementation}: worker pod created -> container running (slowest of 2)",
               took["created_to_running"], "s")
    run.record("JOB-11", f"{implementation}: submit -> both workers Running", took["to_running"], "s")
    run.record("JOB-11", f"{implementation}: submit -> Succeeded (2 workers, uid {uid})", took["to_succeeded"], "s")


# What a user writes from the kubeflow/mpi-operator examples (examples/v2beta1/pi: pi.yaml, pi-intel.yaml,
# pi-mpich.yaml), not the job builder. Changed only where this platform requires it: the image (the profile's),
# the program (mpi4py's hello world: the examples' pi binary is not in these images), no runAsUser 1000 where the
# namespace assigns UIDs (OpenShift's restricted-v2 refuses it) and the fields Pod Security `restricted` demands,
# and the programs in args (pi-intel.yaml's form), so that the image's entrypoint runs.
UPSTREAM_SSHD = ["/usr/sbin/sshd", "-De", "-f", "/home/mpiuser/.sshd_config"]
UPSTREAM_PROGRAM = ["python3", "-m", "mpi4py.bench", "helloworld"]
HELLO = re.compile(r"Hello, World! I am process\s+(\d+) of (\d+) on (\S+?)\.?$", re.MULTILINE)
# Prints "<name> <epoch seconds>" as each name first answers in the cluster DNS, every 0.2 s until all do.
DNS_PROBE = """left="$*"
while [ -n "$left" ]; do
    next=""
    for n in $left; do
        if getent -s dns hosts "$n" >/dev/null; then echo "$n $(date +%s.%N)"; else next="$next $n"; fi
    done
    left="$next"
    sleep 0.2
done"""


def _dns_probe(kube, ns: str, image: str, names: list[str], where: placement.Placement) -> None:
    kube.core.create_namespaced_pod(ns, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dns-probe"},
        "spec": {"restartPolicy": "Never", "activeDeadlineSeconds": 300, **placement.pod_spec(where), "containers": [{
            "name": "probe", "image": image, "args": ["sh", "-c", DNS_PROBE, "probe", *names],
            "securityContext": jobs.security_context(None),
            "resources": {"limits": {"cpu": "50m", "memory": "32Mi"}}}]}})


def _upstream_mpijob(name: str, ns: str, implementation: str, image: str, uid: int | None, placed: dict) -> dict:
    security = jobs.security_context(uid)
    # The examples' limits; requests added (a limit alone is the request too): 9 pods at once fit a 2-CPU node.
    resources = {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "50m", "memory": "128Mi"}}

    def replica(role: str, args: list[str], probe: bool) -> dict:
        container = {"name": f"mpi-{role}", "image": image, "args": args, "securityContext": security,
                     "resources": resources}
        if probe:  # pi-intel.yaml's; the others' workers are Ready once started
            container["readinessProbe"] = {"tcpSocket": {"port": 2222}, "initialDelaySeconds": 2}
        return {"replicas": 2 if role == "worker" else 1, "template": {"spec": {"containers": [container], **placed}}}

    return {"apiVersion": f"{MPIJOB.group}/{MPIJOB.version}", "kind": "MPIJob",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"slotsPerWorker": 1, "runPolicy": {"cleanPodPolicy": "Running"},
                     "sshAuthMountPath": "/home/mpiuser/.ssh", "mpiImplementation": implementation,
                     "launcherCreationPolicy": "WaitForWorkersReady",
                     "mpiReplicaSpecs": {
                         "Launcher": replica("launcher", ["mpirun", "-n", "2", *UPSTREAM_PROGRAM], False),
                         "Worker": replica("worker", UPSTREAM_SSHD, implementation == "Intel")}}}


@pytest.mark.requirement("JOB-13", needs=["pod_network"])
def test_upstream_style_mpijobs_run_unchanged(kube, run, settings, place):
    """Each MPI's job as users write it from the kubeflow/mpi-operator pi examples (launcherCreationPolicy
    WaitForWorkersReady, `mpirun -n 2 <program>` in the launcher, `sshd -De -f ~/.sshd_config` in the workers,
    sshAuthMountPath ~/.ssh, non-root; no mpiplat job builder, no DNS or SSH waits of its own), submitted as
    written, must succeed with both ranks saying hello from their own worker. Reports, per MPI, worker Ready ->
    its name resolving for a probe pod that asks from the start, as a launcher that does not wait would: the DNS
    caches a "no such name" for its negative TTL (CoreDNS: the kubernetes plugin's ttl, 5 s here, 30 s in
    kubeadm's Corefile), so an early asker waits up to that long (the image's entrypoint waits for the names, as
    mpi-operator's base images do). Fails with the job's diagnosis: e.g. MPICH's launcher that cannot resolve a
    worker (kubeflow/mpi-operator#443) hangs, and diagnose reads why."""
    ns = run.namespace()
    uid = None if identity.uid_range(kube, ns) else 1000  # the examples' runAsUser where the namespace assigns none
    where = place(real=True)
    placed = placement.pod_spec(where)
    names = {impl: f"pi-{impl.lower()}" for impl in jobs.IMPLEMENTATIONS}
    _dns_probe(kube, ns, settings.images["OpenMPI"], [f"{n}-worker-{i}.{n}.{ns}.svc" for n in names.values()
                                                      for i in range(2)], where)
    wait_pods(kube, ns, "", lambda ps: any(p.status.phase == "Running" for p in ps), timeout=120)
    for impl, name in names.items():
        submit(kube, MPIJOB, _upstream_mpijob(name, ns, impl, settings.images[impl], uid, placed))
    deadline = kube.deadline(120)  # for the three at once
    ready: dict[str, dict[str, object]] = {name: {} for name in names.values()}  # job -> worker -> Ready at
    launched: set[str] = set()  # jobs whose launcher pod was seen

    def launchers_seen(pods: list) -> bool:  # workers go when their job ends (cleanPodPolicy Running)
        for p in pods:
            job, role = p.metadata.labels.get(JOB_LABEL), p.metadata.labels.get(ROLE_LABEL)
            at = [c.last_transition_time for c in p.status.conditions or [] if c.type == "Ready" and c.status == "True"]
            if role == "worker" and at and job in ready:
                ready[job][p.metadata.name] = at[0]
            if role == "launcher" and job in ready:
                launched.add(job)
        return launched == set(ready)

    try:
        wait_pods(kube, ns, f"{JOB_LABEL} in ({','.join(names.values())})", launchers_seen, timeout=120)
    except TimeoutError:
        pass  # the jobs' own waits below say which and why
    wrong, pending = [], dict(names)
    while pending and time.monotonic() < deadline:  # until each ends, or its launcher's log says it is stuck
        for impl, name in list(pending.items()):
            job = kube.find(MPIJOB, name, ns) or {}
            ended = any(has_condition(job, c) for c in ("Succeeded", "Failed"))
            stuck = None if ended else stuck_launcher(kube, ns, name)
            if not ended and stuck is None:
                continue
            del pending[impl]
            [launcher] = kube.core.list_namespaced_pod(
                ns, label_selector=f"{JOB_LABEL}={name},{ROLE_LABEL}=launcher").items[-1:] or [None]
            log = (kube.core.read_namespaced_pod_log(launcher.metadata.name, ns) or "") if launcher else ""
            if not has_condition(job, "Succeeded"):
                wrong.append(f"{impl}: the job did not succeed: {stuck or diagnose(kube, ns, name)}\n"
                             f"--- launcher log\n{log[-1500:]}")
                continue
            said = HELLO.findall(log)
            if sorted((r, n) for r, n, _ in said) != [("0", "2"), ("1", "2")] or \
                    sorted(h for _, _, h in said) != [f"{name}-worker-{i}" for i in range(2)]:
                wrong.append(f"{impl}: expected ranks 0 and 1 of 2 saying hello, one from each worker; "
                             f"the launcher's log:\n{log[-1500:]}")
        time.sleep(2 if pending else 0)
    wrong += [f"{impl}: did not end in time: {diagnose(kube, ns, name)}" for impl, name in pending.items()]
    probe = kube.core.read_namespaced_pod_log("dns-probe", ns) or ""  # None: it printed nothing
    resolved = {n: float(t) for n, t in re.findall(r"^(\S+) ([0-9.]+)$", probe, re.MULTILINE)}
    for impl, name in names.items():
        lag = [resolved[f"{pod}.{name}.{ns}.svc"] - at.timestamp() for pod, at in ready[name].items()
               if f"{pod}.{name}.{ns}.svc" in resolved]
        if len(lag) == 2:  # Ready's time is to the second: the figure is too
            run.record("JOB-13", f"{impl}: worker Ready -> its name resolves for a client that asked before (slowest "
                       "of 2, to the second)", max(0.0, *lag), "s")
    assert not wrong, "\n".join(wrong)
