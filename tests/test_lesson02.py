"""Lesson 02 graded through nbgrader in interpreter mode: the solution earns every point that
does not need a GPU, the blank learner notebook earns none, and each known-wrong submission loses
exactly the points it should, with a reason that says why. (The solution's kernel is the
reference: tests/test_reference.py.)"""
import pytest

from tests.lesson_checks import (assert_full_marks_but_gpu, assert_loses_exactly, by_exercise,
                                 grade_blank, grade_submissions)
from tests.submissions.lesson02 import SUBMISSIONS

LESSON = "02_tiled_matmul"
POINTS = {"test_tiled_loaded_bytes": 2, "test_tiled_matmul_correct": 4, "test_tiled_matmul_traffic": 2,
          "test_tiled_vs_naive": 2, "test_tiled_vs_cublas": 2, "test_matmul_bias_relu_correct": 3,
          "test_bmm_correct": 3}
GPU_ONLY = {"test_tiled_vs_naive", "test_tiled_vs_cublas"}

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


def test_failure_names_the_case(reports):
    reason = by_exercise(reports["fp16_accumulator"])["test_tiled_matmul_correct"].reason
    assert "case (M=32, N=32, K=2048" in reason and "seed" in reason and "tolerance 0.0005" in reason
