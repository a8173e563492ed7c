"""The course as nbgrader sees it: its folder, its lessons, and nbgrader's configuration.

The repository is an nbgrader course directory: ``solutions/`` is the source (worked solutions
and every test; each lesson's notebook is built from the percent-format ``.py`` beside it,
:mod:`tilegym_edu.build`), learner notebooks in ``notebooks/`` are what ``generate_assignment``
makes of it, and all of nbgrader's working state (release, submitted, autograded, feedback,
gradebook) lives in the git-ignored ``.grading/``. ``nbgrader_config.py`` at the top of the
repository applies :func:`configure`, so the stock ``nbgrader`` commands see the same course;
:func:`nbgrader_api` is nbgrader's API on it, for building (:mod:`tilegym_edu.build`) and
grading (:mod:`tilegym_edu.autograde`).
"""
from __future__ import annotations

import functools
import os
import re
import sys
from pathlib import Path

import nbgrader.api
from alembic.script import ScriptDirectory
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
from nbgrader import dbutil
from nbgrader.apps import NbGraderAPI
from nbgrader.converters import Autograde
from nbgrader.preprocessors import Execute, GetGrades, OverwriteCells
from traitlets.config import Config

from tilegym_edu import executor
from tilegym_edu.feedback import HideHiddenTests
from tilegym_edu.stock import PrepareSubmission

#: per cell: room for a first Triton compile and for autotuning on a GPU
CELL_TIMEOUT_S = 600
#: the whole notebook
NOTEBOOK_TIMEOUT_S = 3600


@functools.cache
def gradebook_schema_revision() -> str:
    """The newest revision of nbgrader's gradebook schema (its alembic scripts' head), which
    nbgrader stamps into every gradebook it creates: read here, in this process, from the
    scripts themselves."""
    return ScriptDirectory(dbutil.ALEMBIC_DIR).get_current_head()


# nbgrader asks a subprocess, `alembic heads`, for that revision each time it creates a gradebook:
# a Python of its own that imports nbgrader again (and compiles rfc3987_syntax's grammar:
# tilegym_edu/__init__.py), for every course copy a grading or a test makes. Same scripts, same
# alembic, same answer, without the process: grading blank lesson 00 into a new gradebook took
# 7.2 s, where it took 9.9 s with the subprocess (medians of 5, 2 cores, 2026-12-06).
nbgrader.api.get_alembic_version = gradebook_schema_revision


class CourseError(Exception):
    """A problem with the course files the user asked for (missing lesson, broken notebook)."""


def course_root() -> Path:
    """The course directory: ``$TILEGYM_COURSE_ROOT``, else the repository this package lives
    in (an editable install), else the current directory."""
    if os.environ.get("TILEGYM_COURSE_ROOT"):
        return Path(os.environ["TILEGYM_COURSE_ROOT"]).resolve()
    repo = Path(__file__).resolve().parent.parent
    return repo if (repo / "solutions").is_dir() else Path.cwd()


def gradebook_url(root: Path) -> str:
    """The course's gradebook, nbgrader's database of lessons, tests and scores."""
    return f"sqlite:///{root / '.grading' / 'gradebook.db'}"


#: nbgrader's course id: the exchange files every release, submission and feedback under it, so
#: the instructor's and the learners' configurations must agree (tilegym_edu.hub writes theirs)
COURSE_ID = "tilegym_edu"


#: what nbgrader's exchange puts beside a submitted notebook (submit writes them, collect
#: copies them): the submission time, and the secret that release_feedback names the feedback
#: file by, so that the learner's fetch_feedback finds it. Grading carries them to nbgrader's
#: submitted folder, whence autograde and generate_feedback carry them on.
EXCHANGE_RECEIPTS = ("timestamp.txt", "submission_secret.txt")


def configure(c: Config, root: Path, prepare_submissions: bool = True) -> Config:
    """Set the course layout, gradebook and time limits on an nbgrader config object (and make
    the gradebook's folder, which the stock nbgrader commands would not: on a fresh clone
    `nbgrader generate_assignment` failed for want of it). With ``prepare_submissions``,
    autograde grades the notebook tilegym-edu grade would (tilegym_edu.stock), not the one
    handed in: off only where the notebooks are prepared already (nbgrader_api)."""
    (root / ".grading").mkdir(exist_ok=True)
    c.CourseDirectory.root = str(root)
    c.CourseDirectory.course_id = COURSE_ID
    c.CourseDirectory.source_directory = "solutions"
    c.CourseDirectory.release_directory = ".grading/release"
    c.CourseDirectory.submitted_directory = ".grading/submitted"
    c.CourseDirectory.autograded_directory = ".grading/autograded"
    c.CourseDirectory.feedback_directory = ".grading/feedback"
    c.CourseDirectory.db_url = gradebook_url(root)
    # a lesson's source (solutions/<lesson>/<lesson>.py, solutions included) is never released
    c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "*.py"]
    # nbgrader gives 0 points to a test cell with any stderr output: warnings (a deprecation in
    # torch, a debug print) must not cost points, so stderr streams are dropped before scoring.
    # Errors are separate outputs and still fail the cell.
    c.IgnorePattern.enabled = True
    c.IgnorePattern.pattern = r"(?s).*"
    c.Execute.timeout = CELL_TIMEOUT_S
    # Feedback HTML: hidden tests stay hidden (tilegym_edu.feedback); HTML a cell displayed is
    # sanitized (no <script>: feedback and the formgrader open in the instructor's browser)
    c.GenerateFeedback.preprocessors = [GetGrades, HideHiddenTests, CSSHTMLHeaderPreprocessor]
    c.HTMLExporter.sanitize_html = True
    c.ResilientExecute.notebook_timeout = NOTEBOOK_TIMEOUT_S
    # after OverwriteCells, which would put a deleted graded cell's failing end back as it was
    c.Autograde.sanitize_preprocessors = [
        q for p in Autograde.class_traits()["sanitize_preprocessors"].default()
        for q in ([p, PrepareSubmission] if p is OverwriteCells and prepare_submissions else [p])]
    c.PrepareSubmission.course_root = str(root)
    c.Autograde.autograde_preprocessors = [
        executor.ResilientExecute if p is Execute else p
        for p in Autograde.class_traits()["autograde_preprocessors"].default()]
    return c


def nbgrader_api(root: Path, whole_lessons: bool = True) -> NbGraderAPI:
    """nbgrader's API on the course; ``whole_lessons=False`` when the notebooks graded hold
    only some of the lesson's graded cells on purpose (``autograde.grade(exercises=...)``),
    which nbgrader would otherwise put back and run."""
    # The grading kernel's spec runs `python`: it must be this environment's, also when it is
    # not activated.
    bin_dir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    (root / ".grading").mkdir(exist_ok=True)
    config = configure(Config(), root, prepare_submissions=False)  # autograde.grade prepares
    config.OverwriteCells.add_missing_cells = whole_lessons
    return NbGraderAPI(config=config)


def lessons(root: Path | None = None) -> list[str]:
    """The lessons of the course, in order (the folders of ``solutions/``)."""
    root = root or course_root()
    return sorted(p.name for p in (root / "solutions").iterdir()
                  if p.is_dir() and any(p.glob("*.ipynb")))


def require_lesson(lesson: str, root: Path) -> None:
    """Raise CourseError, naming the lessons there are, unless ``lesson`` is one of them."""
    known = lessons(root)
    if lesson not in known:
        raise CourseError(f"no lesson '{lesson}' in {root / 'solutions'}; "
                          f"lessons: {', '.join(known)}")


#: nbgrader's refusal to change a lesson's cells once its gradebook holds submissions of it
_HAS_SUBMISSIONS = "because there are submissions associated with it"


def nbgrader_causes(log: str) -> list[str]:
    """The exception lines of an nbgrader log that say what went wrong (``RuntimeError: ...``),
    without the wrapper exception that only points back at them, each once, in order."""
    causes = [line.strip() for line in log.splitlines()
              if re.match(r"\s*\w*(Error|Exception): ", line) and "NbGraderException" not in line]
    return list(dict.fromkeys(causes))


def submission_folder(folder: Path, student: str, lesson: str) -> Path:
    """Where ``student``'s notebooks of ``lesson`` are in a class folder: ``folder/<student>/``,
    or ``folder/<student>/<lesson>/`` as nbgrader's collect lays them out."""
    collected = folder / student / lesson
    return collected if collected.is_dir() else folder / student


def require_success(result: dict, what: str) -> None:
    """Raise CourseError unless the API call ``what`` succeeded, with the cause from
    nbgrader's log (its ``error`` holds only a traceback of its wrapper) and what to do."""
    if result["success"]:
        return
    causes = nbgrader_causes(result.get("log") or "")
    message = "; ".join(causes) or result.get("error") or result.get("log")
    if _HAS_SUBMISSIONS in message:
        message += (". The gradebook in .grading/ holds gradings of this lesson, made before its "
                    "cells changed: move .grading/ away (or delete it, if those grades are not "
                    "needed) and run the command again")
    raise CourseError(f"nbgrader {what} failed: {message}")

