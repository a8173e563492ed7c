"""A one-line text progress bar, for work a learner waits on (autotuning, benchmark sweeps,
self-grading). In a terminal and in a Jupyter notebook it redraws itself with carriage
returns; written anywhere else (a log file, CI output), where carriage returns are not
honoured, it prints a plain line at the start and at each quarter of the way instead. It needs
no package beyond the standard library.

    for n in progress.track([1024, 2048, 4096], "sweeping sizes"):
        ...
"""
from __future__ import annotations

import sys
from typing import Iterable, Iterator, TextIO, TypeVar

T = TypeVar("T")
WIDTH = 30


def redraws(stream: TextIO) -> bool:
    """Whether ``stream`` honours carriage returns: a terminal, or a Jupyter kernel's output
    (not a tty, but the notebook front end redraws the line). ipykernel is never imported
    here: a Jupyter kernel has imported it already."""
    iostream = sys.modules.get("ipykernel.iostream")
    if iostream is not None and isinstance(stream, iostream.OutStream):
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class ProgressBar:
    """``show(done, total, note)`` redraws the line; ``close(message)`` ends it."""

    def __init__(self, label: str, enabled: bool = True, stream: TextIO | None = None):
        self.label, self.enabled = label, enabled
        self.stream = stream
        self._quarter: int | None = None  # the quarter last printed as a plain line

    def _write(self, text: str, plain: str) -> None:
        """Write ``text`` where carriage returns redraw the line, else ``plain``."""
        stream = self.stream or sys.stdout  # looked up late: Jupyter and pytest swap sys.stdout
        stream.write(text if redraws(stream) else plain)
        stream.flush()

    def show(self, done: int, total: int, note: str = "") -> None:
        if self.enabled:
            filled = int(WIDTH * done / max(total, 1))
            line = f"{self.label} [{'#' * filled}{'.' * (WIDTH - filled)}] {done}/{total} {note}"
            quarter = 4 * done // max(total, 1)
            plain = "" if quarter == self._quarter else line.rstrip() + "\n"
            self._quarter = quarter
            self._write("\r" + line.ljust(110), plain)

    def close(self, message: str) -> None:
        if self.enabled:
            line = f"{self.label}: {message}"
            self._write("\r" + line.ljust(110) + "\n", line + "\n")


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
