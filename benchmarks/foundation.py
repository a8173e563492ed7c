"""Foundation measurements on a GPU: the helper's ceilings against the anchors page, and lesson
00's reference kernel against copy bandwidth. Prints a table; writes JSON with --out.

    python benchmarks/foundation.py --out results.json

The lesson's kernel is taken from the solution notebook itself (its single source of truth).
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import importlib.util
import platform
import tempfile
from pathlib import Path

import nbformat
import torch

from tilegym_edu import ceilings, grading

from record import finish, header, options

ROOT = Path(__file__).resolve().parent.parent
LESSON00 = ROOT / "solutions" / "00_getting_started" / "00_getting_started.ipynb"
REPEATS = 3


def lesson00_namespace() -> dict:
    """The setup cell and the cells defining silu_mul and its checker from the solution, loaded
    as a module (Triton reads a kernel's source from its file)."""
    nb = nbformat.read(LESSON00, as_version=4)
    wanted = ("setup", "silu_mul_solution", "silu_mul_checker")
    source = "\n\n".join(c.source for c in nb.cells
                         if c.metadata.get("nbgrader", {}).get("grade_id") in wanted)
    path = Path(tempfile.mkdtemp()) / "lesson00_solution.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("lesson00_solution", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return vars(module)


def silu_mul_fractions(ns: dict, n: int = 2**26) -> list[float]:
    """silu_mul's GB/s over a copy's, measured interleaved as the grader does, REPEATS times."""
    sets = [ns["make_silu_inputs"]({"shape": (n,), "dtype": torch.float16},
                                   torch.Generator().manual_seed(s)) for s in (0, 1)]
    fractions = []
    for _ in range(REPEATS):
        yours, copy = grading.measure_speed(
            ns["silu_mul"], {"copy": grading.copy_baseline(3 * n * 2)}, sets,
            ns["silu_mul_reference"], torch.float16, bytes=3 * n * 2)
        fractions.append(yours.gbs / copy.gbs)
    return fractions


def main() -> None:
    args = options(__doc__).parse_args()
    record = {
        **header(), "python": platform.python_version(), "sm_clock_after_mhz": None,
        "copy_gbs": {f"{gib} GiB": ceilings.measure_copy_gbs(gib * 2**30) for gib in (2, 4)},
        "matmul_tflops": {f"{name} {n}^3": ceilings.measure_matmul_tflops(name, n)
                          for n in (4096, 8192) for name in ceilings.MATMUL_DTYPES},
    }
    record["measure_ceilings"] = ceilings.measure_ceilings(refresh=True).__dict__
    record["silu_mul_fraction_of_copy"] = silu_mul_fractions(lesson00_namespace())
    finish(record, args.out, show=True)   # sm_clock_after_mhz keeps its place after the header


if __name__ == "__main__":
    main()
