"""Verdicts: what one test showed, and a requirement's verdict from its tests.

A test's status is pytest's outcome, except that a passed test which checked less than its row says
(Evidence.partial) is `partial`. A requirement is
- `failed` when any of its tests failed;
- `skipped` when every test skipped (their reasons are its message);
- `partial` when a test is partial, a test skipped beside tests that passed, or a threshold of the row is
  looser than the catalog's (catalog.loosened);
- `passed` otherwise;
- `not run` when the run had no test of it (its profile, `--only`, `-k`): the report still lists it, with why.

Evidence levels, weakest first (REQUIREMENTS.md, "Verdicts"): `objects` (API objects and the API server's
answers; no pod ran), `simulated` (pods on KWOK nodes), `real` (real pods and network). A test's level is
the strongest its pods showed where they really ran (Evidence.ran: the nodes its namespaces' pods were bound
to, placement.ran_on; what the suite asked for, Evidence.placed, is only reported), `objects` when none ran,
lowered to what the test declares it judged (Evidence.at_most), raised to what it exercised itself
(Evidence.showed: a live Prometheus). A test whose pods ran below where it placed them (and that declared no
lower level) showed less than it needs: it is `partial`, never `passed`.
A requirement's level is the weakest that its essential passed and partial tests showed: those that need pods
(placed them, and declared no lower level); a refusal or a read-only check beside them does not lower it. Where
no such test passed, it is the strongest its passed and partial tests showed; where none did, that of its failed
tests; none when all skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

STATUSES = ("passed", "partial", "failed", "skipped", "not run")
LEVELS = ("objects", "simulated", "real")


@dataclass
class Evidence:
    """What one running test showed. The suite's placement fixtures add what they hand out (placed), the
    plugin what its pods ran on when it ends (ran); the test may lower its level or mark itself partial
    through the `evidence` fixture."""

    placed: set[str] = field(default_factory=set)
    ran: set[str] = field(default_factory=set)
    cap: str | None = None
    cap_reason: str = ""
    partial_reasons: list[str] = field(default_factory=list)
    shown: set[str] = field(default_factory=set)

    def placed_pods(self, level: str) -> None:
        _check(level)
        self.placed.add(level)

    def ran_on(self, levels: Iterable[str]) -> None:
        """The levels of the nodes the test's pods were bound to (placement.ran_on)."""
        for level in levels:
            _check(level)
            self.ran.add(level)

    def showed(self, level: str) -> None:
        """The test itself exercised a live system at `level` other than through its pods (e.g. a Prometheus
        that evaluated the rules under test: real); at_most does not lower it."""
        _check(level)
        self.shown.add(level)

    def at_most(self, level: str, reason: str) -> None:
        """The test judged no more than `level`, whatever its pods ran on (e.g. it read objects only)."""
        _check(level)
        if self.cap is None or LEVELS.index(level) < LEVELS.index(self.cap):
            self.cap, self.cap_reason = level, reason

    def partial(self, reason: str) -> None:
        """The test checks less than its catalog row says: it reports `partial`, never `passed`."""
        self.partial_reasons.append(reason)

    @property
    def needed(self) -> str:
        """What the test needs its pods to show: where it placed them, unless it declared less (at_most)."""
        placed = max(self.placed, key=LEVELS.index, default="objects")
        return min(placed, self.cap, key=LEVELS.index) if self.cap else placed

    @property
    def short(self) -> str:
        """Why the test showed less than it needs ("" when it did not)."""
        if self.shown or LEVELS.index(self.level) >= LEVELS.index(self.needed):
            return ""
        return (f"its pods were placed to run {self.needed}, but " +
                (f"ran {'/'.join(sorted(self.ran, key=LEVELS.index))} only" if self.ran else "none ran"))

    @property
    def level(self) -> str:
        ran = max(self.ran, key=LEVELS.index, default="objects")
        capped = min(ran, self.cap, key=LEVELS.index) if self.cap else ran
        return max([capped, *self.shown], key=LEVELS.index)

    def outcome(self, pytest_outcome: str) -> dict:
        """Status, evidence and what qualifies them, for a test that ended with `pytest_outcome`."""
        ran = pytest_outcome != "skipped"
        short = self.short
        reasons = [*self.partial_reasons, *([short] if short else [])]
        partial = pytest_outcome == "passed" and bool(reasons)
        return {"status": "partial" if partial else pytest_outcome,
                "evidence": self.level if ran else None,
                "needed": self.needed if ran else None,
                "placed": sorted(self.placed, key=LEVELS.index),
                "ran": sorted(self.ran, key=LEVELS.index),
                "evidence_note": self._note() if ran else "",
                "partial": reasons if partial else []}

    def _note(self) -> str:
        """Why the level is below what the test's pods could show: its own cap, or pods that did not run where
        the suite placed them."""
        if self.cap and self.cap == self.level:
            return self.cap_reason
        return self.short


def _check(level: str) -> None:
    if level not in LEVELS:
        raise ValueError(f"evidence level {level!r}: allowed {', '.join(LEVELS)}")


def _strongest(levels: Iterable[str | None]) -> str | None:
    return max((lv for lv in levels if lv), key=LEVELS.index, default=None)


def _weakest(levels: Iterable[str | None]) -> str | None:
    return min((lv for lv in levels if lv), key=LEVELS.index, default=None)


def requirement(tests: list[dict], loosened: Iterable[dict] = ()) -> dict:
    """The verdict of one requirement from its tests' outcomes (dicts with status, message, evidence,
    partial) and the loosened thresholds of its row: status, evidence, message and notes."""
    states = [t["status"] for t in tests]
    flags = [lo["text"] for lo in loosened]
    notes = [f"{t['name']}: {reason}" for t in tests if t["status"] == "partial"
             for reason in t.get("partial") or [t["message"] or "checks less than its row says"]]
    if "failed" in states:
        status = "failed"
    elif all(s == "skipped" for s in states):
        status = "skipped"
    else:
        notes += [f"{t['name']} skipped: {t['message']}" for t in tests if t["status"] == "skipped"]
        notes += [f"threshold looser than the catalog's: {f}" for f in flags]
        status = "partial" if notes else "passed"
    shown = [t for t in tests if t["status"] in ("passed", "partial")]
    essential = [t.get("evidence") for t in shown if (t.get("needed") or "objects") != "objects"]
    evidence = (_weakest(essential) or _strongest(t.get("evidence") for t in shown)
                or _strongest(t.get("evidence") for t in tests if t["status"] == "failed"))
    # Why the row shows no more than its level, in the words of the tests that showed that level.
    why = "; ".join(f"{t['name']}: {t['evidence_note']}" for t in shown
                    if t.get("evidence") == evidence and t.get("evidence_note"))
    if status in ("failed", "skipped"):
        message = next((t["message"] for t in tests if t["status"] == status and t["message"]), "")
    else:
        message = "; ".join(notes) or (f"shown {evidence}: {why}" if why else "")
    return {"status": status, "evidence": evidence, "evidence_note": why, "message": message, "notes": notes,
            "loosened": flags,
            "diagnosis": next((t.get("diagnosis", "") for t in tests
                               if t["status"] == "failed" and t.get("diagnosis")), "")}


def short_of_profile(requirements: Mapping[str, dict], where: Mapping[str, str]) -> list[str]:
    """The rows of a run that showed less than its profile expects (a strict run exits non-zero for them):
    failed, skipped or partial, or passed with less than `real` evidence where the catalog runs the row on
    real pods (`where` names real: the cluster could have shown it for real). Rows not run are not counted."""
    short = []
    for rid, r in requirements.items():
        first = (r.get("message") or "").splitlines()[0][:120] if r.get("message") else ""
        if r["status"] in ("failed", "skipped", "partial"):
            short.append(f"{rid} {r['status']}" + (f": {first}" if first else ""))
        elif r["status"] == "passed" and "real" in where.get(rid, "") and r.get("evidence") != "real":
            short.append(f"{rid} shown {r.get('evidence') or 'by no pod'}, not real")
    return short


def aggregate(outcomes: list[dict], loosened: Iterable[dict] = (),
              not_run: Mapping[str, str] | None = None) -> dict[str, dict]:
    """Per requirement (sorted by id): its tests, total duration and verdict (see `requirement`). Each row
    of `not_run` ({id: why}) that no outcome names is listed as `not run`, its message saying why."""
    loosened = list(loosened)
    grouped: dict[str, list[dict]] = {}
    for o in outcomes:
        grouped.setdefault(o["requirement"], []).append(o)
    reqs = {rid: {"tests": tests, "duration_s": sum(t["duration_s"] for t in tests),
                  **requirement(tests, [lo for lo in loosened if rid in lo["rows"]])}
            for rid, tests in grouped.items()}
    for rid, why in (not_run or {}).items():
        reqs.setdefault(rid, {"tests": [], "duration_s": 0, "status": "not run", "evidence": None,
                              "message": f"not run: {why}", "notes": [], "loosened": [], "diagnosis": ""})
    return dict(sorted(reqs.items()))


def summary(reqs: dict[str, dict]) -> dict[str, int]:
    return {s: sum(r["status"] == s for r in reqs.values()) for s in STATUSES}


def by_evidence(reqs: dict[str, dict]) -> dict[str, dict[str, int]]:
    """Requirements counted per evidence level (strongest first; "none": nothing shown) and status."""
    table = {level: dict.fromkeys(STATUSES, 0) for level in (*reversed(LEVELS), "none")}
    for r in reqs.values():
        table[r["evidence"] or "none"][r["status"]] += 1
    return table
