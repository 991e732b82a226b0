"""Time the installer against plain helm/kubectl on a bare local cluster, in one run.

    python -m mpiplat.installbench [--bundle DIR]

Steps: `mpiplat cluster up --bare`; site.yml from a bundle (fresh), site.yml again (no-op),
uninstall.yml with CRDs; then the same charts and manifest with plain `helm install --wait` and
`kubectl apply --server-side` + `kubectl wait`. Prints a Markdown table. Stops the cluster.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mpiplat import bundle
from mpiplat.localcluster import cluster
from mpiplat.localcluster.build import binary
from mpiplat.versions import load

REPO_ROOT = Path(__file__).resolve().parents[2]  # a dev tool: runs in a checkout
HELM_VARS = REPO_ROOT / "molecule" / "helm" / "group_vars" / "all.yml"


def _timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(argv)}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return time.monotonic() - start


def _helm_install(helm: str, bundle_dir: Path, comp, release: str, ns: str, extra: list[str],
                  env: dict[str, str]) -> float:
    tgz = bundle_dir / "charts" / f"{comp.extra['chart']['name']}-{bundle.chart_version(comp)}.tgz"
    return _timed([helm, "install", release, str(tgz), "-n", ns, "--create-namespace", "--wait", "--timeout", "300s",
                   *extra], env)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--bundle", help="existing bundle directory (default: a fresh one)")
    args = p.parse_args()
    bundle_dir = Path(args.bundle) if args.bundle else Path(tempfile.mkdtemp()) / "bundle"
    if not args.bundle:
        bundle.make(bundle_dir, log=lambda *_: None)
    cluster.down()
    cluster.up(bare=True)
    helm, kubectl = str(binary("helm")), str(binary("kubectl"))
    env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig_path()), MPIPLAT_HELM=helm,
               MPIPLAT_BUNDLE=str(bundle_dir), ANSIBLE_NOCOLOR="1")
    playbook = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "inventories/local/hosts.yml",
                "-e", f"@{HELM_VARS}", "-e", '{"mpiplat_teams": []}']  # as molecule/helm: no webhooks to serve queues
    rows = []
    rows.append(("site.yml, fresh (bundle, CRDs first, helm --wait)", _timed(playbook + ["playbooks/site.yml"], env)))
    rows.append(("site.yml, no-op re-run", _timed(playbook + ["playbooks/site.yml"], env)))
    rows.append(("uninstall.yml with CRDs", _timed(playbook + [
        "playbooks/uninstall.yml", "-e", "mpiplat_confirm_uninstall=true", "-e", "mpiplat_remove_crds=true"], env)))

    comps = load()
    start = time.monotonic()
    # site.yml's order: jobset, trainer, mpi-operator, then kueue (whose webhooks would otherwise
    # intercept the mpi-operator Deployment with no real server behind them).
    _helm_install(helm, bundle_dir, comps["jobset"], "jobset", "jobset-system", [], env)
    _helm_install(helm, bundle_dir, comps["trainer"], "kubeflow-trainer", "kubeflow-system",
                  ["--set", "jobset.install=false"], env)
    _timed([kubectl, "apply", "--server-side", "-f", str(bundle_dir / "manifests" / "mpi-operator.yaml")], env)
    _timed([kubectl, "-n", "mpi-operator", "wait", "deployment/mpi-operator", "--for=condition=Available",
            "--timeout=300s"], env)
    _helm_install(helm, bundle_dir, comps["kueue"], "kueue", "kueue-system", [], env)
    rows.append(("plain helm install --wait x3 + kubectl apply/wait (same charts and manifest)",
                 time.monotonic() - start))
    cluster.down()
    print("| step | seconds |\n|---|---|")
    for label, secs in rows:
        print(f"| {label} | {secs:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
