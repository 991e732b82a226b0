"""Conformance settings: load, validate against settings.schema.json, fill defaults (the thresholds the
catalog has figures for from catalog.yml, the rest from the schema)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
import yaml

from mpiplat.conformance.catalog import THRESHOLDS
from mpiplat.errors import MpiplatError

SCHEMA = json.loads((Path(__file__).with_name("settings.schema.json")).read_text())
LOCAL = Path(__file__).with_name("settings") / "local.yml"


class SettingsError(MpiplatError, ValueError):
    """Invalid settings; the message names the field, the value and what is allowed."""


@dataclass(frozen=True)
class Team:
    name: str
    namespace: str
    queue: str | None
    cluster_queue: str | None


@dataclass(frozen=True)
class Settings:
    teams: list[Team]
    namespace_prefix: str
    gpu_resource: str
    node_selector: dict[str, str]
    tolerations: list[dict]
    images: dict[str, str]
    capabilities: dict[str, bool]
    thresholds: dict[str, float]
    gpu_benchmark: dict = field(default_factory=dict)
    upgrade: dict = field(default_factory=dict)
    storage: dict = field(default_factory=dict)
    prometheus: dict = field(default_factory=dict)
    timeouts: dict = field(default_factory=dict)
    source: str = ""
    raw: dict = field(default_factory=dict)

    def test_timeout_s(self, requirement: str) -> float:
        """How long pytest-timeout lets one test of `requirement` run: timeouts.test_s, plus the waits
        that other settings lengthen (SCH-05's waits for eviction and readmission, the gpu sweep's
        benchmark jobs), scaled for scale rows asked to do more than the catalog's figure, and by
        timeouts.wait_scale when above 1."""
        base, t = float(self.timeouts["test_s"]), self.thresholds
        if requirement == "SCH-05":
            base += 2 * t["pods_ready_timeout_s"]
        elif requirement in ("PERF-01", "PERF-02"):  # one job per node count of the sweep
            base += len(self.gpu_benchmark["nodes"]) * self.gpu_benchmark["job_timeout_s"]
        elif requirement == "PERF-03":  # 1 and 4 workers
            base += 2 * self.gpu_benchmark["job_timeout_s"]
        elif requirement.startswith("UPG-"):  # a job of --phase before may run this long yet
            base += self.upgrade["job_seconds"]
        scale = {"SCALE-01": "scale_jobs", "SCALE-02": "scale_workers"}.get(requirement)
        if scale:
            base *= max(1.0, t[scale] / THRESHOLDS[scale].default)
        return base * max(1.0, self.timeouts["wait_scale"])


def _defaults(schema: dict) -> dict:
    return {k: v["default"] for k, v in schema.get("properties", {}).items() if "default" in v}


def parse(data: dict, source: str = "<settings>") -> Settings:
    validator = jsonschema.Draft7Validator(SCHEMA)
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        where = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        raise SettingsError(f"{source}: settings field {where}: {err.message}")
    props = SCHEMA["properties"]
    teams = [Team(name=t["name"], namespace=t.get("namespace", t["name"]),
                  queue=t.get("queue", f"{t['name']}-queue"), cluster_queue=t.get("cluster_queue", t["name"]))
             for t in data["teams"]]
    names = [t.name for t in teams]
    if len(set(names)) != len(names):
        raise SettingsError(f"{source}: settings field teams: duplicate team names {names}")
    catalog = {name: t.default for name, t in THRESHOLDS.items()}
    thresholds = {**catalog, **_defaults(props["thresholds"]), **data.get("thresholds", {})}
    if thresholds["min_workers"] > thresholds["max_workers"]:
        raise SettingsError(f"{source}: settings field thresholds.min_workers ({thresholds['min_workers']}) is above "
                            f"thresholds.max_workers ({thresholds['max_workers']})")
    gpu_benchmark = {**_defaults(props["gpu_benchmark"]), **data.get("gpu_benchmark", {})}
    if 1 not in gpu_benchmark["nodes"]:
        raise SettingsError(f"{source}: settings field gpu_benchmark.nodes: {gpu_benchmark['nodes']} lacks 1, "
                            "the single-node baseline that speedup is measured against")
    from mpiplat.jobs import DEFAULT_IMAGES

    return Settings(
        teams=teams,
        namespace_prefix=data.get("namespace_prefix", props["namespace_prefix"]["default"]),
        gpu_resource=data.get("gpu_resource", props["gpu_resource"]["default"]),
        node_selector=dict(data.get("node_selector", {})),
        tolerations=list(data.get("tolerations", [])),
        images={**DEFAULT_IMAGES, **data.get("images", {})},
        capabilities=dict(data.get("capabilities", {})),
        thresholds=thresholds,
        gpu_benchmark=gpu_benchmark,
        upgrade={**_defaults(props["upgrade"]), **data.get("upgrade", {})},
        storage={**_defaults(props["storage"]), **data.get("storage", {})},
        prometheus=dict(data.get("prometheus", {})),
        timeouts={**_defaults(props["timeouts"]), **data.get("timeouts", {})},
        source=source,
        raw=data,
    )


def load(path: str | Path | None = None) -> Settings:
    path = Path(path) if path else LOCAL
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as err:
        raise SettingsError(f"cannot read settings file {path}: {err.strerror}") from err
    except yaml.YAMLError as err:
        raise SettingsError(f"{path}: not valid YAML: {err}") from err
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: settings must be a mapping, got {type(data).__name__}")
    return parse(data, str(path))
