"""What a lesson's own cells define and its tests read stays as the lesson made it, or the test
fails.

A test cell reads values the lesson's cells made: a tolerance table, a list of shapes, a model.
The audit refuses changing them by name (``MODEL_TOLERANCE[k] = v``), but not through every
alias: round 18 of the red team wrote ``tolerance = MODEL_TOLERANCE; tolerance |= {...}`` and
earned lesson 06's model cells with a model that computed nothing. So the grading kernel keeps
a copy of each such value as the lesson's cell left it, and each test cell ends by comparing:

* right after each top-level statement of the lesson's own cells that binds such a value,
  :meth:`Kept.keep` takes a copy (:func:`instrumented`): before the rest of the cell, which may
  call the learner's functions, runs;
* each test cell ends with :meth:`Kept.check`, which fails the cell, naming the values, if any
  protected value differs from its copy; so do the grading functions (:func:`check_now`) as they
  finish, before learner code that runs at the end of the cell (a plotting callback, round 19)
  could put a changed value back.

Which names are protected (:func:`protected_names`): those the lesson's own cells bind and the
test cells, or the functions the lesson's cells define, read; less those a test cell binds
itself. The grading executor (:mod:`tilegym_edu.executor`) adds both as the cells run.
"""
from __future__ import annotations

import ast
import copy
import dataclasses
import math
from typing import Any, Iterable, Mapping, MutableMapping

#: how deep the comparison follows containers and objects
_DEPTH = 12


class LessonDataChanged(AssertionError):
    """Learner code changed a value the lesson defined and a test reads."""


def protected_names(lesson_sources: Iterable[str], test_sources: Iterable[str]) -> frozenset[str]:
    """The names a test's verdict may depend on: bound at the top level of ``lesson_sources``
    (the lesson's own cells, in the order they run) and read by ``test_sources`` or inside a
    function the lesson's cells define, less the names any test cell binds."""
    bound, read_in_functions = set(), set()
    for source in lesson_sources:
        tree = _parse(source)
        for statement in tree.body:
            bound |= _bound_at_top(statement)
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                read_in_functions |= _globals_read(statement)
    read_by_tests, bound_by_tests = set(), set()
    for source in test_sources:
        tree = _parse(source)
        read_by_tests |= _loads(tree)
        bound_by_tests |= {n.id for n in ast.walk(tree)
                           if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    return frozenset(bound & (read_by_tests | read_in_functions) - bound_by_tests)


def _parse(source: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError:
        return ast.Module(body=[], type_ignores=[])


def _globals_read(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The names ``function`` reads that are not its own (parameters, names it assigns)."""
    args = function.args
    own = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg,
                           args.kwarg] if a is not None}
    own |= {n.id for n in ast.walk(function)
            if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    return _loads(function) - own


def _loads(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def instrumented(source: str, protected: Iterable[str]) -> str:
    """A lesson cell's ``source`` with ``__tilegym_kept__.keep((names,))`` after each top-level
    statement that binds protected names: the copy is taken as the lesson binds the value,
    before the rest of the cell (which may call the learner's functions) runs. ``source``
    itself where it binds none."""
    protected = set(protected)
    lines = source.splitlines()
    inserts: dict[int, list[str]] = {}
    for statement in _parse(source).body:
        names = sorted(_bound_at_top(statement) & protected)
        if names:
            inserts.setdefault(statement.end_lineno, []).extend(names)
    if not inserts:
        return source
    out = []
    for number, line in enumerate(lines, start=1):
        out.append(line)
        if number in inserts:
            out.append(f"__tilegym_kept__.keep({tuple(dict.fromkeys(inserts[number]))!r})")
    return "\n".join(out)


def _bound_at_top(statement: ast.stmt) -> set[str]:
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
        targets = [statement.target]
    else:
        return set()
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


#: the keeper of this grading kernel (the last Kept made), which check_now consults
_keeper: list["Kept"] = []


def check_now() -> None:
    """Kept.check of this grading kernel's keeper, if there is one: the grading functions call
    it as they finish, so that what a check compared with is checked before learner code that
    runs later (a callback at the end of the cell) could put a changed value back."""
    if _keeper:
        _keeper[-1].check()


class Kept:
    """Copies of the protected values of ``namespace`` (the notebook's globals), taken as the
    lesson's cells bind them; the keeper check_now consults from then on."""

    def __init__(self, namespace: MutableMapping[str, Any], protected: Iterable[str]):
        self.namespace = namespace
        self.protected = frozenset(protected)
        self.copies: dict[str, Any] = {}
        _keeper[:] = [self]

    def keep(self, names: Iterable[str]) -> None:
        """The lesson has just bound ``names``: their values, as they are now, are the
        lesson's."""
        for name in set(names) & self.protected:
            if name in self.namespace:
                self.copies[name] = _copy(self.namespace[name])

    def differing(self) -> list[str]:
        """The kept names whose value is not its copy (or that are gone), sorted."""
        return sorted(name for name, kept in self.copies.items()
                      if name not in self.namespace or not same(self.namespace[name], kept))

    def check(self) -> None:
        """Raise LessonDataChanged, naming them, if learner code changed kept values."""
        changed = self.differing()
        if changed:
            names = ", ".join(f"`{name}`" for name in changed)
            raise LessonDataChanged(
                f"your code changed {names}, which the lesson's own cells define and the tests "
                "read, so this test's verdict cannot be trusted: change a copy instead "
                "(`dict(...)`, `list(...)`, `.clone()`), and run the notebook again from the top")


def _copy(value: Any) -> Any:
    """A copy to compare with later: deep where it can be, else the object itself (then only
    its identity is kept)."""
    try:
        return copy.deepcopy(value)
    except Exception:  # noqa: BLE001 - an object that cannot be copied: keep its identity
        return value


def same(a: Any, b: Any, depth: int = 0) -> bool:
    """Whether ``a`` holds what its copy ``b`` held: containers element by element, tensors
    bit for bit (NaN included), modules by their state, dataclasses and plain objects by their
    attributes, anything else by ``==`` (or identity, where ``==`` fails)."""
    import torch   # here: the grader's process reads protected_names without loading torch
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if depth > _DEPTH:
        return True
    if isinstance(a, torch.Tensor):
        return (a.shape == b.shape and a.dtype == b.dtype and a.stride() == b.stride()
                and _bits_equal(a, b))
    if isinstance(a, torch.nn.Module):
        return same(dict(a.state_dict(keep_vars=True)), dict(b.state_dict(keep_vars=True)),
                    depth + 1) and same(_plain_attributes(a), _plain_attributes(b), depth + 1)
    if isinstance(a, Mapping):
        return (list(a.keys()) == list(b.keys())
                and all(same(a[k], b[k], depth + 1) for k in a))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y, depth + 1) for x, y in zip(a, b))
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if dataclasses.is_dataclass(a) or _is_plain_object(a):
        return same(vars(a), vars(b), depth + 1)
    if type(a).__eq__ is object.__eq__:
        return True              # equality is identity: nothing to compare the copy with
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an equality that fails: say it differs
        return False


def _bits_equal(a, b) -> bool:
    """Two tensors of one shape and dtype hold the same bits (so NaN equals NaN)."""
    import torch
    a, b = a.detach(), b.detach()
    if a.numel() == 0:
        return True
    if a.dtype == torch.bool:
        return torch.equal(a, b)
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8),
                       b.contiguous().reshape(-1).view(torch.uint8))


def _plain_attributes(module) -> dict[str, Any]:
    """A module's own attributes other than its parameters, buffers and submodules."""
    return {k: v for k, v in vars(module).items()
            if k not in ("_parameters", "_buffers", "_modules") and not k.startswith("_")}


def _is_plain_object(value: Any) -> bool:
    """An instance of a class defined in Python whose attributes live in its ``__dict__``."""
    return (hasattr(value, "__dict__") and not isinstance(value, type)
            and not callable(value) and type(value).__module__ not in ("builtins", "torch"))
