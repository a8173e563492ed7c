"""Lesson 05 graded end to end on a GPU: the solution earns every point (2x over im2col +
cuBLAS, half of cuDNN's channels_last speed), the blank learner notebook earns none, and a
call to F.conv2d is refused in the timed cells too."""
import pytest

from tests.submissions.lesson05 import SUBMISSIONS
from tilegym_edu import course

LESSON = "05_convolution"
SPEED_CELLS = {"test_conv2d_vs_im2col", "test_conv2d_vs_cudnn"}

pytestmark = pytest.mark.usefixtures("fresh_tuning_cache")


@pytest.fixture(scope="module")
def solution(course_copy) -> course.GradeReport:
    report = course.grade(LESSON, course_copy / "solutions" / LESSON, root=course_copy,
                          student="gpu_solution05")
    print(report.format_table())
    return report


def test_solution_earns_every_point(solution):
    assert solution.points == solution.max_points, solution.format_table()


def test_blank_learner_notebook_scores_zero(course_copy):
    blank = course.grade(LESSON, root=course_copy, student="gpu_blank05")
    print(blank.format_table())
    assert all(e.points == 0 for e in blank.exercises), blank.format_table()


def test_library_shortcut_loses_every_cell_that_calls_it(course_copy, solution, tmp_path):
    [shortcut] = [s for s in SUBMISSIONS if "f_conv2d" in s.name.lower()
                  or "shortcut" in s.name.lower()]
    folder = shortcut.write(course_copy / "solutions" / LESSON / f"{LESSON}.ipynb", tmp_path)
    report = course.grade(LESSON, folder, root=course_copy, student="gpu_shortcut05")
    print(report.format_table())
    lost = {e.exercise for e in report.exercises if e.points == 0}
    assert set(shortcut.loses) | SPEED_CELLS == lost, report.format_table()
