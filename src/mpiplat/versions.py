"""Read the one pinned versions file (versions.yml at the top of the repo, shipped in the package)."""

from __future__ import annotations

import functools
import json
import os
import re
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


def load(path: Path = VERSIONS_FILE, previous: bool = False, kubernetes: str = "") -> dict[str, Component]:
    """The components; with `previous`, each one that has a `previous` pin at that version (the upgrade's
    starting point: its binaries, images and bundle are built as the current ones are); with `kubernetes`
    (a version or minor of kubernetes.matrix, see kubernetes_pin), Kubernetes at that pin."""
    data = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml: read often
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
        if "previous" in spec and not _PIN.match(str(spec["previous"])):
            raise VersionsError(f"{where}.previous must look like vX.Y.Z, got {spec['previous']!r}")
        matrix = spec.get("matrix")
        if matrix is not None and (not isinstance(matrix, list) or spec["version"] not in matrix
                                   or not all(_PIN.match(str(v)) for v in matrix)):
            raise VersionsError(f"{where}.matrix must be a list of vX.Y.Z versions holding its version "
                                f"{spec['version']}, got {matrix!r}")
        known = {"version", "module", "build", "binaries", "ldflags"}
        version = spec["previous"] if previous and spec.get("previous") else spec["version"]
        if name == "kubernetes" and kubernetes:
            version = _matrix_pin(kubernetes, spec.get("matrix") or [spec["version"]], where)
        out[name] = Component(
            name=name,
            version=version,
            module=spec["module"],
            build=spec["build"],
            binaries=dict(spec.get("binaries") or {}),
            ldflags=spec.get("ldflags", ""),
            extra={k: v for k, v in spec.items() if k not in known},
        )
    return out


_PIN = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")


def _matrix_pin(wanted: str, matrix: list[str], where: str) -> str:
    """The version of `matrix` that `wanted` names: itself (v1.36.3 or 1.36.3) or its minor (1.36, v1.36)."""
    want = wanted if wanted.startswith("v") else f"v{wanted}"
    found = [v for v in matrix if v == want or v.rsplit(".", 1)[0] == want]
    if not found:
        raise VersionsError(f"Kubernetes {wanted!r} is not pinned for the local cluster; allowed: "
                            f"{', '.join(matrix)} or their minors ({where}.matrix)")
    return found[0]


def kubernetes_matrix(path: Path = VERSIONS_FILE) -> list[str]:
    """The Kubernetes versions the local cluster runs (versions.yml kubernetes.matrix), the default first."""
    comp = load(path)["kubernetes"]
    return [comp.version, *(v for v in comp.extra.get("matrix") or [] if v != comp.version)]


def kubernetes_pin(wanted: str, path: Path = VERSIONS_FILE) -> str:
    """The pinned version that `wanted` (a version or minor of the matrix) names; a VersionsError naming the
    pinned ones for anything else."""
    return load(path, kubernetes=wanted)["kubernetes"].version


def version_tuple(version: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a "vX.Y.Z" version; None for anything else."""
    match = _PIN.match(version)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def _host_and_rest(image: str) -> tuple[str, str]:
    """An image reference's registry host and the rest. Its first part is a host when it has a '.' or ':'
    in it (as Docker reads it); without one the image is Docker Hub's, docker.io."""
    first, _, rest = image.partition("/")
    return (first, rest) if rest and ("." in first or ":" in first) else ("docker.io", image)


def split_image(image: str) -> tuple[str, str, str]:
    """(registry, path, tag) of an image reference "[host[:port]/]path[:tag]"; tag "" when it has none."""
    host, rest = _host_and_rest(image)
    path, colon, tag = rest.rpartition(":")
    return (host, path, tag) if colon and "/" not in tag else (host, rest, "")


def mirrored(image: str, registry: str) -> str:
    """An image reference through the mirror `registry` (mpiplat_image_registry): its registry host
    replaced by it, e.g. registry.k8s.io/kueue/kueue:v1 -> mirror.example.com/mpiplat/kueue/kueue:v1."""
    return f"{registry.rstrip('/')}/{_host_and_rest(image)[1]}"


_IMAGE_LINE = re.compile(r"^([ \t]*(?:-[ \t]+)?image:[ \t]*)(\S+)[ \t]*$", re.MULTILINE)


def mirror_manifest(text: str, registry: str) -> str:
    """A YAML manifest's `image:` lines through the mirror `registry` (unchanged without one)."""
    if not registry:
        return text
    return _IMAGE_LINE.sub(lambda m: m.group(1) + mirrored(m.group(2), registry), text)


def _expand(value, version: str, number: str):
    if isinstance(value, str):
        return value.replace("{version}", version).replace("{number}", number)
    if isinstance(value, dict):
        return {k: _expand(v, version, number) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, version, number) for v in value]
    return value


@functools.lru_cache(maxsize=8)
def _components(path: Path, _changed: tuple[int, int]) -> dict:
    """The components of the versions file at `path`, parsed once per version of the file (its mtime and size):
    the roles' filters ask for pins dozens of times a run."""
    return (yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}).get(
        "components") or {}


def pin(name: str, version_override: str = "", registry: str = "", path: Path = VERSIONS_FILE) -> dict:
    """A component's entry of the versions file as the roles use it ({} for an unknown one): `version` the
    override when given, else the pin; `number` the same without its v; {version} and {number} filled in in
    every string (chart.version defaults to "{number}"); `image_parts` each of its `images` split for chart
    values (registry, path, repository, tag), through the mirror `registry` when given."""
    stat = path.stat()
    entry = _components(path, (stat.st_mtime_ns, stat.st_size)).get(name)
    if not isinstance(entry, dict):
        return {}
    version = version_override or str(entry.get("version", ""))
    number = version.removeprefix("v")
    entry = dict(entry, version=version)
    if isinstance(entry.get("chart"), dict):
        entry["chart"] = {"version": "{number}", **entry["chart"]}
    entry = _expand(entry, version, number)
    parts = []
    for image in entry.get("images") or []:
        host, image_path, tag = split_image(image)
        host = registry.rstrip("/") if registry else host
        parts.append({"registry": host, "path": image_path, "repository": f"{host}/{image_path}", "tag": tag})
    return {**entry, "number": number, "image_parts": parts}


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
