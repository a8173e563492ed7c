"""A notebook as a percent-format Python file (the jupytext convention), and back, exactly.

A lesson's source is ``solutions/<lesson>/<lesson>.py``: text that diffs, reviews and lints
like any code. ``tilegym-edu generate`` builds the lesson's nbgrader notebook from it
(:func:`from_text`); :func:`to_text` writes one from a notebook, and the two round-trip a
course notebook byte for byte (as ``nbformat.write`` writes it). The format:

    # %% [markdown] id="cell-00"
    # # Lesson 00
    # Prose, each line behind "# " ("#" alone for an empty line).

    # %% id="cell-02" nbgrader={"grade": false, "grade_id": "setup", ...} tags=["demo"]
    import tilegym_edu

Each cell starts with a ``# %%`` line: ``[markdown]`` for prose, then ``key=JSON`` pairs for
the cell's id and each of its metadata entries (nbgrader's among them). One empty line
separates a cell from the next marker. The file starts with the notebook's own metadata:

    # tilegym-notebook: {"metadata": {...}, "nbformat": 4, "nbformat_minor": 5}

Cells hold no outputs (course notebooks are committed without them).
"""
from __future__ import annotations

import json
import re

import nbformat
from nbformat import NotebookNode

HEADER = "# tilegym-notebook: "
MARKER = "# %%"
_PAIR = re.compile(r'\s*([A-Za-z_][\w.]*)=')


def _json(value) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))


def to_text(nb: NotebookNode) -> str:
    """The percent-format text of ``nb``; refuses what it cannot carry (outputs, raw cells)."""
    head = {"metadata": nb.metadata, "nbformat": nb.nbformat, "nbformat_minor": nb.nbformat_minor}
    parts = [HEADER + _json(head) + "\n"]
    for cell in nb.cells:
        if cell.cell_type not in ("code", "markdown"):
            raise ValueError(f"cell {cell.get('id')}: a {cell.cell_type} cell has no percent form")
        if cell.get("outputs") or cell.get("execution_count"):
            raise ValueError(f"cell {cell.get('id')} has outputs: clear them first")
        marker = MARKER + (" [markdown]" if cell.cell_type == "markdown" else "")
        marker += f" id={_json(cell.id)}"
        marker += "".join(f" {key}={_json(value)}" for key, value in cell.metadata.items())
        source = cell.source
        if cell.cell_type == "markdown":
            source = "\n".join("#" if not line else f"# {line}" for line in source.split("\n"))
        if any(line.startswith(MARKER) for line in source.split("\n")):
            raise ValueError(f"cell {cell.id}: a line starts with {MARKER!r}")
        parts.append(f"\n{marker}\n{source}\n")
    return "".join(parts)


def _marker_fields(line: str) -> tuple[str, dict]:
    """(cell type, {key: value}) of one ``# %%`` line."""
    rest = line[len(MARKER):]
    cell_type = "code"
    if rest.startswith(" [markdown]"):
        cell_type, rest = "markdown", rest[len(" [markdown]"):]
    fields, decoder = {}, json.JSONDecoder()
    while rest.strip():
        match = _PAIR.match(rest)
        if not match:
            raise ValueError(f"cannot read the cell marker {line!r} at {rest!r}")
        value, end = decoder.raw_decode(rest, match.end())
        fields[match.group(1)] = value
        rest = rest[end:]
    return cell_type, fields


def from_text(text: str) -> NotebookNode:
    """The notebook that :func:`to_text` wrote as ``text``."""
    if not text.startswith(HEADER):
        raise ValueError(f"a lesson source starts with {HEADER.strip()!r}")
    header, _, body = text.partition("\n")
    head = json.loads(header[len(HEADER):])
    nb = nbformat.v4.new_notebook(metadata=head["metadata"])
    nb.nbformat, nb.nbformat_minor = head["nbformat"], head["nbformat_minor"]
    chunks = body.split(f"\n{MARKER}")
    if chunks[0] != "":
        raise ValueError("text between the header and the first cell marker")
    for chunk in chunks[1:]:
        line, _, source = chunk.partition("\n")
        if not source.endswith("\n"):
            raise ValueError(f"cell {line!r} does not end with a line break")
        source = source[:-1]
        cell_type, fields = _marker_fields(MARKER + line)
        cell_id = fields.pop("id")
        if cell_type == "markdown":
            source = "\n".join(line[2:] if line.startswith("# ") else line[1:]
                               for line in source.split("\n"))
            cell = nbformat.v4.new_markdown_cell(source, metadata=fields)
        else:
            cell = nbformat.v4.new_code_cell(source, metadata=fields)
        cell.id = cell_id
        nb.cells.append(cell)
    return nb
