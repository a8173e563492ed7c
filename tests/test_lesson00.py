"""Lesson 00 graded through nbgrader in interpreter mode: the solution earns every point that
does not need a GPU, the blank learner notebook earns none, and each known-wrong submission loses
exactly the points it should, with a reason that says why."""
import hashlib
import os

import pytest

from tests.submissions.lesson00 import SUBMISSIONS
from tilegym_edu import course

LESSON = "00_getting_started"
POINTS = {"test_silu_mul_correct": 4, "test_bytes": 2, "test_silu_mul_bandwidth": 2}
GPU_ONLY = {"test_silu_mul_bandwidth"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def reports(course_copy, tmp_path_factory) -> dict[str, course.GradeReport]:
    """Every submission of lesson 00 graded once, in the session's one gradebook."""
    solution = course_copy / "solutions" / LESSON / f"{LESSON}.ipynb"
    graded = {"solution": course.grade(LESSON, solution.parent, root=course_copy, student="solution")}
    for submission in SUBMISSIONS:
        folder = submission.write(solution, tmp_path_factory.mktemp(submission.name))
        graded[submission.name] = course.grade(LESSON, folder, root=course_copy,
                                               student=submission.name)
    return graded


def by_exercise(report: course.GradeReport) -> dict[str, course.ExerciseResult]:
    return {e.exercise: e for e in report.exercises}


def test_solution_earns_every_point_but_the_gpu_ones(reports):
    results = by_exercise(reports["solution"])
    assert set(results) == set(POINTS)
    for name, points in POINTS.items():
        assert results[name].max_points == points
        if name in GPU_ONLY:
            assert (results[name].points, results[name].status) == (0, "needs GPU")
            assert "needs an NVIDIA GPU" in results[name].reason
        else:
            assert (results[name].points, results[name].status) == (points, "passed"), results[name]


@pytest.mark.parametrize("submission", SUBMISSIONS, ids=lambda s: s.name)
def test_wrong_submission_loses_exactly_its_points(reports, submission):
    solution, graded = by_exercise(reports["solution"]), by_exercise(reports[submission.name])
    for name in POINTS:
        if name in submission.loses:
            assert graded[name].points == 0 and graded[name].status == "failed", graded[name]
            assert submission.reason in graded[name].reason, graded[name].reason
        else:
            assert graded[name].points == solution[name].points, graded[name]
            assert graded[name].status == solution[name].status


def test_blank_learner_notebook_scores_zero_on_every_cell(course_copy):
    notebook = course_copy / "notebooks" / LESSON / f"{LESSON}.ipynb"
    before = hashlib.sha256(notebook.read_bytes()).hexdigest()
    report = course.grade(LESSON, root=course_copy, student="blank")
    assert [e.points for e in report.exercises] == [0, 0, 0]
    assert {e.status for e in report.exercises} == {"failed", "needs GPU"}
    assert all("NotImplementedError" in e.reason for e in report.exercises if e.status == "failed")
    assert hashlib.sha256(notebook.read_bytes()).hexdigest() == before, "grading modified it"
    assert all(path.endswith(".html") and os.path.exists(path)
               for path in report.feedback)


def test_failure_names_the_case(reports):
    reason = by_exercise(reports["tail_not_covered"])["test_silu_mul_correct"].reason
    assert "case (shape=" in reason and "seed" in reason and "first bad element" in reason
