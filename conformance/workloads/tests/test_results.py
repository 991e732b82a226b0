"""Unit tests of the result-line format and parser (no MPI needed)."""

from __future__ import annotations

import pytest

from mpiplat.conformance.workloads import results
from mpiplat.conformance.workloads.results import CheckFailed, ResultFormatError

GOOD = 'MPIPLAT_RESULT {"program": "pi", "check": "pass", "ranks": 4, "estimate": 3.14159, "abs_error": 1e-15}'


def test_parse_reads_result_lines_and_ignores_everything_else() -> None:
    text = "\n".join([
        "pi on 4 ranks, 10000000 intervals: 3.141592653589794: PASS",
        GOOD,
        "",
        "--------------------------------------------------------------------------",
        "prterun detected that one or more processes exited with non-zero status,",
        "RESULT {not ours}",
        'XMPIPLAT_RESULT {"program": "x"}',
        'MPIPLAT_RESULT {"program": "allreduce", "check": "fail", "ranks": 2, "failed_ranks": [0, 1]}\r',
    ])
    parsed = results.parse(text)
    assert parsed == [
        {"program": "pi", "check": "pass", "ranks": 4, "estimate": 3.14159, "abs_error": 1e-15},
        {"program": "allreduce", "check": "fail", "ranks": 2, "failed_ranks": [0, 1]},
    ]


def test_parse_accepts_log_prefixes() -> None:
    text = ("2025-01-01T00:00:00.000000000Z " + GOOD + "\n"
            "[1,0]<stdout>:" + GOOD + "\n"
            "  " + GOOD)
    assert [r["program"] for r in results.parse(text)] == ["pi", "pi", "pi"]


def test_parse_of_text_without_results_is_empty() -> None:
    assert results.parse("hello\nworld\n") == []


@pytest.mark.parametrize("line, message", [
    ('MPIPLAT_RESULT {"program": "pi", "check": "pass", "ranks": 4', "malformed JSON"),
    ("MPIPLAT_RESULT", "malformed JSON"),
    ("MPIPLAT_RESULT pass", "malformed JSON"),
    ('MPIPLAT_RESULT ["pi"]', "must be a JSON object"),
    ('MPIPLAT_RESULT {"check": "pass", "ranks": 1}', "'program'"),
    ('MPIPLAT_RESULT {"program": "pi", "check": "ok", "ranks": 1}', "'check' must be one of"),
    ('MPIPLAT_RESULT {"program": "pi", "check": "pass", "ranks": 0}', "'ranks' must be an integer >= 1"),
    ('MPIPLAT_RESULT {"program": "pi", "check": "pass", "ranks": "4"}', "'ranks'"),
])
def test_malformed_result_lines_raise_a_clear_error_naming_the_line(line: str, message: str) -> None:
    with pytest.raises(ResultFormatError, match=message) as info:
        results.parse(f"first line\n{line}\n")
    assert "line 2" in str(info.value)


def test_format_line_round_trips() -> None:
    record = {"program": "pingpong", "check": "pass", "ranks": 2, "size_bytes": 8, "latency_us": 1.5}
    line = results.format_line(record)
    assert line.startswith("MPIPLAT_RESULT {")
    assert results.parse(line) == [record]
    with pytest.raises(ResultFormatError):
        results.format_line({"program": "pingpong", "check": "maybe", "ranks": 2})


def _records(*checks: str, program: str = "allreduce", ranks: int = 2) -> list[results.Result]:
    return [{"program": program, "check": c, "ranks": ranks} for c in checks]


def test_assert_passed_returns_the_programs_records() -> None:
    mixed = _records("pass", "pass") + _records("fail", program="pi")
    assert results.assert_passed(mixed, "allreduce", ranks=2) == _records("pass", "pass")


def test_assert_passed_fails_on_any_failed_check() -> None:
    with pytest.raises(CheckFailed, match=r"allreduce: 1/3 result\(s\) failed"):
        results.assert_passed(_records("pass", "fail", "pass"), "allreduce")


def test_assert_passed_fails_when_the_program_reported_nothing() -> None:
    with pytest.raises(CheckFailed, match="pingpong: no MPIPLAT_RESULT line"):
        results.assert_passed(_records("pass"), "pingpong")


def test_assert_passed_checks_the_rank_count() -> None:
    with pytest.raises(CheckFailed, match=r"expected ranks=4, results report \[2\]"):
        results.assert_passed(_records("pass"), "allreduce", ranks=4)
