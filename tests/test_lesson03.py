"""Lesson 03: what is particular to it (what every lesson is checked for, graded through nbgrader
in interpreter mode, is tests/test_lessons.py): which submissions a GPU alone grades, and the
solution's search spaces and pruning rules are the reference's."""
import runpy

import pytest

from tests.lesson_checks import solution_cells
from tests.submissions.lesson03 import GPU_SUBMISSIONS, SUBMISSIONS
from tilegym_edu import tune
from tilegym_edu.reference import pipelined

LESSON = "03_software_pipelining"


def cell(grade_id: str) -> str:
    source = solution_cells(LESSON)[grade_id]
    return "\n".join(line for line in source.splitlines() if "### " not in line)


def test_the_gpu_submissions_that_are_right_everywhere_are_graded_on_a_gpu_alone():
    """The two that slow the pipelined matmul are right everywhere: only a GPU shows them wrong,
    so only a GPU grades them; the unsplit split-K also loses its store count, and is graded
    here too. (What they lose on a GPU needs one: tests/test_lessons.py checks that.)"""
    here = {s.name for s in SUBMISSIONS}
    assert {case.submission.name: (case.submission.loses, case.submission.name in here)
            for case in GPU_SUBMISSIONS} == {
        "num_stages_forced_to_1": ((), False), "autotunes_every_call": ((), False),
        "split_k_ignored": (("test_split_k_stores",), True)}


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    """The solution's setup, Exercise 2, helper, Exercise 3 and Exercise 4 cells, run as a module
    (a file, so Triton can read the kernels' source)."""
    ids = ["setup", "shared_memory_solution", "matmul_helpers", "matmul_solution",
           "persistent_solution"]
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
                        == (pipelined.matmul_prune(config, problem, resources) is None)), \
                    (config, resources)
            assert (ours.candidates(2, problem, resources)[0]
                    == reference_space.candidates(2, problem, resources)[0])


def test_solution_shared_memory_is_the_reference(cells):
    for config in pipelined.PIPELINED_SPACE.configs(2):
        for element_bytes in (2, 4):
            assert (cells["shared_memory_bytes"](config, element_bytes)
                    == pipelined.matmul_shared_bytes(config, element_bytes))
