"""`diagnose` on queued jobs: ClusterQueue arithmetic with cohort borrowing (shared with the suite)."""

from __future__ import annotations

import datetime
import time
from types import SimpleNamespace

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mpiplat import diagnose as diagnose_module
from mpiplat import jobs
from mpiplat.conformance.placement import placement
from mpiplat.diagnose import (
    DaemonLost,
    KeyUnreadable,
    LauncherUnreachable,
    LoginRefused,
    LoginUnknown,
    RankSignalled,
    Unreachable,
    UserUnknown,
    diagnose,
    identity_failure,
    launcher_log_failure,
    pod_of_host,
    policies_selecting,
    stuck_launcher,
)
from mpiplat.jobs import INDEX_LABEL, JOB_LABEL, ROLE_LABEL
from mpiplat.kube import CLUSTERQUEUE, LOCALQUEUE, MPIJOB, RESOURCEFLAVOR, WORKLOAD
from mpiplat.queues import capacity

GPU = jobs.GPU_RESOURCE


def _cq(name: str, gpus: int, cohort: str = "c", reserved: int = 0, flavor: str = "f", **limits) -> dict:
    gpu = {"name": GPU, "nominalQuota": str(gpus), **{k: str(v) for k, v in limits.items()}}
    return {"metadata": {"name": name},
            "spec": {"cohortName": cohort, "resourceGroups": [{
                "coveredResources": ["cpu", "memory", GPU],
                "flavors": [{"name": flavor, "resources": [{"name": "cpu", "nominalQuota": "100"},
                                                           {"name": "memory", "nominalQuota": "1000Gi"}, gpu]}]}]},
            "status": {"flavorsReservation": [{"name": flavor, "resources": [{"name": GPU, "total": str(reserved)}]}]}}


def test_capacity_counts_what_the_cohort_may_lend():
    cqs = {"a": _cq("a", 12, reserved=12, lendingLimit=4), "b": _cq("b", 12, borrowingLimit=8),
           "lone": _cq("lone", 4, cohort="")}
    b = capacity(cqs, "b", GPU)
    assert (b.nominal, b.reserved, b.borrowable, b.borrow_ceiling, b.most) == (12, 0, 0, 4, 16)
    cqs["a"] = _cq("a", 12, reserved=6, lendingLimit=4)  # a's use fits in the 8 it does not lend
    assert capacity(cqs, "b", GPU).borrowable == 4
    cqs["a"] = _cq("a", 30, reserved=0)  # no lending limit: b's borrowing limit caps it
    assert capacity(cqs, "b", GPU).borrow_ceiling == 8
    assert capacity(cqs, "lone", GPU).most == 4


def _workload(kube, ns: str, job: str) -> dict:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = [w for w in kube.list(WORKLOAD, ns) if w["metadata"]["ownerReferences"][0]["name"] == job]
        if found and (found[0].get("status") or {}).get("conditions"):
            return found[0]
        time.sleep(0.3)
    raise TimeoutError(f"no Workload status for {ns}/{job}")


@pytest.mark.cluster
def test_a_job_that_could_borrow_is_never_called_unfittable(kube, namespace):
    """Queue `lender` is busy; `borrower` (4 GPUs, may borrow 4) gets a 6-GPU job: it waits for the
    cohort, it can fit. A 10-GPU job can never fit."""
    flavor, cohort = f"{namespace}-f", f"{namespace}-c"
    kube.create(RESOURCEFLAVOR, {"apiVersion": RESOURCEFLAVOR.api_version, "kind": "ResourceFlavor",
                                 "metadata": {"name": flavor}})
    queues = {"lender": _cq(f"{namespace}-lender", 4, cohort, flavor=flavor),
              "borrower": _cq(f"{namespace}-borrower", 4, cohort, flavor=flavor, borrowingLimit=4)}
    try:
        for cq in queues.values():
            kube.create(CLUSTERQUEUE, {"apiVersion": CLUSTERQUEUE.api_version, "kind": "ClusterQueue",
                                       "metadata": cq["metadata"], "spec": {"namespaceSelector": {}, **cq["spec"]}})
        for role, cq in queues.items():
            kube.create(LOCALQUEUE, {"apiVersion": LOCALQUEUE.api_version, "kind": "LocalQueue",
                                     "metadata": {"name": role, "namespace": namespace},
                                     "spec": {"clusterQueue": cq["metadata"]["name"]}})

        def job(name: str, queue: str, workers: int) -> None:
            # On the KWOK nodes: only they have GPUs.
            kube.create(MPIJOB, jobs.mpijob(jobs.MPIJob(name=name, namespace=namespace, workers=workers,
                                                        gpus_per_worker=2, queue=queue,
                                                        **placement(real=False, kwok_nodes=True))))

        job("busy", "lender", 2)  # 4 GPUs: all the lender has; it runs until the test ends
        kube.wait_for(MPIJOB, "busy", namespace, lambda o: not o["spec"]["runPolicy"]["suspend"], 30, "admitted")
        lender = queues["lender"]["metadata"]["name"]
        deadline = time.monotonic() + 30  # Kueue writes a ClusterQueue's usage to its status a little later
        while capacity({lender: kube.get(CLUSTERQUEUE, lender)}, lender, GPU).reserved < 4:
            assert time.monotonic() < deadline, f"{lender} status never showed the 4 GPUs in use"
            time.sleep(0.3)
        job("fits", "borrower", 3)  # 6 GPUs = 4 own + 2 borrowed, once the lender is idle
        job("huge", "borrower", 5)  # 10 GPUs > 4 + 4
        for name in ("fits", "huge"):
            _workload(kube, namespace, name)
        fits, huge = diagnose(kube, namespace, "fits"), diagnose(kube, namespace, "huge")
        assert fits.cause.startswith("queued:") and "never fit" not in fits.remedy, fits
        assert "0 borrowable now (at most 4); job needs 6" in fits.cause, fits
        assert huge.cause.startswith("queued:") and "can never fit" in huge.remedy, huge
    finally:
        for name in ("busy", "fits", "huge"):
            kube.delete(MPIJOB, name, namespace)
        for role, cq in queues.items():
            kube.delete(LOCALQUEUE, role, namespace)
            kube.delete(CLUSTERQUEUE, cq["metadata"]["name"])
        kube.delete(RESOURCEFLAVOR, flavor)


# ---- mpirun's reports in the launcher's log. Copied from real runs: 2-worker MPIJobs on the local
# reference cluster's real node (images mpiplat.local/{openmpi,intel,mpich}:1: Open MPI 4.1, Intel MPI,
# MPICH 4.0.2), rank 1 killed by `allreduce.py --kill-rank 1`, or worker 1's TCP 2222 closed by a
# NetworkPolicy (kube-router rejects: "Connection refused"); Open MPI 5.0.11 (prterun) from the local venv.

OPENMPI_KILLED = """\
allreduce: rank 1 on k1-worker-1 kills itself with SIGKILL
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
mpirun noticed that process rank 1 with PID 18 on node k1-worker-1.k1.cap-ompi3.svc exited on signal 9 (Killed).
--------------------------------------------------------------------------
"""
OPENMPI5_KILLED = """\
allreduce: rank 1 on vm kills itself with SIGKILL
--------------------------------------------------------------------------
prterun noticed that process rank 1 with PID 7078 on node vm exited on
signal 9 (Killed).
--------------------------------------------------------------------------
"""
INTEL_KILLED = """\
allreduce: rank 1 on k1-worker-1 kills itself with SIGKILL

===================================================================================
=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
=   RANK 1 PID 16 RUNNING AT k1-worker-1.k1.cap-intel.svc
=   KILLED BY SIGNAL: 9 (Killed)
===================================================================================
"""
# 2 workers x 2 slots, rank 3 killed: Intel MPI reports worker 1's ranks 2 and 3 (its cleanup killed rank 2).
INTEL_KILLED_2_SLOTS = """\
allreduce: rank 3 on k2-worker-1 kills itself with SIGKILL

===================================================================================
=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
=   RANK 2 PID 17 RUNNING AT k2-worker-1.k2.cap-s2-intel.svc
=   KILLED BY SIGNAL: 9 (Killed)
===================================================================================

===================================================================================
=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
=   RANK 3 PID 18 RUNNING AT k2-worker-1.k2.cap-s2-intel.svc
=   KILLED BY SIGNAL: 9 (Killed)
===================================================================================
"""
# Intel MPI with 3 ranks on one host (the local venv): every rank of the host's proxy is reported.
INTEL_KILLED_ONE_HOST = """\
allreduce: rank 1 on vm kills itself with SIGKILL

===================================================================================
=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
=   RANK 0 PID 7512 RUNNING AT vm
=   KILLED BY SIGNAL: 9 (Killed)
===================================================================================

===================================================================================
=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
=   RANK 1 PID 7513 RUNNING AT vm
=   KILLED BY SIGNAL: 9 (Killed)
===================================================================================

===================================================================================
=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
=   RANK 2 PID 7514 RUNNING AT vm
=   KILLED BY SIGNAL: 9 (Killed)
===================================================================================
"""
OPENMPI_KILLED_2_SLOTS = """\
allreduce: rank 3 on k2-worker-1 kills itself with SIGKILL
--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
mpirun noticed that process rank 3 with PID 18 on node k2-worker-1.k2.cap-s2-openmpi.svc exited on signal 9 (Killed).
--------------------------------------------------------------------------
"""
MPICH_KILLED = """\
allreduce: rank 1 on k1-worker-1 kills itself with SIGKILL

===================================================================================
=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
=   PID 14 RUNNING AT k1-worker-1.k1.cap-mpich.svc
=   EXIT CODE: 9
=   CLEANING UP REMAINING PROCESSES
=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES
===================================================================================
[proxy:0:0@k1-worker-0] HYD_pmcd_pmip_control_cmd_cb (pm/pmiserv/pmip_cb.c:899): assert (!closed) failed
[proxy:0:0@k1-worker-0] HYDT_dmxu_poll_wait_for_event (tools/demux/demux_poll.c:76): callback returned error status
[proxy:0:0@k1-worker-0] main (pm/pmiserv/pmip.c:169): demux engine error waiting for event
[mpiexec@k1-launcher] HYDT_bscu_wait_for_completion (tools/bootstrap/utils/bscu_wait.c:73): one of the processes terminated badly; aborting
[mpiexec@k1-launcher] HYDT_bsci_wait_for_completion (tools/bootstrap/src/bsci_wait.c:21): launcher returned error waiting for completion
[mpiexec@k1-launcher] HYD_pmci_wait_for_completion (pm/pmiserv/pmiserv_pmci.c:179): launcher returned error waiting for completion
[mpiexec@k1-launcher] main (ui/mpich/mpiexec.c:325): process manager error waiting for completion
"""  # noqa: E501 (as captured)
OPENMPI_SSH_REFUSED = """\
ssh: connect to host k5-worker-1.k5.cap-np-ompi.svc port 2222: Connection refused
--------------------------------------------------------------------------
ORTE was unable to reliably start one or more daemons.
This usually is caused by:

* not finding the required libraries and/or binaries on
  one or more nodes. Please check your PATH and LD_LIBRARY_PATH
  settings, or configure OMPI with --enable-orterun-prefix-by-default
"""
INTEL_SSH_FAILED = """\
[mpiexec@k5-launcher] Error: Unable to run bstrap_proxy on k5-worker-1.k5.cap-np-intel.svc (pid 13, exit code 65280)
[mpiexec@k5-launcher] poll_for_event (../../../../../src/pm/i_hydra/libhydra/demux/hydra_demux_poll.c:157): check exit codes error
[mpiexec@k5-launcher] HYD_dmx_poll_wait_for_proxy_event (../../../../../src/pm/i_hydra/libhydra/demux/hydra_demux_poll.c:206): poll for event error
[mpiexec@k5-launcher] HYD_bstrap_setup (../../../../../src/pm/i_hydra/libhydra/bstrap/src/intel/i_hydra_bstrap.c:1063): error waiting for event
[mpiexec@k5-launcher] Error setting up the bootstrap proxies
[mpiexec@k5-launcher] Possible reasons:
[mpiexec@k5-launcher] 1. Host is unavailable. Please check that all hosts are available.
[mpiexec@k5-launcher] 3. Firewall refused connection.
"""  # noqa: E501 (as captured)
# MPICH's mpiexec then waits on (the job stays Running).
MPICH_SSH_REFUSED = "ssh: connect to host k5-worker-1.k5.cap-np-mpich2.svc port 2222: Connection refused\n"
# OpenSSH in the same images, where a packet is dropped or no host answers ARP.
SSH_TIMED_OUT = "ssh: connect to host 192.0.2.1 port 2222: Connection timed out\n"
SSH_NO_ROUTE = "ssh: connect to host 10.244.0.250 port 2222: No route to host\n"


@pytest.mark.parametrize("log, host, sig, rank", [
    pytest.param(OPENMPI_KILLED, "k1-worker-1.k1.cap-ompi3.svc", 9, 1, id="openmpi4"),
    pytest.param(OPENMPI5_KILLED, "vm", 9, 1, id="openmpi5-wrapped"),
    pytest.param(INTEL_KILLED, "k1-worker-1.k1.cap-intel.svc", 9, 1, id="intel"),
    pytest.param(OPENMPI_KILLED_2_SLOTS, "k2-worker-1.k2.cap-s2-openmpi.svc", 9, 3, id="openmpi4-2-slots"),
    pytest.param(INTEL_KILLED_2_SLOTS, "k2-worker-1.k2.cap-s2-intel.svc", 9, None, id="intel-2-slots"),
    pytest.param(INTEL_KILLED_ONE_HOST, "vm", 9, None, id="intel-one-host"),
    pytest.param(MPICH_KILLED, "k1-worker-1.k1.cap-mpich.svc", 9, None, id="mpich"),
])
def test_a_rank_killed_by_a_signal_is_read_from_mpiruns_report(log, host, sig, rank):
    assert launcher_log_failure(log) == RankSignalled(host, sig, rank)


@pytest.mark.parametrize("log, found", [
    pytest.param(OPENMPI_SSH_REFUSED, Unreachable("k5-worker-1.k5.cap-np-ompi.svc", 2222, "Connection refused"),
                 id="openmpi"),
    pytest.param(MPICH_SSH_REFUSED, Unreachable("k5-worker-1.k5.cap-np-mpich2.svc", 2222, "Connection refused"),
                 id="mpich"),
    pytest.param(INTEL_SSH_FAILED, Unreachable("k5-worker-1.k5.cap-np-intel.svc", ssh_exit=255), id="intel"),
    pytest.param(SSH_TIMED_OUT, Unreachable("192.0.2.1", 2222, "Connection timed out"), id="timed-out"),
    pytest.param(SSH_NO_ROUTE, Unreachable("10.244.0.250", 2222, "No route to host"), id="no-route"),
])
def test_an_unreachable_host_is_read_from_the_ssh_error(log, found):
    assert launcher_log_failure(log) == found


def test_a_log_without_a_known_failure_names_nothing():
    assert launcher_log_failure("allreduce float64 x 1 on 4 ranks: PASS\n") is None
    assert launcher_log_failure("") is None


def test_hosts_map_to_the_jobs_pods():
    assert pod_of_host("k1-worker-1.k1.cap-ompi3.svc", "k1") == ("worker", 1)
    assert pod_of_host("k1-worker-12", "k1") == ("worker", 12)
    assert pod_of_host("k1-launcher.k1.ns.svc", "k1") == ("launcher", None)
    assert pod_of_host("k10-worker-1.k10.ns.svc", "k1") is None  # another job's worker
    assert pod_of_host("vm", "k1") is None


def _policy(name: str, selector: dict, types: list[str] | None = None, **rules) -> dict:
    spec = {"podSelector": selector, **rules}
    if types is not None:
        spec["policyTypes"] = types
    return {"metadata": {"name": name}, "spec": spec}


def test_policies_that_isolate_a_pod_are_named_by_direction():
    worker1 = {JOB_LABEL: "k5", ROLE_LABEL: "worker", INDEX_LABEL: "1"}
    policies = [
        _policy("deny-ssh", {"matchLabels": {JOB_LABEL: "k5", INDEX_LABEL: "1"}}, ["Ingress"]),
        _policy("default-deny", {}),  # no policyTypes, no egress rules: ingress only
        _policy("other-worker", {"matchLabels": {INDEX_LABEL: "0"}}, ["Ingress"]),
        _policy("not-launchers", {"matchExpressions": [{"key": ROLE_LABEL, "operator": "NotIn",
                                                         "values": ["launcher"]}]}, ["Ingress", "Egress"]),
        _policy("egress-only", {}, ["Egress"]),
        _policy("implied-egress", {"matchExpressions": [{"key": JOB_LABEL, "operator": "Exists"}]},
                egress=[{"to": []}]),
    ]
    assert policies_selecting(policies, worker1, "Ingress") == ["default-deny", "deny-ssh", "implied-egress",
                                                                "not-launchers"]
    assert policies_selecting(policies, worker1, "Egress") == ["egress-only", "implied-egress", "not-launchers"]
    launcher = {JOB_LABEL: "k5", ROLE_LABEL: "launcher"}
    assert policies_selecting(policies, launcher, "Egress") == ["egress-only", "implied-egress"]


# ---- diagnose() over a fake cluster: what the suite's FAIL-01 (real) and FAIL-05 assert.

def _pod(name: str, role: str, index: int | None, phase: str, exit_code: int | None = None,
         reason: str = "Error", **template_labels: str) -> client.V1Pod:
    labels = {**template_labels, JOB_LABEL: name.rsplit("-", 2 if index is not None else 1)[0], ROLE_LABEL: role,
              "training.kubeflow.org/operator-name": "mpi-operator"}
    if index is not None:
        labels[INDEX_LABEL] = str(index)
    state = (client.V1ContainerState(terminated=client.V1ContainerStateTerminated(exit_code=exit_code, reason=reason))
             if exit_code is not None else client.V1ContainerState(running=client.V1ContainerStateRunning()))
    status = client.V1ContainerStatus(name=role, image="i", image_id="", ready=exit_code is None, restart_count=0,
                                      state=state)
    return client.V1Pod(metadata=client.V1ObjectMeta(name=name, labels=labels,
                                                     creation_timestamp=datetime.datetime(2026, 1, 1)),
                        status=client.V1PodStatus(phase=phase, container_statuses=[status]))


class _FakeKube:
    """`logs`: a pod's log by its name, its previous container's by (name, "previous"); a log not there is a 400,
    as for a container not started. `log_reads`: (pod, container, previous) for each log read."""

    def __init__(self, job: dict, pods: list, logs: dict, endpoint_slices: dict | None = None):
        self.job, self.endpoint_slices = job, endpoint_slices or {}
        self.log_reads: list[tuple[str, str, bool]] = []

        def read_log(name, ns, container=None, previous=False, **kw):
            self.log_reads.append((name, container, previous))
            if (found := logs.get((name, "previous") if previous else name)) is None:
                raise ApiException(status=400, reason="Bad Request")
            return found

        self.core = SimpleNamespace(
            list_namespaced_pod=lambda ns, label_selector: SimpleNamespace(items=pods),
            read_namespaced_pod_log=read_log,
            list_namespaced_event=lambda ns: SimpleNamespace(items=[]))

    def get(self, kind, name, namespace=None):
        return self.job

    def call_path(self, method, path, body=None, query=None, timeout=10):
        """EndpointSlices of (namespace, service) from `endpoint_slices`; none where it has no entry."""
        namespace = path.split("/namespaces/")[1].split("/")[0]
        service = dict(query)["labelSelector"].split("=", 1)[1]
        return {"items": self.endpoint_slices.get((namespace, service), [])}

    def find(self, kind, name, namespace=None):
        return self.job


def _failed_job(name: str, ns: str) -> dict:
    manifest = jobs.mpijob(jobs.MPIJob(name=name, namespace=ns, worker_labels={"team": "a"}))
    manifest["status"] = {"conditions": [{"type": "Created", "status": "True"}, {"type": "Failed", "status": "True"}]}
    return manifest


def test_diagnose_names_the_worker_whose_rank_was_killed(monkeypatch):
    ns = "cap-ompi3"
    pods = [_pod("k1-launcher-s8bv9", "launcher", None, "Failed", 137),
            _pod("k1-worker-0", "worker", 0, "Running"), _pod("k1-worker-1", "worker", 1, "Running")]
    found = diagnose(_FakeKube(_failed_job("k1", ns), pods, {"k1-launcher-s8bv9": OPENMPI_KILLED}), ns, "k1")
    assert found.cause == ("worker 1 (k1-worker-1.k1.cap-ompi3.svc): MPI rank 1 killed by signal 9 "
                           "(SIGKILL, exit 137)"), found
    assert "memory limit" in found.remedy and "OOM killer" in found.remedy
    assert "launcher Error (exit 137)" in found.details


def test_diagnose_prefers_a_failed_worker_pod_to_the_launchers_log():
    ns = "cap-ompi3"
    pods = [_pod("k1-launcher-s8bv9", "launcher", None, "Failed", 137),
            _pod("k1-worker-1", "worker", 1, "Failed", 137, reason="OOMKilled")]
    found = diagnose(_FakeKube(_failed_job("k1", ns), pods, {"k1-launcher-s8bv9": OPENMPI_KILLED}), ns, "k1")
    assert found.cause == "worker 1 OOMKilled (exit 137)", found


@pytest.mark.parametrize("log, how", [
    (OPENMPI_SSH_REFUSED, "ssh to k5-worker-1.k5.cap-np-ompi.svc port 2222: Connection refused"),
    (INTEL_SSH_FAILED, "ssh to k5-worker-1.k5.cap-np-intel.svc failed (exit 255)"),
])
@pytest.mark.parametrize("worker_pods_left", [True, False], ids=["pods", "pods-cleaned-up"])
def test_diagnose_names_the_unreachable_worker_and_the_policies_in_the_way(monkeypatch, log, how, worker_pods_left):
    ns = "cap-np"
    pods = [_pod("k5-launcher-4prgp", "launcher", None, "Failed", 255)]
    if worker_pods_left:
        pods += [_pod("k5-worker-0", "worker", 0, "Running", team="a"),
                 _pod("k5-worker-1", "worker", 1, "Running", team="a")]
    policies = [_policy("deny-ssh-k5", {"matchLabels": {JOB_LABEL: "k5", INDEX_LABEL: "1"}}, ["Ingress"]),
                _policy("team-a-only", {"matchLabels": {"team": "a"}}, ["Ingress"]),  # the worker template's label
                _policy("worker-0", {"matchLabels": {INDEX_LABEL: "0"}}, ["Ingress"])]
    monkeypatch.setattr(diagnose_module, "_network_policies", lambda kube, namespace: policies)
    found = diagnose(_FakeKube(_failed_job("k5", ns), pods, {"k5-launcher-4prgp": log}), ns, "k5")
    assert found.cause == f"MPI communication failed: worker 1 unreachable ({how})", found
    assert "NetworkPolicies" in found.remedy and "TCP 2222" in found.remedy
    assert "limit ingress to worker 1: deny-ssh-k5, team-a-only;" in found.remedy, found.remedy
    assert "worker-0" not in found.remedy


def test_diagnose_says_when_no_policy_selects_the_unreachable_worker(monkeypatch):
    pods = [_pod("k5-launcher-4prgp", "launcher", None, "Failed", 255)]
    monkeypatch.setattr(diagnose_module, "_network_policies", lambda kube, namespace: [])
    found = diagnose(_FakeKube(_failed_job("k5", "ns"), pods, {"k5-launcher-4prgp": OPENMPI_SSH_REFUSED}), "ns", "k5")
    assert found.cause.startswith("MPI communication failed: worker 1 unreachable"), found
    assert "none selects the job's pods" in found.remedy


def test_diagnose_reads_a_running_jobs_launcher_log(monkeypatch):
    """MPICH's mpiexec waits on after ssh failed: the job stays Running, the diagnosis says why."""
    job = _failed_job("k5", "ns")
    job["status"]["conditions"] = [{"type": "Running", "status": "True"}]
    pods = [_pod("k5-launcher-wdxhl", "launcher", None, "Running"), _pod("k5-worker-1", "worker", 1, "Running")]
    monkeypatch.setattr(diagnose_module, "_network_policies", lambda kube, namespace: [])
    found = diagnose(_FakeKube(job, pods, {"k5-launcher-wdxhl": MPICH_SSH_REFUSED}), "ns", "k5")
    assert found.state == "Running" and "worker 1 unreachable" in found.cause, found


SSH_UNRESOLVED = ("ssh: Could not resolve hostname k5-worker-1.k5.ns.svc: Temporary failure in name resolution\r\n"
                  "--------------------------------------------------------------------------\n"
                  "ORTE was unable to reliably start one or more daemons.\n")


def test_diagnose_points_at_the_cluster_dns_when_a_workers_name_does_not_resolve(monkeypatch):
    """What the fault matrix's coredns-stopped fault shows (localcluster/faults.py)."""
    assert launcher_log_failure(SSH_UNRESOLVED) == Unreachable(
        "k5-worker-1.k5.ns.svc", error="Could not resolve hostname k5-worker-1.k5.ns.svc: Temporary failure in name "
        "resolution")
    pods = [_pod("k5-launcher-4prgp", "launcher", None, "Failed", 1)]
    monkeypatch.setattr(diagnose_module, "_network_policies", lambda kube, namespace: [])
    found = diagnose(_FakeKube(_failed_job("k5", "ns"), pods, {"k5-launcher-4prgp": SSH_UNRESOLVED}), "ns", "k5")
    assert found.cause.startswith("MPI communication failed: worker 1 unreachable: its name does not resolve"), found
    assert "CoreDNS" in found.remedy and "k8s-app=kube-dns" in found.remedy, found.remedy


def _running_job(name: str, ns: str) -> dict:
    manifest = jobs.mpijob(jobs.MPIJob(name=name, namespace=ns))
    manifest["status"] = {"conditions": [{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}]}
    return manifest


@pytest.mark.parametrize("log, stuck", [
    # MPICH's Hydra after ssh could not resolve a worker: it prints this and waits forever (the job stays Running).
    ("ssh: Could not resolve hostname k5-worker-1.k5.ns.svc: Name or service not known\r\n", True),
    ("uid-entrypoint: waited 4.8 s for the DNS names\nHello, World! I am process 0 of 2 on k5-worker-0.\n", False),
], ids=["unresolved", "running-well"])
def test_a_running_launcher_whose_log_reports_a_failure_is_stuck(monkeypatch, log, stuck):
    """A wait on a job can end at the launcher's failure report instead of at its timeout; a launcher whose log
    reports none is not stuck."""
    pods = [_pod("k5-launcher-4prgp", "launcher", None, "Running"), _pod("k5-worker-1", "worker", 1, "Running")]
    monkeypatch.setattr(diagnose_module, "_network_policies", lambda kube, namespace: [])
    found = stuck_launcher(_FakeKube(_running_job("k5", "ns"), pods, {"k5-launcher-4prgp": log}), "ns", "k5")
    if not stuck:
        assert found is None
        return
    assert found.state == "Running", found
    assert found.cause.startswith("MPI communication failed: worker 1 unreachable: its name does not resolve"), found


def _slices(*endpoints: tuple[str, bool]) -> list[dict]:
    return [{"endpoints": [{"hostname": h, "conditions": {"ready": r}} for h, r in endpoints]}]


@pytest.mark.parametrize("dns, job_endpoints, says", [
    (False, [("k5-worker-1", True)], "the cluster DNS has no ready server: check CoreDNS"),
    (True, [("k5-worker-1", True)], "its DNS record came after mpirun had started"),
    (True, [("k5-worker-1", False)], "(k5-worker-1 must be there, Ready)"),
    (None, [], "the cluster DNS does not answer"),
], ids=["dns-down", "record-late", "worker-not-ready", "unknown"])
def test_an_unresolved_worker_name_is_told_apart_by_the_dns_and_the_jobs_endpoints(monkeypatch, dns, job_endpoints,
                                                                                    says):
    """The cluster DNS without a ready server (the coredns-stopped fault) against the race of a pod Ready before
    its name is served (kubeflow/mpi-operator#443): the worker is in its job's Service by the time one looks."""
    slices = {("k5-ns", "k5"): _slices(*job_endpoints)}
    if dns is not None:
        slices[("kube-system", "kube-dns")] = _slices(("coredns-1", dns))
    pods = [_pod("k5-launcher-4prgp", "launcher", None, "Failed", 1)]
    monkeypatch.setattr(diagnose_module, "_network_policies", lambda kube, namespace: [])
    found = diagnose(_FakeKube(_failed_job("k5", "k5-ns"), pods, {"k5-launcher-4prgp": SSH_UNRESOLVED}, slices),
                     "k5-ns", "k5")
    assert found.cause.startswith("MPI communication failed: worker 1 unreachable: its name does not resolve"), found
    assert says in found.remedy, found.remedy


# Hydra's proxy on a worker that cannot call mpiexec back at the launcher's short hostname. Copied from real runs
# on this machine (MPICH 5.0.2 and Intel MPI 2021 from PyPI; each proxy started by an ssh stand-in, mpiexec in a
# UTS namespace named like a launcher), the worker's hostname put in: in a pod the proxy runs on the worker.
MPICH_PROXY_UNRESOLVED = (
    "[proxy:0@k6-worker-0] HYDU_sock_connect (/mpich-5.0.2/src/pm/hydra/lib/utils/sock.c:110): unable to get host "
    "address for k6-launcher\n"
    "[proxy:0@k6-worker-0] main (/mpich-5.0.2/src/pm/hydra/proxy/pmip.c:100): unable to connect to server "
    "k6-launcher at port 43019 (check for firewalls!)\n"
    "[mpiexec@k6-launcher] ui_cmd_cb (/mpich-5.0.2/src/pm/hydra/mpiexec/pmiserv_pmci.c:51): Launch proxy failed.\n")
INTEL_PROXY_UNRESOLVED = (
    "[bstrap:0:0@k6-worker-0] HYD_sock_connect (../../../../../src/pm/i_hydra/libhydra/sock/hydra_sock_intel.c:209): "
    "getaddrinfo returned error -2 (Name or service not known)\n"
    "[bstrap:0:0@k6-worker-0] main (../../../../../src/pm/i_hydra/libhydra/bstrap/src/hydra_bstrap_proxy.c:532): "
    "unable to connect to server k6-launcher at port 36727 (check for firewalls!)\n"
    "[mpiexec@k6-launcher] Error: Unable to run bstrap_proxy on k6-worker-0 (pid 10019, exit code 768)\n"
    "[mpiexec@k6-launcher] Error setting up the bootstrap proxies\n")
HYDRA_PROXY_REFUSED = ("[proxy:0@k6-worker-1] main (pm/hydra/proxy/pmip.c:100): unable to connect to server "
                       "k6-launcher.k6.ns.svc at port 43019 (check for firewalls!)\n")


@pytest.mark.parametrize("log, found", [
    (MPICH_PROXY_UNRESOLVED, LauncherUnreachable("k6-worker-0", "k6-launcher", 43019,
                                                 "unable to get host address for k6-launcher")),
    (INTEL_PROXY_UNRESOLVED, LauncherUnreachable("k6-worker-0", "k6-launcher", 36727,
                                                 "getaddrinfo returned error -2 (Name or service not known)")),
    (HYDRA_PROXY_REFUSED, LauncherUnreachable("k6-worker-1", "k6-launcher.k6.ns.svc", 43019)),
], ids=["mpich", "intel", "refused"])
def test_a_hydra_proxy_that_cannot_call_mpiexec_back_is_read_from_the_launchers_log(log, found):
    assert launcher_log_failure(log) == found


@pytest.mark.parametrize("log", [MPICH_PROXY_UNRESOLVED, INTEL_PROXY_UNRESOLVED], ids=["mpich", "intel"])
def test_diagnose_says_a_hung_launchers_short_name_does_not_resolve_and_how_to_pass_its_address(monkeypatch, log):
    """What an upstream-style Intel MPI job (no I_MPI_HYDRA_IFACE) hits: its workers' proxies cannot resolve the
    launcher's short hostname; the job may stay Running."""
    job = _failed_job("k6", "ns")
    job["status"]["conditions"] = [{"type": "Running", "status": "True"}]
    pods = [_pod("k6-launcher-wdxhl", "launcher", None, "Running"), _pod("k6-worker-0", "worker", 0, "Running")]
    found = diagnose(_FakeKube(job, pods, {"k6-launcher-wdxhl": log}), "ns", "k6")
    assert found.state == "Running" and found.cause.startswith(
        "MPI start-up failed: worker 0's Hydra proxy cannot reach mpiexec on the launcher: the name k6-launcher does "
        "not resolve"), found
    assert "short hostname is not a DNS name" in found.remedy and "I_MPI_HYDRA_IFACE=eth0" in found.remedy


def test_diagnose_points_at_policies_when_a_proxy_cannot_connect_to_mpiexec():
    job = _failed_job("k6", "ns")
    pods = [_pod("k6-launcher-wdxhl", "launcher", None, "Failed", 7)]
    found = diagnose(_FakeKube(job, pods, {"k6-launcher-wdxhl": HYDRA_PROXY_REFUSED}), "ns", "k6")
    assert found.cause == ("MPI start-up failed: worker 1 cannot connect back to the launcher at "
                           "k6-launcher.k6.ns.svc port 43019"), found
    assert "NetworkPolicies of namespace ns" in found.remedy


# The job builder's launcher, when a worker could not connect back to it within its wait (jobs.launcher_command),
# then mpirun's report (ISO-03 in CI once: the workers' policies did not yet admit the new launcher's address).
BUILDER_NO_CALLBACK = (
    "mpiplat: launcher runs as uid 1000680000, gid 0\n"
    "mpiplat: cannot connect back to the launcher at 10.244.1.9:40125\n"
    "mpiplat: worker np-worker-0.np.ns.svc could not connect back to the launcher\n"
    "--------------------------------------------------------------------------\n"
    "ORTE was unable to reliably start one or more daemons.\n"
    "This usually is caused by:\n")


def test_diagnose_names_the_worker_that_could_not_connect_back_to_the_builders_launcher():
    assert launcher_log_failure(BUILDER_NO_CALLBACK) == LauncherUnreachable("np-worker-0.np.ns.svc", "10.244.1.9",
                                                                            40125)
    pods = [_pod("np-launcher-8cnnh", "launcher", None, "Failed", 1)]
    found = diagnose(_FakeKube(_failed_job("np", "ns"), pods, {"np-launcher-8cnnh": BUILDER_NO_CALLBACK}), "ns", "np")
    assert found.cause == "MPI start-up failed: worker 0 cannot connect back to the launcher at 10.244.1.9 port 40125"
    assert "NetworkPolicies of namespace ns" in found.remedy


# Open MPI 4.1's report of a daemon it lost (help-errmgr-base.txt, node-died) and of daemons that never called back.
ORTE_DAEMON_LOST = (
    "--------------------------------------------------------------------------\n"
    "ORTE has lost communication with a remote daemon.\n\n"
    "  HNP daemon   : [[40121,0],0] on node k6-launcher\n"
    "  Remote daemon: [[40121,0],2] on node k6-worker-1\n\n"
    "This is usually due to either a failure of the TCP network\n"
    "connection to the node, or possibly an internal failure of\n")
ORTE_DAEMONS_SILENT = (
    "--------------------------------------------------------------------------\n"
    "ORTE was unable to reliably start one or more daemons.\n"
    "--------------------------------------------------------------------------\n"
    "An ORTE daemon has unexpectedly failed after launch and before\n"
    "communicating back to mpirun. This could be caused by a number\n"
    "of factors, including an inability to create a connection back\n"
    "to mpirun due to a lack of common network interfaces and/or no\n"
    "route found between them.\n")


def test_open_mpis_lost_daemon_names_its_worker():
    assert launcher_log_failure(ORTE_DAEMON_LOST) == DaemonLost("k6-worker-1")
    pods = [_pod("k6-launcher-wdxhl", "launcher", None, "Failed", 1)]
    found = diagnose(_FakeKube(_failed_job("k6", "ns"), pods, {"k6-launcher-wdxhl": ORTE_DAEMON_LOST}), "ns", "k6")
    assert found.cause == "MPI communication failed: mpirun lost worker 1's Open MPI daemon (k6-worker-1)", found


def test_open_mpis_daemons_that_never_called_back_point_at_the_launchers_ports():
    assert launcher_log_failure(ORTE_DAEMONS_SILENT) is None  # it names no host
    pods = [_pod("k6-launcher-wdxhl", "launcher", None, "Failed", 1)]
    found = diagnose(_FakeKube(_failed_job("k6", "ns"), pods, {"k6-launcher-wdxhl": ORTE_DAEMONS_SILENT}), "ns",
                     "k6")
    assert found.cause.startswith("MPI start-up failed: Open MPI's daemons on the workers never called mpirun back"), \
        found
    assert "reach its launcher on any TCP port" in found.remedy


# ---- A uid without a passwd entry, an SSH key the uid cannot read (OpenShift's restricted-v2 runs pods as an
# arbitrary uid with group 0). As OpenSSH 9.2p1 (Debian 12), Python 3.11 and coreutils print them, run as uid
# 1000680000 with group 0; the launcher's lines after its wait for the workers (jobs.launcher_command), then mpirun's.
UID = 1000680000
LAUNCHER_NO_PASSWD = f"""\
No user exists for uid {UID}
mpiplat: worker k7-worker-0.k7.ns.svc did not answer over SSH
No user exists for uid {UID}
mpiplat: worker k7-worker-1.k7.ns.svc did not answer over SSH
No user exists for uid {UID}
--------------------------------------------------------------------------
ORTE was unable to reliably start one or more daemons.
"""
OLD_SSH_NO_PASSWD = "You don't exist, go away!\n"  # OpenSSH before 7.x
PYTHON_NO_PASSWD = f"""\
Traceback (most recent call last):
  File "/opt/train.py", line 4, in <module>
    user = getpass.getuser()
           ^^^^^^^^^^^^^^^^^
  File "/usr/lib/python3.11/getpass.py", line 169, in getuser
    return pwd.getpwuid(os.getuid())[0]
           ^^^^^^^^^^^^^^^^^^^^^^^^^
KeyError: 'getpwuid(): uid not found: {UID}'
"""
WHOAMI_NO_PASSWD = f"whoami: cannot find name for user ID {UID}\n"
ENTRYPOINT_NO_PASSWD = f"uid-entrypoint: uid {UID} has no passwd entry and cannot add one (is its group 0?)\n"
LAUNCHER_KEY_DENIED = """\
Load key "/home/mpiuser/.ssh/id_rsa": Permission denied
mpiuser@k7-worker-0.k7.ns.svc: Permission denied (publickey,password,keyboard-interactive).
mpiplat: worker k7-worker-0.k7.ns.svc did not answer over SSH
"""
WORKER_HOST_KEY_DENIED = """\
Unable to load host key: /home/mpiuser/.ssh/id_rsa
sshd: no hostkeys available -- exiting.
"""
# A non-root sshd whose uid has no passwd entry starts, then refuses every login (OpenSSH 9.2p1).
WORKER_INVALID_USER = """\
Server listening on 0.0.0.0 port 2222.
Server listening on :: port 2222.
Invalid user mpiuser from 10.244.0.12 port 59170
Connection closed by invalid user mpiuser 10.244.0.12 port 59170 [preauth]
"""
LAUNCHER_LOGIN_REFUSED = """\
mpiuser@k7-worker-1.k7.ns.svc: Permission denied (publickey,password,keyboard-interactive).
mpiplat: worker k7-worker-1.k7.ns.svc did not answer over SSH
"""
# sshd goes on without its pid file: not a failure.
SSHD_NO_PID_FILE = """\
Server listening on 0.0.0.0 port 2222.
Couldn't create pid file "/home/mpiuser/sshd.pid": Permission denied
"""


@pytest.mark.parametrize("log, found", [
    pytest.param(LAUNCHER_NO_PASSWD, UserUnknown(f"No user exists for uid {UID}", UID), id="ssh"),
    pytest.param(OLD_SSH_NO_PASSWD, UserUnknown("You don't exist, go away!"), id="old-ssh"),
    pytest.param(PYTHON_NO_PASSWD, UserUnknown(f"getpwuid(): uid not found: {UID}", UID), id="python"),
    pytest.param(WHOAMI_NO_PASSWD, UserUnknown(f"cannot find name for user ID {UID}", UID), id="whoami"),
    pytest.param(ENTRYPOINT_NO_PASSWD, UserUnknown(f"uid {UID} has no passwd entry and cannot add one", UID),
                 id="mpiplat-entrypoint"),
    pytest.param(LAUNCHER_KEY_DENIED, KeyUnreadable("/home/mpiuser/.ssh/id_rsa",
                                                    'Load key "/home/mpiuser/.ssh/id_rsa": Permission denied'),
                 id="ssh-key"),
    pytest.param(WORKER_HOST_KEY_DENIED, KeyUnreadable("/home/mpiuser/.ssh/id_rsa",
                                                       "Unable to load host key: /home/mpiuser/.ssh/id_rsa", True),
                 id="sshd-host-key"),
    pytest.param(WORKER_INVALID_USER, LoginUnknown("mpiuser", "Invalid user mpiuser from 10.244.0.12"),
                 id="sshd-invalid-user"),
])
def test_a_uid_without_a_user_or_a_key_it_cannot_read_is_read_from_a_pods_log(log, found):
    assert identity_failure(log) == found


@pytest.mark.parametrize("log", [OPENMPI_KILLED, INTEL_KILLED, MPICH_KILLED, OPENMPI_SSH_REFUSED, INTEL_SSH_FAILED,
                                 SSH_UNRESOLVED, SSHD_NO_PID_FILE, "allreduce float64 x 1 on 4 ranks: PASS\n", ""])
def test_other_logs_name_no_user_or_key_trouble(log):
    assert identity_failure(log) is None


def test_a_refused_ssh_login_is_read_from_the_launchers_log():
    assert launcher_log_failure(LAUNCHER_LOGIN_REFUSED) == LoginRefused(
        "k7-worker-1.k7.ns.svc", "mpiuser", "publickey,password,keyboard-interactive")


def _runs_as(pod: client.V1Pod, uid: int) -> client.V1Pod:
    """`pod` with its one container's runAsUser `uid`, as OpenShift's SCC admission writes it."""
    pod.spec = client.V1PodSpec(containers=[client.V1Container(
        name=pod.status.container_statuses[0].name, security_context=client.V1SecurityContext(run_as_user=uid))])
    return pod


def _crash_looping(pod: client.V1Pod, exit_code: int) -> client.V1Pod:
    """`pod` whose container exited with `exit_code` and waits to be restarted again."""
    cs = pod.status.container_statuses[0]
    cs.state = client.V1ContainerState(waiting=client.V1ContainerStateWaiting(reason="CrashLoopBackOff"))
    cs.last_state = client.V1ContainerState(terminated=client.V1ContainerStateTerminated(exit_code=exit_code,
                                                                                         reason="Error"))
    cs.restart_count, cs.ready = 4, False
    return pod


NO_PASSWD_REMEDY = (f"the image has no passwd entry for uid {UID} (OpenShift's restricted-v2 SCC, or a runAsUser, "
                    "picks a uid the image does not know): make /etc/passwd group-0 writable and complete it in the "
                    "entrypoint (set args, not command, so the entrypoint runs), or use nss_wrapper; see docs/sdk.md "
                    "'Your own image'")
KEY_REMEDY = ("mount the key where the user looks (sshAuthMountPath under the user's home, not /root/.ssh, whose "
              "mode 0600 makes it root-only) or set fsGroup")


@pytest.mark.parametrize("log, said", [
    (LAUNCHER_NO_PASSWD, f"No user exists for uid {UID}"),
    (PYTHON_NO_PASSWD, f"getpwuid(): uid not found: {UID}"),
    (OLD_SSH_NO_PASSWD, "You don't exist, go away!"),  # the uid from the pod's spec
])
def test_diagnose_names_a_launcher_without_a_passwd_entry(log, said):
    ns = "cap-scc"
    pods = [_runs_as(_pod("k7-launcher-x2b9q", "launcher", None, "Failed", 1), UID),
            _pod("k7-worker-0", "worker", 0, "Running"), _pod("k7-worker-1", "worker", 1, "Running")]
    found = diagnose(_FakeKube(_failed_job("k7", ns), pods, {"k7-launcher-x2b9q": log}), ns, "k7")
    assert found.cause == f"launcher (k7-launcher-x2b9q): no passwd entry for uid {UID} ({said})", found
    assert found.remedy == NO_PASSWD_REMEDY, found.remedy
    assert "launcher Error (exit 1)" in found.details


def test_diagnose_prefers_mpiruns_report_of_a_killed_rank_to_a_passwd_line_before_it():
    """A rank killed by a signal had started over ssh: an entrypoint's whoami before is not the cause."""
    pods = [_pod("k1-launcher-s8bv9", "launcher", None, "Failed", 137), _pod("k1-worker-1", "worker", 1, "Running")]
    logs = {"k1-launcher-s8bv9": WHOAMI_NO_PASSWD + OPENMPI_KILLED}
    found = diagnose(_FakeKube(_failed_job("k1", "cap-ompi3"), pods, logs), "cap-ompi3", "k1")
    assert found.cause.startswith("worker 1 (k1-worker-1.k1.cap-ompi3.svc): MPI rank 1 killed by signal 9"), found


def test_diagnose_says_when_the_mpi_images_entrypoint_cannot_add_the_user():
    pods = [_pod("k7-launcher-x2b9q", "launcher", None, "Failed", 1)]
    logs = {"k7-launcher-x2b9q": ENTRYPOINT_NO_PASSWD + LAUNCHER_NO_PASSWD}
    found = diagnose(_FakeKube(_failed_job("k7", "ns"), pods, logs), "ns", "k7")
    assert found.cause.startswith(f"launcher (k7-launcher-x2b9q): no passwd entry for uid {UID} (uid {UID} has no "
                                  "passwd entry and cannot add one)"), found
    assert "group 0 (runAsGroup unset or 0) and a writable root filesystem" in found.remedy, found.remedy


def test_diagnose_names_a_launcher_that_cannot_read_its_ssh_key():
    pods = [_runs_as(_pod("k7-launcher-x2b9q", "launcher", None, "Failed", 1), UID),
            _pod("k7-worker-0", "worker", 0, "Running")]
    found = diagnose(_FakeKube(_failed_job("k7", "ns"), pods, {"k7-launcher-x2b9q": LAUNCHER_KEY_DENIED}), "ns", "k7")
    assert found.cause == ("launcher (k7-launcher-x2b9q): ssh cannot read the key /home/mpiuser/.ssh/id_rsa (Load key "
                           '"/home/mpiuser/.ssh/id_rsa": Permission denied)'), found
    assert found.remedy == f"uid {UID} cannot read the SSH key at /home/mpiuser/.ssh/id_rsa: {KEY_REMEDY}"


@pytest.mark.parametrize("state", ["Running", "Created"])
def test_diagnose_names_a_crash_looping_worker_that_cannot_read_its_host_key(state):
    """The worker's sshd exits at once; with WaitForWorkersReady no launcher comes (Created), with AtStartup the
    launcher's ssh is refused: the worker's log, not the network, says why."""
    job = _failed_job("k7", "ns")
    job["status"]["conditions"] = [{"type": state, "status": "True"}]
    pods = [_pod("k7-worker-0", "worker", 0, "Running"),
            _runs_as(_crash_looping(_pod("k7-worker-1", "worker", 1, "Running"), 1), UID)]
    if state == "Running":
        pods.append(_pod("k7-launcher-x2b9q", "launcher", None, "Running"))
    kube = _FakeKube(job, pods, {("k7-worker-1", "previous"): WORKER_HOST_KEY_DENIED,
                                 "k7-launcher-x2b9q": OPENMPI_SSH_REFUSED.replace("k5-", "k7-")})
    found = diagnose(kube, "ns", "k7")
    assert (found.state, found.cause) == (state, "worker 1 (k7-worker-1): sshd cannot load its host key "
                                                 "/home/mpiuser/.ssh/id_rsa (Unable to load host key: "
                                                 "/home/mpiuser/.ssh/id_rsa)"), found
    assert found.remedy == (f"uid {UID} cannot read the SSH key at /home/mpiuser/.ssh/id_rsa (or nothing is there): "
                            f"{KEY_REMEDY}"), found.remedy
    assert ("k7-worker-1", "worker", True) in kube.log_reads
    assert not any(name == "k7-worker-0" for name, _, _ in kube.log_reads)  # it did not crash


def test_diagnose_names_a_failed_worker_without_a_passwd_entry():
    pods = [_pod("k7-launcher-x2b9q", "launcher", None, "Failed", 1),
            _pod("k7-worker-1", "worker", 1, "Failed", 255)]
    found = diagnose(_FakeKube(_failed_job("k7", "ns"), pods, {"k7-worker-1": f"No user exists for uid {UID}\n"}),
                     "ns", "k7")
    assert found.cause == f"worker 1 (k7-worker-1): no passwd entry for uid {UID} (No user exists for uid {UID})"
    assert found.remedy == NO_PASSWD_REMEDY


def test_diagnose_reads_why_a_workers_sshd_refused_the_launchers_login():
    pods = [_pod("k7-launcher-x2b9q", "launcher", None, "Failed", 1), _pod("k7-worker-0", "worker", 0, "Running"),
            _runs_as(_pod("k7-worker-1", "worker", 1, "Running"), UID)]
    logs = {"k7-launcher-x2b9q": LAUNCHER_LOGIN_REFUSED, "k7-worker-1": WORKER_INVALID_USER}
    found = diagnose(_FakeKube(_failed_job("k7", "ns"), pods, logs), "ns", "k7")
    assert found.cause == ("worker 1 (k7-worker-1): sshd knows no user mpiuser, the name the launcher logs in as "
                           "(Invalid user mpiuser from 10.244.0.12)"), found
    assert found.remedy.startswith(f"the image has no passwd entry named mpiuser for uid {UID}, the pod's: "
                                   "make /etc/passwd group-0 writable"), found.remedy
    # Where the worker's log does not say why: the refusal itself, and where to look.
    logs["k7-worker-1"] = "Server listening on 0.0.0.0 port 2222.\n"
    found = diagnose(_FakeKube(_failed_job("k7", "ns"), pods, logs), "ns", "k7")
    assert found.cause == ("MPI communication failed: worker 1's sshd refused the launcher's login as mpiuser "
                           "(mpiuser@k7-worker-1.k7.ns.svc: Permission denied (publickey,password,"
                           "keyboard-interactive))"), found
    assert "kubectl -n ns logs k7-worker-1" in found.remedy


def test_diagnose_of_a_failed_worker_with_another_log_is_unchanged():
    pods = [_pod("k7-launcher-x2b9q", "launcher", None, "Failed", 1),
            _crash_looping(_pod("k7-worker-1", "worker", 1, "Running"), 139)]
    pods[1].status.container_statuses[0].state = client.V1ContainerState(
        terminated=client.V1ContainerStateTerminated(exit_code=139, reason="Error"))
    logs = {"k7-worker-1": "Segmentation fault (core dumped)\n" + SSHD_NO_PID_FILE,
            ("k7-worker-1", "previous"): "Server listening on 0.0.0.0 port 2222.\n"}
    kube = _FakeKube(_failed_job("k7", "ns"), pods, logs)
    found = diagnose(kube, "ns", "k7")
    assert {("k7-worker-1", "worker", False), ("k7-worker-1", "worker", True)} <= set(kube.log_reads)
    assert (found.cause, found.remedy) == ("worker 1 Error (exit 139)", "read the log: kubectl -n ns logs k7-worker-1 "
                                                                         "-c worker"), found


class _QuietKube(_FakeKube):
    """A job that no queue holds, with `claims` (name -> phase) and `events`."""

    def __init__(self, job: dict, pods: list, claims: dict[str, str] | None = None, events: list | None = None):
        super().__init__(job, pods, {})
        self.core.list_namespaced_event = lambda ns: SimpleNamespace(items=events or [])
        self.core.read_namespaced_persistent_volume_claim = lambda name, ns: SimpleNamespace(
            status=SimpleNamespace(phase=(claims or {})[name]))

    def list(self, kind, namespace, label_selector=""):
        return []


def test_diagnose_says_when_no_operator_picked_up_the_job():
    job = jobs.mpijob(jobs.MPIJob(name="j", namespace="ns"))
    found = diagnose(_QuietKube(job, []), "ns", "j")
    assert found.cause == "the MPI Operator has not picked up the job (no status, no pods)", found
    assert "MPI Operator runs" in found.remedy


def test_diagnose_names_the_claim_that_keeps_the_pods_pending():
    job = jobs.mpijob(jobs.MPIJob(name="j", namespace="ns"))
    job["status"] = {"conditions": [{"type": "Created", "status": "True"}]}
    pod = _pod("j-worker-0", "worker", 0, "Pending")
    pod.spec = client.V1PodSpec(containers=[], volumes=[client.V1Volume(
        name="data", persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(claim_name="ckpt"))])
    event = SimpleNamespace(involved_object=SimpleNamespace(kind="PersistentVolumeClaim", name="ckpt"),
                            message="waiting for a volume to be created by rancher.io/local-path")
    found = diagnose(_QuietKube(job, [pod], {"ckpt": "Pending"}, [event]), "ns", "j")
    assert found.cause == ("pods wait for PersistentVolumeClaims that are not Bound: ckpt (Pending: waiting for a "
                           "volume to be created by rancher.io/local-path)"), found
    assert "provisioner" in found.remedy
    assert diagnose(_QuietKube(job, [pod], {"ckpt": "Bound"}), "ns", "j").cause == "no problem found"


def test_diagnose_says_when_the_jobs_topology_has_no_room():
    job = jobs.mpijob(jobs.MPIJob(name="j", namespace="ns", required_topology="mpiplat.io/rack"))
    message = 'couldn\'t assign flavors to pod set worker: topology "racks" allows to fit only 8 out of 9 pod(s)'
    workload = {"metadata": {"name": "mpijob-j", "ownerReferences": [{"name": "j"}]}, "spec": {"podSets": []},
                "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                           "message": message}]}}

    class _Queued(_QuietKube):
        def list(self, kind, namespace, label_selector=""):
            return [workload] if kind == WORKLOAD else []

    found = diagnose(_Queued(job, []), "ns", "j")
    assert (found.state, found.cause) == ("Queued", f"queued: no domain of its Topology has room for all its pods: "
                                                    f"{message}"), found
    assert jobs.REQUIRED_TOPOLOGY in found.remedy


@pytest.mark.parametrize("cq_spec, cq_status, says, fix", [
    ({"stopPolicy": "Hold"}, {}, "queued: ClusterQueue team-a is held (stopPolicy: Hold)", '"stopPolicy":"None"'),
    ({"stopPolicy": "HoldAndDrain"}, {}, "is held (stopPolicy: HoldAndDrain)", "kubectl patch clusterqueue team-a"),
    ({}, {"conditions": [{"type": "Active", "status": "False", "reason": "FlavorNotFound",
                          "message": "Can't admit new workloads: references missing ResourceFlavor(s): gpu."}]},
     "queued: ClusterQueue team-a is inactive (FlavorNotFound: Can't admit new workloads", "ResourceFlavors"),
])
def test_a_held_or_inactive_cluster_queue_is_the_cause_before_any_quota(cq_spec, cq_status, says, fix):
    """The queue's quota would let the job in (12 GPUs, none in use), but the queue admits nothing: the
    diagnosis names the hold or the inactive queue first, with its remedy, not the arithmetic."""
    job = jobs.mpijob(jobs.MPIJob(name="j", namespace="ns", queue="lq", gpus_per_worker=1))
    workload = {"metadata": {"name": "mpijob-j", "ownerReferences": [{"name": "j"}]},
                "spec": {"queueName": "lq", "podSets": []},
                "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                           "message": "ClusterQueue team-a is inactive"}]}}
    cq = _cq("team-a", 12) | {"spec": {**_cq("team-a", 12)["spec"], **cq_spec}}
    cq["status"] = {**cq["status"], **cq_status}

    class _Held(_QuietKube):
        def list(self, kind, namespace, label_selector=""):
            return [workload] if kind == WORKLOAD else []

        def get(self, kind, name, namespace=None):
            return {"spec": {"clusterQueue": "team-a"}} if kind == LOCALQUEUE else self.job

        def find(self, kind, name, namespace=None):
            return cq if kind == CLUSTERQUEUE else self.job

    found = diagnose(_Held(job, []), "ns", "j")
    assert found.state == "Queued" and says in found.cause and fix in found.remedy, found
    assert "GPUs" not in found.cause


def _queued_kube(job: dict, message: str, cq: dict, lq_spec: dict | None = None):
    """A job whose Workload Kueue has not admitted, saying `message`, on LocalQueue lq -> ClusterQueue `cq`."""
    workload = {"metadata": {"name": "mpijob-j", "ownerReferences": [{"name": "j"}]},
                "spec": {"queueName": "lq", "podSets": [{"count": 7, "template": {"spec": {"containers": [
                    {"resources": {"requests": {GPU: "1"}}}]}}}]},
                "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                                           "message": message}]}}
    local_queue = {"spec": {"clusterQueue": cq["metadata"]["name"], **(lq_spec or {})}}
    cq["status"]["conditions"] = [{"type": "Active", "status": "True"}]

    class _Kube(_QuietKube):
        custom = SimpleNamespace(list_cluster_custom_object=lambda group, version, plural: {"items": [cq]})

        def list(self, kind, namespace, label_selector=""):
            return [workload] if kind == WORKLOAD else []

        def get(self, kind, name, namespace=None):
            return local_queue if kind == LOCALQUEUE else self.job

        def find(self, kind, name, namespace=None):
            return cq if kind == CLUSTERQUEUE else local_queue if kind == LOCALQUEUE else self.job
    return _Kube(job, [])


def test_kueues_own_reason_leads_where_the_quota_would_let_the_job_in():
    """7 GPUs fit in the 12 of an idle queue: the arithmetic is no cause; Kueue's reason is, with its remedy."""
    job = jobs.mpijob(jobs.MPIJob(name="j", namespace="team-a", queue="lq", gpus_per_worker=1))
    found = diagnose(_queued_kube(job, "Workload namespace doesn't match ClusterQueue selector", _cq("team-a", 12)),
                     "team-a", "j")
    assert found.cause == "queued: Kueue says: Workload namespace doesn't match ClusterQueue selector", found
    assert "namespaceSelector does not select namespace team-a" in found.remedy
    assert any("job needs 7" in d for d in found.details)  # the arithmetic, as a detail


def test_the_quota_is_the_cause_only_where_the_job_does_not_fit():
    job = jobs.mpijob(jobs.MPIJob(name="j", namespace="team-a", queue="lq", gpus_per_worker=1))
    found = diagnose(_queued_kube(job, "couldn't assign flavors to pod set worker: insufficient unused quota for "
                                       "nvidia.com/gpu in flavor f, 3 more needed", _cq("team-a", 12, reserved=8)),
                     "team-a", "j")
    assert found.cause == ("queued: ClusterQueue team-a has 12 GPUs, 8 in use, 0 borrowable now (at most 0); job "
                           "needs 7"), found
    assert "release quota" in found.remedy


def test_a_held_local_queue_is_the_cause():
    job = jobs.mpijob(jobs.MPIJob(name="j", namespace="team-a", queue="lq", gpus_per_worker=1))
    found = diagnose(_queued_kube(job, "LocalQueue lq is inactive", _cq("team-a", 12), {"stopPolicy": "Hold"}),
                     "team-a", "j")
    assert found.cause == "queued: LocalQueue team-a/lq is held (stopPolicy: Hold): it admits no job", found
    assert "patch localqueue lq" in found.remedy


def test_pods_the_cluster_refuses_are_named_in_its_words():
    """mpi-operator records the refusal on the MPIJob and sets no status: the diagnosis names the SCC's reason,
    not "the MPI Operator has not picked up the job"."""
    job = jobs.mpijob(jobs.MPIJob(name="j", namespace="ns"))
    event = SimpleNamespace(involved_object=SimpleNamespace(kind="MPIJob", name="j"), message=(
        'worker pod created failed: pods "j-worker-0" is forbidden: unable to validate against any security context '
        'constraint: [provider "restricted-v2": .containers[0].runAsUser: Invalid value: 1000: must be in the '
        'ranges: [1000680000, 1000689999]]'))
    found = diagnose(_QuietKube(job, [], events=[event]), "ns", "j")
    assert found.cause.startswith("the cluster refuses the operator's pods: security context constraints: "
                                  "containers[0].runAsUser is 1000; allowed: 1000680000-1000689999"), found
    assert "runAsUser" in found.remedy
    quota = SimpleNamespace(involved_object=SimpleNamespace(kind="Job", name="j-launcher"), message=(
        'Error creating: pods "j-launcher-x" is forbidden: exceeded quota: q, requested: pods=1, used: pods=4, '
        'limited: pods=4'))
    found = diagnose(_QuietKube(job, [], events=[quota]), "ns", "j")
    assert found.cause.startswith("the cluster refuses the launcher pods (a ResourceQuota): Error creating"), found


def test_a_resumed_job_whose_launcher_stays_suspended_names_the_operators_rbac():
    job = jobs.mpijob(jobs.MPIJob(name="j", namespace="ns"))
    job["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
    pods = [_pod(f"j-worker-{i}", "worker", i, "Running") for i in range(2)]
    kube = _QuietKube(job, pods)
    launcher = SimpleNamespace(spec=SimpleNamespace(suspend=True), status=SimpleNamespace(
        start_time=datetime.datetime.now(datetime.UTC)))
    kube.api_client = object()
    original = diagnose_module.client.BatchV1Api
    diagnose_module.client.BatchV1Api = lambda api: SimpleNamespace(read_namespaced_job=lambda n, ns: launcher)
    try:
        found = diagnose(kube, "ns", "j")
    finally:
        diagnose_module.client.BatchV1Api = original
    assert "launcher Job stays suspended" in found.cause and "jobs/status" in found.remedy, found
