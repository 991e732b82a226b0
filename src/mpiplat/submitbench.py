"""Submission latency of the SDK and the CLI: submit -> Created, against the seed's 5 s.

    python -m mpiplat.submitbench [--jobs 200] [--namespaces 4] [--cli-jobs 40] [--cli-concurrency 8]

On the cluster in $KUBECONFIG (default: the local reference cluster, started if it is not up). It makes
`--namespaces` namespaces, then submits `--jobs` suspended MPIJobs at once through the AsyncClient (each
job's own create call), and `--cli-jobs` through `mpiplat job create` processes, `--cli-concurrency` at a
time. A job is Created when mpi-operator has set its Created condition; a watch per namespace, opened
before the first submission, notes when each job's event arrives. Suspended jobs make no pods: this
measures the API server, the admission webhooks and the operator's pick-up, not scheduling.
It prints p50/p95/p99 of the create call and of submit -> Created, and deletes its namespaces.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client

from mpiplat.jobs import MPIJob
from mpiplat.kube import MPIJOB, ConditionWatch, Kube
from mpiplat.sdk import AsyncClient

SEED_TARGET_S = 5.0  # the seeds' submit -> Created
GOAL_P95_S = 0.25  # ours, at 200 concurrent submissions on the local cluster


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def _job(name: str, namespace: str) -> MPIJob:
    return MPIJob(name=name, namespace=namespace, workers=2, suspend=True)


async def _sdk(kube: Kube, namespaces: list[str], count: int) -> dict[tuple[str, str], tuple[float, float]]:
    """(submit start, create call done) per job, all submitted at once."""
    times = {}
    async with AsyncClient(kube=kube, max_concurrency=count) as c:
        async def one(i: int) -> None:
            ns = namespaces[i % len(namespaces)]
            start = time.monotonic()
            await c.create(_job(f"sdk-{i}", ns), check_gpus=False, check_pods=False)
            times[(ns, f"sdk-{i}")] = (start, time.monotonic())
        await asyncio.gather(*(one(i) for i in range(count)))
    return times


def _cli(kube: Kube, namespaces: list[str], count: int, concurrency: int) -> dict:
    times = {}

    def one(i: int) -> None:
        ns = namespaces[i % len(namespaces)]
        start = time.monotonic()
        subprocess.run([sys.executable, "-m", "mpiplat.cli", "job", "create", f"cli-{i}", "--kubeconfig",
                        kube.kubeconfig, "-n", ns, "--no-gpu-check", "--no-pod-check", "--", "hostname"], check=True,
                       capture_output=True, text=True)
        times[(ns, f"cli-{i}")] = (start, time.monotonic())
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(count)))
    return times


def _report(label: str, times: dict, created: dict) -> list[str]:
    calls = [done - start for start, done in times.values()]
    to_created = [created[(*k, "Created")] - start for k, (start, _) in times.items() if (*k, "Created") in created]
    missing = len(times) - len(to_created)
    rows = [f"| {label} | create call | {len(calls)} | {_pct(calls, 50):.3f} | {_pct(calls, 95):.3f} | "
            f"{_pct(calls, 99):.3f} | |"]
    if to_created:
        p95 = _pct(to_created, 95)
        verdict = (f"{'meets' if p95 <= SEED_TARGET_S else 'MISSES'} the seed's {SEED_TARGET_S:.0f} s; "
                   f"{'meets' if p95 <= GOAL_P95_S else 'misses'} our p95 goal {GOAL_P95_S} s")
        rows.append(f"| {label} | submit -> Created | {len(to_created)} | {_pct(to_created, 50):.3f} | {p95:.3f} | "
                    f"{_pct(to_created, 99):.3f} | {verdict}" + (f"; {missing} never Created" if missing else "")
                    + " |")
    else:
        rows.append(f"| {label} | submit -> Created | 0 | | | | no job was Created |")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mpiplat.submitbench", description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=200)
    p.add_argument("--namespaces", type=int, default=4)
    p.add_argument("--cli-jobs", type=int, default=40)
    p.add_argument("--cli-concurrency", type=int, default=8)
    args = p.parse_args(argv)
    if os.environ.get("KUBECONFIG"):
        kube = Kube()
    else:
        from mpiplat.localcluster import cluster

        if not cluster.status()["healthy"]:
            cluster.up()
        kube = Kube(str(cluster.kubeconfig_path()))
    run = uuid.uuid4().hex[:6]
    namespaces = [f"bench-{run}-{i}" for i in range(args.namespaces)]
    for ns in namespaces:
        kube.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
            name=ns, labels={"mpiplat.io/test": "submitbench"})))
    watcher = ConditionWatch(kube, MPIJOB, namespaces, ("Created",))
    try:
        print(f"submitting {args.jobs} MPIJobs at once through the SDK into {args.namespaces} namespaces ...",
              flush=True)
        sdk_times = asyncio.run(_sdk(kube, namespaces, args.jobs))
        watcher.wait_for([(*k, "Created") for k in sdk_times], 120)
        print(f"submitting {args.cli_jobs} through `mpiplat job create`, {args.cli_concurrency} at a time ...",
              flush=True)
        cli_times = _cli(kube, namespaces, args.cli_jobs, args.cli_concurrency)
        watcher.wait_for([(*k, "Created") for k in cli_times], 120)
        print("| path | latency | jobs | p50 s | p95 s | p99 s | against |\n|---|---|---|---|---|---|---|")
        print("\n".join(_report(f"SDK, {args.jobs} at once", sdk_times, watcher.seen)
                        + _report(f"CLI, {args.cli_concurrency} at a time", cli_times, watcher.seen)))
    finally:
        watcher.stop()
        for ns in namespaces:
            kube.core.delete_namespace(ns)
    return 0


if __name__ == "__main__":
    sys.exit(main())
