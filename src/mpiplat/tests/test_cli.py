"""The command's behaviour for scripts and people: exit codes, one-line errors, --version, --json."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from mpiplat import __version__, cli
from mpiplat.conformance.settings import SettingsError
from mpiplat.conformance.workloads.mpienv import MpiEnvError
from mpiplat.jobs import JobSpecError
from mpiplat.kube import KubeconfigError
from mpiplat.localcluster.build import BuildError
from mpiplat.localcluster.cluster import ClusterError
from mpiplat.localcluster.nodes import NodePoolError
from mpiplat.versions import VersionsError


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mpiplat.cli", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def _one_line_error(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode == 1, proc
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in proc.stderr, proc.stderr


def test_version():
    proc = _run("--version")
    assert proc.returncode == 0 and proc.stdout == f"mpiplat {__version__}\n"


@pytest.mark.parametrize("args", [["frob"], ["diagnose", "no-slash"], ["conformance", "run", "--profile", "nope"],
                                  ["cluster"]])
def test_usage_errors_exit_2(args):
    proc = _run(*args)
    assert proc.returncode == 2 and "usage: mpiplat" in proc.stderr, proc


def _kubeconfig(path, server="https://127.0.0.1:1", context="ctx") -> str:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": context,
        "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": context, "context": {"cluster": "c", "user": "u"}}]}))
    return str(path)


def test_missing_kubeconfig_names_the_source(tmp_path, monkeypatch):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "nope")}
    _one_line_error(_run("diagnose", "ns/job", env=env), "no kubeconfig at", "nope", "$KUBECONFIG")
    env.pop("KUBECONFIG")
    _one_line_error(_run("conformance", "run", env=env), f"{tmp_path}/.kube/config", "default")
    _one_line_error(_run("demo", "--kubeconfig", str(tmp_path / "x"), env=env), "--kubeconfig")


def test_unknown_context_and_unreachable_server(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": _kubeconfig(tmp_path / "kc")}
    _one_line_error(_run("diagnose", "ns/job", "--context", "other", env=env), "other", "--context")
    _one_line_error(_run("conformance", "run", env=env), "cannot reach the API server https://127.0.0.1:1")
    _one_line_error(_run("diagnose", "ns/job", env=env), "cannot reach the API server")


def test_bad_settings_fail_before_any_cluster_access(tmp_path):
    bad = tmp_path / "s.yml"
    bad.write_text("teams: []\ngpu_resource: 7\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "none")}
    _one_line_error(_run("conformance", "run", "--settings", str(bad), env=env), "settings field")


def test_a_phase_without_the_upgrade_profile_and_the_reverse_fail_before_any_cluster_access(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "none")}
    _one_line_error(_run("conformance", "run", "--phase", "before", env=env), "--phase before|after goes with "
                    "--profile upgrade", "got --profile simulated and --phase before")
    _one_line_error(_run("conformance", "run", "--profile", "upgrade", env=env), "got --profile upgrade and --phase "
                    "(none)")


def test_bad_node_pools_fail_before_anything_starts(tmp_path):
    pools = tmp_path / "pools.yml"
    pools.write_text("pools:\n  - name: gpu\n    count: 0\n")
    env = dict(os.environ, MPIPLAT_STATE=str(tmp_path / "state"), MPIPLAT_CACHE=str(tmp_path / "cache"))
    _one_line_error(_run("cluster", "up", "--node-pools", str(pools), env=env), str(pools))
    assert not (tmp_path / "state").exists() and not (tmp_path / "cache").exists()


def test_unknown_component_to_build():
    _one_line_error(_run("cluster", "build", "--only", "nope"), "unknown component(s) nope; allowed:")


@pytest.mark.parametrize("error", [
    ClusterError("kube-apiserver not ready after 90s; see /x/logs\nmore detail"),
    BuildError("building etcd v3 failed; log: /x.log; retry with: mpiplat cluster build --only etcd\ntail"),
    NodePoolError("nodepools.yml: pools[0].count must be >= 1"), VersionsError("versions.yml: bad"),
    KubeconfigError("no kubeconfig"), SettingsError("settings field x"), JobSpecError("workers is 0"),
    MpiEnvError("pip failed"), PermissionError(13, "Permission denied", "/etc/kueue"),
    ApiException(status=403, reason="Forbidden"),
])
def test_every_domain_error_is_one_line_and_exit_1(monkeypatch, capsys, error):
    def boom(args):
        raise error

    monkeypatch.setattr(cli, "_diagnose", boom)
    assert cli.main(["diagnose", "ns/job"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    first = str(error).splitlines()[0] if not isinstance(error, (OSError, ApiException)) else ""
    assert first in err


def test_api_errors_quote_the_server_message(monkeypatch, capsys):
    err = ApiException(status=403, reason="Forbidden")
    err.body = json.dumps({"message": 'mpijobs.kubeflow.org "x" is forbidden: User "u" cannot get resource'})

    def boom(args):
        raise err

    monkeypatch.setattr(cli, "_diagnose", boom)
    assert cli.main(["diagnose", "ns/job"]) == 1
    assert capsys.readouterr().err == ('error: the API server answered 403 Forbidden: mpijobs.kubeflow.org "x" is '
                                       'forbidden: User "u" cannot get resource\n')


def test_a_bug_keeps_its_traceback(monkeypatch):
    monkeypatch.setattr(cli, "_diagnose", lambda args: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        cli.main(["diagnose", "ns/job"])


def test_json_where_commands_print_state(capsys):
    assert cli.main(["cluster", "build", "--only", "helm", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) in ({"built": []}, {"built": ["helm"]})
