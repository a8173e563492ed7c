"""Lesson 01 graded end to end on a GPU: the solution earns every point (its CUDA C kernel built
with load_inline), the blank learner notebook earns none, and each wrong CUDA C kernel loses the
CUDA cell and nothing else."""
import pytest

from tests.submissions.lesson01 import CUDA_SUBMISSIONS
from tilegym_edu import course

LESSON = "01_naive_matmul"


@pytest.fixture(scope="module", autouse=True)
def fresh_extensions_dir(tmp_path_factory):
    """CUDA C builds go to a fresh folder (the grading kernels inherit the variable): every build
    is real, and no lock file left by an interrupted build elsewhere can hang one."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path_factory.mktemp("torch_extensions")))
        yield


@pytest.fixture(scope="module")
def solution(course_copy) -> course.GradeReport:
    report = course.grade(LESSON, course_copy / "solutions" / LESSON, root=course_copy,
                          student="gpu_solution01")
    print(report.format_table())
    return report


def test_solution_earns_every_point(solution):
    assert solution.points == solution.max_points == 9, solution.format_table()


def test_blank_learner_notebook_scores_zero(course_copy):
    blank = course.grade(LESSON, root=course_copy, student="gpu_blank01")
    print(blank.format_table())
    assert [e.points for e in blank.exercises] == [0, 0, 0], blank.format_table()


@pytest.mark.parametrize("submission", CUDA_SUBMISSIONS, ids=lambda s: s.name)
def test_wrong_cuda_kernel_loses_only_its_cell(course_copy, solution, submission, tmp_path):
    folder = submission.write(course_copy / "solutions" / LESSON / f"{LESSON}.ipynb", tmp_path)
    report = course.grade(LESSON, folder, root=course_copy, student=f"gpu_{submission.name}")
    print(report.format_table())
    expected = {e.exercise: 0 if e.exercise in submission.loses else e.points
                for e in solution.exercises}
    assert {e.exercise: e.points for e in report.exercises} == expected, report.format_table()
    for e in report.exercises:
        if e.exercise in submission.loses:
            assert e.status == "failed" and submission.reason in e.reason, e
