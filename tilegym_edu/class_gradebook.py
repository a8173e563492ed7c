"""Recording a grading made in a worker's copy of the course in the course's own gradebook and
``.grading/`` folders (tilegym_edu.classroom's workers grade in copies: nbgrader's sqlite
gradebook takes one writer at a time)."""
from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

from tilegym_edu import autograde, course

#: what nbgrader records of a grading, copied from a worker's gradebook into the course's
SUBMISSION_FIELDS = ("timestamp", "extension")
NOTEBOOK_FIELDS = ("flagged", "late_submission_penalty")
GRADE_FIELDS = ("auto_score", "manual_score", "extra_credit", "needs_manual_grade")
COMMENT_FIELDS = ("auto_comment", "manual_comment")
#: the folders of .grading/ a grading writes for one student, copied from a worker's copy
GRADING_FOLDERS = ("submitted", "autograded", "feedback")


def record_in_gradebook(root: Path, copy: Path, lesson: str, student: str) -> None:
    """Record ``student``'s grading of ``lesson`` in the course copy ``copy`` in the course
    ``root``: the gradebook's submission, scores and comments as nbgrader's autograde wrote
    them in the copy (an earlier grading of the student is removed first, as autograde.grade
    does), and the submitted, autograded and feedback files."""
    with Gradebook(course.gradebook_url(copy)) as theirs, \
            Gradebook(course.gradebook_url(root)) as ours, autograde.quiet_gradebook():
        with contextlib.suppress(MissingEntry):
            ours.remove_submission(lesson, student)
        ours.update_or_create_student(student)
        graded = theirs.find_submission(lesson, student)
        submission = ours.add_submission(lesson, student)
        _copy_fields(graded, submission, SUBMISSION_FIELDS)
        for notebook in graded.notebooks:
            _copy_fields(notebook, ours.find_submission_notebook(notebook.name, lesson, student),
                         NOTEBOOK_FIELDS)
            for grade in notebook.grades:
                _copy_fields(grade, ours.find_grade(grade.name, notebook.name, lesson, student),
                             GRADE_FIELDS)
            for comment in notebook.comments:
                _copy_fields(comment, ours.find_comment(comment.name, notebook.name, lesson,
                                                        student), COMMENT_FIELDS)
        ours.db.commit()
    for kind in GRADING_FOLDERS:
        target = root / ".grading" / kind / student / lesson
        shutil.rmtree(target, ignore_errors=True)
        source = copy / ".grading" / kind / student / lesson
        if source.is_dir():
            shutil.copytree(source, target)


def _copy_fields(source: object, target: object, names: tuple[str, ...]) -> None:
    """Set each attribute ``names`` of ``target`` to the one of ``source``."""
    for name in names:
        setattr(target, name, getattr(source, name))
