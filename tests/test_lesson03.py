"""Lesson 03: what is particular to it, graded through nbgrader in interpreter mode (what
every lesson is checked for is tests/test_lessons.py). Also: the solution's search spaces and
pruning rules are the reference's."""
import runpy

import nbformat
import pytest

from tests.conftest import REPO
from tests.lesson_checks import by_exercise, gpu_only
from tests.submissions.lesson03 import GPU_SUBMISSIONS, SUBMISSIONS
from tilegym_edu import tune
from tilegym_edu.reference import pipelined

LESSON = "03_software_pipelining"
SOLUTION = REPO / "solutions" / LESSON / f"{LESSON}.ipynb"


def cell(grade_id: str) -> str:
    notebook = nbformat.read(SOLUTION, as_version=4)
    [found] = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    return "\n".join(line for line in found.source.splitlines() if "### " not in line)


@pytest.mark.slow
def test_failures_name_the_case(lesson_reports):
    reports = lesson_reports(LESSON)
    reason = by_exercise(reports["k_tail_dropped"])["test_matmul_correct"].reason
    assert "case (M=1, N=1, K=1" in reason and "seed" in reason
    reason = by_exercise(reports["schedule_ignores_stages"])["test_pipeline_schedule"].reason
    assert "pipeline_schedule(T=4, S=2, L=3, C=1): tile 1" in reason


def test_gpu_submissions_lose_nothing_without_a_gpu():
    names = {s.name: s for s in SUBMISSIONS}
    for name, (submission, lost_on_gpu) in GPU_SUBMISSIONS.items():
        assert names[name] is submission and submission.loses == ()
        assert set(lost_on_gpu) <= gpu_only(LESSON)


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
