"""Running helm on a chart of charts/ and parsing what `helm template` renders."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

CHARTS = Path(__file__).resolve().parents[1]


class Helm:
    """Runs helm on one chart; values go in as a YAML document on stdin (`-f -`)."""

    def __init__(self, binary: Path, chart: Path):
        self.binary = binary
        self.chart = chart

    def run(self, command: str, values: dict[str, Any] | None = None, *args: str) -> subprocess.CompletedProcess:
        cmd = [str(self.binary), command]
        cmd += ["release", str(self.chart)] if command == "template" else [str(self.chart)]
        stdin = None
        if values is not None:
            cmd += ["-f", "-"]
            stdin = yaml.safe_dump(values)
        cmd += list(args)
        return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=60)

    def template(self, values: dict[str, Any] | None = None, *args: str) -> list[dict[str, Any]]:
        """Rendered objects; fails the test with helm's stderr when rendering fails."""
        proc = self.run("template", values, *args)
        assert proc.returncode == 0, f"helm template failed:\n{proc.stderr}"
        return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]
