"""tilegym_edu.percent: lessons as percent-format text, round-tripped exactly."""
import nbformat
import pytest

from tests.conftest import REPO
from tilegym_edu import percent


def _notebook():
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "language": "python",
                                                           "display_name": "Python 3"}})
    prose = nbformat.v4.new_markdown_cell(
        "# Title\n\nA line with `code`.\n  indented\n#not a heading")
    code = nbformat.v4.new_code_cell("x = 1\n\n\ndef f():\n    return x  # a comment\n",
                                     metadata={"nbgrader": {"grade": False,
                                                            "grade_id": "f_solution",
                                                            "solution": True}, "tags": ["demo"]})
    empty = nbformat.v4.new_code_cell("")
    for n, cell in enumerate((prose, code, empty)):
        cell.id = f"cell-{n:02d}"
    nb.cells = [prose, code, empty]
    return nb


def test_a_notebook_round_trips_byte_for_byte():
    nb = _notebook()
    text = percent.to_text(nb)
    assert nbformat.writes(percent.from_text(text)) == nbformat.writes(nb)
    assert '# %% [markdown] id="cell-00"\n# # Title\n#\n# A line with `code`.\n' in text
    assert '# %% id="cell-01" nbgrader={"grade": false, "grade_id": "f_solution", ' \
           '"solution": true} tags=["demo"]\nx = 1\n' in text


@pytest.mark.parametrize("breaks, why", [
    (lambda nb: nb.cells.append(nbformat.v4.new_raw_cell("raw")), "raw cell"),
    (lambda nb: nb.cells[1].outputs.append(nbformat.v4.new_output("stream", text="x")), "outputs"),
    (lambda nb: setattr(nb.cells[1], "source", "a = 1\n# %% not a cell"), "starts with"),
])
def test_what_the_text_cannot_carry_is_refused(breaks, why):
    nb = _notebook()
    breaks(nb)
    with pytest.raises(ValueError, match=why):
        percent.to_text(nb)


def test_a_broken_source_says_what_is_wrong():
    with pytest.raises(ValueError, match="starts with '# tilegym-notebook:'"):
        percent.from_text("# %%\nx = 1\n")
    text = percent.to_text(_notebook())
    with pytest.raises(ValueError, match="cannot read the cell marker"):
        percent.from_text(text.replace('id="cell-02"', 'id="cell-02" oops'))


def test_every_line_of_prose_in_the_lesson_sources_fits_in_100_characters():
    """ruff checks the code of each lesson in its built solution notebook; the prose it cannot
    see is held to the same width here. Cell markers (which carry nbgrader's metadata on one
    line) and the notebook header are the exceptions."""
    long_lines = []
    for source in sorted(REPO.glob("solutions/*/*.py")):
        prose = False
        for number, line in enumerate(source.read_text().split("\n"), 1):
            if line.startswith((percent.MARKER, percent.HEADER)):
                prose = line.startswith(percent.MARKER + " [markdown]")
            elif prose and len(line) > 100:
                long_lines.append(f"{source.name}:{number}: {len(line)} characters")
    assert not long_lines, "re-wrap these lines of prose:\n" + "\n".join(long_lines)
