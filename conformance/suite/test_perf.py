"""PERF: GPU benchmarks (conformance/workloads/torchbench.py under mpirun) over a node sweep:
NCCL all-reduce bus bandwidth, DDP scaling efficiency, and SC-002's 4-worker speed-up."""

from __future__ import annotations

import pytest

from mpiplat import jobs
from mpiplat.conformance import scaling, workloads
from mpiplat.conformance.watch import run_workload_job

NEEDS = ["gpus", "pod_network"]


class Sweep:
    """Runs each benchmark job once per shape and remembers the results for all PERF tests."""

    def __init__(self, kube, run, settings, mpijob_spec):
        self.kube, self.run, self.settings, self.mpijob_spec = kube, run, settings, mpijob_spec
        self.cfg = settings.gpu_benchmark
        self.cache: dict[tuple, dict] = {}
        self.ns = None

    def result(self, bench: str, nodes: int, gpus_per_node: int) -> list[dict]:
        key = (bench, nodes, gpus_per_node)
        if key not in self.cache:
            image = self.settings.images.get("torch")
            if not image:
                pytest.fail("settings field images.torch is not set: the gpu profile needs an image with CUDA torch, "
                            "mpi4py, Open MPI's mpirun and sshd on port 2222", pytrace=False)
            if self.ns is None:
                self.ns = self.run.namespace()
                self.kube.core.create_namespaced_config_map(self.ns, workloads.configmap(self.ns))
            args = ([bench, "--max-size", str(self.cfg["allreduce_max_bytes"])] if bench == "allreduce" else
                    [bench, "--steps", str(self.cfg["ddp_steps"]), "--batch", str(self.cfg["ddp_batch"])])
            spec = self.mpijob_spec(
                f"{bench}-{nodes}x{gpus_per_node}", self.ns, real=True, workers=nodes,
                slots_per_worker=gpus_per_node, gpus_per_worker=gpus_per_node, image=image,
                workload="torchbench", workload_args=args, cpu=self.cfg["worker_cpu"],
                memory=self.cfg["worker_memory"])
            self.cache[key] = run_workload_job(self.kube, jobs.mpijob(spec), "torchbench", nodes * gpus_per_node,
                                               timeout=self.cfg["job_timeout_s"])
        return self.cache[key]

    def ddp_throughput(self, nodes: int, gpus_per_node: int) -> float:
        [record] = self.result("ddp", nodes, gpus_per_node)
        return record["samples_per_s"]


@pytest.fixture(scope="module")
def sweep(kube, run, settings, mpijob_spec) -> Sweep:
    return Sweep(kube, run, settings, mpijob_spec)  # lazy: nothing runs until a test (not skipped) asks


@pytest.mark.requirement("PERF-01", needs=NEEDS)
def test_allreduce_bus_bandwidth_per_node_count(sweep, run):
    gpn = sweep.cfg["gpus_per_node"]
    for nodes in sweep.cfg["nodes"]:
        records = sweep.result("allreduce", nodes, gpn)
        peak = max(r["busbw_GBps"] for r in records)
        run.record("PERF-01", f"all-reduce bus bandwidth, {nodes} node(s) x {gpn} GPUs ({records[0]['backend']})",
                   peak, "GB/s", better="higher")
        assert records[0]["backend"] == "nccl", f"{nodes} node(s): ran on {records[0]['backend']}, not NCCL"
        assert peak > 0


@pytest.mark.requirement("PERF-02", needs=NEEDS)
def test_scaling_efficiency_meets_the_targets(sweep, run, settings, evidence):
    """DDP scaling efficiency against the settings' targets at 8 and 16 nodes (efficiency_8_nodes,
    efficiency_16_nodes). A sweep (gpu_benchmark.nodes) that stops below 8 nodes fails at once: the row's
    first target cannot be judged. One that reaches 8 but not 16 judges 8 only and says so (the 16-node
    target is then not shown). Fails on a cluster whose efficiency at 8 (or 16) nodes is below its target,
    or that cannot run the 8-node point."""
    gpn, nodes = sweep.cfg["gpus_per_node"], sweep.cfg["nodes"]
    targets = {n: settings.thresholds[f"efficiency_{n}_nodes"] for n in (8, 16)}
    if max(nodes) < 8:
        pytest.fail(f"settings gpu_benchmark.nodes {nodes} stops at {max(nodes)} nodes: scaling efficiency at 8 nodes "
                    f"(target {targets[8]:.0%}) is not measured; add 8 (and 16) to the sweep, on a cluster with "
                    "that many GPU nodes", pytrace=False)
    judged = {n: t for n, t in targets.items() if n <= max(nodes)}
    unjudged = sorted(set(targets) - set(judged))
    if unjudged:
        evidence.partial(f"efficiency at {' and '.join(map(str, unjudged))} nodes not measured (gpu_benchmark.nodes "
                         f"{nodes}): target {', '.join(f'{targets[n]:.0%}' for n in unjudged)} not judged")
    points = scaling.analyse({n: sweep.ddp_throughput(n, gpn) for n in nodes})
    for p in points:
        run.record("PERF-02", f"DDP throughput, {p.nodes} node(s) x {gpn} GPUs", p.throughput, "samples/s",
                   better="higher")
        run.record("PERF-02", f"scaling efficiency at {p.nodes} node(s)", p.efficiency, "",
                   target=targets.get(p.nodes), better="higher")
    run.plots.append({"requirement": "PERF-02", "title": f"DDP scaling efficiency ({gpn} GPUs per node)",
                      "svg": scaling.svg_plot(points, judged)})
    failures = scaling.efficiency_failures(points, judged)
    assert not failures, "; ".join(failures)


@pytest.mark.requirement("PERF-03", needs=NEEDS)
def test_four_workers_take_at_most_the_target_share_of_single_node_time(sweep, run, settings):
    """A fixed amount of work: its time is inversely proportional to the measured throughput."""
    ratio = scaling.time_ratio(1 / sweep.ddp_throughput(1, 1), 1 / sweep.ddp_throughput(4, 1))
    target = settings.thresholds["perf03_time_ratio"]
    run.record("PERF-03", "time of 4 workers x 1 GPU / time of 1 worker x 1 GPU", ratio, "", target=target)
    assert ratio <= target, f"4 workers need {ratio:.0%} of the single-node time; target {target:.0%}"
