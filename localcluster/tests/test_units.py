"""Unit tests: versions file, node pools, job builder, build cache and instances (no cluster)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from mpiplat import jobs, versions
from mpiplat.conformance import workloads
from mpiplat.localcluster import build, cluster, hoststate, nodes, processes, realnode


def test_versions_file_pins_every_component():
    comps = versions.load()
    assert {"kubernetes", "etcd", "kwok", "helm", "mpi-operator", "kueue", "jobset", "trainer"} <= set(comps)
    assert comps["kubernetes"].minor == "1.34"
    assert comps["etcd"].version.startswith("v3.5.")
    assert comps["kwok"].version.startswith("v0.8.")
    assert comps["mpi-operator"].version.startswith("v0.8.")
    assert comps["kueue"].version.startswith("v0.19.")
    assert comps["jobset"].version.startswith("v0.12.")
    assert comps["trainer"].version.startswith("v2.3.")


@pytest.mark.parametrize("spec, message", [
    ({"components": {"x": {"version": "1.0", "module": "m", "build": "wrapper"}}}, "must look like vX.Y.Z"),
    ({"components": {"x": {"version": "v1.0.0", "module": "m", "build": "make"}}}, "allowed: kubernetes, wrapper"),
    ({"components": {"x": {"version": "v1.0.0", "build": "wrapper"}}}, "components.x.module is required"),
    ({"components": {}}, "non-empty mapping"),
])
def test_versions_file_errors_name_the_field(tmp_path, spec, message):
    path = tmp_path / "versions.yml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(versions.VersionsError, match=message):
        versions.load(path)


def test_the_kubernetes_matrix_pins_one_version_a_minor_from_1_34_to_1_37_the_default_first():
    matrix = versions.kubernetes_matrix()
    assert matrix[0] == versions.load()["kubernetes"].version
    assert sorted(v.rsplit(".", 1)[0] for v in matrix) == ["v1.34", "v1.35", "v1.36", "v1.37"]
    assert versions.kubernetes_pin("1.36") == versions.kubernetes_pin("v1.36") == next(
        v for v in matrix if v.startswith("v1.36."))
    assert versions.kubernetes_pin(matrix[1].lstrip("v")) == matrix[1]
    comps, other = versions.load(), versions.load(kubernetes="1.37")
    assert other["kubernetes"].minor == "1.37"
    del comps["kubernetes"], other["kubernetes"]
    assert other == comps


@pytest.mark.parametrize("wanted", ["1.33", "v1.36.9", "1.3", "latest"])
def test_a_kubernetes_version_off_the_matrix_is_refused_naming_the_pinned_ones(wanted):
    with pytest.raises(versions.VersionsError, match=f"Kubernetes '{wanted}' is not pinned for the local cluster; "
                                                     f"allowed: {', '.join(versions.kubernetes_matrix())}"):
        versions.load(kubernetes=wanted)


def test_a_matrix_without_the_pinned_version_is_refused(tmp_path):
    path = tmp_path / "versions.yml"
    path.write_text(yaml.safe_dump({"components": {"kubernetes": {
        "version": "v1.34.4", "module": "k8s.io/kubernetes", "build": "kubernetes", "matrix": ["v1.35.4"]}}}))
    with pytest.raises(versions.VersionsError, match="kubernetes.matrix must be a list of vX.Y.Z versions holding "
                                                     "its version v1.34.4, got"):
        versions.load(path)


def test_a_cluster_runs_the_kubernetes_version_its_up_chose(monkeypatch, tmp_path):
    monkeypatch.setenv("MPIPLAT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("MPIPLAT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MPIPLAT_CLUSTER", "matrix")
    pinned = versions.load()["kubernetes"]
    assert build.binary("kubelet") == build.bin_dir(pinned) / "kubelet"  # not up: the pin
    other = versions.kubernetes_pin("1.36")
    cluster.state_dir().mkdir(parents=True)
    cluster.kubernetes_file().write_text(other + "\n")
    assert build.binary("kube-apiserver").parent.name == other
    assert build.binary("etcd") == build.bin_dir(versions.load()["etcd"]) / "etcd"
    with pytest.raises(cluster.ClusterError, match=f"cluster matrix runs Kubernetes {other}, not {pinned.version}: "
                                                   "run `mpiplat cluster down` first"):
        cluster.up(bare=True, kubernetes=pinned.minor)


@pytest.mark.parametrize("running, target, message", [
    ("1.34", "1.36", "an upgrade goes one minor up (or to a later patch), not to v1.36"),
    ("1.36", "1.35", "an upgrade goes one minor up (or to a later patch), not to v1.35"),
    ("1.35", "1.35", "an upgrade goes one minor up (or to a later patch), not to v1.35"),
    ("1.35", "1.36", "cluster matrix is not running: `mpiplat cluster up` first"),
])
def test_a_kubernetes_upgrade_goes_one_minor_up_on_a_running_cluster(monkeypatch, tmp_path, running, target, message):
    monkeypatch.setenv("MPIPLAT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("MPIPLAT_CLUSTER", "matrix")
    cluster.state_dir().mkdir(parents=True)
    cluster.kubernetes_file().write_text(versions.kubernetes_pin(running))
    with pytest.raises(cluster.ClusterError, match=re.escape(message)):
        cluster.upgrade(target)
    assert cluster.kubernetes_version() == versions.kubernetes_pin(running)


def test_default_node_pools_have_gpu_and_cpu_nodes():
    objs = nodes.manifests(nodes.load())
    gpu = [n for n in objs if nodes.GPU_RESOURCE in n["status"]["allocatable"]]
    cpu = [n for n in objs if nodes.GPU_RESOURCE not in n["status"]["allocatable"]]
    assert len(gpu) == 8 and len(cpu) == 1
    assert all(n["status"]["allocatable"][nodes.GPU_RESOURCE] == "8" for n in gpu)
    assert all(n["metadata"]["labels"]["nvidia.com/gpu.product"] for n in gpu)
    assert {n["metadata"]["labels"][nodes.ZONE_LABEL] for n in gpu} == {"zone-a", "zone-b"}
    racks: dict[str, set] = {}
    for n in gpu:  # 4 racks of 2 nodes (SCH-06 needs a rack to span hosts), each rack in one zone
        labels = n["metadata"]["labels"]
        racks.setdefault(labels[nodes.RACK_LABEL], set()).add((n["metadata"]["name"], labels[nodes.ZONE_LABEL]))
    assert len(racks) == 4 and all(len(members) == 2 and len({z for _, z in members}) == 1
                                   for members in racks.values()), racks


@pytest.mark.parametrize("pool, message", [
    ({"name": "gpu", "count": -1, "gpus": 8, "zones": ["a"], "racks": ["r"]}, r"pools\[0\].count is -1"),
    ({"name": "GPU", "count": 1, "gpus": 8, "zones": ["a"], "racks": ["r"]}, r"pools\[0\].name is 'GPU'"),
    ({"name": "gpu", "count": 1, "gpus": "8", "zones": ["a"], "racks": ["r"]}, r"pools\[0\].gpus is '8'"),
    ({"name": "gpu", "count": 1, "gpus": 8, "zones": [], "racks": ["r"]}, r"pools\[0\].zones is \[\]"),
])
def test_bad_node_pools_are_rejected(tmp_path, pool, message):
    path = tmp_path / "pools.yml"
    path.write_text(yaml.safe_dump({"pools": [pool]}))
    with pytest.raises(nodes.NodePoolError, match=message):
        nodes.load(path)


def test_mpijob_builder_wires_workers_slots_queue_and_gpus():
    job = jobs.mpijob(jobs.MPIJob(name="pi", namespace="ns", workers=3, slots_per_worker=2,
                                  gpus_per_worker=1, queue="team-a"))
    assert job["metadata"]["labels"][jobs.QUEUE_LABEL] == "team-a"
    spec = job["spec"]
    assert spec["slotsPerWorker"] == 2
    assert spec["mpiReplicaSpecs"]["Worker"]["replicas"] == 3
    worker = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"][jobs.GPU_RESOURCE] == "1"
    # No CPU limit unless asked: MPI ranks poll, and under a CFS quota they stall.
    assert worker["resources"] == {"requests": {"cpu": "100m", "memory": "128Mi"},
                                   "limits": {"memory": "128Mi", jobs.GPU_RESOURCE: "1"}}
    limited = jobs.mpijob(jobs.MPIJob(name="pi", cpu_limit="2"))["spec"]["mpiReplicaSpecs"]["Worker"]
    assert limited["template"]["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "2", "memory": "128Mi"}
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["args"][4:9] == ["mpirun", "--allow-run-as-root", "-np", "6", "--bind-to"]


@pytest.mark.parametrize("kwargs, message", [
    ({"name": "a.b"}, "name 'a.b' is invalid"),
    ({"name": "ok", "workers": 0}, "workers is 0"),
    ({"name": "ok", "implementation": "LAM"}, "allowed: OpenMPI, Intel, MPICH"),
])
def test_mpijob_builder_rejects_bad_input(kwargs, message):
    with pytest.raises(jobs.JobSpecError, match=message):
        jobs.mpijob(jobs.MPIJob(**kwargs))


def test_build_is_skipped_when_cached(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MPIPLAT_CACHE", str(tmp_path))
    comp = versions.load()["helm"]
    d = build.bin_dir(comp)
    d.mkdir(parents=True)
    (d / "helm").write_text("")
    assert not build.is_built(comp)
    (d / ".complete").write_text(build._stamp(comp))
    assert build.is_built(comp)
    assert build.build(only=["helm"]) == []
    assert "cached   helm" in capsys.readouterr().out


def test_build_rejects_unknown_component():
    with pytest.raises(build.BuildError, match="unknown component.*nope.*allowed: kubernetes"):
        build.build(only=["nope"])


def test_workload_jobs_mount_the_programs_and_run_them_under_mpirun():
    job = jobs.mpijob(jobs.MPIJob(name="ar", implementation="MPICH", workers=2, slots_per_worker=2,
                                  workload="allreduce", workload_args=["--count", "8"]))
    replicas = job["spec"]["mpiReplicaSpecs"]
    launcher = replicas["Launcher"]["template"]["spec"]
    assert launcher["containers"][0]["args"][4:] == ["mpirun", "-n", "4", "-ppn", "2", "python3",
                                                        "/opt/mpiplat/allreduce.py", "--count", "8"]
    for role in ("Launcher", "Worker"):
        pod = replicas[role]["template"]["spec"]
        assert pod["volumes"] == [{"name": "workloads", "configMap": {"name": jobs.WORKLOADS_CONFIGMAP}}]
        assert pod["containers"][0]["volumeMounts"][0]["mountPath"] == "/opt/mpiplat"
    cm = workloads.configmap("ns")
    assert set(cm["data"]) == {"allreduce.py", "pingpong.py", "pi.py", "checkpoint.py", "torchbench.py", "whoami.py"}
    assert "MPIPLAT_RESULT" in cm["data"]["allreduce.py"]
    with pytest.raises(jobs.JobSpecError, match="workload 'no/pe' is invalid; allowed: a program name"):
        jobs.mpijob(jobs.MPIJob(name="x", workload="no/pe"))
    with pytest.raises(ValueError, match="unknown workload program 'nope'; allowed: allreduce"):
        workloads.program_path("nope")


def test_a_pvc_is_mounted_in_the_launcher_and_every_worker():
    job = jobs.mpijob(jobs.MPIJob(name="ck", workload="checkpoint", pvc="ckpt", pvc_mount_path="/ckpt"))
    for role in ("Launcher", "Worker"):
        pod = job["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]
        assert {"name": "data", "persistentVolumeClaim": {"claimName": "ckpt"}} in pod["volumes"]
        assert {"name": "data", "mountPath": "/ckpt"} in pod["containers"][0]["volumeMounts"]


def test_another_instance_has_its_own_state_and_ports(monkeypatch, tmp_path):
    monkeypatch.setenv("MPIPLAT_STATE", str(tmp_path / "mpiplat"))
    monkeypatch.delenv("MPIPLAT_CLUSTER", raising=False)
    default_ports = cluster.control_plane_ports()
    assert cluster.state_dir() == tmp_path / "mpiplat"
    monkeypatch.setenv("MPIPLAT_CLUSTER", "helm")
    ports = cluster.control_plane_ports()
    assert cluster.state_dir() == tmp_path / "mpiplat-helm"
    assert cluster.kubeconfig_path().is_relative_to(tmp_path / "mpiplat-helm")
    assert not set(ports.values()) & set(default_ports.values())
    assert not set(ports.values()) & {p for c in processes.CONTROLLERS for p in c.ports}
    assert set(cluster.all_ports()) == set(ports.values())  # no host controllers in a bare instance
    monkeypatch.delenv("MPIPLAT_CLUSTER")
    assert max(cluster.all_ports()) < 32768  # below the ephemeral range outgoing connections use


@pytest.mark.parametrize("name", ["Helm", "a_b", "-x", "x" * 33])
def test_bad_instance_names_are_refused(monkeypatch, name):
    monkeypatch.setenv("MPIPLAT_CLUSTER", name)
    with pytest.raises(cluster.ClusterError, match=f"MPIPLAT_CLUSTER='{name}' is not allowed"):
        cluster.state_dir()


def test_another_clusters_controllers_need_its_real_node(monkeypatch):
    monkeypatch.setenv("MPIPLAT_CLUSTER", "faults")
    with pytest.raises(cluster.ClusterError, match="drop --no-real-node, or start it with --bare"):
        cluster.up(real_node=False)


def test_another_clusters_controllers_listen_in_its_nodes_namespace(monkeypatch):
    monkeypatch.setenv("MPIPLAT_CLUSTER", "faults")
    net = realnode.network()
    assert processes.address() == net.peer_ip
    assert processes.prometheus_url() == f"http://{net.peer_ip}:31188"
    assert processes.controller("kueue").health_url == f"http://{net.peer_ip}:31174/readyz"
    assert processes.all_ports() == sorted(cluster.control_plane_ports().values())  # the others are in the netns
    monkeypatch.delenv("MPIPLAT_CLUSTER")
    assert processes.address() == "127.0.0.1"
    assert processes.prometheus_url() == "http://127.0.0.1:31188"


def test_make_setup_installs_the_debian_packages_the_local_cluster_needs():
    """The Makefile's DEBS (what `make setup` installs) is Debian's prometheus plus the real node's packages."""
    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    [debs] = re.findall(r"^DEBS = (.+)$", makefile, re.MULTILINE)
    assert sorted(debs.split()) == sorted({"prometheus", *realnode.DEBIAN.values()})


# ---------------------------------------------------------------- a second cluster's real node

def test_the_default_node_lives_in_the_host_network_namespace(monkeypatch):
    monkeypatch.delenv("MPIPLAT_CLUSTER", raising=False)
    net = realnode.network()
    assert (net.netns, net.pod_subnet, net.node_ip, net.api_ip, net.cgroup_root) == (
        False, "10.244.0.0/24", "10.244.0.1", "10.244.0.1", "")
    assert realnode.all_ports() == sorted(realnode.PORTS.values())


def test_another_clusters_node_has_namespaces_addresses_and_cgroups_of_its_own(monkeypatch, tmp_path):
    monkeypatch.setenv("MPIPLAT_CLUSTER", "helm")
    monkeypatch.setenv("MPIPLAT_STATE", str(tmp_path / "mpiplat"))  # apiserver_patches writes certificates
    net = realnode.network()
    n = int(net.pod_subnet.split(".")[2])
    assert net.netns and 1 <= n <= 250
    assert (net.pod_subnet, net.node_ip, net.api_ip, net.peer_ip) == (
        f"10.244.{n}.0/24", f"10.244.{n}.1", f"10.245.{n}.1", f"10.245.{n}.2")
    assert net.veth == f"mpnode{n}" and len(net.veth) <= 15  # Linux's limit on link names
    assert net.veth.startswith(hoststate.OTHER_NODE_LINKS)  # the default node's record leaves it
    assert net.cgroup_root == "/mpiplat-helm"
    assert realnode.all_ports() == []  # its ports are in its own network namespace
    assert realnode.kubelet_config()["cgroupRoot"] == "/mpiplat-helm"
    args = {a["key"]: a["value"] for a in realnode.apiserver_patches()[1][0]["extraArgs"]}
    assert args["advertise-address"] == net.api_ip and args["enable-aggregator-routing"] == "true"


def test_a_kubelet_without_cadvisors_containerd_flag_finds_the_nodes_containerd_where_cadvisor_looks(
        monkeypatch, tmp_path):
    """Kubernetes 1.37's kubelet has no --containerd: cAdvisor's default path becomes a link to the node's socket,
    unless something else is there (then a warning says what has no data)."""
    sock, link, said = tmp_path / "node" / "containerd.sock", tmp_path / "run" / "containerd" / "containerd.sock", []
    monkeypatch.setattr(realnode, "_has_flag", lambda exe, flag: False)
    monkeypatch.setattr(realnode, "_enter", lambda: [])
    monkeypatch.setattr(realnode, "_sock", lambda: sock)
    monkeypatch.setattr(realnode, "CADVISOR_SOCKET", link)
    realnode._cadvisor_link(said.append)
    realnode._cadvisor_link(said.append)  # again: the link is there
    assert os.readlink(link) == str(sock) and said == []
    link.unlink()
    link.write_text("another containerd")
    realnode._cadvisor_link(said.append)
    assert link.read_text() == "another containerd" and len(said) == 1 and "reports no container by pod" in said[0]
    monkeypatch.setattr(realnode, "_has_flag", lambda exe, flag: flag == "--containerd")
    link.unlink()
    realnode._cadvisor_link(said.append)  # up to 1.36 the kubelet's flag says where
    assert not link.exists() and len(said) == 1


def test_every_kubelet_start_links_cadvisors_socket_as_cluster_upgrade_to_137_restarts_it(monkeypatch, tmp_path):
    """`cluster upgrade` 1.36 -> 1.37 restarts the kubelet at a version without --containerd: the link is made
    where the kubelet starts (up, upgrade, a fault's restart), not only by `up`; other processes need none."""
    monkeypatch.setenv("MPIPLAT_STATE", str(tmp_path / "state"))
    linked, started = [], []
    monkeypatch.setattr(realnode, "_cadvisor_link", lambda say: linked.append(say))
    monkeypatch.setattr(realnode, "_argv", lambda proc: ["true"])
    monkeypatch.setattr(realnode, "_enter", lambda: [])
    monkeypatch.setattr(realnode, "node_dir", lambda: tmp_path)
    monkeypatch.setattr(realnode.build, "binary", lambda name, *a: tmp_path / name)
    monkeypatch.setattr(realnode.subprocess, "Popen",
                        lambda argv, **kw: started.append(argv) or type("Started", (), {"pid": 1})())
    monkeypatch.setattr(realnode.processes, "running_pid", lambda pid_file: None)
    realnode._start(realnode._process("kube-proxy"))
    assert linked == [] and started == [["true"]]
    realnode._start(realnode._process("kubelet"), print)
    assert linked == [print] and len(started) == 2


@pytest.mark.parametrize("image, mirrored", [
    ("registry.k8s.io/kueue/kueue:v0.19.2", "mirror.example.com/mpiplat/kueue/kueue:v0.19.2"),
    ("docker.io/mpioperator/mpi-operator:0.8.2", "mirror.example.com/mpiplat/mpioperator/mpi-operator:0.8.2"),
    ("localhost:5000/x/y:1", "mirror.example.com/mpiplat/x/y:1"),
    ("mpioperator/mpi-operator:0.8.2", "mirror.example.com/mpiplat/mpioperator/mpi-operator:0.8.2"),
])
def test_controller_images_are_named_as_the_roles_rewrite_them(image, mirrored):
    """One implementation (mpiplat.versions): the roles' filters, and the real node's tags (images.tag_mirrored)."""
    assert versions.mirrored(image, "mirror.example.com/mpiplat/") == mirrored
    assert versions.mirror_manifest(f"spec:\n  - image: {image}\n", "mirror.example.com/mpiplat/") == \
        f"spec:\n  - image: {mirrored}\n"


@pytest.mark.parametrize("registry", ["https://mirror.example.com", "Mirror.example.com", "mirror example"])
def test_a_bad_image_registry_is_refused_before_anything_changes(monkeypatch, tmp_path, registry):
    monkeypatch.setenv("MPIPLAT_STATE", str(tmp_path / "state"))
    with pytest.raises(cluster.ClusterError, match=f"--image-registry '{re.escape(registry)}' is not a registry"):
        cluster.up(image_registry=registry)
    assert not (tmp_path / "state").exists()


def test_kernel_sysctls_are_recorded_by_the_first_node_and_restored_by_the_last(monkeypatch, tmp_path):
    monkeypatch.setattr(hoststate, "SHARED", tmp_path / "kernel-sysctls.json")
    monkeypatch.setattr(hoststate, "snapshot", lambda: {"sysctls": {"kernel.panic": "0", "net.ipv4.ip_forward": "0"}})
    assert hoststate.release("mpiplat") == {}  # nothing recorded, nobody else: restore your own record
    assert hoststate.hold("mpiplat") == {"kernel.panic": "0"}  # per-network-namespace sysctls are each node's
    monkeypatch.setattr(hoststate, "snapshot", lambda: {"sysctls": {"kernel.panic": "10"}})  # a kubelet set it
    assert hoststate.hold("helm") == {"kernel.panic": "0"}  # the values from before the first node
    assert hoststate.release("mpiplat") is None  # helm's node still runs
    assert hoststate.release("helm") == {"kernel.panic": "0"}  # the last one writes them back
    assert not hoststate.SHARED.exists()


def test_the_restricted_v2_emulation_gives_names_that_differ_in_one_character_their_own_uid_range():
    from mpiplat.localcluster import scc

    names = ["team-a", "team-b", "team-c", "mpiplat-conf-0", "mpiplat-conf-1", "a" * 63, "b" + "a" * 62]
    ranges = {scc.uid_range(n) for n in names}
    assert len(ranges) == len(names)
    for value in ranges:
        first, size = (int(x) for x in value.split("/"))
        assert size == scc.BLOCK and scc.FIRST_UID <= first and first + size - 1 < 2**31 - 1
        assert (first - scc.FIRST_UID) % scc.BLOCK == 0


def test_every_block_gets_an_selinux_level_of_its_own_as_openshift_writes_it():
    from mpiplat.localcluster import scc

    levels = set()
    for b in range(scc.BLOCKS):
        hi, lo = 110 + b % scc.MCS_SPAN, b // scc.MCS_SPAN
        assert 0 <= lo < hi <= 1023  # OpenShift's categories c0..c1023, the larger first: s0:c27,c4
        levels.add((hi, lo))
    assert len(levels) == scc.BLOCKS
    assert re.fullmatch(r"s0:c\d+,c\d+", scc.mcs("team-a"))



