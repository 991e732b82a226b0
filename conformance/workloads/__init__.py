"""Workload programs (standalone MPI scripts), their result-line parser and local MPI venvs.

The programs (allreduce.py, pingpong.py, pi.py, checkpoint.py, whoami.py; torchbench.py for GPUs) are run as scripts
under mpiexec and are shipped alone (e.g. by ConfigMap) into MPI images; results.py parses
what they print; mpienv.py prepares local Open MPI, MPICH and Intel MPI venvs (and an Open
MPI + torch one) to run them.
"""

from __future__ import annotations

from pathlib import Path

from mpiplat.jobs import WORKLOADS_CONFIGMAP

PROGRAMS: tuple[str, ...] = ("allreduce", "pingpong", "pi", "checkpoint", "torchbench", "whoami")


def program_path(name: str) -> Path:
    """The script of workload program ``name``."""
    if name not in PROGRAMS:
        raise ValueError(f"unknown workload program {name!r}; allowed: {', '.join(PROGRAMS)}")
    return Path(__file__).resolve().parent / f"{name}.py"


def configmap(namespace: str) -> dict:
    """The ConfigMap holding every workload program, mounted by jobs built with `workload=`."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": WORKLOADS_CONFIGMAP, "namespace": namespace,
                         "labels": {"app.kubernetes.io/part-of": "mpiplat"}},
            "data": {f"{p}.py": program_path(p).read_text() for p in PROGRAMS}}
