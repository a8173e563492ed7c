"""tilegym_edu.includes: each kernel written once, and what the lesson sources take from where."""
import ast
import copy
import re
import shutil

import nbformat
import pytest

from tests.conftest import REPO
from tilegym_edu import build, course, includes, percent

SOURCES = sorted((REPO / "solutions").glob("*/*.py"))


def _cell(lesson, grade_id):
    nb = percent.from_text((REPO / "solutions" / lesson / f"{lesson}.py").read_text())
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def test_an_included_function_is_shown_as_a_lesson_shows_it(tmp_path):
    module = tmp_path / "mod.py"
    module.write_text('import x\n\n\n@forbidden_in_graded_calls\n@functools.cache\ndef add(a, b):\n'
                      '    """a + b."""\n    c = a + b\n    return c\n\n\n'
                      'def bare(a):\n    return a\n')
    assert includes.function_source(module, "add") == (
        '@functools.cache\ndef add(a, b):\n    """a + b."""\n    c = a + b\n    return c')
    assert includes.function_source(module, "add", "plus", solution=True) == (
        '@functools.cache\ndef plus(a, b):\n    """a + b."""\n    ### BEGIN SOLUTION\n'
        '    c = a + b\n    return c\n    ### END SOLUTION')
    assert includes.function_source(module, "bare", solution=True) == (
        "def bare(a):\n    ### BEGIN SOLUTION\n    return a\n    ### END SOLUTION")
    with pytest.raises(ValueError, match="no top-level function nope"):
        includes.function_source(module, "nope")



def test_code_lines_count_code_and_leave_out_docstrings_comments_and_blanks(tmp_path,
                                                                           monkeypatch):
    (tmp_path / "mod.py").write_text(
        '@deco\ndef add(a, b):\n    """a + b,\n    over two lines."""\n    # a comment\n\n'
        '    c = a + b\n    return c\n\n\ndef bare(a):\n    return a\n')
    monkeypatch.setattr(includes, "PACKAGE_ROOT", tmp_path)
    assert includes.code_lines("mod.py", "add") == 3          # def, c = a + b, return c
    assert includes.code_lines("mod.py", "add", "bare") == 5
    with pytest.raises(ValueError, match="no top-level function nope"):
        includes.code_lines("mod.py", "nope")

def test_a_lesson_cell_is_included_whole_with_its_own_includes_expanded():
    brought = includes.lesson_cell(REPO, "04_flash_attention", "flash_attention_solution")
    assert "def attention_blocks(" in brought and "### BEGIN SOLUTION" in brought
    assert not includes.has_includes(brought)
    six = includes.expand(copy.deepcopy(percent.from_text(
        (REPO / "solutions/06_capstone/06_capstone.py").read_text())), REPO)
    bring = next(c for c in six.cells
                 if c.metadata.get("nbgrader", {}).get("grade_id") == "bring_your_kernels")
    matmul = includes.lesson_cell(REPO, "03_software_pipelining", "matmul_solution")
    assert bring.source.startswith(brought) and bring.source.endswith(matmul)
    assert "def matmul_kernel(" in matmul and "MATMUL_SPACE = " in matmul


@pytest.mark.parametrize("line, why", [
    ("# include: somewhere", "cannot read"),
    ("# include: 04_flash_attention flash_attention_solution solution", "included whole"),
    ("# include: 04_flash_attention nope", "has no cell nope"),
])
def test_an_include_that_cannot_work_says_why(line, why):
    nb = percent.from_text(percent.to_text(_notebook_with(line)))
    with pytest.raises(ValueError, match=why):
        includes.expand(nb, REPO)


def _notebook_with(source):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    nb.cells[0].id = "c"
    return nb


#: how a kernel's decorator reads, by language: Triton's @triton.jit, cuTile's @ct.kernel or
#: @cutile_kernel (tilegym_edu.cutile), with or without options
KERNEL_DECORATORS = {"triton": ("jit",), "cutile": ("ct.kernel", "cutile_kernel")}


def _literal_kernels(text):
    """(language, name) of the kernels a file defines in its own text. A name is counted per
    language: lesson 07's cuTile kernels are twins of Triton kernels, and named like them."""
    return {(language, n.name) for n in ast.walk(ast.parse(text))
            if isinstance(n, ast.FunctionDef)
            for language, marks in KERNEL_DECORATORS.items()
            if any(mark in ast.unparse(d) for d in n.decorator_list for mark in marks)}


def test_kernels_are_found_in_both_languages():
    found = _literal_kernels("@triton.jit\ndef a(x):\n    pass\n\n\n@ct.kernel\ndef a(x):\n"
                             "    pass\n\n\n@cutile_kernel(occupancy=2)\ndef b(x):\n    pass\n")
    assert found == {("triton", "a"), ("cutile", "a"), ("cutile", "b")}


def test_no_kernel_is_written_in_two_files():
    """Every @triton.jit function, and every cuTile kernel, is defined in one file: the
    package, or one lesson source."""
    files = sorted((REPO / "tilegym_edu").rglob("*.py")) + SOURCES
    where: dict[tuple[str, str], list[str]] = {}
    for path in files:
        text = path.read_text()
        if path in SOURCES:    # the code cells, as written (include lines are comments)
            nb = percent.from_text(text)
            text = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        for kernel in _literal_kernels(text):
            where.setdefault(kernel, []).append(str(path.relative_to(REPO)))
    assert ("cutile", "flash_attention_kernel") in where
    twice = {kernel: paths for kernel, paths in where.items() if len(paths) > 1}
    assert not twice, twice


def test_the_course_kernels_reach_the_lessons_by_include():
    wanted = {("01_naive_matmul", "naive_matmul_solution"),
              ("02_tiled_matmul", "tiled_matmul_solution"),
              ("03_software_pipelining", "matmul_solution"),
              ("03_software_pipelining", "persistent_solution"),
              ("04_flash_attention", "softmax_solution"),
              ("04_flash_attention", "flash_attention_solution"),
              ("05_convolution", "conv2d_solution"), ("06_capstone", "rmsnorm_solution"),
              ("06_capstone", "rope_solution"), ("06_capstone", "swiglu_solution"),
              ("06_capstone", "bring_your_kernels"), ("07_cutile", "silu_mul_solution"),
              ("07_cutile", "matmul_solution"), ("07_cutile", "persistent_solution"),
              ("07_cutile", "flash_attention_solution")}
    for lesson, grade_id in wanted:
        assert includes.has_includes(_cell(lesson, grade_id).source), (lesson, grade_id)


def test_an_edit_of_included_code_in_the_notebook_is_not_written_back(tmp_path):
    lesson = "01_naive_matmul"
    shutil.copytree(REPO / "solutions" / lesson, tmp_path / "solutions" / lesson)
    notebook = tmp_path / "solutions" / lesson / f"{lesson}.ipynb"
    before = (tmp_path / "solutions" / lesson / f"{lesson}.py").read_text()
    build.write_sources(lesson, tmp_path)            # unedited: the includes stay
    assert (tmp_path / "solutions" / lesson / f"{lesson}.py").read_text() == before
    notebook.write_text(re.sub(r"acc \+= a\.to", "acc -= a.to", notebook.read_text(), count=1))
    with pytest.raises(course.CourseError, match="takes its code from elsewhere"):
        build.write_sources(lesson, tmp_path)
    assert (tmp_path / "solutions" / lesson / f"{lesson}.py").read_text() == before
