"""Unit tests of mpienv: cache layout, marker reuse, launch argv (no venv is built here)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mpiplat.conformance.workloads import mpienv


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MPIPLAT_CACHE", str(tmp_path))
    return tmp_path


def _fake_ready_venv(impl: str, packages: dict[str, str]) -> Path:
    venv = mpienv.venv_dir(impl)
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    (venv / "bin" / "mpiexec").touch()
    (venv / mpienv.MARKER).write_text(json.dumps(
        {"impl": impl, "packages": packages, "python": mpienv._python_tag(), "mpi_library": "MPICH Version: 5\0"}))
    return venv


def test_venvs_live_under_mpiplat_cache(cache: Path) -> None:
    assert mpienv.venv_dir("intel") == cache / "mpi-venvs" / "intel"


def test_every_impl_pins_exact_versions_of_mpi4py_and_numpy() -> None:
    assert set(mpienv.PINS) == set(mpienv.ENVS) == set(mpienv.LAUNCH_ENV) == set(mpienv.MPI_OF)
    for pins in mpienv.PINS.values():
        assert {"mpi4py", "numpy"} <= set(pins)
        assert all(v and v[0].isdigit() and not any(c in v for c in "<>=~*, ") for v in pins.values())


def test_ready_venv_is_reused_without_running_anything(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv = _fake_ready_venv("mpich", mpienv.PINS["mpich"])

    def forbidden(*_args: object, **_kwargs: object) -> str:
        raise AssertionError("a ready venv must not be rebuilt")

    monkeypatch.setattr(mpienv, "_run", forbidden)
    env = mpienv.ensure("mpich", log=lambda _m: None)
    assert (env.created, env.venv, env.mpi_library) == (False, venv, "MPICH Version: 5")
    assert env.mpiexec == venv / "bin" / "mpiexec"


def test_venv_with_other_pins_is_rebuilt(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv = _fake_ready_venv("mpich", {**mpienv.PINS["mpich"], "mpich": "0.0.1"})
    calls: list[list[str]] = []

    def record(argv: list[str], what: str, timeout: float) -> str:
        calls.append(list(argv))
        raise mpienv.MpiEnvError("stop here")

    monkeypatch.setattr(mpienv, "_run", record)
    with pytest.raises(mpienv.MpiEnvError, match="stop here"):
        mpienv.ensure("mpich", log=lambda _m: None)
    assert calls and calls[0][-3:] == ["-m", "venv", str(venv)]
    assert not (venv / mpienv.MARKER).exists()


def test_unknown_impl_is_refused_with_the_allowed_names() -> None:
    with pytest.raises(ValueError, match="unknown MPI environment 'lam'; allowed: openmpi, mpich, intel, torch"):
        mpienv.mpiexec_argv("lam", 2)


def test_mpiexec_argv(cache: Path) -> None:
    ompi = mpienv.mpiexec_argv("openmpi", 4)
    assert ompi[:3] == [str(cache / "mpi-venvs" / "openmpi" / "bin" / "mpiexec"), "-n", "4"]
    assert "--oversubscribe" in ompi
    assert ("--allow-run-as-root" in ompi) == (os.geteuid() == 0)
    assert mpienv.mpiexec_argv("mpich", 3)[1:] == ["-n", "3"]
    with pytest.raises(ValueError, match="nranks must be >= 1"):
        mpienv.mpiexec_argv("mpich", 0)


def test_launch_env_adds_impl_settings_and_drops_pythonpath() -> None:
    env = mpienv.launch_env("intel", {"PATH": "/bin", "PYTHONPATH": "/elsewhere"})
    assert env == {"PATH": "/bin", "I_MPI_FABRICS": "shm"}


def test_program_argv_runs_the_venv_python(cache: Path) -> None:
    argv = mpienv.program_argv("mpich", 2, "pi.py", "--intervals", "10")
    assert argv[-4:] == [str(cache / "mpi-venvs" / "mpich" / "bin" / "python"), "pi.py", "--intervals", "10"]
