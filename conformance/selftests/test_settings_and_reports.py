"""The suite's own machinery: settings validation, requirement catalog, reports (no cluster)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from mpiplat.conformance import catalog, report
from mpiplat.conformance.run import Figure
from mpiplat.conformance.settings import SettingsError, load, parse

SUITE = Path(__file__).resolve().parents[1] / "suite"


def test_local_settings_load_with_defaults():
    s = load()
    assert [t.name for t in s.teams] == ["team-a", "team-b", "team-c"]
    assert s.teams[0].queue == "team-a-queue" and s.teams[0].cluster_queue == "team-a"
    assert s.thresholds["submit_to_created_p95_s"] == 5 and s.thresholds["pods_ready_timeout_s"] == 90
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
    assert ids <= set(catalog.REQUIREMENTS)
    sim = {rid for rid, r in catalog.REQUIREMENTS.items() if "sim" in r["where"]}
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
    assert data["summary"] == {"passed": 0, "partial": 0, "failed": 1, "skipped": 1, "not run": 0}
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


def _outcome(rid: str, name: str, status: str, evidence: str | None, message: str = "", partial=()) -> dict:
    return {"requirement": rid, "name": name, "status": status, "duration_s": 1.0, "message": message,
            "diagnosis": "", "evidence": evidence, "placed": [], "evidence_note": "", "partial": list(partial)}


CLUSTER = {"server": "https://10.0.0.1:6443", "version": "v1.34.4", "context": "customer",
           "node_summary": {"real": 2, "simulated": 0, "gpus_real": 16, "gpus_simulated": 0},
           "controllers": [{"component": "kueue", "pinned": "v0.14.2", "kind": "Deployment",
                            "namespace": "kueue-system", "name": "kueue-controller-manager",
                            "images": ["registry.k8s.io/kueue/kueue:v0.14.2"], "ready": "1/1"}],
           "controllers_not_found": [], "crds": [], "nodes": [], "errors": []}


def test_every_report_shows_status_and_evidence_level(tmp_path):
    outcomes = [
        _outcome("ISO-03", "test_policies", "passed", "objects"),
        _outcome("ISO-03", "test_enforced", "skipped", None, "needs real pods"),
        _outcome("JOB-01", "test_openmpi", "passed", "real"),
        _outcome("SCH-03", "test_borrowing", "partial", "simulated", "checks borrowing only",
                 ["checks borrowing only"]),
        _outcome("SCALE-01", "test_many", "passed", "simulated"),
        _outcome("PERF-01", "test_busbw", "skipped", None, "needs gpus"),
        _outcome("JOB-07", "test_gang", "passed", "simulated"),
    ]
    meta = {"run_id": "r2", "profile": "cluster", "duration_s": 9, "cluster": {k: CLUSTER[k] for k in
                                                                               ("server", "version", "context")}}
    data = report.write(tmp_path, outcomes, [], meta, loosened=catalog.loosened({"scale_jobs": 10}), cluster=CLUSTER)
    verdict = {rid: (r["status"], r["evidence"]) for rid, r in data["requirements"].items()}
    assert verdict == {"ISO-03": ("partial", "objects"), "JOB-01": ("passed", "real"),
                       "SCH-03": ("partial", "simulated"), "SCALE-01": ("partial", "simulated"),
                       "PERF-01": ("skipped", None), "JOB-07": ("passed", "simulated")}
    assert data["summary"] == {"passed": 2, "partial": 3, "failed": 0, "skipped": 1, "not run": 0}

    md = (tmp_path / "report.md").read_text()
    assert "| ISO-03 | NetworkPolicies" in md and "| PARTIAL | objects | test_enforced skipped: needs real pods |" in md
    assert "| PASSED | real |" in md and "| SKIPPED | - | needs gpus |" in md
    assert "- scale_jobs 10, catalog 200 (SCALE-01)" in md
    assert "| objects | 0 | 1 | 0 | 0 | 0 |" in md  # the summary by evidence level

    page = (tmp_path / "report.html").read_text()
    # It leads with the cluster's identity, then the summary by evidence level, then the rows.
    order = [page.index(s) for s in ("https://10.0.0.1:6443", "2 real (16 GPUs)", "registry.k8s.io/kueue/kueue:v0.14.2",
                                     "By evidence level", "scale_jobs 10, catalog 200", "<h2>Requirements</h2>")]
    assert order == sorted(order)
    assert "<tr id='req-ISO-03'><td>ISO-03</td>" in page and ">PARTIAL</span></td><td>objects</td>" in page
    assert "<script" not in page

    junit = ET.parse(tmp_path / "junit.xml").getroot()
    props = {c.get("name"): [(p.get("name"), p.get("value")) for p in c.iter("property")]
             for c in junit.iter("testcase")}
    assert ("status", "partial") in props["ISO-03"] and ("evidence", "objects") in props["ISO-03"]
    assert ("test:test_enforced", "skipped none") in props["ISO-03"]
    assert ("loosened", "scale_jobs 10, catalog 200") in props["SCALE-01"]
    assert ("evidence", "real") in props["JOB-01"] and ("evidence", "none") in props["PERF-01"]

    checklist = (tmp_path / "checklist.md").read_text()
    assert "| ISO-03 | NetworkPolicies: cross-namespace traffic to job pods denied, intra-job allowed | " \
           "Partially implemented | objects |" in checklist
    assert "| PERF-01 |" in checklist and "| Not shown | - |" in checklist
    # Implemented only where real pods showed it; a row passed with less says what showed it.
    assert re.search(r"\| JOB-01 \| [^|]+ \| Implemented \| real \|", checklist)
    marks = dict(re.findall(r"^\| ([A-Z]+-\d+) \| [^|]+ \| ([^|]+?) \| (?:simulated|objects) \|", checklist, re.M))
    assert marks["JOB-07"] == "Passed, shown simulated only" and "Implemented" not in marks.values(), marks

    results = json.loads((tmp_path / "results.json").read_text())
    assert results["requirements"]["SCALE-01"]["loosened"] == ["scale_jobs 10, catalog 200"]
    assert results["meta"]["nodes"] == CLUSTER["node_summary"]
    assert json.loads((tmp_path / "cluster.json").read_text())["server"] == "https://10.0.0.1:6443"

    ai = yaml.safe_load((tmp_path / "ai-conformance.yaml").read_text())
    assert ai["metadata"]["kubernetesVersion"] == "v1.34"
    gang = ai["spec"]["schedulingOrchestration"][0]
    assert [i["id"] for i in ai["spec"]["schedulingOrchestration"]] == [
        "gang_scheduling", "cluster_autoscaling", "pod_autoscaling"]
    assert gang["id"] == "gang_scheduling" and gang["level"] == "MUST" and gang["status"] == "N/A"
    assert [r["status"] for r in gang["mpiplatRows"]] == ["not run"] * 3


def test_the_report_lists_every_catalog_row_and_the_waits_and_thresholds_it_ran_with(tmp_path):
    outcomes = [_outcome("JOB-01", "test_openmpi", "passed", "real")]
    not_run = {rid: "not asked for (--only)" for rid in catalog.REQUIREMENTS if rid != "JOB-01"}
    meta = {"run_id": "r3", "profile": "cluster", "duration_s": 9, "wait_scale": 0.25,
            "differing": catalog.differing({"scale_jobs": 300, "max_workers": 512, "admitted_to_running_s": 30})}
    data = report.write(tmp_path, outcomes, [], meta, not_run=not_run)
    assert list(data["requirements"]) == sorted(catalog.REQUIREMENTS)
    assert data["summary"] == {"passed": 1, "partial": 0, "failed": 0, "skipped": 0, "not run": len(not_run)}
    assert data["requirements"]["PERF-01"]["message"] == "not run: not asked for (--only)"
    md = (tmp_path / "report.md").read_text()
    assert "| PERF-01 | NCCL" in md and "| NOT RUN | - | not run: not asked for (--only) |" in md
    assert "- waits: x0.25 (timeouts.wait_scale)" in md
    assert "- thresholds not the catalog's: scale_jobs 300, catalog 200, max_workers 512, catalog 100" in md
    junit = ET.parse(tmp_path / "junit.xml").getroot()
    assert junit.find("testsuite").get("tests") == str(len(catalog.REQUIREMENTS))
    assert ">NOT RUN</span>" in (tmp_path / "report.html").read_text()
    assert "| PERF-01 |" in (tmp_path / "checklist.md").read_text()
