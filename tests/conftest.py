"""Shared fixtures. tilegym_edu is imported first: it decides the mode before triton loads."""
import tilegym_edu  # noqa: F401

import shutil
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@contextmanager
def tuning_cache_in(folder: Path):
    """tilegym_edu.tune's cache in ``folder`` (TILEGYM_CACHE_DIR, which grading kernels inherit)
    and its in-memory copy empty, for the time of the block."""
    from tilegym_edu import tune
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TILEGYM_CACHE_DIR", str(folder))
        tune._MEMORY.clear()
        try:
            yield
        finally:
            tune._MEMORY.clear()


@pytest.fixture
def fresh_cache(tmp_path):
    """An empty tuning cache of the test's own, in tmp_path."""
    with tuning_cache_in(tmp_path):
        yield


@pytest.fixture(scope="session")
def course_copy(tmp_path_factory) -> Path:
    """A copy of the course (solutions/ and notebooks/) with its own .grading/ folder: one
    gradebook for the whole test session, and the repository's own .grading/ left alone."""
    root = tmp_path_factory.mktemp("course")
    for folder in ("solutions", "notebooks"):
        shutil.copytree(REPO / folder, root / folder)
    return root


@pytest.fixture(scope="session")
def lesson_reports(course_copy, tmp_path_factory):
    """lesson_reports(lesson): the grade reports of that lesson's solution ("solution") and of
    each of its known-wrong submissions (tests/submissions/lessonNN.py), graded once a session,
    every lesson's at the first call (one pool of graders for all: tests/lesson_checks.py)."""
    from tests.lesson_checks import LESSONS, grade_lessons
    graded = {}

    def reports(lesson: str) -> dict:
        if not graded:
            graded.update(grade_lessons(LESSONS, course_copy, tmp_path_factory))
        return graded[lesson]
    return reports
