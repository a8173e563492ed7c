"""Building the lessons' notebooks: ``solutions/`` from the sources, ``notebooks/`` from those.

Each lesson's source is the percent-format ``.py`` in ``solutions/<lesson>/``
(:mod:`tilegym_edu.percent`), its include lines expanded (:mod:`tilegym_edu.includes`): it
becomes the solution notebook beside it; nbgrader's ``generate_assignment`` (:func:`release`)
makes the learner notebook of that, solutions blanked and hidden tests removed.
:func:`write_sources` goes the other way, after a notebook was edited in JupyterLab.
"""
from __future__ import annotations

import copy
import shutil
from pathlib import Path

import nbformat

from tilegym_edu import includes, percent
from tilegym_edu.course import (CourseError, course_root, lessons, nbgrader_api, require_lesson,
                                require_success)


def release(lesson: str, root: Path | None = None) -> Path:
    """Run nbgrader's generate_assignment for ``lesson``; return the folder it wrote
    (``.grading/release/<lesson>``). This also records the lesson's tests in the gradebook."""
    root = root or course_root()
    require_lesson(lesson, root)
    require_success(nbgrader_api(root).generate_assignment(lesson, force=True, create=True),
                    "generate_assignment")
    return root / ".grading" / "release" / lesson


def build_solutions(lesson: str, root: Path | None = None) -> list[Path]:
    """Write each notebook of ``solutions/<lesson>/`` from its source, the percent-format
    ``.py`` beside it (:mod:`tilegym_edu.percent`), its include lines expanded
    (:mod:`tilegym_edu.includes`); return the notebooks written."""
    root = root or course_root()
    written = []
    for source in sorted((root / "solutions" / lesson).glob("*.py")):
        notebook = source.with_suffix(".ipynb")
        nbformat.write(includes.expand(percent.from_text(source.read_text()), root), notebook)
        written.append(notebook)
    return written


def write_sources(lesson: str, root: Path | None = None) -> list[Path]:
    """The other way: each notebook of ``solutions/<lesson>/`` written as its source (after
    the notebook was edited in JupyterLab); return the sources written. A source cell with
    include lines is kept as it is when the notebook's cell is still what it includes; if that
    cell was edited, nothing is written (the edit belongs in the included code)."""
    root = root or course_root()
    written = []
    for notebook in sorted((root / "solutions" / lesson).glob("*.ipynb")):
        source = notebook.with_suffix(".py")
        nb = nbformat.read(notebook, as_version=4)
        if source.exists():
            old = percent.from_text(source.read_text())
            built = {c.id: c.source for c in includes.expand(copy.deepcopy(old), root).cells}
            for cell in nb.cells:
                kept = next((c for c in old.cells if c.id == cell.id), None)
                if kept is None or not includes.has_includes(kept.source):
                    continue
                if cell.source != built[cell.id]:
                    raise CourseError(
                        f"cell {cell.id} of {notebook.name} was edited, but its source takes "
                        f"its code from elsewhere ({kept.source.splitlines()[0]}, ...): make "
                        f"the edit there, then run `tilegym-edu generate {lesson}`")
                cell.source = kept.source
        source.write_text(percent.to_text(nb))
        written.append(source)
    return written


def generate(lesson_names: list[str] | None = None, root: Path | None = None) -> list[Path]:
    """Rebuild ``solutions/<lesson>/*.ipynb`` from their sources, then ``notebooks/<lesson>/``
    from those (nbgrader's generate_assignment); return the learner notebooks written."""
    root = root or course_root()
    written = []
    for lesson in lesson_names or lessons(root):
        build_solutions(lesson, root)
        released = release(lesson, root)
        target = root / "notebooks" / lesson
        target.mkdir(parents=True, exist_ok=True)
        for notebook in sorted(released.glob("*.ipynb")):
            shutil.copyfile(notebook, target / notebook.name)
            written.append(target / notebook.name)
    return written

