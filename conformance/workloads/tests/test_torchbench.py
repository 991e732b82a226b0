"""torchbench.py's CPU/gloo path under a real Open MPI mpiexec with PyPI's torch (PERF-01..03 programs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from mpiplat.conformance.workloads import results
from mpiplat.conformance.workloads.results import CheckFailed

if TYPE_CHECKING:
    from conftest import Run


pytestmark = pytest.mark.mpi

Runner = Callable[..., "Run"]
SIZES = [1 << k for k in range(10, 19)]  # 1 KiB .. 256 KiB


@pytest.mark.parametrize("nranks", [2, 4])
def test_allreduce_bus_bandwidth_per_size_with_verified_sums(run_workload: Runner, nranks: int) -> None:
    run = run_workload("torch", nranks, "torchbench", "allreduce", "--max-size", str(SIZES[-1]), "--iterations", "10")
    assert run.returncode == 0, run.output
    records = results.assert_passed(run.results, "torchbench", ranks=nranks)
    assert [r["size_bytes"] for r in records] == SIZES
    for r in records:
        assert r["bench"] == "allreduce" and r["backend"] == "gloo" and r["device"] == "cpu"
        assert r["wrong_elements"] == 0 and r["time_us"] > 0 and r["algbw_GBps"] > 0
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 2 * (nranks - 1) / nranks, rel=1e-3)
        assert r["torch"].startswith("2.13.0")


def test_allreduce_check_fails_when_a_rank_contributes_a_wrong_value(run_workload: Runner) -> None:
    run = run_workload("torch", 3, "torchbench", "allreduce", "--max-size", "4096", "--inject-wrong-rank", "1")
    assert run.returncode == 1, run.output
    assert [r["wrong_elements"] for r in run.results] == [3, 3, 3]  # element 0 is wrong on every rank
    with pytest.raises(CheckFailed, match="torchbench: 3/3 result"):
        results.assert_passed(run.results, "torchbench")
    assert "check FAILED" in run.stderr


def test_ddp_reports_throughput_and_keeps_ranks_in_sync(run_workload: Runner) -> None:
    run = run_workload("torch", 2, "torchbench", "ddp", "--width", "256", "--steps", "10", "--batch", "32")
    assert run.returncode == 0, run.output
    [r] = results.assert_passed(run.results, "torchbench", ranks=2)
    assert r["bench"] == "ddp" and r["params_in_sync"] is True and r["steps"] == 10
    assert r["loss_last"] < r["loss_first"]
    assert r["samples_per_s"] == pytest.approx(32 * 2 * 10 / r["seconds"], rel=1e-3)
    assert r["samples_per_s_per_rank"] == pytest.approx(r["samples_per_s"] / 2, rel=1e-3)
    assert r["parameters"] == 3 * (256 * 256 + 256) + 256 * 16 + 16


def test_ddp_check_fails_when_a_rank_diverges(run_workload: Runner) -> None:
    run = run_workload("torch", 2, "torchbench", "ddp", "--width", "64", "--steps", "3", "--inject-desync-rank", "1")
    assert run.returncode == 1, run.output
    [r] = run.results
    assert r["check"] == "fail" and r["params_in_sync"] is False
    assert "PARAMETERS DIVERGED" in run.stdout


def test_rendezvous_without_master_addr_goes_through_mpi(run_workload: Runner) -> None:
    """In an MPIJob nobody sets MASTER_ADDR: rank 0 shares its host name and a free port over MPI."""
    run = run_workload("torch", 2, "torchbench", "allreduce", "--max-size", "1024",
                       env={"MASTER_ADDR": "", "MASTER_PORT": ""})
    assert run.returncode == 0, run.output
    results.assert_passed(run.results, "torchbench", ranks=2)


def test_nccl_backend_without_gpus_says_so(run_workload: Runner) -> None:
    run = run_workload("torch", 2, "torchbench", "--backend", "nccl", "allreduce")
    assert run.returncode != 0, run.output
    assert "--backend nccl needs CUDA GPUs" in run.stderr


def test_injecting_into_a_missing_rank_is_refused(run_workload: Runner) -> None:
    run = run_workload("torch", 2, "torchbench", "ddp", "--inject-desync-rank", "7")
    assert run.returncode != 0, run.output
    assert "not a rank of this 2-rank job" in run.stderr
