"""Demonstration cells (tagged ``demo``): what grading skips, and why skipping them cannot change
a grade. Static checks over every lesson, plus what ``submission.prepare`` does with them."""
import copy

import nbformat
import pytest

from tilegym_edu import course, submission

LESSONS = course.lessons()


def _notebook(lesson: str) -> nbformat.NotebookNode:
    return nbformat.read(f"solutions/{lesson}/{lesson}.ipynb", as_version=4)


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_lesson_tags_its_demonstrations(lesson):
    assert any(submission.is_demonstration(c) for c in _notebook(lesson).cells)


@pytest.mark.parametrize("lesson", LESSONS)
def test_a_demonstration_is_a_plain_code_cell(lesson):
    """Never a solution, helper or test cell: those are what grading is made of."""
    for cell in _notebook(lesson).cells:
        if submission.is_demonstration(cell):
            assert cell.cell_type == "code" and not cell.metadata.get("nbgrader"), cell.source[:80]


@pytest.mark.parametrize("lesson", LESSONS)
def test_no_other_cell_needs_a_name_only_a_demonstration_binds(lesson):
    """A lesson's grade cannot depend on its skipped cells: every name a kept cell reads is
    bound by a kept cell before it (or by none at all: builtins), never by demonstrations alone."""
    bound_by: dict[str, set[bool]] = {}        # name -> {is a demonstration} of cells binding it
    problems = []
    for n, cell in enumerate(_notebook(lesson).cells):
        if cell.cell_type != "code":
            continue
        bound, needed = submission.names_of(cell.source)
        demo = submission.is_demonstration(cell)
        if not demo:
            problems += [(n, name) for name in sorted(needed) if bound_by.get(name) == {True}]
        for name in bound:
            bound_by.setdefault(name, set()).add(demo)
    assert not problems, f"cells that need names only demonstrations bind: {problems}"


def test_names_of_tells_what_a_cell_binds_from_what_it_needs():
    source = ("import torch\nfrom a.b import c as d\nx = f(x)\ndef g(y):\n    return y + z\n"
              "for i in range(n):\n    total = i\nh = lambda q: q * w\nvals = [k for k in ks]\n"
              "try:\n    pass\nexcept E as why:\n    print(why)\n")
    bound, needed = submission.names_of(source)
    assert {"torch", "d", "x", "g", "y", "i", "total", "h", "vals", "why"} <= bound
    assert needed == {"f", "x", "z", "range", "n", "w", "ks", "E", "print"}
    assert submission.names_of("def f(:") == (set(), set())


def _lesson(cells):
    return nbformat.v4.new_notebook(cells=cells)


def _code(source, grade_id=None, grade=False, solution=False, tags=()):
    cell = nbformat.v4.new_code_cell(source)
    if grade_id:
        cell.metadata.nbgrader = {"grade_id": grade_id, "grade": grade, "solution": solution,
                                  "locked": not solution, "points": 1 if grade else 0,
                                  "schema_version": 3}
    if tags:
        cell.metadata.tags = list(tags)
    return cell


LESSON = _lesson([
    _code("import math", "setup"),
    _code("def f():\n    raise NotImplementedError()", "f_solution", solution=True),
    _code("sweep = [f() for _ in range(100)]", tags=["demo"]),
    _code("def checker(v):\n    return v == 1", "helpers"),
    _code("assert checker(f())", "test_f", grade=True),
    _code("limit = 2\nassert f() < limit", "test_g", grade=True),
    _code("assert f() < limit + 1", "test_h", grade=True),
])


def _sources(prepared):
    return [c.source for c in prepared.notebook.cells if c.cell_type == "code"]


def test_grading_skips_demonstrations_and_says_so_of_an_edited_one():
    theirs = _solved()
    theirs.cells[2].source += "\nx = 3"
    prepared = submission.prepare(LESSON, theirs)
    assert not any("sweep" in s for s in _sources(prepared))
    assert any("demonstration cell" in note for note in prepared.notes)
    assert "sweep" in prepared.skipped_names


def _solved():
    theirs = copy.deepcopy(LESSON)
    theirs.cells[1].source = "def f():\n    return 1"
    return theirs


def test_one_exercise_runs_with_the_cells_it_needs_and_no_other_test():
    theirs = _solved()
    prepared = submission.prepare(LESSON, theirs, exercises=["test_f"])
    kept = [submission._key(c) for c in prepared.notebook.cells]
    assert kept == [submission.SETUP_ID, "setup", "f_solution", "helpers", "test_f"]
    assert prepared.missing == set()
    # test_h reads `limit`, which only test_g binds: test_g is kept for it
    kept = [submission._key(c)
            for c in submission.prepare(LESSON, theirs, ["test_h"]).notebook.cells]
    assert kept == [submission.SETUP_ID, "setup", "f_solution", "helpers", "test_g", "test_h"]


def test_several_exercises_run_with_what_each_needs():
    prepared = submission.prepare(LESSON, _solved(), exercises=["test_f", "test_h"])
    kept = [submission._key(c) for c in prepared.notebook.cells]
    assert kept == [submission.SETUP_ID, "setup", "f_solution", "helpers", "test_f", "test_g",
                    "test_h"]


def test_an_unknown_exercise_is_refused():
    with pytest.raises(ValueError, match="no graded cell `test_nope`"):
        submission.prepare(LESSON, _lesson([]), exercises=["test_nope"])


def test_a_deleted_exercise_graded_alone_is_still_missing():
    prepared = submission.prepare(LESSON, _lesson([]), exercises=["test_f"])
    assert prepared.missing == {"test_f"}
