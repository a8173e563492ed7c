"""The notebook the grader runs: the lesson's own cells, with the learner's code put in.

A learner's notebook is not run as it was handed in. Every cell the lesson provides (setup,
prose, demonstrations, checkers, tests) comes from the released lesson, which the learner
cannot change; from the submission come only the cells that hold the learner's code: the
solution cells (matched by their nbgrader id), cells the learner added, and lesson cells the
learner edited (then run in the edited form). Each of those is audited
(:mod:`tilegym_edu.audit`) before it can run: a top-level statement the audit refuses is left
out (commented out, so line numbers stay), and the cell ends with a ``raise
SubmissionRefused(...)`` that names the line and the rule. The notebook starts with a cell of
the grader's that installs the run-time half of the audit (:mod:`tilegym_edu.write_guard`):
each learner cell ends with its marker, and the attribute writes in it are checked as they run.

What the structure of a submission cannot change:

* a graded cell the learner deleted is still run, but scores 0 of its points and says so;
  the total is always out of the lesson's full points;
* a duplicated cell is graded once (the first copy), and each copy is named in a note;
* a cell with grading metadata the lesson does not have earns nothing: its metadata is
  dropped (the code still runs, audited, like any cell the learner added), with a note.

What grading leaves out:

* demonstrations: lesson cells tagged ``demo`` (sweeps, backend comparisons, plots) run when
  the learner runs the notebook but not when it is graded; nothing graded depends on them
  (tests/test_demonstrations.py checks that no other cell reads a name only they bind).
  A learner's edit of one is left out with them, with a note;
* with ``exercises=``, everything but those graded cells and what they need: the cells before
  the last of them, less the other graded cells (unless one they keep reads a name such a cell
  binds) and demonstrations.
"""
from __future__ import annotations

import ast
import copy
import dataclasses
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from tilegym_edu import audit, write_guard

#: the error a refused cell raises in the grading kernel
REFUSED_ERROR = "SubmissionRefused"
#: cell metadata key for what the grader knows about a cell
META = "tilegym"
#: the cell tag of a demonstration, which grading skips
DEMO_TAG = "demo"
#: the id of the grader's first cell (write_guard.setup_source) in a graded notebook
SETUP_ID = "tilegym-grader-setup"


def _nbgrader(cell: NotebookNode) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _key(cell: NotebookNode) -> str | None:
    """How a cell is matched between the lesson and a submission: its nbgrader id, else its
    nbformat cell id."""
    return _nbgrader(cell).get("grade_id") or cell.get("id")


def is_solution(cell: NotebookNode) -> bool:
    meta = _nbgrader(cell)
    return cell.cell_type == "code" and bool(meta.get("solution")) and not meta.get("grade")


def is_graded(cell: NotebookNode) -> bool:
    return bool(_nbgrader(cell).get("grade"))


def is_demonstration(cell: NotebookNode) -> bool:
    """A plain code cell tagged ``demo``: on a cell with grading metadata the tag counts for
    nothing (a graded cell is never skipped)."""
    return (cell.get("cell_type") == "code" and not _nbgrader(cell)
            and DEMO_TAG in cell.get("metadata", {}).get("tags", []))


def names_of(source: str) -> tuple[set[str], set[str]]:
    """(bound, needed): the names a cell's code binds anywhere in it (assignments,
    definitions, imports, loop and ``with`` targets), and the names it reads that no earlier
    top-level statement of the cell binds, which must come from an earlier cell (a guess
    that errs towards needing more: a function that calls one defined after it needs it).
    Code that does not parse binds and needs nothing."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set(), set()
    bound, needed = set(), set()
    for statement in tree.body:
        here, scoped, read = _bound_and_read(statement)
        # `x = f(x)` reads the x of before; in a loop, a `with` or a definition, the names
        # it binds are its own, and so are a lambda's arguments and a comprehension's names
        own = scoped if isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign)) else here
        needed |= read - bound - own
        bound |= here
    return bound, needed


def _bound_and_read(tree: ast.AST) -> tuple[set[str], set[str], set[str]]:
    """(bound, scoped, read) in ``tree``: ``scoped`` are the names bound only inside a
    lambda's or comprehension's own scope."""
    bound, scoped, read = set(), set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        if isinstance(node, ast.Lambda):
            scoped.update(a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg))
        elif isinstance(node, ast.comprehension):
            scoped.update(n.id for n in ast.walk(node.target) if isinstance(n, ast.Name))
    return bound, scoped, read


def learner_label(cell: NotebookNode) -> str | None:
    """The name the grade report gives a cell of the learner's code, or None for the
    lesson's own cells."""
    return cell.get("metadata", {}).get(META, {}).get("learner")


@dataclass
class Prepared:
    """The notebook to grade, and what the grader noticed on the way."""

    notebook: NotebookNode
    notes: list[str] = field(default_factory=list)        # one line each, for the report
    missing: set[str] = field(default_factory=set)        # graded cells deleted by the learner
    refused: dict[str, str] = field(default_factory=dict)  # learner cell -> why it was refused
    skipped_names: set[str] = field(default_factory=set)   # bound only by cells left out


def refused_source(source: str, refusals: list[audit.Refusal], why: str) -> str:
    """What runs in place of a cell with refused statements: the cell with those statements
    commented out, then an error that names them (the rest of the cell has run by then)."""
    return (f"{audit.without_refused(source, refusals)}\n"
            f"from tilegym_edu.grading import {REFUSED_ERROR}\n"
            f"raise {REFUSED_ERROR}({why!r})\n")


def fail_deleted_cells(prepared: Prepared) -> None:
    """End each graded cell the learner deleted (prepared.missing) with an error, so that it
    still runs and scores 0: for graders that cannot zero its score after the run, as
    autograde.grade does (the stock nbgrader commands, tilegym_edu.stock)."""
    for cell in prepared.notebook.cells:
        if is_graded(cell) and _key(cell) in prepared.missing:
            cell.source = refused_source(cell.source, [], "this graded cell was deleted from "
                                         "the notebook handed in: it ran, and scores 0")


def lesson_source(root: Path, lesson: str, notebook: str) -> NotebookNode | None:
    """The lesson's own notebook ``notebook`` (nbgrader's source, in ``solutions/``: hidden
    tests included), or None where the course has none."""
    path = root / "solutions" / lesson / f"{notebook}.ipynb"
    return nbformat.read(path, as_version=4) if path.is_file() else None


def graded_ids(release: NotebookNode) -> list[str]:
    """The grade ids of a lesson notebook's graded cells, in order."""
    return [_key(c) for c in release.cells if is_graded(c)]


def prepare(release: NotebookNode, submitted: NotebookNode,
            exercises: Collection[str] = (), source: NotebookNode | None = None) -> Prepared:
    """The notebook to grade for ``submitted``, built on ``release`` (see the module doc);
    ``source``, the lesson's own notebook, gives the test cells with their hidden tests,
    whose names the learner's code may not use (the release has them stripped, nbgrader puts
    them back when it grades); with ``exercises`` (grade ids of ``release``), only those graded
    cells and what they
    need."""
    unknown = set(exercises) - set(graded_ids(release))
    if unknown:
        raise ValueError(f"no graded cell {', '.join(f'`{e}`' for e in sorted(unknown))} in "
                         "this notebook")
    lesson_cells = {_key(c): c for c in release.cells}
    names = audit.lesson_names([c.source for c in release.cells if c.cell_type == "code"
                                and not is_solution(c) and not is_graded(c)],
                               [c.source for c in (source or release).cells if is_graded(c)])
    names = dataclasses.replace(names, kernels=audit.kernel_names(
        c.source for c in submitted.cells if c.cell_type == "code"))
    result = Prepared(notebook=copy.deepcopy(release))
    counts = Counter(_key(c) for c in submitted.cells if _key(c) in lesson_cells)
    for key, count in counts.items():
        if count > 1:
            result.notes.append(f"cell `{key}` appears {count} times in your notebook: only the "
                                "first copy is graded; delete the others")
    # the learner's version of each lesson cell, and the cells they added after each one
    theirs: dict[str, NotebookNode] = {}
    added_after: dict[str | None, list[NotebookNode]] = {}
    last = None
    for cell in submitted.cells:
        key = _key(cell)
        if key in lesson_cells and key not in theirs:
            theirs[key] = cell
            last = key
            continue
        if key in lesson_cells:
            continue   # a duplicate, noted above
        if cell.cell_type != "code":
            continue
        if _nbgrader(cell):
            result.notes.append(f"cell `{key}` is not part of the lesson: its grading metadata "
                                "is ignored (its code still runs, like any cell you add)")
        added_after.setdefault(last, []).append(cell)
    cells = [*_learner_cells(None, added_after, names, result)]
    for lesson_cell in release.cells:
        key = _key(lesson_cell)
        if is_demonstration(lesson_cell):
            if key in theirs and theirs[key].source != lesson_cell.source:
                result.notes.append(f"your edit of demonstration cell `{key}` is not graded "
                                    "(grading skips demonstrations): move code you need into "
                                    "a cell of your own")
            result.skipped_names |= names_of(lesson_cell.source)[0]
            cells += _learner_cells(key, added_after, names, result)
            continue
        cell = copy.deepcopy(lesson_cell)
        if is_graded(lesson_cell) and key not in theirs:
            result.missing.add(key)
        mine = theirs.get(key)
        if is_solution(lesson_cell):
            if mine is None:
                result.notes.append(f"solution cell `{key}` is missing from your notebook: it "
                                    "was graded as the blank exercise")
            else:
                cell.source = mine.source
            _take_learner_code(cell, key, names, result)
        cells.append(cell)
        if (cell.cell_type == "code" and not _nbgrader(lesson_cell) and mine is not None
                and mine.source != lesson_cell.source):
            # the lesson's version runs (later cells may need what it defines), then the edit
            edit = NotebookNode(cell_type="code", source=mine.source, outputs=[],
                                execution_count=None, metadata=NotebookNode())
            _take_learner_code(edit, f"your edit of lesson cell {key}", names, result)
            cells.append(edit)
        cells += _learner_cells(key, added_after, names, result)
    if exercises:
        cells = _needed_by(set(exercises), cells, result)
        result.missing &= set(exercises)
        labels = {learner_label(c) for c in cells}
        result.refused = {k: v for k, v in result.refused.items() if k in labels}
    kept = set().union(*(names_of(c.source)[0] for c in cells if c.cell_type == "code"))
    result.skipped_names -= kept
    setup = NotebookNode(cell_type="code", id=SETUP_ID,
                         source=write_guard.setup_source(names.attributes), outputs=[],
                         execution_count=None, metadata=NotebookNode())
    result.notebook.cells = [setup, *cells]
    return result


def _needed_by(exercises: set[str], cells: list[NotebookNode],
               result: Prepared) -> list[NotebookNode]:
    """The cells up to the last of the graded cells ``exercises``, less the other graded cells
    that bind no name a kept cell after them reads; the names only the left-out cells bind go
    to ``result.skipped_names``."""
    end = max(i for i, c in enumerate(cells) if _key(c) in exercises and is_graded(c))
    kept, needed = [], set()
    for cell in reversed(cells[:end + 1]):
        bound, read = names_of(cell.source) if cell.cell_type == "code" else (set(), set())
        if is_graded(cell) and _key(cell) not in exercises and not bound & needed:
            result.skipped_names |= bound
            continue
        kept.append(cell)
        needed |= read
    return kept[::-1]


def _learner_cells(after: str | None, added_after: dict, names: audit.LessonNames,
                   result: Prepared) -> list[NotebookNode]:
    out = []
    for n, added in enumerate(added_after.get(after, []), start=1):
        cell = NotebookNode(cell_type="code", source=added.source, outputs=[],
                            execution_count=None, metadata=NotebookNode())
        if added.get("id"):
            cell.id = added.id
        where = f"after `{after}`" if after else "at the top"
        _take_learner_code(cell, f"your cell {n} {where}", names, result)
        out.append(cell)
    return out


def _take_learner_code(cell: NotebookNode, label: str, names: audit.LessonNames,
                       result: Prepared) -> None:
    """Mark ``cell`` as the learner's code; replace it if the audit refuses it."""
    cell.metadata.setdefault(META, {})["learner"] = label
    refusals = audit.audit(cell.source, names)
    if not refusals and not audit.runs_as_written(write_guard.mark(cell.source)):
        refusals = [audit.Refusal(1, "syntax", "IPython would run this cell differently once the "
                                  "grader's last line is added: remove prompts and odd "
                                  "indentation", (1, max(1, len(cell.source.splitlines()))))]
    if refusals:
        why = audit.describe(refusals)
        result.refused[label] = why
        cell.source = refused_source(cell.source, refusals,
                                     f"in {label}, the grader left out what it refused: {why}")
    cell.source = write_guard.mark(cell.source)   # its attribute writes checked as it runs
