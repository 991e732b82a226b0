"""`mpiplat demo`: run one OpenMPI MPIJob on the local reference cluster and narrate it."""

from __future__ import annotations

import time

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mpiplat import jobs
from mpiplat.kube import MPIJOB, Kube, has_condition

NAMESPACE = "mpiplat-demo"


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
    spec = jobs.MPIJobSpec(name="demo-pi", namespace=NAMESPACE, workers=2,
                           launcher_annotations={jobs.COMPLETE_AFTER: "3s"})
    start = time.monotonic()
    kube.create(MPIJOB, jobs.mpijob(spec))
    print(f"submitted MPIJob {NAMESPACE}/demo-pi (OpenMPI, 2 workers)")
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
    for pod in kube.core.list_namespaced_pod(NAMESPACE).items:
        print(f"  pod {pod.metadata.name:24} {pod.status.phase:10} node={pod.spec.node_name}")
    ok = "Succeeded" in seen
    print(f"demo {'succeeded' if ok else 'FAILED'} in {time.monotonic() - start:.1f}s "
          f"(namespace {NAMESPACE} kept for inspection)")
    return 0 if ok else 1
