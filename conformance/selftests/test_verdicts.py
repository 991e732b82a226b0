"""Honest verdicts from synthetic outcomes (no cluster): a requirement's status is the worst of its tests,
each verdict says how it was shown (real, simulated, objects), thresholds looser than the catalog's are
flagged, and the AI-conformance evidence follows the rows' verdicts."""

from __future__ import annotations

import json
import time

import pytest

from mpiplat.conformance import catalog, placement, report, verdicts
from mpiplat.conformance.settings import SCHEMA, SettingsError, parse
from mpiplat.conformance.verdicts import Evidence
from mpiplat.kube import MPIJOB, Kube


def _test(name: str, status: str, evidence: str | None = None, message: str = "", partial=(),
          needed: str | None = None) -> dict:
    return {"requirement": "X-01", "name": name, "status": status, "duration_s": 1.0, "message": message,
            "diagnosis": "", "evidence": evidence, "needed": needed, "placed": [], "evidence_note": "",
            "partial": list(partial)}


def test_a_row_shows_its_weakest_test_that_needs_pods():
    real, simulated = _test("a", "passed", "real", needed="real"), _test("b", "passed", "simulated", needed="simulated")
    refusal = _test("c", "passed", "objects", needed="objects")  # declared: no pod should run
    assert verdicts.requirement([real, simulated, refusal])["evidence"] == "simulated"
    assert verdicts.requirement([real, refusal])["evidence"] == "real"
    assert verdicts.requirement([refusal, _test("d", "passed", "objects")])["evidence"] == "objects"
    assert verdicts.requirement([_test("e", "passed", "real", partial=["shown by Prometheus"])])["evidence"] == "real"


def test_a_passed_row_below_real_says_why_in_its_message_and_stays_passed():
    real = _test("a", "passed", "real", needed="real")
    core = _test("b", "passed", "simulated", needed="simulated") | {"evidence_note": "the runtime ran on KWOK only"}
    verdict = verdicts.requirement([real, core])
    assert (verdict["status"], verdict["evidence"]) == ("passed", "simulated")
    assert verdict["message"] == "shown simulated: b: the runtime ran on KWOK only"
    assert verdicts.requirement([real])["message"] == ""  # a real row needs no words


# ---------------------------------------------------------------- one test's evidence

def test_a_test_shows_where_its_pods_ran_not_where_they_were_placed():
    e = Evidence()
    assert e.level == "objects"  # no pod placed
    e.placed_pods(placement.level(real=True, kwok_nodes=True))
    assert e.level == "objects"  # placed, none ran: a refused job, say
    assert e.outcome("passed")["evidence_note"] == "its pods were placed to run real, but none ran"
    e.ran_on({"simulated"})
    assert e.level == "simulated"
    short = e.outcome("passed")
    assert short["evidence_note"] == "its pods were placed to run real, but ran simulated only"
    assert (short["status"], short["needed"], short["partial"]) == ("partial", "real", [short["evidence_note"]])
    assert e.outcome("failed")["status"] == "failed"
    e.ran_on({"real"})
    assert e.level == "real" and e.outcome("passed")["evidence_note"] == ""
    assert e.outcome("passed")["status"] == "passed"
    assert (e.outcome("passed")["placed"], e.outcome("passed")["ran"]) == (["real"], ["simulated", "real"])
    with pytest.raises(ValueError, match="evidence level 'kwok'"):
        e.ran_on({"kwok"})


def test_the_scheduler_event_names_the_node_of_a_pod_gone_since():
    found = placement.SCHEDULED.match("Successfully assigned mpiplat-1-0/big-worker-0 to kwok-node-3")
    assert found and (found["namespace"], found["pod"], found["node"]) == ("mpiplat-1-0", "big-worker-0",
                                                                           "kwok-node-3")
    assert not placement.SCHEDULED.match("0/3 nodes are available: 3 Insufficient cpu.")


def test_without_kwok_nodes_every_placed_pod_is_real():
    assert placement.level(real=False, kwok_nodes=False) == "real"
    assert placement.level(real=True, kwok_nodes=False) == "real"
    assert placement.level(real=False, kwok_nodes=True) == "simulated"


def test_a_test_may_lower_its_level_but_never_raise_it():
    e = Evidence()
    e.placed_pods("real")
    e.ran_on({"real"})
    e.at_most("objects", "read the policies only")
    assert e.level == "objects"
    assert e.outcome("passed")["evidence_note"] == "read the policies only"
    e.at_most("real", "a later, higher claim")  # does not undo the lower one
    assert e.level == "objects"
    low = Evidence()
    low.at_most("real", "claims more than it placed")
    assert low.level == "objects"
    with pytest.raises(ValueError, match="evidence level 'pretend'"):
        low.placed_pods("pretend")


def test_what_a_test_exercised_itself_counts_beyond_a_read_only_cap():
    """INS-05 creates nothing (read-only: at most objects), yet a live Prometheus evaluated the rules."""
    e = Evidence()
    e.at_most("objects", "read-only: it creates nothing")
    assert e.level == "objects"
    e.showed("real")
    assert e.level == "real"
    assert e.outcome("passed")["evidence_note"] == ""
    with pytest.raises(ValueError, match="evidence level 'live'"):
        e.showed("live")


def test_a_partial_test_reports_partial_when_it_passes_and_failed_when_it_fails():
    e = Evidence()
    e.partial("checks borrowing only")
    assert e.outcome("passed")["status"] == "partial"
    assert e.outcome("passed")["partial"] == ["checks borrowing only"]
    assert e.outcome("failed")["status"] == "failed"
    skipped = e.outcome("skipped")
    assert skipped["status"] == "skipped" and skipped["evidence"] is None


# ---------------------------------------------------------------- a requirement's verdict

@pytest.mark.parametrize("tests, status, evidence", [
    ([("a", "passed", "real"), ("b", "passed", "simulated")], "passed", "real"),
    ([("a", "passed", "simulated"), ("b", "skipped", None)], "partial", "simulated"),
    ([("a", "partial", "real"), ("b", "passed", "real")], "partial", "real"),
    ([("a", "passed", "real"), ("b", "failed", "simulated")], "failed", "real"),
    ([("a", "failed", "simulated"), ("b", "skipped", None)], "failed", "simulated"),
    ([("a", "skipped", None), ("b", "skipped", None)], "skipped", None),
    ([("a", "failed", "objects"), ("b", "partial", "simulated"), ("c", "skipped", None)], "failed", "simulated"),
])
def test_a_requirement_is_the_worst_of_its_tests(tests, status, evidence):
    verdict = verdicts.requirement([_test(n, s, e, message=f"why {n}") for n, s, e in tests])
    assert (verdict["status"], verdict["evidence"]) == (status, evidence)


def test_a_skipped_test_beside_passed_ones_says_why_in_the_partial_verdict():
    verdict = verdicts.requirement([_test("enforced", "skipped", message="needs real pods"),
                                    _test("objects", "passed", "objects")])
    assert verdict["status"] == "partial"
    assert verdict["message"] == "enforced skipped: needs real pods"


def test_a_simulated_run_reports_iso03_as_objects_never_real():
    """The objects check places its job on KWOK nodes but judges the policies only; the enforcement
    probe needs real pods and skips: ISO-03 is partial, shown by objects."""
    objects_check = Evidence()
    objects_check.placed_pods(placement.level(real=False, kwok_nodes=True))
    objects_check.ran_on({"simulated"})
    objects_check.at_most("objects", "the policies exist and select the job's pods; no traffic was tried")
    outcomes = [{"requirement": "ISO-03", "name": "policies", "duration_s": 1, "message": "", "diagnosis": "",
                 **objects_check.outcome("passed")},
                {"requirement": "ISO-03", "name": "enforced", "duration_s": 0, "message": "needs real pods",
                 "diagnosis": "", **Evidence().outcome("skipped")}]
    iso03 = verdicts.aggregate(outcomes)["ISO-03"]
    assert (iso03["status"], iso03["evidence"]) == ("partial", "objects")
    # On a cluster whose real pods proved enforcement, the row is shown for real.
    probe = Evidence()
    probe.placed_pods(placement.level(real=True, kwok_nodes=True))
    probe.ran_on({"real"})
    outcomes[1] = {**outcomes[1], "message": "", **probe.outcome("passed")}
    iso03 = verdicts.aggregate(outcomes)["ISO-03"]
    assert (iso03["status"], iso03["evidence"]) == ("passed", "real")


def test_the_summary_counts_requirements_per_status_and_evidence_level():
    reqs = verdicts.aggregate([
        {**_test("a", "passed", "real"), "requirement": "JOB-01"},
        {**_test("b", "passed", "simulated"), "requirement": "JOB-02"},
        {**_test("c", "skipped", None, "needs gpus"), "requirement": "PERF-01"},
        {**_test("d", "failed", "simulated"), "requirement": "FAIL-01"},
    ])
    assert verdicts.summary(reqs) == {"passed": 2, "partial": 0, "failed": 1, "skipped": 1, "not run": 0}
    table = verdicts.by_evidence(reqs)
    assert list(table) == ["real", "simulated", "objects", "none"]
    assert table["real"]["passed"] == 1 and table["simulated"] == {"passed": 1, "partial": 0, "failed": 1,
                                                                     "skipped": 0, "not run": 0}
    assert table["none"]["skipped"] == 1


# ---------------------------------------------------------------- thresholds looser than the catalog's

def test_every_catalog_threshold_is_a_setting_whose_default_is_the_catalogs_figure():
    props = SCHEMA["properties"]["thresholds"]["properties"]
    defaults = parse({"teams": [{"name": "a"}]}).thresholds
    for name, t in catalog.THRESHOLDS.items():
        assert name in props and "default" not in props[name], f"{name}: its default belongs to the catalog"
        assert t.looser in ("lower", "higher", "either"), name
        assert t.rows and set(t.rows) <= set(catalog.REQUIREMENTS), name
        assert defaults[name] == t.default, name
    assert catalog.THRESHOLDS["scale_jobs"].default == 200 and catalog.THRESHOLDS["scale_workers"].default == 512
    assert catalog.THRESHOLDS["failure_to_failed_s"].default == 30
    assert defaults["pods_ready_timeout_s"] == 330  # not a catalog figure: the schema's default


@pytest.mark.parametrize("name, value, flagged", [
    ("scale_jobs", 10, True), ("scale_jobs", 300, False), ("scale_jobs", 200, False),
    ("failure_to_failed_s", 60, True), ("failure_to_failed_s", 10, False),
    ("min_workers", 4, True), ("min_workers", 1, True), ("max_workers", 64, True), ("max_workers", 128, True),
    ("max_workers", 100, False),
    ("submit_to_admitted_p95_s", 20, True), ("scale_all_running_s", 30, False),
    ("efficiency_8_nodes", 0.6, True), ("perf03_time_ratio", 0.5, True), ("perf03_time_ratio", 0.2, False),
])
def test_a_threshold_is_flagged_only_when_it_asks_less_than_the_catalog_or_moves_a_range(name, value, flagged):
    found = catalog.loosened({**parse({"teams": [{"name": "a"}]}).thresholds, name: value})
    assert [lo["name"] for lo in found] == ([name] if flagged else [])


def test_a_loosened_threshold_makes_its_rows_at_best_partial_and_says_so():
    found = catalog.loosened({"scale_jobs": 10, "admitted_to_running_s": 30})
    assert found == [{"name": "scale_jobs", "value": 10, "catalog": 200, "rows": ["SCALE-01"],
                      "text": "scale_jobs 10, catalog 200"}]
    reqs = verdicts.aggregate([{**_test("many", "passed", "simulated"), "requirement": "SCALE-01"},
                               {**_test("big", "passed", "simulated"), "requirement": "SCALE-02"},
                               {**_test("kill", "failed", "real"), "requirement": "FAIL-01"}],
                              found + catalog.loosened({"failure_to_failed_s": 45}))
    assert reqs["SCALE-01"]["status"] == "partial"
    assert reqs["SCALE-01"]["message"] == "threshold looser than the catalog's: scale_jobs 10, catalog 200"
    assert reqs["SCALE-02"]["status"] == "passed"  # admitted_to_running_s is the catalog's
    assert reqs["FAIL-01"]["status"] == "failed"
    assert reqs["FAIL-01"]["loosened"] == ["failure_to_failed_s 45, catalog 30"]


# ---------------------------------------------------------------- per-test timeouts from the settings

def test_per_test_timeouts_come_from_the_settings():
    s = parse({"teams": [{"name": "a"}]})
    assert s.test_timeout_s("JOB-01") == 1800  # timeouts.test_s's default, not pytest's 600
    assert s.test_timeout_s("SCH-05") == 1800 + 2 * 330
    assert s.test_timeout_s("PERF-01") == 1800 + 4 * 1800  # 4 node counts x job_timeout_s
    assert s.test_timeout_s("PERF-03") == 1800 + 2 * 1800
    assert s.test_timeout_s("SCALE-01") == 1800
    slow = parse({"teams": [{"name": "a"}], "timeouts": {"test_s": 3600},
                  "thresholds": {"pods_ready_timeout_s": 900, "scale_jobs": 800, "scale_workers": 50},
                  "gpu_benchmark": {"nodes": [1, 2], "job_timeout_s": 600}})
    assert slow.test_timeout_s("JOB-10") == 3600
    assert slow.test_timeout_s("SCH-05") == 3600 + 1800
    assert slow.test_timeout_s("PERF-02") == 3600 + 2 * 600
    assert slow.test_timeout_s("SCALE-01") == 3600 * 4  # 4 times the catalog's 200 jobs
    assert slow.test_timeout_s("SCALE-02") == 3600  # fewer workers than the catalog: no less time
    patient = parse({"teams": [{"name": "a"}], "timeouts": {"wait_scale": 2}})
    assert patient.test_timeout_s("JOB-01") == 2 * 1800  # waits twice as long: so may the test
    assert patient.test_timeout_s("SCH-05") == 2 * (1800 + 2 * 330)
    hasty = parse({"teams": [{"name": "a"}], "timeouts": {"wait_scale": 0.25}})
    assert hasty.test_timeout_s("JOB-01") == 1800  # shorter waits never shorten the test's bound


def test_every_wait_through_the_suites_kube_is_scaled_by_wait_scale():
    kube = object.__new__(Kube)  # no cluster: only the waits are under test
    kube.wait_scale = 0.5
    assert kube.waited(60) == 30
    assert 29 < kube.deadline(60) - time.monotonic() <= 30
    seen = []
    kube.watch_object = lambda kind, name, namespace, timeout: seen.append(timeout) or iter([{"ok": True}])
    assert kube.wait_for(MPIJOB, "j", "ns", lambda obj: obj["ok"], timeout=60) == {"ok": True}
    assert seen == [30]
    with pytest.raises(SettingsError, match="timeouts.wait_scale"):
        parse({"teams": [{"name": "a"}], "timeouts": {"wait_scale": 0}})


# ---------------------------------------------------------------- AI conformance

def test_the_catalog_maps_every_ai_conformance_requirement_of_requirements_md():
    reqs = catalog.AI_CONFORMANCE["requirements"]
    assert {k: v["level"] for k, v in reqs.items()} == {
        "gang_scheduling": "MUST", "secure_accelerator_access": "MUST", "accelerator_metrics": "MUST",
        "robust_controller": "MUST", "driver_runtime_management": "SHOULD"}
    assert list(reqs["gang_scheduling"]["rows"]) == ["SCH-01", "SCH-02", "SCH-05"]
    for spec in reqs.values():
        assert set(spec["rows"]) <= set(catalog.REQUIREMENTS)
    # Each published checklist kept names every requirement we map, in the same category at the same level.
    checklists = catalog.AI_CONFORMANCE["checklists"]
    assert catalog.AI_CONFORMANCE["checklist"] == max(checklists, key=lambda v: tuple(map(int, v[1:].split("."))))
    for version, categories in checklists.items():
        for ai_id, spec in reqs.items():
            assert categories[spec["category"]][ai_id] == spec["level"], (version, ai_id)
    assert "dra_support" in checklists["v1.35"]["accelerators"]
    assert "dra_support" not in checklists["v1.37"]["accelerators"]  # dropped in v1.36


def _ai(statuses: dict[str, tuple[str, str | None]], checklist: str | None = None) -> dict[str, dict]:
    reqs = {rid: {"status": s, "evidence": e, "message": "" if s == "passed" else f"{rid} {s}"}
            for rid, (s, e) in statuses.items()}
    return {item["id"]: item for item in report.ai_conformance({"requirements": reqs}, checklist)}


def test_the_newest_checklist_is_answered_unless_another_is_picked():
    """Every requirement of the chosen checklist is listed, in its order; those no row of ours shows are
    left to the platform owner, never marked N/A."""
    newest, old = _ai({}), _ai({}, "v1.35")
    assert list(newest) == [i for c in catalog.AI_CONFORMANCE["checklists"]["v1.37"].values() for i in c]
    assert "workload_sandboxing" in newest and "dra_support" not in newest
    assert "dra_support" in old and "workload_sandboxing" not in old
    assert (newest["workload_sandboxing"]["status"], newest["workload_sandboxing"]["notes"]) == ("", report.UNMAPPED)
    assert old["dra_support"]["level"] == "MUST" and old["dra_support"]["status"] == ""


def test_ai_conformance_status_follows_the_rows_verdicts():
    found = _ai({"SCH-01": ("passed", "simulated"), "SCH-02": ("passed", "real"), "SCH-05": ("passed", "simulated"),
                 "INS-01": ("passed", "objects"), "INS-03": ("failed", "objects"), "JOB-04": ("passed", "real"),
                 "INS-04": ("partial", "objects"), "ISO-01": ("passed", "objects")})
    # Every row passed, but not all with real pods: not Implemented, and the notes say what was shown.
    assert found["gang_scheduling"]["status"] == "Partially Implemented"
    assert found["gang_scheduling"]["evidenceLevel"] == "simulated"  # the weakest of its rows
    assert found["gang_scheduling"]["notes"].startswith(
        "every row passed, shown simulated only (Implemented needs real pods); SCH-01 (")
    real = _ai({rid: ("passed", "real") for rid in ("SCH-01", "SCH-02", "SCH-05")})
    assert real["gang_scheduling"]["status"] == "Implemented" and real["gang_scheduling"]["evidenceLevel"] == "real"
    assert found["robust_controller"]["status"] == "Not Implemented"
    assert found["secure_accelerator_access"]["status"] == "Partially Implemented"  # ISO-02 not run
    assert "ISO-02 (no API token in job pods): not run" in found["secure_accelerator_access"]["notes"]
    # No test checks DCGM yet: never claimed, whatever INS-04's verdict.
    assert found["accelerator_metrics"]["status"] == "N/A"
    assert found["accelerator_metrics"]["evidence"] == []
    assert "not checked" in found["accelerator_metrics"]["notes"]
    # Each row's evidence points at its testcase in junit.xml (v1.37's automated-test evidence) and its section.
    assert found["robust_controller"]["evidence"][:2] == ["file://junit.xml#INS-01", "file://report.html#req-INS-01"]
    none = _ai({"INS-04": ("skipped", None)})
    assert none["driver_runtime_management"]["status"] == "N/A"
    assert none["driver_runtime_management"]["evidenceLevel"] is None


def test_results_json_carries_the_verdicts(tmp_path):
    outcomes = [{**_test("a", "passed", "simulated"), "requirement": "SCH-01"}]
    data = report.write(tmp_path, outcomes, [], {"run_id": "r", "profile": "simulated"})
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["requirements"]["SCH-01"]["evidence"] == "simulated"
    assert results["by_evidence"]["simulated"]["passed"] == 1
    assert {i["id"]: i["status"] for i in results["ai_conformance"]}["gang_scheduling"] == "Partially Implemented"
    assert results["ai_checklist"] == catalog.AI_CONFORMANCE["checklist"]
    assert "answering\n# the v1.37 checklist" in (tmp_path / "ai-conformance.yaml").read_text()
    assert data["files"] == ["results.json", "junit.xml", "report.md", "report.html", "checklist.md",
                             "ai-conformance.yaml"]


def test_short_of_profile_lists_what_a_strict_run_refuses():
    where = {"A-01": "sim + real", "B-01": "sim", "C-01": "real", "D-01": "real", "E-01": "sim"}
    rows = {"A-01": {"status": "passed", "evidence": "simulated", "message": "shown simulated: t: on KWOK"},
            "B-01": {"status": "passed", "evidence": "objects", "message": ""},  # nothing asks more of a sim row
            "C-01": {"status": "skipped", "evidence": None, "message": "needs pod_network\nmore"},
            "D-01": {"status": "passed", "evidence": "real", "message": ""},
            "E-01": {"status": "partial", "evidence": "simulated", "message": "threshold looser"},
            "F-01": {"status": "not run", "evidence": None, "message": "profile"}}
    assert verdicts.short_of_profile(rows, where) == [
        "A-01 shown simulated, not real", "C-01 skipped: needs pod_network", "E-01 partial: threshold looser"]
