"""handed_in: what a learner handed in is read only as a regular file of its own, never through
a link, from a pipe or past a size; a class folder holding such things grades its other
students (round 14 of the red team)."""
import os

import nbformat
import pytest

from tests.test_classroom import HAS_BWRAP, submit, tiny_lesson
from tilegym_edu import classroom, handed_in
from tilegym_edu.course import CourseError

pytestmark = pytest.mark.beside


def test_a_regular_file_is_read_and_a_missing_one_is_none(tmp_path):
    (tmp_path / "a.ipynb").write_bytes(b"{}")
    assert handed_in.read_bytes(tmp_path / "a.ipynb") == b"{}"
    assert handed_in.read_if_present(tmp_path / "b.ipynb") is None


def test_a_link_a_pipe_a_device_and_a_large_file_are_refused_without_reading(tmp_path):
    (tmp_path / "theirs.ipynb").write_bytes(b"{}")
    (tmp_path / "link.ipynb").symlink_to(tmp_path / "theirs.ipynb")
    os.mkfifo(tmp_path / "pipe.ipynb")                     # reading it would wait for ever
    (tmp_path / "zero.ipynb").symlink_to("/dev/zero")
    (tmp_path / "big.ipynb").write_bytes(b" " * 101)
    with pytest.raises(CourseError, match="is a symbolic link: hand in the notebook itself"):
        handed_in.read_bytes(tmp_path / "link.ipynb")
    with pytest.raises(CourseError, match="not a regular file"):
        handed_in.read_bytes(tmp_path / "pipe.ipynb")
    with pytest.raises(CourseError, match="symbolic link"):
        handed_in.read_if_present(tmp_path / "zero.ipynb")
    with pytest.raises(CourseError, match="holds 101 bytes, more than a notebook"):
        handed_in.read_bytes(tmp_path / "big.ipynb", limit=100)
    with pytest.raises(CourseError, match="is a symbolic link"):
        handed_in.require_not_linked(_linked_folder(tmp_path))


def _linked_folder(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    return tmp_path / "linked"


@pytest.mark.slow
def test_a_class_with_links_and_a_pipe_grades_its_other_students(tmp_path):
    """mallory's notebook links to ada's, mallory2's folder is ada's, pat's notebook is a named
    pipe: each is a row that says why, and ada is graded."""
    root = tmp_path / "course"
    nb = tiny_lesson(root)
    folder = tmp_path / "submissions"
    submit(folder, "ada", nb)
    (folder / "mallory").mkdir()
    (folder / "mallory" / "tiny.ipynb").symlink_to(folder / "ada" / "tiny.ipynb")
    (folder / "mallory2").symlink_to(folder / "ada")
    (folder / "pat").mkdir()
    os.mkfifo(folder / "pat" / "tiny.ipynb")
    results = {r.student: r for r in classroom.grade_class("tiny", folder, root=root,
                                                           sandboxed=HAS_BWRAP)}
    assert results["ada"].report.points == 2
    assert results["mallory"].report is None and "symbolic link" in results["mallory"].error
    assert results["mallory2"].report is None and "symbolic link" in results["mallory2"].error
    assert results["pat"].report is None and "not a regular file" in results["pat"].error
    assert nbformat.read(folder / "ada" / "tiny.ipynb", as_version=4) == nb
