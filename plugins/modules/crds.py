"""mpiplat.platform.crds: apply CustomResourceDefinitions server-side where the cluster does not hold them as
written, and wait until those are Established; or check that CRDs are Established."""

from __future__ import annotations

DOCUMENTATION = r"""
module: crds
short_description: Apply CRDs server-side where they changed, and wait until Established
description:
  - Reads each CRD by name and applies, server-side, only those the cluster does not hold as written (every
    field we write, labels and annotations included; drift and new pins are applied, an unchanged CRD is not).
  - Then waits until each applied CRD is Established.
  - Returns names only, never the CRDs (Kueue's and Kubeflow Trainer's are megabytes), so a re-run with nothing
    to do costs a read per CRD.
  - The CRDs come as objects (I(definitions)) or from a chart's C(helm template --include-crds) (I(chart)), run
    here so that megabytes of rendered chart never pass through Ansible's variables.
  - With I(established) alone it changes nothing and fails unless each CRD named there is Established.
  - With I(remove) it deletes the CRDs that match a label selector and waits until they are gone.
  - In check mode the changed CRDs are applied as a server-side dry run.
  - Takes kubernetes.core's connection options (kubeconfig, context, ...).
options:
  definitions:
    description: The CRDs, as objects.
    type: list
    elements: dict
  chart:
    description:
      - A chart whose CRDs to apply, rendered with C(helm template --include-crds).
      - Keys C(ref) (required), C(version), C(repo_url), C(release), C(namespace), C(values) (a dict),
        C(helm) (the binary; default C(helm) on PATH).
    type: dict
  labels:
    description: Labels added to each CRD.
    type: dict
    default: {}
  annotations:
    description: Annotations added to each CRD.
    type: dict
    default: {}
  established:
    description: CRD names that must exist and be Established (after the apply, if there is one).
    type: list
    elements: str
    default: []
  hint:
    description: What to do, added to the message when a CRD of I(established) is missing or not Established.
    type: str
    default: ""
  remove:
    description: A label selector; the CRDs it matches are deleted (with every object of them), waited for.
    type: str
  field_manager:
    description: The field manager of the server-side apply (conflicts are forced).
    type: str
    default: mpiplat
  wait_timeout:
    description: Seconds to wait for the applied CRDs to be Established.
    type: int
    default: 120
author: mpiplat
"""

RETURN = r"""
applied:
  description: The CRDs applied (or, in check mode, that would be), by name.
  type: list
  returned: always
removed:
  description: The CRDs deleted (or, in check mode, that would be), by name.
  type: list
  returned: with I(remove)
names:
  description: Every CRD of I(definitions) or I(chart), by name.
  type: list
  returned: always
"""

import copy
import json
import os
import subprocess
import tempfile
import time

from ansible_collections.kubernetes.core.plugins.module_utils.ansiblemodule import AnsibleModule
from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import AnsibleK8SModule
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.exceptions import CoreException
from ansible_collections.mpiplat.platform.plugins.module_utils.drift import holds

try:
    import yaml
    from kubernetes.dynamic.exceptions import DynamicApiError, NotFoundError
except ImportError:  # AnsibleK8SModule reports the missing kubernetes package
    pass


def _established(crd: dict | None) -> bool:
    conditions = ((crd or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def _why(err: DynamicApiError) -> str:
    return f"{err.status} {err.reason}: {err.summary()}"


def _rendered(module, chart: dict) -> list[dict]:
    """The CRDs of `chart` (helm template --include-crds)."""
    if not chart.get("ref"):
        module.fail_json(msg="chart.ref is required: a chart reference (a .tgz, a directory, repo/name or oci://)")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as values:
        json.dump(chart.get("values") or {}, values)
    argv = [chart.get("helm") or "helm", "template", chart.get("release") or "release", chart["ref"],
            "--include-crds", "--values", values.name]
    for flag, key in (("--namespace", "namespace"), ("--version", "version"), ("--repo", "repo_url")):
        if chart.get(key):
            argv += [flag, str(chart[key])]
    try:
        run = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as err:
        module.fail_json(msg=f"chart.helm: cannot run {argv[0]}: {err}")
    finally:
        os.unlink(values.name)
    if run.returncode != 0:
        module.fail_json(msg=f"helm template of {chart['ref']} failed (exit {run.returncode}): "
                             f"{run.stderr.strip()[-2000:]}", cmd=argv)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [d for d in yaml.load_all(run.stdout, Loader=loader)
            if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"]


def _remove(module, client, api) -> None:
    """Delete the CRDs that match the selector `remove`, then wait until they are gone."""
    selector, removed = module.params["remove"], []
    try:
        found = [c.metadata.name for c in client.client.get(api, label_selector=selector).items]
        for name in found:
            if not module.check_mode:
                client.client.delete(api, name=name)
            removed.append(name)
        deadline = time.monotonic() + module.params["wait_timeout"]
        while removed and not module.check_mode and client.client.get(api, label_selector=selector).items:
            if time.monotonic() > deadline:
                module.fail_json(msg=f"CRDs {selector} still there after {module.params['wait_timeout']}s",
                                 removed=removed)
            time.sleep(0.3)
    except DynamicApiError as err:
        module.fail_json(msg=f"removing CRDs {selector}: {_why(err)}", removed=removed)
    module.exit_json(changed=bool(removed), removed=removed, applied=[], names=[])


def main() -> None:
    args = copy.deepcopy(AUTH_ARG_SPEC)
    args.update(definitions=dict(type="list", elements="dict"),
                chart=dict(type="dict"),
                labels=dict(type="dict", default={}),
                annotations=dict(type="dict", default={}),
                established=dict(type="list", elements="str", default=[]),
                hint=dict(type="str", default=""),
                remove=dict(type="str"),
                field_manager=dict(type="str", default="mpiplat"),
                wait_timeout=dict(type="int", default=120))
    module = AnsibleK8SModule(module_class=AnsibleModule, argument_spec=args, supports_check_mode=True,
                              mutually_exclusive=[("definitions", "chart", "remove"), ("remove", "established")],
                              required_one_of=[("definitions", "chart", "established", "remove")])
    try:
        client = get_api_client(module)
        api = client.resource("CustomResourceDefinition", "apiextensions.k8s.io/v1")
    except CoreException as err:
        module.fail_from_exception(err)
    params = module.params
    if params["remove"]:
        _remove(module, client, api)
    wanted = _rendered(module, params["chart"]) if params["chart"] else params["definitions"] or []
    for crd in wanted:
        meta = crd.setdefault("metadata", {})
        for key in ("labels", "annotations"):
            if params[key]:
                meta[key] = {**(meta.get(key) or {}), **params[key]}
    names = [d.get("metadata", {}).get("name", "") for d in wanted]
    for crd, name in zip(wanted, names, strict=True):
        if crd.get("kind") != "CustomResourceDefinition" or not name:
            module.fail_json(msg=f"definitions: {crd.get('kind')}/{name or '?'} is not a named "
                                 "CustomResourceDefinition; allowed: CustomResourceDefinitions only")

    applied: list[str] = []

    def fail(what: str, name: str, err: DynamicApiError) -> None:
        module.fail_json(msg=f"{what} CRD {name}: {_why(err)}", applied=applied, names=names)

    def read(name: str) -> dict | None:
        try:
            return client.client.get(api, name=name).to_dict()
        except NotFoundError:
            return None
        except DynamicApiError as err:
            fail("reading", name, err)

    # One list of the CRDs that carry our labels, not a read of each (Kueue has 20, 1.9 MB in all).
    selector = ",".join(f"{k}={v}" for k, v in sorted(params["labels"].items()))
    listed: dict[str, dict] = {}
    try:
        if selector and wanted:
            found = client.client.get(api, label_selector=selector).to_dict()["items"]
            listed = {c["metadata"]["name"]: c for c in found}
    except DynamicApiError as err:
        fail("listing", selector, err)
    for crd, name in zip(wanted, names, strict=True):
        live = listed[name] if name in listed else read(name)
        if holds(live, crd) and _established(live):
            continue
        try:
            client.client.server_side_apply(
                api, body=crd, name=name, field_manager=params["field_manager"], force_conflicts=True,
                **({"dry_run": "All"} if module.check_mode else {}))
        except DynamicApiError as err:
            fail("applying", name, err)
        applied.append(name)
    deadline = time.monotonic() + params["wait_timeout"]
    waiting = [] if module.check_mode else list(applied)
    while waiting:
        waiting = [name for name in waiting if not _established(read(name))]
        if waiting and time.monotonic() > deadline:
            module.fail_json(msg=f"CRDs not Established after {params['wait_timeout']}s: {', '.join(waiting)}",
                             applied=applied, names=names)
        if waiting:
            time.sleep(0.5)
    # --check on a fresh cluster installs nothing to find Established.
    missing = [] if module.check_mode else [name for name in params["established"] if not _established(read(name))]
    if missing:
        module.fail_json(msg=f"CRDs missing or not Established: {', '.join(missing)}"
                             + (f": {params['hint']}" if params["hint"] else ""), applied=applied, names=names)
    result = {"changed": bool(applied), "applied": applied, "names": names}
    if module._diff and applied:
        result["diff"] = {"prepared": "server-side apply of the CRDs " + ", ".join(applied)}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
