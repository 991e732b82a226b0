"""Fixtures for the chart tests (charts/tests has no __init__.py: a package named `tests` would clash with
playbooks/tests): the pinned helm binary, built on demand into the cache like the other binaries, and a renderer."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helmcli import CHARTS, Helm

from mpiplat.localcluster import build


@pytest.fixture(scope="session")
def helm() -> Path:
    """Path of the helm binary pinned in versions.yml, built once if missing."""
    path = build.binary("helm")
    if not path.is_file():
        try:
            build.build(only=["helm"], stream=sys.stderr)
        except build.BuildError as err:
            pytest.fail(f"helm is not built and building it failed:\n{err}")
    return path


@pytest.fixture(scope="session")
def mpi_tenant(helm: Path) -> Helm:
    return Helm(helm, CHARTS / "mpi-tenant")


@pytest.fixture
def render(mpi_tenant: Helm) -> Callable[..., list[dict[str, Any]]]:
    return mpi_tenant.template
