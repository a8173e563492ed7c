"""Grading a whole class: every student's notebooks of one lesson, one after another, into a
summary CSV. A broken submission becomes a row that says why; grading the rest carries on.

Layout of the class folder: one sub-folder per student, named by the student id, holding that
student's notebooks of the lesson::

    submissions/ada/03_software_pipelining.ipynb
    submissions/grace/03_software_pipelining.ipynb
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

from tilegym_edu import course

#: student ids become folder names and gradebook keys: letters, digits, '_', '-' and '.'
STUDENT_ID = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class ClassResult:
    """One student's outcome: a GradeReport, or the error that stopped grading."""

    student: str
    report: course.GradeReport | None = None
    error: str = ""


def students(folder: Path) -> list[str]:
    """The student sub-folders of ``folder``, sorted; raises CourseError on a name that cannot
    be a student id."""
    if not folder.is_dir():
        raise course.CourseError(f"{folder} is not a folder of student submissions")
    names = sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    bad = [n for n in names if not STUDENT_ID.match(n)]
    if bad:
        raise course.CourseError(f"student folder names may hold only letters, digits, '_', '-' "
                                 f"and '.': rename {bad}")
    return names


def grade_class(lesson: str, folder: Path, root: Path | None = None) -> list[ClassResult]:
    """Grade ``folder/<student>/`` for every student, in name order."""
    results = []
    for student in students(Path(folder)):
        try:
            report = course.grade(lesson, Path(folder) / student, root=root, student=student)
        except course.CourseError as exc:
            results.append(ClassResult(student, error=str(exc)))
        else:
            results.append(ClassResult(student, report))
    return results


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
                writer.writerow([r.student, 0, "", *[""] * len(exercises), f"not graded: {r.error}"])
                continue
            by_name = {e.exercise: e for e in r.report.exercises}
            problems = "; ".join(f"{e.exercise}: {e.status}" + (f" ({e.reason})" if e.reason else "")
                                 for e in r.report.exercises if e.status != "passed")
            writer.writerow([r.student, f"{r.report.points:g}", f"{r.report.max_points:g}",
                             *[f"{by_name[x].points:g}" if x in by_name else "" for x in exercises],
                             problems])
