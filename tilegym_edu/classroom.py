"""Grading a whole class: every student's notebooks of one lesson, one after another, into a
summary CSV, each in its own sandboxed kernel (tilegym_edu.sandbox). A broken submission
becomes a row that says why; grading the rest carries on.

Layout of the class folder: one sub-folder per student, named by the student id, holding that
student's notebooks of the lesson::

    submissions/ada/03_software_pipelining.ipynb
    submissions/grace/03_software_pipelining.ipynb
"""
from __future__ import annotations

import contextlib
import csv
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tilegym_edu import autograde, course, grade_report

#: student ids become folder names and gradebook keys: letters, digits, '_', '-' and '.'
STUDENT_ID = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class ClassResult:
    """One student's outcome: a GradeReport, or the error that stopped grading."""

    student: str
    report: grade_report.GradeReport | None = None
    error: str = ""


def students(folder: Path) -> list[str]:
    """The sub-folders of ``folder`` (one per student), sorted; hidden folders are skipped."""
    if not folder.is_dir():
        raise course.CourseError(f"{folder} is not a folder of student submissions")
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def grade_class(lesson: str, folder: Path, root: Path | None = None,
                sandboxed: bool = True) -> list[ClassResult]:
    """Grade ``folder/<student>/`` for every student, in name order, each in a fresh kernel
    (in the sandbox unless ``sandboxed`` is False) that cannot see the other students' work.
    Whatever one submission does, the others are graded: a student whose grading fails is a
    row that says why."""
    folder = Path(folder)
    results = []
    for student in students(folder):
        if not STUDENT_ID.match(student):
            results.append(ClassResult(student, error="the folder name is not a student id "
                                       "(letters, digits, '_', '-' and '.' only): rename it"))
            continue
        try:
            with _own_cache():
                report = autograde.grade(lesson, folder / student, root=root, student=student,
                                         sandboxed=sandboxed, hide=[folder])
        except Exception as exc:  # noqa: BLE001 - one student's failure never stops the class
            results.append(ClassResult(student, error=str(exc).strip().splitlines()[0]
                                       if str(exc).strip() else type(exc).__name__))
        else:
            results.append(ClassResult(student, report))
    return results


@contextlib.contextmanager
def _own_cache() -> Iterator[None]:
    """A fresh tuning cache for one student's grading (tilegym_edu.tune), so a configuration
    one submission's autotuning chose is never what the next one's finds (in the sandbox the
    kernel has a private one anyway; this covers --no-sandbox)."""
    saved = os.environ.get("TILEGYM_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="tilegym-cache-") as cache:
        os.environ["TILEGYM_CACHE_DIR"] = cache
        try:
            yield
        finally:
            if saved is None:
                os.environ.pop("TILEGYM_CACHE_DIR", None)
            else:
                os.environ["TILEGYM_CACHE_DIR"] = saved


def write_csv(results: list[ClassResult], path: Path) -> None:
    """One row per student: total, maximum, points per exercise, and a column naming what
    failed and why (or the error that stopped grading)."""
    exercises = list(dict.fromkeys(e.exercise for r in results if r.report
                                   for e in r.report.exercises))
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["student", "points", "max_points", *exercises, "problems"])
        for r in results:
            if r.report is None:
                writer.writerow([r.student, 0, "", *[""] * len(exercises),
                                 f"not graded: {r.error}"])
                continue
            by_name = {e.exercise: e for e in r.report.exercises}
            problems = "; ".join(f"{e.exercise}: {e.status}"
                                 + (f" ({e.reason})" if e.reason else "")
                                 for e in r.report.exercises if e.status != "passed")
            writer.writerow([r.student, f"{r.report.points:g}", f"{r.report.max_points:g}",
                             *[f"{by_name[x].points:g}" if x in by_name else "" for x in exercises],
                             problems])
