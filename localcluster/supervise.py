"""Keep one host-process controller running, as the kubelet keeps a Deployment's pod running on a real cluster.

    python -I -S supervise.py [--restarts FILE] [--health URL] [--backoff S] -- COMMAND...

Runs COMMAND; when it exits, runs it again after a back-off that doubles from --backoff (10 s) up to 5 minutes
and starts over once a run lasted 10 minutes, as the kubelet's CrashLoopBackOff does. A controller exits by
design when it cannot renew its leader-election Lease in time (mpi-operator within 5 s), which a loaded API
server can cause; on a real cluster it comes back, and so it does here. A first run that ends before URL ever
answered 200 is not retried: that controller cannot start (a bad flag, a busy port), and `mpiplat cluster up`
shows its log. SIGTERM (`mpiplat cluster down`, the fault matrix's "controller stopped") ends the controller, then
this. FILE holds the number of restarts (`mpiplat cluster status` shows it).

Standard library only, run by path: one small process per controller, not an import of mpiplat.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time
import urllib.request

MAX_BACKOFF_S = 300.0
RESET_AFTER_S = 600.0


def say(text: str) -> None:
    sys.stdout.write(f"mpiplat-supervise: {text}\n")
    sys.stdout.flush()


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return resp.status == 200
    except (OSError, ValueError):
        return False


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="supervise.py")
    parser.add_argument("--restarts", help="a file to write the number of restarts to")
    parser.add_argument("--backoff", type=float, default=10.0, help="the first restart's delay, seconds")
    parser.add_argument("--health", help="its health URL: a first run that ends before it answers is not retried")
    parser.add_argument("command", nargs="+")
    args = parser.parse_args(argv)
    stop = threading.Event()
    child: subprocess.Popen | None = None

    def terminate(signum, _frame) -> None:
        stop.set()
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, terminate)
    delay, restarts, healthy = args.backoff, 0, not args.health
    while not stop.is_set():
        started = time.monotonic()
        child = subprocess.Popen(args.command)
        while not healthy and child.poll() is None and not stop.is_set():
            healthy = answers(args.health)
            stop.wait(0 if healthy else 0.5)
        code = child.wait()
        ran = time.monotonic() - started
        if stop.is_set():
            break
        why = f"signal {-code}" if code < 0 else f"exit {code}"
        if not healthy:
            say(f"{args.command[0]} ended ({why}) before {args.health} answered: not restarted")
            return code if code > 0 else 1
        delay = args.backoff if ran >= RESET_AFTER_S else delay
        restarts += 1
        if args.restarts:
            with open(args.restarts, "w") as out:
                out.write(f"{restarts}\n")
        say(f"{args.command[0]} ended ({why}) after {ran:.0f}s; restart {restarts} in {delay:.0f}s")
        stop.wait(delay)
        delay = min(delay * 2, MAX_BACKOFF_S)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
