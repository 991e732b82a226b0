"""whoami.py (JOB-11) under a real mpiexec: every rank's uid and host, and a check that can fail."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from mpiplat.conformance.workloads import results

if TYPE_CHECKING:
    from conftest import Run


pytestmark = pytest.mark.mpi

Runner = Callable[..., "Run"]


@pytest.mark.parametrize("impl", ["openmpi", "intel"])
def test_every_rank_reports_its_uid_and_host(run_workload: Runner, impl: str) -> None:
    run = run_workload(impl, 3, "whoami", "--expect-uid", str(os.getuid()))
    assert run.returncode == 0, run.output
    [r] = results.assert_passed(run.results, "whoami", ranks=3)
    assert r["uids"] == r["euids"] == [os.getuid()] * 3
    assert r["hosts"] == [socket.gethostname()] * 3 and r["distinct_hosts"] == 1
    assert r["errors"] == [] and r["expect_uid"] == os.getuid()
    assert [line.split()[3] for line in run.stdout.splitlines() if line.startswith("whoami: rank")] == \
        [f"uid={os.getuid()}"] * 3


def test_a_rank_of_another_user_fails_the_check(run_workload: Runner) -> None:
    other = os.getuid() + 1
    run = run_workload("openmpi", 2, "whoami", "--expect-uid", str(other))
    assert run.returncode == 1, run.output
    [r] = run.results
    assert r["check"] == "fail" and r["uids"] == [os.getuid()] * 2
    assert r["errors"] == [f"rank {n} on {socket.gethostname()} ran as uid {os.getuid()} (effective {os.geteuid()}), "
                           f"expected {other}" for n in range(2)]
    assert f"expected {other}" in run.stderr
    with pytest.raises(results.CheckFailed, match="whoami: 1/1 result"):
        results.assert_passed(run.results, "whoami")


def test_ranks_on_fewer_hosts_than_required_fail_the_check(run_workload: Runner) -> None:
    run = run_workload("mpich", 2, "whoami", "--min-hosts", "2")
    assert run.returncode == 1, run.output
    [r] = run.results
    assert r["check"] == "fail" and r["distinct_hosts"] == 1
    assert r["errors"] == [f"the ranks ran on 1 host(s) {[socket.gethostname()]}, expected at least 2"]


def test_without_expectations_any_user_passes(run_workload: Runner) -> None:
    run = run_workload("mpich", 1, "whoami")
    assert run.returncode == 0, run.output
    [r] = results.assert_passed(run.results, "whoami", ranks=1)
    assert r["expect_uid"] is None and r["min_hosts"] == 1


def test_bad_arguments_are_refused(run_workload: Runner) -> None:
    run = run_workload("mpich", 1, "whoami", "--min-hosts", "0")
    assert run.returncode == 2 and "need --min-hosts >= 1" in run.stderr, run.output
