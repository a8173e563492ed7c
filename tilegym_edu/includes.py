"""Code a lesson source takes from elsewhere, so that every kernel is written once.

A code cell of a lesson source (``solutions/<lesson>/<lesson>.py``) may hold include lines,
which building the lesson's notebook (:func:`expand`) replaces by the code they name:

    # include: tilegym_edu/reference/matmul.py naive_matmul_kernel solution
    # include: tilegym_edu/reference/pipelined.py pipelined_matmul_kernel as matmul_kernel solution
    # include: 04_flash_attention flash_attention_solution

* ``FILE NAME``: the top-level function ``NAME`` of that file (a path from the folder that
  holds the ``tilegym_edu`` package, so it also works for an installed package), decorators
  included except ``@forbidden_in_graded_calls`` (which guards the course's own copy in graded
  calls; the learner's copy is the one being graded). ``as NEW`` renames it. ``solution``
  puts nbgrader's ``### BEGIN SOLUTION`` / ``### END SOLUTION`` around its body (after the
  docstring), so the learner's notebook keeps the signature and the docstring.
* ``LESSON GRADE_ID``: the whole cell ``GRADE_ID`` of another lesson's source, its own includes
  expanded (a later lesson bringing an earlier one's kernels).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # nbformat is imported where notebooks are expanded: code_lines runs without it
    from nbformat import NotebookNode

#: where FILE paths start: the folder holding the tilegym_edu package
PACKAGE_ROOT = Path(__file__).resolve().parent.parent
PREFIX = "# include: "
#: the decorator an included function loses (tilegym_edu.grading.forbidden_in_graded_calls)
GUARD = "@forbidden_in_graded_calls"
_LINE = re.compile(r"^# include: (\S+) (\w+)(?: as (\w+))?( solution)?$")


def has_includes(source: str) -> bool:
    return any(line.startswith(PREFIX) for line in source.split("\n"))


def expand(nb: NotebookNode, root: Path, _seen: tuple[str, ...] = ()) -> NotebookNode:
    """``nb`` with every include line of its code cells replaced by what it names; lessons
    are found in ``root``'s ``solutions/``, files from :data:`PACKAGE_ROOT`."""
    for cell in nb.cells:
        if cell.cell_type == "code" and has_includes(cell.source):
            cell.source = "\n".join(_expand_line(line, root, _seen)
                                    for line in cell.source.split("\n"))
    return nb


def _expand_line(line: str, root: Path, seen: tuple[str, ...]) -> str:
    if not line.startswith(PREFIX):
        return line
    match = _LINE.match(line)
    if not match:
        raise ValueError(f"cannot read {line!r}: `# include: FILE NAME [as NEW] [solution]` "
                         "or `# include: LESSON GRADE_ID`")
    where, name, new_name, solution = match.groups()
    if where.endswith(".py"):
        return function_source(PACKAGE_ROOT / where, name, new_name, bool(solution))
    if new_name or solution:
        raise ValueError(f"{line!r}: a lesson's cell is included whole, as it is")
    return lesson_cell(root, where, name, seen)


def lesson_cell(root: Path, lesson: str, grade_id: str, seen: tuple[str, ...] = ()) -> str:
    """The source of cell ``grade_id`` of ``lesson``'s source, its includes expanded."""
    key = f"{lesson} {grade_id}"
    if key in seen:
        raise ValueError(f"include loop: {' -> '.join((*seen, key))}")
    from tilegym_edu import percent   # nbformat: see the imports above

    source = root / "solutions" / lesson / f"{lesson}.py"
    nb = expand(percent.from_text(source.read_text()), root, (*seen, key))
    for cell in nb.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            return cell.source
    raise ValueError(f"{source} has no cell {grade_id}")


def function_source(path: Path, name: str, new_name: str | None = None,
                    solution: bool = False) -> str:
    """The top-level function ``name`` of the file at ``path`` as a lesson shows it (see the
    module doc)."""
    text = path.read_text()
    lines = text.split("\n")
    node = _top_level_function(path, text, name)
    start = min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1
    body = lines[start:node.end_lineno]
    decorators = [line for line in body[:node.lineno - 1 - start] if line.strip() != GUARD]
    code = body[node.lineno - 1 - start:]
    if new_name:
        code[0] = code[0].replace(f"def {name}(", f"def {new_name}(", 1)
    if solution:   # the markers go after the docstring, or before the first statement
        first = node.body[0]
        body_starts = (first.end_lineno if ast.get_docstring(node) is not None
                       else first.lineno - 1)
        after = body_starts - node.lineno + 1
        indent = " " * first.col_offset
        code = [*code[:after], f"{indent}### BEGIN SOLUTION", *code[after:],
                f"{indent}### END SOLUTION"]
    return "\n".join(decorators + code)


def code_lines(path: str, *names: str) -> int:
    """How many lines of code the named top-level functions of the file at ``path`` (from
    :data:`PACKAGE_ROOT`, as in an include line) hold, docstrings, comments and blank lines left
    out: the size of a kernel, as lesson 07 and benchmarks/cutile_compare.py compare them."""
    text = (PACKAGE_ROOT / path).read_text()
    lines = text.split("\n")
    count = 0
    for name in names:
        node = _top_level_function(PACKAGE_ROOT / path, text, name)
        doc = node.body[0] if ast.get_docstring(node) is not None else None
        for number in range(node.lineno, node.end_lineno + 1):
            if doc is not None and doc.lineno <= number <= doc.end_lineno:
                continue
            code = lines[number - 1].strip()
            count += bool(code) and not code.startswith("#")
    return count


def _top_level_function(path: Path, text: str, name: str) -> ast.FunctionDef:
    node = next((n for n in ast.parse(text).body
                 if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if node is None:
        raise ValueError(f"{path} has no top-level function {name}")
    return node
