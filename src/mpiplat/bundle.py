"""`mpiplat bundle DIR`: an offline bundle of every pinned chart and manifest, for air-gapped installs.

Layout (the installer roles read these paths when mpiplat_artifact_source=bundle):
  charts/<chart>-<version>.tgz      packaged charts, sub-charts vendored
  manifests/<component>.yaml        release manifests (mpi-operator) and trainer-runtimes.yaml
  images.txt                        every container image the install pulls, for mirroring
  versions.yml                      the pins the bundle was made from
  SHA256SUMS                        checksums of every file above
Charts and manifests come from the pinned upstream Go module zips, through the Go module proxy.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from mpiplat.errors import MpiplatError
from mpiplat.versions import VERSIONS_FILE, Component, VersionsError, load, module_dir


class BundleError(MpiplatError, RuntimeError):
    """The bundle could not be made; the message says which component and why."""


def chart_version(comp: Component) -> str:
    return comp.expand(str(comp.extra["chart"].get("version", "{number}")))


def _helm() -> str:
    from mpiplat.localcluster.build import binary, build

    build(only=["helm"], stream=sys.stderr)
    return str(binary("helm"))


def _package(helm: str, comps: dict[str, Component], name: str, dest: Path, work: Path) -> Path:
    """Package the chart of component `name` (with its dependencies vendored) into dest."""
    comp = comps[name]
    chart = comp.extra["chart"]
    src = module_dir(comp) / chart["path"]
    if not (src / "Chart.yaml").is_file():
        raise BundleError(f"{name} {comp.version}: no chart at {chart['path']} in module {comp.module}")
    copy = work / f"{name}-src" / chart["name"]
    shutil.copytree(src, copy, dirs_exist_ok=True)
    for path in copy.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    deps = chart.get("dependencies") or []
    if deps:
        (copy / "charts").mkdir(exist_ok=True)
        for dep in deps:
            _package(helm, comps, dep, copy / "charts", work)
    version = chart_version(comp)
    proc = subprocess.run([helm, "package", str(copy), "--version", version, "--app-version", comp.version,
                           "--destination", str(dest)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BundleError(f"helm package of {name} {version} failed: {proc.stderr.strip()}")
    return dest / f"{chart['name']}-{version}.tgz"


_IMAGE = re.compile(r"^[ \t]*(?:-[ \t]+)?image:[ \t]*[\"']?([^\s\"']+)", re.M)


def _image_name(ref: str) -> str:
    return ref.rsplit("@", 1)[0].rsplit(":", 1)[0].rsplit("/", 1)[-1]


def images(comps: dict[str, Component], rendered: list[str]) -> list[str]:
    """Pinned images, plus images found in rendered charts and manifests that no pin overrides."""
    pinned = [c.expand(i) for c in comps.values() for i in c.extra.get("images", [])]
    names = {_image_name(i) for i in pinned}
    found = {m for text in rendered for m in _IMAGE.findall(text) if "{{" not in m}
    return sorted(set(pinned) | {i for i in found if _image_name(i) not in names})


def make(directory: Path, log=print, previous: bool = False) -> Path:
    """The bundle of the pins; with `previous`, of each component's previous pin where it has one."""
    comps = load(previous=previous)
    out = Path(directory)
    if out.exists() and any(out.iterdir()):
        raise BundleError(f"bundle directory {out} is not empty; choose a new or empty directory")
    (out / "charts").mkdir(parents=True, exist_ok=True)
    (out / "manifests").mkdir(exist_ok=True)
    helm = _helm()
    rendered: list[str] = []
    skipped: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name, comp in comps.items():
            if "chart" in comp.extra and name != "lws":
                log(f"  chart     {name} {chart_version(comp)}")
                try:
                    tgz = _package(helm, comps, name, out / "charts", work)
                except VersionsError as err:
                    skipped.append(f"{name}: {err}")
                    log(f"  SKIPPED   {name}: its module is not on the Go module proxy")
                    continue
                proc = subprocess.run([helm, "template", name, str(tgz), "--include-crds"],
                                      capture_output=True, text=True)
                rendered.append(proc.stdout)
            if "manifests" in comp.extra:
                log(f"  manifest  {name} {comp.version}")
                text = (module_dir(comp) / comp.extra["manifests"]["path"]).read_text()
                (out / "manifests" / f"{name}.yaml").write_text(text)
                rendered.append(text)
            if "runtimes" in comp.extra:
                log(f"  runtimes  {name} {comp.version}")
                docs = [(module_dir(comp) / p).read_text() for p in comp.extra["runtimes"]]
                (out / "manifests" / "trainer-runtimes.yaml").write_text("\n---\n".join(docs))
    shutil.copyfile(VERSIONS_FILE, out / "versions.yml")
    image_list = images(comps, rendered)
    (out / "images.txt").write_text("".join(f"{i}\n" for i in image_list))
    if skipped:
        (out / "MISSING.txt").write_text(
            "Not in this bundle (add the chart .tgz under charts/ by hand, e.g. `helm pull` on a connected "
            "machine, then re-run `mpiplat bundle --checksums-only`):\n" + "".join(f"- {s}\n" for s in skipped))
    write_checksums(out)
    log(f"bundle: {out} ({len(list((out / 'charts').iterdir()))} charts, {len(image_list)} images"
        f"{', ' + str(len(skipped)) + ' missing (see MISSING.txt)' if skipped else ''})")
    return out


def write_checksums(out: Path) -> None:
    lines = []
    for path in sorted(p for p in out.rglob("*") if p.is_file() and p.name != "SHA256SUMS"):
        lines.append(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.relative_to(out)}\n")
    (out / "SHA256SUMS").write_text("".join(lines))


def verify(out: Path) -> list[str]:
    """Files whose checksum does not match SHA256SUMS (empty when the bundle is intact)."""
    bad = []
    for line in (out / "SHA256SUMS").read_text().splitlines():
        digest, rel = line.split("  ", 1)
        path = out / rel
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            bad.append(rel)
    return bad


def manifest_docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]
