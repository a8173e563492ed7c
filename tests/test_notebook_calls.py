"""Every call a solution notebook makes to tilegym_edu's grading, bench and check helpers binds
to the helper's signature. The GPU-only cells never run in the interpreter, so without this a
wrong keyword there (lesson 06's first GPU run: assert_speedup got 'tolerances') would surface
only on a learner's GPU."""
import ast
import inspect

import nbformat
import pytest

from tests.conftest import REPO
from tilegym_edu import bench, check, grading

MODULES = {"grading": grading, "bench": bench, "check": check}
NOTEBOOKS = sorted((REPO / "solutions").glob("*/*.ipynb"))


def helper_calls(notebook):
    """(cell number, module name, function name, ast.Call) of every `module.function(...)` call
    to the helper modules in the notebook's code cells."""
    cells = nbformat.read(notebook, as_version=4).cells
    for number, cell in enumerate(cells):
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in MODULES):
                yield number, node.func.value.id, node.func.attr, node


def test_the_solution_notebooks_call_helpers():
    assert NOTEBOOKS and all(any(helper_calls(nb)) for nb in NOTEBOOKS)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.parent.name)
def test_every_helper_call_binds_to_its_signature(notebook):
    problems = []
    for number, module, name, call in helper_calls(notebook):
        function = getattr(MODULES[module], name, None)
        if function is None:
            problems.append(f"cell {number}: {module}.{name} does not exist")
            continue
        if (any(isinstance(a, ast.Starred) for a in call.args)
                or any(k.arg is None for k in call.keywords)):
            continue  # *args / **kwargs: cannot be checked statically
        try:
            inspect.signature(function).bind(*call.args, **{k.arg: k.value for k in call.keywords})
        except TypeError as error:
            problems.append(f"cell {number}: {module}.{name}(...): {error}")
    assert not problems, "\n".join(problems)
