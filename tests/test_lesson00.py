"""Lesson 00 graded through nbgrader in interpreter mode: the solution earns every point that
does not need a GPU, the blank learner notebook earns none, and each known-wrong submission loses
exactly the points it should, with a reason that says why."""
import pytest

from tests.lesson_checks import (assert_full_marks_but_gpu, assert_loses_exactly, by_exercise,
                                 grade_blank, grade_submissions)
from tests.submissions.lesson00 import SUBMISSIONS

LESSON = "00_getting_started"
POINTS = {"test_silu_mul_correct": 4, "test_bytes": 2, "test_silu_mul_bandwidth": 2}
GPU_ONLY = {"test_silu_mul_bandwidth"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def reports(course_copy, tmp_path_factory):
    return grade_submissions(LESSON, course_copy, tmp_path_factory, SUBMISSIONS)


def test_solution_earns_every_point_but_the_gpu_ones(reports):
    assert_full_marks_but_gpu(reports["solution"], POINTS, GPU_ONLY)


@pytest.mark.parametrize("submission", SUBMISSIONS, ids=lambda s: s.name)
def test_wrong_submission_loses_exactly_its_points(reports, submission):
    assert_loses_exactly(reports["solution"], reports[submission.name], submission)


def test_blank_learner_notebook_scores_zero_on_every_cell(course_copy):
    report = grade_blank(LESSON, course_copy)
    assert {e.status for e in report.exercises} == {"failed", "needs GPU"}


def test_failure_names_the_case(reports):
    reason = by_exercise(reports["tail_not_covered"])["test_silu_mul_correct"].reason
    assert "case (shape=" in reason and "seed" in reason and "first bad element" in reason


def test_feedback_shows_the_failing_case_but_no_hidden_test_code(reports):
    import html
    from tilegym_edu.feedback import HIDDEN_NOTE
    for name in ("solution", "tail_not_covered"):
        [path] = reports[name].feedback
        page = html.unescape(open(path).read())
        assert "hidden_cases" not in page and "(5, 1, 613)" not in page and "12_345" not in page
        assert "BEGIN HIDDEN TESTS" not in page and HIDDEN_NOTE in page
    failing = html.unescape(open(reports["tail_not_covered"].feedback[0]).read())
    assert "case (shape=" in failing and "first bad element" in failing


def test_table_json_and_feedback_show_what_each_check_measured(reports):
    import html
    report = reports["solution"]
    correct = by_exercise(report)["test_silu_mul_correct"]
    assert correct.figure.startswith("largest error") and "tolerance" in correct.figure
    [figure] = [f for f in correct.figures if f["kind"] == "error"][-1:]
    assert 0 <= figure["value"] <= figure["tolerance"] and figure["checks"] > 0
    assert "measured" in report.format_table() and correct.figure in report.format_table()
    assert report.to_dict()["exercises"][0]["figures"] == correct.figures
    assert correct.figure.split(" (")[0] in html.unescape(open(report.feedback[0]).read())
    assert by_exercise(report)["test_bytes"].figure == ""     # a byte count: nothing measured


def test_grading_skips_the_demonstrations(reports):
    ran = " ".join(c.cell for c in reports["solution"].cells)
    assert "n_small" not in ran and "setup" in ran and "test_bytes" in ran
    assert reports["solution"].seconds > sum(c.seconds for c in reports["solution"].cells) > 0
