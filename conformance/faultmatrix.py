"""The fault matrix's expectations (faults.yml, next to the catalog): under each fault of the local cluster,
which rows must fail and with which words, the suite's wait scale, and the rows sampled to show the fault
touches nothing else. The mechanics (how a fault breaks the cluster and puts it back) are
mpiplat.localcluster.faults', by the same names.

    python -m mpiplat.conformance.faultmatrix                # the docs table, on stdout
    python -m mpiplat.conformance.faultmatrix --write FILE   # it replaces the table between FILE's markers
"""

from __future__ import annotations

import argparse
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

import yaml

from mpiplat.conformance.catalog import REQUIREMENTS

FILE = Path(__file__).with_name("faults.yml")
BEGIN = "<!-- fault table: generated from conformance/faults.yml by `python -m mpiplat.conformance.faultmatrix " \
        "--write docs/field-engineer.md` -->"
END = "<!-- end of the fault table -->"


@dataclass(frozen=True)
class Expectation:
    """One fault's row of faults.yml."""

    name: str
    what: str
    expect: dict[str, tuple[str, ...]]
    wait_scale: float = 1.0
    affects: tuple[str, ...] = ()
    seconds: int = 0

    @property
    def requirements(self) -> list[str]:
        return sorted(self.expect)

    def sample(self, n: int = 2) -> list[str]:
        """`n` rows of SAMPLE this fault must leave passing, chosen by its name (so the matrix covers them all):
        a fault that broke everything would prove nothing."""
        free = [rid for rid in (SAMPLE if self.wait_scale >= 1 else NO_WAIT)
                if rid not in self.expect and rid not in self.affects]
        start = zlib.crc32(self.name.encode()) % len(free)
        return sorted({free[(start + i) % len(free)] for i in range(min(n, len(free)))})


def _load(path: Path) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, Expectation]]:
    data = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    no_wait = tuple(data["sample"]["no_wait"])
    sample = (*no_wait, *data["sample"]["more"])
    out, wrong = {}, []
    for name, f in data["faults"].items():
        e = Expectation(name, f["what"], {rid: tuple(words) for rid, words in f["expect"].items()},
                        float(f.get("waits", 1)), tuple(f.get("affects", ())), int(f.get("seconds", 0)))
        wrong += [f"{name}: expect.{rid} is not a catalog row" for rid in e.expect if rid not in REQUIREMENTS]
        wrong += [f"{name}: expect.{rid} needs words to find" for rid, words in e.expect.items()
                  if not words or not all(w.strip() for w in words)]
        wrong += [f"{name}: waits {e.wait_scale:g} is not in (0, 1]"] if not 0 < e.wait_scale <= 1 else []
        wrong += [f"{name}: affects {rid}, which is not in sample" for rid in e.affects if rid not in sample]
        out[name] = e
    wrong += [f"sample: {rid} is not a catalog row" for rid in sample if rid not in REQUIREMENTS]
    if wrong:
        raise ValueError(f"{path}: " + "; ".join(wrong))
    return no_wait, sample, out


NO_WAIT, SAMPLE, FAULTS = _load(FILE)


def share(spec: str) -> list[str]:
    """The faults of share `spec`, "K/N" (K of N shares of about equal measured time, their `seconds`), in the
    matrix's order: the longest fault goes to the share with the least time so far. N clusters run the N shares
    beside each other; "1/1" is every fault."""
    try:
        k, n = (int(x) for x in spec.split("/"))
    except ValueError:
        k = n = 0
    if not 1 <= k <= n:
        raise ValueError(f"fault share {spec!r}: expected K/N with 1 <= K <= N, e.g. 1/2")
    loads, owner = [0] * n, {}
    for e in sorted(FAULTS.values(), key=lambda e: (-e.seconds, e.name)):
        owner[e.name] = loads.index(min(loads))
        loads[owner[e.name]] += e.seconds
    return [name for name in FAULTS if owner[name] == k - 1]


def table() -> str:
    """The docs' table of the matrix, one line per fault."""
    lines = ["| fault | what it breaks | rows that must fail | their message must say | waits | time |",
             "|---|---|---|---|---|---|"]
    for e in FAULTS.values():
        words = "; ".join(f"{rid}: " + ", ".join(f'"{w}"' for w in e.expect[rid]) for rid in e.requirements)
        lines.append(f"| `{e.name}` | {e.what} | {', '.join(e.requirements)} | {words} | x{e.wait_scale:g} | "
                     f"{e.seconds} s |")
    return "\n".join(lines) + "\n"


def with_table(text: str) -> str:
    """`text` with the table between its BEGIN and END markers replaced by table()."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"the text needs one line {BEGIN!r} and, after it, one line {END!r}")
    head, rest = text.split(BEGIN + "\n", 1)
    return f"{head}{BEGIN}\n{table()}{END}{rest.split(END, 1)[1]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mpiplat.conformance.faultmatrix",
                                     description="The fault matrix's docs table, from conformance/faults.yml.")
    parser.add_argument("--write", type=Path, metavar="FILE", help="replace the table between FILE's markers")
    args = parser.parse_args(argv)
    if args.write is None:
        sys.stdout.write(table())
        return 0
    args.write.write_text(with_table(args.write.read_text()))
    print(f"wrote the fault table ({len(FAULTS)} faults) into {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
