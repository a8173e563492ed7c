"""tilegym_edu.feedback: hidden regions out of the feedback, tracebacks of their cells cut to
the error line, the message of an error the hidden region raised left out; other cells
untouched."""
import nbformat
import pytest

from tilegym_edu.feedback import HIDDEN_FAILURE, HIDDEN_NOTE, HideHiddenTests

HIDDEN_CELL = ("check(cases)\n### BEGIN HIDDEN TESTS\nsecret_cases = [7]\ncheck(secret_cases)\n"
               "### END HIDDEN TESTS\nprint('ok')")


def ipython_error(line, evalue="case (n=7), seed 3: expected 36864"):
    """An error output as IPython 8 writes it (colours included), raised at ``line`` of the
    cell, through a learner's function in another cell."""
    return nbformat.v4.new_output("error", ename="AssertionError", evalue=evalue, traceback=[
        "\x1b[31m-----------\x1b[39m",
        "\x1b[31mAssertionError\x1b[39m       Traceback (most recent call last)",
        f"\x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[6]\x1b[39m\x1b[32m, line {line}"
        f"\x1b[39m\n\x1b[32m----> {line}\x1b[39m check(...)",
        "\x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[4]\x1b[39m\x1b[32m, line 3\x1b[39m",
        f"\x1b[31mAssertionError\x1b[39m: {evalue}"])


def grade_cell(source, outputs=()):
    cell = nbformat.v4.new_code_cell(source, outputs=list(outputs))
    cell.metadata = {"nbgrader": {"grade": True, "grade_id": "t", "points": 1, "solution": False,
                                  "locked": True, "schema_version": 3}}
    return cell


def feedback_of(cell):
    nb, _ = HideHiddenTests().preprocess(nbformat.v4.new_notebook(cells=[cell]), {})
    return nb.cells[0]


def test_hidden_region_becomes_one_comment_and_a_visible_error_its_last_line():
    cell = feedback_of(grade_cell(HIDDEN_CELL, [ipython_error(1)]))
    assert cell.source == f"check(cases)\n{HIDDEN_NOTE}\nprint('ok')"
    assert cell.outputs[0]["traceback"] == ["AssertionError: case (n=7), seed 3: expected 36864"]


@pytest.mark.parametrize("line", [3, 4])
def test_an_error_the_hidden_region_raised_keeps_its_type_but_not_its_message(line):
    """Round 22 of the red team read each hidden case and its expected value out of the
    feedback, one resubmission each, and a lookup table earned full marks."""
    cell = feedback_of(grade_cell(HIDDEN_CELL, [ipython_error(line)]))
    assert cell.outputs[0]["traceback"] == [f"AssertionError: {HIDDEN_FAILURE}"]
    assert "36864" not in str(cell)


def test_a_grader_written_error_keeps_its_message_and_an_unreadable_traceback_loses_it():
    grader = nbformat.v4.new_output("error", ename="LessonDataChanged", evalue="`x` changed",
                                    traceback=["LessonDataChanged: `x` changed"])
    assert feedback_of(grade_cell(HIDDEN_CELL, [grader])).outputs[0]["traceback"] == [
        "LessonDataChanged: `x` changed"]
    unreadable = nbformat.v4.new_output("error", ename="AssertionError", evalue="n=7",
                                        traceback=["somewhere", "AssertionError: n=7"])
    assert feedback_of(grade_cell(HIDDEN_CELL, [unreadable])).outputs[0]["traceback"] == [
        f"AssertionError: {HIDDEN_FAILURE}"]


def test_cells_without_hidden_tests_keep_their_traceback():
    error = nbformat.v4.new_output("error", ename="NameError", evalue="x", traceback=["a", "b"])
    nb = nbformat.v4.new_notebook(cells=[grade_cell("x", [error])])
    nb, _ = HideHiddenTests().preprocess(nb, {})
    assert nb.cells[0].source == "x" and nb.cells[0].outputs[0]["traceback"] == ["a", "b"]
