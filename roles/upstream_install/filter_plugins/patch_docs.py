"""upstream_install_patch: JSON patches (RFC 6902) applied to the named documents of an upstream manifest,
so that a role changes the pinned manifest where it must (a flag, a port) without a copy of it."""

from __future__ import annotations

import copy

import jsonpatch
from ansible.errors import AnsibleFilterError


def upstream_install_patch(docs: list[dict], patches: list[dict], component: str = "") -> list[dict]:
    """`docs` with each patch {kind, name, ops} applied to the document of that kind and name. A patch
    that names no document, or whose ops do not apply, fails naming the document and why."""
    out = [copy.deepcopy(d) for d in docs]
    for patch in patches:
        where = f"{component} manifest: {patch.get('kind')}/{patch.get('name')}"
        found = [i for i, d in enumerate(out)
                 if d.get("kind") == patch.get("kind") and (d.get("metadata") or {}).get("name") == patch.get("name")]
        if not found:
            have = sorted(f"{d.get('kind')}/{(d.get('metadata') or {}).get('name')}" for d in out
                          if d.get("kind") == patch.get("kind"))
            raise AnsibleFilterError(f"{where}: no such document to patch (documents of that kind: {have})")
        for i in found:
            try:
                out[i] = jsonpatch.apply_patch(out[i], patch.get("ops") or [])
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as err:
                raise AnsibleFilterError(f"{where}: patch {patch.get('ops')} does not apply: {err}") from err
    return out


class FilterModule:
    def filters(self):
        return {"upstream_install_patch": upstream_install_patch}
