"""Lesson 01 graded through nbgrader in interpreter mode: the solution earns every point that
does not need a GPU, the blank learner notebook earns none, and each known-wrong submission loses
exactly the points it should. (The solution's kernel is the reference: tests/test_reference.py.)"""
import pytest

from tests.conftest import REPO
from tests.lesson_checks import (assert_full_marks_but_gpu, assert_loses_exactly, by_exercise,
                                 grade_blank, grade_submissions)
from tests.submissions.lesson01 import CUDA_SUBMISSIONS, SUBMISSIONS

LESSON = "01_naive_matmul"
SOLUTION = REPO / "solutions" / LESSON / f"{LESSON}.ipynb"
POINTS = {"test_cuda_kernel": 3, "test_naive_matmul_correct": 4, "test_naive_traffic": 2}
GPU_ONLY = {"test_cuda_kernel"}


@pytest.mark.parametrize("submission", CUDA_SUBMISSIONS, ids=lambda s: s.name)
def test_cuda_submissions_still_apply_to_the_solution(submission, tmp_path):
    """The CUDA C submissions are graded on a GPU only; here: their edits still match."""
    folder = submission.write(SOLUTION, tmp_path)
    assert (folder / SOLUTION.name).exists()


@pytest.fixture(scope="session")
def reports(course_copy, tmp_path_factory):
    return grade_submissions(LESSON, course_copy, tmp_path_factory, SUBMISSIONS)


@pytest.mark.slow
def test_solution_earns_every_point_but_the_gpu_ones(reports):
    assert_full_marks_but_gpu(reports["solution"], POINTS, GPU_ONLY)


@pytest.mark.slow
@pytest.mark.parametrize("submission", SUBMISSIONS, ids=lambda s: s.name)
def test_wrong_submission_loses_exactly_its_points(reports, submission):
    assert_loses_exactly(reports["solution"], reports[submission.name], submission)


@pytest.mark.slow
def test_blank_learner_notebook_scores_zero_on_every_cell(course_copy):
    report = grade_blank(LESSON, course_copy)
    assert {e.exercise: e.status for e in report.exercises} == {
        "test_cuda_kernel": "needs GPU", "test_naive_matmul_correct": "failed",
        "test_naive_traffic": "failed"}


@pytest.mark.slow
def test_failure_names_the_case(reports):
    reason = by_exercise(reports["b_strides_swapped"])["test_naive_matmul_correct"].reason
    assert "case (M=" in reason and "seed" in reason and "first bad element" in reason
