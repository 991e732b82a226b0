"""The requirement catalog (catalog.yml): its rows, the figures behind the settings' thresholds, and the
Kubernetes AI Conformance requirements its rows give evidence for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

_DATA = yaml.safe_load(Path(__file__).with_name("catalog.yml").read_text())
REQUIREMENTS: dict[str, dict] = _DATA["requirements"]
AI_CONFORMANCE: dict = _DATA["ai_conformance"]


@dataclass(frozen=True)
class Threshold:
    name: str
    default: float
    looser: str  # lower | higher | either: the direction in which a value asks less than the catalog
    rows: tuple[str, ...]

    def is_looser(self, value: float) -> bool:
        if self.looser == "either":  # a bound of a range the row proves at: any other value proves another range
            return value != self.default
        return value < self.default if self.looser == "lower" else value > self.default


THRESHOLDS: dict[str, Threshold] = {
    name: Threshold(name, t["default"], t["looser"], tuple(t["rows"])) for name, t in _DATA["thresholds"].items()}


def differing(thresholds: Mapping[str, float]) -> list[dict]:
    """The settings' thresholds that are not the catalog's figures, in either direction, each as
    {"name", "value", "catalog", "rows", "looser", "text"}; the report lists them all."""
    return [{"name": t.name, "value": thresholds[t.name], "catalog": t.default, "rows": list(t.rows),
             "looser": t.is_looser(thresholds[t.name]),
             "text": f"{t.name} {thresholds[t.name]:g}, catalog {t.default:g}"}
            for t in THRESHOLDS.values() if t.name in thresholds and thresholds[t.name] != t.default]


def loosened(thresholds: Mapping[str, float]) -> list[dict]:
    """The settings' thresholds that ask less than the catalog's figures (those of `differing` that are
    looser), each as {"name", "value", "catalog", "rows", "text"} with text like "scale_jobs 10, catalog 50"."""
    return [{k: v for k, v in d.items() if k != "looser"} for d in differing(thresholds) if d["looser"]]
