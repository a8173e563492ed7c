"""tilegym_edu.feedback: hidden regions out of the feedback, tracebacks of their cells cut to
the error line; other cells untouched."""
import nbformat

from tilegym_edu.feedback import HIDDEN_NOTE, HideHiddenTests


def grade_cell(source, outputs=()):
    cell = nbformat.v4.new_code_cell(source, outputs=list(outputs))
    cell.metadata = {"nbgrader": {"grade": True, "grade_id": "t", "points": 1, "solution": False,
                                  "locked": True, "schema_version": 3}}
    return cell


def test_hidden_region_becomes_one_comment_and_the_traceback_its_last_line():
    error = nbformat.v4.new_output("error", ename="AssertionError",
                                   evalue="case (n=7), seed 3: wrong",
                                   traceback=["----> 3 check(secret_cases)", "AssertionError: ..."])
    cell = grade_cell("check(cases)\n    ### BEGIN HIDDEN TESTS\n    secret_cases = [7]\n"
                      "    ### END HIDDEN TESTS\nprint('ok')", [error])
    nb = nbformat.v4.new_notebook(cells=[cell])
    nb, _ = HideHiddenTests().preprocess(nb, {})
    source = nb.cells[0].source
    assert source == f"check(cases)\n    {HIDDEN_NOTE}\nprint('ok')"
    assert nb.cells[0].outputs[0]["traceback"] == ["AssertionError: case (n=7), seed 3: wrong"]


def test_cells_without_hidden_tests_keep_their_traceback():
    error = nbformat.v4.new_output("error", ename="NameError", evalue="x", traceback=["a", "b"])
    nb = nbformat.v4.new_notebook(cells=[grade_cell("x", [error])])
    nb, _ = HideHiddenTests().preprocess(nb, {})
    assert nb.cells[0].source == "x" and nb.cells[0].outputs[0]["traceback"] == ["a", "b"]
