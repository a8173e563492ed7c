"""grade-class with several workers, and its re-runs: the grades one worker gives this class
(tests/test_classroom.py checks those rows), the course's gradebook holding them, only new,
changed or failed submissions graded again, each worker pinned to a GPU of its own (faked here:
there is no GPU)."""
import csv
import re
import sys

import nbformat
import pytest
from nbgrader.api import Gradebook

from tests.test_classroom import SANDBOX_FLAG, class_of_three, submit
from tilegym_edu import class_state, classroom, cli, course


def gradebook_points(root, student):
    """The student's total for the tiny lesson in the course's own gradebook."""
    with Gradebook(course.gradebook_url(root)) as gradebook:
        return gradebook.find_submission("tiny", student).score


@pytest.mark.slow
def test_workers_grade_as_one_does_and_a_rerun_grades_only_what_changed(tmp_path, monkeypatch,
                                                                        capfd):
    root, folder, nb = class_of_three(tmp_path)
    monkeypatch.setenv("TILEGYM_COURSE_ROOT", str(root))
    out = tmp_path / "grades.csv"

    def grade(*flags):
        """Run grade-class; the CSV's rows by student, and the students it graded."""
        assert cli.main(["grade-class", "tiny", str(folder), "--csv", str(out), *SANDBOX_FLAG,
                         *flags]) == 0
        graded = re.findall(r"^\[\d+/\d+\] (\S+) tiny ", capfd.readouterr().err, re.M)
        return {r["student"]: r for r in csv.DictReader(out.open())}, sorted(graded)

    first, graded = grade("--workers", "2")
    assert graded == ["ada", "bob", "eve"]
    assert first["ada"]["points"] == "2" and first["bob"]["points"] == "0"
    assert "not a valid notebook" in first["eve"]["problems"]
    assert float(first["ada"]["seconds"]) > 0
    assert gradebook_points(root, "ada") == 2 and gradebook_points(root, "bob") == 0
    assert (root / ".grading" / "feedback" / "ada" / "tiny" / "tiny.html").is_file()

    again, graded = grade("--workers", "2")
    assert graded == ["eve"], "only the failed submission is graded again"
    assert again["ada"] == first["ada"] and again["bob"] == first["bob"], "kept, time and all"

    nbformat.write(nb, folder / "bob" / "tiny.ipynb")     # bob hands in a fixed notebook
    fixed, graded = grade("--workers", "2")
    assert graded == ["bob", "eve"]
    assert fixed["bob"]["points"] == "2" and gradebook_points(root, "bob") == 2
    assert fixed["ada"] == first["ada"]


#: a stand-in for the worker process: its result's error names the GPU and course copy it got;
#: the student "cy" crashes it before it writes a result
FAKE_WORKER = """import json, os, sys
out, student = sys.argv[1:]
if student == "cy":
    os._exit(3)
seen = f"gpu {os.environ['CUDA_VISIBLE_DEVICES']} in {os.environ['TILEGYM_COURSE_ROOT']}"
json.dump({"student": student, "error": seen, "seconds": 0.0, "report": None}, open(out, "w"))
"""


def test_each_worker_gets_a_gpu_of_its_own_and_a_crash_is_one_row(tmp_path, monkeypatch):
    root, folder, nb = class_of_three(tmp_path)
    submit(folder, "cy", nb)
    monkeypatch.setattr(classroom, "visible_gpus", lambda: ["0", "1"])
    with pytest.raises(course.CourseError, match=r"--workers 3, .* 2 visible GPU.*0, 1"):
        classroom.grade_class("tiny", folder, root, workers=3)
    monkeypatch.setattr(classroom, "worker_command",
                        lambda lesson, submission, student, copy, sandboxed, hide, out:
                        [sys.executable, "-c", FAKE_WORKER, str(out), student])
    results = {r.student: r for r in classroom.grade_class("tiny", folder, root)}
    first_two = {results["ada"].error.split(" in ")[0], results["bob"].error.split(" in ")[0]}
    assert first_two == {"gpu 0", "gpu 1"}, "two workers at once never share a GPU"
    copies = {r.error.split(" in ")[1] for r in results.values() if r.error.startswith("gpu")}
    assert len(copies) == 2 and str(root) not in copies, "each worker grades in its own copy"
    assert "ended without a result (exit status 3" in results["cy"].error


def test_the_number_of_workers_without_a_gpu():
    assert classroom.plan_workers(None, []) == [None]
    assert classroom.plan_workers(3, []) == [None, None, None]
    assert classroom.plan_workers(None, ["2", "5"]) == ["2", "5"]
    with pytest.raises(course.CourseError, match="1 worker or more"):
        classroom.plan_workers(0, [])


def test_a_damaged_state_file_says_what_to_do(tmp_path):
    path = class_state.state_path(tmp_path, "tiny")
    path.parent.mkdir(parents=True)
    path.write_text("{ half written")
    with pytest.raises(course.CourseError, match="delete it, and the next run grades every"):
        class_state.load_state(tmp_path, "tiny")


def test_a_resubmission_of_the_same_notebook_is_graded_again(tmp_path):
    """The exchange's receipts count as part of a submission: collect copies new ones beside an
    unchanged notebook, and its feedback must be released under them."""
    root, folder, nb = class_of_three(tmp_path)
    receipt = course.submission_folder(folder, "ada", "tiny") / "timestamp.txt"
    receipt.write_text("2026-12-05 10:00:00.000000 UTC")

    def ada():
        return class_state.submission_hashes("tiny", folder, ["ada"], root)["ada"]

    first = ada()
    (receipt.parent / "notes.txt").write_text("not part of a submission")
    assert ada() == first
    receipt.write_text("2026-12-05 11:00:00.000000 UTC")
    assert ada() != first
