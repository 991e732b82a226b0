"""Checkpoint to a shared volume and read it back in a later job (JOB-10).

Usage: mpiexec -n N python checkpoint.py write --dir /data [--step 1] [--megabytes 4]
       mpiexec -n N python checkpoint.py read  --dir /data [--step 1]

write: every rank saves its own state (deterministic bytes from its rank and the step) to
DIR/step-<step>/rank-<r>.bin; rank 0 then writes manifest.json with each file's SHA-256.
After a barrier every rank looks for every rank's file, so the check fails unless all ranks
share one volume.

read: every rank re-reads its file, compares it with the manifest's SHA-256 and with the
state it would have written. A missing or altered checkpoint fails the check.

Rank 0 prints ``MPIPLAT_RESULT {"program": "checkpoint", "mode": ..., "check": "pass"|"fail",
"ranks": n, ...}``; exits 1 when the check fails.

Standalone on purpose (shipped into MPI images): imports only mpi4py, numpy and the stdlib.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

PROGRAM = "checkpoint"
PREFIX = "MPIPLAT_RESULT"


def emit(record: dict) -> None:
    print(f"{PREFIX} {json.dumps(record, sort_keys=True)}", flush=True)


def state(rank: int, step: int, nbytes: int) -> bytes:
    return np.random.default_rng([rank, step]).integers(0, 256, nbytes, dtype=np.uint8).tobytes()


def write(comm: MPI.Comm, folder: Path, step: int, nbytes: int) -> tuple[bool, dict]:
    rank, size = comm.Get_rank(), comm.Get_size()
    error = ""
    digest = ""
    try:
        if rank == 0:
            folder.mkdir(parents=True, exist_ok=True)
        comm.Barrier()
        data = state(rank, step, nbytes)
        path = folder / f"rank-{rank}.bin"
        with open(path, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        digest = hashlib.sha256(data).hexdigest()
    except OSError as exc:
        error = f"rank {rank}: {exc}"
    digests = comm.gather(digest, root=0)
    if rank == 0 and not error:
        manifest = {"step": step, "ranks": size, "bytes_per_rank": nbytes, "sha256": digests}
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
    comm.Barrier()
    seen = sum((folder / f"rank-{r}.bin").is_file() for r in range(size))
    return _summarise(comm, error, {"files_seen": seen}, lambda m: m["files_seen"] == size)


def read(comm: MPI.Comm, folder: Path, step: int) -> tuple[bool, dict]:
    rank = comm.Get_rank()
    error = ""
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        if manifest["ranks"] != comm.Get_size():
            raise ValueError(f"checkpoint was written by {manifest['ranks']} ranks, this job has {comm.Get_size()}")
        data = (folder / f"rank-{rank}.bin").read_bytes()
        if hashlib.sha256(data).hexdigest() != manifest["sha256"][rank]:
            raise ValueError(f"rank-{rank}.bin does not match the manifest's SHA-256")
        if data != state(rank, step, manifest["bytes_per_rank"]):
            raise ValueError(f"rank-{rank}.bin holds other state than step {step} wrote")
    except (OSError, ValueError, KeyError, IndexError) as exc:
        error = f"rank {rank}: {exc}"
    return _summarise(comm, error, {}, lambda m: True)


def _summarise(comm: MPI.Comm, error: str, mine: dict, ok) -> tuple[bool, dict]:
    """Gather each rank's error, host and figures; the check passes when no rank failed."""
    everyone = comm.allgather({"error": error, "host": socket.gethostname(), **mine})
    errors = [e["error"] for e in everyone if e["error"]]
    errors += [f"rank {r} sees only {e['files_seen']} of {len(everyone)} files: the volume is not shared"
               for r, e in enumerate(everyone) if not ok(e)]
    figures = {"errors": errors, "hosts": len({e["host"] for e in everyone})}
    if "files_seen" in mine:
        figures["files_seen"] = min(e["files_seen"] for e in everyone)  # by the rank that saw fewest
    return not errors, figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("write", "read"))
    parser.add_argument("--dir", required=True, help="the shared volume's mount path")
    parser.add_argument("--step", type=int, default=1)
    parser.add_argument("--megabytes", type=float, default=4, help="state per rank when writing (default: 4)")
    args = parser.parse_args(argv)
    comm = MPI.COMM_WORLD
    folder = Path(args.dir) / f"step-{args.step}"
    nbytes = max(1, int(args.megabytes * 1e6))
    ok, figures = (write(comm, folder, args.step, nbytes) if args.mode == "write" else read(comm, folder, args.step))
    if comm.Get_rank() == 0:
        emit({"program": PROGRAM, "mode": args.mode, "check": "pass" if ok else "fail", "ranks": comm.Get_size(),
              "step": args.step, "dir": str(folder), **figures})
        for line in figures["errors"]:
            sys.stderr.write(f"checkpoint {args.mode}: {line}\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
