"""Who ran each rank, and where: the user and host of every rank, checked from inside (JOB-11, ISO-05).

Usage: mpiexec -n N python whoami.py [--expect-uid UID] [--min-hosts 2]

Every rank reports its real and effective uid and gid, its user name and its host name; rank 0
gathers them. The check fails when a rank's real or effective uid is not --expect-uid (when given),
when a rank runs as root while --expect-uid asks for another user, or when the ranks ran on fewer
than --min-hosts distinct hosts (pods).

Rank 0 prints ``MPIPLAT_RESULT {"program": "whoami", "check": "pass"|"fail", "ranks": n,
"uids": [...], "hosts": [...], "distinct_hosts": k, "errors": [...], ...}`` (per-rank lists in rank
order) and one human line per rank; all ranks exit 1 when the check fails.

Standalone on purpose (shipped into MPI images): imports only mpi4py, numpy and the stdlib.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import socket
import sys

import numpy as np
from mpi4py import MPI

PROGRAM = "whoami"
PREFIX = "MPIPLAT_RESULT"


def emit(record: dict) -> None:
    print(f"{PREFIX} {json.dumps(record, sort_keys=True)}", flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expect-uid", type=int, default=None,
                        help="uid every rank must run as, real and effective (default: not checked)")
    parser.add_argument("--min-hosts", type=int, default=1, help="fewest distinct hosts the ranks ran on (default: 1)")
    args = parser.parse_args(argv)
    if args.min_hosts < 1 or (args.expect_uid is not None and args.expect_uid < 0):
        parser.error("need --min-hosts >= 1 and --expect-uid >= 0")
    return args


def me() -> dict:
    uid = os.getuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:  # a uid without a passwd entry (e.g. an arbitrary runAsUser)
        user = ""
    return {"uid": uid, "euid": os.geteuid(), "gid": os.getgid(), "egid": os.getegid(), "user": user,
            "host": socket.gethostname()}


def check(everyone: list[dict], expect_uid: int | None, min_hosts: int) -> list[str]:
    """What is wrong with the ranks' identities (empty when the check passes)."""
    errors = []
    if expect_uid is not None:
        for rank, who in enumerate(everyone):
            if who["uid"] != expect_uid or who["euid"] != expect_uid:
                errors.append(f"rank {rank} on {who['host']} ran as uid {who['uid']} (effective {who['euid']}), "
                              f"expected {expect_uid}")
    hosts = {who["host"] for who in everyone}
    if len(hosts) < min_hosts:
        errors.append(f"the ranks ran on {len(hosts)} host(s) {sorted(hosts)}, expected at least {min_hosts}")
    return errors


def main(argv: list[str] | None = None) -> int:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    args = parse_args(argv)
    mine = me()
    everyone = comm.allgather(mine)
    # The uids once more through a buffer collective (not pickled objects): both exchanges must agree.
    uids = np.zeros(size, dtype=np.int64)
    comm.Allgather(np.array([mine["uid"]], dtype=np.int64), uids)
    errors = check(everyone, args.expect_uid, args.min_hosts)
    if [int(u) for u in uids] != [who["uid"] for who in everyone]:
        errors.append(f"uids disagree between collectives: {uids.tolist()} vs {[w['uid'] for w in everyone]}")
    if rank == 0:
        emit({"program": PROGRAM, "check": "fail" if errors else "pass", "ranks": size,
              "uids": [w["uid"] for w in everyone], "euids": [w["euid"] for w in everyone],
              "gids": [w["gid"] for w in everyone], "users": [w["user"] for w in everyone],
              "hosts": [w["host"] for w in everyone], "distinct_hosts": len({w["host"] for w in everyone}),
              "expect_uid": args.expect_uid, "min_hosts": args.min_hosts, "errors": errors,
              "mpi_library": MPI.Get_library_version().replace("\0", "").strip().splitlines()[0]})
        for r, who in enumerate(everyone):
            print(f"whoami: rank {r} uid={who['uid']} euid={who['euid']} gid={who['gid']} "
                  f"user={who['user'] or '?'} host={who['host']}", flush=True)
        for line in errors:
            sys.stderr.write(f"whoami: {line}\n")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
