"""Grading one lesson: the learner's notebooks graded as nbgrader grades, never touched.

:func:`grade` releases the lesson (:func:`tilegym_edu.build.release`), builds the notebook that
is graded from the released lesson and the learner's cells (:mod:`tilegym_edu.submission`),
copies it into ``.grading/submitted/<student>/<lesson>/`` and has nbgrader autograde the copy in
a fresh kernel (:mod:`tilegym_edu.executor`; in bubblewrap if asked, :mod:`tilegym_edu.sandbox`),
then writes the feedback HTML and reads the scores into a
:class:`~tilegym_edu.grade_report.GradeReport`.
"""
from __future__ import annotations

import contextlib
import shutil
import time
import warnings
from pathlib import Path
from typing import Sequence

import nbformat
from nbgrader.api import Gradebook, MissingEntry

from tilegym_edu import handed_in, sandbox, submission
from tilegym_edu.build import release
from tilegym_edu.course import (EXCHANGE_RECEIPTS, CourseError, course_root, gradebook_url,
                                nbgrader_api, require_lesson, require_success)
from tilegym_edu.grade_report import GradeReport, cell_times, exercise_results

#: the student id self-grading uses
STUDENT = "learner"


def _read_notebook(path: Path) -> nbformat.NotebookNode:
    text = handed_in.read_bytes(path).decode("utf-8", errors="replace")
    try:
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
    except Exception as exc:  # nbformat raises several unrelated types for broken files
        raise CourseError(f"{path} is not a valid notebook ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    return nb


def _forget_submission(root: Path, lesson: str, student: str) -> None:
    """Remove ``student``'s earlier grading of ``lesson`` from the gradebook, so nothing it
    left there (a score, a comment, extra credit) survives a regrade."""
    with Gradebook(gradebook_url(root)) as gradebook, quiet_gradebook():
        try:
            gradebook.remove_submission(lesson, student)
        except MissingEntry:
            pass


def _zero_missing(root: Path, lesson: str, student: str, notebook: str, missing: set[str]) -> None:
    """Graded cells the learner deleted score 0 in the gradebook too. They cannot be made to
    fail in the notebook before the run, as the stock route does
    (:func:`tilegym_edu.submission.fail_deleted_cells`, after nbgrader's own preprocessors):
    nbgrader's autograde restores a graded cell's source from the gradebook (its
    OverwriteCells step), and the restored test passes."""
    if not missing:
        return
    with Gradebook(gradebook_url(root)) as gradebook:
        for grade_id in missing:
            grade = gradebook.find_grade(grade_id, notebook, lesson, student)
            grade.auto_score = 0.0
        gradebook.db.commit()


def grade(lesson: str, submission_folder: Path | None = None, root: Path | None = None,
          student: str = STUDENT, sandboxed: bool = False,
          hide: Sequence[Path] = (), exercises: Sequence[str] = ()) -> GradeReport:
    """Autograde the learner's notebooks of ``lesson`` (default: the folder
    ``notebooks/<lesson>``) as ``student``, write feedback HTML, and report per exercise.

    What runs is built from the released lesson with the learner's code put in
    (:func:`tilegym_edu.submission.prepare`): the learner's files are never modified, notebooks
    that are not part of the lesson are ignored with a note, demonstration cells are skipped,
    and every graded cell of the lesson is reported, so the total is always out of the
    lesson's full points. With ``exercises`` (graded cells' ids), only those cells and what
    they need run, and only they are reported."""
    started = time.monotonic()
    root = root or course_root()
    require_lesson(lesson, root)
    source = Path(submission_folder) if submission_folder else root / "notebooks" / lesson
    handed_in.require_not_linked(source)
    notebooks_in = sorted(source.glob("*.ipynb"))
    if not notebooks_in:
        raise CourseError(f"no notebooks to grade in {source}")
    released = release(lesson, root)
    lesson_notebooks = {p.stem: nbformat.read(p, as_version=4)
                        for p in sorted(released.glob("*.ipynb"))}
    if exercises:
        known = [g for nb in lesson_notebooks.values() for g in submission.graded_ids(nb)]
        unknown = [e for e in exercises if e not in known]
        if unknown:
            raise CourseError(f"lesson {lesson} has no exercise "
                              f"{', '.join(repr(e) for e in unknown)}; its exercises: "
                              f"{', '.join(known)}")
        lesson_notebooks = {name: nb for name, nb in lesson_notebooks.items()
                            if set(exercises) & set(submission.graded_ids(nb))}
    names = {f"{name}.ipynb" for name in lesson_notebooks}
    notes = [f"{path.name} is not part of lesson {lesson}: ignored"
             for path in notebooks_in if path.name not in names and not exercises]
    submitted_notebooks = {path.name: _read_notebook(path) for path in notebooks_in
                           if path.name in names}
    receipts = {name: content for name in EXCHANGE_RECEIPTS
                if (content := handed_in.read_if_present(source / name)) is not None}
    _forget_submission(root, lesson, student)
    submitted = root / ".grading" / "submitted" / student / lesson
    shutil.rmtree(submitted, ignore_errors=True)
    submitted.mkdir(parents=True)
    for name, content in receipts.items():
        (submitted / name).write_bytes(content)
    prepared = {}
    for name, lesson_nb in lesson_notebooks.items():
        theirs = submitted_notebooks.get(f"{name}.ipynb")
        if theirs is None:
            notes.append(f"{name}.ipynb is missing from {source}: graded as an empty notebook")
            theirs = nbformat.v4.new_notebook()
        prepared[name] = submission.prepare(
            lesson_nb, theirs, [e for e in exercises if e in submission.graded_ids(lesson_nb)],
            submission.lesson_source(root, lesson, name))
        notes += prepared[name].notes
        notes += [f"the grader left out part of {label}: {why}"
                  for label, why in prepared[name].refused.items()]
        nbformat.write(prepared[name].notebook, submitted / f"{name}.ipynb")
    if exercises:
        what = (f"{exercises[0]} was graded (with the cells it needs)" if len(exercises) == 1
                else f"{', '.join(exercises)} were graded (with the cells they need)")
        notes.append(f"only {what}: grade the whole lesson for its total")
    api = nbgrader_api(root, whole_lessons=not exercises)
    autograded_dir = root / ".grading" / "autograded" / student / lesson
    autograded_dir.mkdir(parents=True, exist_ok=True)
    kernel_box = (sandbox.sandboxed([root / "solutions", root / ".grading", *hide],
                                    [autograded_dir]) if sandboxed else contextlib.nullcontext())
    with kernel_box, quiet_gradebook():
        require_success(api.autograde(lesson, student, force=True, create=True), "autograde")
        for name, p in prepared.items():
            _zero_missing(root, lesson, student, name, p.missing)
        require_success(api.generate_feedback(lesson, student, force=True), "generate_feedback")
    results, feedback, cells = [], [], []
    with Gradebook(gradebook_url(root)) as gradebook, quiet_gradebook():
        for name, p in prepared.items():
            autograded = autograded_dir / f"{name}.ipynb"
            results += exercise_results(autograded, name, lesson, student, gradebook, p, exercises)
            cells += cell_times(autograded, name)
            feedback.append(str(root / ".grading" / "feedback" / student / lesson / f"{name}.html"))
    return GradeReport(lesson, student, results, feedback, notes, cells,
                       round(time.monotonic() - started, 2))


@contextlib.contextmanager
def quiet_gradebook():
    """nbgrader's gradebook raises SQLAlchemy session warnings on every grading that say
    nothing a learner can act on: keep them off the learner's screen."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"nbgrader\..*")
        warnings.filterwarnings("ignore", message=r".*not in session.*")
        yield

