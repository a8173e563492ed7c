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


def copy_of_the_course(tmp_path_factory, name: str = "course") -> Path:
    """A copy of the course (solutions/ and notebooks/) in a new temporary folder."""
    root = tmp_path_factory.mktemp(name)
    for folder in ("solutions", "notebooks"):
        shutil.copytree(REPO / folder, root / folder)
    return root


@pytest.fixture(scope="session")
def course_copy(tmp_path_factory) -> Path:
    """A copy of the course (solutions/ and notebooks/) with its own .grading/ folder: one
    gradebook for the whole test session, and the repository's own .grading/ left alone."""
    return copy_of_the_course(tmp_path_factory)


@pytest.fixture(scope="session")
def lesson_grading(tmp_path_factory):
    """Every lesson's solution and known-wrong submissions graded (tests/lesson_checks.py), in
    one pool of graders on a copy of the course of its own: {lesson: {"solution" or
    submission: Future of its report}}, started now and graded beside the tests that follow.
    It takes minutes of every core."""
    from tests.lesson_checks import LESSONS, grading_pool, start_lesson_gradings
    root = copy_of_the_course(tmp_path_factory, "lesson-course")
    pool = grading_pool()
    try:
        yield start_lesson_gradings(LESSONS, root, tmp_path_factory, pool)
    finally:  # a session cut short drops the gradings not yet started instead of waiting
        pool.shutdown(wait=False, cancel_futures=True)
        pool.shutdown()


def pytest_collection_modifyitems(config, items):
    """The tests that read the lesson grading pool's reports (lesson_reports) last, in their
    order: the pool grades from the first test outside tests/browser on, and every other test
    runs while it does, instead of waiting behind a test that waits for it."""
    items.sort(key=lambda item: "lesson_reports" in getattr(item, "fixturenames", ()))


@pytest.fixture(scope="session")
def session_grades_lessons(request) -> bool:
    """Whether a test of this session reads the lesson grading pool."""
    return any("lesson_reports" in getattr(item, "fixturenames", ())
               for item in request.session.items)


@pytest.fixture(autouse=True)
def start_lesson_grading_early(request, session_grades_lessons):
    """Where this session will need the lesson grading pool, start it with the first test
    outside tests/browser, so that it grades beside the other tests instead of holding up the
    lesson tests (on 2 cores it takes about 5 minutes of both). The browser tests, first in
    the session, run without it: they drive JupyterLab by keystrokes, and one waited 900 s for
    a cell that never started when the machine was busier still (2026-12-03)."""
    if session_grades_lessons and "browser" not in request.path.parts:
        request.getfixturevalue("lesson_grading")


@pytest.fixture(scope="session")
def lesson_reports(lesson_grading):
    """lesson_reports(lesson): the grade reports of that lesson's solution ("solution") and of
    each of its known-wrong submissions (tests/submissions/lessonNN.py), graded once a session
    for every lesson (lesson_grading)."""
    def reports(lesson: str) -> dict:
        return {name: grading.result() for name, grading in lesson_grading[lesson].items()}
    return reports
