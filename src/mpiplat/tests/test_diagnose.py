"""`diagnose` on queued jobs: ClusterQueue arithmetic with cohort borrowing (shared with the suite)."""

from __future__ import annotations

import time

import pytest

from mpiplat import jobs
from mpiplat.diagnose import diagnose
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
            kube.create(MPIJOB, jobs.mpijob(jobs.MPIJobSpec(name=name, namespace=namespace, workers=workers,
                                                            gpus_per_worker=2, queue=queue)))

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
