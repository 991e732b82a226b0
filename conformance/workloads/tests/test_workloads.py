"""The workload programs under a real mpiexec with Open MPI, MPICH and Intel MPI from PyPI."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from mpiplat.conformance.workloads import mpienv, results
from mpiplat.conformance.workloads.results import CheckFailed
from mpiplat.diagnose import RankSignalled, launcher_log_failure

if TYPE_CHECKING:
    from conftest import Run


pytestmark = pytest.mark.mpi

IMPLS = mpienv.IMPLS
Runner = Callable[..., "Run"]

COUNTS = (1, 1000, 65536)
DTYPES = ("float64", "int64")


def _assert_ran_with(run: Run, records: list[results.Result]) -> None:
    libraries = {r["mpi_library"] for r in records}
    assert len(libraries) == 1 and libraries.pop().startswith(mpienv.LIBRARY_PREFIX[run.impl]), run.output


@pytest.mark.parametrize("nranks", [2, 4])
@pytest.mark.parametrize("impl", IMPLS)
def test_allreduce_sum_is_correct_on_every_rank(run_workload: Runner, impl: str, nranks: int) -> None:
    run = run_workload(impl, nranks, "allreduce", "--counts", ",".join(map(str, COUNTS)))
    assert run.returncode == 0, run.output
    records = results.assert_passed(run.results, "allreduce", ranks=nranks)
    assert sorted((r["dtype"], r["count"]) for r in records) == sorted((d, c) for d in DTYPES for c in COUNTS)
    for r in records:
        assert r["wrong_elements"] == 0 and r["failed_ranks"] == [] and r["first_mismatch"] is None
        assert r["avg_time_us"] > 0
    _assert_ran_with(run, records)


@pytest.mark.parametrize("impl", IMPLS)
def test_allreduce_check_fails_when_a_rank_contributes_a_wrong_value(run_workload: Runner, impl: str) -> None:
    run = run_workload(impl, 3, "allreduce", "--counts", "1,1000", "--inject-wrong-rank", "1")
    assert run.returncode != 0, run.output
    assert len(run.results) == 4
    for r in run.results:
        assert r["check"] == "fail" and r["injected_wrong_rank"] == 1
        # Every rank verified and every rank saw exactly the one corrupted element, off by one.
        assert r["failed_ranks"] == [0, 1, 2] and r["wrong_elements"] == 3
        assert r["first_mismatch"]["index"] == 0
        assert r["first_mismatch"]["got"] == r["first_mismatch"]["want"] + 1
    assert "elements wrong" in run.stderr
    with pytest.raises(CheckFailed, match="allreduce: 4/4 result"):
        results.assert_passed(run.results, "allreduce")


def test_allreduce_wrong_contribution_can_be_injected_by_environment(run_workload: Runner) -> None:
    run = run_workload("openmpi", 2, "allreduce", "--counts", "10", "--dtypes", "float64",
                       env={"MPIPLAT_INJECT_WRONG_RANK": "0"})
    assert run.returncode != 0, run.output
    [record] = run.results
    assert record["check"] == "fail" and record["injected_wrong_rank"] == 0 and record["failed_ranks"] == [0, 1]


def test_allreduce_for_seconds_repeats_every_case_until_the_time_has_passed(run_workload: Runner) -> None:
    run = run_workload("openmpi", 2, "allreduce", "--counts", "10", "--dtypes", "int64", "--for-seconds", "2.5")
    records = results.assert_passed(run.results, "allreduce", ranks=2)
    rounds = [r["round"] for r in records]
    assert rounds == list(range(1, len(rounds) + 1)) and len(rounds) >= 3, run.output  # 0 s, 1 s, 2 s, maybe 3 s


def test_allreduce_until_exists_stops_once_the_path_exists(run_workload: Runner, tmp_path) -> None:
    """The `upgrade` profile's jobs: --for-seconds is the most; --phase after releases them by adding a file."""
    released = tmp_path / "upgrade-released"

    def rounds(seconds: str) -> list[int]:
        run = run_workload("openmpi", 2, "allreduce", "--counts", "10", "--dtypes", "int64",
                           "--for-seconds", seconds, "--until-exists", str(released))
        return [r["round"] for r in results.assert_passed(run.results, "allreduce", ranks=2)]

    assert len(rounds("2.5")) >= 3  # not there: it runs its seconds
    released.write_text("")
    assert rounds("600") == [1]


def test_allreduce_until_exists_needs_for_seconds(run_workload: Runner, tmp_path) -> None:
    run = run_workload("mpich", 2, "allreduce", "--until-exists", str(tmp_path / "x"))
    assert run.returncode == 2 and "--until-exists needs --for-seconds" in run.stderr, run.output


def test_allreduce_refuses_to_inject_into_a_rank_that_does_not_exist(run_workload: Runner) -> None:
    run = run_workload("mpich", 2, "allreduce", "--inject-wrong-rank", "5")
    assert run.returncode == 2, run.output
    assert "not a rank of this 2-rank job" in run.stderr


@pytest.mark.parametrize("impl", IMPLS)
def test_allreduce_kill_rank_dies_of_sigkill_and_mpiexec_reports_it(run_workload: Runner, impl: str) -> None:
    """The suite's FAIL-01 on real pods rests on this: the rank says so, dies of SIGKILL while the others
    wait, mpiexec fails the run, and its report (what `diagnose` reads) names the host and signal 9."""
    run = run_workload(impl, 3, "allreduce", "--kill-rank", "1", "--kill-after", "0.5")
    assert run.returncode != 0, run.output
    assert "allreduce: rank 1 on " in run.stdout and "kills itself with SIGKILL" in run.stdout, run.output
    assert run.results == [], run.output  # killed before the first case: no rank reported a result
    found = launcher_log_failure(run.stdout + run.stderr)
    assert isinstance(found, RankSignalled) and found.signal == 9, run.output
    assert found.host.split(".")[0] == socket.gethostname().split(".")[0], run.output
    # Open MPI names the rank; Intel MPI reports every rank of the host (its cleanup kills the others),
    # MPICH names none.
    assert found.rank == (1 if impl == "openmpi" else None), run.output


def test_allreduce_oom_rank_that_no_memory_limit_stops_says_so_and_fails(run_workload: Runner) -> None:
    """--kill-by oom on a host without a memory limit: the rank allocates its --oom-max-mib, says that no limit
    held, and the run fails (so FAIL-01 fails on a cluster that does not enforce memory limits)."""
    run = run_workload("openmpi", 2, "allreduce", "--kill-rank", "1", "--kill-after", "0", "--kill-by", "oom",
                       "--oom-max-mib", "32")
    assert run.returncode != 0, run.output
    assert "allocates memory until the OOM killer takes it" in run.stdout, run.output
    assert "allocated 32 MiB and was not killed: no memory limit holds" in run.stderr, run.output


def test_allreduce_refuses_to_kill_a_rank_that_does_not_exist(run_workload: Runner) -> None:
    run = run_workload("openmpi", 2, "allreduce", "--kill-rank", "2")
    assert run.returncode == 2, run.output
    assert "--kill-rank 2 is not a rank of this 2-rank job" in run.stderr


@pytest.mark.parametrize("nranks", [2, 3])
@pytest.mark.parametrize("impl", IMPLS)
def test_pingpong_reports_latency_and_bandwidth_per_size(run_workload: Runner, impl: str, nranks: int) -> None:
    run = run_workload(impl, nranks, "pingpong", "--max-size", str(1 << 20), "--iterations", "50")
    assert run.returncode == 0, run.output
    records = results.assert_passed(run.results, "pingpong", ranks=nranks)
    assert [r["size_bytes"] for r in records] == [1 << k for k in range(21)]
    for r in records:
        assert r["data_ok"] is True and r["iterations"] == 50
        assert r["latency_us"] > 0 and r["latency_median_us"] > 0 and r["bandwidth_MBps"] > 0
    # Broadly, bandwidth grows with size: large messages move far more bytes per second than tiny ones.
    small = max(r["bandwidth_MBps"] for r in records if r["size_bytes"] <= 8)
    large = max(r["bandwidth_MBps"] for r in records if r["size_bytes"] >= 256 * 1024)
    assert large > 10 * small, run.stdout
    _assert_ran_with(run, records)
    assert "size_bytes" in run.stdout  # the human table header


@pytest.mark.parametrize("impl", IMPLS)
def test_pingpong_with_one_rank_says_it_needs_two(run_workload: Runner, impl: str) -> None:
    run = run_workload(impl, 1, "pingpong")
    assert run.returncode == 2, run.output
    [record] = run.results
    assert record["check"] == "fail" and record["ranks"] == 1
    assert "needs at least 2 ranks" in record["error"] and "needs at least 2 ranks" in run.stderr


@pytest.mark.parametrize("nranks", [2, 4])
@pytest.mark.parametrize("impl", IMPLS)
def test_pi_estimate_is_within_tolerance(run_workload: Runner, impl: str, nranks: int) -> None:
    run = run_workload(impl, nranks, "pi", "--intervals", "2000000", "--tolerance", "1e-9")
    assert run.returncode == 0, run.output
    [record] = results.assert_passed(run.results, "pi", ranks=nranks)
    assert record["abs_error"] < 1e-9 and abs(record["estimate"] - 3.141592653589793) < 1e-9
    assert record["intervals"] == 2_000_000 and record["failed_ranks"] == []
    _assert_ran_with(run, [record])


def test_pi_check_fails_when_the_error_exceeds_the_tolerance(run_workload: Runner) -> None:
    # 10 midpoint intervals are off by about 8.3e-4, far above 1e-6.
    run = run_workload("intel", 2, "pi", "--intervals", "10", "--tolerance", "1e-6")
    assert run.returncode != 0, run.output
    [record] = run.results
    assert record["check"] == "fail" and record["failed_ranks"] == [0, 1]
    assert 8e-4 < record["abs_error"] < 9e-4
