"""Shared fixtures. tilegym_edu is imported first: it decides the mode before triton loads."""
import tilegym_edu  # noqa: F401

import fcntl
import os
import pickle
import shutil
from concurrent.futures import ThreadPoolExecutor
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


def shared_folder(tmp_path_factory) -> Path:
    """A folder every process of this test session sees: the session's base temporary folder,
    or under pytest-xdist the folder that holds every worker's."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


class GradedElsewhere:
    """The lesson grading another process of the session runs (under pytest-xdist, the worker
    that took the lock first): result() waits for its lock, then reads what it wrote."""

    def __init__(self, lock, results: Path):
        self.lock, self.results, self.reports = lock, results, None

    def result(self) -> dict:
        if self.reports is None:
            fcntl.flock(self.lock, fcntl.LOCK_EX)
            if not self.results.exists():
                raise RuntimeError("the lesson grading failed in another worker of this "
                                   "session: its lesson tests show why")
            self.reports = pickle.loads(self.results.read_bytes())
        return self.reports


def _grade_and_share(lessons, root, tmp_path_factory, pool, lock, results: Path) -> dict:
    """grade_lessons, its reports written to ``results`` for the session's other processes, and
    ``lock`` released (written or not) so that they stop waiting."""
    from tests.lesson_checks import grade_lessons
    try:
        reports = grade_lessons(lessons, root, tmp_path_factory, pool)
        results.write_bytes(pickle.dumps(reports))
        return reports
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def lesson_grading(tmp_path_factory):
    """Every lesson's solution and known-wrong submissions graded (tests/lesson_checks.py), in
    one pool of graders on a copy of the course of its own, run from a background thread: a
    Future of {lesson: {"solution" or submission: report}}. It takes minutes of every core, so
    a session grades once: under pytest-xdist the first worker to take the lock grades and the
    others read its reports (GradedElsewhere)."""
    from tests.lesson_checks import LESSONS, grading_pool
    shared = shared_folder(tmp_path_factory)
    lock = open(shared / "lesson-grading.lock", "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        yield GradedElsewhere(lock, shared / "lesson-grading.pickle")
        lock.close()
        return
    root = copy_of_the_course(tmp_path_factory, "lesson-course")
    pool = grading_pool()
    runner = ThreadPoolExecutor(1, thread_name_prefix="lesson-grading")
    try:
        yield runner.submit(_grade_and_share, LESSONS, root, tmp_path_factory, pool, lock,
                            shared / "lesson-grading.pickle")
    finally:  # a session cut short drops the gradings not yet started instead of waiting
        pool.shutdown(wait=False, cancel_futures=True)
        runner.shutdown()
        pool.shutdown()
        lock.close()


@pytest.fixture(scope="session", autouse=True)
def start_lesson_grading_early(request):
    """Where this session will need the lesson grading pool, start it with the first test, so
    that it grades beside the other tests instead of holding up the lesson tests (on 2 cores
    it took about 5 minutes of both, 2026-12-03)."""
    if any("lesson_reports" in getattr(item, "fixturenames", ()) for item in request.session.items):
        request.getfixturevalue("lesson_grading")


@pytest.fixture(scope="session")
def lesson_reports(lesson_grading):
    """lesson_reports(lesson): the grade reports of that lesson's solution ("solution") and of
    each of its known-wrong submissions (tests/submissions/lessonNN.py), graded once a session
    for every lesson (lesson_grading)."""
    def reports(lesson: str) -> dict:
        return lesson_grading.result()[lesson]
    return reports
