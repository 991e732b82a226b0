"""The upgrade's plan, by mpiplat.upgrade (its rules: one minor at a time, from the previous pin, never down).

    images | mpiplat.platform.upgrade_plan(components, targets)
        {changes: ["kueue: v0.18.2 -> v0.19.2 (minor)", ...], refused: ""}, or refused: the message naming each
        component that cannot move, and why. `images`: the cluster's Deployments' container images;
        `components`: those the roles install (their mode helm or manifests); `targets`: the roles' version
        overrides by component ("" for the pin).
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def upgrade_plan(images: list, components: list, targets: dict | None = None) -> dict:
    try:
        from mpiplat import upgrade
    except ImportError as err:
        raise AnsibleFilterError(f"the mpiplat filters need the mpiplat package where Ansible runs "
                                 f"(`make setup` installs both into .venv): {err}") from err
    wanted = {str(c) for c in components}
    unknown = sorted(wanted - set(upgrade.COMPONENTS))
    if unknown:
        raise AnsibleFilterError(f"upgrade_plan: unknown components {unknown}; allowed: {list(upgrade.COMPONENTS)}")
    installed = upgrade.installed([str(i) for i in images])
    try:
        changes = upgrade.plan({c: v for c, v in installed.items() if c in wanted},
                               {str(k): str(v or "") for k, v in (targets or {}).items()})
    except upgrade.UpgradeRefused as err:
        return {"changes": [], "refused": str(err)}
    return {"changes": [str(c) for c in changes if c.component in wanted], "refused": ""}


class FilterModule:
    def filters(self):
        return {"upgrade_plan": upgrade_plan}
