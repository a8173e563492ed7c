"""Lesson 00: what is particular to it, graded through nbgrader in interpreter mode (what
every lesson is checked for, the failing case each wrong submission's reason names included, is
tests/test_lessons.py): its feedback pages, its figures, and the demonstrations grading skips."""
import html

import pytest

from tests.lesson_checks import by_exercise
from tilegym_edu.feedback import HIDDEN_NOTE

LESSON = "00_getting_started"

pytestmark = pytest.mark.slow


def test_feedback_shows_the_failing_case_but_no_hidden_test_code(lesson_reports):
    reports = lesson_reports(LESSON)
    for name in ("solution", "tail_not_covered"):
        [path] = reports[name].feedback
        page = html.unescape(open(path).read())
        assert "hidden_cases" not in page and "(5, 1, 613)" not in page and "12_345" not in page
        assert "BEGIN HIDDEN TESTS" not in page and HIDDEN_NOTE in page
    failing = html.unescape(open(reports["tail_not_covered"].feedback[0]).read())
    assert "case (shape=" in failing and "first bad element" in failing


def test_table_json_and_feedback_show_what_each_check_measured(lesson_reports):
    reports = lesson_reports(LESSON)
    report = reports["solution"]
    correct = by_exercise(report)["test_silu_mul_correct"]
    assert correct.figure.startswith("largest error") and "tolerance" in correct.figure
    [figure] = [f for f in correct.figures if f["kind"] == "error"][-1:]
    assert 0 <= figure["value"] <= figure["tolerance"] and figure["checks"] > 0
    assert "measured" in report.format_table() and correct.figure in report.format_table()
    assert report.to_dict()["exercises"][0]["figures"] == correct.figures
    assert correct.figure.split(" (")[0] in html.unescape(open(report.feedback[0]).read())
    assert by_exercise(report)["test_bytes"].figure == ""     # a byte count: nothing measured


def test_grading_skips_the_demonstrations(lesson_reports):
    reports = lesson_reports(LESSON)
    ran = " ".join(c.cell for c in reports["solution"].cells)
    assert "n_small" not in ran and "setup" in ran and "test_bytes" in ran
    assert reports["solution"].seconds > sum(c.seconds for c in reports["solution"].cells) > 0
