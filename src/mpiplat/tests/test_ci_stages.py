""".ci/stages.py, the schedule of `make test`: every lane named once, every file it names exists, and a
failed step stops the schedule after its stage, with each time printed."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _stages():
    spec = importlib.util.spec_from_file_location("ci_stages", ROOT / ".ci" / "stages.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_lanes_are_named_once_and_the_files_they_name_exist():
    stages = _stages()
    names = [lane.name for stage in stages.STAGES for lane in stage.lanes]
    assert len(names) == len(set(names)), names
    for stage in stages.STAGES:
        for lane in stage.lanes:
            assert set(lane.after) <= {other.name for other in stage.lanes} - {lane.name}, (stage.name, lane.name)
    for rel in [stages.SCALE_ROWS, stages.TENANCY, stages.INVALID, *stages.SDK.split(), *stages.CLUSTER_2.split(),
                stages.TORCHBENCH]:
        assert (ROOT / rel).is_file(), rel
    assert (ROOT / stages.WORKLOADS / "tests").is_dir()


def test_the_fault_lanes_run_every_fault_once():
    from mpiplat.conformance import faultmatrix

    stages = _stages()
    lanes = [lane for stage in stages.STAGES for lane in stage.lanes if any("-m faults" in s for s in lane.steps)]
    shares = [faultmatrix.share(lane.env.get("MPIPLAT_FAULT_SHARE", "1/1")) for lane in lanes]
    assert sorted(sum(shares, [])) == sorted(faultmatrix.FAULTS)
    assert len({lane.env.get("MPIPLAT_CLUSTER") for lane in lanes}) == len(lanes), "a fault lane needs its own cluster"


def test_a_failed_step_ends_its_lane_lets_the_stage_finish_and_stops_the_schedule(capsys):
    stages = _stages()
    schedule = [stages.Stage("one", "why", [stages.Lane("a", ["echo hi", "exit 3", "echo never"]),
                                            stages.Lane("b", ["sleep 0.2", "echo b-done"])]),
                stages.Stage("two", "why", [stages.Lane("c", ["echo not-reached"])])]
    assert stages.run(schedule) == 1
    out = capsys.readouterr().out
    assert "[a] hi" in out and "[a] == step 2 FAILED (exit 3)" in out and "never" not in out
    assert "[b] b-done" in out and "[b] == step 2 ok" in out
    assert "stage one FAILED" in out and "not-reached" not in out
    assert "FAILED: a step 2: exit 3" in out and "== times: one " in out
    assert "== CPU: the machine busy " in out and "; the steps " in out


def test_the_matrix_runs_the_cluster_profile_at_each_kubernetes_version_and_every_version_after_a_failed_one(
        capsys):
    from mpiplat.versions import kubernetes_matrix

    stages = _stages()
    schedule = stages.matrix(kubernetes_matrix())
    assert [s.name for s in schedule] == [f"kubernetes-{v}" for v in kubernetes_matrix()] + ["kubernetes-upgrade"]
    (upgrade,) = schedule[-1].lanes
    assert f"mpiplat cluster up --kubernetes {kubernetes_matrix()[0]}" in upgrade.steps
    assert any("-m matrix" in s and stages.K8S_UPGRADE in s for s in upgrade.steps)
    assert (ROOT / stages.K8S_UPGRADE).is_file()
    for stage, version in zip(schedule[:-1], kubernetes_matrix(), strict=True):
        (lane,) = stage.lanes
        assert lane.env["MPIPLAT_CLUSTER"] == "matrix"
        assert f"mpiplat cluster up --kubernetes {version}" in lane.steps
        assert any("--profile cluster" in s and f"reports/matrix/{version}" in s for s in lane.steps)
    failing = [stages.Stage("one", "why", [stages.Lane("a", ["exit 3"])]),
               stages.Stage("two", "why", [stages.Lane("b", ["echo reached"])])]
    assert stages.run(failing, keep_going=True) == 1
    out = capsys.readouterr().out
    assert "[b] reached" in out and "FAILED: a step 1" in out
    assert "== stage one FAILED in" in out and "== stage two ok in" in out  # each stage says its own outcome
    with pytest.raises(SystemExit):
        stages.main(["--matrix", "1.33", "--list"])
    assert "Kubernetes '1.33' is not pinned for the local cluster" in capsys.readouterr().err


def test_a_lane_after_others_starts_when_they_end_and_is_skipped_if_one_failed(tmp_path, capsys):
    stages = _stages()
    mark = tmp_path / "a-ended"
    schedule = [stages.Stage("one", "why", [stages.Lane("last", [f"test -e {mark} && echo saw-a"], after=["a", "b"]),
                                            stages.Lane("a", ["sleep 0.5", f"touch {mark}"]),
                                            stages.Lane("b", ["true"])])]
    assert stages.run(schedule) == 0
    assert "[last] saw-a" in capsys.readouterr().out
    schedule = [stages.Stage("one", "why", [stages.Lane("last", ["echo never"], after=["a"]),
                                            stages.Lane("a", ["exit 2"])])]
    assert stages.run(schedule) == 1
    out = capsys.readouterr().out
    assert "[last] == skipped: a failed" in out and "never" not in out


def test_each_step_prints_the_cpu_its_processes_used(capsys):
    stages = _stages()
    burn = "python3 -c 'import time; t = time.process_time()\nwhile time.process_time() - t < 1.5: pass'"
    assert stages.run([stages.Stage("s", "why", [stages.Lane("b", [f"bash -c \"{burn}\"", "sleep 1"])])]) == 0
    out = capsys.readouterr().out
    cpu = [float(x) for x in __import__("re").findall(r"\(CPU (\d+) s\)", out)]
    assert len(cpu) == 2 and cpu[0] >= 1 and cpu[1] == 0, out


def test_lane_env_sets_and_unsets(monkeypatch, capsys):
    stages = _stages()
    monkeypatch.setenv("KUBECONFIG", "/some/cluster")
    schedule = [stages.Stage("s", "why", [stages.Lane("x", ['echo "k=${KUBECONFIG-unset} c=$MPIPLAT_CLUSTER"'],
                                                      env={"KUBECONFIG": None, "MPIPLAT_CLUSTER": "helm"})])]
    assert stages.run(schedule) == 0
    assert "[x] k=unset c=helm" in capsys.readouterr().out


def test_a_lane_with_nice_runs_its_steps_at_that_autogroup_priority(capsys):
    if not Path("/proc/self/autogroup").exists():
        pytest.skip("no autogroup scheduling on this kernel")
    stages = _stages()
    assert stages.run([stages.Stage("s", "why", [stages.Lane("n", ["sleep 0.5; cat /proc/self/autogroup"],
                                                             nice=5)])]) == 0
    assert "nice 5" in capsys.readouterr().out


def test_cpu_by_command_counts_a_process_by_its_script_from_its_start(tmp_path):
    burn = tmp_path / "burn.py"
    burn.write_text("import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end:\n    pass\n")
    sampler = _stages().CommandCpu(every=0.05)
    sampler.start()
    subprocess.run([sys.executable, str(burn)], check=True)
    used = dict(sampler.top(count=10_000))  # every command: under CI's load more than 12 use more CPU than it
    assert 0.3 <= used["python burn.py"] <= 0.7, used


def test_cpu_by_command_follows_a_shell_that_execs_its_last_command(tmp_path):
    """`bash -c "... && pytest"` execs pytest in the shell's process: its CPU is pytest's, not bash's."""
    burn = tmp_path / "burn.py"
    burn.write_text("import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end:\n    pass\n")
    sampler = _stages().CommandCpu(every=0.05)
    sampler.start()
    subprocess.run(["bash", "-c", f"sleep 0.3 && {sys.executable} {burn}"], check=True)
    used = dict(sampler.top(count=10_000))  # every command: under CI's load more than 12 use more CPU than it
    assert 0.3 <= used.get("python burn.py", 0) <= 0.7 and used.get("bash", 0) < 0.2, used


def test_a_failed_step_names_its_failures_again_for_the_end_of_the_log(capsys):
    stages = _stages()
    said = "".join(f"E   line {i}\\n" for i in range(1, 7)) + "other\\nFAILED t.py::test_x - boom\\n"
    failed: list[str] = []
    stages.run_lane(stages.Lane("t", [f"printf '{said}'; exit 1"]), {}, failed, {})
    assert failed[0].splitlines()[1:] == ["  E   line 1", "  E   line 2", "  E   line 3", "  E   line 4",
                                         "  FAILED t.py::test_x - boom"]


def test_cpu_is_told_by_cluster_from_the_state_directory_in_a_daemons_arguments(tmp_path):
    stages = _stages()
    assert stages.cluster_of("/s/mpiplat/kwok/clusters/mpiplat/bin/etcd --name=node0") == "mpiplat"
    assert stages.cluster_of("kubelet --config=/s/mpiplat-faults-2/node/kubelet.yaml") == "faults-2"
    assert stages.cluster_of("mpi-operator --kubeConfig=/s/mpiplat-helm/controllers.kubeconfig") == "helm"
    assert stages.cluster_of("python /work/src/mpiplat/nodes.py") == ""
    sampler = stages.CommandCpu(every=0.05)
    sampler.start()
    burn = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end:\n    pass\n"
    subprocess.run([sys.executable, "-c", burn, f"--config={tmp_path}/mpiplat-selftest-{os.getpid()}/pids/x"],
                   check=True)
    sampler.top()
    assert 0.2 <= dict(sampler.clusters())[f"selftest-{os.getpid()}"] <= 0.6


def test_each_stage_prints_the_machines_cpu_and_its_clusters(capsys):
    stages = _stages()
    assert stages.run([stages.Stage("s", "why", [stages.Lane("n", ["true"])])]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("[stages] == stage s CPU:"))
    assert "the machine busy" in line and "the clusters' daemons" in line, line
