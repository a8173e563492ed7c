"""What every lesson's grading tests check, written once: grade each submission once per test
session, and compare its grade table with the solution's."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from tests.submissions import Submission
from tilegym_edu import course


def by_exercise(report: course.GradeReport) -> dict[str, course.ExerciseResult]:
    return {e.exercise: e for e in report.exercises}


def grade_submissions(lesson: str, root: Path, tmp_path_factory,
                      submissions: list[Submission]) -> dict[str, course.GradeReport]:
    """The solution (as "solution") and every submission graded once, in ``root``'s gradebook;
    student ids are prefixed with the lesson number so lessons never share one."""
    prefix = lesson[:2]
    solution = root / "solutions" / lesson / f"{lesson}.ipynb"
    graded = {"solution": course.grade(lesson, solution.parent, root=root,
                                       student=f"l{prefix}_solution")}
    for submission in submissions:
        folder = submission.write(solution, tmp_path_factory.mktemp(f"l{prefix}_{submission.name}"))
        graded[submission.name] = course.grade(lesson, folder, root=root,
                                               student=f"l{prefix}_{submission.name}")
    return graded


def assert_full_marks_but_gpu(report: course.GradeReport, points: dict[str, int],
                              gpu_only: set[str]) -> None:
    """Every exercise earns its points, except the GPU-only ones: 0 and "needs GPU"."""
    results = by_exercise(report)
    assert set(results) == set(points)
    for name, max_points in points.items():
        assert results[name].max_points == max_points
        if name in gpu_only:
            assert (results[name].points, results[name].status) == (0, "needs GPU")
            assert "needs an NVIDIA GPU" in results[name].reason
        else:
            assert (results[name].points, results[name].status) == (max_points, "passed"), results[name]


def assert_loses_exactly(solution: course.GradeReport, graded: course.GradeReport,
                         submission: Submission) -> None:
    """The cells ``submission.loses`` score 0 with its reason; every other cell scores as the
    solution does."""
    solution_results, results = by_exercise(solution), by_exercise(graded)
    for name, result in results.items():
        if name in submission.loses:
            assert result.points == 0 and result.status == "failed", result
            assert submission.reason in result.reason, result.reason
        else:
            assert result.points == solution_results[name].points, result
            assert result.status == solution_results[name].status


def grade_blank(lesson: str, root: Path) -> course.GradeReport:
    """Grade the learner notebook of ``lesson`` as given (blank); check it scores 0 on every
    cell, each failure is the NotImplementedError placeholder, feedback is written, and the
    notebook is not modified. Returns the report for lesson-specific checks."""
    notebook = root / "notebooks" / lesson / f"{lesson}.ipynb"
    before = hashlib.sha256(notebook.read_bytes()).hexdigest()
    report = course.grade(lesson, root=root, student=f"l{lesson[:2]}_blank")
    assert all(e.points == 0 for e in report.exercises), report.format_table()
    assert {e.status for e in report.exercises} <= {"failed", "needs GPU"}
    assert all("NotImplementedError" in e.reason for e in report.exercises if e.status == "failed")
    assert hashlib.sha256(notebook.read_bytes()).hexdigest() == before, "grading modified it"
    assert all(path.endswith(".html") and os.path.exists(path) for path in report.feedback)
    return report
