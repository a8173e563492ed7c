"""The stock nbgrader commands grade the notebook ``tilegym-edu grade`` grades.

``nbgrader autograde``, and the formgrader's Autograde button, read the course's
``nbgrader_config.py`` (:func:`tilegym_edu.course.configure`). Left as it comes, nbgrader runs
each student's notebook as it was handed in: their solution cells in one kernel with the
lesson's test cells, where a solution cell could replace the grader's checks. On this
project's CPU machine (2026-12-05) a lesson 00 notebook whose solution cell replaced
``grading.assert_correct``, ``grading.require_gpu`` and the speed check with functions that do
nothing earned all 8 points that way, the GPU cell's 2 included, with no GPU.

:class:`PrepareSubmission`, one of the course's sanitize preprocessors, hands nbgrader
the notebook ``tilegym-edu grade`` would run instead (:func:`tilegym_edu.submission.prepare`):
the released lesson's cells, with the student's code put in and audited, demonstrations left
out, and a graded cell the student deleted run but failed. The grading kernel gets the graded
seeds (:class:`tilegym_edu.executor.ResilientExecute`). What the stock commands still lack is
the sandbox (``tilegym-edu grade-class`` runs every submission in one): a notebook graded
this way runs as the instructor, on the instructor's files.
"""
from __future__ import annotations

from pathlib import Path

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode

from tilegym_edu import submission


class PrepareSubmission(NbGraderPreprocessor):
    """Replace a submitted notebook with the notebook to grade (submission.prepare), built on
    the lesson as released (``.grading/release/<lesson>/``), and log what the grader noticed."""

    course_root = Unicode("", help="the course directory").tag(config=True)

    def preprocess(self, nb, resources):
        lesson = resources["nbgrader"]["assignment"]
        name = resources["nbgrader"]["notebook"]
        released = Path(self.course_root) / ".grading" / "release" / lesson / f"{name}.ipynb"
        if not released.is_file():
            raise FileNotFoundError(f"{released} is missing: run `nbgrader generate_assignment "
                                    f"{lesson}` in {self.course_root} before grading it")
        prepared = submission.prepare(nbformat.read(released, as_version=4), nb,
                                      source=submission.lesson_source(Path(self.course_root),
                                                                      lesson, name))
        for note in prepared.notes:
            self.log.warning("%s: %s", name, note)
        for label, why in prepared.refused.items():
            self.log.warning("%s: the grader left out part of %s: %s", name, label, why)
        submission.fail_deleted_cells(prepared)
        return prepared.notebook, resources
