"""Safety on customer clusters: an interrupted run leaves no namespace behind, whenever the interrupt
arrives (test_run_cleanup.py proves the same against a fake API at exact points)."""

from __future__ import annotations

import secrets
import signal
import subprocess
import sys
import threading
import time

import pytest
import yaml
from kubernetes import watch

from mpiplat.conformance import settings
from mpiplat.conformance.run import RUN_LABEL

pytestmark = pytest.mark.cluster


class RunNamespaces:
    """Watches the namespaces of the conformance run under test: those named with its own `prefix` (other
    runs, e.g. the suite's in another CI lane, share the cluster and the run label)."""

    def __init__(self, kube, prefix: str):
        self.kube, self.prefix = kube, prefix
        self.run_id: str | None = None
        self.created: dict[str, float] = {}  # name -> when first seen
        self.deleting: dict[str, float] = {}  # name -> when first seen with a deletionTimestamp
        self._stop = threading.Event()
        listed = kube.core.list_namespace(label_selector=RUN_LABEL)
        self._before = {n.metadata.name for n in listed.items}
        self._rv = listed.metadata.resource_version
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            w = watch.Watch()
            for ev in w.stream(self.kube.core.list_namespace, label_selector=RUN_LABEL, resource_version=self._rv,
                               timeout_seconds=2):
                ns = ev["object"]
                self._rv = ns.metadata.resource_version
                name, run_id = ns.metadata.name, (ns.metadata.labels or {}).get(RUN_LABEL)
                if name in self._before or not name.startswith(self.prefix + "-") or (
                        self.run_id and run_id != self.run_id):
                    continue
                self.run_id = run_id
                self.created.setdefault(name, time.monotonic())
                if ns.metadata.deletion_timestamp:
                    self.deleting.setdefault(name, time.monotonic())
                if self._stop.is_set():
                    w.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def left(self) -> set[str]:
        """Namespaces of the run that still exist, terminating or not."""
        if not self.run_id:
            return set()
        return {n.metadata.name for n in self.kube.core.list_namespace(
            label_selector=f"{RUN_LABEL}={self.run_id}").items}


# when: (requirements run, whether the moment has come)
PHASES = {
    # the namespace has just been created: the client may still be in its create call or right after it
    "namespace creation": ("JOB-06", lambda ns: ns.created),
    # a test is running in it
    "a test": ("JOB-06", lambda ns: ns.created and time.monotonic() - min(ns.created.values()) > 2),
    # the first module's namespaces are being deleted while the next module starts
    "module cleanup": ("ISO-04,JOB-06", lambda ns: ns.deleting),
    # the last module's teardown: deleting, then waiting until the namespaces are gone
    "final cleanup": ("JOB-05,ISO-04", lambda ns: ns.deleting),
}


# Each phase once, the two signals taking turns: the suite turns both into the same KeyboardInterrupt
# (test_run_cleanup.py checks that for each signal).
CASES = [(phase, [signal.SIGINT, signal.SIGTERM][i % 2]) for i, phase in enumerate(PHASES)]


@pytest.mark.parametrize(("phase", "sig"), CASES,
                         ids=[f"{'Ctrl-C' if sig == signal.SIGINT else 'SIGTERM'}-{phase}" for phase, sig in CASES])
def test_interrupted_run_deletes_its_namespaces(kube, tmp_path, sig, phase):
    only, moment = PHASES[phase]
    local = yaml.safe_load(settings.LOCAL.read_text())
    local["namespace_prefix"] = prefix = f"mpiplat-int-{secrets.token_hex(3)}"
    (tmp_path / "settings.yml").write_text(yaml.safe_dump(local))
    seen = RunNamespaces(kube, prefix)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "mpiplat.cli", "conformance", "run", "--only", only,
                                 "--settings", str(tmp_path / "settings.yml"),
                                 "--report-dir", str(tmp_path), "--kubeconfig", kube.kubeconfig], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 180
        while not moment(seen) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        if proc.poll() is not None or not moment(seen):
            out = proc.communicate(timeout=240)[0] if proc.poll() is not None else ""
            proc.kill()
            pytest.fail(f"the run never reached {phase} (namespaces seen: {sorted(seen.created)}, deleting: "
                        f"{sorted(seen.deleting)}, exit {proc.poll()})\n{out[-2000:]}")
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=240)
    finally:
        seen.stop()
    assert proc.returncode != 0, f"the run ignored {sig.name} during {phase}\n{out[-2000:]}"
    left = seen.left()
    assert not left, f"left behind after {sig.name} during {phase}: {left}\n{out[-2000:]}"
