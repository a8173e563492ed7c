"""Lesson 06: what is particular to it, graded through nbgrader in interpreter mode (what
every lesson is checked for is tests/test_lessons.py)."""
import pytest

from tests.lesson_checks import by_exercise

LESSON = "06_capstone"

pytestmark = pytest.mark.slow


def test_failures_name_the_case(lesson_reports):
    reports = lesson_reports(LESSON)
    reason = by_exercise(reports["rmsnorm_without_eps"])["test_rmsnorm_correct"].reason
    assert "case (rows=" in reason and "zero_rows" in reason and "seed" in reason
    reason = by_exercise(reports["attention_without_causal_mask"])["test_swapped_model"].reason
    assert "case (batch=" in reason and "first bad element" in reason
