"""The MPIJob SDK (mpiplat.sdk) and `mpiplat job`: offline (loading, validation, the CLI's parsing) and on the
local cluster (lifecycle on simulated nodes; logs, the SC-001 snippet and the CLI on the real node; errors)."""

from __future__ import annotations

import asyncio
import base64
import copy
import inspect
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from mpiplat import AsyncClient, Client, JobError, MPIJob, cli, jobs
from mpiplat.conformance.placement import placement
from mpiplat.jobcli import TIMED_OUT, split_program
from mpiplat.jobs import JobSpecError
from mpiplat.kube import CLUSTERQUEUE, LOCALQUEUE, MPIJOB, RESOURCEFLAVOR, WORKLOAD, Kube, has_condition
from mpiplat.sdk import Denied, Forbidden, JobNotFound, JobTimeout, NotEnoughGPUs, NotInstalled, _log_line, job_status

DOCS = Path(__file__).parents[3] / "docs" / "sdk.md"
REAL_IMAGE = "mpiplat.local/openmpi:1"

# An MPIJob as a user writes it from the upstream examples' shape (fields our builder does not set included).
UPSTREAM = """
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata:
  name: pi
  annotations: {team.example.com/owner: ana}
spec:
  slotsPerWorker: 1
  runPolicy:
    cleanPodPolicy: Running
    ttlSecondsAfterFinished: 60
  sshAuthMountPath: /home/mpiuser/.ssh
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          containers:
          - image: mpioperator/mpi-pi:openmpi
            name: mpi-launcher
            securityContext: {runAsUser: 1000}
            command: [mpirun]
            args: [-n, "2", /home/mpiuser/pi]
            resources:
              limits: {cpu: 1, memory: 1Gi}
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - image: mpioperator/mpi-pi:openmpi
            name: mpi-worker
            securityContext: {runAsUser: 1000}
            command: [/usr/sbin/sshd]
            args: [-De, -f, /home/mpiuser/.sshd_config]
            resources:
              limits: {cpu: 1, memory: 1Gi}
"""


# ---------------------------------------------------------------- offline

def test_upstream_yaml_loads_and_dumps_back_without_loss():
    original = yaml.safe_load(UPSTREAM)
    job = MPIJob.from_yaml(UPSTREAM)
    assert (job.name, job.workers, job.implementation, job.image, job.namespace) == (
        "pi", 2, "OpenMPI", "mpioperator/mpi-pi:openmpi", None)
    assert job.launcher_creation_policy == "AtStartup"  # the operator's default when the field is absent
    assert job.manifest() == original
    assert yaml.safe_load(job.to_yaml()) == original


def test_an_edited_loaded_job_changes_only_the_edited_fields():
    job = MPIJob.from_yaml(UPSTREAM)
    job.workers, job.queue, job.gpus_per_worker = 4, "team-a", 1
    job.launcher_creation_policy, job.required_topology = "WaitForWorkersReady", "mpiplat.io/rack"
    got, want = job.manifest(), yaml.safe_load(UPSTREAM)
    worker = want["spec"]["mpiReplicaSpecs"]["Worker"]
    worker["replicas"] = 4
    worker["template"].setdefault("metadata", {})["annotations"] = {jobs.REQUIRED_TOPOLOGY: "mpiplat.io/rack"}
    worker["template"]["spec"]["containers"][0]["resources"] = {
        "limits": {"cpu": 1, "memory": "1Gi", jobs.GPU_RESOURCE: "1"}, "requests": {jobs.GPU_RESOURCE: "1"}}
    want["metadata"]["labels"] = {jobs.QUEUE_LABEL: "team-a"}
    want["spec"]["launcherCreationPolicy"] = "WaitForWorkersReady"
    assert got == want


def test_a_built_job_round_trips_through_its_manifest():
    built = MPIJob(name="b", namespace="ns", workers=3, queue="q", gpus_per_worker=2, required_topology="rack")
    loaded = MPIJob.from_manifest(built.manifest())
    assert loaded.manifest() == built.manifest()
    assert (loaded.workers, loaded.queue, loaded.gpus_per_worker, loaded.launcher_creation_policy,
            loaded.required_topology) == (3, "q", 2, "WaitForWorkersReady", "rack")
    loaded.required_topology = None
    assert jobs.REQUIRED_TOPOLOGY not in loaded.manifest()["spec"]["mpiReplicaSpecs"]["Worker"]["template"][
        "metadata"]["annotations"]


@pytest.mark.parametrize(("change", "words"), [
    ({"workers": "2"}, ["workers", "'2'", "int"]),
    ({"workers": 0}, ["workers is 0", ">= 1"]),
    ({"required_topology": "a rack"}, ["required_topology is 'a rack'", "node label key"]),
    ({"command": "hostname"}, ["command", "list[str]"]),
    ({"labels": {"a": 1}}, ["labels", "dict[str, str]"]),
    ({"gpus_per_worker": True}, ["gpus_per_worker", "int"]),
    ({"name": "Pi.2"}, ["name 'Pi.2'", "DNS-1035"]),
    ({"namespace": "A"}, ["namespace 'A'", "DNS-1123"]),
    ({"implementation": "LAM"}, ["implementation 'LAM'", "OpenMPI, Intel, MPICH"]),
    ({"launcher_creation_policy": "Later"}, ["launcher_creation_policy", "WaitForWorkersReady, AtStartup"]),
])
def test_bad_values_name_the_field_and_what_is_allowed_before_any_api_call(tmp_path, change, words):
    # A kubeconfig whose server answers nothing: any API call would fail with a connection error instead.
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "team-a"}}]}))
    c = Client(kubeconfig=str(kubeconfig))
    assert c.namespace == "team-a"  # the context's namespace, like kubectl
    with pytest.raises(JobSpecError) as err:
        c.create(MPIJob(**{"name": "pi", **change}))
    assert all(w in str(err.value) for w in words), err.value


def test_a_manifest_of_another_kind_is_refused():
    with pytest.raises(JobSpecError, match=r"apiVersion/kind is 'batch/v1 Job'; allowed: kubeflow.org/v2beta1"):
        MPIJob.from_manifest({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}})
    broken = yaml.safe_load(UPSTREAM)
    del broken["spec"]["mpiReplicaSpecs"]["Worker"]
    with pytest.raises(JobSpecError, match=r"spec.mpiReplicaSpecs.Worker is missing"):
        MPIJob.from_manifest(broken)


def test_log_lines_parse_the_kubelets_nanosecond_timestamps():
    line = _log_line("pi-launcher-x", "2026-11-24T12:00:01.123456789Z rank 0 of 2")
    assert (line.text, line.time.isoformat()) == ("rank 0 of 2", "2026-11-24T12:00:01.123456+00:00")
    assert line.format() == "[pi-launcher-x] rank 0 of 2"
    assert line.format(timestamps=True) == "[pi-launcher-x] 2026-11-24T12:00:01.123+00:00 rank 0 of 2"
    assert _log_line("p", "no stamp here").text == "no stamp here"


def test_create_takes_the_program_after_the_double_dash():
    assert split_program(["job", "create", "pi", "--workers", "2", "--", "python3", "-c", "print(1)"]) == (
        ["job", "create", "pi", "--workers", "2"], ["python3", "-c", "print(1)"])
    assert split_program(["job", "get", "--", "x"]) == (["job", "get", "--", "x"], [])


def test_job_create_dry_run_prints_the_builders_manifest(capsys):
    assert cli.main(["job", "create", "pi", "--workers", "3", "--queue", "q", "--dry-run", "--",
                     "python3", "-c", "print(1)"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed == MPIJob(name="pi", workers=3, queue="q", command=["python3", "-c", "print(1)"]).manifest()


def test_job_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["job", "logs", "pi", "--worker", "1", "--all"])
    assert exit_.value.code == 2
    with pytest.raises(SystemExit) as exit_:
        cli.main(["job", "create", "pi", "--dry-run"])  # no program
    assert exit_.value.code == 2 and "a command after --" in capsys.readouterr().err


def test_the_async_client_has_every_public_method_of_the_client_as_a_coroutine():
    """AsyncClient is made from Client: each public method a coroutine (follow_logs an async iterator) with the
    same parameters, so a method added to Client is never missing from AsyncClient."""
    public = {n: m for n, m in inspect.getmembers(Client, inspect.isfunction) if not n.startswith("_")}
    assert {"create", "installed", "pods", "workload", "describe"} <= set(public)
    for name, method in public.items():
        made = getattr(AsyncClient, name, None)
        assert made is not None, f"AsyncClient lacks {name}"
        kind = inspect.isasyncgenfunction if name == "follow_logs" else inspect.iscoroutinefunction
        assert kind(made), f"AsyncClient.{name} is not a coroutine"
        assert inspect.signature(made).parameters.keys() == inspect.signature(method).parameters.keys(), name


def test_sdk_snippet_in_the_docs_has_at_most_10_lines():
    snippet = _snippet()
    assert 0 < len(snippet.strip().splitlines()) <= 10, snippet


def _snippet() -> str:
    found = re.search(r"<!-- SC-001 -->\n```python\n(.*?)```", DOCS.read_text(), re.S)
    assert found, f"{DOCS} has no SC-001 snippet"
    return found.group(1)


# ---------------------------------------------------------------- on the local cluster

def _simulated(**kw) -> dict:
    """On the KWOK nodes (the simulated pod lifecycle of localcluster/stages.yaml)."""
    return {**placement(real=False, kwok_nodes=True), **kw}


def _failing(name: str) -> MPIJob:
    """A simulated job whose worker 0 is OOMKilled at once and whose launcher then fails (on KWOK, a launcher
    fails only when told to), so the job ends Failed. AtStartup: the launcher does not wait for the workers."""
    return MPIJob(name=name, workers=2, launcher_creation_policy="AtStartup",
                  worker_labels={jobs.FAIL_LABEL: "true"},
                  worker_annotations={jobs.FAIL_REASON: "OOMKilled", jobs.FAIL_EXIT_CODE: "137", jobs.FAIL_DELAY: "1s"},
                  launcher_labels={jobs.FAIL_LABEL: "true"},
                  launcher_annotations={jobs.FAIL_REASON: "Error", jobs.FAIL_EXIT_CODE: "1", jobs.FAIL_DELAY: "3s"},
                  **_simulated())


@pytest.fixture
def sdk(kube: Kube, namespace: str) -> Client:
    return Client(namespace, kube=kube)


@pytest.mark.cluster
def test_lifecycle_on_simulated_nodes(sdk: Client, namespace):
    created = sdk.create(MPIJob(name="life", workers=2, launcher_annotations={jobs.COMPLETE_AFTER: "2s"},
                                **_simulated()))
    assert created.namespace == namespace and created.source["metadata"]["uid"]
    assert [j.name for j in sdk.list()] == ["life"]
    assert "life" in [j.name for j in sdk.list(all_namespaces=True) if j.namespace == namespace]
    assert sdk.get("life").workers == 2
    done = sdk.wait_for_completion("life", timeout=90)
    assert (done.phase, done.diagnosis, done.finished) == ("Succeeded", None, True)
    assert sdk.status("life").completion_time
    sdk.delete("life", wait=True)
    with pytest.raises(JobNotFound, match=f"MPIJob {namespace}/life not found"):
        sdk.get("life")


@pytest.mark.cluster
def test_a_failed_job_comes_back_with_its_diagnosis(sdk: Client):
    sdk.create(_failing("oom"))
    done = sdk.wait_for_completion("oom", timeout=90)
    assert done.phase == "Failed" and not done.succeeded
    assert "worker" in done.diagnosis.cause and "OOMKilled" in done.diagnosis.cause, done.diagnosis


@pytest.mark.cluster
def test_a_wait_that_times_out_says_where_the_job_is(sdk: Client):
    sdk.create(MPIJob(name="slow", workers=2, launcher_annotations={jobs.COMPLETE_AFTER: "300s"}, **_simulated()))
    sdk.wait("slow", until="running", timeout=60)
    with pytest.raises(JobTimeout) as err:
        sdk.wait_for_completion("slow", timeout=2)
    assert err.value.status.phase == "Running" and err.value.status.diagnosis is not None
    assert "is Running, not finished, after 2s" in str(err.value)


@pytest.mark.cluster
def test_too_many_gpus_are_refused_with_requested_and_available_before_submission(sdk: Client, kube):
    per_node = max(int(n.status.allocatable.get(jobs.GPU_RESOURCE, "0")) for n in kube.core.list_node().items)
    with pytest.raises(NotEnoughGPUs, match=rf"each worker requests {per_node + 1} nvidia.com/gpu, but no node has "
                                            rf"more than {per_node} allocatable"):
        sdk.create(MPIJob(name="big", gpus_per_worker=per_node + 1, **_simulated()))
    with pytest.raises(NotEnoughGPUs, match=r"the job requests 8000 nvidia.com/gpu \(1000 workers x 8\)"):
        sdk.create(MPIJob(name="big", workers=1000, gpus_per_worker=8, **_simulated()))
    assert sdk.list() == []


@pytest.mark.cluster
def test_a_quota_refusal_carries_the_quotas_numbers(sdk: Client, kube, namespace):
    kube.core.create_namespaced_resource_quota(namespace, client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="no-mpijobs"),
        spec=client.V1ResourceQuotaSpec(hard={"count/mpijobs.kubeflow.org": "0"})))
    deadline = time.monotonic() + 30  # the quota controller fills in status.hard
    while not (kube.core.read_namespaced_resource_quota("no-mpijobs", namespace).status.hard or {}):
        assert time.monotonic() < deadline, "ResourceQuota status never set"
        time.sleep(0.2)
    with pytest.raises(Denied, match=r"ResourceQuota refuses MPIJob .*/q: exceeded quota: no-mpijobs, "
                                     r"requested: count/mpijobs.kubeflow.org=1, used: .*=0, limited: .*=0"):
        sdk.create(MPIJob(name="q", **_simulated()))


def _kubeconfig_of(kube: Kube, namespace: str, account: str, path: Path) -> str:
    """A kubeconfig that authenticates as ServiceAccount `account` (a short-lived token)."""
    kube.core.create_namespaced_service_account(namespace, client.V1ServiceAccount(
        metadata=client.V1ObjectMeta(name=account)))
    token = kube.core.create_namespaced_service_account_token(account, namespace, client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600))).status.token
    cfg = kube.api_client.configuration
    ca = Path(cfg.ssl_ca_cert).read_bytes() if cfg.ssl_ca_cert else b""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "c", "cluster": {"server": cfg.host,
                                               "certificate-authority-data": base64.b64encode(ca).decode()}}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": account, "namespace": namespace}}]}))
    return str(path)


@pytest.mark.cluster
def test_rbac_refusal_names_the_user_the_verb_and_the_namespace(kube, namespace, tmp_path):
    kubeconfig = _kubeconfig_of(kube, namespace, "no-rights", tmp_path / "kc")
    c = Client(kubeconfig=kubeconfig)
    with pytest.raises(Forbidden, match=rf"user system:serviceaccount:{namespace}:no-rights lacks 'create' on "
                                        rf"mpijobs in namespace {namespace}"):
        c.create(MPIJob(name="x", **_simulated()))
    with pytest.raises(Forbidden, match="lacks 'list' on mpijobs"):
        c.list()


def _team_queue(kube: Kube, namespace: str) -> str:
    """A ClusterQueue with 8 GPUs of a flavor of its own, and LocalQueue `team` to it; the names are the test's."""
    flavor, cq = f"{namespace}-f", f"{namespace}-cq"
    kube.create(RESOURCEFLAVOR, {"apiVersion": RESOURCEFLAVOR.api_version, "kind": "ResourceFlavor",
                                 "metadata": {"name": flavor}})
    kube.create(CLUSTERQUEUE, {"apiVersion": CLUSTERQUEUE.api_version, "kind": "ClusterQueue",
                               "metadata": {"name": cq}, "spec": {"namespaceSelector": {}, "resourceGroups": [{
                                   "coveredResources": ["cpu", "memory", jobs.GPU_RESOURCE],
                                   "flavors": [{"name": flavor, "resources": [
                                       {"name": "cpu", "nominalQuota": "10"},
                                       {"name": "memory", "nominalQuota": "10Gi"},
                                       {"name": jobs.GPU_RESOURCE, "nominalQuota": "8"}]}]}]}})
    kube.create(LOCALQUEUE, {"apiVersion": LOCALQUEUE.api_version, "kind": "LocalQueue",
                             "metadata": {"name": "team", "namespace": namespace}, "spec": {"clusterQueue": cq}})
    return cq


@pytest.mark.cluster
def test_suspend_and_resume_of_a_queued_job_act_on_its_workload(sdk: Client, kube, namespace):
    cq = _team_queue(kube, namespace)
    try:
        sdk.create(MPIJob(name="queued", workers=2, gpus_per_worker=2, queue="team",
                          launcher_annotations={jobs.COMPLETE_AFTER: "300s"}, **_simulated()))
        assert sdk.wait("queued", until="running", timeout=60).phase == "Running"
        said = sdk.suspend("queued")
        assert said.startswith("deactivated Kueue Workload"), said
        wl = sdk.workload("queued")
        assert wl["spec"]["active"] is False
        kube.wait_for(MPIJOB, "queued", namespace, lambda o: o["spec"]["runPolicy"]["suspend"], 30,
                      "suspended by Kueue")
        described = sdk.describe("queued")
        assert described["queue"]["active"] is False and described["queue"]["local_queue"] == "team"
        assert sdk.resume("queued").startswith("reactivated Kueue Workload")
        kube.wait_for(MPIJOB, "queued", namespace, lambda o: not o["spec"]["runPolicy"]["suspend"], 60,
                      "resumed by Kueue")
        kube.wait_for(WORKLOAD, wl["metadata"]["name"], namespace, lambda w: has_condition(w, "Admitted"), 30,
                      "admitted again")
    finally:
        sdk.delete("queued", wait=True)
        kube.delete(LOCALQUEUE, "team", namespace)
        kube.delete(CLUSTERQUEUE, cq)
        kube.delete(RESOURCEFLAVOR, f"{namespace}-f")


@pytest.mark.cluster
def test_a_job_without_an_image_gets_the_clusters_which_any_signed_in_user_may_read(sdk: Client, kube, namespace,
                                                                                     tmp_path):
    """The installer names the cluster's MPI images (the mpi_operator role's mpi_operator_default_images: the local
    ones here); a ServiceAccount with no rights reads them, and a job that names no image gets its MPI's."""
    nobody = Client(kubeconfig=_kubeconfig_of(kube, namespace, "reader", tmp_path / "kc"))
    assert nobody.default_images() == {"OpenMPI": "mpiplat.local/openmpi:1", "Intel": "mpiplat.local/intel:1",
                                       "MPICH": "mpiplat.local/mpich:1"}
    made = sdk.create(MPIJob(name="no-image", implementation="MPICH", suspend=True, **_simulated()))
    assert made.image == "mpiplat.local/mpich:1"
    assert sdk.create(MPIJob(name="own-image", image="example.com/mine:1", suspend=True, **_simulated())).image == \
        "example.com/mine:1"


@pytest.mark.cluster
def test_a_job_without_a_queue_is_suspended_through_its_run_policy(sdk: Client):
    sdk.create(MPIJob(name="plain", workers=2, launcher_annotations={jobs.COMPLETE_AFTER: "300s"}, **_simulated()))
    assert "runPolicy.suspend to true" in sdk.suspend("plain")
    assert sdk.wait("plain", until="suspended", timeout=60).phase == "Suspended"  # once the operator stopped it
    assert "runPolicy.suspend to false" in sdk.resume("plain")
    assert sdk.wait("plain", until="running", timeout=60).phase == "Running"


@pytest.mark.cluster
def test_async_client_submits_concurrently(kube, namespace):
    async def main() -> list[str]:
        async with AsyncClient(namespace, kube=kube) as c:
            await asyncio.gather(*(c.create(MPIJob(name=f"a{i}", suspend=True, **_simulated())) for i in range(20)))
            states = await asyncio.gather(*(c.status(f"a{i}") for i in range(20)))
            await asyncio.gather(*(c.delete(f"a{i}") for i in range(20)))
            return [s.phase for s in states]
    assert asyncio.run(main()) == ["Suspended"] * 20


PRINT_RANKS = ("from mpi4py import MPI; import socket; c = MPI.COMM_WORLD; "
               "print(f'rank {c.rank} of {c.size} on {socket.gethostname()}', flush=True)")


@pytest.mark.cluster
def test_logs_of_real_pods_interleave_by_time_with_a_prefix_per_pod(sdk: Client, namespace):
    # cleanPodPolicy None: the workers (and their sshd logs) stay after the launcher succeeds.
    sdk.create(MPIJob(name="ranks", workers=2, image=REAL_IMAGE, command=["python3", "-c", PRINT_RANKS],
                      clean_pod_policy="None"))
    streamed = list(sdk.follow_logs("ranks", which="all", timeout=240))  # from before the launcher exists
    assert sdk.wait_for_completion("ranks", timeout=240).phase == "Succeeded", sdk.diagnose("ranks")
    launcher = sdk.logs("ranks")
    ranks = sorted(ln.text for ln in launcher if ln.text.startswith("rank "))
    assert [r.split(" on ")[0] for r in ranks] == ["rank 0 of 2", "rank 1 of 2"], launcher
    assert {ln.pod for ln in launcher} == {sdk.pods("ranks", which="launcher")[0].metadata.name}
    every = sdk.logs("ranks", which="all")
    assert {ln.pod for ln in every} >= {p.metadata.name for p in sdk.pods("ranks")}, every  # sshd logs too
    assert [ln.time for ln in every] == sorted(ln.time for ln in every)
    assert sdk.logs("ranks", which=1) and {ln.pod for ln in sdk.logs("ranks", which=1)} == {"ranks-worker-1"}
    assert [ln.text for ln in sdk.logs("ranks", grep=r"^rank 1 ")] == [r for r in ranks if r.startswith("rank 1")]
    assert {ln.text for ln in launcher} <= {ln.text for ln in streamed if ln.pod == launcher[0].pod}, streamed


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.cluster
def test_the_job_commands_on_the_real_node(kube, namespace, capsys):
    access = ["--kubeconfig", kube.kubeconfig, "-n", namespace]
    code, out, _ = _cli(capsys, "job", "create", "clirun", "--workers", "2", "--image", REAL_IMAGE,
                        "--clean-pod-policy", "None", *access, "--", "python3", "-c", PRINT_RANKS)
    assert (code, out) == (0, f"mpijob.kubeflow.org/clirun created in namespace {namespace}\n")
    code, out, _ = _cli(capsys, "job", "wait", "clirun", "--for", "succeeded", "--timeout", "240", *access)
    assert code == 0 and out.startswith("mpijob.kubeflow.org/clirun Succeeded"), out
    code, out, _ = _cli(capsys, "job", "get", *access)
    assert code == 0 and re.search(r"^clirun\s+Succeeded\s+\d/2\s+-\s+\d+[smh]$", out, re.M), out
    code, out, _ = _cli(capsys, "job", "get", "clirun", "-o", "json", *access)
    assert json.loads(out)["status"]["conditions"] and json.loads(out)["metadata"]["name"] == "clirun"
    code, out, _ = _cli(capsys, "job", "logs", "clirun", "--all", "--timestamps", *access)
    assert code == 0 and re.search(r"^\[clirun-launcher-\w+\] 20\d\d-\S+ rank 0 of 2 on ", out, re.M), out
    assert re.search(r"^\[clirun-worker-0\] ", out, re.M), out
    code, out, _ = _cli(capsys, "job", "logs", "clirun", "-f", "--grep", "rank 1", *access)
    assert code == 0 and out.count("\n") == 1 and "rank 1 of 2" in out, out
    code, out, _ = _cli(capsys, "job", "describe", "clirun", *access)
    for part in ("Phase:      Succeeded", "Succeeded  True", "Queue:      none", "clirun-worker-1", "Events:",
                 "cause:  the job succeeded"):
        assert part in out, out
    code, out, _ = _cli(capsys, "job", "delete", "clirun", "--wait", *access)
    assert (code, out) == (0, "mpijob.kubeflow.org/clirun deleted\n")
    code, _, err = _cli(capsys, "job", "get", "clirun", *access)
    assert code == 1 and err == f"error: MPIJob {namespace}/clirun not found\n"


@pytest.mark.cluster
def test_wait_exit_codes_for_scripts(kube, namespace, capsys, tmp_path):
    access = ["--kubeconfig", kube.kubeconfig, "-n", namespace]
    job = _failing("fails")
    manifest = tmp_path / "job.yaml"
    manifest.write_text(job.to_yaml())
    assert _cli(capsys, "job", "create", "-f", str(manifest), *access)[0] == 0
    code, out, err = _cli(capsys, "job", "wait", "fails", "--for", "succeeded", "--timeout", "90", *access)
    assert code == 1 and "fails Failed" in out and "cause:" in err, (out, err)
    code, out, _ = _cli(capsys, "job", "wait", "fails", "--for", "failed", *access)
    assert code == 0
    slow = MPIJob(name="slow", workers=2, launcher_annotations={jobs.COMPLETE_AFTER: "300s"}, **_simulated())
    Client(namespace, kube=kube).create(slow)
    code, _, err = _cli(capsys, "job", "wait", "slow", "--timeout", "1", *access)
    assert code == TIMED_OUT and err.startswith("timed out: MPIJob"), err
    code, _, err = _cli(capsys, "job", "create", "-f", str(manifest), *access)
    assert code == 1 and "already exists" in err


@pytest.mark.cluster
def test_the_sc001_snippet_runs_on_the_real_node(kube, namespace, tmp_path):
    """The docs' notebook snippet, as printed, in a fresh interpreter whose kubeconfig context names the
    test's namespace."""
    config = yaml.safe_load(Path(kube.kubeconfig).read_text())
    for ctx in config["contexts"]:
        ctx["context"]["namespace"] = namespace
    (tmp_path / "kc").write_text(yaml.safe_dump(config))
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _snippet()], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "KUBECONFIG": str(tmp_path / "kc")})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Succeeded"), proc.stdout
    assert "rank 0 of 2" in proc.stdout and "rank 1 of 2" in proc.stdout, proc.stdout
    print(f"SC-001 snippet: {time.monotonic() - start:.1f}s")


def test_a_guardrail_denial_names_the_policy_and_its_numbers():
    """The API server's wording of a ValidatingAdmissionPolicy denial (the guardrails role's gpu-quota policy);
    on the cluster, the suite's GRD rows provoke it."""
    from kubernetes.client.exceptions import ApiException

    err = ApiException(status=422, reason="Unprocessable Entity")
    err.body = json.dumps({"kind": "Status", "code": 422, "message": (
        'mpijobs.kubeflow.org "big" is forbidden: ValidatingAdmissionPolicy \'mpiplat-gpu-quota\' with binding '
        "'mpiplat-gpu-quota' denied request: Requested 16 GPUs (2 workers x 8 GPUs); namespace quota 8, used 0, "
        "available 8")})
    found = Client._explain(Client.__new__(Client), err, "create", "team-a", "big")
    assert isinstance(found, Denied)
    assert str(found) == ("the cluster's guardrail mpiplat-gpu-quota refuses MPIJob team-a/big: Requested 16 GPUs "
                          "(2 workers x 8 GPUs); namespace quota 8, used 0, available 8")


def test_job_status_phases():
    base = MPIJob(name="s", namespace="n", queue="q").manifest()

    def phase(spec_suspend: bool, *conds: str) -> str:
        obj = copy.deepcopy(base)
        obj["spec"]["runPolicy"]["suspend"] = spec_suspend
        obj["status"] = {"conditions": [{"type": t, "status": "True"} for t in conds]}
        return job_status(obj).phase
    assert phase(False) == "Pending"
    assert phase(True, "Created") == "Queued"
    assert phase(False, "Created") == "Created"
    assert phase(False, "Created", "Running") == "Running"
    assert phase(True, "Created", "Running") == "Running"  # runPolicy.suspend set, the operator not yet there
    assert phase(False, "Created", "Running", "Failed") == "Failed"
    with pytest.raises(JobError, match="until is 'done'; allowed: succeeded, failed, running, suspended, finished"):
        Client.wait(Client.__new__(Client), "s", "n", until="done")


@pytest.mark.cluster
@pytest.mark.bare
def test_a_cluster_without_the_operator_is_named_so():
    """On a bare cluster (no CRDs: `make test`'s helm lane, before its install), in $KUBECONFIG."""
    kubeconfig = os.environ.get("KUBECONFIG")
    assert kubeconfig, "set KUBECONFIG to a bare cluster: MPIPLAT_CLUSTER=NAME mpiplat cluster up --bare"
    c = Client("default")
    assert not c.installed()
    for call in (lambda: c.create(MPIJob(name="x")), lambda: c.get("x"), c.list):
        with pytest.raises(NotInstalled, match=r"^the MPI Operator is not installed: the cluster serves no "
                                               r"kubeflow.org/v2beta1 mpijobs"):
            call()
    code = subprocess.run([sys.executable, "-m", "mpiplat.cli", "job", "get"], capture_output=True, text=True,
                          timeout=60)
    assert code.returncode == 1 and code.stderr.startswith("error: the MPI Operator is not installed"), code
