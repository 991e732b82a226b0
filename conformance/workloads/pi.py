"""Distributed pi estimate by midpoint-rule integration of 4 / (1 + x^2) over [0, 1].

Usage: mpiexec -n 4 python pi.py [--intervals 10000000] [--tolerance 1e-8]

The intervals are split into contiguous blocks, one per rank; each rank sums its block in
chunks, the partial sums are combined with Allreduce(SUM), and every rank checks
|estimate - pi| <= tolerance. Deterministic: the midpoint rule's error falls as 1/N^2, so
the default 10**7 intervals land near 1e-14, far inside the default tolerance.

Rank 0 prints ``MPIPLAT_RESULT {"program": "pi", "check": "pass"|"fail", "ranks": n,
"estimate": ..., "abs_error": ..., "tolerance": ...}`` and a short human line; all ranks
exit 1 when the error is above tolerance.

Standalone on purpose (shipped into MPI images): imports only mpi4py, numpy and the stdlib.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import numpy as np
from mpi4py import MPI

PROGRAM = "pi"
PREFIX = "MPIPLAT_RESULT"
CHUNK = 1 << 20


def emit(record: dict) -> None:
    print(f"{PREFIX} {json.dumps(record, sort_keys=True)}", flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--intervals", type=int, default=10_000_000, help="total intervals (default: 10000000)")
    parser.add_argument("--tolerance", type=float, default=1e-8, help="largest accepted |error| (default: 1e-8)")
    args = parser.parse_args(argv)
    if args.intervals < 1 or args.tolerance < 0:
        parser.error("need --intervals >= 1 and --tolerance >= 0")
    return args


def partial_sum(lo: int, hi: int, n: int) -> float:
    """Sum of 4 / (1 + x^2) * h over midpoints of intervals lo..hi-1 of n."""
    h = 1.0 / n
    total = 0.0
    for start in range(lo, hi, CHUNK):
        x = (np.arange(start, min(start + CHUNK, hi), dtype=np.float64) + 0.5) * h
        total += float(np.sum(4.0 / (1.0 + x * x)))
    return total * h


def main(argv: list[str] | None = None) -> int:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    args = parse_args(argv)
    n = args.intervals
    lo, hi = rank * n // size, (rank + 1) * n // size
    comm.Barrier()
    start = MPI.Wtime()
    local = np.array([partial_sum(lo, hi, n)])
    total = np.zeros(1)
    comm.Allreduce(local, total, op=MPI.SUM)
    elapsed = comm.allreduce(MPI.Wtime() - start, op=MPI.MAX)
    estimate = float(total[0])
    error = abs(estimate - math.pi)
    ok = error <= args.tolerance
    if not ok:
        print(f"pi: rank {rank}: |{estimate!r} - pi| = {error:.3e} > tolerance {args.tolerance:.1e}",
              file=sys.stderr, flush=True)
    # Every rank checked; rank 0 reports whether all agree (they must: they hold the same sum).
    verdicts = comm.gather(ok, root=0)
    if rank == 0:
        assert verdicts is not None
        passed = all(verdicts)
        emit({"program": PROGRAM, "check": "pass" if passed else "fail", "ranks": size, "intervals": n,
              "estimate": estimate, "abs_error": error, "tolerance": args.tolerance,
              "time_s": round(elapsed, 6), "failed_ranks": [r for r, v in enumerate(verdicts) if not v],
              "mpi_library": MPI.Get_library_version().replace("\0", "").strip().splitlines()[0]})
        print(f"pi on {size} ranks, {n} intervals: {estimate:.15f}, |error| {error:.2e} "
              f"(tolerance {args.tolerance:.1e}): {'PASS' if passed else 'FAIL'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
