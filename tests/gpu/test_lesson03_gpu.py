"""Lesson 03 graded end to end on a GPU: the solution earns every point (speed cells included;
the persistent cells need compute capability 9.0), the blank learner notebook earns none, and a
submission whose search space only holds num_stages=1 loses the speed cells it should."""
import pytest

from tests.submissions.lesson03 import GPU_SUBMISSIONS
from tilegym_edu import course

LESSON = "03_software_pipelining"

pytestmark = pytest.mark.usefixtures("fresh_tuning_cache")


@pytest.fixture(scope="module")
def solution(course_copy) -> course.GradeReport:
    report = course.grade(LESSON, course_copy / "solutions" / LESSON, root=course_copy,
                          student="gpu_solution03")
    print(report.format_table())
    return report


def test_solution_earns_every_point(solution):
    assert solution.points == solution.max_points, solution.format_table()


def test_blank_learner_notebook_scores_zero(course_copy):
    blank = course.grade(LESSON, root=course_copy, student="gpu_blank03")
    print(blank.format_table())
    assert all(e.points == 0 for e in blank.exercises), blank.format_table()


@pytest.mark.parametrize("name", sorted(GPU_SUBMISSIONS))
def test_wrong_submission_loses_its_speed_cells_on_gpu(course_copy, solution, name, tmp_path):
    submission, loses = GPU_SUBMISSIONS[name]
    folder = submission.write(course_copy / "solutions" / LESSON / f"{LESSON}.ipynb", tmp_path)
    report = course.grade(LESSON, folder, root=course_copy, student=f"gpu_{name}")
    print(report.format_table())
    expected = {e.exercise: 0 if e.exercise in loses else e.points for e in solution.exercises}
    assert {e.exercise: e.points for e in report.exercises} == expected, report.format_table()
