"""Lesson 04 graded end to end on a GPU: the solution earns every point (bandwidth, speed over
naive attention, O(seq) memory, speed against the best SDPA backend), the blank learner notebook
earns none, and a call to F.scaled_dot_product_attention is refused in the timed cells too."""
import pytest

from tests.submissions.lesson04 import SUBMISSIONS
from tilegym_edu import course

LESSON = "04_flash_attention"

pytestmark = pytest.mark.usefixtures("fresh_tuning_cache")


@pytest.fixture(scope="module")
def solution(course_copy) -> course.GradeReport:
    report = course.grade(LESSON, course_copy / "solutions" / LESSON, root=course_copy,
                          student="gpu_solution04")
    print(report.format_table())
    return report


def test_solution_earns_every_point(solution):
    assert solution.points == solution.max_points, solution.format_table()


def test_blank_learner_notebook_scores_zero(course_copy):
    blank = course.grade(LESSON, root=course_copy, student="gpu_blank04")
    print(blank.format_table())
    assert all(e.points == 0 for e in blank.exercises), blank.format_table()


def test_library_shortcut_loses_every_cell_that_calls_it(course_copy, solution, tmp_path):
    [shortcut] = [s for s in SUBMISSIONS if "sdpa" in s.name.lower() or "shortcut" in s.name.lower()]
    folder = shortcut.write(course_copy / "solutions" / LESSON / f"{LESSON}.ipynb", tmp_path)
    report = course.grade(LESSON, folder, root=course_copy, student="gpu_shortcut04")
    print(report.format_table())
    flash_cells = {"test_flash_vs_naive", "test_peak_memory", "test_flash_vs_best_sdpa"}
    lost = {e.exercise for e in report.exercises if e.points == 0}
    assert set(shortcut.loses) | (flash_cells & lost) == lost, report.format_table()
    assert {"test_flash_vs_naive", "test_flash_vs_best_sdpa"} <= lost, report.format_table()
