"""Lesson 06 graded through nbgrader in interpreter mode: the solution earns every point that
does not need a GPU, the blank learner notebook earns none, and each known-wrong submission loses
exactly the points it should, with a reason that says why. (The solution's kernels are the
reference's: tests/test_reference.py.)"""
import pytest

from tests.lesson_checks import (assert_full_marks_but_gpu, assert_loses_exactly, by_exercise,
                                 grade_blank, grade_submissions)
from tests.submissions.lesson06 import SUBMISSIONS

LESSON = "06_capstone"
POINTS = {"test_rmsnorm_correct": 3, "test_rmsnorm_bandwidth": 1, "test_rope_correct": 3,
          "test_rope_bandwidth": 1, "test_swiglu_correct": 2, "test_swiglu_bandwidth": 1,
          "test_your_kernels": 2, "test_swapped_model": 4, "test_model_vs_eager": 3}
GPU_ONLY = {"test_rmsnorm_bandwidth", "test_rope_bandwidth", "test_swiglu_bandwidth",
            "test_model_vs_eager"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def reports(course_copy, tmp_path_factory):
    return grade_submissions(LESSON, course_copy, tmp_path_factory, SUBMISSIONS)


def test_solution_earns_every_point_but_the_gpu_ones(reports):
    assert_full_marks_but_gpu(reports["solution"], POINTS, GPU_ONLY)


@pytest.mark.parametrize("submission", SUBMISSIONS, ids=lambda s: s.name)
def test_wrong_submission_loses_exactly_its_points(reports, submission):
    assert_loses_exactly(reports["solution"], reports[submission.name], submission)


def test_blank_learner_notebook_scores_zero_on_every_cell(course_copy):
    report = grade_blank(LESSON, course_copy)
    assert len(report.exercises) == len(POINTS)
    assert {e.status for e in report.exercises} == {"failed", "needs GPU"}


def test_failures_name_the_case(reports):
    reason = by_exercise(reports["rmsnorm_without_eps"])["test_rmsnorm_correct"].reason
    assert "case (rows=" in reason and "zero_rows" in reason and "seed" in reason
    reason = by_exercise(reports["attention_without_causal_mask"])["test_swapped_model"].reason
    assert "case (batch=" in reason and "first bad element" in reason
