"""How long self-grading takes, per lesson: the wall time a learner waits for
`tilegym-edu grade LESSON`, with the lesson's solutions as the learner's notebook.

Each lesson is graded in its own copy of the course (its own gradebook), as a learner would:
"cold" with empty Triton and tuning caches (the first grading after an install), then "warm"
with the caches that run left (every grading after). With --blank it also grades the blank
notebook once. Each grading records its points, every exercise's status and figure, and the
slowest cells; the record is rewritten after every grading, so a run cut short keeps what it had.

    python benchmarks/grading_times.py --out times.json                  # every lesson
    python benchmarks/grading_times.py --lessons 04_flash_attention --modes cold --parallel
    # stop starting gradings after 540 s:
    python benchmarks/grading_times.py --budget 540 --out times.json

--parallel grades the lessons at the same time (for a profile of where time goes: the lessons
share the GPU and the cores then, so its wall times are not the learner's).
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tilegym_edu import course

from record import finish, header, options, write

REPO = Path(__file__).resolve().parent.parent


def grade_once(lesson: str, workspace: Path, mode: str, blank: bool = False) -> dict:
    """Grade ``lesson`` with the CLI in the course copy at ``workspace``; its caches live there
    too (``cold`` empties them first). Returns what the learner would have seen, timed."""
    caches = workspace / "caches"
    if mode == "cold":
        shutil.rmtree(caches, ignore_errors=True)
    env = {**os.environ, "TILEGYM_COURSE_ROOT": str(workspace),
           "TRITON_CACHE_DIR": str(caches / "triton"), "TILEGYM_CACHE_DIR": str(caches / "tilegym")}
    command = [sys.executable, "-m", "tilegym_edu.cli", "grade", lesson, "--json"]
    if not blank:
        command += ["--submission", str(workspace / "solutions" / lesson), "--no-sandbox"]
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    entry = {"lesson": lesson, "mode": mode, "submission": "blank" if blank else "solution",
             "wall_s": round(wall, 1), "exit": done.returncode}
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {**entry, "error": (done.stderr or done.stdout)[-2000:]}
    cells = sorted(report["cells"], key=lambda c: -c["seconds"])
    return {**entry, "points": report["points"], "max_points": report["max_points"],
            "grading_s": report["seconds"], "cells_s": round(sum(c["seconds"] for c in cells), 1),
            "exercises": [{k: e[k] for k in ("exercise", "points", "max_points", "status",
                                             "figure", "seconds", "reason")}
                          for e in report["exercises"]],
            "slowest_cells": [(c["cell"], c["seconds"]) for c in cells[:12]]}


def grade_lesson(lesson: str, modes: list[str], blank: bool, root: Path, deadline: float,
                 record: dict, save) -> None:
    workspace = root / lesson
    for part in ("solutions", "notebooks"):
        shutil.copytree(REPO / part, workspace / part, dirs_exist_ok=True)
    runs = [(mode, False) for mode in modes] + ([("warm", True)] if blank else [])
    for mode, is_blank in runs:
        if time.monotonic() > deadline:
            record["skipped"].append(f"{lesson} {mode}{' blank' if is_blank else ''}: out of time")
            save()
            continue
        entry = grade_once(lesson, workspace, mode, is_blank)
        record["gradings"].append(entry)
        print(f"{lesson:<24} {mode:<5} {entry['submission']:<8} {entry['wall_s']:7.1f} s  "
              f"{entry.get('points', '?')}/{entry.get('max_points', '?')}", flush=True)
        save()


def main() -> None:
    parser = options(__doc__)
    parser.add_argument("--lessons", nargs="*", default=course.lessons(REPO))
    parser.add_argument("--modes", nargs="*", default=["cold", "warm"], choices=["cold", "warm"])
    parser.add_argument("--blank", action="store_true", help="also grade the blank notebook")
    parser.add_argument("--parallel", action="store_true", help="grade the lessons at once")
    parser.add_argument("--budget", type=float, default=float("inf"),
                        help="seconds after which no grading starts")
    args = parser.parse_args()
    record = {**header(clock_before=True, stamp=True), "cpus": os.cpu_count(),
              "parallel": args.parallel, "gradings": [], "skipped": []}

    def save() -> None:
        write(record, args.out)

    deadline = time.monotonic() + args.budget
    with tempfile.TemporaryDirectory(prefix="grading-times-") as tmp:
        jobs = [(lesson, args.modes, args.blank, Path(tmp), deadline, record, save)
                for lesson in args.lessons]
        with ThreadPoolExecutor(len(jobs) if args.parallel else 1) as pool:
            list(pool.map(lambda job: grade_lesson(*job), jobs))
    finish(record, args.out)


if __name__ == "__main__":
    main()
