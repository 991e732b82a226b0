"""Build the pinned upstream binaries from Go modules into a cache outside the repo.

Layout under the cache (see mpiplat.versions.cache_dir):
  bin/<component>/<version>/<binary>   the binaries, plus .complete once all are built
  build/<component>-<version>/         wrapper modules (go.mod) for the builds that need one
  logs/build-<component>-<version>.log the go command output of the last build
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from mpiplat.errors import MpiplatError
from mpiplat.localcluster.progress import progress
from mpiplat.localcluster.state import kubernetes_version
from mpiplat.versions import Component, cache_dir, load


class BuildError(MpiplatError, RuntimeError):
    """A component failed to build; the message names it and the command to retry."""


def bin_dir(comp: Component) -> Path:
    return cache_dir() / "bin" / comp.name / comp.version


def cluster_components() -> dict[str, Component]:
    """The pinned components as this cluster runs them: Kubernetes at the version its `up` chose."""
    return load(kubernetes=kubernetes_version())


def binary(name: str, components: dict[str, Component] | None = None) -> Path:
    """Path of a built binary by its name (e.g. 'kube-apiserver'); by default this cluster's."""
    for comp in (components or cluster_components()).values():
        if name in comp.binaries:
            return bin_dir(comp) / name
    raise KeyError(f"no component in the versions file provides binary {name!r}")


def _stamp(comp: Component) -> str:
    return json.dumps(
        {"version": comp.version, "module": comp.module, "build": comp.build,
         "binaries": comp.binaries, "ldflags": comp.ldflags},
        sort_keys=True,
    )


def is_built(comp: Component) -> bool:
    d = bin_dir(comp)
    marker = d / ".complete"
    if not marker.is_file() or marker.read_text() != _stamp(comp):
        return False
    return all((d / b).is_file() for b in comp.binaries)


def _run(cmd: list[str], cwd: Path, log, env: dict[str, str]) -> None:
    log.write(f"$ (cd {cwd} && {' '.join(cmd)})\n")
    log.flush()
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd)


def _module_info(module: str, version: str, cwd: Path, env: dict[str, str]) -> dict:
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        cwd=cwd, env=env, capture_output=True, text=True,
    )
    if out.returncode != 0:
        raise subprocess.CalledProcessError(out.returncode, out.args, out.stdout, out.stderr)
    info = json.loads(out.stdout)
    if info.get("Info"):  # the .info file carries Time and Origin (commit hash)
        info.update(json.loads(Path(info["Info"]).read_text()))
    return info


def _kubernetes_gomod(comp: Component, info: dict) -> str:
    """Wrapper go.mod: staging modules required at v0.0.0 upstream are replaced by v0.N.P."""
    upstream = Path(info["GoMod"]).read_text()
    staging = re.findall(r"^\s*(k8s\.io/[\w.-]+) v0\.0\.0$", upstream, re.M)
    go_line = re.search(r"^go (\S+)$", upstream, re.M)
    godebug = re.search(r"^godebug .*$", upstream, re.M)
    release = "v0." + comp.version.lstrip("v").split(".", 1)[1]
    lines = [f"module mpiplat.local/{comp.name}", "", f"go {go_line.group(1) if go_line else '1.24.0'}", ""]
    if godebug:
        lines += [godebug.group(0), ""]
    lines += [f"require {comp.module} {comp.version}", ""]
    lines += [f"replace {m} => {m} {release}" for m in staging] + [""]
    lines += ["tool ("] + [f"\t{pkg}" for pkg in comp.binaries.values()] + [")", ""]
    return "\n".join(lines)


def _wrapper_gomod(comp: Component) -> str:
    tools = "\n".join(f"\t{pkg}" for pkg in comp.binaries.values())
    return (f"module mpiplat.local/{comp.name}\n\ngo 1.24.0\n\n"
            f"require {comp.module} {comp.version}\n\ntool (\n{tools}\n)\n")


def _kubernetes_ldflags(comp: Component, info: dict) -> str:
    major, minor = comp.version.lstrip("v").split(".")[:2]
    commit = (info.get("Origin") or {}).get("Hash", "")
    date = re.sub(r"\.\d+Z$", "Z", info.get("Time", "1970-01-01T00:00:00Z"))
    flags = []
    for pkg in ("k8s.io/client-go/pkg/version", "k8s.io/component-base/version"):
        for key, val in (("gitVersion", comp.version), ("gitMajor", major), ("gitMinor", minor),
                         ("gitCommit", commit), ("gitTreeState", "clean"), ("buildDate", date)):
            flags.append(f"-X {pkg}.{key}={val}")
    return " ".join(flags)


def build_component(comp: Component, log) -> None:
    out = bin_dir(comp)
    out.mkdir(parents=True, exist_ok=True)
    work = cache_dir() / "build" / f"{comp.name}-{comp.version}"
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-buildvcs=false", GOWORK="off")
    ldflags = comp.ldflags.format(version=comp.version)
    info = _module_info(comp.module, comp.version, work, env)
    if comp.build == "kubernetes":
        (work / "go.mod").write_text(_kubernetes_gomod(comp, info))
        ldflags = f"{ldflags} {_kubernetes_ldflags(comp, info)}".strip()
    else:
        (work / "go.mod").write_text(_wrapper_gomod(comp))
    # Seed go.sum with the pinned module's own: some dependencies (e.g. kueue's
    # sigs.k8s.io/scheduler-library pre-release) are not in the checksum database.
    upstream_sum = Path(info["Dir"]) / "go.sum"
    if upstream_sum.is_file():
        shutil.copyfile(upstream_sum, work / "go.sum")
    _run(["go", "mod", "tidy"], work, log, env)
    for name, pkg in comp.binaries.items():
        _run(["go", "build", "-trimpath", f"-ldflags={ldflags}", "-o", str(out / name), pkg], work, log, env)
    (out / ".complete").write_text(_stamp(comp))


def _failed(comp: Component, err: Exception, log_path: Path) -> BuildError:
    """The first line says what failed, where its log is and how to retry; the log's tail follows."""
    retry = f"mpiplat cluster build --only {comp.name}"
    if isinstance(err, FileNotFoundError) and err.filename == "go":
        return BuildError(f"building {comp.name} {comp.version} needs the Go toolchain (go >= 1.26) on PATH: "
                          f"install it, then retry with `{retry}`")
    why = f"exit {err.returncode}" if isinstance(err, subprocess.CalledProcessError) else str(err)
    cmd = " ".join(err.cmd[:3]) if isinstance(err, subprocess.CalledProcessError) else ""
    tail = "".join(log_path.read_text(errors="replace").splitlines(keepends=True)[-15:]) \
        if log_path.exists() else ""
    return BuildError(f"building {comp.name} {comp.version} failed ({cmd + ': ' if cmd else ''}{why}); "
                      f"see {log_path}, then retry with `{retry}`\nlast lines of the log:\n{tail}")


def build(only: list[str] | None = None, stream=None, previous: bool = False, kubernetes: str = "") -> list[str]:
    """Build every pinned component not yet in the cache (with `previous`, those with a previous pin, at that
    version: the upgrade's starting point; with `kubernetes`, Kubernetes at that version of its matrix).
    Returns the names built."""
    stream = stream or sys.stdout
    comps = load(previous=previous, kubernetes=kubernetes)
    unknown = sorted(set(only or []) - set(comps))
    if unknown:
        raise BuildError(f"unknown component(s) {', '.join(unknown)}; allowed: {', '.join(comps)}")
    wanted = [c for c in comps.values() if c.build != "none" and (not only or c.name in only)
              and (not previous or "previous" in c.extra)]
    todo = [c for c in wanted if not is_built(c)]
    for c in wanted:
        if c not in todo:
            print(f"  cached   {c.name} {c.version}", file=stream)
    logs = cache_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for i, comp in enumerate(todo, 1):
        log_path = logs / f"build-{comp.name}-{comp.version}.log"
        print(f"[{i}/{len(todo)}] building {comp.name} {comp.version} "
              f"({', '.join(comp.binaries)}); log: {log_path}", file=stream, flush=True)
        start = time.monotonic()
        try:
            with open(log_path, "w") as log, progress(f"building {comp.name}", stream=stream):
                build_component(comp, log)
        except (subprocess.CalledProcessError, OSError) as err:
            raise _failed(comp, err, log_path) from err
        print(f"    done in {time.monotonic() - start:.0f}s", file=stream, flush=True)
    print(f"binaries: {cache_dir() / 'bin'} ({len(todo)} built, {len(wanted) - len(todo)} cached)",
          file=stream, flush=True)
    return [c.name for c in todo]
