"""`mpiplat demo`: run one OpenMPI MPIJob on the local reference cluster and narrate it.

Where the cluster has a real node, the job runs there for real: mpirun in the launcher starts one
rank per worker pod over SSH, the ranks compute pi together and the demo prints what they said.
Without one (`mpiplat cluster up --no-real-node`), the job runs on the KWOK nodes, simulated."""

from __future__ import annotations

import time

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mpiplat import jobs
from mpiplat.kube import MPIJOB, Kube, has_condition
from mpiplat.sdk import Client

NAMESPACE = "mpiplat-demo"
# Each rank integrates its share of 4/(1+x^2) over [0, 1]; rank 0 prints the sum.
PI_PROGRAM = """
import socket
from mpi4py import MPI
comm = MPI.COMM_WORLD
rank, size, n = comm.Get_rank(), comm.Get_size(), 1_000_000
part = sum(4.0 / (1.0 + ((i + 0.5) / n) ** 2) for i in range(rank, n, size)) / n
print(f"rank {rank} of {size} on pod {socket.gethostname()}: partial sum {part:.12f}", flush=True)
total = comm.reduce(part, root=0)
if rank == 0:
    print(f"pi = {total:.12f} (error {abs(total - 3.141592653589793):.1e})", flush=True)
"""


def _has_real_node(kube: Kube) -> bool:
    return any((n.metadata.annotations or {}).get("kwok.x-k8s.io/node") != "fake" and any(
        c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))
        for n in kube.core.list_node().items)


def _fresh_namespace(kube: Kube) -> None:
    try:
        kube.core.delete_namespace(NAMESPACE)
    except ApiException as err:
        if err.status != 404:
            raise
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            kube.core.read_namespace(NAMESPACE)
            time.sleep(0.5)
        except ApiException:
            break
    kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=NAMESPACE, labels={"mpiplat.io/demo": "true"})))


def run(kube: Kube) -> int:
    _fresh_namespace(kube)
    real = _has_real_node(kube)
    if real:
        from mpiplat.localcluster.images import LOCAL_IMAGES

        spec = jobs.MPIJob(name="demo-pi", namespace=NAMESPACE, workers=2, image=LOCAL_IMAGES["OpenMPI"],
                           command=["python3", "-c", PI_PROGRAM])
    else:  # simulated: the KWOK nodes complete the launcher after COMPLETE_AFTER
        spec = jobs.MPIJob(name="demo-pi", namespace=NAMESPACE, workers=2,
                           launcher_annotations={jobs.COMPLETE_AFTER: "3s"},
                           node_selector=dict(jobs.KWOK_NODE_SELECTOR),
                           tolerations=[dict(jobs.KWOK_TOLERATION)])
    jobs_ = Client(NAMESPACE, kube=kube)
    start = time.monotonic()
    jobs_.create(spec)
    print(f"submitted MPIJob {NAMESPACE}/demo-pi (OpenMPI, 2 workers, "
          f"{'real pods on the real node' if real else 'simulated on KWOK nodes'})")
    seen: list[str] = []

    def narrate(obj: dict) -> bool:
        for ctype in ("Created", "Running", "Succeeded", "Failed"):
            if has_condition(obj, ctype) and ctype not in seen:
                seen.append(ctype)
                print(f"  {time.monotonic() - start:5.1f}s  {ctype}")
        return "Succeeded" in seen or "Failed" in seen

    kube.wait_for(MPIJOB, "demo-pi", NAMESPACE, narrate, timeout=120, what="completion")
    hostfile = kube.core.read_namespaced_config_map("demo-pi-config", NAMESPACE).data["hostfile"]
    print("hostfile written by mpi-operator:")
    print("".join(f"  {line}\n" for line in hostfile.splitlines()), end="")
    for pod in jobs_.pods("demo-pi"):
        print(f"  pod {pod.metadata.name:24} {pod.status.phase:10} node={pod.spec.node_name}")
    if real:
        print("what the ranks printed (launcher log):")
        print("".join(f"  {line.text}\n" for line in jobs_.logs("demo-pi")), end="")
    if "Failed" in seen:
        print(jobs_.diagnose("demo-pi"))
    ok = "Succeeded" in seen
    print(f"demo {'succeeded' if ok else 'FAILED'} in {time.monotonic() - start:.1f}s "
          f"(namespace {NAMESPACE} kept for inspection)")
    return 0 if ok else 1
