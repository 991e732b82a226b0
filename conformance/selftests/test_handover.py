"""The handover tarball and the snapshot it holds, against the client's own models and a fake API (no
cluster): nodes with their GPU and topology labels, the stack's controllers and CRDs, and a failed test's
namespace (jobs, pods, events, logs), with what cannot be read written down instead of raised."""

from __future__ import annotations

import tarfile
from types import SimpleNamespace

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mpiplat.conformance import handover, snapshot
from mpiplat.versions import load

GPU = "nvidia.com/gpu"


def _node(name: str, labels: dict, gpus: str = "0", kwok: bool = False) -> client.V1Node:
    return client.V1Node(
        metadata=client.V1ObjectMeta(name=name, labels=labels,
                                     annotations={"kwok.x-k8s.io/node": "fake"} if kwok else {}),
        spec=client.V1NodeSpec(taints=[client.V1Taint(key=GPU, value="present", effect="NoSchedule")]
                               if kwok else None),
        status=client.V1NodeStatus(allocatable={"cpu": "8", "memory": "64Gi", GPU: gpus},
                                   conditions=[client.V1NodeCondition(type="Ready", status="True")],
                                   node_info=client.V1NodeSystemInfo(
                                       kubelet_version="v1.34.4", os_image="Debian", container_runtime_version="containerd://2",
                                       architecture="amd64", boot_id="", kernel_version="", kube_proxy_version="",
                                       machine_id="", operating_system="linux", system_uuid="")))


def test_nodes_keep_their_gpu_and_topology_labels():
    gpu = _node("gpu-0", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "topology.kubernetes.io/zone": "zone-a",
                          "mpiplat.io/rack": "rack-1", "team": "x"}, gpus="8", kwok=True)
    real = _node("real-0", {"kubernetes.io/hostname": "real-0"})
    nodes = [snapshot.node(n, GPU) for n in (gpu, real)]
    assert nodes[0]["gpu_labels"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert nodes[0]["topology_labels"] == {"mpiplat.io/rack": "rack-1", "topology.kubernetes.io/zone": "zone-a"}
    assert nodes[0]["simulated"] and not nodes[1]["simulated"]
    assert nodes[0]["taints"] == [f"{GPU}=present:NoSchedule"] and nodes[1]["kubelet"] == "v1.34.4"
    assert snapshot.node_summary(nodes, GPU) == {"real": 1, "simulated": 1, "gpus_real": 0, "gpus_simulated": 8,
                                                 "kubelets": ["v1.34.4"]}  # the real nodes' (a cluster's upgrade)


def _deployment(ns: str, name: str, image: str, ready: int) -> client.V1Deployment:
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name, namespace=ns), kind="Deployment",
        spec=client.V1DeploymentSpec(replicas=1, selector=client.V1LabelSelector(), template=client.V1PodTemplateSpec(
            spec=client.V1PodSpec(containers=[client.V1Container(name="c", image=image)]))),
        status=client.V1DeploymentStatus(ready_replicas=ready))


def test_controllers_are_found_by_name_or_image_with_their_pinned_version():
    comps = load()
    found, missing = snapshot.controllers([
        _deployment("kueue-system", "kueue-controller-manager", "registry.k8s.io/kueue/kueue:v0.99.0", 1),
        _deployment("mpi", "operator", "docker.io/mpioperator/mpi-operator:0.8.0", 0),
        _deployment("shop", "web", "nginx:1", 1),
    ], comps)
    assert [(c["component"], c["images"], c["ready"], c["pinned"]) for c in found] == [
        ("kueue", ["registry.k8s.io/kueue/kueue:v0.99.0"], "1/1", comps["kueue"].version),
        ("mpi-operator", ["docker.io/mpioperator/mpi-operator:0.8.0"], "0/1", comps["mpi-operator"].version)]
    assert "trainer" in missing and "kueue" not in missing and "web" not in str(found)


def test_crds_of_the_stack_with_served_and_storage_versions():
    def crd(name, group, versions):
        return client.V1CustomResourceDefinition(
            metadata=client.V1ObjectMeta(name=name, labels={"app.kubernetes.io/version": "v0.8.0"}),
            spec=client.V1CustomResourceDefinitionSpec(
                group=group, scope="Namespaced",
                names=client.V1CustomResourceDefinitionNames(plural=name.split(".")[0], kind="K"),
                versions=[client.V1CustomResourceDefinitionVersion(name=v, served=True, storage=v == versions[-1])
                          for v in versions]))

    found = snapshot.crds([crd("mpijobs.kubeflow.org", "kubeflow.org", ["v2beta1"]),
                           crd("widgets.example.com", "example.com", ["v1"]),
                           crd("clusterpolicies.nvidia.com", "nvidia.com", ["v1"])], load())
    assert [(c["name"], c["served"], c["storage"], c["version_label"]) for c in found] == [
        ("clusterpolicies.nvidia.com", ["v1"], "v1", "v0.8.0"),
        ("mpijobs.kubeflow.org", ["v2beta1"], "v2beta1", "v0.8.0")]


class FakeKube:
    """A failed test's namespace: one MPIJob, one failed worker pod with a log, one event; secrets
    are there to be (not) read; logs of the second pod cannot be read."""

    def __init__(self):
        self.api_client = client.ApiClient()
        self.calls: list[str] = []
        pod = client.V1Pod(
            metadata=client.V1ObjectMeta(name="j-worker-1", namespace="ns",
                                         labels={"training.kubeflow.org/job-name": "j"}),
            spec=client.V1PodSpec(node_name="real-0", containers=[client.V1Container(name="worker", image="i")]),
            status=client.V1PodStatus(phase="Failed", container_statuses=[client.V1ContainerStatus(
                name="worker", image="i", image_id="", ready=False, restart_count=0,
                state=client.V1ContainerState(terminated=client.V1ContainerStateTerminated(
                    exit_code=137, reason="OOMKilled")))]))
        quiet = client.V1Pod(metadata=client.V1ObjectMeta(name="j-launcher", namespace="ns"),
                             spec=client.V1PodSpec(containers=[client.V1Container(name="launcher", image="i")]),
                             status=client.V1PodStatus(phase="Pending"))
        event = client.CoreV1Event(metadata=client.V1ObjectMeta(name="e"), reason="OOMKilling", type="Warning",
                                   message="memory limit", involved_object=client.V1ObjectReference(kind="Pod",
                                                                                                    name="j-worker-1"))
        job = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
               "metadata": {"name": "j", "namespace": "ns", "managedFields": [{"manager": "x"}]},
               "status": {"conditions": [{"type": "Failed", "status": "True"}]}}
        empty = SimpleNamespace(items=[])
        self.core = SimpleNamespace(
            list_namespaced_pod=self._log("pods", lambda ns, **kw: SimpleNamespace(items=[pod, quiet])),
            list_namespaced_event=self._log("events", lambda ns, **kw: SimpleNamespace(items=[event])),
            list_namespaced_resource_quota=self._log("quotas", lambda ns, **kw: empty),
            list_namespaced_config_map=self._log("configmaps", lambda ns, **kw: empty),
            list_namespaced_secret=self._log("secrets", lambda ns, **kw: empty),
            read_namespaced_pod_log=self._log("log", self._pod_log))
        self.batch = SimpleNamespace(list_namespaced_job=self._log("jobs", lambda ns, **kw: empty))
        self.custom = SimpleNamespace(list_namespaced_custom_object=self._log(
            "custom", lambda g, v, ns, plural, **kw: {"items": [job] if plural == "mpijobs" else []}))

    def _log(self, what, fn):
        def call(*args, **kw):
            self.calls.append(what)
            return fn(*args, **kw)
        return call

    @staticmethod
    def _pod_log(name, ns, container, **kw):
        if name == "j-launcher":
            raise ApiException(status=400, reason="container not started")
        return "rank 1 allocating\nKilled\n"

    def find(self, kind, name, namespace=None):  # what diagnose reads of the job
        raise ApiException(status=500, reason="diagnosis unavailable")


def test_a_failed_tests_namespace_keeps_its_jobs_pods_events_and_logs():
    kube = FakeKube()
    kube.api_client.configuration.host = "https://fake"
    files = snapshot.namespace(kube, "ns", GPU)
    objects = list(yaml.safe_load_all(files["objects.yaml"]))
    assert [o["kind"] for o in objects] == ["MPIJob"] and "managedFields" not in objects[0]["metadata"]
    assert files["pods.txt"].splitlines()[0] == \
        "j-worker-1  Failed  node=real-0  worker=terminated(OOMKilled, exit 137)"
    assert "Warning  OOMKilling  Pod/j-worker-1: memory limit" in files["events.txt"]
    assert files["logs/j-worker-1.worker.log"].endswith("Killed\n")
    assert "logs/j-launcher.launcher.log" not in files
    assert "log of j-launcher/launcher: ApiException" in files["errors.txt"]  # written down, not raised
    assert "diagnosis of MPIJob j" in files["errors.txt"]
    assert "secrets" not in kube.calls


def test_the_handover_holds_the_reports_and_each_failure(tmp_path):
    for f in ("report.html", "results.json"):
        (tmp_path / f).write_text(f)
    path = handover.write(tmp_path, "0101-abcd", ["report.html", "results.json"], [
        {"requirement": "FAIL-01", "test": "test_killed[OpenMPI]", "message": "job did not fail",
         "namespaces": {"mpiplat-conf-0101-abcd-3": {"pods.txt": "p\n", "logs/j-worker-1.worker.log": "Killed\n"}}},
        {"requirement": "INS-01", "test": "test_apis", "message": "CRD missing", "namespaces": {}}])
    assert path == tmp_path / "mpiplat-conformance-0101-abcd.tar.gz"
    with tarfile.open(path) as tar:
        names = tar.getnames()
        top = "mpiplat-conformance-0101-abcd"
        assert names == [f"{top}/report.html", f"{top}/results.json",
                         f"{top}/failures/FAIL-01/test_killed_OpenMPI/message.txt",
                         f"{top}/failures/FAIL-01/test_killed_OpenMPI/mpiplat-conf-0101-abcd-3/pods.txt",
                         f"{top}/failures/FAIL-01/test_killed_OpenMPI/mpiplat-conf-0101-abcd-3/logs/j-worker-1.worker.log",
                         f"{top}/failures/INS-01/test_apis/message.txt"]
        log = tar.extractfile(f"{top}/failures/FAIL-01/test_killed_OpenMPI/mpiplat-conf-0101-abcd-3/logs/"
                              "j-worker-1.worker.log")
        assert log.read() == b"Killed\n"
    # Nothing a name holds escapes the tarball's folder.
    path = handover.write(tmp_path, "x", [], [{"requirement": "../..", "test": "../../etc", "message": "",
                                                "namespaces": {"..": {"../../x": "y"}}}])
    with tarfile.open(path) as tar:
        assert all(n.startswith("mpiplat-conformance-x/") and ".." not in n.split("/") for n in tar.getnames())
