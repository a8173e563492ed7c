"""Lesson 01 graded through nbgrader in interpreter mode: the solution earns every point that
does not need a GPU, the blank learner notebook earns none, each known-wrong submission loses
exactly the points it should, and the solution's Triton kernel is the course's reference kernel."""
import hashlib
import inspect
import os

import nbformat
import pytest

from tests.conftest import REPO
from tests.submissions.lesson01 import CUDA_SUBMISSIONS, SUBMISSIONS
from tilegym_edu import course
from tilegym_edu.reference import matmul

LESSON = "01_naive_matmul"
SOLUTION = REPO / "solutions" / LESSON / f"{LESSON}.ipynb"
POINTS = {"test_cuda_kernel": 3, "test_naive_matmul_correct": 4, "test_naive_traffic": 2}
GPU_ONLY = {"test_cuda_kernel"}


def solution_cell(grade_id: str) -> str:
    nb = nbformat.read(SOLUTION, as_version=4)
    [cell] = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    return cell.source


def test_solution_kernel_is_the_reference_kernel_verbatim():
    """One source of truth: the solution's Triton cell is reference/matmul.py's naive kernel and
    wrapper (without the decorator that forbids it in graded calls), solution markers aside."""
    cell = "\n".join(line for line in solution_cell("naive_matmul_solution").splitlines()
                     if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))
    kernel = inspect.getsource(matmul.naive_matmul_kernel.fn)
    wrapper = inspect.getsource(matmul.naive_matmul.__wrapped__)
    assert wrapper.startswith("@forbidden_in_graded_calls\n")
    wrapper = wrapper.removeprefix("@forbidden_in_graded_calls\n")
    assert cell.strip() == f"{kernel}\n\n{wrapper}".strip()


@pytest.mark.parametrize("submission", CUDA_SUBMISSIONS, ids=lambda s: s.name)
def test_cuda_submissions_still_apply_to_the_solution(submission, tmp_path):
    """The CUDA C submissions are graded on a GPU only; here: their edits still match."""
    folder = submission.write(SOLUTION, tmp_path)
    assert (folder / SOLUTION.name).exists()


@pytest.fixture(scope="session")
def reports(course_copy, tmp_path_factory) -> dict[str, course.GradeReport]:
    """Every submission of lesson 01 graded once, in the session's one gradebook."""
    solution = course_copy / "solutions" / LESSON / f"{LESSON}.ipynb"
    graded = {"solution": course.grade(LESSON, solution.parent, root=course_copy, student="solution01")}
    for submission in SUBMISSIONS:
        folder = submission.write(solution, tmp_path_factory.mktemp(submission.name))
        graded[submission.name] = course.grade(LESSON, folder, root=course_copy,
                                               student=f"lesson01_{submission.name}")
    return graded


def by_exercise(report: course.GradeReport) -> dict[str, course.ExerciseResult]:
    return {e.exercise: e for e in report.exercises}


@pytest.mark.slow
def test_solution_earns_every_point_but_the_gpu_ones(reports):
    results = by_exercise(reports["solution"])
    assert set(results) == set(POINTS)
    for name, points in POINTS.items():
        assert results[name].max_points == points
        if name in GPU_ONLY:
            assert (results[name].points, results[name].status) == (0, "needs GPU")
            assert "needs an NVIDIA GPU" in results[name].reason
        else:
            assert (results[name].points, results[name].status) == (points, "passed"), results[name]


@pytest.mark.slow
@pytest.mark.parametrize("submission", SUBMISSIONS, ids=lambda s: s.name)
def test_wrong_submission_loses_exactly_its_points(reports, submission):
    solution, graded = by_exercise(reports["solution"]), by_exercise(reports[submission.name])
    for name in POINTS:
        if name in submission.loses:
            assert graded[name].points == 0 and graded[name].status == "failed", graded[name]
            assert submission.reason in graded[name].reason, graded[name].reason
        else:
            assert graded[name].points == solution[name].points, graded[name]
            assert graded[name].status == solution[name].status


@pytest.mark.slow
def test_blank_learner_notebook_scores_zero_on_every_cell(course_copy):
    notebook = course_copy / "notebooks" / LESSON / f"{LESSON}.ipynb"
    before = hashlib.sha256(notebook.read_bytes()).hexdigest()
    report = course.grade(LESSON, root=course_copy, student="blank01")
    assert [e.points for e in report.exercises] == [0, 0, 0]
    assert {e.exercise: e.status for e in report.exercises} == {
        "test_cuda_kernel": "needs GPU", "test_naive_matmul_correct": "failed",
        "test_naive_traffic": "failed"}
    assert all("NotImplementedError" in e.reason for e in report.exercises if e.status == "failed")
    assert hashlib.sha256(notebook.read_bytes()).hexdigest() == before, "grading modified it"
    assert all(path.endswith(".html") and os.path.exists(path) for path in report.feedback)


@pytest.mark.slow
def test_failure_names_the_case(reports):
    reason = by_exercise(reports["b_strides_swapped"])["test_naive_matmul_correct"].reason
    assert "case (M=" in reason and "seed" in reason and "first bad element" in reason
