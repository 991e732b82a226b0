"""Objects read from the pinned upstream modules: CRDs, webhook configurations (rewritten for the
host-run controllers) and Trainer's ClusterTrainingRuntimes. The paths are in versions.yml."""

from __future__ import annotations

import base64
import glob
from pathlib import Path

import yaml

from mpiplat.jobs import restricted_runtime
from mpiplat.localcluster.processes import CONTROLLERS, address
from mpiplat.localcluster.state import ClusterError
from mpiplat.versions import Component, VersionsError, module_dir

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where built in: the CRDs are megabytes


def docs(paths: list[Path]) -> list[dict]:
    """Every non-empty YAML document of the files, in order."""
    objs = []
    for p in paths:
        objs += [d for d in yaml.load_all(p.read_text(), Loader=_LOADER) if d]
    return objs


def module_files(comp: Component, key: str) -> list[Path]:
    """The files of a pinned module that versions.yml lists under `key` (glob patterns)."""
    pats = comp.extra.get(key) or []
    pats = [pats] if isinstance(pats, str) else pats
    if not pats:
        return []
    try:
        root = module_dir(comp)
    except VersionsError as err:
        raise ClusterError(str(err)) from err
    found = [Path(f) for pat in pats for f in sorted(glob.glob(str(root / pat)))]
    if not found:
        raise ClusterError(f"{comp.name} {comp.version}: no files match {pats} in {root}; fix `{key}` of "
                           f"{comp.name} in versions.yml for this version")
    return found


def crds(comps: dict[str, Component]) -> list[dict]:
    objs = docs([f for c in comps.values() for f in module_files(c, "crds")])
    return [d for d in objs if d.get("kind") == "CustomResourceDefinition"]


# Webhooks served for the integrations we enable; kueue's pod/deployment/statefulset and other
# framework webhooks are left out (they fail closed and we do not run those integrations).
def _keep_webhook(component: str, path: str) -> bool:
    if component == "kueue":
        return "kueue-x-k8s-io" in path or path.endswith(("-mpijob", "-trainjob"))
    if component == "jobset":
        return "jobset-x-k8s-io" in path
    return True


def webhook_configs(comps: dict[str, Component], ca: bytes) -> list[dict]:
    """Upstream webhook configurations rewritten to url-based clientConfig at the controllers' address."""
    bundle = base64.b64encode(ca).decode()
    out = []
    for ctl in CONTROLLERS:
        if not ctl.webhook_port:
            continue
        comp = comps[ctl.component]
        for doc in docs(module_files(comp, "webhooks")):
            hooks = []
            for hook in doc.get("webhooks") or []:
                path = hook["clientConfig"]["service"]["path"]
                if not _keep_webhook(comp.name, path):
                    continue
                hook["clientConfig"] = {"url": f"https://{address()}:{ctl.webhook_port}{path}",
                                        "caBundle": bundle}
                hook["timeoutSeconds"] = 10
                hooks.append(hook)
            if hooks:
                doc["metadata"] = {"name": f"{comp.name}-{doc['metadata']['name']}",
                                   "labels": {"app.kubernetes.io/managed-by": "mpiplat-localcluster"}}
                doc["webhooks"] = hooks
                out.append(doc)
    return out


def training_runtimes(comps: dict[str, Component]) -> list[dict]:
    """Trainer's ClusterTrainingRuntimes, their untagged images pinned to the Trainer version, made to run under
    restricted-v2 as the kubeflow_trainer role makes them (mpiplat.jobs.restricted_runtime)."""
    comp = comps["trainer"]
    objs = [restricted_runtime(obj) for obj in docs(module_files(comp, "runtimes"))]
    for obj in objs:
        for rjob in obj["spec"]["template"]["spec"]["replicatedJobs"]:
            for c in rjob["template"]["spec"]["template"]["spec"].get("containers", []):
                if ":" not in c["image"].rsplit("/", 1)[-1]:
                    c["image"] = f"{c['image']}:{comp.version}"
    return objs
