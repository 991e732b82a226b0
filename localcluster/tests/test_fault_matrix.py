"""The fault matrix against the local cluster: for each fault of mpiplat.localcluster.faults (the mechanics),
the conformance suite (only the rows conformance/faults.yml names for it, `--only`, each row stopped at its
first failed test, `--fail-fast-rows`) must report each of those rows `failed`, with the fault's words in its
message or diagnosis, and the rows it samples (faultmatrix.SAMPLE, Expectation.sample) passed or partial; then
the fault is undone and the cluster must be as before (healthy, and the objects faults touch unchanged:
faults.baseline).

Each fault's times (apply, suite, undo) are printed as it ends:
    pytest localcluster/tests/test_fault_matrix.py -p no:cacheprovider [-k FAULT]
$MPIPLAT_FAULT_SHARE=K/N runs only share K of N (faultmatrix.share): `make test` runs two shares on two clusters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from mpiplat.conformance import faultmatrix, settings
from mpiplat.localcluster import cluster, faults, processes

pytestmark = [pytest.mark.cluster, pytest.mark.faults]

SUITE = Path(__file__).resolve().parents[2] / "conformance" / "suite"
SUITE_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def before(kube) -> dict:
    """The cluster as the matrix found it (the `kube` fixture makes sure it is up)."""
    return faults.baseline()


def run_suite(requirements: list[str], report_dir: Path, wait_scale: float = 1.0,
              extra: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess, dict]:
    """The conformance suite's cluster profile, only `requirements`, against the local cluster, with the
    local settings, this cluster's Prometheus and timeouts.wait_scale set to `wait_scale`."""
    local = yaml.safe_load(settings.LOCAL.read_text())
    local["timeouts"] = {**local.get("timeouts", {}), "wait_scale": wait_scale}
    local["prometheus"] = {**local["prometheus"], "url": processes.prometheus_url()}  # this cluster's
    path = report_dir / "settings.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(local))
    cmd = [sys.executable, "-m", "pytest", str(SUITE), "--profile", "cluster", "--only", ",".join(requirements),
           "--fail-fast-rows",
           "--kubeconfig", str(cluster.kubeconfig_path()), "--report-dir", str(report_dir), "--settings", str(path),
           "-p", "no:cacheprovider", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S)
    results = report_dir / "results.json"
    assert results.is_file(), f"the suite wrote no results.json (exit {proc.returncode}):\n{proc.stdout[-3000:]}"
    return proc, json.loads(results.read_text())


SHARE_OF = os.environ.get("MPIPLAT_FAULT_SHARE", "1/1")  # K/N: this lane runs share K of N
SHARE = set(faultmatrix.share(SHARE_OF))


@pytest.mark.timeout(SUITE_TIMEOUT_S + 300)
@pytest.mark.parametrize("fault", [f for f in faults.matrix() if f.name in SHARE], ids=lambda f: f.name)
def test_the_suite_fails_the_faults_rows_with_an_actionable_message(fault, before, tmp_path, capsys):
    expected = faultmatrix.FAULTS[fault.name]
    times, sampled = {}, expected.sample()
    start = time.monotonic()
    try:
        fault.apply()
        times["apply"] = time.monotonic() - start
        proc, results = run_suite(expected.requirements + sampled, tmp_path, expected.wait_scale)
        times["suite"] = time.monotonic() - start - times["apply"]
    finally:
        undo = time.monotonic()
        fault.undo()
        times["undo"] = time.monotonic() - undo
    with capsys.disabled():
        print(f"\n  fault {fault.name} (waits x{expected.wait_scale:g}): apply {times.get('apply', 0):.0f}s, "
              f"suite {times.get('suite', 0):.0f}s ({', '.join(expected.requirements)}; sampled "
              f"{', '.join(sampled)}), undo {times['undo']:.0f}s", flush=True)
    reqs = results["requirements"]
    wrong = []
    for rid, words in expected.expect.items():
        r = reqs.get(rid)
        if r is None:
            wrong.append(f"{rid} not in the report")
            continue
        text = f"{r['message']}\n{r['diagnosis']}".lower()
        missing = [w for w in words if w.lower() not in text]
        if r["status"] != "failed" or missing:
            wrong.append(f"{rid} {r['status']} (words missing: {missing}): {r['message'][:600]}")
    for rid in sampled:
        r = reqs.get(rid) or {"status": "not in the report", "message": ""}
        if r["status"] not in ("passed", "partial"):
            wrong.append(f"{rid} (sampled: the fault should leave it passing) {r['status']}: {r['message'][:600]}")
    assert not wrong, f"under fault {fault.name} ({expected.what}):\n" + "\n".join(wrong) + \
        f"\n--- suite output\n{proc.stdout[-4000:]}"
    report = cluster.status()
    assert report["healthy"], f"the cluster is not healthy after undoing {fault.name}: {cluster.unhealthy(report)}"
    assert faults.baseline() == before, f"undoing {fault.name} did not restore the cluster"


@pytest.mark.timeout(SUITE_TIMEOUT_S + 300)
@pytest.mark.skipif(SHARE_OF.split("/")[0] != "1", reason="share 1 runs it")
def test_a_strict_run_exits_1_when_the_real_node_is_cordoned(before, tmp_path):
    """With the real node cordoned, JOB-01 passes on the KWOK nodes and says `simulated`: an honest report,
    and exit 0. --strict-verdicts (`mpiplat conformance run --strict`) makes it exit 1, naming the row."""
    fault = faults.NodesCordoned("real-node-cordoned", real=True)
    try:
        fault.apply()
        assert fault.saved, "the local cluster has no schedulable real node to cordon"
        proc, results = run_suite(["JOB-01"], tmp_path, extra=("--strict-verdicts",))
    finally:
        fault.undo()
    job01 = results["requirements"]["JOB-01"]
    assert (job01["status"], job01["evidence"]) == ("passed", "simulated"), job01
    assert proc.returncode == 1 and "JOB-01 shown simulated, not real" in proc.stdout, proc.stdout[-3000:]
    assert faults.baseline() == before, "uncordoning the real node did not restore the cluster"
