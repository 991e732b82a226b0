"""Fixtures: the local MPI venvs (created on demand, reused when ready) and a runner that
launches a workload program under a real mpiexec and parses its result lines."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mpiplat.conformance.workloads import PROGRAMS, mpienv, program_path, results

RUN_TIMEOUT_S = 180


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "mpi: runs workload programs under mpiexec (creates the MPI venvs on demand)")


@dataclass
class Run:
    impl: str
    nranks: int
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    results: list[results.Result] = field(default_factory=list)

    @property
    def output(self) -> str:
        """For assertion messages."""
        return f"$ {' '.join(self.argv)}\nexit {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


@pytest.fixture(scope="session")
def mpi_envs(request: pytest.FixtureRequest) -> dict[str, mpienv.MpiEnv]:
    """All three MPI venvs, built concurrently on first use (about half a minute) with progress shown."""
    capman = request.config.pluginmanager.getplugin("capturemanager")
    lines = 0

    def log(message: str) -> None:  # starts on a fresh line, not after pytest's progress dots
        nonlocal lines
        sys.stderr.write(("\n" if lines == 0 else "") + message + "\n")
        lines += 1

    with capman.global_and_fixture_disabled() if capman else nullcontext():
        try:
            return mpienv.ensure_all(mpienv.IMPLS, log=log)
        except mpienv.MpiEnvError as exc:
            pytest.fail(f"cannot prepare the MPI venvs: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def program_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The programs copied alone into an empty folder, as a ConfigMap ships them: proves they
    run standalone, without this package (results.py) beside them."""
    folder = tmp_path_factory.mktemp("workloads")
    for name in PROGRAMS:
        shutil.copy(program_path(name), folder / f"{name}.py")
    return folder


@pytest.fixture(scope="session")
def torch_env(request: pytest.FixtureRequest) -> mpienv.MpiEnv:
    """The Open MPI + torch venv (about 3 GB to download the first time, then reused)."""
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled() if capman else nullcontext():
        sys.stderr.write("\n")
        try:
            return mpienv.ensure("torch")
        except mpienv.MpiEnvError as exc:
            pytest.fail(f"cannot prepare the torch venv: {exc}", pytrace=False)


@pytest.fixture
def run_workload(request: pytest.FixtureRequest, program_dir: Path) -> Callable[..., Run]:
    """run(impl, nranks, program, *args, env=None) -> Run, with the result lines parsed.
    impl is an MPI implementation or "torch" (Open MPI with torch)."""

    def run(impl: str, nranks: int, program: str, *args: str, env: dict[str, str] | None = None) -> Run:
        request.getfixturevalue("torch_env" if impl == "torch" else "mpi_envs")
        argv = mpienv.program_argv(impl, nranks, program_dir / f"{program}.py", *args)
        launch = mpienv.launch_env(impl, {k: v for k, v in os.environ.items() if not k.startswith("MPIPLAT_INJECT")})
        proc = subprocess.Popen(argv, cwd=program_dir, env={**launch, **(env or {})}, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # mpiexec and every rank it started
            stdout, stderr = proc.communicate()
            pytest.fail(f"{program} on {nranks} {impl} ranks did not finish in {RUN_TIMEOUT_S}s\n"
                        f"--- stdout\n{stdout}\n--- stderr\n{stderr}")
        done = Run(impl, nranks, argv, proc.returncode, stdout, stderr)
        done.results = results.parse(stdout)
        return done

    return run
