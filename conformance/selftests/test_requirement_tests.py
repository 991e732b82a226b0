"""The suite's tests of the rows issue 12 found weak: each names a cluster it fails on, the catalog holds a
row per behaviour, and what they build judges the cluster rather than our own defaults. No cluster."""

from __future__ import annotations

import ast
from pathlib import Path

import jinja2
import pytest
import yaml

from mpiplat import jobs
from mpiplat.conformance.catalog import REQUIREMENTS

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "conformance" / "suite"
# Rows whose tests must say, in their docstring, on which cluster they fail.
FIXED = {"INS-01", "INS-03", "SCH-02", "SCH-03", "SCH-04", "SCH-05", "SCH-07", "SCH-08", "JOB-05", "JOB-07",
         "PERF-02", "ISO-02"}


def _suite_tests() -> dict[str, list[tuple[str, str]]]:
    """{requirement id: [(test name, docstring)]} from the suite's modules' requirement marks."""
    out: dict[str, list[tuple[str, str]]] = {}
    for path in sorted(SUITE.glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.FunctionDef):
                continue
            for dec in node.decorator_list:
                if (isinstance(dec, ast.Call) and getattr(dec.func, "attr", "") == "requirement"
                        and dec.args and isinstance(dec.args[0], ast.Constant)):
                    out.setdefault(dec.args[0].value, []).append((node.name, ast.get_docstring(node) or ""))
    return out


def test_every_fixed_row_has_tests_that_name_a_cluster_they_fail_on():
    tests = _suite_tests()
    assert FIXED <= set(tests), sorted(FIXED - set(tests))
    silent = [name for rid in FIXED for name, doc in tests[rid] if "Fails on" not in doc]
    assert not silent, f"tests without a 'Fails on ...' line in their docstring: {silent}"


def test_borrowing_fair_sharing_and_priority_preemption_are_rows_of_their_own():
    tests = _suite_tests()
    for rid, word in (("SCH-03", "borrow"), ("SCH-07", "fair sharing"), ("SCH-08", "priority")):
        assert word in REQUIREMENTS[rid]["title"].lower(), REQUIREMENTS[rid]
        assert tests.get(rid), f"{rid} has no test"


def test_a_job_may_leave_the_token_to_the_clusters_policy():
    """ISO-02 submits a job that does not set automountServiceAccountToken; every other job turns it off."""
    def templates(spec: jobs.MPIJob) -> list[dict]:
        return [r["template"]["spec"] for r in jobs.mpijob(spec)["spec"]["mpiReplicaSpecs"].values()]

    assert all(t["automountServiceAccountToken"] is False for t in templates(jobs.MPIJob(name="a")))
    assert all("automountServiceAccountToken" not in t
               for t in templates(jobs.MPIJob(name="a", automount_service_account_token=None)))


def _kueue_config(**overrides) -> dict:
    variables = yaml.safe_load((ROOT / "roles/kueue/defaults/main.yml").read_text())
    variables = {k: v for k, v in variables.items() if not k.startswith("__")} | overrides
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters |= {"bool": lambda v: v if isinstance(v, bool) else str(v).lower() in ("true", "yes", "1", "on"),
                    "to_nice_yaml": lambda v, indent=4: yaml.safe_dump(v, indent=indent, default_flow_style=False)}
    return yaml.safe_load(env.from_string((ROOT / "roles/kueue/templates/manager-config.yaml.j2").read_text())
                          .render(**variables))


@pytest.mark.parametrize("enabled", [True, False])
def test_kueue_fair_sharing_is_on_by_default_and_can_be_turned_off(enabled):
    conf = _kueue_config(**({} if enabled else {"kueue_fair_sharing": False}))
    if enabled:
        assert conf["fairSharing"] == {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]}
    else:
        assert "fairSharing" not in conf


# ---- INS-01/03: a controller is judged by its Deployment where it has one and by what only a live one does

def _deployment(name: str, available: bool, ready: int, replicas: int = 1):
    from types import SimpleNamespace as NS
    return NS(metadata=NS(name=name, namespace="sys"),
              spec=NS(replicas=replicas, selector=NS(match_labels={"app": name})),
              status=NS(conditions=[NS(type="Available", status="True" if available else "False")]),
              _ready=ready)


class _FakeKube:
    def __init__(self, deployments):
        from types import SimpleNamespace as NS
        ready = {d.metadata.name: d._ready for d in deployments}

        def pods(_ns, label_selector):
            name = label_selector.split("=", 1)[1]
            return NS(items=[NS(metadata=NS(deletion_timestamp=None),
                                status=NS(conditions=[NS(type="Ready", status="True")])) for _ in range(ready[name])])
        self.core = NS(list_namespaced_pod=pods)


@pytest.mark.parametrize("deployments, probe, healthy", [
    ([], (True, "Lease renewed"), True),                                      # a host process, as on the local cluster
    ([], None, False),                                                        # nothing seen of it at all
    ([], (False, "Lease not renewed"), False),                                # stopped
    ([("mpi-operator", True, 1)], (True, "Lease renewed"), True),
    ([("mpi-operator", True, 1)], (False, "its webhook does not answer"), False),  # Available, but not working
    ([("mpi-operator", False, 0)], (True, "Lease renewed"), False),           # a replica down
    ([("mpi-operator", True, 0, 0)], None, False),                            # scaled to 0
])
def test_controller_health_needs_a_ready_deployment_where_there_is_one_and_live_evidence(deployments, probe, healthy):
    from mpiplat.conformance import health

    deps = [_deployment(*d) for d in deployments]
    ok, seen = health.controller_health(_FakeKube(deps), deps, "mpi-operator", [lambda _k: probe])
    assert ok is healthy, seen
