"""Allreduce(SUM) correctness check; every rank verifies the global sum.

Usage: mpiexec -n 4 python allreduce.py [--counts 1,1000,262144] [--dtypes float64,int64] [--for-seconds S
                                        [--until-exists PATH]]

Rank r contributes x_r[i] = (r + 1) * 1000 + (i % 997), so every element of the sum is
known in closed form: 1000 * n(n+1)/2 + n * (i % 997). All values are integers well
below 2**53, so float64 sums are exact and the comparison is exact equality.

For each (dtype, count) case rank 0 prints one line
``MPIPLAT_RESULT {"program": "allreduce", "check": "pass"|"fail", "ranks": n, ...}`` and a
short human line. Exits 1 on every rank if any rank saw a wrong element.

``--for-seconds S`` repeats every case, a second apart, until S seconds have passed (a job that must still run
while something else happens, e.g. an upgrade of the stack); each round's lines carry its number. With
``--until-exists PATH`` it stops sooner, after the round in which rank 0 sees PATH exist (the `upgrade` profile's
--phase after adds that key to the ConfigMap the script came in).

``--inject-wrong-rank R`` (or MPIPLAT_INJECT_WRONG_RANK=R) makes rank R add 1 to the first
element of its contribution, to prove the check fails.

``--kill-rank R`` makes rank R kill itself with SIGKILL (exit 137, as when the kernel's OOM killer
takes a rank) ``--kill-after`` seconds (default 3) after every rank has started, while the others wait
in a collective: mpiexec then aborts the job and names the rank, its host and the signal. Rank R
first prints ``allreduce: rank R on HOST kills itself with SIGKILL`` (stdout, flushed), so whoever
reads the job's output sees the moment of death. With ``--kill-by oom`` rank R instead prints ``allreduce: rank
R on HOST allocates memory until the OOM killer takes it`` and allocates (and touches) memory in 16 MiB steps,
so that the kernel kills it at its container's memory limit; if it reaches ``--oom-max-mib`` (default 1024)
alive, no limit held: it says so on stderr and exits 3.

Standalone on purpose (shipped into MPI images): imports only mpi4py, numpy and the stdlib.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time

import numpy as np
from mpi4py import MPI

PROGRAM = "allreduce"
PREFIX = "MPIPLAT_RESULT"


def emit(record: dict) -> None:
    print(f"{PREFIX} {json.dumps(record, sort_keys=True)}", flush=True)


def int_list(text: str) -> list[int]:
    values = [int(part) for part in text.split(",") if part.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return values


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    env_inject = os.environ.get("MPIPLAT_INJECT_WRONG_RANK")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int_list, default=[1, 1000, 262144],
                        help="element counts to reduce, comma-separated (default: 1,1000,262144)")
    parser.add_argument("--dtypes", default="float64,int64",
                        help="numpy dtypes, comma-separated (default: float64,int64)")
    parser.add_argument("--iterations", type=int, default=5, help="timed Allreduce calls per case (default: 5)")
    parser.add_argument("--for-seconds", type=float, default=0, metavar="S",
                        help="repeat the cases, a second apart, until S seconds have passed (default: one round)")
    parser.add_argument("--until-exists", metavar="PATH",
                        help="with --for-seconds: stop sooner, once rank 0 sees PATH exist")
    parser.add_argument("--inject-wrong-rank", type=int, default=int(env_inject) if env_inject else None,
                        metavar="R", help="rank R contributes a wrong value (proves the check fails)")
    parser.add_argument("--kill-rank", type=int, metavar="R",
                        help="rank R kills itself with SIGKILL while the job runs (a rank's death must fail the job)")
    parser.add_argument("--kill-after", type=float, default=3.0, metavar="S",
                        help="seconds after every rank started until --kill-rank strikes (default: 3)")
    parser.add_argument("--kill-by", choices=("signal", "oom"), default="signal",
                        help="how --kill-rank dies: SIGKILL to itself (default), or the kernel's OOM killer at "
                             "its memory limit")
    parser.add_argument("--oom-max-mib", type=int, default=1024, metavar="MIB",
                        help="--kill-by oom: how much the rank allocates before it concludes that no memory limit "
                             "holds (default: 1024)")
    args = parser.parse_args(argv)
    args.dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    for name in args.dtypes:
        if name not in ("float64", "float32", "int64", "int32"):
            parser.error(f"--dtypes: {name!r} not one of float64, float32, int64, int32")
    if args.iterations < 1:
        parser.error("--iterations must be >= 1")
    if args.kill_after < 0:
        parser.error("--kill-after must be >= 0")
    if args.for_seconds < 0:
        parser.error("--for-seconds must be >= 0")
    if args.until_exists and not args.for_seconds:
        parser.error("--until-exists needs --for-seconds (the most it runs)")
    return args


def out_of_memory(rank: int, max_mib: int) -> None:
    """Allocate and touch memory until the kernel's OOM killer ends this process; exit 3 if it never does."""
    print(f"allreduce: rank {rank} on {socket.gethostname()} allocates memory until the OOM killer takes it",
          flush=True)
    held = []
    for _ in range(max(1, max_mib // 16)):
        held.append(np.ones(16 * 2**20, dtype=np.uint8))
    print(f"allreduce: rank {rank} allocated {max_mib} MiB and was not killed: no memory limit holds",
          file=sys.stderr, flush=True)
    os._exit(3)


def contribution(rank: int, count: int, dtype: str) -> np.ndarray:
    return ((rank + 1) * 1000 + np.arange(count, dtype=np.int64) % 997).astype(dtype)


def expected_sum(size: int, count: int, dtype: str) -> np.ndarray:
    return (1000 * size * (size + 1) // 2 + size * (np.arange(count, dtype=np.int64) % 997)).astype(dtype)


def main(argv: list[str] | None = None) -> int:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    args = parse_args(argv)
    inject = args.inject_wrong_rank
    if inject is not None and not 0 <= inject < size:
        if rank == 0:
            print(f"allreduce: --inject-wrong-rank {inject} is not a rank of this {size}-rank job", file=sys.stderr)
        return 2
    if args.kill_rank is not None:
        if not 0 <= args.kill_rank < size:
            if rank == 0:
                print(f"allreduce: --kill-rank {args.kill_rank} is not a rank of this {size}-rank job", file=sys.stderr)
            return 2
        comm.Barrier()  # every rank is up: the job is running when the rank dies
        if rank == args.kill_rank:
            time.sleep(args.kill_after)
            if args.kill_by == "oom":
                out_of_memory(rank, args.oom_max_mib)
            print(f"allreduce: rank {rank} on {socket.gethostname()} kills itself with SIGKILL", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    library = MPI.Get_library_version().replace("\0", "").strip().splitlines()[0]
    all_ok, started, round_ = True, MPI.Wtime(), 1
    while True:
        all_ok = one_round(comm, args, library, round_) and all_ok
        # Rank 0 decides for all, so every rank runs the same rounds.
        if not comm.bcast(rank == 0 and MPI.Wtime() - started < args.for_seconds
                          and not (args.until_exists and os.path.exists(args.until_exists)), root=0):
            return 0 if all_ok else 1
        time.sleep(1)
        round_ += 1


def one_round(comm, args: argparse.Namespace, library: str, round_: int) -> bool:
    """Every (dtype, count) case once; rank 0 prints a result line each. True when every rank was right."""
    rank, size, inject = comm.Get_rank(), comm.Get_size(), args.inject_wrong_rank
    all_ok = True
    for dtype in args.dtypes:
        for count in args.counts:
            send = contribution(rank, count, dtype)
            if inject == rank:
                send[0] += 1
            recv = np.empty_like(send)
            comm.Barrier()
            elapsed = 0.0
            for _ in range(args.iterations):
                recv.fill(0)
                start = MPI.Wtime()
                comm.Allreduce(send, recv, op=MPI.SUM)
                elapsed += MPI.Wtime() - start
            want = expected_sum(size, count, dtype)
            wrong = np.flatnonzero(recv != want)
            mine = {"rank": rank, "wrong": int(wrong.size),
                    "first": None if wrong.size == 0 else
                    {"index": int(wrong[0]), "got": recv[wrong[0]].item(), "want": want[wrong[0]].item()},
                    "time_us": elapsed / args.iterations * 1e6}
            if wrong.size:
                print(f"allreduce: rank {rank}: {wrong.size}/{count} {dtype} elements wrong, first at "
                      f"[{wrong[0]}]: got {recv[wrong[0]]}, want {want[wrong[0]]}", file=sys.stderr, flush=True)
            # Verdicts travel by pickled allgather, not by the Allreduce under test.
            everyone = comm.allgather(mine)
            failed = [v["rank"] for v in everyone if v["wrong"]]
            all_ok = all_ok and not failed
            if rank == 0:
                first = next((v["first"] for v in everyone if v["first"]), None)
                emit({"program": PROGRAM, "check": "fail" if failed else "pass", "ranks": size,
                      "dtype": dtype, "count": count, "bytes": int(send.nbytes), "iterations": args.iterations,
                      "avg_time_us": round(max(v["time_us"] for v in everyone), 3),
                      "failed_ranks": failed, "wrong_elements": sum(v["wrong"] for v in everyone),
                      "first_mismatch": first, "injected_wrong_rank": inject, "mpi_library": library,
                      "round": round_})
                verdict = "PASS" if not failed else f"FAIL (wrong on ranks {failed})"
                print(f"allreduce {dtype} x {count} on {size} ranks (round {round_}): {verdict}", flush=True)
    return all_ok


if __name__ == "__main__":
    sys.exit(main())
