"""Lesson 02 graded through nbgrader in interpreter mode: the solution earns every point that
does not need a GPU, the blank learner notebook earns none, and each known-wrong submission loses
exactly the points it should, with a reason that says why."""
import hashlib
import inspect
import os

import nbformat
import pytest

from tests.conftest import REPO
from tests.submissions.lesson02 import SUBMISSIONS
from tilegym_edu import course
from tilegym_edu.reference import matmul

LESSON = "02_tiled_matmul"
POINTS = {"test_tiled_loaded_bytes": 2, "test_tiled_matmul_correct": 4, "test_tiled_matmul_traffic": 2,
          "test_tiled_vs_naive": 2, "test_tiled_vs_cublas": 2, "test_matmul_bias_relu_correct": 3,
          "test_bmm_correct": 3}
GPU_ONLY = {"test_tiled_vs_naive", "test_tiled_vs_cublas"}


def test_solution_wrapper_is_the_reference_without_its_decorator():
    """The kernel is compared word for word by tests/test_reference.py; this checks the wrapper."""
    notebook = nbformat.read(REPO / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
    cell = next(c for c in notebook.cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == "tiled_matmul_solution")
    source = "\n".join(line for line in cell.source.splitlines() if "### " not in line)
    wrapper = inspect.getsource(matmul.tiled_matmul.__wrapped__)
    assert wrapper.startswith("@forbidden_in_graded_calls\n")
    kernel = inspect.getsource(matmul.tiled_matmul_kernel.fn)
    assert source.strip() == (kernel + "\n\n" + wrapper.removeprefix("@forbidden_in_graded_calls\n")).strip()


@pytest.fixture(scope="session")
def reports(course_copy, tmp_path_factory) -> dict[str, course.GradeReport]:
    """Every submission of lesson 02 graded once, in the session's one gradebook."""
    solution = course_copy / "solutions" / LESSON / f"{LESSON}.ipynb"
    graded = {"solution": course.grade(LESSON, solution.parent, root=course_copy, student="l02_solution")}
    for submission in SUBMISSIONS:
        folder = submission.write(solution, tmp_path_factory.mktemp(f"l02_{submission.name}"))
        graded[submission.name] = course.grade(LESSON, folder, root=course_copy,
                                               student=f"l02_{submission.name}")
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
    report = course.grade(LESSON, root=course_copy, student="l02_blank")
    assert [e.points for e in report.exercises] == [0] * len(POINTS)
    assert {e.status for e in report.exercises} == {"failed", "needs GPU"}
    assert all("NotImplementedError" in e.reason for e in report.exercises if e.status == "failed")
    assert hashlib.sha256(notebook.read_bytes()).hexdigest() == before, "grading modified it"
    assert all(path.endswith(".html") and os.path.exists(path) for path in report.feedback)


@pytest.mark.slow
def test_failure_names_the_case(reports):
    reason = by_exercise(reports["fp16_accumulator"])["test_tiled_matmul_correct"].reason
    assert "case (M=32, N=32, K=2048" in reason and "seed" in reason and "tolerance 0.0005" in reason
