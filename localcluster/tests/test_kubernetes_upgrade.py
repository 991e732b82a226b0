"""The local cluster's Kubernetes upgraded one minor up with a real MPIJob running across it, as kubeadm orders it
(`mpiplat cluster upgrade`: the control plane, then the real node's kubelet and kube-proxy): `make test-matrix`'s
last stage, on a full cluster `up --kubernetes` the matrix's first version, with site.yml's stack. Marked
`matrix`: not in `make test`; it leaves the cluster at the new version."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from mpiplat import Client, MPIJob
from mpiplat.localcluster import cluster
from mpiplat.versions import kubernetes_matrix, version_tuple

pytestmark = [pytest.mark.cluster, pytest.mark.matrix, pytest.mark.timeout(1800)]

REAL_IMAGE = "mpiplat.local/openmpi:1"
SECONDS = 240  # the job's run: longer than the upgrade on a busy machine
# Every second an Allreduce every rank checks; a rank that lost its peer fails the job.
ACROSS = f"""
import time
from mpi4py import MPI
c, start, rounds = MPI.COMM_WORLD, time.time(), 0
while c.bcast(time.time() - start < {SECONDS} if c.rank == 0 else None, root=0):
    assert c.allreduce(1) == c.size
    rounds += 1
    time.sleep(1)
print(f"rank {{c.rank}}: {{rounds}} rounds", flush=True)
"""


def test_a_real_job_runs_across_an_upgrade_of_the_control_plane_then_the_kubelet(kube, namespace):
    running = cluster.kubernetes_version()
    target = next((v for v in kubernetes_matrix() if version_tuple(v)[1] == version_tuple(running)[1] + 1), None)
    assert target, f"the cluster runs Kubernetes {running}: no minor above it in versions.yml's kubernetes.matrix"
    sdk = Client(namespace, kube=kube)
    sdk.create(MPIJob(name="across", workers=2, image=REAL_IMAGE, command=["python3", "-c", ACROSS]))
    assert sdk.wait("across", until="running", timeout=300).phase == "Running", sdk.diagnose("across")
    before = {p.metadata.uid for p in sdk.pods("across")}

    cluster.upgrade(target)

    # The same pods run on, none of their containers restarted.
    pods = sdk.pods("across")
    assert {p.metadata.uid for p in pods} == before and sdk.status("across").phase == "Running", pods
    restarted = {p.metadata.name: [s.restart_count for s in p.status.container_statuses or []]
                 for p in pods if any(s.restart_count for s in p.status.container_statuses or [])}
    assert not restarted, f"the job's containers restarted across the upgrade: {restarted}"

    assert client.VersionApi(kube.api_client).get_code().git_version == target
    deadline = time.monotonic() + 60  # the kubelet reports its version in its next node status
    while (info := kube.core.read_node("real-0").status.node_info).kubelet_version != target:
        assert time.monotonic() < deadline, f"real-0 reports {info}, not kubelet {target}"
        time.sleep(1)
    done = sdk.wait_for_completion("across", timeout=SECONDS + 600)
    assert done.phase == "Succeeded", sdk.diagnose("across")
    ranks = sorted(ln.text for ln in sdk.logs("across") if ln.text.startswith("rank "))
    assert len(ranks) == 2, sdk.logs("across")
    # A job submitted after the upgrade runs too.
    sdk.create(MPIJob(name="after", workers=2, image=REAL_IMAGE, command=["python3", "-c", "print('after')"]))
    assert sdk.wait_for_completion("after", timeout=300).phase == "Succeeded", sdk.diagnose("after")
