"""Where one cell of a lesson spends its time: run the lesson's solution notebook as grading
does (demonstrations skipped) in this process, up to the given cells, and profile those cells
with cProfile. For a maintainer asking why a graded cell is slow.

    python benchmarks/profile_cell.py 04_flash_attention test_flash_vs_best_sdpa
    python benchmarks/profile_cell.py 06_capstone test_swiglu_bandwidth test_model_vs_eager --top 40

Prints, per profiled cell, its wall time and the functions with the most cumulative time.
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import argparse
import cProfile
import io
import pstats
import time
from pathlib import Path

import nbformat
from IPython.core.interactiveshell import InteractiveShell

from tilegym_edu import submission

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lesson")
    parser.add_argument("cells", nargs="+", help="grade ids of the cells to profile")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    nb = nbformat.read(REPO / "solutions" / args.lesson / f"{args.lesson}.ipynb", as_version=4)
    shell = InteractiveShell.instance()
    wanted = set(args.cells)
    for cell in nb.cells:
        if cell.cell_type != "code" or submission.is_demonstration(cell):
            continue
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        profiler = cProfile.Profile() if grade_id in wanted else None
        start = time.perf_counter()
        if profiler:
            profiler.enable()
        result = shell.run_cell(cell.source, silent=True)
        if profiler:
            profiler.disable()
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(args.top)
            print(f"===== {grade_id}: {time.perf_counter() - start:.1f} s "
                  f"({'ok' if result.success else 'failed'})\n{out.getvalue()}", flush=True)
            wanted.discard(grade_id)
        if not wanted:
            break


if __name__ == "__main__":
    main()
