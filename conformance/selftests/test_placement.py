"""Where the suite's pods go on a cluster that mixes KWOK nodes with real ones, and what such a cluster
can prove (capability detection from its nodes). No cluster: the nodes are the client's own models."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest
import yaml
from kubernetes import client

from mpiplat import jobs
from mpiplat.conformance import capabilities as caps
from mpiplat.conformance.placement import placement, pod_spec
from mpiplat.versions import load, module_dir

SUITE = Path(__file__).resolve().parents[1] / "suite"
GPU = jobs.GPU_RESOURCE
KWOK_TAINT = client.V1Taint(key="kwok.x-k8s.io/node", value="fake", effect="NoSchedule")
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


# ---------------------------------------------------------------- the placement rule

def test_a_real_job_gets_the_settings_placement_only():
    p = placement(real=True, kwok_nodes=True, node_selector={"pool": "gpu"}, tolerations=[GPU_TOLERATION])
    assert p == {"node_selector": {"pool": "gpu"}, "tolerations": [GPU_TOLERATION]}
    assert placement(real=True, kwok_nodes=True) == {"node_selector": {}, "tolerations": []}


def test_a_simulated_job_goes_to_the_kwok_nodes_with_the_settings_placement():
    p = placement(real=False, kwok_nodes=True, node_selector={"pool": "gpu"}, tolerations=[GPU_TOLERATION])
    assert p == {"node_selector": {"pool": "gpu", "type": "kwok"},
                 "tolerations": [GPU_TOLERATION,
                                 {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]}
    # Its toleration matches the taint the KWOK nodes carry beside a real node.
    assert caps.tolerates(p["tolerations"], KWOK_TAINT)
    # Already tolerated (e.g. by the settings): not twice.
    again = placement(real=False, kwok_nodes=True, tolerations=[jobs.KWOK_TOLERATION])
    assert again["tolerations"] == [jobs.KWOK_TOLERATION]


def test_without_kwok_nodes_a_simulated_job_gets_the_settings_placement():
    p = placement(real=False, kwok_nodes=False, node_selector={"pool": "gpu"}, tolerations=[GPU_TOLERATION])
    assert p == {"node_selector": {"pool": "gpu"}, "tolerations": [GPU_TOLERATION]}


def test_placement_copies_what_it_is_given():
    selector, tolerations = {"pool": "gpu"}, [dict(GPU_TOLERATION)]
    p = placement(real=False, kwok_nodes=True, node_selector=selector, tolerations=tolerations)
    p["node_selector"]["x"] = "y"
    p["tolerations"][0]["key"] = "changed"
    assert selector == {"pool": "gpu"} and tolerations == [GPU_TOLERATION]
    assert jobs.KWOK_NODE_SELECTOR == {"type": "kwok"}
    assert jobs.KWOK_TOLERATION == {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}


def test_the_placement_reaches_every_pod_of_an_mpijob_and_of_a_plain_pod():
    p = placement(real=False, kwok_nodes=True, node_selector={"pool": "gpu"})
    job = jobs.mpijob(jobs.MPIJob(name="pi", **p))
    for replica in ("Launcher", "Worker"):
        spec = job["spec"]["mpiReplicaSpecs"][replica]["template"]["spec"]
        assert spec["nodeSelector"] == {"pool": "gpu", "type": "kwok"}, replica
        assert spec["tolerations"] == [jobs.KWOK_TOLERATION], replica
    assert pod_spec(p) == {"nodeSelector": {"pool": "gpu", "type": "kwok"}, "tolerations": [jobs.KWOK_TOLERATION]}
    assert pod_spec(placement(real=True, kwok_nodes=True)) == {}


def test_a_trainjob_places_its_runtime_jobs_through_one_runtime_patch():
    p = placement(real=False, kwok_nodes=True, node_selector={"pool": "gpu"})
    body = jobs.trainjob(jobs.TrainJob(name="ds", **p))["spec"]
    [patch] = body["runtimePatches"]
    assert patch["manager"] == "mpiplat.io/placement"
    replicated = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert [r["name"] for r in replicated] == ["node", "launcher"]
    for r in replicated:
        assert r["template"]["spec"]["template"]["spec"] == {"nodeSelector": {"pool": "gpu", "type": "kwok"},
                                                             "tolerations": [jobs.KWOK_TOLERATION]}
    # No placement: no patch (Kueue adds its own entry on admission).
    assert "runtimePatches" not in jobs.trainjob(jobs.TrainJob(name="ds"))["spec"]
    with pytest.raises(jobs.JobSpecError, match=r"placed_jobs is \[\]; allowed: the names of the runtime's"):
        jobs.trainjob(jobs.TrainJob(name="ds", placed_jobs=[], **p))


@pytest.mark.skipif(shutil.which("go") is None, reason="needs the go command to fetch the pinned Trainer module")
def test_the_trainjob_runtime_patch_fits_the_pinned_trainer_api(runtime_pod_spec):
    """The pinned TrainJob CRD's schema accepts the manifest, and the patched jobs are the default runtime's
    (Trainer's webhook rejects a patch of a replicated job the runtime lacks)."""
    root = module_dir(load()["trainer"])
    crd = yaml.safe_load((root / "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml").read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == jobs.TRAINJOB_API.split("/")[1]]
    spec = jobs.TrainJob(name="ds", **placement(real=False, kwok_nodes=True))
    manifest = jobs.trainjob(spec)
    schema = version["schema"]["openAPIV3Schema"]
    jsonschema.validate(manifest, schema)
    _, patch = runtime_pod_spec(schema, manifest)
    assert set(patch) == {"nodeSelector", "tolerations"}
    runtime = yaml.safe_load((root / "manifests/base/runtimes/deepspeed_distributed.yaml").read_text())
    assert runtime["metadata"]["name"] == spec.runtime
    assert set(spec.placed_jobs) <= {j["name"] for j in runtime["spec"]["template"]["spec"]["replicatedJobs"]}


def test_suite_tests_build_their_jobs_and_pods_through_the_placement_fixtures():
    """One placement mechanism: suite tests get MPIJob/TrainJob specs from the mpijob_spec/trainjob_spec
    fixtures, and the pods they make themselves carry placement.pod_spec."""
    for path in SUITE.glob("test_*.py"):
        text = path.read_text()
        assert not re.search(r"jobs\.(MPIJob|TrainJob)\(", text), f"{path.name} builds a spec itself"
        for call in re.finditer(r"create_namespaced_pod\(", text):
            body = text[call.end():call.end() + 600]
            assert "pod_spec(" in body, f"{path.name}: a pod without the suite's placement"


# ---------------------------------------------------------------- capability detection

def _node(name: str, *, kwok: bool = False, label_only: bool = False, gpus: int = 0, ready: bool = True,
          cordoned: bool = False, taints: list | None = None) -> client.V1Node:
    labels = {"kubernetes.io/hostname": name, **({"type": "kwok"} if kwok else {})}
    annotations = {"kwok.x-k8s.io/node": "fake"} if kwok and not label_only else None
    return client.V1Node(
        metadata=client.V1ObjectMeta(name=name, labels=labels, annotations=annotations),
        spec=client.V1NodeSpec(unschedulable=cordoned or None, taints=taints),
        status=client.V1NodeStatus(allocatable={"cpu": "2", **({GPU: str(gpus)} if gpus else {})},
                                   conditions=[client.V1NodeCondition(type="Ready",
                                                                      status="True" if ready else "False")]))


def _kube(*nodes):
    return SimpleNamespace(core=SimpleNamespace(list_node=lambda: SimpleNamespace(items=list(nodes))))


def _detect(*nodes, overrides=None, tolerations=()):
    return caps.detect(_kube(*nodes), GPU, overrides, tolerations)


def _found(c) -> tuple[bool, bool, bool]:
    return c.simulated, c.pod_network, c.gpus


def _kwok_pools(tainted: bool) -> list:
    taints = [KWOK_TAINT] if tainted else None
    return [*(_node(f"gpu-{i}", kwok=True, gpus=8, taints=taints) for i in range(4)),
            _node("cpu-0", kwok=True, taints=taints)]


def test_kwok_nodes_only_are_simulated_without_pod_network_or_gpus():
    """The local cluster without a real node (`--no-real-node`, `--bare`): its KWOK nodes advertise GPUs
    but run nothing."""
    c = _detect(*_kwok_pools(tainted=False))
    assert _found(c) == (True, False, False) and c.kwok_nodes


def test_kwok_nodes_beside_a_real_node_are_simulated_with_pod_network():
    """The local cluster with real-0 (2 CPUs, no GPU): simulated rows and real pods both run."""
    c = _detect(*_kwok_pools(tainted=True), _node("real-0"))
    assert _found(c) == (True, True, False) and c.kwok_nodes


@pytest.mark.parametrize("real_node, why", [
    (_node("real-0", ready=False), "NotReady"),
    (_node("real-0", cordoned=True), "cordoned"),
    (_node("cp-0", taints=[client.V1Taint(key="node-role.kubernetes.io/control-plane", effect="NoSchedule")]),
     "a control plane's taint the settings do not tolerate"),
    (_node("real-0", taints=[client.V1Taint(key="maintenance", value="now", effect="NoExecute")]), "NoExecute"),
])
def test_a_real_node_that_takes_no_pods_gives_no_pod_network(real_node, why):
    c = _detect(*_kwok_pools(tainted=True), real_node)
    assert _found(c) == (True, False, False), why


def test_taints_the_settings_tolerate_and_soft_taints_do_not_block_a_node():
    cp = _node("cp-0", taints=[client.V1Taint(key="node-role.kubernetes.io/control-plane", effect="NoSchedule")])
    tolerated = [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]
    assert _detect(cp, tolerations=tolerated).pod_network
    soft = _node("real-0", taints=[client.V1Taint(key="spot", value="true", effect="PreferNoSchedule")])
    assert _detect(soft).pod_network


def test_a_customer_cluster_with_real_gpu_nodes():
    """No KWOK node: not simulated. GPU nodes tainted with the resource's name count (pods that request
    GPUs get that toleration from the ExtendedResourceToleration admission plugin); others need the
    settings' tolerations."""
    gpu_taint = client.V1Taint(key=GPU, value="present", effect="NoSchedule")
    c = _detect(_node("cpu-a"), _node("gpu-a", gpus=8, taints=[gpu_taint]))
    assert _found(c) == (False, True, True) and not c.kwok_nodes
    other = client.V1Taint(key="dedicated", value="training", effect="NoSchedule")
    assert not _detect(_node("cpu-a"), _node("gpu-a", gpus=8, taints=[other])).gpus
    dedicated = [{"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"}]
    assert _detect(_node("cpu-a"), _node("gpu-a", gpus=8, taints=[other]), tolerations=dedicated).gpus
    assert not _detect(_node("gpu-a", gpus=8, ready=False)).gpus


def test_a_kwok_node_is_known_by_its_annotation_or_its_label():
    assert _detect(_node("a", kwok=True)).simulated
    assert _detect(_node("b", kwok=True, label_only=True)).simulated
    assert _found(_detect()) == (False, False, False)  # no nodes at all


def test_overrides_win_but_the_kwok_nodes_stay_detected():
    c = _detect(*_kwok_pools(tainted=True), _node("real-0"), overrides={"pod_network": False, "gpus": True})
    assert _found(c) == (True, False, True)
    assert c.overridden == ("gpus", "pod_network") and c.kwok_nodes
    assert c.as_dict() == {"simulated": True, "gpus": True, "pod_network": False, "overridden": ["gpus", "pod_network"]}


@pytest.mark.parametrize("toleration, tolerated", [
    ({"operator": "Exists"}, True),  # tolerates everything
    ({"key": "kwok.x-k8s.io/node", "operator": "Exists"}, True),
    ({"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoExecute"}, False),
    ({"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}, True),  # Equal by default
    ({"key": "kwok.x-k8s.io/node", "operator": "Equal", "value": "real"}, False),
    ({"key": "other", "operator": "Exists"}, False),
])
def test_toleration_matching_follows_kubernetes(toleration, tolerated):
    assert caps.tolerates([toleration], KWOK_TAINT) is tolerated
