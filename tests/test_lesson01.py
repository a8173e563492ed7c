"""Lesson 01: what is particular to it, graded through nbgrader in interpreter mode (what
every lesson is checked for is tests/test_lessons.py). Also: the CUDA C submissions still apply to the solution."""
import pytest

from tests.conftest import REPO
from tests.lesson_checks import by_exercise
from tests.submissions.lesson01 import CUDA_SUBMISSIONS

LESSON = "01_naive_matmul"
SOLUTION = REPO / "solutions" / LESSON / f"{LESSON}.ipynb"


@pytest.mark.parametrize("submission", CUDA_SUBMISSIONS, ids=lambda s: s.name)
def test_cuda_submissions_still_apply_to_the_solution(submission, tmp_path):
    """The CUDA C submissions are graded on a GPU only; here: their edits still match."""
    folder = submission.write(SOLUTION, tmp_path)
    assert (folder / SOLUTION.name).exists()


@pytest.mark.slow
def test_failure_names_the_case(lesson_reports):
    reports = lesson_reports(LESSON)
    reason = by_exercise(reports["b_strides_swapped"])["test_naive_matmul_correct"].reason
    assert "case (M=" in reason and "seed" in reason and "first bad element" in reason
