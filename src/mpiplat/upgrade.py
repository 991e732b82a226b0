"""What an upgrade from the installed versions to the pins changes, and whether it may run.

An upgrade goes one minor at a time and never down: a component may move to its pin from the pin's own minor
(a patch) or from its `previous` pin's minor in versions.yml. Anything else is refused before a change, with
the version to go through first. The playbook's preflight (playbooks/upgrade.yml) calls plan() through the
`mpiplat.platform.upgrade_plan` filter; the same rules hold wherever it is called from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mpiplat.errors import MpiplatError
from mpiplat.versions import VERSIONS_FILE, pin, split_image, version_tuple

# The components an upgrade moves, in the order it moves them: JobSet before Trainer, which runs on it; the
# MPI Operator before Kueue, whose MPIJob integration calls it.
COMPONENTS = ("jobset", "trainer", "mpi-operator", "kueue")
VERSION_VARS = {"jobset": "jobset_version", "trainer": "kubeflow_trainer_version",
                "mpi-operator": "mpi_operator_version", "kueue": "kueue_version"}  # the roles' overrides


class UpgradeRefused(MpiplatError, ValueError):
    """The installed versions cannot be upgraded to the pins in one step."""


@dataclass(frozen=True)
class Change:
    component: str
    installed: str  # "" when the component is not installed
    target: str

    @property
    def kind(self) -> str:
        """install, unchanged, patch or minor."""
        if not self.installed:
            return "install"
        if self.installed == self.target:
            return "unchanged"
        return "patch" if _parts(self.installed)[:2] == _parts(self.target)[:2] else "minor"

    def __str__(self) -> str:
        return {"install": f"{self.component}: not installed; installs {self.target}",
                "unchanged": f"{self.component}: {self.target}, unchanged"}.get(
            self.kind, f"{self.component}: {self.installed} -> {self.target} ({self.kind})")


def _parts(version: str) -> tuple[int, int, int]:
    parts = version_tuple(version)
    if parts is None:
        raise UpgradeRefused(f"version {version!r} does not look like vX.Y.Z")
    return parts


def component_of(image: str, path: Path = VERSIONS_FILE) -> tuple[str, str] | None:
    """(component, version) of a controller image of the stack, read from its tag as the pin's image tag is
    written ({version} or {number}): through a mirror too, which keeps the image's path. None for any other."""
    _, image_path, tag = split_image(image)
    for name in COMPONENTS:
        entry = pin(name, "v0.0.0", path=path)  # the tag shows whether the pin writes the v
        if not entry.get("images") or not tag:
            continue
        _, want, template = split_image(entry["images"][0])
        version = tag if template.startswith("v") else f"v{tag}"
        if (image_path == want or image_path.endswith("/" + want)) and version_tuple(version):
            return name, version
    return None


def installed(images: list[str], path: Path = VERSIONS_FILE) -> dict[str, str]:
    """The version of each component whose controller image is among `images` (those of the cluster's
    Deployments; see component_of). A component found with two versions (an upgrade half done) maps to the
    older one, so that the plan starts from it."""
    found: dict[str, str] = {}
    for image in images:
        got = component_of(image, path)
        if got and (got[0] not in found or _parts(got[1]) < _parts(found[got[0]])):
            found[got[0]] = got[1]
    return found


def plan(installed: dict[str, str], targets: dict[str, str] | None = None,
         path: Path = VERSIONS_FILE) -> list[Change]:
    """The change of each component from `installed` (component -> version, "" or absent: not installed) to
    its pin, or to its version in `targets` (the roles' overrides, "" for the pin). Raises UpgradeRefused naming
    every component that would go down or skip a minor."""
    changes, refused = [], []
    for name in COMPONENTS:
        entry = pin(name, path=path)
        target, previous = (targets or {}).get(name) or entry["version"], str(entry.get("previous") or "")
        have = str(installed.get(name) or "")
        try:
            want = _parts(target)
            got = _parts(have) if have else None
        except UpgradeRefused as err:
            refused.append(f"{name}: {err}")
            continue
        # From the target's own minor (a patch), or the previous pin's when the target is the pin.
        allowed = [target] + ([previous] if previous and target == entry["version"] else [])
        if got and got > want:
            refused.append(f"{name}: installed {have} is newer than the target {target}; downgrades are not "
                           "supported")
            continue
        if got and all(got[:2] != _parts(v)[:2] for v in allowed):
            minors = " or ".join(f"v{_parts(v)[0]}.{_parts(v)[1]}.x" for v in reversed(allowed))
            first = (f"upgrade to {previous} first (site.yml -e {VERSION_VARS[name]}={previous})" if previous
                     else "uninstall it first")
            refused.append(f"{name}: installed {have}, target {target}: upgrades go from {minors} only; {first}")
            continue
        changes.append(Change(name, have, target))
    if refused:
        raise UpgradeRefused("cannot upgrade: " + "; ".join(refused) + ". Nothing was changed.")
    return changes
