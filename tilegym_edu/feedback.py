"""What the feedback HTML shows a learner: every cell as graded, but no hidden test code.

nbgrader's feedback is rendered from the autograded notebook, in which the hidden tests are back
in their cells (they had to run), and an IPython traceback quotes the lines around the failing
call. :class:`HideHiddenTests` replaces each hidden region with one comment and shortens the
errors of cells that hold one to their last line, which names the failing case (shape, dtype,
seed, error, first bad index) without the code that built it.
"""
from __future__ import annotations

from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode

HIDDEN_NOTE = "# (hidden tests: not shown in the feedback)"


class HideHiddenTests(NbGraderPreprocessor):
    """Feedback preprocessor: hidden test regions out, their cells' tracebacks cut to the error
    line."""

    begin = Unicode("BEGIN HIDDEN TESTS").tag(config=True)
    end = Unicode("END HIDDEN TESTS").tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code" or self.begin not in cell.source:
            return cell, resources
        kept, hidden = [], False
        for line in cell.source.split("\n"):
            if self.begin in line:
                hidden = True
                indent = line[:len(line) - len(line.lstrip())]
                kept.append(indent + HIDDEN_NOTE)
            elif self.end in line:
                hidden = False
            elif not hidden:
                kept.append(line)
        cell.source = "\n".join(kept)
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                output["traceback"] = [
                    f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"]
        return cell, resources
