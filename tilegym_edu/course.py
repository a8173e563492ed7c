"""nbgrader glue: the course as an nbgrader course, learner notebooks, and self-grading.

The repository is an nbgrader course directory: ``solutions/`` is the source (worked solutions
and every test), learner notebooks in ``notebooks/`` are what ``generate_assignment`` makes of
it, and all of nbgrader's working state (release, submitted, autograded, feedback, gradebook)
lives in the git-ignored ``.grading/``. ``nbgrader_config.py`` at the top of the repository
applies :func:`configure`, so the stock ``nbgrader`` commands see the same course.

Self-grading copies the learner's notebook into ``.grading/submitted/<student>/<lesson>/`` and
autogrades the copy in a fresh kernel: the learner's own notebook is never touched.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook
from nbgrader.apps import NbGraderAPI
from nbgrader.converters import Autograde
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import Execute, GetGrades
from traitlets import Bool, Integer
from traitlets.config import Config

from tilegym_edu.check import hints
from tilegym_edu.feedback import HideHiddenTests
from tilegym_edu.progress import ProgressBar

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


class DeadlineExecute(Execute):
    """nbgrader's Execute with a limit on the whole notebook as well as on each cell: a cell
    gets at most what is left of ``notebook_timeout``, then is interrupted like any cell that
    runs past its limit (it fails, and later cells still run, each with at least one second)."""

    notebook_timeout = Integer(NOTEBOOK_TIMEOUT_S, help="seconds for the whole notebook").tag(config=True)
    show_progress = Bool(True, help="draw a progress bar on stderr while cells run").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        self._deadline = time.monotonic() + self.notebook_timeout
        name = (resources or {}).get("unique_key") or "notebook"
        self._progress = ProgressBar(f"grading {name}", enabled=self.show_progress,
                                     stream=sys.stderr)
        self._cells = len(nb.cells)
        try:
            return super().preprocess(nb, resources, km)
        finally:
            self._progress.close(f"{self._cells} cells run")

    def preprocess_cell(self, cell, resources, index):
        self._progress.show(index, self._cells, "cells")
        return super().preprocess_cell(cell, resources, index)

    def _get_timeout(self, cell):
        per_cell = super()._get_timeout(cell)
        remaining = max(1, int(self._deadline - time.monotonic()))
        return remaining if per_cell is None else min(per_cell, remaining)


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
    # nbgrader gives 0 points to a test cell with any stderr output: warnings (a deprecation in
    # torch, a debug print) must not cost points, so stderr streams are dropped before scoring.
    # Errors are separate outputs and still fail the cell.
    c.IgnorePattern.enabled = True
    c.IgnorePattern.pattern = r"(?s).*"
    c.Execute.timeout = CELL_TIMEOUT_S
    # Feedback HTML: hidden tests stay hidden (tilegym_edu.feedback)
    c.GenerateFeedback.preprocessors = [GetGrades, HideHiddenTests, CSSHTMLHeaderPreprocessor]
    c.DeadlineExecute.notebook_timeout = NOTEBOOK_TIMEOUT_S
    c.Autograde.autograde_preprocessors = [
        DeadlineExecute if p is Execute else p
        for p in Autograde.class_traits()["autograde_preprocessors"].default()]
    return c


def _api(root: Path) -> NbGraderAPI:
    # nbgrader runs the `alembic` executable, and the grading kernel's spec runs `python`:
    # both must be this environment's, also when it is not activated.
    bin_dir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    (root / ".grading").mkdir(exist_ok=True)
    return NbGraderAPI(config=configure(Config(), root))


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


def generate(lesson_names: list[str] | None = None, root: Path | None = None) -> list[Path]:
    """Regenerate ``notebooks/<lesson>/`` from ``solutions/``; return the notebooks written."""
    root = root or course_root()
    written = []
    for lesson in lesson_names or lessons(root):
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


@dataclass(frozen=True)
class GradeReport:
    """Self-grading of one lesson."""

    lesson: str
    student: str
    exercises: list[ExerciseResult] = field(default_factory=list)
    feedback: list[str] = field(default_factory=list)   # feedback HTML files

    @property
    def points(self) -> float:
        return sum(e.points for e in self.exercises)

    @property
    def max_points(self) -> float:
        return sum(e.max_points for e in self.exercises)

    def to_dict(self) -> dict:
        return {**asdict(self), "points": self.points, "max_points": self.max_points}

    def format_table(self) -> str:
        header = ("exercise", "points", "status", "reason")
        rows = [(e.exercise, f"{e.points:g}/{e.max_points:g}", e.status, e.reason)
                for e in self.exercises]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
        lines = [f"{self.lesson} (graded as '{self.student}')"]
        for row in [header, *rows]:
            lines.append("  ".join(c.ljust(w) for c, w in zip(row[:3], widths)) + "  " + row[3])
        lines.append(f"total: {self.points:g}/{self.max_points:g}")
        lines += [f"feedback: {path}" for path in self.feedback]
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


def _results(autograded: Path, notebook: str, lesson: str, student: str,
             gradebook: Gradebook) -> list[ExerciseResult]:
    nb = nbformat.read(autograded, as_version=4)
    grades = {g.name: g for g in gradebook.find_submission_notebook(notebook, lesson, student).grades}
    results = []
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if not meta.get("grade"):
            continue
        grade = grades[meta["grade_id"]]
        score, max_score = grade.score or 0.0, grade.max_score
        ename, reason = _error_of(cell)
        if ename == "KeyboardInterrupt":   # how nbclient stops a cell past its time limit
            reason = (f"the cell ran past its time limit ({CELL_TIMEOUT_S} s a cell, "
                      f"{NOTEBOOK_TIMEOUT_S} s the notebook) and was interrupted: look for a "
                      "kernel or loop that never finishes, or sizes too large for this machine")
        if score >= max_score:
            status, reason = "passed", ""
        elif ename == NEEDS_GPU_ERROR:
            status = "needs GPU"
        else:
            status = "failed"
            reason = reason or "no points (the cell produced no error: check its output)"
        results.append(ExerciseResult(notebook, meta["grade_id"], score, max_score, status, reason))
    return results


def grade(lesson: str, submission: Path | None = None, root: Path | None = None,
          student: str = STUDENT) -> GradeReport:
    """Autograde a copy of the learner's notebooks of ``lesson`` (default: the folder
    ``notebooks/<lesson>``) as ``student``, write feedback HTML, and report per exercise."""
    root = root or course_root()
    _require_lesson(lesson, root)
    source = Path(submission) if submission else root / "notebooks" / lesson
    notebooks = sorted(source.glob("*.ipynb"))
    if not notebooks:
        raise CourseError(f"no notebooks to grade in {source}")
    for path in notebooks:
        try:
            nbformat.validate(nbformat.read(path, as_version=4))
        except Exception as exc:  # nbformat raises several unrelated types for broken files
            raise CourseError(f"{path} is not a valid notebook ({type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    release(lesson, root)
    submitted = root / ".grading" / "submitted" / student / lesson
    shutil.rmtree(submitted, ignore_errors=True)
    submitted.mkdir(parents=True)
    for path in notebooks:
        shutil.copyfile(path, submitted / path.name)
    api = _api(root)
    _run(api.autograde(lesson, student, force=True, create=True), "autograde")
    _run(api.generate_feedback(lesson, student, force=True), "generate_feedback")
    exercises, feedback = [], []
    with Gradebook(f"sqlite:///{root / '.grading' / 'gradebook.db'}") as gradebook:
        for path in notebooks:
            autograded = root / ".grading" / "autograded" / student / lesson / path.name
            exercises += _results(autograded, path.stem, lesson, student, gradebook)
            feedback.append(str(root / ".grading" / "feedback" / student / lesson / f"{path.stem}.html"))
    return GradeReport(lesson, student, exercises, feedback)


def report_json(report: GradeReport) -> str:
    return json.dumps(report.to_dict(), indent=2)
