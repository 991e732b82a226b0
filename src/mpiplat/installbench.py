"""Time the installer against plain helm/kubectl on a bare local cluster, in one run.

    python -m mpiplat.installbench [--bundle DIR] [--profile]

Steps, on a cluster of its own (MPIPLAT_CLUSTER=installbench unless set) with its real node, where the
controllers run as real pods: `mpiplat cluster up --bare --image-registry` (molecule helm's mirror);
site.yml from a bundle (fresh), site.yml again (no-op), uninstall.yml with CRDs; then the same charts and
manifest with plain `helm install --wait` and `kubectl apply --server-side` + `kubectl wait`. Prints a Markdown
table of the steps. With --profile the playbooks run with Ansible's profile_roles and profile_tasks (which cost
about 15 ms a task: 2-3 s of a no-op's 20) and a table each says where they spend their time. Stops the
cluster.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from mpiplat import bundle
from mpiplat.localcluster import cluster
from mpiplat.localcluster.build import binary
from mpiplat.versions import load

REPO_ROOT = Path(__file__).resolve().parents[2]  # a dev tool: runs in a checkout
HELM_VARS = REPO_ROOT / "molecule" / "helm" / "group_vars" / "all.yml"


def _timed(argv: list[str], env: dict[str, str], out: list[str] | None = None) -> float:
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        failed = [m.group(0) for m in re.finditer(r"(?ms)^(?:fatal|failed): .*?(?=^\S|\Z)", proc.stdout)]
        sys.exit(f"failed: {' '.join(argv)}\n{''.join(failed)[-6000:]}{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    if out is not None:
        out.append(proc.stdout)
    return time.monotonic() - start


PROFILE_LINE = re.compile(r"^(.*?\S) -*\s*([0-9]+\.[0-9]+)s$")  # "name ------ 12.34s" in the recaps


def profile(stdout: str, top: int = 8) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """From a run with profile_roles and profile_tasks: every role's time, and the `top` slowest tasks
    ("role : task"), each list slowest first as the callbacks print them."""
    def recap(banner: str) -> list[tuple[str, float]]:
        text = stdout.split(banner, 1)[1] if banner in stdout else ""
        text = re.split(r"\n(?:ROLES|TASKS) RECAP", text, maxsplit=1)[0]
        found = [(m.group(1), float(m.group(2))) for m in map(PROFILE_LINE.match, text.splitlines()) if m]
        return [(name, secs) for name, secs in found if name != "total"]
    return recap("ROLES RECAP"), recap("TASKS RECAP")[:top]


def _helm_install(helm: str, bundle_dir: Path, comp, release: str, ns: str, extra: list[str],
                  env: dict[str, str]) -> float:
    tgz = bundle_dir / "charts" / f"{comp.extra['chart']['name']}-{bundle.chart_version(comp)}.tgz"
    return _timed([helm, "install", release, str(tgz), "-n", ns, "--create-namespace", "--wait", "--timeout", "300s",
                   *extra], env)


def _image(comp, prefix: str, registry_key: bool = False) -> list[str]:
    """--set flags that pin the chart's image to the component's and pull it only if absent, as its role
    does (the charts' own defaults differ, e.g. jobset's: a staging `main` tag, pulled always)."""
    ref = comp.expand(comp.extra["images"][0])
    name, tag = ref.rsplit(":", 1)
    host, path = name.split("/", 1)
    sets = {"registry": host, "repository": path} if registry_key else {"repository": name}
    sets |= {"tag": tag, "pullPolicy": "IfNotPresent"}
    return [a for k, v in sets.items() for a in ("--set", f"{prefix}.{k}={v}")]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--bundle", help="existing bundle directory (default: a fresh one)")
    p.add_argument("--profile", action="store_true",
                   help="run the playbooks with profile_roles and profile_tasks and print where they spend their time")
    args = p.parse_args()
    bundle_dir = Path(args.bundle) if args.bundle else Path(tempfile.mkdtemp()) / "bundle"
    if not args.bundle:
        bundle.make(bundle_dir, log=lambda *_: None)
    os.environ.setdefault("MPIPLAT_CLUSTER", "installbench")  # never the default cluster
    mirror = yaml.safe_load(HELM_VARS.read_text())["mpiplat_image_registry"]
    cluster.down()
    cluster.up(bare=True, image_registry=mirror)
    helm, kubectl = str(binary("helm")), str(binary("kubectl"))
    env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig_path()), MPIPLAT_HELM=helm,
               MPIPLAT_BUNDLE=str(bundle_dir), ANSIBLE_NOCOLOR="1")
    # molecule/helm's variables without its team: the plain install below creates no queues either.
    playbook = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "inventories/local/hosts.yml",
                "-e", f"@{HELM_VARS}", "-e", '{"mpiplat_teams": []}']
    profiled = dict(env, ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_roles,ansible.posix.profile_tasks",
                    PROFILE_TASKS_TASK_OUTPUT_LIMIT="100") if args.profile else env
    runs = [("site.yml, fresh (bundle, CRDs first, helm --wait)", ["playbooks/site.yml"]),
            ("site.yml, no-op re-run", ["playbooks/site.yml"]),
            ("uninstall.yml with CRDs", ["playbooks/uninstall.yml", "-e", "mpiplat_confirm_uninstall=true",
                                         "-e", "mpiplat_remove_crds=true"])]
    rows, outputs = [], []
    for label, argv in runs:
        rows.append((label, _timed(playbook + argv, profiled, outputs)))

    comps = load()
    start = time.monotonic()
    # site.yml's order: jobset, trainer, mpi-operator, then kueue.
    _helm_install(helm, bundle_dir, comps["jobset"], "jobset", "jobset-system", _image(comps["jobset"], "image"), env)
    _helm_install(helm, bundle_dir, comps["trainer"], "kubeflow-trainer", "kubeflow-system",
                  ["--set", "jobset.install=false", *_image(comps["trainer"], "image", registry_key=True)], env)
    _timed([kubectl, "apply", "--server-side", "-f", str(bundle_dir / "manifests" / "mpi-operator.yaml")], env)
    _timed([kubectl, "-n", "mpi-operator", "wait", "deployment/mpi-operator", "--for=condition=Available",
            "--timeout=300s"], env)
    _helm_install(helm, bundle_dir, comps["kueue"], "kueue", "kueue-system",
                  _image(comps["kueue"], "controllerManager.manager.image"), env)
    rows.append(("plain helm install --wait x3 + kubectl apply/wait (same charts and manifest)",
                 time.monotonic() - start))
    cluster.down()
    print("| step | seconds |\n|---|---|")
    for label, secs in rows:
        print(f"| {label} | {secs:.0f} |")
    for (label, _), stdout in zip(runs, outputs, strict=True) if args.profile else []:
        roles, tasks = profile(stdout)
        print(f"\n| {label}: role or task (profile_roles, profile_tasks) | seconds |\n|---|---|")
        for name, secs in roles + [("", 0.0)] + tasks:
            print(f"| {name} | {secs:.1f} |" if name else "| **slowest tasks** | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
