"""Grading a class folder on a tiny two-cell lesson: each student graded, a broken notebook a
row that says why, a CSV with points per exercise and what failed."""
import csv
import shutil

import nbformat
import pytest

from tilegym_edu import classroom, cli, course

#: class grading is sandboxed where bubblewrap is installed (make test installs it as root),
#: and tested without the sandbox elsewhere (tests/test_structure.py tests the sandbox itself)
HAS_BWRAP = shutil.which("bwrap") is not None
SANDBOX_FLAG = [] if HAS_BWRAP else ["--no-sandbox"]


def tiny_lesson(root):
    """A course with one lesson: a solution cell defining double(x) and a 2-point test cell."""
    meta = {"schema_version": 3, "locked": False, "task": False}
    solution = nbformat.v4.new_code_cell(
        "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION")
    solution.metadata = {"nbgrader": {**meta, "grade": False, "solution": True,
                                      "grade_id": "double"}}
    test = nbformat.v4.new_code_cell("assert double(21) == 42, f'double(21) = {double(21)}'")
    test.metadata = {"nbgrader": {**meta, "grade": True, "solution": False, "locked": True,
                                  "grade_id": "test_double", "points": 2}}
    nb = nbformat.v4.new_notebook(cells=[solution, test])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    (root / "solutions" / "tiny").mkdir(parents=True)
    nbformat.write(nb, root / "solutions" / "tiny" / "tiny.ipynb")
    return nb


def submit(folder, student, nb=None, text=None):
    (folder / student).mkdir(parents=True)
    path = folder / student / "tiny.ipynb"
    path.write_text(text) if text is not None else nbformat.write(nb, path)


def class_of_three(tmp_path):
    """A tiny course and a class folder: ada right, bob wrong, eve's notebook not JSON.
    Returns (course root, class folder, the right notebook)."""
    root = tmp_path / "course"
    nb = tiny_lesson(root)
    wrong = nbformat.from_dict(nb)
    wrong.cells[0].source = "def double(x):\n    return x + 2"
    folder = tmp_path / "submissions"
    submit(folder, "ada", nb)
    submit(folder, "bob", wrong)
    submit(folder, "eve", text="{ this is not a notebook")
    return root, folder, nb


@pytest.mark.slow
def test_a_class_is_graded_into_a_csv(tmp_path, monkeypatch, capfd):
    root, folder, _ = class_of_three(tmp_path)
    monkeypatch.setenv("TILEGYM_COURSE_ROOT", str(root))
    out = tmp_path / "grades.csv"
    assert cli.main(["grade-class", "tiny", str(folder), "--csv", str(out), *SANDBOX_FLAG]) == 0
    rows = {r["student"]: r for r in csv.DictReader(out.open())}
    assert (rows["ada"]["points"] == "2" and rows["ada"]["test_double"] == "2"
            and rows["ada"]["problems"] == "")
    assert (rows["bob"]["points"] == "0"
            and "test_double: failed (AssertionError: double(21) = 23)" in rows["bob"]["problems"])
    assert (rows["eve"]["problems"].startswith("not graded:")
            and "not a valid notebook" in rows["eve"]["problems"])
    shown = capfd.readouterr()        # what the instructor's terminal shows, kernels' own included
    assert "summary of 3 students" in shown.out
    # the kernel process's own notes (ipykernel's connection lines in the sandbox) go to kernel.log
    assert "To connect another client" not in shown.out + shown.err


def test_a_folder_that_is_not_a_student_id_is_a_row_and_the_class_goes_on(tmp_path):
    (tmp_path / "bad name").mkdir()
    [result] = classroom.grade_class("tiny", tmp_path, root=tmp_path)
    assert result.student == "bad name" and "rename it" in result.error
    with pytest.raises(course.CourseError, match="not a folder"):
        classroom.students(tmp_path / "missing")


@pytest.mark.slow
def test_a_cell_that_never_finishes_loses_its_points_and_grading_goes_on(tmp_path, monkeypatch):
    root = tmp_path / "course"
    nb = tiny_lesson(root)
    hang = nbformat.v4.new_code_cell("import time\nwhile True:\n    time.sleep(0.1)")
    hang.metadata = {"nbgrader": {"schema_version": 3, "grade": True, "solution": False,
                                  "locked": True, "task": False, "grade_id": "test_hangs",
                                  "points": 1}}
    nb.cells.append(hang)
    nbformat.write(nb, root / "solutions" / "tiny" / "tiny.ipynb")
    folder = tmp_path / "submissions"
    submit(folder, "ada", nb)
    # 10 s: the setup cell imports torch, which took over 5 s on 2 cores busy with two test runs
    monkeypatch.setattr(course, "CELL_TIMEOUT_S", 10)
    [result] = classroom.grade_class("tiny", folder, root=root, sandboxed=HAS_BWRAP)
    points = {e.exercise: (e.points, e.status) for e in result.report.exercises}
    assert points == {"test_double": (2, "passed"), "test_hangs": (0, "failed")}
    reason = next(e.reason for e in result.report.exercises if e.exercise == "test_hangs")
    assert "ran past its time limit (10 s a cell" in reason and "never finishes" in reason, reason
