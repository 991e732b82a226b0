"""Read the one pinned versions file (versions.yml at the top of the repo, shipped in the package)."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml

from mpiplat.errors import MpiplatError

VERSIONS_FILE = Path(str(resources.files("mpiplat") / "versions.yml"))
BUILD_KINDS = ("kubernetes", "wrapper", "none")


class VersionsError(MpiplatError, ValueError):
    """The versions file is malformed."""


@dataclass(frozen=True)
class Component:
    name: str
    version: str
    module: str
    build: str
    binaries: dict[str, str]
    ldflags: str = ""
    extra: dict = field(default_factory=dict)

    def expand(self, text: str) -> str:
        """Fill {version} (v1.2.3) and {number} (1.2.3) placeholders."""
        return text.replace("{version}", self.version).replace("{number}", self.version.lstrip("v"))

    @property
    def minor(self) -> str:
        """"v1.34.4" -> "1.34"."""
        return ".".join(self.version.lstrip("v").split(".")[:2])


def cache_dir() -> Path:
    """Build cache outside the repo; MPIPLAT_CACHE overrides."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mpiplat"
    return Path(os.environ.get("MPIPLAT_CACHE", default))


def load(path: Path = VERSIONS_FILE) -> dict[str, Component]:
    data = yaml.safe_load(path.read_text())
    comps = (data or {}).get("components")
    if not isinstance(comps, dict) or not comps:
        raise VersionsError(f"{path}: 'components' must be a non-empty mapping")
    out: dict[str, Component] = {}
    for name, spec in comps.items():
        where = f"{path}: components.{name}"
        if not isinstance(spec, dict):
            raise VersionsError(f"{where} must be a mapping, got {spec!r}")
        for key in ("version", "module", "build"):
            if not isinstance(spec.get(key), str) or not spec[key]:
                raise VersionsError(f"{where}.{key} is required (a non-empty string), got {spec.get(key)!r}")
        if not spec["version"].startswith("v"):
            raise VersionsError(f"{where}.version must look like vX.Y.Z, got {spec['version']!r}")
        if spec["build"] not in BUILD_KINDS:
            raise VersionsError(f"{where}.build is {spec['build']!r}; allowed: {', '.join(BUILD_KINDS)}")
        known = {"version", "module", "build", "binaries", "ldflags"}
        out[name] = Component(
            name=name,
            version=spec["version"],
            module=spec["module"],
            build=spec["build"],
            binaries=dict(spec.get("binaries") or {}),
            ldflags=spec.get("ldflags", ""),
            extra={k: v for k, v in spec.items() if k not in known},
        )
    return out


_module_dirs: dict[str, Path] = {}


def module_dir(comp: Component) -> Path:
    """Directory of a pinned module's files in the Go module cache (downloaded through the proxy)."""
    key = f"{comp.module}@{comp.version}"
    if key not in _module_dirs:
        out = subprocess.run(["go", "mod", "download", "-json", key], capture_output=True, text=True,
                             env=dict(os.environ, GOFLAGS="-mod=mod"), cwd=Path.home())
        if out.returncode != 0:
            raise VersionsError(f"cannot fetch module {key} through the Go module proxy: "
                                f"{out.stdout.strip()} {out.stderr.strip()}")
        _module_dirs[key] = Path(json.loads(out.stdout)["Dir"])
    return _module_dirs[key]
