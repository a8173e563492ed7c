"""Lesson 02: what is particular to it, graded through nbgrader in interpreter mode (what
every lesson is checked for is tests/test_lessons.py)."""
import pytest

from tests.lesson_checks import by_exercise

LESSON = "02_tiled_matmul"

pytestmark = pytest.mark.slow


def test_failure_names_the_case(lesson_reports):
    reports = lesson_reports(LESSON)
    reason = by_exercise(reports["fp16_accumulator"])["test_tiled_matmul_correct"].reason
    assert "case (M=32, N=32, K=2048" in reason and "seed" in reason and "tolerance 0.0005" in reason
