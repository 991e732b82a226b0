"""kubectl against the local cluster (the pinned, locally built binary)."""

from __future__ import annotations

import json
import subprocess

from mpiplat.localcluster import build
from mpiplat.localcluster.state import ClusterError, kubeconfig_path


def kubectl(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """kubectl against this cluster; a ClusterError on failure unless check is False."""
    cmd = [str(build.binary("kubectl")), f"--kubeconfig={kubeconfig_path()}", *args]
    proc = subprocess.run(cmd, input=input, capture_output=True, text=True)
    if check and proc.returncode != 0:
        out = (proc.stderr.strip() or proc.stdout.strip() or "(no output)").splitlines()
        raise ClusterError("\n".join([
            f"kubectl {' '.join(args[:2])} failed (exit {proc.returncode}): {out[0]}; check the cluster with "
            "`mpiplat cluster status`", *out[1:]]))
    return proc


def apply(objs: list[dict]) -> None:
    """Server-side apply of objects (field manager mpiplat-localcluster)."""
    if objs:
        kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=mpiplat-localcluster",
                "-f", "-", input="\n---\n".join(json.dumps(o) for o in objs))  # JSON is YAML, and quick
