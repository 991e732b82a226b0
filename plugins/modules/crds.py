"""mpiplat.platform.crds: apply CustomResourceDefinitions server-side where the cluster does not hold them as
written, and wait until those are Established."""

from __future__ import annotations

DOCUMENTATION = r"""
module: crds
short_description: Apply CRDs server-side where they changed, and wait until Established
description:
  - Reads each CRD by name and applies, server-side, only those the cluster does not hold as written (every
    field we write, labels and annotations included: drift and new pins are applied, an unchanged CRD is not).
  - Then waits until each applied CRD is Established.
  - Returns names only, never the CRDs (Kueue's and Kubeflow Trainer's are megabytes), so a re-run with nothing
    to do costs a read per CRD.
  - In check mode the changed CRDs are applied as a server-side dry run.
  - Takes kubernetes.core's connection options (kubeconfig, context, ...).
options:
  definitions:
    description: The CRDs, as objects.
    type: list
    elements: dict
    required: true
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
names:
  description: Every CRD of I(definitions), by name.
  type: list
  returned: always
"""

import copy
import time

from ansible_collections.kubernetes.core.plugins.module_utils.ansiblemodule import AnsibleModule
from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import AnsibleK8SModule
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.exceptions import CoreException
from ansible_collections.mpiplat.platform.plugins.module_utils.drift import holds

try:
    from kubernetes.dynamic.exceptions import DynamicApiError, NotFoundError
except ImportError:  # AnsibleK8SModule reports the missing kubernetes package
    pass


def _established(crd: dict | None) -> bool:
    conditions = ((crd or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def main() -> None:
    args = copy.deepcopy(AUTH_ARG_SPEC)
    args.update(definitions=dict(type="list", elements="dict", required=True),
                field_manager=dict(type="str", default="mpiplat"),
                wait_timeout=dict(type="int", default=120))
    module = AnsibleK8SModule(module_class=AnsibleModule, argument_spec=args, supports_check_mode=True)
    try:
        client = get_api_client(module)
        api = client.resource("CustomResourceDefinition", "apiextensions.k8s.io/v1")
    except CoreException as err:
        module.fail_from_exception(err)
    wanted = module.params["definitions"]
    names = [d.get("metadata", {}).get("name", "") for d in wanted]
    for crd, name in zip(wanted, names, strict=True):
        if crd.get("kind") != "CustomResourceDefinition" or not name:
            module.fail_json(msg=f"definitions: {crd.get('kind')}/{name or '?'} is not a named "
                                 "CustomResourceDefinition; allowed: CustomResourceDefinitions only")

    def read(name: str) -> dict | None:
        try:
            return client.client.get(api, name=name).to_dict()
        except NotFoundError:
            return None

    applied = []
    try:
        for crd, name in zip(wanted, names, strict=True):
            live = read(name)
            if holds(live, crd) and _established(live):
                continue
            client.client.server_side_apply(
                api, body=crd, name=name, field_manager=module.params["field_manager"], force_conflicts=True,
                **({"dry_run": "All"} if module.check_mode else {}))
            applied.append(name)
        deadline = time.monotonic() + module.params["wait_timeout"]
        waiting = [] if module.check_mode else list(applied)
        while waiting:
            waiting = [name for name in waiting if not _established(read(name))]
            if waiting and time.monotonic() > deadline:
                module.fail_json(msg=f"CRDs not Established after {module.params['wait_timeout']}s: "
                                     f"{', '.join(waiting)}", applied=applied, names=names)
            if waiting:
                time.sleep(0.5)
    except DynamicApiError as err:
        module.fail_json(msg=f"applying CRD {name}: {err.status} {err.reason}: {err.summary()}",
                         applied=applied, names=names)
    result = {"changed": bool(applied), "applied": applied, "names": names}
    if module._diff and applied:
        result["diff"] = {"prepared": "server-side apply of the CRDs " + ", ".join(applied)}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
