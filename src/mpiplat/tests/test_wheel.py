"""The wheel works outside the checkout: built, installed with `uv tool install` into a fresh
environment in a temporary directory, and run there with no Go, no checkout and no dev extras."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
UV = Path(sys.executable).with_name("uv")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([str(UV), "build", "--wheel", "--out-dir", str(out), "-q", str(REPO)], check=True)
    (found,) = out.glob("mpiplat-*.whl")
    return found


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> dict[str, str]:
    """The environment of a field engineer's shell: the installed `mpiplat` on PATH, far from the repo."""
    home = tmp_path_factory.mktemp("home")
    assert REPO not in home.parents
    # The machine's own settings (network, certificates) stay; nothing of the checkout, Go or a cluster does.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GO", "MPIPLAT_", "KUBE", "VIRTUAL_ENV", "PYTHON", "XDG_"))}
    env |= {"HOME": str(home), "PATH": f"{home / 'bin'}:/usr/bin:/bin", "UV_TOOL_DIR": str(home / "tools"),
            "UV_TOOL_BIN_DIR": str(home / "bin"), "UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR",
                                                                                str(Path.home() / ".cache" / "uv"))}
    proc = subprocess.run([str(UV), "tool", "install", "--python", sys.executable, str(wheel)], env=env, cwd=home,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert shutil.which("mpiplat", path=env["PATH"]) and not shutil.which("go", path=env["PATH"])
    return env


def _mpiplat(env: dict[str, str], *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["mpiplat", *args], env=env, cwd=env["HOME"], capture_output=True, text=True,
                          timeout=kw.pop("timeout", 120), **kw)


def test_the_wheel_holds_one_package_with_its_data_and_no_tests(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"mpiplat", wheel.name.split("-py3")[0] + ".dist-info"}
    for data in ("mpiplat/versions.yml", "mpiplat/conformance/catalog.yml", "mpiplat/conformance/settings.schema.json",
                 "mpiplat/conformance/settings/local.yml", "mpiplat/conformance/suite/conftest.py",
                 "mpiplat/conformance/suite/pytest.ini", "mpiplat/conformance/workloads/allreduce.py",
                 "mpiplat/localcluster/stages.yaml", "mpiplat/localcluster/nodepools.yml",
                 # the dashboard's pages and its pinned browser assets, unpacked by the build (setup.py)
                 "mpiplat/dashboard/templates/base.html", "mpiplat/dashboard/static/dashboard.js",
                 "mpiplat/dashboard/vendor/patternfly/patternfly.min.css",
                 "mpiplat/dashboard/vendor/patternfly/assets/pficon/pf-v6-pficon.woff2",
                 "mpiplat/dashboard/vendor/htmx/dist/htmx.min.js",
                 "mpiplat/dashboard/vendor/htmx-ext-sse/dist/sse.min.js"):
        assert data in names, f"{data} is not in {wheel.name}"
    assert not [n for n in names if "/tests/" in n or "/selftests/" in n]
    pinned = zipfile.ZipFile(wheel).read("mpiplat/versions.yml").decode()
    assert pinned == (REPO / "versions.yml").read_text()


def test_installed_command_runs_without_go_or_checkout(installed):
    proc = _mpiplat(installed, "--version")
    assert proc.returncode == 0 and proc.stdout.startswith("mpiplat "), proc
    proc = _mpiplat(installed, "conformance", "run", "--profile", "preflight")
    assert proc.returncode == 1, proc
    assert proc.stderr.startswith("error: no kubeconfig at") and proc.stderr.count("\n") == 1, proc.stderr


@pytest.mark.cluster
def test_installed_preflight_run_against_the_cluster_in_kubeconfig(installed, kube, tmp_path):
    env = dict(installed, KUBECONFIG=kube.kubeconfig)
    # INS-01/02 rest on the cluster alone (CRDs, controllers, pinned versions), not on what other tests
    # installed or removed: INS-02 compares with the pins shipped in the wheel, with no Go at hand.
    proc = _mpiplat(env, "conformance", "run", "--profile", "preflight", "--only", "INS-01,INS-02",
                    "--report-dir", str(tmp_path), "--json", timeout=600)
    results = json.loads(proc.stdout)
    summary = {rid: r["status"] for rid, r in results["requirements"].items() if r["status"] != "not run"}
    assert proc.returncode == 0 and summary == {"INS-01": "passed", "INS-02": "passed"}, \
        (summary, proc.stderr[-3000:])
    assert results["meta"]["cluster"]["server"] == kube.api_client.configuration.host
    assert "INS-01" in proc.stderr and "PASSED" in proc.stderr  # progress, requirement by requirement
