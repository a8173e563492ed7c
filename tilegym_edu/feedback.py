"""What the feedback HTML shows a learner: every cell as graded, but no hidden test code.

nbgrader's feedback is rendered from the autograded notebook, in which the hidden tests are back
in their cells (they had to run), and an IPython traceback quotes the lines around the failing
call. :class:`HideHiddenTests` replaces each hidden region with one comment and shortens the
errors of cells that hold one to their last line, which names the failing case (shape, dtype,
seed, error, first bad index) without the code that built it. An error raised by the hidden
region itself shows its type only: its message names the hidden case and often the answer
expected ("tiled_loaded_bytes(64, 32, 48, 32, 16, 4) = 0, the reference kernel loaded 36864"),
and one resubmission per hidden case gave a lookup table full marks (round 22 of the red team).
"""
from __future__ import annotations

import re

from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode

HIDDEN_NOTE = "# (hidden tests: not shown in the feedback)"
HIDDEN_FAILURE = ("a hidden test of this cell failed. Its message is not shown: it would name "
                  "the hidden case and what was expected. The visible tests passed, so try your "
                  "code on more cases than they do: other shapes and sizes, odd lengths, both "
                  "dtypes.")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: IPython's frame header for code run in a cell: "Cell In[6], line 14" (IPython 8 and later)
#: or "<ipython-input-6-...>" followed by the line's arrow (before 8)
_CELL_FRAME = re.compile(r"Cell In\[[^\]]*\], line (\d+)|<ipython-input-[^>]*>.*?-+> *(\d+)",
                         re.S)


def _hidden_lines(source: str, begin: str, end: str) -> set[int]:
    """Line numbers (from 1) of ``source`` inside its hidden regions, markers included."""
    lines, hidden = set(), False
    for number, line in enumerate(source.split("\n"), start=1):
        if begin in line:
            hidden = True
        if hidden:
            lines.add(number)
        if end in line:
            hidden = False
    return lines


def _raised_in_hidden_region(output, hidden: set[int]) -> bool:
    """Whether the error ``output`` of a cell came from the lines ``hidden``: its outermost
    frame in the cell is one of them. An error the grader wrote itself (a dead kernel, lesson
    data changed: a one-line traceback) did not; a traceback whose cell frame cannot be found
    counts as hidden, so a message is never shown by mistake."""
    traceback = [_ANSI.sub("", line) for line in output.get("traceback", [])]
    if traceback == [f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"]:
        return False
    for entry in traceback:
        match = _CELL_FRAME.search(entry)
        if match:
            return int(match.group(1) or match.group(2)) in hidden
    return True


class HideHiddenTests(NbGraderPreprocessor):
    """Feedback preprocessor: hidden test regions out, their cells' tracebacks cut to the error
    line."""

    begin = Unicode("BEGIN HIDDEN TESTS").tag(config=True)
    end = Unicode("END HIDDEN TESTS").tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code" or self.begin not in cell.source:
            return cell, resources
        hidden_lines = _hidden_lines(cell.source, self.begin, self.end)
        kept = []
        for number, line in enumerate(cell.source.split("\n"), start=1):
            if self.begin in line:
                kept.append(line[:len(line) - len(line.lstrip())] + HIDDEN_NOTE)
            elif number not in hidden_lines:
                kept.append(line)
        cell.source = "\n".join(kept)
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                if _raised_in_hidden_region(output, hidden_lines):
                    output["evalue"] = HIDDEN_FAILURE
                output["traceback"] = [
                    f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"]
        return cell, resources
