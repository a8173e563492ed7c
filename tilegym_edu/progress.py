"""A one-line text progress bar, for work a learner waits on (autotuning, benchmark sweeps,
self-grading). It redraws itself with carriage returns, which both terminals and Jupyter
notebooks honour, and needs no package beyond the standard library.

    for n in progress.track([1024, 2048, 4096], "sweeping sizes"):
        ...
"""
from __future__ import annotations

import sys
from typing import Iterable, Iterator, TextIO, TypeVar

T = TypeVar("T")
WIDTH = 30


class ProgressBar:
    """``show(done, total, note)`` redraws the line; ``close(message)`` ends it."""

    def __init__(self, label: str, enabled: bool = True, stream: TextIO | None = None):
        self.label, self.enabled = label, enabled
        self.stream = stream

    def _write(self, text: str) -> None:
        stream = self.stream or sys.stdout  # looked up late: Jupyter and pytest swap sys.stdout
        stream.write(text)
        stream.flush()

    def show(self, done: int, total: int, note: str = "") -> None:
        if self.enabled:
            filled = int(WIDTH * done / max(total, 1))
            line = f"{self.label} [{'#' * filled}{'.' * (WIDTH - filled)}] {done}/{total} {note}"
            self._write("\r" + line.ljust(110))

    def close(self, message: str) -> None:
        if self.enabled:
            self._write("\r" + f"{self.label}: {message}".ljust(110) + "\n")


def track(items: Iterable[T], label: str, total: int | None = None,
          enabled: bool = True) -> Iterator[T]:
    """Yield ``items``, drawing a bar as each one is taken and closing it at the end."""
    items = list(items) if total is None else items
    total = len(items) if total is None else total
    bar = ProgressBar(label, enabled)
    done = 0
    bar.show(done, total)
    for item in items:
        yield item
        done += 1
        bar.show(done, total)
    bar.close(f"{done} done")
