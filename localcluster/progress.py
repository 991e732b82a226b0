"""Progress on long work: a spinner with elapsed seconds on a terminal (rich), else a plain line
every few seconds, so that CI logs show the work is alive."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console
from rich.text import Text


class Work:
    """What is under way; `label` may change while it runs (e.g. the controllers still awaited)."""

    def __init__(self, label: str):
        self.label = label
        self.start = time.monotonic()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def __rich__(self) -> Text:  # re-rendered by the spinner on every refresh
        return Text(f"{self.label} ({self.elapsed:.0f}s)")


def on_terminal(stream: TextIO) -> bool:
    """Whether `stream` is a terminal that can redraw a line. Decided by isatty itself, not by rich's
    guess: CI often sets FORCE_COLOR, and its logs must get plain lines."""
    try:
        return stream.isatty() and os.environ.get("TERM", "") not in ("dumb", "unknown")
    except (AttributeError, ValueError):  # no isatty, or a closed file
        return False


@contextmanager
def progress(label: str, stream: TextIO | None = None, every: float = 30.0) -> Iterator[Work]:
    """Show that `label` is under way until the block ends.

    On an interactive terminal: a rich spinner with elapsed seconds (lines printed meanwhile
    appear above it). Otherwise: `    ... LABEL (Ns)` every `every` seconds."""
    out = stream or sys.stdout
    work = Work(label)
    if on_terminal(out):
        with Console(file=out, force_terminal=True, force_interactive=True).status(work):
            yield work
        return
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            print(f"    ... {work.label} ({work.elapsed:.0f}s)", file=out, flush=True)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield work
    finally:
        stop.set()
        thread.join()
