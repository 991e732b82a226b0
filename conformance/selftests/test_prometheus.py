"""The suite's Prometheus reader (no cluster): what it waits for before it reads an alerting rule."""

from __future__ import annotations

from mpiplat.conformance import prometheus
from mpiplat.conformance.prometheus import Prometheus


def _rules(health: str) -> dict:
    return {"groups": [{"name": "mpiplat", "interval": 0.2, "rules": [
        {"name": "MPIJobFailed", "type": "alerting", "health": health, "query": "x > 0"},
        {"name": "up", "type": "recording", "health": "unknown", "query": "up"}]}]}


def test_a_rule_loaded_a_moment_ago_is_read_once_its_group_has_evaluated_it(monkeypatch):
    """Right after an install, Prometheus lists the rule with health `unknown` until its first evaluation."""
    answers = iter([_rules("unknown"), _rules("unknown"), _rules("ok")])
    monkeypatch.setattr(Prometheus, "_get", lambda self, path, **params: next(answers))
    rule = Prometheus("http://prometheus").evaluated_alerting_rules(["MPIJobFailed", "NotLoaded"])["MPIJobFailed"]
    assert (rule["health"], rule["interval"]) == ("ok", 0.2)


def test_a_rule_never_evaluated_is_read_as_it_is_once_its_interval_has_passed(monkeypatch):
    monkeypatch.setattr(prometheus, "EVALUATION_SLACK_S", 0)
    calls = []
    monkeypatch.setattr(Prometheus, "_get", lambda self, path, **params: calls.append(path) or _rules("unknown"))
    rules = Prometheus("http://prometheus").evaluated_alerting_rules(["MPIJobFailed"])
    assert rules["MPIJobFailed"]["health"] == "unknown" and 1 < len(calls) < 5
