"""What every benchmark script shares: the record's header, the SM clock readings, the
command line (``--out``) and writing the record as JSON.

A record is a plain dict that a script fills and :func:`finish` writes. Its common fields:

* ``date``: the day the run started, ISO 8601 (``"2026-11-30"``); with ``stamp=True`` the
  moment in UTC to the second (``"2026-12-01T11:15:49+00:00"``).
* ``gpu``: the GPU measured, as :meth:`tilegym_edu.device.DeviceInfo.describe` puts it (name,
  compute capability, SM count, memory in GiB, L2 in MiB, driver version);
  ``"none: interpreter mode"`` without a GPU.
* ``torch``, ``triton``: the versions of PyTorch and Triton, as their ``__version__`` says.
* ``host``: the host's processor (as /proc/cpuinfo names it, where there is one) and CPU
  count, and ``host_python_ms``: the least of five runs of a fixed piece of Python of the kind
  a kernel's wrapper runs (calls, dictionary lookups, small integers). Where plain calls got
  slower between two runs and their CUDA graphs did not, these say whether the host did (run
  37 of 2026-12-04 could only infer it).
* ``sm_clock_before_mhz`` (with ``clock_before=True``) and ``sm_clock_after_mhz`` (written by
  :func:`finish`): the SM clock in MHz when the run started and when it ended, read (never set)
  through nvidia-smi; None without a GPU or without nvidia-smi. A clock far below the GPU's
  boost clock at either end says the run was throttled.

Scripts are run from the repository root as ``python benchmarks/NAME.py``, so this folder is
the first entry of ``sys.path``: they ``from record import finish, header, options``.

    args = options(__doc__).parse_args()
    record = header()
    record["shapes"] = ...             # what the script measures
    finish(record, args.out)           # the clock at the end, then the JSON file
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import argparse
import datetime
import json
import os
import time
from pathlib import Path

import torch
import triton

from tilegym_edu import device

#: what ``gpu`` says where no GPU is visible (Triton runs kernels in its CPU interpreter)
NO_GPU = "none: interpreter mode"


def options(doc: str | None = None) -> argparse.ArgumentParser:
    """A parser with the options every benchmark takes; a script adds its own to it.

    ``--out PATH``: write the record there as JSON (a Path; without it nothing is written).
    ``doc`` (the script's docstring) is shown, as written, by ``--help``."""
    parser = argparse.ArgumentParser(description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, metavar="PATH",
                        help="write the record as JSON to this file (else nothing is written)")
    return parser


def gpu() -> str:
    """The ``gpu`` field: the description of GPU 0, or :data:`NO_GPU`."""
    facts = device.info()
    return facts.describe() if facts else NO_GPU


def sm_clock() -> int | None:
    """The SM clock of GPU 0 right now, in MHz; None without a GPU or nvidia-smi."""
    return device.sm_clock_mhz() if device.ON_GPU else None


def host() -> str:
    """The ``host`` field: the processor's model name and the CPU count."""
    model = "unknown processor"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{model}, {os.cpu_count()} CPUs"


def _wrapper_like_python() -> int:
    counts: dict[int, int] = {}
    for i in range(20_000):
        key = i % 97
        counts[key] = counts.get(key, 0) + len(str(i))
    return len(counts)


def host_python_ms() -> float:
    """The ``host_python_ms`` field: milliseconds for the least of five runs of a fixed piece of
    Python (2.1 ms on the repository's CPU machine, an AMD EPYC, on 2026-12-04)."""
    times = []
    for _ in range(5):
        start = time.perf_counter()
        _wrapper_like_python()
        times.append((time.perf_counter() - start) * 1e3)
    return round(min(times), 3)


def header(*, clock_before: bool = False, stamp: bool = False) -> dict:
    """A new record holding the common fields (``date``, ``gpu``, ``torch``, ``triton``), and
    ``sm_clock_before_mhz`` when ``clock_before``; ``stamp`` makes ``date`` a UTC time."""
    if stamp:
        date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    else:
        date = datetime.date.today().isoformat()
    record = {"date": date, "gpu": gpu(), "torch": torch.__version__,
              "triton": triton.__version__, "host": host(), "host_python_ms": host_python_ms()}
    if clock_before:
        record["sm_clock_before_mhz"] = sm_clock()
    return record


def write(record: dict, out: str | Path | None) -> None:
    """Write ``record`` to ``out`` as JSON, indented by one space; nothing when ``out`` is None."""
    if out:
        Path(out).write_text(json.dumps(record, indent=1))


def finish(record: dict, out: str | Path | None, *, clock_after: bool = True,
           show: bool = False) -> dict:
    """End a run: record ``sm_clock_after_mhz`` (unless ``clock_after`` is False; a key the
    record already holds keeps its place), print the record as JSON when ``show``, and
    :func:`write` it to ``out``. Returns the record."""
    if clock_after:
        record["sm_clock_after_mhz"] = sm_clock()
    if show:
        print(json.dumps(record, indent=1))
    write(record, out)
    return record
