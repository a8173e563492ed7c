"""The reference kernels: correct on every seed (so no honest kernel compared with them is failed
by a flaky reference), forbidden inside graded calls, and identical to the lesson solutions."""
import ast
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


def _kernel_sources(notebook):
    """The @triton.jit functions defined in a notebook's code cells, by name."""
    found = {}
    for cell in nbformat.read(notebook, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        source = "\n".join(l for l in cell.source.splitlines() if "### " not in l)
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.decorator_list:
                found[node.name] = ast.get_source_segment(source, node)
    return found


@pytest.mark.parametrize("lesson, kernel", [("01_naive_matmul", matmul.naive_matmul_kernel),
                                            ("02_tiled_matmul", matmul.tiled_matmul_kernel)])
def test_reference_kernel_is_the_lesson_solution_word_for_word(lesson, kernel):
    notebook = REPO / "solutions" / lesson / f"{lesson}.ipynb"
    if not notebook.exists():
        pytest.skip(f"{lesson} is not written yet")
    name = kernel.fn.__name__
    in_notebook = _kernel_sources(notebook).get(name)
    assert in_notebook is not None, f"{notebook.name} defines no kernel {name}"
    reference = ast.parse(inspect.getsource(kernel.fn)).body[0]
    reference.decorator_list = []          # get_source_segment starts at `def`: compare bodies
    assert ast.dump(ast.parse(in_notebook).body[0]) == ast.dump(reference), \
        f"{name} in {notebook.name} differs from tilegym_edu/reference/matmul.py"
