"""The reference kernels: correct on every seed (so no honest kernel compared with them is failed
by a flaky reference), forbidden inside graded calls, and identical to the lesson solutions."""
import inspect

import nbformat
import pytest
import torch

from tests.conftest import REPO
from tilegym_edu import grading
from tilegym_edu.check import check, random_tensor
from tilegym_edu.reference import matmul

SHAPES = [(1, 1, 1), (5, 3, 7), (2, 6, 70), (8, 1, 40)]  # few programs: 20 seeds each


def make_inputs(case, generator):
    M, N, K = case["shape"]
    return random_tensor((M, K), case["dtype"], generator), random_tensor((K, N), case["dtype"], generator)


@pytest.mark.parametrize("fn", [matmul.naive_matmul,
                                lambda a, b: matmul.tiled_matmul(a, b, 16, 16, 16)],
                         ids=["naive", "tiled"])
def test_reference_matmuls_pass_on_20_seeds(fn):
    cases = [{"shape": s, "dtype": d} for s in SHAPES for d in (torch.float32, torch.float16)]
    results = check(fn, lambda a, b: a @ b, make_inputs, cases, seeds=range(20))
    failed = [r.describe() for r in results if not r.passed]
    assert not failed, failed[:3]


def test_reference_kernels_raise_inside_graded_calls():
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    for fn in (matmul.naive_matmul, matmul.tiled_matmul):
        with pytest.raises(grading.LibraryShortcut, match="reference"):
            grading.guarded_call(fn, (a, b))


@pytest.mark.parametrize("lesson, grade_id, kernel, wrapper", [
    ("01_naive_matmul", "naive_matmul_solution", matmul.naive_matmul_kernel, matmul.naive_matmul),
    ("02_tiled_matmul", "tiled_matmul_solution", matmul.tiled_matmul_kernel, matmul.tiled_matmul)])
def test_reference_is_the_lesson_solution_word_for_word(lesson, grade_id, kernel, wrapper):
    """One source of truth: the solution cell is the reference kernel and wrapper, the wrapper
    without the decorator that forbids it in graded calls, solution markers aside."""
    notebook = nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    [cell] = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    in_notebook = "\n".join(line for line in cell.source.splitlines() if "### " not in line)
    decorated = inspect.getsource(wrapper.__wrapped__)
    assert decorated.startswith("@forbidden_in_graded_calls\n")
    reference = inspect.getsource(kernel.fn) + "\n\n" + decorated.removeprefix("@forbidden_in_graded_calls\n")
    assert in_notebook.strip() == reference.strip(), \
        f"{grade_id} of {lesson} differs from tilegym_edu/reference/matmul.py"
