"""OSU-style ping-pong latency and bandwidth between ranks 0 and 1.

Usage: mpiexec -n 2 python pingpong.py [--min-size 1] [--max-size 1048576] [--iterations 100]

For each message size (powers of two from --min-size to --max-size), rank 0 sends to rank 1
and rank 1 sends the message back, --warmup untimed rounds then --iterations timed ones.
latency_us is half the average round trip (as osu_latency reports), latency_median_us half
the median one (robust to a busy host); bandwidth_MBps is size / latency_us in 10**6 bytes
per second. The echoed data is compared with what was sent.

Rank 0 prints one line per size:
``MPIPLAT_RESULT {"program": "pingpong", "check": "pass"|"fail", "ranks": n, "size_bytes": ...,
"latency_us": ..., "bandwidth_MBps": ...}`` plus a short human table. Ranks other than 0
and 1 wait without spinning. Needs at least 2 ranks; exits 1 if the echo was ever wrong.

Standalone on purpose (shipped into MPI images): imports only mpi4py, numpy and the stdlib.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
from mpi4py import MPI

PROGRAM = "pingpong"
PREFIX = "MPIPLAT_RESULT"
TAG = 7


def emit(record: dict) -> None:
    print(f"{PREFIX} {json.dumps(record, sort_keys=True)}", flush=True)


def sig(value: float) -> float:
    """Six significant digits: keeps tiny bandwidths non-zero and large ones readable."""
    return float(f"{value:.6g}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-size", type=int, default=1, help="smallest message in bytes (default: 1)")
    parser.add_argument("--max-size", type=int, default=1 << 20, help="largest message in bytes (default: 1048576)")
    parser.add_argument("--iterations", type=int, default=100, help="timed round trips per size (default: 100)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed round trips per size (default: 10)")
    args = parser.parse_args(argv)
    if args.min_size < 1 or args.max_size < args.min_size:
        parser.error(f"need 1 <= --min-size <= --max-size, got {args.min_size} and {args.max_size}")
    if args.iterations < 1 or args.warmup < 0:
        parser.error("need --iterations >= 1 and --warmup >= 0")
    return args


def sizes(lo: int, hi: int) -> list[int]:
    out, size = [], lo
    while size <= hi:
        out.append(size)
        size *= 2
    if out[-1] != hi:
        out.append(hi)
    return out


def wait_quietly(comm: MPI.Comm) -> None:
    """Barrier without busy-waiting, so idle ranks leave the cores to ranks 0 and 1."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(0.002)


def main(argv: list[str] | None = None) -> int:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    args = parse_args(argv)
    library = MPI.Get_library_version().replace("\0", "").strip().splitlines()[0]
    if size < 2:
        message = f"pingpong needs at least 2 ranks (ranks 0 and 1 exchange messages), got {size}: use mpiexec -n 2"
        print(message, file=sys.stderr, flush=True)
        emit({"program": PROGRAM, "check": "fail", "ranks": size, "error": message, "mpi_library": library})
        return 2
    # Ranks 0 and 1 get their own communicator so their per-size barriers involve no one else.
    pair = comm.Split(0 if rank < 2 else MPI.UNDEFINED, rank)
    if rank >= 2:
        wait_quietly(comm)
        ok = comm.bcast(None, root=0)
        return 0 if ok else 1

    peer = 1 - rank
    all_ok = True
    if rank == 0:
        print(f"pingpong on {size} ranks ({library})", flush=True)
        print(f"{'size_bytes':>12} {'latency_us':>12} {'median_us':>12} {'bandwidth_MBps':>15}", flush=True)
    for nbytes in sizes(args.min_size, args.max_size):
        pattern = (np.arange(nbytes, dtype=np.int64) * 31 + nbytes).astype(np.uint8)
        send = pattern.copy() if rank == 0 else np.empty(nbytes, dtype=np.uint8)
        recv = np.empty(nbytes, dtype=np.uint8)
        pair.Barrier()
        trips = np.empty(args.iterations)
        for i in range(args.warmup + args.iterations):
            start = MPI.Wtime()
            if rank == 0:
                pair.Send(send, dest=peer, tag=TAG)
                pair.Recv(recv, source=peer, tag=TAG)
            else:
                pair.Recv(recv, source=peer, tag=TAG)
                pair.Send(recv, dest=peer, tag=TAG)
            if i >= args.warmup:
                trips[i - args.warmup] = MPI.Wtime() - start
        if rank == 0:
            echoed = bool(np.array_equal(recv, pattern))
            latency_us = float(trips.mean()) / 2 * 1e6
            median_us = float(np.median(trips)) / 2 * 1e6
            bandwidth = nbytes / latency_us if latency_us > 0 else 0.0
            ok = echoed and latency_us > 0
            all_ok = all_ok and ok
            emit({"program": PROGRAM, "check": "pass" if ok else "fail", "ranks": size, "size_bytes": nbytes,
                  "iterations": args.iterations, "warmup": args.warmup, "latency_us": sig(latency_us),
                  "latency_median_us": sig(median_us), "bandwidth_MBps": sig(bandwidth),
                  "data_ok": echoed, "mpi_library": library})
            flag = "" if ok else "  FAIL (echoed data differs)" if not echoed else "  FAIL (no time elapsed)"
            print(f"{nbytes:>12} {latency_us:>12.2f} {median_us:>12.2f} {bandwidth:>15.2f}{flag}", flush=True)
    pair.Free()
    wait_quietly(comm)
    all_ok = comm.bcast(all_ok if rank == 0 else None, root=0)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
