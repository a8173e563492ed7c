"""Rough edges a new user met: `make lab` as root, the printed URL opening lesson 00, `make
grade`'s exit status and EXERCISE, and `nbgrader export` writing where git does not look."""
import os
import sys
import re
import shutil
import socket
import subprocess
import time

import pytest

from tests.conftest import REPO
from tilegym_edu import autograde, cli, grade_report

LESSON00 = "--LabApp.default_url=/lab/tree/00_getting_started/00_getting_started.ipynb"


@pytest.mark.parametrize("instructor", [False, True])
def test_lab_allows_root_only_as_root(monkeypatch, instructor):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert "--allow-root" in cli.lab_command(REPO, [], instructor=instructor)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "--allow-root" not in cli.lab_command(REPO, [], instructor=instructor)


def test_lab_says_why_it_allows_root(monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    started = []
    monkeypatch.setattr(cli.os, "execve", lambda path, command, env: started.append(command))
    cli.main(["lab", "--instructor"])
    assert "--allow-root" in started[0] and started[0][0] == sys.executable
    assert "running as root (common in containers)" in capsys.readouterr().out.lower()


def test_learner_url_opens_lesson_00_and_instructor_url_the_root():
    learner = cli.lab_command(REPO, ["--no-browser"])
    assert LESSON00 in learner and learner[-1] == "--no-browser"
    assert not [a for a in learner if a.endswith(".ipynb") and not a.startswith("--")]
    assert not any("default_url" in a for a in cli.lab_command(REPO, [], instructor=True))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_url_jupyter_prints_opens_lesson_00():
    """Starts the learner's JupyterLab for real (about 2 s) and reads the URL it prints."""
    pytest.importorskip("jupyterlab", reason="jupyter lab is not installed")
    port = free_port()
    command = cli.lab_command(REPO, [f"--ServerApp.port={port}", "--no-browser"])
    proc = subprocess.Popen(command, env=cli.lab_environment(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline, lines = time.monotonic() + 30, []
        while time.monotonic() < deadline and not any("?token=" in line for line in lines):
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
    finally:
        proc.terminate()
        proc.wait(10)
    urls = [line for line in lines if "?token=" in line]
    assert urls, "JupyterLab printed no URL; its output:\n" + "".join(lines)[-3000:]
    assert f"http://127.0.0.1:{port}/lab/tree/00_getting_started/00_getting_started.ipynb?token=" \
        in urls[0]


def test_grade_passes_its_exercises_to_course_grade(monkeypatch, capsys):
    calls = []

    def fake_grade(lesson, folder, **options):
        calls.append((lesson, folder, options))
        return grade_report.GradeReport(lesson, "learner", [
            grade_report.ExerciseResult("nb", "test_softmax_correct", 0, 4, "failed", "wrong")], [])

    monkeypatch.setattr(autograde, "grade", fake_grade)
    exercise = ["--exercise", "test_softmax_correct"]
    assert cli.main(["grade", "04_flash_attention", *exercise]) == 1
    assert calls[-1] == ("04_flash_attention", None,
                         {"exercises": ["test_softmax_correct"], "sandboxed": False})
    assert cli.main(["grade", "04_flash_attention", *exercise, "--exercise", "test_flash_causal"])
    assert calls[-1][2]["exercises"] == ["test_softmax_correct", "test_flash_causal"]
    assert cli.main(["grade", "04_flash_attention"]) == 1
    assert calls[-1][2]["exercises"] == ()
    assert "test_softmax_correct" in capsys.readouterr().out


def make_grade(tmp_path, status: int, *variables: str) -> tuple[int, str]:
    """`make grade` with BIN= a folder whose fake tilegym-edu records its arguments and exits
    ``status``; a .installed stamp newer than pyproject.toml keeps make from building a venv."""
    fake = tmp_path / "tilegym-edu"
    fake.write_text(f'#!/bin/sh\necho "$@" > "{tmp_path}/args"\nexit {status}\n')
    fake.chmod(0o755)
    stamp = tmp_path / ".installed"
    stamp.touch()
    newer = (REPO / "pyproject.toml").stat().st_mtime + 60
    os.utime(stamp, (newer, newer))
    result = subprocess.run(["make", "-s", "grade", f"BIN={tmp_path}", *variables], cwd=REPO,
                            capture_output=True, text=True, timeout=60, check=False)
    return result.returncode, (tmp_path / "args").read_text().strip()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_grade_succeeds_when_points_are_lost_and_fails_on_usage_errors(tmp_path):
    assert make_grade(tmp_path, 0) == (0, "grade 00_getting_started")
    assert make_grade(tmp_path, 1, "LESSON=04_flash_attention")[0] == 0
    status, args = make_grade(tmp_path, 2, "LESSON=99_no_such_lesson")
    assert status != 0 and args == "grade 99_no_such_lesson"
    assert make_grade(tmp_path, 1, "LESSON=04_flash_attention",
                      "EXERCISE=test_softmax_correct") == (
        0, "grade 04_flash_attention --exercise test_softmax_correct")


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(),
                    reason="needs git and the course's git checkout")
def test_grade_exports_stay_out_of_git():
    for path in ("grades.csv", ".grading/grades.csv", "00_getting_started-grades.csv"):
        ignored = subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO, check=False)
        assert ignored.returncode == 0, f"git would see {path}"


def test_documented_nbgrader_export_writes_into_dot_grading():
    commands = [line for doc in ("README.md", "grader/README.md")
                for line in (REPO / doc).read_text().splitlines()
                if re.match(r"\s*(\$ )?nbgrader export", line)]
    assert commands, "the instructor docs show how to export the grades"
    assert all("--to .grading/" in line for line in commands), commands


def test_grade_profile_prints_the_slowest_cells(monkeypatch, capsys):
    report = grade_report.GradeReport("04_flash_attention", "learner", [
        grade_report.ExerciseResult("nb", "test_softmax_correct", 4, 4, "passed",
                                    figure="largest error 1e-4")],
        [], [], [grade_report.CellTime("nb", "setup", 4.0),
                 grade_report.CellTime("nb", "test_softmax_correct", 9.5),
                 grade_report.CellTime("nb", "cell 3: x = 1", 0.1)], 21.0)
    monkeypatch.setattr(autograde, "grade", lambda *a, **k: report)
    assert cli.main(["grade", "04_flash_attention", "--profile"]) == 0
    out = capsys.readouterr().out
    assert "largest error 1e-4" in out and "(21 s)" in out
    assert "where the 21.0 s went (13.6 s running cells" in out
    slowest = out[out.index("slowest cells:"):].splitlines()[1:]
    assert "test_softmax_correct" in slowest[0] and "setup" in slowest[1]


def test_an_nbgrader_failure_names_its_cause_and_what_to_do():
    """nbgrader's own error is a traceback of its wrapper exception; the cause is in its log."""
    from tilegym_edu.course import CourseError, require_success
    log = ("[INFO] Converting notebook solutions/04/04.ipynb\n"
           "[ERROR] Traceback (most recent call last):\n"
           "        raise RuntimeError(\n"
           "    RuntimeError: Cannot add or remove cells for notebook '04' because there are "
           "submissions associated with it\n"
           "nbgrader.converters.base.NbGraderException: Please see the above traceback\n")
    with pytest.raises(CourseError) as raised:
        require_success({"success": False, "error": "Traceback ... NbGraderException", "log": log},
                        "generate_assignment")
    message = str(raised.value)
    assert "Cannot add or remove cells for notebook '04'" in message
    assert "NbGraderException" not in message and "move .grading/ away" in message
