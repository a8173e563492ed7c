"""Reading what a learner handed in, from a folder the learner may have built.

The grader reads a submission's notebooks in its own process, as the instructor, before any
sandbox starts. A class folder unpacked from students' uploads (``unzip``, ``tar -x``) can hold
what a notebook file should not be, so every read goes through :func:`read_bytes`:

* a symbolic link (``mallory/LESSON.ipynb -> ../alice/LESSON.ipynb``, or a link to the course's
  own solutions) would be graded as the file it points to: round 14 of the red team got a
  classmate's score that way, and full marks from the instructor's solution;
* a named pipe blocks the reader for ever, and a link to ``/dev/zero`` reads until memory runs
  out: the class run would stop at that student;
* a file larger than any notebook of this course is refused before it is read.

Each is refused with a :class:`~tilegym_edu.course.CourseError` that says what to hand in
instead; in a class run that is the student's row, and the others are graded.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from tilegym_edu.course import CourseError

#: the largest notebook the grader reads, in bytes: the course's notebooks are about 0.1 MB
#: without outputs, a few MB with their plots
MAX_NOTEBOOK_BYTES = 20 * 1024 * 1024


def require_not_linked(folder: Path) -> None:
    """Raise unless ``folder`` is a real folder, not a symbolic link to one (a student's folder
    linked to a classmate's)."""
    if folder.is_symlink():
        raise CourseError(f"{folder} is a symbolic link: hand in a folder holding the notebook "
                          "itself")


def read_bytes(path: Path, limit: int = MAX_NOTEBOOK_BYTES) -> bytes:
    """The contents of ``path``, which must be a regular file (not a link, pipe or device) of
    at most ``limit`` bytes."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise CourseError(f"{path} cannot be read ({exc.strerror})") from None
    if stat.S_ISLNK(info.st_mode):
        raise CourseError(f"{path} is a symbolic link: hand in the notebook itself, not a link "
                          "to one")
    if not stat.S_ISREG(info.st_mode):
        raise CourseError(f"{path} is not a regular file (a pipe, device or folder): hand in "
                          "the notebook itself")
    if info.st_size > limit:
        raise CourseError(f"{path} holds {info.st_size:,} bytes, more than a notebook of this "
                          f"course ({limit:,}): clear its outputs (Edit > Clear Outputs of All "
                          "Cells), save, and hand it in again")
    # O_NOFOLLOW and O_NONBLOCK: should the file have become a link or a pipe since lstat, the
    # open fails or returns at once rather than following it or waiting for a writer
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise CourseError(f"{path} cannot be read ({exc.strerror}): hand in the notebook "
                          "itself") from None
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise CourseError(f"{path} is not a regular file: hand in the notebook itself")
        data = file.read(limit + 1)
    if len(data) > limit:
        raise CourseError(f"{path} grew past {limit:,} bytes while it was read")
    return data


def read_if_present(path: Path) -> bytes | None:
    """:func:`read_bytes` of ``path``, or None where nothing (not even a broken link) is
    there."""
    if not os.path.lexists(path):
        return None
    return read_bytes(path)
