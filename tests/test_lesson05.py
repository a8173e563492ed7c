"""Lesson 05 graded through nbgrader in interpreter mode: the solution earns every point that
does not need a GPU, the blank learner notebook earns none, and each known-wrong submission loses
exactly the points it should, with a reason that says why. (The solution's kernel is the
reference's: tests/test_reference.py.)"""
import pytest

from tests.lesson_checks import (assert_full_marks_but_gpu, assert_loses_exactly, by_exercise,
                                 grade_blank, grade_submissions)
from tests.submissions.lesson05 import SUBMISSIONS

LESSON = "05_convolution"
POINTS = {"test_im2col_index": 3, "test_conv2d_correct": 4, "test_conv2d_strided": 3,
          "test_never_materialises": 2, "test_conv2d_vs_im2col": 2, "test_conv2d_vs_cudnn": 3}
GPU_ONLY = {"test_conv2d_vs_im2col", "test_conv2d_vs_cudnn"}

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
    reason = by_exercise(reports["stride_on_wrong_axis"])["test_conv2d_strided"].reason
    assert "case (N=" in reason and "stride=(2, 1)" in reason and "seed" in reason
    assert "first bad element" in reason
    reason = by_exercise(reports["im2col_ignores_dilation"])["test_im2col_index"].reason
    assert "dilation 2" in reason and "A[" in reason and "im2col_source returned" in reason
    reason = by_exercise(reports["padding_ignored"])["test_never_materialises"].reason
    assert "N1 C16 8x8 K16 3x3" in reason and "the counted run's output is wrong" in reason

