"""The programs ship alone into upstream MPI images: only mpi4py, numpy and the stdlib."""

from __future__ import annotations

import ast
import sys

import pytest

from mpiplat.conformance.workloads import PROGRAMS, program_path

ALLOWED_THIRD_PARTY = {"mpi4py", "numpy"}
# torchbench runs in GPU images that bring torch; mpi4py is optional there (rendezvous fallback).
EXTRA = {"torchbench": {"torch"}}


def _imported_top_level(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                names.add("." * node.level + (node.module or ""))
            elif node.module:
                names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("program", PROGRAMS)
def test_program_imports_only_mpi4py_numpy_and_stdlib(program: str) -> None:
    source = program_path(program).read_text()
    imported = _imported_top_level(source)
    allowed = ALLOWED_THIRD_PARTY | EXTRA.get(program, set())
    foreign = sorted(n for n in imported if n not in allowed and n not in sys.stdlib_module_names and n != "__future__")
    assert not foreign, f"{program}.py imports {foreign}; allowed: {sorted(allowed)} and the standard library"
    assert ({"torch"} if program in EXTRA else {"mpi4py", "numpy"}) <= imported
    assert 'if __name__ == "__main__":' in source
    assert "MPIPLAT_RESULT" in source
