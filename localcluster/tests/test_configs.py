"""Unit tests (no cluster): Kueue's config is the kueue role's, the local values are set in one
place, each domain error's first line says what to do, progress shows on long work."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from mpiplat import cli, jobs
from mpiplat.conformance import settings
from mpiplat.localcluster import build, configs, lifecycle, nodes, processes, realnode, rulesync
from mpiplat.localcluster.build import BuildError
from mpiplat.localcluster.progress import progress
from mpiplat.localcluster.state import ClusterError
from mpiplat.versions import load

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = str(Path(sys.executable).with_name("ansible-playbook"))
KUEUE = processes.controller("kueue")
LOCAL = yaml.safe_load((REPO / configs.LOCAL_VARS).read_text())


@pytest.fixture
def checkout(tmp_path, monkeypatch) -> Path:
    """A copy of the files the local cluster reads from the checkout, used in place of it."""
    for rel in (configs.KUEUE_TEMPLATE, configs.KUEUE_DEFAULTS, configs.LOCAL_VARS):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, tmp_path / rel)
    monkeypatch.setattr(configs, "CHECKOUT", tmp_path)
    return tmp_path


def _ansible_template(tmp_path: Path, src: Path, *extra: str) -> str:
    """Render a template the way the playbooks do: ansible's template module, local inventory."""
    play = tmp_path / "render.yml"
    out = tmp_path / "rendered.yml"
    play.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"ansible.builtin.template": {"src": str(src), "dest": str(out)}, "delegate_to": "localhost"}]}]))
    proc = subprocess.run([PLAYBOOK, "-i", "inventories/local/hosts.yml", str(play), *extra], cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    return out.read_text()


# ---------------------------------------------------------------- Kueue's config

def test_kueue_config_is_the_role_template_with_the_local_values_and_host_settings(tmp_path):
    role = configs.render_role_template(configs.KUEUE_TEMPLATE, configs.kueue_vars())
    conf = configs.kueue_config(KUEUE, tmp_path / "pki")
    host = configs.kueue_host_settings(KUEUE, tmp_path / "pki")
    # The role's settings, with the local inventory's values where it sets them.
    for key in set(role) - set(host):
        assert conf[key] == role[key], key
    assert conf["waitForPodsReady"]["timeout"] == LOCAL["kueue_wait_for_pods_ready_timeout"] == "60s"
    assert conf["waitForPodsReady"]["requeuingStrategy"]["backoffBaseSeconds"] == \
        LOCAL["kueue_requeuing_backoff_base_seconds"]
    assert conf["integrations"]["frameworks"] == ["kubeflow.org/mpijob", "trainer.kubeflow.org/trainjob"]
    assert conf["managedJobsNamespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "kueue-system"]
    assert conf["manageJobsWithoutQueueName"] is False
    # Only what a host process needs differs: addresses on 127.0.0.1, our certificate, one replica.
    # Its client's rate limit and its reconcilers' concurrency are the role's.
    assert conf["health"] == {"healthProbeBindAddress": "127.0.0.1:31174"}
    assert conf["metrics"] == {"bindAddress": "127.0.0.1:31173"}
    assert conf["webhook"] == {"port": 31172, "host": "127.0.0.1", "certDir": str(tmp_path / "pki")}
    assert conf["internalCertManagement"] == {"enable": False}
    assert conf["leaderElection"] == {**role["leaderElection"], "leaderElect": False}
    variables = configs.kueue_vars()
    assert conf["clientConnection"] == {"qps": variables["kueue_client_qps"], "burst": variables["kueue_client_burst"]}
    assert conf["controller"]["groupKindConcurrency"] == variables["kueue_controller_concurrency"]
    assert conf["featureGates"] == {"VisibilityOnDemand": False}
    assert set(conf) == set(role) | set(host)


def test_the_rendering_matches_ansibles(tmp_path):
    """Plain Jinja2 with our two Ansible filters renders the template as the role does."""
    ansible = yaml.safe_load(_ansible_template(tmp_path, REPO / configs.KUEUE_TEMPLATE,
                                               "-e", f"@{REPO / configs.KUEUE_DEFAULTS}",
                                               "-e", f"@{REPO / configs.LOCAL_VARS}"))
    assert configs.render_role_template(configs.KUEUE_TEMPLATE, configs.kueue_vars()) == ansible


def test_a_change_to_the_role_template_or_the_inventory_reaches_the_local_cluster(checkout, tmp_path):
    template = checkout / configs.KUEUE_TEMPLATE
    template.write_text(template.read_text() + "objectRetentionPolicies:\n  workloads:\n    afterFinished: 1h\n")
    inventory = checkout / configs.LOCAL_VARS
    inventory.write_text(inventory.read_text().replace("kueue_wait_for_pods_ready_timeout: 60s",
                                                       "kueue_wait_for_pods_ready_timeout: 45s"))
    conf = configs.kueue_config(KUEUE, tmp_path)
    assert conf["objectRetentionPolicies"] == {"workloads": {"afterFinished": "1h"}}
    assert conf["waitForPodsReady"]["timeout"] == "45s"


@pytest.mark.parametrize("value, message", [
    ("five minutes", "kueue_wait_for_pods_ready_timeout is 'five minutes' in inventories/local"),
    ("\"{{ other }}\"", "kueue_wait_for_pods_ready_timeout is the Jinja expression '{{ other }}'"),
])
def test_bad_local_kueue_values_are_refused(checkout, value, message):
    inventory = checkout / configs.LOCAL_VARS
    inventory.write_text(inventory.read_text().replace("kueue_wait_for_pods_ready_timeout: 60s",
                                                       f"kueue_wait_for_pods_ready_timeout: {value}"))
    with pytest.raises(ClusterError, match=message):
        configs.kueue_vars()


def test_without_a_checkout_up_stops_with_one_line_before_any_change(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(configs, "CHECKOUT", tmp_path / "site-packages" / "mpiplat")
    monkeypatch.setenv("MPIPLAT_STATE", str(tmp_path / "state"))
    monkeypatch.delenv("MPIPLAT_CLUSTER", raising=False)
    assert cli.main(["cluster", "up"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"error: {tmp_path / 'site-packages' / 'mpiplat' / configs.KUEUE_DEFAULTS} not found")
    assert "run `mpiplat cluster up` from a git clone" in err
    assert not (tmp_path / "state").exists()


# ---------------------------------------------------------------- one place for the local values

def test_local_conformance_settings_agree_with_the_local_inventory(tmp_path):
    """conformance/settings/local.yml carries what the installer writes from inventories/local."""
    written = settings.parse(yaml.safe_load(_ansible_template(
        tmp_path, REPO / "playbooks/templates/conformance-settings.yml.j2")))
    local = settings.load(settings.LOCAL)
    for key in ("pods_ready_timeout_s", "min_workers", "max_workers", "scale_jobs", "scale_workers"):
        assert local.thresholds[key] == written.thresholds[key], \
            f"conformance/settings/local.yml thresholds.{key} disagrees with inventories/local"
    assert written.thresholds["pods_ready_timeout_s"] == 60 + 30  # the 60s timeout + margin
    assert (written.thresholds["min_workers"], written.thresholds["max_workers"]) == \
        (LOCAL["guardrails_min_workers"], LOCAL["guardrails_max_workers"])
    assert written.thresholds["scale_jobs"] == LOCAL["mpiplat_conformance_thresholds"]["scale_jobs"] == 50
    assert written.thresholds["scale_workers"] == LOCAL["mpiplat_conformance_thresholds"]["scale_workers"] == 256
    # The jobs' images: the local ones for every MPI implementation (the real node pulls from no registry).
    assert local.images == written.images, "conformance/settings/local.yml images disagree with inventories/local"
    assert LOCAL["mpiplat_conformance_images"] == {impl: f"mpiplat.local/{impl.lower()}:1"
                                                   for impl in ("OpenMPI", "Intel", "MPICH")}
    assert {impl: local.images[impl] for impl in LOCAL["mpiplat_conformance_images"]} == \
        LOCAL["mpiplat_conformance_images"]
    # JOB-10's checkpoint volume: the real node's StorageClass, ReadWriteOnce (every worker is on that node).
    assert local.storage == written.storage, "conformance/settings/local.yml storage disagrees with inventories/local"
    assert local.storage == {"storage_class": realnode.STORAGE_CLASS, "access_mode": "ReadWriteOnce", "size": "1Gi"}
    # The local Prometheus that `up` starts.
    assert local.prometheus == written.prometheus, "conformance/settings/local.yml prometheus disagrees"
    prometheus = processes.controller("prometheus")
    assert local.prometheus == {"url": f"http://127.0.0.1:{prometheus.health_port}"}


def test_the_settings_template_falls_back_to_the_role_defaults(tmp_path):
    """An inventory that sets none of them gets the roles' defaults (read from the roles' files)."""
    text = _ansible_template(tmp_path, REPO / "playbooks/templates/conformance-settings.yml.j2",
                             "-e", "kueue_wait_for_pods_ready_timeout=10m", "-e", "guardrails_max_workers=64",
                             "-e", json.dumps({"mpiplat_conformance_images": {}, "mpiplat_conformance_storage": {},
                                               "mpiplat_conformance_prometheus": {},
                                               "mpiplat_conformance_thresholds": {}}))
    assert "images" not in yaml.safe_load(text)  # none set: the suite uses the pinned MPI base images
    assert "storage" not in yaml.safe_load(text)  # none set: the schema's defaults (the default class, RWX)
    assert "prometheus" not in yaml.safe_load(text)  # none set: the MON rows skip
    thresholds = yaml.safe_load(text)["thresholds"]
    guardrails = yaml.safe_load((REPO / "roles/guardrails/defaults/main.yml").read_text())
    assert thresholds == {"pods_ready_timeout_s": 630, "min_workers": LOCAL["guardrails_min_workers"],
                          "max_workers": 64}
    assert guardrails["guardrails_min_workers"] == LOCAL["guardrails_min_workers"]


def test_the_local_gpu_flavors_tolerate_the_kwok_taint(tmp_path):
    """The local inventory's ResourceFlavors are the tenancy role's default one plus the toleration of the
    KWOK nodes' taint (there while the local cluster has a real node), which Kueue puts on admitted pods, and a
    twin of it placed by a Topology of the KWOK nodes' own zone, rack and host labels."""
    role = yaml.safe_load((REPO / "roles/tenancy/defaults/main.yml").read_text())["tenancy_flavors"]
    plain, racks = LOCAL["tenancy_flavors"]
    assert {k: v for k, v in plain.items() if k != "tolerations"} == role[0]
    assert plain["tolerations"] == racks["tolerations"] == [jobs.KWOK_TOLERATION]
    assert racks["node_labels"] == plain["node_labels"]
    [topology] = LOCAL["tenancy_topologies"]
    assert racks["topology"] == topology["name"]
    assert topology["levels"] == [nodes.ZONE_LABEL, nodes.RACK_LABEL, "kubernetes.io/hostname"]
    for flavor, extra in ((plain, {}), (racks, {"topologyName": topology["name"]})):
        rendered = yaml.safe_load(_ansible_template(tmp_path, REPO / "roles/tenancy/templates/resourceflavor.yml.j2",
                                                    "-e", f"@{REPO / 'roles/tenancy/defaults/main.yml'}",
                                                    "-e", json.dumps({"__tenancy_flavor": flavor})))
        assert rendered["kind"] == "ResourceFlavor" and rendered["metadata"]["name"] == flavor["name"]
        assert rendered["spec"] == {"nodeLabels": role[0]["node_labels"], "tolerations": [jobs.KWOK_TOLERATION],
                                    **extra}


# ---------------------------------------------------------------- errors: the first line says what to do

def _first_line(err: BaseException) -> str:
    return str(err).splitlines()[0]


def test_a_failed_build_names_its_log_and_the_retry_command(tmp_path, monkeypatch):
    monkeypatch.setenv("MPIPLAT_CACHE", str(tmp_path))

    def fail(comp, log):
        log.write("go: downloading something\ncompile error: boom\n")
        log.flush()
        raise subprocess.CalledProcessError(1, ["go", "build", "-trimpath", "-o", "x"])

    monkeypatch.setattr(build, "build_component", fail)
    with pytest.raises(BuildError) as err:
        build.build(only=["helm"], stream=io.StringIO())
    comp = load()["helm"]
    log = tmp_path / "logs" / f"build-helm-{comp.version}.log"
    assert _first_line(err.value) == (f"building helm {comp.version} failed (go build -trimpath: exit 1); "
                                      f"see {log}, then retry with `mpiplat cluster build --only helm`")
    assert str(err.value).splitlines()[1:] == ["last lines of the log:", "go: downloading something",
                                                "compile error: boom"]


def test_a_build_without_go_says_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MPIPLAT_CACHE", str(tmp_path))

    def no_go(comp, log):
        raise FileNotFoundError(2, "No such file or directory", "go")

    monkeypatch.setattr(build, "build_component", no_go)
    with pytest.raises(BuildError) as err:
        build.build(only=["helm"], stream=io.StringIO())
    assert "needs the Go toolchain (go >= 1.26) on PATH" in _first_line(err.value)
    assert "`mpiplat cluster build --only helm`" in _first_line(err.value)


@pytest.fixture
def state(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("MPIPLAT_STATE", str(tmp_path / "state"))
    monkeypatch.delenv("MPIPLAT_CLUSTER", raising=False)
    return tmp_path / "state"


def test_a_busy_port_names_it_and_what_to_do(state, tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        ctl = processes.Controller("kueue", "kueue", health_port=port)
        with pytest.raises(ClusterError) as err:
            processes.start(ctl, tmp_path / "pki", None)
    assert _first_line(err.value).startswith(f"cannot start kueue: port(s) [{port}] already in use")
    assert "run `mpiplat cluster down`" in _first_line(err.value)


def test_a_controller_that_exits_names_its_log_and_the_retry(state):
    ctl = processes.CONTROLLERS[1]
    dead = subprocess.Popen(["true"])
    dead.wait()
    processes.pid_file(ctl).parent.mkdir(parents=True)
    processes.pid_file(ctl).write_text(str(dead.pid))
    log = state / "logs" / f"{ctl.name}.log"
    log.parent.mkdir(parents=True)
    log.write_text("starting\nerror: bad config\n")
    with pytest.raises(ClusterError) as err:
        processes.healthy(ctl)
    assert _first_line(err.value) == (f"{ctl.name} exited while starting: see {log}, fix the cause, then run "
                                      "`mpiplat cluster up` again")
    assert str(err.value).splitlines()[-1] == "error: bad config"


def test_a_failing_kwokctl_names_the_logs_and_the_way_out(state, monkeypatch):
    monkeypatch.setattr(lifecycle.build, "binary", lambda name, comps=None: Path("/bin/false"))
    with pytest.raises(ClusterError) as err:
        lifecycle._kwokctl("create", "cluster", "--name=mpiplat")
    first = _first_line(err.value)
    assert first.startswith("kwokctl create cluster failed (exit 1): see the logs in ")
    assert str(state / "kwok" / "clusters" / "mpiplat" / "logs") in first
    assert "`mpiplat cluster down` and `mpiplat cluster up`" in first


def test_a_failing_kubectl_gives_its_first_error_line_first(state, monkeypatch, tmp_path):
    fake = tmp_path / "kubectl"
    fake.write_text("#!/bin/sh\necho 'error: the server could not find the requested resource' >&2\n"
                    "echo 'more detail' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(lifecycle.build, "binary", lambda name, comps=None: fake)
    with pytest.raises(ClusterError) as err:
        lifecycle.kubectl("get", "pods")
    assert str(err.value).splitlines() == [
        "kubectl get pods failed (exit 1): error: the server could not find the requested resource; "
        "check the cluster with `mpiplat cluster status`", "more detail"]


def test_a_wait_that_times_out_names_the_log_and_the_retry(tmp_path):
    with pytest.raises(ClusterError) as err:
        lifecycle._wait("kube-apiserver", lambda: False, 0, tmp_path / "logs")
    assert _first_line(err.value) == (f"kube-apiserver not ready after 0s: see {tmp_path / 'logs'}, "
                                      "then retry `mpiplat cluster up`")


def test_an_unwritable_kueue_metrics_cert_dir_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(processes, "KUEUE_METRICS_CERTS", tmp_path / "etc" / "kueue")

    def denied(*_):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(processes.shutil, "copy2", denied)
    with pytest.raises(ClusterError) as err:
        processes.install_kueue_metrics_certs(tmp_path / "pki")
    assert _first_line(err.value) == (f"cannot write {tmp_path / 'etc' / 'kueue'} (Kueue reads its metrics "
                                      "certificate from that fixed path): create it writable by you, or run "
                                      "`mpiplat cluster up` as root")


def test_the_kueue_metrics_certificate_is_shared_and_the_last_clusters_down_removes_it(tmp_path, monkeypatch):
    """Kueue reads it from one fixed path: the first local cluster up writes it, another's `down` leaves it while
    a Kueue of another cluster runs, the last one removes it; a certificate not ours is never removed."""
    certs = tmp_path / "etc" / "kueue"
    monkeypatch.setattr(processes, "KUEUE_METRICS_CERTS", certs)
    monkeypatch.setenv("MPIPLAT_STATE", str(tmp_path / "state" / "mpiplat"))
    for name in ("mpiplat", "mpiplat-faults"):
        (tmp_path / "state" / name / "pki").mkdir(parents=True)
        for f in ("tls.crt", "tls.key"):
            (tmp_path / "state" / name / "pki" / f).write_text(f"{name} {f}")
    monkeypatch.setenv("MPIPLAT_CLUSTER", "faults")
    processes.install_kueue_metrics_certs(tmp_path / "state" / "mpiplat-faults" / "pki")
    kueue_runs = {"mpiplat"}  # the default cluster's Kueue, with the faults cluster's certificate
    monkeypatch.setattr(processes, "running_pid", lambda path: 1 if path.parents[1].name in kueue_runs else None)
    processes.remove_kueue_metrics_certs()
    assert (certs / "tls.crt").read_text() == "mpiplat-faults tls.crt"
    kueue_runs.clear()
    monkeypatch.delenv("MPIPLAT_CLUSTER")
    processes.remove_kueue_metrics_certs()
    assert not certs.exists()
    certs.mkdir(parents=True)
    (certs / "tls.crt").write_text("someone else's")
    processes.remove_kueue_metrics_certs()
    assert (certs / "tls.crt").is_file()


@pytest.mark.parametrize("text, message", [
    (None, "cannot read node-pool spec {path}: No such file or directory; pass an existing file to --node-pools"),
    ("pools: [1", "{path} is not valid YAML: fix it, then retry"),
    ("pools:\n  - {name: gpu, count: x, gpus: 8, zones: [a], racks: [r]}",
     "{path}: pools[0].count is 'x'; allowed: an integer >= 0"),
])
def test_node_pool_errors_name_the_file(tmp_path, text, message):
    path = tmp_path / "pools.yml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(nodes.NodePoolError) as err:
        nodes.load(path)
    assert _first_line(err.value) == message.format(path=path)


# ---------------------------------------------------------------- progress

def test_progress_prints_plain_lines_when_not_on_a_terminal(monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")  # as CI often sets: still no spinner in a log file
    out = io.StringIO()
    with progress("building kueue", stream=out, every=0.05) as work:
        time.sleep(0.2)
        work.label = "building kueue, linking"
        time.sleep(0.2)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 4
    assert lines[0] == "    ... building kueue (0s)"
    assert lines[-1] == "    ... building kueue, linking (0s)"
    assert "\x1b" not in out.getvalue()  # no terminal control codes in CI logs


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_shows_a_spinner_with_elapsed_seconds_on_a_terminal(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    out = _Terminal()
    with progress("waiting for kueue", stream=out, every=0.05):
        time.sleep(0.3)
    text = out.getvalue()
    assert re.search(r"waiting for kueue \(\d+s\)", text), text  # 0s, or 1s where a loaded machine drew it late
    assert "    ... " not in text  # the spinner replaces the plain lines


def test_kube_controller_manager_batches_endpoint_updates(tmp_path, monkeypatch):
    """kwokctl's config passes CONTROLLER_MANAGER_PATCH to kube-controller-manager and SCHEDULER_PATCH to
    kube-scheduler, beside the real node's patches."""
    monkeypatch.setattr(configs, "state_dir", lambda: tmp_path)
    monkeypatch.setattr(configs, "module_dir", lambda comp: tmp_path)
    monkeypatch.setattr(configs, "docs", lambda paths: [])
    monkeypatch.setattr(configs.build, "binary", lambda name, comps: tmp_path / name)
    comps = load()
    real = [{"name": "kube-apiserver", "extraArgs": [{"key": "bind-address", "value": "0.0.0.0"}]}]
    conf = next(yaml.safe_load_all(configs.kwok_config(comps, {}, real).read_text()))
    assert conf["componentsPatches"] == [configs.CONTROLLER_MANAGER_PATCH, configs.SCHEDULER_PATCH, *real]
    kcm, scheduler = ({a["key"]: a["value"] for a in p["extraArgs"]} for p in conf["componentsPatches"][:2])
    # EndpointSlices as a default cluster's: unbatched. One instance each: no leader election.
    assert kcm == {"endpoint-updates-batch-period": "1s", "leader-elect": "false"}
    assert scheduler == {"leader-elect": "false"}


def test_the_local_prometheus_scrapes_every_metrics_port_and_reads_the_synced_rules(state, tmp_path):
    """Prometheus's config names each host process that serves metrics, the real node's kubelet, and the rule
    files rulesync writes from the PrometheusRules; its token is its own to read."""
    prometheus = processes.controller("prometheus")
    conf = configs.controller_config(prometheus, tmp_path)
    targets = {j["job_name"]: j["static_configs"][0]["targets"] for j in conf["scrape_configs"]}
    wanted = {c.name: [f"127.0.0.1:{c.metrics_port}"] for c in processes.CONTROLLERS if c.metrics_port}
    assert targets == {**wanted, "kubelet-cadvisor": [f"{realnode.network().node_ip}:{realnode.PORTS['kubelet']}"]}
    assert conf["global"] == {"scrape_interval": "5s", "evaluation_interval": "5s"}
    assert conf["rule_files"] == [str(state / "prometheus" / "rules" / "*.yml")]
    configs.write_prometheus_files("t0ken")
    assert (state / "prometheus" / "token").stat().st_mode & 0o077 == 0


def _prometheus_rule(name: str, labels: dict, alert: str = "A") -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "labels": labels},
            "spec": {"groups": [{"name": "g", "rules": [{"alert": alert, "expr": "up == 0"}]}]}}


def test_rulesync_writes_the_selected_prometheus_rules_and_removes_the_others(tmp_path):
    """As the Prometheus Operator: a PrometheusRule whose labels match the selector is a rule file, one that
    no longer matches or is gone is removed, and a sync that changes nothing says so (no reload)."""
    ours = _prometheus_rule("ours", {**rulesync.RULE_SELECTOR, "x": "y"})
    other = _prometheus_rule("other", {"app.kubernetes.io/part-of": "someone-else"})
    files = rulesync.selected([ours, other], rulesync.RULE_SELECTOR)
    assert list(files) == ["ns-ours.yml"]
    assert yaml.safe_load(files["ns-ours.yml"]) == {"groups": ours["spec"]["groups"]}
    (tmp_path / "ns-stale.yml").write_text("groups: []\n")
    assert rulesync.write(tmp_path, files) is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ns-ours.yml"]
    assert rulesync.write(tmp_path, files) is False
    assert rulesync.write(tmp_path, rulesync.selected([other], rulesync.RULE_SELECTOR)) is True
    assert list(tmp_path.iterdir()) == []
