"""The handover: one .tar.gz with a run's reports and what its verdicts rest on.

    mpiplat-conformance-<run id>/
        report.html report.md checklist.md ai-conformance.yaml results.json junit.xml plot-*.svg
        cluster.json                                   snapshot.cluster: server, nodes, controllers, CRDs
        failures/<requirement>/<test>/message.txt      why it failed, and its diagnosis
        failures/<requirement>/<test>/<namespace>/     snapshot.namespace: objects.yaml, pods.txt,
                                                       pods.yaml, events.txt, logs/, diagnoses.txt
"""

from __future__ import annotations

import io
import re
import tarfile
import time
from pathlib import Path


def name(run_id: str | None) -> str:
    return f"mpiplat-conformance-{run_id or 'run'}"


def _safe(part: str) -> str:
    """A test's or pod's name as one path component."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", part).strip("._") or "_"


def write(report_dir: Path, run_id: str | None, files: list[str], failures: list[dict]) -> Path:
    """Pack `files` (names in report_dir) and each failure ({"requirement", "test", "message",
    "namespaces": {namespace: {relative path: text}}}) into report_dir/<name>.tar.gz; returns its path."""
    top = name(run_id)
    path = report_dir / f"{top}.tar.gz"
    now = time.time()

    def add(arcname: str, text: str) -> None:
        data = text.encode()
        info = tarfile.TarInfo(arcname)
        info.size, info.mtime, info.mode = len(data), now, 0o644
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(path, "w:gz") as tar:
        for f in files:
            tar.add(report_dir / f, arcname=f"{top}/{f}", recursive=False)
        for failure in failures:
            base = f"{top}/failures/{_safe(failure['requirement'])}/{_safe(failure['test'])}"
            add(f"{base}/message.txt", failure.get("message", "") + "\n")
            for ns, texts in failure.get("namespaces", {}).items():
                for rel, text in texts.items():
                    add("/".join([base, _safe(ns), *map(_safe, rel.split("/"))]), text)
    return path
