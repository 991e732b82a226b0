"""supervise.py, which keeps each host-process controller running as a real cluster keeps a controller's pod:
a controller that exits (mpi-operator does when it cannot renew its Lease in time) is started again after a
back-off; one that exits before its health URL ever answered (it cannot start) is not retried; stopping the
group stops both."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from mpiplat.localcluster import processes


def _supervise(tmp_path: Path, script: str, *flags: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-I", "-S", str(processes.SUPERVISE), "--restarts",
                             str(tmp_path / "restarts"), *flags, "--", "sh", "-c", script],
                            stdout=open(tmp_path / "log", "wb"), stderr=subprocess.STDOUT, start_new_session=True)


def _wait(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_controller_that_exits_is_started_again_after_a_back_off(tmp_path):
    runs = tmp_path / "runs"
    proc = _supervise(tmp_path, f"echo run >> {runs}; sleep 0.3; exit 3", "--backoff", "0.2")
    try:
        _wait(lambda: runs.is_file() and len(runs.read_text().split()) >= 3)
        assert int((tmp_path / "restarts").read_text()) >= 2
        assert "sh ended (exit 3) after 0s; restart 1 in 0s" in (tmp_path / "log").read_text()
        assert proc.poll() is None
    finally:
        processes.stop_pid(proc.pid, grace=5)
    assert proc.wait(5) == 0


def test_a_controller_that_cannot_start_is_not_retried(tmp_path):
    proc = _supervise(tmp_path, "echo bad flag; exit 2", "--health", "http://127.0.0.1:1/healthz")
    assert proc.wait(10) == 2
    log = (tmp_path / "log").read_text()
    assert log.count("bad flag") == 1 and "sh ended (exit 2) before http://127.0.0.1:1/healthz answered: not " \
        "restarted" in log
    assert not (tmp_path / "restarts").exists()


def test_stopping_the_group_stops_the_controller_and_its_supervisor(tmp_path):
    pid_file = tmp_path / "child"
    proc = _supervise(tmp_path, f"echo $$ > {pid_file}; exec sleep 60")
    _wait(lambda: pid_file.is_file() and pid_file.read_text().strip())
    child = int(pid_file.read_text())
    processes.stop_pid(proc.pid, grace=5)
    assert proc.wait(5) == 0
    _wait(lambda: not processes.alive(child), timeout=5)
    assert not (tmp_path / "restarts").exists()
