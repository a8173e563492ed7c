"""Adversarial submissions, run against the lessons' own test cells without nbgrader.

A lesson's solution notebook is executed once per test session (setup, solution and helper
cells, which nbgrader marks; the graded test cells are left out): that namespace is what a
test cell sees when a learner's notebook is graded. An adversary replaces one of the learner's
functions there with a wrong or cheating version and runs one test cell: the cell must fail
with a message that says what went wrong.

Most adversaries start from the right answer and break it (all zeros, a NaN in the middle, the
answer cached from the first call ...). The right answers come from :class:`Memo`: the honest
function runs once per distinct input (the interpreter is slow) and is looked up after that.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import linecache
import math
from dataclasses import dataclass
from typing import Any, Callable

import nbformat
import torch

from tests.conftest import REPO

#: block size an unmasked kernel would tile by: outputs are right only below its multiples
BLOCK = 16


def _run_cell(source: str, name: str, namespace: dict, stdout: io.StringIO | None = None) -> None:
    """exec a cell the way IPython does, its source registered with linecache so that
    inspect.getsource works on what it defines (Triton and the tuner need it); what it prints
    goes to ``stdout`` (default: nowhere)."""
    filename = f"<{name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    with contextlib.redirect_stdout(stdout if stdout is not None else io.StringIO()):
        exec(compile(source, filename, "exec"), namespace)


def _cells(lesson: str) -> list[nbformat.NotebookNode]:
    notebook = nbformat.read(REPO / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    return [c for c in notebook.cells if c.cell_type == "code"]


@functools.cache
def lesson_namespace(lesson: str) -> dict:
    """The names a test cell of ``lesson`` sees: every nbgrader-marked cell that is not a
    graded test (setup, solutions, helpers), run in order. Cached for the session."""
    namespace: dict = {"__name__": f"lesson_{lesson[:2]}"}
    for cell in _cells(lesson):
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade_id") and not meta.get("grade"):
            _run_cell(cell.source, f"{lesson}:{meta['grade_id']}", namespace)
    return namespace


def test_cell_source(lesson: str, grade_id: str) -> str:
    [cell] = [c for c in _cells(lesson)
              if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    return cell.source


def run_test_cell(lesson: str, grade_id: str, replacements: dict[str, Callable]) -> None:
    """Run test cell ``grade_id`` of ``lesson`` with some of the learner's functions replaced:
    in the lesson's namespace itself while the cell runs, so that the helpers that call them
    (defined there) call the replacements too; the cell runs in a copy of it."""
    namespace = lesson_namespace(lesson)
    saved = {name: namespace[name] for name in replacements if name in namespace}
    namespace.update(replacements)
    try:
        _run_cell(test_cell_source(lesson, grade_id), f"{lesson}:{grade_id}", dict(namespace))
    finally:
        for name in replacements:
            namespace.pop(name, None)
        namespace.update(saved)


def _fingerprint(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        data = value.detach().cpu().reshape(-1).contiguous()
        digest = (hashlib.sha1(data.view(torch.uint8).numpy().tobytes()).hexdigest()
                  if data.numel() else "")
        return ("tensor", tuple(value.shape), value.stride(), str(value.dtype), digest)
    if isinstance(value, (list, tuple)):
        return tuple(_fingerprint(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _fingerprint(v)) for k, v in value.items()))
    return repr(value)


class Memo:
    """The honest function, run once per distinct input (by content) and remembered; each
    call returns a fresh copy of the answer, so an adversary may break it in place."""

    def __init__(self, fn: Callable[..., Any]):
        self.fn, self.answers = fn, {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key = _fingerprint((args, kwargs))
        if key not in self.answers:
            try:
                self.answers[key] = ("value", self.fn(*args, **kwargs))
            except Exception as error:  # the honest function refuses this input: so do we
                self.answers[key] = ("error", error)
        kind, answer = self.answers[key]
        if kind == "error":
            raise answer
        return answer.clone() if isinstance(answer, torch.Tensor) else answer


@functools.cache
def memo(lesson: str, name: str) -> Memo:
    return Memo(lesson_namespace(lesson)[name])


def _first_tensor(args: tuple) -> torch.Tensor:
    return next(a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point())


def _poke(out: torch.Tensor, value: float) -> torch.Tensor:
    """``out`` with one element in the middle set to ``value`` (NaN, inf): a kernel that
    leaves part of its output unwritten or overflows somewhere."""
    out = out.contiguous()
    if out.numel():
        out.view(-1)[out.numel() // 2] = value
    return out


def _right_on_block_multiples_only(out: torch.Tensor) -> torch.Tensor:
    """Zeros past the last full BLOCK along every axis whose size is not a multiple of it:
    what an unmasked kernel that skips the ragged edge returns."""
    out = out.contiguous()
    for axis, size in enumerate(out.shape):
        if size % BLOCK:
            full = size // BLOCK * BLOCK
            out.narrow(axis, full, size - full).zero_()
    return out


def _right_for_square_only(out: torch.Tensor) -> torch.Tensor:
    """Right when the output's last two axes are equal (a kernel that mixed up M and N
    gets away with square inputs only), zeros otherwise."""
    if out.dim() >= 2 and out.shape[-1] != out.shape[-2]:
        return torch.zeros_like(out)
    return out


class _Caching:
    """Computes the first answer honestly and returns it again for every later call."""

    def __init__(self, honest: Callable[..., Any]):
        self.honest, self.first = honest, None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.first is None:
            self.first = self.honest(*args, **kwargs)
        return self.first.clone()


def _modifies_input(honest: Callable[..., Any]) -> Callable[..., Any]:
    def cheat(*args: Any, **kwargs: Any) -> Any:
        out = honest(*args, **kwargs)
        _first_tensor(args).zero_()  # e.g. a kernel that reuses an input as scratch space
        return out
    return cheat


@dataclass(frozen=True)
class Adversary:
    """One way to be wrong: ``make(honest)`` returns the wrong function; the test cell must
    fail with a message matching ``expect`` (a regular expression)."""

    name: str
    make: Callable[[Callable[..., Any]], Callable[..., Any]]
    expect: str


TOLERANCE = r"error above the tolerance"

#: the adversaries every function-returning-a-tensor exercise faces
GENERIC = [
    Adversary("all_zeros", lambda f: lambda *a, **k: torch.zeros_like(f(*a, **k)), TOLERANCE),
    Adversary("nan_in_part", lambda f: lambda *a, **k: _poke(f(*a, **k), math.nan), r"NaN or inf"),
    Adversary("inf_in_part", lambda f: lambda *a, **k: _poke(f(*a, **k), math.inf), r"NaN or inf"),
    Adversary("unwritten_output", lambda f: lambda *a, **k: torch.empty_like(f(*a, **k)),
              r"NaN: an element the kernel never wrote"),
    Adversary("empty_tensor", lambda f: lambda *a, **k: f(*a, **k).new_empty(0),
              r"returned shape \(0,\)"),
    Adversary("wrong_dtype", lambda f: lambda *a, **k: f(*a, **k).to(torch.float64),
              r"returned dtype float64"),
    Adversary("wrong_shape", lambda f: lambda *a, **k: f(*a, **k).unsqueeze(0),
              r"returned shape \(1, "),
    Adversary("modifies_input", _modifies_input, r"modified its input"),
    Adversary("caches_first_answer", _Caching, rf"{TOLERANCE}|returned shape"),
    Adversary("block_multiples_only",
              lambda f: lambda *a, **k: _right_on_block_multiples_only(f(*a, **k)), TOLERANCE),
    Adversary("square_only", lambda f: lambda *a, **k: _right_for_square_only(f(*a, **k)),
              TOLERANCE),
]

#: a library shortcut is refused by the guard, whatever the exercise
SHORTCUT = r"LibraryShortcut: the graded call used torch operation"
REFERENCE = r"LibraryShortcut: the graded call used the course's reference"
