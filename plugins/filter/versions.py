"""The roles' view of versions.yml, by mpiplat.versions (the one implementation, which the local cluster uses too).

    'kueue' | mpiplat.platform.pin(kueue_version, mpiplat_image_registry | default(''))
        the component's pin, {version}/{number} filled in, image_parts through the mirror ({} if unknown)
    manifest_text | mpiplat.platform.mirror_manifest(mpiplat_image_registry | default(''))
        a manifest's `image:` lines through the mirror
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def _versions():
    try:
        from mpiplat import versions
    except ImportError as err:
        raise AnsibleFilterError(f"the mpiplat filters need the mpiplat package where Ansible runs "
                                 f"(`make setup` installs both into .venv): {err}") from err
    return versions


def pin(component: str, version_override: str = "", registry: str = "") -> dict:
    versions = _versions()
    try:
        return versions.pin(str(component), str(version_override or ""), str(registry or ""))
    except (OSError, ValueError) as err:
        raise AnsibleFilterError(f"cannot read the pin of {component} from {versions.VERSIONS_FILE}: {err}") from err


def mirror_manifest(text: str, registry: str = "") -> str:
    return _versions().mirror_manifest(str(text), str(registry or ""))


class FilterModule:
    def filters(self):
        return {"pin": pin, "mirror_manifest": mirror_manifest}
