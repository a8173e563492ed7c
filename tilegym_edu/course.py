"""nbgrader glue: the course as an nbgrader course, learner notebooks, and self-grading.

The repository is an nbgrader course directory: ``solutions/`` is the source (worked solutions
and every test; each lesson's notebook is built from the percent-format ``.py`` beside it),
learner notebooks in ``notebooks/`` are what ``generate_assignment`` makes of it, and all of nbgrader's working state (release, submitted, autograded, feedback, gradebook)
lives in the git-ignored ``.grading/``. ``nbgrader_config.py`` at the top of the repository
applies :func:`configure`, so the stock ``nbgrader`` commands see the same course.

Self-grading copies the learner's notebook into ``.grading/submitted/<student>/<lesson>/`` and
autogrades the copy in a fresh kernel: the learner's own notebook is never touched.
"""
from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import shutil
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import nbformat
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.apps import NbGraderAPI
from nbgrader.converters import Autograde
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import Execute, GetGrades
from traitlets.config import Config

from tilegym_edu import executor, figures, includes, percent, sandbox, submission
from tilegym_edu.check import NOT_WRITTEN, hints
from tilegym_edu.feedback import HideHiddenTests

#: the student id self-grading uses
STUDENT = "learner"
#: per cell: room for a first Triton compile and for autotuning on a GPU
CELL_TIMEOUT_S = 600
#: the whole notebook
NOTEBOOK_TIMEOUT_S = 3600
#: the error a speed check raises without a GPU (tilegym_edu.grading.NeedsGPU)
NEEDS_GPU_ERROR = "NeedsGPU"


class CourseError(Exception):
    """A problem with the course files the user asked for (missing lesson, broken notebook)."""


def course_root() -> Path:
    """The course directory: ``$TILEGYM_COURSE_ROOT``, else the repository this package lives
    in (an editable install), else the current directory."""
    if os.environ.get("TILEGYM_COURSE_ROOT"):
        return Path(os.environ["TILEGYM_COURSE_ROOT"]).resolve()
    repo = Path(__file__).resolve().parent.parent
    return repo if (repo / "solutions").is_dir() else Path.cwd()


def configure(c: Config, root: Path) -> Config:
    """Set the course layout, gradebook and time limits on an nbgrader config object."""
    c.CourseDirectory.root = str(root)
    c.CourseDirectory.course_id = "tilegym_edu"
    c.CourseDirectory.source_directory = "solutions"
    c.CourseDirectory.release_directory = ".grading/release"
    c.CourseDirectory.submitted_directory = ".grading/submitted"
    c.CourseDirectory.autograded_directory = ".grading/autograded"
    c.CourseDirectory.feedback_directory = ".grading/feedback"
    c.CourseDirectory.db_url = f"sqlite:///{root / '.grading' / 'gradebook.db'}"
    # a lesson's source (solutions/<lesson>/<lesson>.py, solutions included) is never released
    c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "*.py"]
    # nbgrader gives 0 points to a test cell with any stderr output: warnings (a deprecation in
    # torch, a debug print) must not cost points, so stderr streams are dropped before scoring.
    # Errors are separate outputs and still fail the cell.
    c.IgnorePattern.enabled = True
    c.IgnorePattern.pattern = r"(?s).*"
    c.Execute.timeout = CELL_TIMEOUT_S
    # Feedback HTML: hidden tests stay hidden (tilegym_edu.feedback)
    c.GenerateFeedback.preprocessors = [GetGrades, HideHiddenTests, CSSHTMLHeaderPreprocessor]
    c.ResilientExecute.notebook_timeout = NOTEBOOK_TIMEOUT_S
    c.Autograde.autograde_preprocessors = [
        executor.ResilientExecute if p is Execute else p
        for p in Autograde.class_traits()["autograde_preprocessors"].default()]
    return c


def _api(root: Path, whole_lessons: bool = True) -> NbGraderAPI:
    """nbgrader's API on the course; ``whole_lessons=False`` when the notebooks graded hold
    only some of the lesson's graded cells on purpose (``grade(exercise=...)``), which nbgrader
    would otherwise put back and run."""
    # nbgrader runs the `alembic` executable, and the grading kernel's spec runs `python`:
    # both must be this environment's, also when it is not activated.
    bin_dir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    (root / ".grading").mkdir(exist_ok=True)
    config = configure(Config(), root)
    config.OverwriteCells.add_missing_cells = whole_lessons
    return NbGraderAPI(config=config)


def lessons(root: Path | None = None) -> list[str]:
    """The lessons of the course, in order (the folders of ``solutions/``)."""
    root = root or course_root()
    return sorted(p.name for p in (root / "solutions").iterdir()
                  if p.is_dir() and any(p.glob("*.ipynb")))


def _require_lesson(lesson: str, root: Path) -> None:
    known = lessons(root)
    if lesson not in known:
        raise CourseError(f"no lesson '{lesson}' in {root / 'solutions'}; "
                          f"lessons: {', '.join(known)}")


def _run(result: dict, what: str) -> None:
    if not result["success"]:
        raise CourseError(f"nbgrader {what} failed: {result.get('error') or result.get('log')}")


def release(lesson: str, root: Path | None = None) -> Path:
    """Run nbgrader's generate_assignment for ``lesson``; return the folder it wrote
    (``.grading/release/<lesson>``). This also records the lesson's tests in the gradebook."""
    root = root or course_root()
    _require_lesson(lesson, root)
    _run(_api(root).generate_assignment(lesson, force=True, create=True), "generate_assignment")
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


@dataclass(frozen=True)
class ExerciseResult:
    """One graded cell of a lesson."""

    notebook: str
    exercise: str          # the cell's nbgrader grade id
    points: float
    max_points: float
    status: str            # "passed", "failed" or "needs GPU"
    reason: str = ""       # the error that cost the points (empty when passed)
    seconds: float | None = None   # how long the cell ran
    figure: str = ""       # what it measured, closest to failing (tilegym_edu.figures.summary)
    figures: list[dict] = field(default_factory=list)   # every figure it reported


@dataclass(frozen=True)
class CellTime:
    """How long one cell of the graded notebook ran."""

    notebook: str
    cell: str              # the grade id, the learner's cell's label, or "cell N: first line"
    seconds: float


@dataclass(frozen=True)
class GradeReport:
    """Self-grading of one lesson."""

    lesson: str
    student: str
    exercises: list[ExerciseResult] = field(default_factory=list)
    feedback: list[str] = field(default_factory=list)   # feedback HTML files
    notes: list[str] = field(default_factory=list)      # what the grader ignored or refused
    cells: list[CellTime] = field(default_factory=list)  # every code cell that ran, in order
    seconds: float = 0.0   # the whole grading, wall clock

    @property
    def points(self) -> float:
        return sum(e.points for e in self.exercises)

    @property
    def max_points(self) -> float:
        return sum(e.max_points for e in self.exercises)

    def to_dict(self) -> dict:
        return {**asdict(self), "points": self.points, "max_points": self.max_points}

    def format_table(self) -> str:
        header = ("exercise", "points", "status", "measured", "reason")
        rows = [(e.exercise, f"{e.points:g}/{e.max_points:g}", e.status, e.figure, e.reason)
                for e in self.exercises]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
        lines = [f"{self.lesson} (graded as '{self.student}')"]
        for row in [header, *rows]:
            lines.append(("  ".join(c.ljust(w) for c, w in zip(row[:4], widths)) + "  "
                          + row[4]).rstrip())
        lines.append(f"total: {self.points:g}/{self.max_points:g} ({self.seconds:.0f} s)")
        lines += [f"note: {note}" for note in self.notes]
        lines += [f"feedback: {path}" for path in self.feedback]
        return "\n".join(lines)

    def format_profile(self, top: int = 10) -> str:
        """The ``top`` slowest cells and what they took of the whole grading."""
        ran = sum(c.seconds for c in self.cells)
        lines = [f"where the {self.seconds:.1f} s went ({ran:.1f} s running cells, the rest "
                 "starting kernels, nbgrader and feedback); slowest cells:"]
        for c in sorted(self.cells, key=lambda c: -c.seconds)[:top]:
            lines.append(f"  {c.seconds:7.1f} s  {c.cell}")
        return "\n".join(lines)


def _error_of(cell) -> tuple[str, str]:
    """(error name, one-line reason) of a cell's error output, or ('', '') if it has none."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            ename, evalue = output.get("ename", ""), output.get("evalue", "")
            first = evalue.strip().splitlines()[0] if evalue.strip() else ""
            if first:  # errors raised outside check() get their hint here
                first += hints(evalue, shown=first)
            return ename, f"{ename}: {first}" if first else ename
    return "", ""


def _reason(ename: str, reason: str, failed_before: list[tuple[str, str]],
            skipped_names: set[str]) -> str:
    """The reason a graded cell shows: timeouts and placeholders said plainly, and a name the
    learner's code should have defined traced to the learner's cell that failed before it, or
    to a cell grading skips."""
    if ename == "KeyboardInterrupt":   # how nbclient stops a cell past its time limit
        return (f"the cell ran past its time limit ({CELL_TIMEOUT_S} s a cell, "
                f"{NOTEBOOK_TIMEOUT_S} s the notebook) and was interrupted: look for a "
                "kernel or loop that never finishes, or sizes too large for this machine")
    if ename == "NotImplementedError" and reason == ename:   # the blank exercise's placeholder
        return NOT_WRITTEN.removeprefix("raised ")
    name = re.search(r"name '(\w+)' is not defined", reason)
    if name and name.group(1) in skipped_names:
        return (f"{reason} (only a cell grading skips defines `{name.group(1)}`: a "
                "demonstration, or with --exercise a cell that exercise does not need; define "
                "what your code uses in your own cells)")
    if ename == "NameError" and failed_before:
        label, why = failed_before[-1]
        return f"{reason} (because {label} failed earlier: {why})"
    return reason


def _cell_name(cell, number: int) -> str:
    first = next((line.strip() for line in cell.source.splitlines() if line.strip()), "")
    return (cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            or submission.learner_label(cell) or f"cell {number}: {first[:60]}")


def _cell_times(autograded: Path, notebook: str) -> list[CellTime]:
    nb = nbformat.read(autograded, as_version=4)
    return [CellTime(notebook, _cell_name(cell, n), seconds)
            for n, cell in enumerate(nb.cells) if cell.cell_type == "code"
            and (seconds := cell.get("metadata", {}).get(submission.META, {}).get("seconds"))
            is not None]


def _results(autograded: Path, notebook: str, lesson: str, student: str, gradebook: Gradebook,
             prepared: submission.Prepared, exercise: str | None) -> list[ExerciseResult]:
    """Every graded cell of the lesson's notebook (or only ``exercise``), scored from
    nbgrader's automatic grades (manual scores and extra credit in the gradebook count for
    nothing here)."""
    nb = nbformat.read(autograded, as_version=4)
    grades = {g.name: g for g in gradebook.find_submission_notebook(notebook, lesson, student).grades}
    missing = prepared.missing
    results, failed_before = [], []
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        ename, reason = _error_of(cell)
        label = submission.learner_label(cell)
        if label and ename:
            failed_before.append((label, reason))
        if not meta.get("grade") or exercise not in (None, meta["grade_id"]):
            continue
        grade_id = meta["grade_id"]
        grade = grades[grade_id]
        score, max_score = grade.auto_score or 0.0, grade.max_score
        reason = _reason(ename, reason, failed_before, prepared.skipped_names)
        if grade_id in missing:
            score, ename = 0.0, "missing"
            reason = ("this graded cell was deleted from your notebook: copy it back from a "
                      "fresh copy of the lesson (git checkout notebooks/) to earn its points")
        if score >= max_score:
            status, reason = "passed", ""
        elif ename == NEEDS_GPU_ERROR:
            status = "needs GPU"
        else:
            status = "failed"
            reason = reason or "no points (the cell produced no error: check its output)"
        seconds = cell.get("metadata", {}).get(submission.META, {}).get("seconds")
        measured = [] if grade_id in missing else figures.read(cell)
        results.append(ExerciseResult(notebook, grade_id, score, max_score, status, reason,
                                      seconds, figures.summary(measured), measured))
    return results


def _read_notebook(path: Path) -> nbformat.NotebookNode:
    try:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
    except Exception as exc:  # nbformat raises several unrelated types for broken files
        raise CourseError(f"{path} is not a valid notebook ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    return nb


def _forget_submission(root: Path, lesson: str, student: str) -> None:
    """Remove ``student``'s earlier grading of ``lesson`` from the gradebook, so nothing it
    left there (a score, a comment, extra credit) survives a regrade."""
    with Gradebook(f"sqlite:///{root / '.grading' / 'gradebook.db'}") as gradebook, \
            _quiet_gradebook():
        try:
            gradebook.remove_submission(lesson, student)
        except MissingEntry:
            pass


def _zero_missing(root: Path, lesson: str, student: str, notebook: str, missing: set[str]) -> None:
    """Graded cells the learner deleted score 0 in the gradebook too."""
    if not missing:
        return
    with Gradebook(f"sqlite:///{root / '.grading' / 'gradebook.db'}") as gradebook:
        for grade_id in missing:
            grade = gradebook.find_grade(grade_id, notebook, lesson, student)
            grade.auto_score = 0.0
        gradebook.db.commit()


def grade(lesson: str, submission_folder: Path | None = None, root: Path | None = None,
          student: str = STUDENT, sandboxed: bool = False,
          hide: Sequence[Path] = (), exercise: str | None = None) -> GradeReport:
    """Autograde the learner's notebooks of ``lesson`` (default: the folder
    ``notebooks/<lesson>``) as ``student``, write feedback HTML, and report per exercise.

    What runs is built from the released lesson with the learner's code put in
    (:func:`tilegym_edu.submission.prepare`): the learner's files are never modified, notebooks
    that are not part of the lesson are ignored with a note, demonstration cells are skipped,
    and every graded cell of the lesson is reported, so the total is always out of the
    lesson's full points. With ``exercise`` (a graded cell's id), only that cell and what it
    needs run, and only it is reported."""
    started = time.monotonic()
    root = root or course_root()
    _require_lesson(lesson, root)
    source = Path(submission_folder) if submission_folder else root / "notebooks" / lesson
    handed_in = sorted(source.glob("*.ipynb"))
    if not handed_in:
        raise CourseError(f"no notebooks to grade in {source}")
    released = release(lesson, root)
    lesson_notebooks = {p.stem: nbformat.read(p, as_version=4)
                        for p in sorted(released.glob("*.ipynb"))}
    if exercise is not None:
        known = [g for nb in lesson_notebooks.values() for g in submission.graded_ids(nb)]
        if exercise not in known:
            raise CourseError(f"lesson {lesson} has no exercise '{exercise}'; its exercises: "
                              f"{', '.join(known)}")
        lesson_notebooks = {name: nb for name, nb in lesson_notebooks.items()
                            if exercise in submission.graded_ids(nb)}
    names = {f"{name}.ipynb" for name in lesson_notebooks}
    notes = [f"{path.name} is not part of lesson {lesson}: ignored"
             for path in handed_in if path.name not in names and exercise is None]
    submitted_notebooks = {path.name: _read_notebook(path) for path in handed_in
                           if path.name in names}
    _forget_submission(root, lesson, student)
    submitted = root / ".grading" / "submitted" / student / lesson
    shutil.rmtree(submitted, ignore_errors=True)
    submitted.mkdir(parents=True)
    prepared = {}
    for name, lesson_nb in lesson_notebooks.items():
        theirs = submitted_notebooks.get(f"{name}.ipynb")
        if theirs is None:
            notes.append(f"{name}.ipynb is missing from {source}: graded as an empty notebook")
            theirs = nbformat.v4.new_notebook()
        prepared[name] = submission.prepare(lesson_nb, theirs, exercise)
        notes += prepared[name].notes
        notes += [f"the grader left out part of {label}: {why}"
                  for label, why in prepared[name].refused.items()]
        nbformat.write(prepared[name].notebook, submitted / f"{name}.ipynb")
    if exercise is not None:
        notes.append(f"only {exercise} was graded (with the cells it needs): grade the whole "
                     "lesson for its total")
    from tilegym_edu.grading import GRADING_ENV   # torch and triton load only when grading
    api = _api(root, whole_lessons=exercise is None)
    os.environ[GRADING_ENV] = "1"      # the grading kernel inherits it (grading.graded_seeds)
    autograded_dir = root / ".grading" / "autograded" / student / lesson
    autograded_dir.mkdir(parents=True, exist_ok=True)
    kernel_box = (sandbox.sandboxed([root / "solutions", root / ".grading", *hide],
                                    [autograded_dir]) if sandboxed else contextlib.nullcontext())
    try:
        with kernel_box, _quiet_gradebook():
            _run(api.autograde(lesson, student, force=True, create=True), "autograde")
            for name, p in prepared.items():
                _zero_missing(root, lesson, student, name, p.missing)
            _run(api.generate_feedback(lesson, student, force=True), "generate_feedback")
    finally:
        del os.environ[GRADING_ENV]
    exercises, feedback, cells = [], [], []
    with Gradebook(f"sqlite:///{root / '.grading' / 'gradebook.db'}") as gradebook, \
            _quiet_gradebook():
        for name, p in prepared.items():
            autograded = autograded_dir / f"{name}.ipynb"
            exercises += _results(autograded, name, lesson, student, gradebook, p, exercise)
            cells += _cell_times(autograded, name)
            feedback.append(str(root / ".grading" / "feedback" / student / lesson / f"{name}.html"))
    return GradeReport(lesson, student, exercises, feedback, notes, cells,
                       round(time.monotonic() - started, 2))


@contextlib.contextmanager
def _quiet_gradebook():
    """nbgrader's gradebook raises SQLAlchemy session warnings on every grading that say
    nothing a learner can act on: keep them off the learner's screen."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"nbgrader\..*")
        warnings.filterwarnings("ignore", message=r".*not in session.*")
        yield


def report_json(report: GradeReport) -> str:
    return json.dumps(report.to_dict(), indent=2)
