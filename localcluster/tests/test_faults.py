"""The fault matrix offline: its list (mpiplat.localcluster.faults), the docs' table and the catalog agree,
and every catalog row that runs locally has a fault. (Against the cluster:
test_fault_matrix.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mpiplat.conformance.catalog import REQUIREMENTS
from mpiplat.localcluster import faults

DOC = Path(__file__).resolve().parents[2] / "docs" / "field-engineer.md"
LOCAL = {rid for rid, row in REQUIREMENTS.items() if "sim" in row["where"] or "real" in row["where"]}


def _section(text: str, title: str) -> str:
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def _table_rows(text: str, first_cell: str) -> list[list[str]]:
    """The cells of the table rows whose first cell matches `first_cell` (a regex)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if re.fullmatch(first_cell, cells[0]):
                rows.append(cells)
    return rows


def _doc() -> dict[str, dict]:
    section = _section(DOC.read_text(), "The fault matrix")
    table = {}
    for name, what, rows, words, waits, _time in _table_rows(section, r"`[a-z0-9-]+`"):
        expect = {}
        for part in words.split("; "):
            rid, _, said = part.partition(": ")
            expect[rid] = tuple(re.findall(r'"([^"]+)"', said))
        table[name.strip("`")] = {"what": what, "rows": rows.split(", "), "expect": expect,
                                  "wait_scale": float(waits.lstrip("x"))}
    return table


def test_every_fault_is_a_row_of_the_docs_table_and_the_reverse():
    table = _doc()
    matrix = {f.name: f for f in faults.matrix()}
    assert sorted(table) == sorted(matrix), "the docs table (The fault matrix) and localcluster/faults.py differ"
    for name, f in matrix.items():
        assert table[name] == {"what": f.what, "rows": f.requirements, "expect": dict(sorted(f.expect.items())),
                               "wait_scale": f.wait_scale}, name


def test_every_local_catalog_row_has_a_fault():
    covered = {rid for f in faults.matrix() for rid in f.requirements}
    assert covered <= set(REQUIREMENTS), covered - set(REQUIREMENTS)
    assert LOCAL <= covered, f"local rows without a fault: {sorted(LOCAL - covered)}"
    assert all(0 < f.wait_scale <= 1 for f in faults.matrix())


def test_at_least_15_faults_each_named_once_each_with_words_to_find():
    names = [f.name for f in faults.matrix()]
    assert len(names) >= 15 and len(set(names)) == len(names)
    for f in faults.matrix():
        assert f.expect and all(words and all(w.strip() for w in words) for words in f.expect.values()), f.name


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
    for fault in faults.matrix():
        rows = fault.sample()
        assert len(rows) == 2 and not set(rows) & (set(fault.expect) | set(fault.affects)), (fault.name, rows)
        assert fault.wait_scale >= 1 or set(rows) <= set(faults.NO_WAIT), (fault.name, rows)
        assert set(fault.affects) <= set(faults.SAMPLE), (fault.name, fault.affects)
        sampled |= set(rows)
    assert sampled == set(faults.SAMPLE)
