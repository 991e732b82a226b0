"""The dashboard's browser assets (PatternFly's CSS, htmx): the npm packages pinned in versions.yml's
`web_assets`, fetched from the npm registry, checked against their integrity digest and unpacked.

Where they come from at run time: the wheel's copy (mpiplat/dashboard/vendor/, written by its build, setup.py),
else the cache (~/.cache/mpiplat/web/), filled on first use. Nothing of them is committed.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import io
import os
import shutil
import sys
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from mpiplat.errors import MpiplatError
from mpiplat.versions import VERSIONS_FILE, cache_dir

REGISTRY = os.environ.get("MPIPLAT_NPM_REGISTRY", "https://registry.npmjs.org")
PACKAGED = Path(__file__).parent / "vendor"  # the wheel's copy
DONE = ".complete"


class AssetError(MpiplatError, RuntimeError):
    """An asset could not be fetched or failed its integrity check."""


@dataclass(frozen=True)
class Asset:
    name: str  # the key in web_assets, and its folder under /static/vendor/
    package: str
    version: str
    integrity: str  # "sha512-<base64>", as the registry's dist.integrity
    files: tuple[str, ...]  # globs inside the package

    @property
    def tarball(self) -> str:
        base = self.package.rsplit("/", 1)[-1]
        return f"{REGISTRY}/{self.package}/-/{base}-{self.version}.tgz"

    def wanted(self, path: str) -> bool:
        return any(fnmatch.fnmatchcase(path, pattern) for pattern in self.files)


def pinned(path: Path = VERSIONS_FILE) -> list[Asset]:
    data = yaml.safe_load(path.read_text()) or {}
    out = []
    for name, spec in (data.get("web_assets") or {}).items():
        for key in ("package", "version", "integrity", "files"):
            if not spec.get(key):
                raise AssetError(f"{path}: web_assets.{name}.{key} is required")
        out.append(Asset(name, spec["package"], str(spec["version"]), spec["integrity"], tuple(spec["files"])))
    return out


def _check(asset: Asset, data: bytes) -> None:
    algo, _, expected = asset.integrity.partition("-")
    if algo not in ("sha256", "sha384", "sha512"):
        raise AssetError(f"web_assets.{asset.name}.integrity is {asset.integrity!r}; allowed: sha256-, sha384- or "
                         "sha512- followed by the base64 digest (the npm registry's dist.integrity)")
    got = base64.b64encode(hashlib.new(algo, data).digest()).decode()
    if got != expected:
        raise AssetError(f"{asset.tarball}: {algo} digest is {got}, not the pinned {expected}: refusing it")


def unpack(asset: Asset, dest: Path, log=print) -> Path:
    """Fetch `asset` and unpack its wanted files into dest/<name> (once: a finished folder is kept)."""
    target = dest / asset.name
    marker = target / DONE
    if marker.is_file() and marker.read_text() == f"{asset.package}@{asset.version}":
        return target
    log(f"dashboard assets: fetching {asset.package}@{asset.version} from {REGISTRY}")
    try:
        with urllib.request.urlopen(asset.tarball, timeout=60) as resp:
            data = resp.read()
    except OSError as err:
        raise AssetError(f"cannot fetch {asset.tarball}: {err} (set MPIPLAT_NPM_REGISTRY to a mirror)") from err
    _check(asset, data)
    if target.exists():
        shutil.rmtree(target)
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = []
        for m in tar.getmembers():
            rel = m.name.split("/", 1)[1] if "/" in m.name else m.name  # npm tarballs put all under package/
            if m.isfile() and asset.wanted(rel):
                m.name = rel
                members.append(m)
        if not members:
            raise AssetError(f"{asset.tarball} holds none of web_assets.{asset.name}.files {list(asset.files)}")
        tar.extractall(tmp, members=members, filter="data")
    (tmp / DONE).write_text(f"{asset.package}@{asset.version}")
    tmp.rename(target)
    return target


def cached(log=print) -> Path:
    """The cache's folder of every pinned asset by name, filled where missing."""
    dest = cache_dir() / "web"
    for asset in pinned():
        unpack(asset, dest, log)
    return dest


def location(log=print) -> Path:
    """The folder holding every pinned asset by name: the wheel's, else the cache's (fetched if missing)."""
    if all((PACKAGED / a.name / DONE).is_file() for a in pinned()):
        return PACKAGED
    return cached(log)


def copy_into(dest: Path, log=print) -> None:
    """Every pinned asset into dest/<name> (the wheel's build), through the cache."""
    source = cached(log)
    for asset in pinned():
        shutil.copytree(source / asset.name, dest / asset.name, dirs_exist_ok=True)


if __name__ == "__main__":  # python -m mpiplat.dashboard.assets DIR: every asset into DIR
    copy_into(Path(sys.argv[1]))
