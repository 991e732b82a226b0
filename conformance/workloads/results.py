"""The one result-line format of the workload programs, and its parser.

Every workload program (allreduce.py, pingpong.py, pi.py) prints, besides human lines,
result lines of the form::

    MPIPLAT_RESULT {"program": "allreduce", "check": "pass", "ranks": 4, ...figures}

The JSON object always has ``program`` (str), ``check`` ("pass" or "fail") and ``ranks``
(int >= 1); the other keys are the program's figures. The programs inline their own
two-line printer (they ship alone into MPI images); this module is what the suite uses to
read them back. The marker may follow a log prefix (``kubectl logs --timestamps``, Open
MPI's ``--tag-output``) as long as a space, ``:``, ``>`` or ``]`` separates them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

PREFIX = "MPIPLAT_RESULT"
CHECKS = ("pass", "fail")

_LINE = re.compile(rf"(?:^|(?<=[\s:>\]])){PREFIX}(?=\s|$)(?P<payload>.*)$")

Result = dict[str, Any]


class ResultFormatError(ValueError):
    """A line carries the result marker but not a valid result."""


class CheckFailed(AssertionError):
    """A program's own check failed, or it reported nothing."""


def format_line(record: Result) -> str:
    """The line a program prints for ``record`` (same format as the programs' inline printer)."""
    _validate(record, where="record")
    return f"{PREFIX} {json.dumps(record, sort_keys=True)}"


def _validate(record: object, *, where: str) -> Result:
    if not isinstance(record, dict):
        raise ResultFormatError(f"{where}: result must be a JSON object, got {type(record).__name__}")
    program = record.get("program")
    if not isinstance(program, str) or not program:
        raise ResultFormatError(f"{where}: 'program' must be a non-empty string, got {program!r}")
    if record.get("check") not in CHECKS:
        raise ResultFormatError(f"{where}: 'check' must be one of {CHECKS}, got {record.get('check')!r}")
    ranks = record.get("ranks")
    if not isinstance(ranks, int) or isinstance(ranks, bool) or ranks < 1:
        raise ResultFormatError(f"{where}: 'ranks' must be an integer >= 1, got {ranks!r}")
    return record


def parse(text: str) -> list[Result]:
    """All result records in ``text`` (program output), in order. Other lines are ignored.

    Raises ResultFormatError naming the line when a marked line holds malformed JSON or
    lacks the required keys.
    """
    results: list[Result] = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = _LINE.search(line)
        if match is None:
            continue
        payload = match.group("payload").strip()
        where = f"line {number}"
        try:
            record = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise ResultFormatError(f"{where}: malformed JSON after {PREFIX} ({exc.msg} at column "
                                    f"{exc.colno}): {payload[:200]!r}") from exc
        results.append(_validate(record, where=where))
    return results


def select(results: Iterable[Result], program: str) -> list[Result]:
    """The records of one program."""
    return [r for r in results if r["program"] == program]


def assert_passed(results: Iterable[Result], program: str, *, ranks: int | None = None) -> list[Result]:
    """Return ``program``'s records after checking it reported at least one, all with check "pass"
    (and, when given, all with ``ranks``). Raises CheckFailed with the offending records."""
    mine = select(results, program)
    if not mine:
        raise CheckFailed(f"{program}: no {PREFIX} line found")
    failed = [r for r in mine if r["check"] != "pass"]
    if failed:
        shown = "\n".join(json.dumps(r, sort_keys=True) for r in failed[:5])
        raise CheckFailed(f"{program}: {len(failed)}/{len(mine)} result(s) failed their check:\n{shown}")
    if ranks is not None:
        wrong = sorted({r["ranks"] for r in mine if r["ranks"] != ranks})
        if wrong:
            raise CheckFailed(f"{program}: expected ranks={ranks}, results report {wrong}")
    return mine
