"""The fault matrix offline: its mechanics (mpiplat.localcluster.faults) and its data (conformance/faults.yml,
mpiplat.conformance.faultmatrix) name the same faults, the docs' table is the one generated from the data,
and every catalog row that runs locally has a fault. (Against the cluster: test_fault_matrix.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from mpiplat.conformance import faultmatrix
from mpiplat.conformance.catalog import REQUIREMENTS
from mpiplat.localcluster import faults

DOC = Path(__file__).resolve().parents[2] / "docs" / "field-engineer.md"
LOCAL = {rid for rid, row in REQUIREMENTS.items() if "sim" in row["where"] or "real" in row["where"]}


def test_the_mechanics_and_the_data_name_the_same_faults_each_once():
    names = [f.name for f in faults.matrix()]
    assert len(names) >= 15 and len(set(names)) == len(names)
    assert names == list(faultmatrix.FAULTS), "localcluster/faults.py and conformance/faults.yml differ"


def test_the_docs_table_is_generated_from_the_data():
    text = DOC.read_text()
    assert faultmatrix.with_table(text) == text, (
        "docs/field-engineer.md's fault table is not conformance/faults.yml's: run "
        "python -m mpiplat.conformance.faultmatrix --write docs/field-engineer.md")


def test_every_local_catalog_row_has_a_fault():
    covered = {rid for e in faultmatrix.FAULTS.values() for rid in e.requirements}
    assert LOCAL <= covered, f"local rows without a fault: {sorted(LOCAL - covered)}"


@pytest.mark.parametrize("n", [1, 2, 3])
def test_the_shares_split_the_matrix_once_each_in_about_equal_time(n):
    shares = [faultmatrix.share(f"{k}/{n}") for k in range(1, n + 1)]
    assert sorted(sum(shares, [])) == sorted(faultmatrix.FAULTS)
    seconds = [sum(faultmatrix.FAULTS[name].seconds for name in share) for share in shares]
    longest = max(e.seconds for e in faultmatrix.FAULTS.values())
    assert max(seconds) - min(seconds) <= longest, seconds


@pytest.mark.parametrize("spec", ["3/2", "0/2", "2", "a/b", ""])
def test_a_wrong_share_is_refused_naming_it(spec):
    with pytest.raises(ValueError, match=re.escape(f"fault share {spec!r}: expected K/N")):
        faultmatrix.share(spec)


@pytest.mark.parametrize("change, says", [
    (lambda d: d["faults"]["kueue-stopped"]["expect"].update({"XYZ-01": ["w"]}), "expect.XYZ-01 is not a catalog row"),
    (lambda d: d["faults"]["kueue-stopped"]["expect"].update({"INS-01": []}), "expect.INS-01 needs words to find"),
    (lambda d: d["faults"]["kueue-stopped"]["expect"].update({"INS-01": [" "]}), "expect.INS-01 needs words to find"),
    (lambda d: d["faults"]["kueue-stopped"].update({"waits": 2}), "waits 2 is not in (0, 1]"),
    (lambda d: d["faults"]["kueue-stopped"].update({"affects": ["JOB-01"]}), "affects JOB-01, which is not in sample"),
])
def test_wrong_data_is_refused_naming_the_fault_and_field(tmp_path, change, says):
    data = yaml.safe_load(faultmatrix.FILE.read_text())
    change(data)
    path = tmp_path / "faults.yml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match=re.escape(f"kueue-stopped: {says}")):
        faultmatrix._load(path)


def test_the_table_is_replaced_only_between_its_markers():
    text = f"intro\n{faultmatrix.BEGIN}\nold table\n{faultmatrix.END}\nafter\n"
    fm = faultmatrix
    assert fm.with_table(text) == f"intro\n{fm.BEGIN}\n{fm.table()}{fm.END}\nafter\n"
    with pytest.raises(ValueError, match="needs one line"):
        faultmatrix.with_table("no markers\n")


@pytest.mark.parametrize("obj, kept", [
    ({"kind": "X", "metadata": {"name": "a", "uid": "u", "resourceVersion": "1", "managedFields": [],
                                "creationTimestamp": "t", "labels": {"l": "v"}}, "status": {"s": 1}, "spec": {}},
     {"kind": "X", "metadata": {"name": "a", "labels": {"l": "v"}}, "spec": {}}),
])
def test_a_saved_object_is_created_again_without_what_the_server_set(obj, kept):
    assert faults.clean(obj) == kept
    assert "uid" in obj["metadata"]  # the saved copy itself is left as read


def test_undo_without_apply_changes_nothing(monkeypatch):
    """undo() is idempotent: a fault that was never applied (or already undone) touches nothing."""
    calls = []
    monkeypatch.setattr(faults, "kubectl", lambda *a, **kw: calls.append(a))
    for f in faults.matrix():
        if isinstance(f, faults.DeletedObjects | faults.ChangedObject | faults.Scaled | faults.NodesCordoned
                      | faults.KueueConfigured | faults.WorkerMemoryCapped):
            f.undo()
    assert calls == []


def test_the_kueue_faults_drop_what_they_say_from_the_local_configuration(monkeypatch):
    monkeypatch.setattr(faults.configs, "controller_config",
                        lambda ctl, pki: {"waitForPodsReady": {"enable": True}, "integrations": {
                            "frameworks": ["kubeflow.org/mpijob", "trainer.kubeflow.org/trainjob"]}})
    by_name = {f.name: f for f in faults.matrix()}
    assert "waitForPodsReady" not in by_name["kueue-default-pods-ready-timeout"].config()
    off = by_name["kueue-no-waitforpodsready"].config()
    assert off["featureGates"] == {"DisableWaitForPodsReady": True} and off["waitForPodsReady"] == {"enable": True}
    assert by_name["kueue-no-mpijob"].config()["integrations"]["frameworks"] == ["trainer.kubeflow.org/trainjob"]


def test_each_fault_samples_two_rows_it_should_not_touch_and_the_matrix_samples_them_all():
    sampled = set()
    for e in faultmatrix.FAULTS.values():
        rows = e.sample()
        assert len(rows) == 2 and not set(rows) & (set(e.expect) | set(e.affects)), (e.name, rows)
        assert e.wait_scale >= 1 or set(rows) <= set(faultmatrix.NO_WAIT), (e.name, rows)
        sampled |= set(rows)
    assert sampled == set(faultmatrix.SAMPLE)
