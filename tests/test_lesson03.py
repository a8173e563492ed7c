"""Lesson 03 graded through nbgrader in interpreter mode: the solution earns every point that
does not need a GPU, the blank learner notebook earns none, and each known-wrong submission loses
exactly the points it should, with a reason that says why. Also: the solution's search spaces and
pruning rules are the reference's. (That its kernels are the reference kernels word for word is
tests/test_reference.py's.)"""
import runpy

import nbformat
import pytest

from tests.conftest import REPO
from tests.lesson_checks import (assert_full_marks_but_gpu, assert_loses_exactly, by_exercise,
                                 grade_blank, grade_submissions)
from tests.submissions.lesson03 import GPU_SUBMISSIONS, SUBMISSIONS
from tilegym_edu import tune
from tilegym_edu.reference import pipelined

LESSON = "03_software_pipelining"
POINTS = {"test_pipeline_schedule": 3, "test_shared_memory_bytes": 2, "test_matmul_correct": 4,
          "test_pipelined_vs_unpipelined": 2, "test_pipelined_vs_cublas": 2,
          "test_persistent_correct": 3, "test_persistent_vs_cublas": 2}
GPU_ONLY = {"test_pipelined_vs_unpipelined", "test_pipelined_vs_cublas", "test_persistent_vs_cublas"}
SOLUTION = REPO / "solutions" / LESSON / f"{LESSON}.ipynb"


def cell(grade_id: str) -> str:
    notebook = nbformat.read(SOLUTION, as_version=4)
    [found] = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    return "\n".join(line for line in found.source.splitlines() if "### " not in line)


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
    assert len(report.exercises) == len(POINTS)
    assert {e.status for e in report.exercises} == {"failed", "needs GPU"}


@pytest.mark.slow
def test_failures_name_the_case(reports):
    reason = by_exercise(reports["k_tail_dropped"])["test_matmul_correct"].reason
    assert "case (M=1, N=1, K=1" in reason and "seed" in reason
    reason = by_exercise(reports["schedule_ignores_stages"])["test_pipeline_schedule"].reason
    assert "pipeline_schedule(T=4, S=2, L=3, C=1): tile 1" in reason


def test_gpu_submissions_lose_nothing_without_a_gpu():
    names = {s.name: s for s in SUBMISSIONS}
    for name, (submission, lost_on_gpu) in GPU_SUBMISSIONS.items():
        assert names[name] is submission and submission.loses == ()
        assert set(lost_on_gpu) <= GPU_ONLY


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    """The solution's setup, Exercise 2, helper, Exercise 3 and Exercise 4 cells, run as a module
    (a file, so Triton can read the kernels' source)."""
    ids = ["setup", "shared_memory_solution", "matmul_helpers", "matmul_solution", "persistent_solution"]
    path = tmp_path_factory.mktemp("lesson03") / "lesson03_cells.py"
    path.write_text("\n\n".join(cell(i) for i in ids) + "\n")
    return runpy.run_path(str(path))


RESOURCES = [tune.Resources(shared_bytes=b) for b in (232_448, 166_912, 101_376, 65_536)]


@pytest.mark.parametrize("space, reference_space, prune", [
    ("MATMUL_SPACE", pipelined.PIPELINED_SPACE, "fits"),
    ("PERSISTENT_SPACE", pipelined.PERSISTENT_SPACE, "fits_persistent")])
def test_solution_search_spaces_are_the_reference(cells, space, reference_space, prune):
    """Same candidates at every level, and the same ones pruned on GPUs of several sizes."""
    ours = cells[space]
    assert ours.cap == reference_space.cap and ours.prune is cells[prune]
    for level in (0, 1, 2):
        assert ours.configs(level) == reference_space.configs(level)
    for resources in RESOURCES:
        for dtype in ("float16", "float32"):
            problem = {"M": 4096, "N": 4096, "K": 4096, "dtype": dtype}
            for config in ours.configs(2):
                assert ((cells[prune](config, problem, resources) is None)
                        == (pipelined.matmul_prune(config, problem, resources) is None)), (config, resources)
            assert (ours.candidates(2, problem, resources)[0]
                    == reference_space.candidates(2, problem, resources)[0])


def test_solution_shared_memory_is_the_reference(cells):
    for config in pipelined.PIPELINED_SPACE.configs(2):
        for element_bytes in (2, 4):
            assert (cells["shared_memory_bytes"](config, element_bytes)
                    == pipelined.matmul_shared_bytes(config, element_bytes))
