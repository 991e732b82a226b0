"""Monitoring: alert rules pass promtool (check and unit tests), the dashboard is valid and names
real metrics, and the role applies the dashboard (skipping Prometheus Operator objects, saying why)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import jinja2
import pytest
import yaml
from kubernetes import client

from mpiplat.versions import load, module_dir

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "monitoring"
DASHBOARD = json.loads((ROLE / "files" / "mpijob-overview.json").read_text())

# Metric families not in our pins, as their exporters document them.
KUBE_STATE_METRICS = {"kube_pod_status_phase", "kube_pod_info", "kube_job_status_start_time",
                      "kube_job_status_completion_time", "kube_pod_container_resource_requests"}
CADVISOR = {"container_cpu_usage_seconds_total", "container_memory_working_set_bytes",
            "container_network_transmit_bytes_total", "container_network_receive_bytes_total",
            "container_fs_reads_bytes_total", "container_fs_writes_bytes_total"}
DCGM_EXPORTER = {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE"}
KEYWORDS = {"by", "on", "and", "or", "unless", "without", "ignoring", "group_left", "group_right", "offset",
            "bool", "inf", "nan"}


def _promtool() -> str:
    tool = shutil.which("promtool")
    if not tool:
        pytest.fail("promtool not found: install Debian's `prometheus` package (.ci/run does)")
    return tool


def _rules_text() -> str:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    plain = {k: v for k, v in defaults.items() if not k.startswith("__")}
    return jinja2.Template((ROLE / "templates" / "alerts.rules.yml.j2").read_text(),
                           undefined=jinja2.StrictUndefined).render(**plain)


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression (label matchers, grouping clauses and functions removed)."""
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\b(by|on|without|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r'"[^"]*"', "", expr)
    names = set(re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", expr))
    return {n for n in names if n not in KEYWORDS and not re.fullmatch(r"\d+[smhdwy]?", n)}


def known_metrics() -> set[str]:
    comps = load()
    mpi_src = "".join(p.read_text() for p in (module_dir(comps["mpi-operator"]) / "pkg").rglob("*.go"))
    kueue_src = (module_dir(comps["kueue"]) / "pkg" / "metrics" / "metrics.go").read_text()
    mpi = set(re.findall(r'Name:\s*"(mpi_operator_\w+)"', mpi_src))
    kueue = {f"kueue_{n}" for n in re.findall(r'Name:\s*"(\w+)"', kueue_src)}
    assert mpi and kueue
    return mpi | kueue | KUBE_STATE_METRICS | CADVISOR | DCGM_EXPORTER


def test_metric_name_extraction():
    assert metric_names('sum by (pod) (rate(container_cpu_usage_seconds_total{pod=~"a"}[1m])) > 0') == {
        "container_cpu_usage_seconds_total"}


def test_alert_rules_pass_promtool_check_and_unit_tests(tmp_path):
    (tmp_path / "alerts.rules.yml").write_text(_rules_text())
    shutil.copy(ROLE / "tests" / "alerts.test.yml", tmp_path)
    check = subprocess.run([_promtool(), "check", "rules", "alerts.rules.yml"], cwd=tmp_path,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "4 rules found" in check.stdout
    unit = subprocess.run([_promtool(), "test", "rules", "alerts.test.yml"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert unit.returncode == 0, unit.stdout + unit.stderr


def test_alert_rules_cover_the_four_alerts_and_name_real_metrics():
    rules = yaml.safe_load(_rules_text())["groups"][0]["rules"]
    assert [r["alert"] for r in rules] == ["MPIJobFailed", "MPIJobPendingTooLong", "ClusterQueueStarved",
                                          "GPUsIdleWhileJobRuns"]
    known = known_metrics()
    for rule in rules:
        assert metric_names(rule["expr"]) <= known, (rule["alert"], metric_names(rule["expr"]) - known)


def _panels() -> list[dict]:
    return [p for p in DASHBOARD["panels"] if p["type"] != "row"]


def test_dashboard_has_unique_ids_and_the_overview_panels():
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    titles = {p["title"] for p in _panels()}
    for wanted in ("GPU utilization (cluster-wide)", "Average job duration (last 7 days)", "Job status timeline",
                   "Worker pod status", "GPU utilization per worker", "Network throughput (MPI traffic)",
                   "CPU usage per worker", "Memory usage per worker", "Disk I/O (training data loading)"):
        assert wanted in titles
    assert {v["name"] for v in DASHBOARD["templating"]["list"]} == {"datasource", "namespace", "job"}


def test_dashboard_queries_name_real_metrics():
    known = known_metrics()
    for panel in _panels():
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names, (panel["title"], target["expr"])
            assert names <= known, (panel["title"], names - known)


# (plural, name, namespace) of what the role applies where the Prometheus Operator's CRDs exist
MONITORING_OBJECTS = [("prometheusrules", "mpiplat-mpi-training", "mpiplat-monitoring"),
                      ("podmonitors", "mpi-operator", "mpi-operator"), ("servicemonitors", "kueue", "kueue-system")]


@pytest.mark.cluster
def test_role_applies_dashboard_rules_and_monitors_and_skips_a_monitor_without_its_namespace(kube, ansible_env,
                                                                                            tmp_path):
    """The local cluster has the Prometheus Operator's CRDs and no gpu-operator namespace: the role applies
    the dashboard, the PrometheusRule and the mpi-operator and Kueue monitors, says why it skips the DCGM
    exporter's, and removes them all with state absent."""
    play = tmp_path / "monitoring.yml"
    play.write_text(yaml.safe_dump([{
        "name": "Monitoring", "hosts": "all", "gather_facts": False,
        "module_defaults": {"group/kubernetes.core.k8s": {"kubeconfig": "{{ mpiplat_kubeconfig | default(omit) }}"}},
        "roles": [{"role": "mpiplat.platform.monitoring", "vars": {"monitoring_state": "{{ state }}"}}]}]))
    scraper = {"namespace": "monitoring", "name": "prometheus"}
    cmd = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "inventories/local/hosts.yml", str(play),
           "-e", json.dumps({"monitoring_prometheus_service_accounts": [scraper]})]
    env = ansible_env
    rbac = client.RbacAuthorizationV1Api(kube.api_client)
    try:
        run = subprocess.run(cmd + ["-e", "state=present"], cwd=ROOT, env=env, capture_output=True, text=True)
        assert run.returncode == 0, run.stdout[-3000:]
        assert "skipped ServiceMonitor/nvidia-dcgm-exporter: namespace gpu-operator does not exist" in \
            " ".join(run.stdout.split()), run.stdout[-3000:]
        for plural, name, ns in MONITORING_OBJECTS:
            kube.custom.get_namespaced_custom_object("monitoring.coreos.com", "v1", ns, plural, name)
        cm = kube.core.read_namespaced_config_map("mpiplat-mpijob-overview-dashboard", "mpiplat-monitoring")
        assert cm.metadata.labels["grafana_dashboard"] == "1"
        assert json.loads(cm.data["mpijob-overview.json"])["uid"] == DASHBOARD["uid"]
        binding = rbac.read_cluster_role_binding("mpiplat-kueue-metrics-reader")  # Kueue's /metrics for Prometheus
        assert binding.role_ref.name == "kueue-metrics-reader"
        assert [(s.kind, s.namespace, s.name) for s in binding.subjects] == [("ServiceAccount", "monitoring",
                                                                            "prometheus")]
        again = subprocess.run(cmd + ["-e", "state=present"], cwd=ROOT, env=env, capture_output=True, text=True)
        assert re.search(r"changed=0\b", again.stdout), again.stdout[-2000:]
    finally:
        gone = subprocess.run(cmd + ["-e", "state=absent"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert gone.returncode == 0, gone.stdout[-3000:]
    assert "mpiplat-kueue-metrics-reader" not in [b.metadata.name for b in rbac.list_cluster_role_binding().items]
    for plural, name, ns in MONITORING_OBJECTS[1:]:  # the PrometheusRule goes with its namespace, below
        items = kube.custom.list_namespaced_custom_object("monitoring.coreos.com", "v1", ns, plural)["items"]
        assert name not in [o["metadata"]["name"] for o in items], f"{plural} {ns}/{name} left behind"
    # The role deletes the namespace without waiting (see roles/monitoring/tasks/main.yml).
    deadline = time.monotonic() + 120
    while "mpiplat-monitoring" in [n.metadata.name for n in kube.core.list_namespace().items]:
        assert time.monotonic() < deadline, "namespace mpiplat-monitoring still there 120 s after removal"
        time.sleep(1)
