"""The `mpiplat cluster` commands against the running local cluster."""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from mpiplat.localcluster import cluster, lifecycle, processes, realnode

pytestmark = pytest.mark.cluster


def _children_cpu() -> float:
    """CPU seconds of this process's waited-for children and theirs."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _mpiplat(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpiplat.cli", *args], capture_output=True, text=True)


def test_status_reports_every_component_healthy(kube):
    proc = _mpiplat("cluster", "status", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    expected = {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller",
                "mpi-operator", "kueue", "jobset", "trainer-controller-manager", "kube-state-metrics", "prometheus",
                "prometheus-rules"}
    if lifecycle.real_node_enabled():
        expected |= {p.name for p in realnode.PROCESSES} | {"coredns (pod)"}
    assert set(report["components"]) == expected
    assert all(c["healthy"] for c in report["components"].values()), report


def test_every_daemon_runs_with_the_go_runtime_settings(kube):
    """processes.GO_RUNTIME reaches each daemon, whoever starts it: kwokctl, the real node, supervise.py."""
    wrong = {}
    for name, comp in cluster.status()["components"].items():
        if comp.get("pid") and not name.endswith("(pod)"):
            environ = dict(kv.split("=", 1) for kv in
                           Path(f"/proc/{comp['pid']}/environ").read_text().split("\0") if "=" in kv)
            if any(environ.get(k) != v for k, v in processes.GO_RUNTIME.items()):
                wrong[name] = {k: environ.get(k) for k in processes.GO_RUNTIME}
    assert not wrong, wrong


def test_env_prints_a_working_kubeconfig(kube):
    proc = _mpiplat("cluster", "env")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert lines[0] == f"export KUBECONFIG={cluster.kubeconfig_path()}"
    assert cluster.kubeconfig_path().is_file()
    helm = lines[1].removeprefix("export MPIPLAT_HELM=")
    assert subprocess.run([helm, "version", "--short"], capture_output=True).returncode == 0
    assert lines[2] == f"export MPIPLAT_PROMETHEUS_URL={processes.prometheus_url()}"  # this cluster's, for the suite


def test_up_again_is_idempotent_and_restarts_nothing(kube):
    """Nothing is built, started or restarted. Bounded by its CPU time, not its wall time, which a loaded
    host stretches (66 and 84 s in CI beside the other lanes) while a rebuild of any binary costs minutes of CPU."""
    before = {name: c["pid"] for name, c in cluster.status()["components"].items()}
    cpu = _children_cpu()
    proc = _mpiplat("cluster", "up")
    cpu = _children_cpu() - cpu
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "already running" in proc.stdout
    assert re.search(r"binaries: \S+ \(0 built, [1-9]\d* cached\)", proc.stdout), proc.stdout
    after = {name: c["pid"] for name, c in cluster.status()["components"].items()}
    assert after == before
    assert cpu < 30, f"`cluster up` again used {cpu:.1f} CPU-s\n{proc.stdout}"


def test_versions_reported_by_the_apiserver_match_the_pin(kube):
    from kubernetes import client

    from mpiplat.versions import load

    assert client.VersionApi(kube.api_client).get_code().git_version == load()["kubernetes"].version
