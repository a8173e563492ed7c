"""Lesson 05: what is particular to it, graded through nbgrader in interpreter mode (what
every lesson is checked for is tests/test_lessons.py)."""
import pytest

from tests.lesson_checks import by_exercise

LESSON = "05_convolution"

pytestmark = pytest.mark.slow


def test_failures_name_the_case(lesson_reports):
    reports = lesson_reports(LESSON)
    reason = by_exercise(reports["stride_on_wrong_axis"])["test_conv2d_strided"].reason
    assert "case (N=" in reason and "stride=(2, 1)" in reason and "seed" in reason
    assert "first bad element" in reason
    reason = by_exercise(reports["im2col_ignores_dilation"])["test_im2col_index"].reason
    assert "dilation 2" in reason and "A[" in reason and "im2col_source returned" in reason
    reason = by_exercise(reports["padding_ignored"])["test_never_materialises"].reason
    assert "N1 C16 8x8 K16 3x3" in reason and "the counted run's output is wrong" in reason

