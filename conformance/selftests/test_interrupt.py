"""Safety on customer clusters: an interrupted run leaves no namespace behind."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from mpiplat.conformance.run import RUN_LABEL

pytestmark = pytest.mark.cluster


def _ours(kube) -> set[str]:
    return {n.metadata.name for n in kube.core.list_namespace(label_selector=RUN_LABEL).items
            if not n.metadata.deletion_timestamp}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_interrupted_run_deletes_its_namespaces(kube, tmp_path, sig):
    before = _ours(kube)
    proc = subprocess.Popen([sys.executable, "-m", "mpiplat.cli", "conformance", "run", "--only", "JOB-06",
                             "--report-dir", str(tmp_path), "--kubeconfig", kube.kubeconfig], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not (_ours(kube) - before) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    created = _ours(kube) - before
    assert created, "the run created no namespace to clean up"
    time.sleep(2)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode != 0, out[-2000:]
    left = {n.metadata.name for n in kube.core.list_namespace(label_selector=RUN_LABEL).items} & created
    assert not left, f"left behind after {sig.name}: {left}\n{out[-2000:]}"
