"""Course plumbing (course, build, autograde, grade_report): notebooks/ is what nbgrader makes of
solutions/, notebooks are committed clean, learner code cannot reach the grader, and the command
line reports errors in one line with exit status 2."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tilegym_edu import autograde, build, cli, course, grade_report
from tests.conftest import REPO

pytestmark = pytest.mark.beside

ALL_NOTEBOOKS = sorted(REPO.glob("solutions/*/*.ipynb")) + sorted(REPO.glob("notebooks/*/*.ipynb"))


def test_lessons_are_the_folders_of_solutions():
    assert course.lessons(REPO)[0] == "00_getting_started"
    assert all((REPO / "notebooks" / lesson).is_dir() for lesson in course.lessons(REPO))


def test_a_new_gradebook_is_stamped_with_the_revision_alembic_names_without_a_process(
        tmp_path, monkeypatch):
    """nbgrader stamps each gradebook it creates with its schema's head revision, which it asks
    `alembic heads` for; course answers the same from alembic's scripts in this process."""
    from nbgrader import api, dbutil
    with dbutil._temp_alembic_ini(f"sqlite:///{tmp_path / 'unused.db'}") as ini:
        heads = subprocess.run([str(Path(sys.executable).parent / "alembic"), "-c", ini, "heads"],
                               capture_output=True, text=True, check=True).stdout
    assert heads.split()[:2] == [course.gradebook_schema_revision(), "(head)"]

    def no_process(*args, **kwargs):
        raise AssertionError(f"a process started: {args}")
    monkeypatch.setattr(api.sp, "check_output", no_process)
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with api.Gradebook(url):
        pass
    with api.Gradebook(url) as gradebook:
        stamped = gradebook.db.execute(api.text("SELECT version_num FROM alembic_version"))
        assert [row[0] for row in stamped] == [course.gradebook_schema_revision()]


@pytest.mark.parametrize("lesson", course.lessons(REPO))
def test_each_solutions_notebook_is_exactly_what_its_source_builds(lesson, tmp_path):
    """solutions/<lesson>/<lesson>.py is the lesson's source; the notebook beside it is built
    from it (`make notebooks`), byte for byte."""
    shutil.copytree(REPO / "solutions", tmp_path / "solutions")   # a lesson may include another
    [built] = build.build_solutions(lesson, tmp_path)
    committed = REPO / "solutions" / lesson / built.name
    assert built.read_bytes() == committed.read_bytes(), (
        f"{committed} differs from its source {committed.with_suffix('.py').name}: edit the .py "
        "and run `make notebooks`, or, to keep edits made in the notebook, `tilegym-edu generate "
        f"--from-notebooks {lesson}`")


def test_a_lesson_source_is_never_released(tmp_path):
    shutil.copytree(REPO / "solutions" / "00_getting_started",
                    tmp_path / "solutions" / "00_getting_started")
    released = build.release("00_getting_started", tmp_path)
    assert sorted(p.name for p in released.iterdir()) == ["00_getting_started.ipynb"]


def test_learner_notebooks_are_exactly_what_nbgrader_generates(tmp_path):
    shutil.copytree(REPO / "solutions", tmp_path / "solutions")
    generated = build.generate(root=tmp_path)
    assert generated
    for path in generated:
        committed = REPO / "notebooks" / path.parent.name / path.name
        assert committed.exists(), f"{committed} is missing: run `make notebooks`"
        assert json.loads(committed.read_text()) == json.loads(path.read_text()), \
            f"{committed} is stale: run `make notebooks` and commit the result"
    committed = {p.relative_to(REPO / "notebooks") for p in (REPO / "notebooks").glob("*/*.ipynb")}
    assert committed == {p.relative_to(tmp_path / "notebooks") for p in generated}


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=lambda p: str(p.relative_to(REPO)))
def test_committed_notebooks_have_no_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert not [c for c in nb.cells if c.cell_type == "code" and (c.outputs or c.execution_count)]


@pytest.mark.parametrize("path", sorted(REPO.glob("notebooks/*/*.ipynb")),
                         ids=lambda p: str(p.relative_to(REPO)))
def test_learner_notebooks_hold_no_solutions_or_hidden_tests(path):
    text = path.read_text()
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "hidden_cases"):
        assert marker not in text


def test_nbgrader_config_points_at_the_course():
    from traitlets.config import Config
    config = Config()
    source = (REPO / "nbgrader_config.py").read_text()
    exec(compile(source, "nbgrader_config.py", "exec"),
         {"get_config": lambda: config, "__file__": str(REPO / "nbgrader_config.py")})
    assert config.CourseDirectory.source_directory == "solutions"
    assert config.CourseDirectory.root == str(REPO)
    assert ".grading" in config.CourseDirectory.db_url


@pytest.mark.parametrize("module", ["course", "build", "autograde", "grade_report"])
def test_the_grading_machinery_is_off_limits_to_learner_code(module):
    from tilegym_edu import audit
    names = audit.lesson_names(["import tilegym_edu"])
    assert audit.audit(f"import tilegym_edu\nx = tilegym_edu.{module}.anything", names)
    assert audit.audit(f"from tilegym_edu import {module}", names)


def test_grading_an_unknown_lesson_is_a_one_line_error(capsys):
    assert cli.main(["grade", "99_no_such_lesson"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no lesson '99_no_such_lesson'" in err


def test_grading_a_broken_notebook_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    shutil.copytree(REPO / "solutions", tmp_path / "solutions")
    learner = tmp_path / "notebooks" / "00_getting_started"
    learner.mkdir(parents=True)
    (learner / "00_getting_started.ipynb").write_text('{"cells": [ not json')
    monkeypatch.setenv("TILEGYM_COURSE_ROOT", str(tmp_path))
    assert cli.main(["grade", "00_getting_started"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not a valid notebook" in err


def test_grade_report_table_and_json():
    report = grade_report.GradeReport("00_getting_started", "learner", [
        grade_report.ExerciseResult("nb", "test_a", 4, 4, "passed"),
        grade_report.ExerciseResult("nb", "test_b", 0, 2, "needs GPU",
                                    "NeedsGPU: needs an NVIDIA GPU")],
        ["/x/feedback.html"])
    table = report.format_table()
    assert "test_a" in table and "needs GPU" in table and "total: 4/6" in table
    assert "feedback: /x/feedback.html" in table
    data = json.loads(grade_report.report_json(report))
    assert data["points"] == 4 and data["max_points"] == 6
    assert data["exercises"][1]["status"] == "needs GPU"


def test_the_table_shows_learner_strings_with_their_control_characters_escaped():
    """Round 14 of the red team: a grade_id with a carriage return and terminal escapes, quoted
    in a note, redrew the table as "total: 8/8" over a 0/2 grading."""
    forged = "\r\x1b[2A\x1b[Jtest_bytes 2/2 passed\ntotal: 8/8"
    report = grade_report.GradeReport("00_getting_started", "learner", [
        grade_report.ExerciseResult("nb", "test_bytes", 0, 2, "failed", "AssertionError: \x1b[8m")],
        [], notes=[f"cell `{forged}` is not part of the lesson"])
    table = report.format_table()
    assert "\x1b" not in table and "\r" not in table
    assert table.splitlines()[-1] == ("note: cell `\\r\\x1b[2A\\x1b[Jtest_bytes 2/2 passed\\n"
                                      "total: 8/8` is not part of the lesson")
    assert "total: 0/2" in table and "AssertionError: \\x1b[8m" in table


@pytest.mark.slow
def test_cli_grade_json_for_the_learner_notebook(course_copy, monkeypatch, capsys):
    monkeypatch.setenv("TILEGYM_COURSE_ROOT", str(course_copy))
    assert cli.main(["grade", "00_getting_started", "--json"]) == 1   # a blank notebook
    captured = capsys.readouterr()
    data = json.loads(captured.out)  # the progress bar went to stderr: stdout stays JSON
    assert "grading 00_getting_started [" in captured.err and "cells run" in captured.err
    assert data["lesson"] == "00_getting_started" and data["points"] == 0
    assert [e["exercise"] for e in data["exercises"]] == [
        "test_silu_mul_correct", "test_bytes", "test_silu_mul_bandwidth"]


def test_an_error_raised_outside_the_checks_gets_its_hint_in_the_grade_table():
    """A CUDA error surfaces wherever the next synchronisation happens, not always inside a
    check: the grade table's reason still says what it means, once."""
    evalue = "CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be ..."
    cell = {"outputs": [{"output_type": "error", "ename": "AcceleratorError", "evalue": evalue}]}
    ename, reason = grade_report._error_of(cell)
    assert ename == "AcceleratorError"
    assert reason.startswith(
        "AcceleratorError: CUDA error: an illegal memory access was encountered [")
    assert reason.count("outside its tensors") == 1
    wrapped = {"outputs": [{"output_type": "error", "ename": "AssertionError",
                            "evalue": "1 of 1 checks failed. First: ... raised RuntimeError: "
                                      "CUDA error: an illegal memory access was encountered "
                                      "[the kernel read or wrote outside its tensors "
                                      "(a load ...]"}]}
    assert grade_report._error_of(wrapped)[1].count("outside its tensors") == 1


@pytest.mark.slow
def test_one_exercise_is_graded_alone_with_what_it_needs(course_copy):
    solution = course_copy / "solutions" / "00_getting_started"
    report = autograde.grade("00_getting_started", solution, root=course_copy, student="exercise",
                             exercises=["test_bytes"])
    assert [(e.exercise, e.points, e.status) for e in report.exercises] == [
        ("test_bytes", 2, "passed")]
    assert report.max_points == 2 and any("only test_bytes was graded" in n for n in report.notes)
    ran = nbformat.read(course_copy / ".grading" / "autograded" / "exercise" / "00_getting_started"
                        / "00_getting_started.ipynb", as_version=4)
    graded = [c.metadata.nbgrader["grade_id"] for c in ran.cells
              if c.metadata.get("nbgrader", {}).get("grade")]
    assert graded == ["test_bytes"]          # nbgrader did not put the other tests back
    assert not any("demo" in c.metadata.get("tags", []) for c in ran.cells)


def test_an_unknown_exercise_is_a_one_line_error_listing_the_exercises(course_copy, monkeypatch,
                                                                        capsys):
    monkeypatch.setenv("TILEGYM_COURSE_ROOT", str(course_copy))
    assert cli.main(["grade", "00_getting_started", "--exercise", "test_nope"]) == 2
    err = capsys.readouterr().err
    assert "no exercise 'test_nope'" in err and "test_silu_mul_correct, test_bytes" in err


@pytest.mark.slow
def test_grading_shows_the_learner_nothing_to_act_on_but_the_grade(course_copy):
    """No SQLAlchemy session warnings from nbgrader's gradebook, no kernel transport warning,
    no nbgrader log lines: stderr holds the progress lines alone."""
    done = subprocess.run([sys.executable, "-m", "tilegym_edu.cli", "grade", "00_getting_started",
                           "--submission", str(course_copy / "solutions" / "00_getting_started"),
                           "--no-sandbox"],
                          env={**os.environ, "TILEGYM_COURSE_ROOT": str(course_copy)},
                          capture_output=True, text=True)
    assert done.returncode == 1, done.stderr        # the GPU cell needs a GPU
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines and all(line.startswith("grading 00_getting_started") for line in lines), lines
    assert "largest error" in done.stdout
    # what the kernel process itself prints (at start, at shutdown) is kept, not shown
    assert (course_copy / ".grading" / "autograded" / "learner" / "00_getting_started"
            / "kernel.log").exists()
