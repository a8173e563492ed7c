"""Every lesson graded through nbgrader in interpreter mode, one table for all: the solution earns
every point that does not need a GPU, the blank learner notebook earns none on every cell, and each
known-wrong submission (tests/submissions/lessonNN.py) loses exactly the points it should, with a
reason that says why. Points come from the notebooks' own metadata. What is particular to one
lesson is in its tests/test_lessonNN.py."""
import pytest

from tests.lesson_checks import (LESSONS, assert_full_marks_but_gpu, assert_loses_exactly,
                                 gpu_only, grade_blank, lesson_points, submissions_of)

pytestmark = pytest.mark.slow

CASES = [(lesson, s) for lesson in LESSONS for s in submissions_of(lesson)]


@pytest.mark.parametrize("lesson", LESSONS)
def test_solution_earns_every_point_but_the_gpu_ones(lesson, lesson_reports):
    assert_full_marks_but_gpu(lesson_reports(lesson)["solution"], lesson_points(lesson),
                              gpu_only(lesson))


@pytest.mark.parametrize("lesson, submission", CASES, ids=[f"{lesson[:2]}:{s.name}" for lesson, s in CASES])
def test_wrong_submission_loses_exactly_its_points(lesson, submission, lesson_reports):
    reports = lesson_reports(lesson)
    assert_loses_exactly(reports["solution"], reports[submission.name], submission)


@pytest.mark.parametrize("lesson", LESSONS)
def test_blank_learner_notebook_scores_zero_on_every_cell(lesson, course_copy):
    report = grade_blank(lesson, course_copy)
    assert [e.exercise for e in report.exercises] == list(lesson_points(lesson))
    statuses = {e.exercise: e.status for e in report.exercises}
    assert {g for g, s in statuses.items() if s == "needs GPU"} <= gpu_only(lesson)
    assert "failed" in statuses.values()
