"""Lesson 06 graded end to end on a GPU: the solution earns every point (the three fused kernels
near copy bandwidth, the model on the learner's kernels at least as fast as PyTorch eager), the
blank learner notebook earns none, and a PyTorch SwiGLU is refused in the timed cells too."""
import pytest

from tests.submissions.lesson06 import SUBMISSIONS
from tilegym_edu import course

LESSON = "06_capstone"
# the timed cells that call swiglu: its own bandwidth check and the model's prefill
SWIGLU_SPEED_CELLS = {"test_swiglu_bandwidth", "test_model_vs_eager"}

pytestmark = pytest.mark.usefixtures("fresh_tuning_cache")


@pytest.fixture(scope="module")
def solution(course_copy) -> course.GradeReport:
    report = course.grade(LESSON, course_copy / "solutions" / LESSON, root=course_copy,
                          student="gpu_solution06")
    print(report.format_table())
    return report


def test_solution_earns_every_point(solution):
    assert solution.points == solution.max_points, solution.format_table()


def test_blank_learner_notebook_scores_zero(course_copy):
    blank = course.grade(LESSON, root=course_copy, student="gpu_blank06")
    print(blank.format_table())
    assert all(e.points == 0 for e in blank.exercises), blank.format_table()


def test_library_shortcut_loses_every_cell_that_calls_it(course_copy, solution, tmp_path):
    [shortcut] = [s for s in SUBMISSIONS if s.name == "library_shortcut"]
    folder = shortcut.write(course_copy / "solutions" / LESSON / f"{LESSON}.ipynb", tmp_path)
    report = course.grade(LESSON, folder, root=course_copy, student="gpu_shortcut06")
    print(report.format_table())
    lost = {e.exercise for e in report.exercises if e.points == 0}
    assert set(shortcut.loses) | SWIGLU_SPEED_CELLS == lost, report.format_table()
