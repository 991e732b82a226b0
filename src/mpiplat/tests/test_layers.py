"""The package's shape: one import name, and imports that point one way.

    CLI and tools (mpiplat.cli, .jobcli, .bundle, .installbench, .submitbench, .dashboard)
      -> the suite (mpiplat.conformance) and the local cluster (mpiplat.localcluster)
        -> the core library (every other mpiplat.* module: kube access, job builder, versions, ...)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mpiplat
import mpiplat.conformance
import mpiplat.localcluster

TOP = {"mpiplat.cli", "mpiplat.jobcli", "mpiplat.bundle", "mpiplat.installbench", "mpiplat.submitbench"}
MIDDLE = ("mpiplat.conformance", "mpiplat.localcluster")


def _layer(module: str) -> str:
    if module in TOP or module.startswith("mpiplat.dashboard"):
        return "top"
    for name in MIDDLE:
        if module == name or module.startswith(name + "."):
            return name
    return "core"


# What each layer may import from the package.
ALLOWED = {
    "top": {"top", "mpiplat.conformance", "mpiplat.localcluster", "core"},
    "mpiplat.conformance": {"mpiplat.conformance", "core"},
    "mpiplat.localcluster": {"mpiplat.localcluster", "core"},
    "core": {"core"},
}


def _modules() -> dict[str, Path]:
    """Every shipped module of the package (the suite's test files too), by dotted name."""
    out = {}
    for pkg in (mpiplat, mpiplat.conformance, mpiplat.localcluster):
        root = Path(pkg.__file__).parent
        for path in root.rglob("*.py"):
            rel = path.relative_to(root).with_suffix("")
            if "tests" in rel.parts or "selftests" in rel.parts:
                continue
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([pkg.__name__, *parts])] = path
    return out


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return found


def _target(name: str, modules: dict[str, Path]) -> str | None:
    """The package module an import refers to (`from mpiplat import jobs` -> mpiplat.jobs)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def test_every_module_lives_under_the_one_import_name():
    modules = _modules()
    assert {"mpiplat.cli", "mpiplat.kube", "mpiplat.jobs", "mpiplat.localcluster.build",
            "mpiplat.conformance.report", "mpiplat.conformance.workloads.results"} <= set(modules)
    for path in modules.values():
        for _, name in _imports(path):
            assert name.split(".")[0] not in ("localcluster", "conformance"), \
                f"{path} imports {name}: use mpiplat.{name}"


def test_imports_point_one_way():
    modules = _modules()
    wrong = []
    for module, path in sorted(modules.items()):
        for line, name in _imports(path):
            target = _target(name, modules) if name.startswith("mpiplat") else None
            if target and _layer(target) not in ALLOWED[_layer(module)]:
                wrong.append(f"{path}:{line}: {module} ({_layer(module)}) imports {target} ({_layer(target)})")
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


@pytest.mark.parametrize("layer", ["core", "mpiplat.conformance"])
def test_the_layer_check_catches_a_wrong_way_import(tmp_path, layer):
    """The check above can fail: the core or the suite importing the local cluster or the CLI is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("from mpiplat.localcluster import cluster\nimport mpiplat.cli\n")
    modules = _modules()
    targets = [_target(n, modules) for _, n in _imports(bad)]
    assert [_layer(t) for t in targets] == ["mpiplat.localcluster", "top"]
    assert all(_layer(t) not in ALLOWED[layer] for t in targets)
