"""checkpoint.py (JOB-10) under a real mpiexec: write, read back in a second run, and detect damage."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from mpiplat.conformance.workloads import mpienv, results

if TYPE_CHECKING:
    from conftest import Run


pytestmark = pytest.mark.mpi

Runner = Callable[..., "Run"]


@pytest.mark.parametrize("impl", mpienv.IMPLS)
def test_checkpoint_written_by_one_run_is_read_back_by_the_next(run_workload: Runner, impl: str,
                                                                tmp_path: Path) -> None:
    wrote = run_workload(impl, 3, "checkpoint", "write", "--dir", str(tmp_path), "--step", "7", "--megabytes", "0.5")
    assert wrote.returncode == 0, wrote.output
    [w] = results.assert_passed(wrote.results, "checkpoint", ranks=3)
    assert w["mode"] == "write" and w["files_seen"] == 3 and w["errors"] == []
    assert sorted(p.name for p in (tmp_path / "step-7").iterdir()) == [
        "manifest.json", "rank-0.bin", "rank-1.bin", "rank-2.bin"]
    assert (tmp_path / "step-7" / "rank-2.bin").stat().st_size == 500_000
    read = run_workload(impl, 3, "checkpoint", "read", "--dir", str(tmp_path), "--step", "7")
    assert read.returncode == 0, read.output
    [r] = results.assert_passed(read.results, "checkpoint", ranks=3)
    assert r["mode"] == "read" and r["errors"] == []


def test_an_altered_checkpoint_fails_the_read(run_workload: Runner, tmp_path: Path) -> None:
    wrote = run_workload("mpich", 2, "checkpoint", "write", "--dir", str(tmp_path), "--megabytes", "0.01")
    assert wrote.returncode == 0, wrote.output
    victim = tmp_path / "step-1" / "rank-1.bin"
    data = bytearray(victim.read_bytes())
    data[100] ^= 0xFF
    victim.write_bytes(bytes(data))
    read = run_workload("mpich", 2, "checkpoint", "read", "--dir", str(tmp_path))
    assert read.returncode == 1, read.output
    [r] = read.results
    assert r["check"] == "fail" and r["errors"] == ["rank 1: rank-1.bin does not match the manifest's SHA-256"]


def test_reading_without_a_checkpoint_or_with_another_rank_count_fails(run_workload: Runner, tmp_path: Path) -> None:
    missing = run_workload("openmpi", 2, "checkpoint", "read", "--dir", str(tmp_path))
    assert missing.returncode == 1 and "manifest.json" in missing.results[0]["errors"][0], missing.output
    wrote = run_workload("openmpi", 2, "checkpoint", "write", "--dir", str(tmp_path), "--megabytes", "0.01")
    assert wrote.returncode == 0, wrote.output
    other = run_workload("openmpi", 3, "checkpoint", "read", "--dir", str(tmp_path))
    assert other.returncode == 1, other.output
    assert "written by 2 ranks, this job has 3" in other.results[0]["errors"][0]
