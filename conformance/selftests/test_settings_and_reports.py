"""The suite's own machinery: settings validation, requirement catalog, reports (no cluster)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from mpiplat.conformance import report
from mpiplat.conformance.run import Figure
from mpiplat.conformance.settings import SettingsError, load, parse

SUITE = Path(__file__).resolve().parents[1] / "suite"


def test_local_settings_load_with_defaults():
    s = load()
    assert [t.name for t in s.teams] == ["team-a", "team-b"]
    assert s.teams[0].queue == "team-a-queue" and s.teams[0].cluster_queue == "team-a"
    assert s.thresholds["submit_to_created_p95_s"] == 5 and s.thresholds["pods_ready_timeout_s"] == 60
    assert set(s.images) == {"OpenMPI", "Intel", "MPICH"}
    assert s.gpu_benchmark["nodes"] == [1, 2, 4, 8] and s.gpu_benchmark["gpus_per_node"] == 8
    # JOB-10's volume on the local cluster: its local-path class, ReadWriteOnce (every worker on its one real node).
    assert s.storage == {"storage_class": "local-path", "access_mode": "ReadWriteOnce", "size": "1Gi"}
    assert parse({"teams": [{"name": "a"}]}).storage == {"access_mode": "ReadWriteMany", "size": "1Gi"}  # defaults


@pytest.mark.parametrize("data, field", [
    ({}, r"\(top level\): 'teams' is a required property"),
    ({"teams": []}, r"field teams: \[\] should be non-empty"),
    ({"teams": [{"name": "Team.A"}]}, r"field teams\.0\.name: 'Team\.A' does not match"),
    ({"teams": [{"name": "a"}], "thresholds": {"scale_jobs": "many"}},
     r"thresholds\.scale_jobs: 'many' is not of type"),
    ({"teams": [{"name": "a"}], "thresholds": {"submit_to_created_p95_s": 0}}, r"submit_to_created_p95_s: 0 is less"),
    ({"teams": [{"name": "a"}], "colour": "red"}, r"Additional properties are not allowed \('colour'"),
    ({"teams": [{"name": "a"}, {"name": "a"}]}, r"duplicate team names"),
    ({"teams": [{"name": "a"}], "thresholds": {"min_workers": 9, "max_workers": 3}}, r"min_workers \(9\) is above"),
    ({"teams": [{"name": "a"}], "gpu_benchmark": {"nodes": [2, 4]}}, r"gpu_benchmark\.nodes: \[2, 4\] lacks 1"),
    ({"teams": [{"name": "a"}], "gpu_benchmark": {"nodes": [1, 1]}}, r"gpu_benchmark\.nodes: .* non-unique"),
    ({"teams": [{"name": "a"}], "storage": {"access_mode": "ReadOnlyMany"}}, r"storage\.access_mode: 'ReadOnlyMany'"),
    ({"teams": [{"name": "a"}], "images": {"torch": 3}}, r"images\.torch: 3 is not of type 'string'"),
])
def test_bad_settings_fail_naming_the_field(data, field):
    with pytest.raises(SettingsError, match=field):
        parse(data, "x.yml")


def test_unreadable_settings_file(tmp_path):
    with pytest.raises(SettingsError, match="cannot read settings file"):
        load(tmp_path / "missing.yml")


def test_every_suite_test_carries_a_catalog_id():
    ids = set()
    for path in SUITE.glob("test_*.py"):
        ids |= set(re.findall(r'requirement\("([A-Z]+-\d+)"', path.read_text()))
    assert ids <= set(report.CATALOG)
    sim = {rid for rid, r in report.CATALOG.items() if "sim" in r["where"]}
    assert sim - ids == set(), f"sim rows without a test: {sorted(sim - ids)}"


def test_reports_aggregate_per_requirement(tmp_path):
    outcomes = [
        {"requirement": "JOB-01", "name": "a", "status": "passed", "duration_s": 1.0, "message": ""},
        {"requirement": "JOB-01", "name": "b", "status": "failed", "duration_s": 2.0, "message": "boom",
         "diagnosis": "worker 1 OOMKilled"},
        {"requirement": "PERF-02", "name": "c", "status": "skipped", "duration_s": 0, "message": "needs gpus"},
    ]
    figures = [Figure("JOB-06", "p95", 1.5, "s", 5.0), Figure("JOB-06", "slow", 9, "s", 5.0)]
    plot = {"requirement": "PERF-02", "title": "scaling efficiency", "svg": "<svg xmlns='http://www.w3.org/2000/svg'/>"}
    data = report.write(tmp_path, outcomes, figures, {"run_id": "r1", "profile": "simulated", "duration_s": 3}, [plot])
    assert data["summary"] == {"passed": 0, "failed": 1, "skipped": 1}
    junit = ET.parse(tmp_path / "junit.xml").getroot()
    cases = {c.get("name"): c for c in junit.iter("testcase")}
    assert set(cases) == {"JOB-01", "PERF-02"}
    assert cases["JOB-01"].find("failure") is not None and cases["PERF-02"].find("skipped") is not None
    results = json.loads((tmp_path / "results.json").read_text())
    assert [f["meets_target"] for f in results["figures"]] == [True, False]
    md = (tmp_path / "report.md").read_text()
    assert "[diagnosis](#diagnosis-job-01)" in md and "worker 1 OOMKilled" in md
    html = (tmp_path / "report.html").read_text()
    assert 'href="#diag-JOB-01"' in html and "<script" not in html
    assert "PERF-02: scaling efficiency</h2><svg" in html and "(plot-1.svg)" in md
    assert (tmp_path / "plot-1.svg").read_text() == plot["svg"]
    assert "| JOB-01 |" in (tmp_path / "checklist.md").read_text()
