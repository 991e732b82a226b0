"""The suite's plugin (conformance/suite/conftest.py) end to end, on tests of its own and no cluster: each
test's evidence level is where its pods ran (not where the placement fixtures put them), a test may lower
it or mark itself partial, a read-only test shows objects, timeouts come from the settings, and the run
writes its reports and one handover tarball. The cluster's fixtures are replaced by a KWOK-and-real
cluster that is never called; where the fake tests' pods "ran" is what each writes to request.node.ran
(placement.ran_on, which reads it from a cluster, has its own test in test_observed.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest
import yaml

from mpiplat.conformance import catalog

SUITE = Path(__file__).resolve().parents[1] / "suite"

# A fake suite's start: no cluster, simulated nodes only.
HEADER = '''
import pytest

from mpiplat.conformance.capabilities import Capabilities


@pytest.fixture(scope="session")
def kube():
    return None


@pytest.fixture(scope="session")
def capabilities():
    return Capabilities(simulated=True, gpus=False, pod_network=False, kwok_nodes=True)


@pytest.fixture(scope="session", autouse=True)
def _observe(pytestconfig):
    pytestconfig._mpiplat_observe = lambda item: getattr(item, "ran", set())

'''

TESTS = HEADER + '''
@pytest.mark.requirement("JOB-01")
def test_on_kwok_nodes(mpijob_spec, request):
    mpijob_spec("a", "ns")
    request.node.ran = {"simulated"}


@pytest.mark.requirement("JOB-01")
def test_placed_real_but_ran_on_kwok(mpijob_spec, request):
    mpijob_spec("b", "ns", real=True)
    request.node.ran = {"simulated"}


@pytest.mark.requirement("ISO-04")
def test_refused_so_no_pod_ran(mpijob_spec):
    mpijob_spec("refused", "ns")


@pytest.mark.requirement("JOB-04")
def test_on_a_real_node(trainjob_spec, request):
    trainjob_spec("t", "ns", real=True)
    request.node.ran = {"real"}


@pytest.mark.requirement("JOB-04")
def test_a_simulated_part(trainjob_spec, request):
    trainjob_spec("s", "ns")
    request.node.ran = {"simulated"}


@pytest.mark.requirement("JOB-04")
def test_refused_by_design(trainjob_spec, evidence):
    trainjob_spec("r", "ns")
    evidence.at_most("objects", "the job is refused at submit")


@pytest.mark.requirement("ISO-03")
def test_policies_only(mpijob_spec, evidence, request):
    mpijob_spec("np", "ns")
    request.node.ran = {"simulated"}
    evidence.at_most("objects", "the policies exist and select the job's pods")


@pytest.mark.requirement("ISO-03", needs=["pod_network"])
def test_enforced(place):
    place(real=True)


@pytest.mark.read_only
@pytest.mark.requirement("INS-03")
def test_dry_run_only(mpijob_spec):
    mpijob_spec("probe", "default")


@pytest.mark.requirement("SCH-03")
def test_checks_less(place, evidence, request):
    place()
    request.node.ran = {"simulated"}
    evidence.partial("checks borrowing only")


@pytest.mark.requirement("SCALE-01")
def test_timeout_from_the_settings(request, settings):
    mark = request.node.get_closest_marker("timeout")
    if request.config.getoption("timeout") is None:
        assert mark.args[0] == settings.test_timeout_s("SCALE-01") == 4 * 3000
    else:
        assert mark is None


@pytest.mark.requirement("FAIL-01")
def test_fails(place, request):
    place()
    request.node.ran = {"simulated"}
    request_the_impossible = False
    assert request_the_impossible, "the job did not fail"
'''

SETTINGS = {"teams": [{"name": "a"}], "timeouts": {"test_s": 3000},
            "thresholds": {"scale_jobs": 800, "scale_namespaces": 2, "failure_to_failed_s": 60}}


def _run(tmp_path: Path, *args: str, tests: str = TESTS) -> tuple[subprocess.CompletedProcess, Path]:
    suite = tmp_path / "suite"
    suite.mkdir(exist_ok=True)
    shutil.copy(SUITE / "conftest.py", suite / "conftest.py")
    shutil.copy(SUITE / "pytest.ini", suite / "pytest.ini")
    (suite / "test_fake.py").write_text(textwrap.dedent(tests))
    (tmp_path / "settings.yml").write_text(yaml.safe_dump(SETTINGS))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "pytest", str(suite), "-p", "no:cacheprovider", "-q",
                           "--profile=cluster", f"--settings={tmp_path / 'settings.yml'}", f"--report-dir={out}",
                           *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    return proc, out


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("suite"))


def test_each_test_records_what_it_showed(ran):
    proc, out = ran
    assert proc.returncode == 1, proc.stdout + proc.stderr  # test_fails
    tests = {t["name"]: t for r in json.loads((out / "results.json").read_text())["requirements"].values()
             for t in r["tests"]}
    shown = {name: (t["status"], t["evidence"]) for name, t in tests.items()}
    assert shown == {
        "test_on_kwok_nodes": ("passed", "simulated"),
        "test_placed_real_but_ran_on_kwok": ("partial", "simulated"),  # showed less than it needs
        "test_refused_so_no_pod_ran": ("partial", "objects"),  # placed pods, none ran, declared nothing lower
        "test_on_a_real_node": ("passed", "real"),
        "test_a_simulated_part": ("passed", "simulated"),
        "test_refused_by_design": ("passed", "objects"),
        "test_policies_only": ("passed", "objects"),
        "test_enforced": ("skipped", None),
        "test_dry_run_only": ("passed", "objects"),  # read-only: it placed a probe, created nothing
        "test_checks_less": ("partial", "simulated"),
        "test_timeout_from_the_settings": ("passed", "objects"),
        "test_fails": ("failed", "simulated"),
    }
    assert tests["test_policies_only"]["placed"] == tests["test_policies_only"]["ran"] == ["simulated"]
    assert tests["test_placed_real_but_ran_on_kwok"]["evidence_note"] == \
        "its pods were placed to run real, but ran simulated only"
    assert tests["test_placed_real_but_ran_on_kwok"]["partial"] == \
        ["its pods were placed to run real, but ran simulated only"]
    assert tests["test_refused_so_no_pod_ran"]["evidence_note"] == "its pods were placed to run simulated, but none ran"
    assert tests["test_refused_by_design"]["evidence_note"] == "the job is refused at submit"
    assert tests["test_refused_by_design"]["needed"] == "objects" and tests["test_a_simulated_part"]["needed"] == \
        "simulated"
    assert tests["test_policies_only"]["evidence_note"] == "the policies exist and select the job's pods"
    assert tests["test_checks_less"]["message"] == "checks borrowing only"


def test_requirements_get_their_verdicts_and_the_terminal_says_so(ran):
    proc, out = ran
    results = json.loads((out / "results.json").read_text())
    verdict = {rid: (r["status"], r["evidence"]) for rid, r in results["requirements"].items()
               if r["status"] != "not run"}
    # A row shows its weakest essential test (JOB-04: simulated beside real; the refusal by design does not
    # count), and a test that showed less than it needs makes its row partial (JOB-01, ISO-04).
    assert verdict == {"JOB-01": ("partial", "simulated"), "JOB-04": ("passed", "simulated"),
                       "ISO-04": ("partial", "objects"),
                       "ISO-03": ("partial", "objects"), "INS-03": ("passed", "objects"),
                       "SCH-03": ("partial", "simulated"), "SCALE-01": ("partial", "objects"),
                       "FAIL-01": ("failed", "simulated")}
    assert results["requirements"]["SCALE-01"]["loosened"] == ["scale_namespaces 2, catalog 4"]
    assert results["requirements"]["FAIL-01"]["loosened"] == ["failure_to_failed_s 60, catalog 30"]
    lines = proc.stdout.splitlines()
    assert any(line.split()[:3] == ["SCH-03", "PARTIAL", "simulated"] and "test_checks_less" in line for line in lines)
    assert any(line.split()[:3] == ["ISO-03", "PARTIAL", "objects"] for line in lines)
    assert "  threshold looser than the catalog's: scale_namespaces 2, catalog 4 (SCALE-01)" in lines
    not_run = len(catalog.REQUIREMENTS) - 8
    assert f"requirements: 2 passed, 5 partial, 1 failed, 0 skipped, {not_run} not run" in proc.stdout
    # Every other catalog row is listed, with why: the fake suite has no test of it, or its profile skips it.
    assert set(results["requirements"]) == set(catalog.REQUIREMENTS)
    assert results["requirements"]["PERF-01"]["message"] == "not run: profile cluster (the row's where: gpu)"
    assert results["requirements"]["JOB-02"]["message"] == "not run: no test selected"
    assert not any(line.split()[1:2] == ["NOT"] for line in lines if line.startswith("  "))
    assert results["meta"]["wait_scale"] == 1 and "waits: x1" in (out / "report.md").read_text()


def test_the_run_writes_one_handover_tarball(ran):
    proc, out = ran
    [tarball] = out.glob("*.tar.gz")
    assert f"handover {tarball}" in proc.stdout
    with tarfile.open(tarball) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames()}
        message = tar.extractfile(f"{tarball.name.removesuffix('.tar.gz')}/failures/FAIL-01/test_fails/message.txt")
        assert b"the job did not fail" in message.read()
    assert {"report.html", "report.md", "results.json", "junit.xml", "checklist.md", "ai-conformance.yaml"} <= names


def test_a_timeout_given_on_the_command_line_wins(tmp_path):
    proc, _ = _run(tmp_path, "--only=SCALE-01", "--timeout=50")
    assert proc.returncode == 0, proc.stdout + proc.stderr


ROW_TESTS = HEADER + '''
@pytest.mark.requirement("FAIL-01")
def test_a_fails():
    assert False, "the first test of the row failed"


@pytest.mark.requirement("FAIL-01")
def test_b_after():
    pass


@pytest.mark.requirement("JOB-01")
def test_c_other_row():
    pass
'''


@pytest.mark.parametrize("fail_fast", [False, True])
def test_fail_fast_rows_skips_the_rest_of_a_failed_row_only(tmp_path, fail_fast):
    proc, out = _run(tmp_path, *(["--fail-fast-rows"] if fail_fast else []), tests=ROW_TESTS)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    reqs = json.loads((out / "results.json").read_text())["requirements"]
    tests = {t["name"]: t for r in reqs.values() for t in r["tests"]}
    assert reqs["FAIL-01"]["status"] == "failed" and "the first test of the row failed" in reqs["FAIL-01"]["message"]
    assert tests["test_c_other_row"]["status"] == "passed"
    if fail_fast:
        assert tests["test_b_after"]["status"] == "skipped"
        assert tests["test_b_after"]["message"] == \
            "FAIL-01: not run, an earlier test of FAIL-01 failed (--fail-fast-rows)"
    else:
        assert tests["test_b_after"]["status"] == "passed"


STRICT_TESTS = HEADER + '''
@pytest.mark.requirement("JOB-01")
def test_ranks_on_kwok_only(mpijob_spec, request):
    mpijob_spec("a", "ns")  # JOB-01 runs on real pods where the cluster has them; here it ran on KWOK
    request.node.ran = {"simulated"}


@pytest.mark.requirement("JOB-04")
def test_real_ranks(trainjob_spec, request):
    trainjob_spec("t", "ns", real=True)
    request.node.ran = {"real"}
'''


def test_a_strict_run_exits_1_when_a_row_shows_less_than_the_profile_expects(tmp_path):
    """The same passing run: exit 0 as it is, exit 1 with --strict-verdicts, which names the row and why."""
    proc, _ = _run(tmp_path, "--only=JOB-01,JOB-04", tests=STRICT_TESTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc, _ = _run(tmp_path, "--only=JOB-01,JOB-04", "--strict-verdicts", tests=STRICT_TESTS)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "strict: 1 row(s) showed less than the profile expects, exit 1: JOB-01 shown simulated, not real" \
        in proc.stdout, proc.stdout
    real_only = STRICT_TESTS.replace('request.node.ran = {"simulated"}', 'request.node.ran = {"real"}') \
        .replace('mpijob_spec("a", "ns")', 'mpijob_spec("a", "ns", real=True)')
    proc, _ = _run(tmp_path, "--only=JOB-01,JOB-04", "--strict-verdicts", tests=real_only)
    assert proc.returncode == 0 and "strict:" not in proc.stdout, proc.stdout + proc.stderr


PHASE_TESTS = HEADER + '''
@pytest.mark.phase("before")
@pytest.mark.requirement("UPG-01")
def test_before(evidence):
    evidence.partial("recorded, to be judged after")


@pytest.mark.phase("after")
@pytest.mark.requirement("UPG-01")
def test_after():
    pass


@pytest.mark.requirement("JOB-01")
def test_other():
    pass
'''


def test_the_upgrade_profile_runs_one_phase_and_no_other_profile_runs_its_rows(tmp_path):
    proc, out = _run(tmp_path, "--profile=upgrade", "--phase=before", tests=PHASE_TESTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((out / "results.json").read_text())
    reqs = results["requirements"]
    assert [t["name"] for t in reqs["UPG-01"]["tests"]] == ["test_before"] and reqs["UPG-01"]["status"] == "partial"
    assert reqs["JOB-01"]["message"] == "not run: profile upgrade (the row's where: sim + real)"
    assert reqs["UPG-07"]["message"] == "not run: no test of the row runs in --phase before"
    assert results["meta"]["phase"] == "before" and "profile upgrade --phase before" in (out / "report.md").read_text()
    proc, out = _run(tmp_path, tests=PHASE_TESTS)  # --profile=cluster
    reqs = json.loads((out / "results.json").read_text())["requirements"]
    assert reqs["UPG-01"]["message"] == "not run: profile cluster (the row's where: upgrade)", proc.stdout
    assert reqs["JOB-01"]["status"] == "passed"
    for args in (["--profile=upgrade"], ["--phase=after"]):
        proc, _ = _run(tmp_path, *args, tests=PHASE_TESTS)
        assert proc.returncode == 4 and "--phase before|after goes with --profile upgrade" in proc.stderr, proc.stderr
