"""The run-time half of the audit: which objects a learner's code may write attributes of, and
read attributes of beyond the public API.

The audit (:mod:`tilegym_edu.audit`) lets a learner's function write ``self.x = ...`` or
``ctx.x = ...``, which their classes and autograd Functions need; what ``self`` is cannot be
known before the code runs. A red team of 2026-12-05 passed the grader's own module, a torch
class or the IPython shell as ``self`` (``def put(self, v): self.assert_correct = v``) and so
replaced the checks: a notebook that solved nothing earned every point, sandbox or not.

In the grading kernel every cell of the learner's (:func:`mark` ends it with :data:`MARKER`)
is rewritten before it runs by an IPython AST transformer (:func:`install`, called by the
first cell of every graded notebook, before any of the learner's):

* each attribute write (``=``, ``+=``, an annotated ``=``, ``del``) goes through
  :func:`guarded_setattr` / :func:`guarded_delattr` (``+=`` asks :func:`may_write` before
  its in-place operation), which allow only instances of the
  learner's own classes, those classes themselves, and the ``ctx`` of the learner's autograd
  Functions;
* each attribute read whose name is neither in the public API
  (:func:`tilegym_edu.api_names.public_api`) nor read by the lesson's own cells goes through
  :func:`guarded_getattr`, which allows it on what :func:`readable` allows (the learner's own
  objects, named tuples, ``nn`` modules): Python reaches everything from anything through
  attributes, and no list of forbidden names was ever complete (the audit refuses such names
  outright in a Triton kernel, whose source Triton reads itself);
* each class the learner defines is registered (:data:`LEARNER_CLASS` decorator) as theirs;
* Triton's interpreter, which runs a function again from its source text (a kernel in
  interpreter mode; any function handed to ``InterpretedFunction``, which counting traffic does
  on a GPU too), compiles the function's own definition only, and a learner cell's function
  with the same rewriting (:func:`guard_interpreter`). Unpatched, it ran the text from the last
  line starting with ``def ``, which could be inside a string, and none of it was guarded: a red
  team of 2026-12-05 (round 9) earned every point of lessons 00, 02 and 04 through
  ``triton.jit(f)()`` on a plain function.

The names the rewritten code calls start with ``__tilegym``: the audit refuses every dunder
name in a learner's code, and the transformer refuses a cell that mentions one, so no
learner's code can shadow or replace them. A cell the transformer cannot rewrite is refused
(IPython's InputRejected), never run as it was. Code outside learner cells (the lesson's) is
not rewritten. Triton reads a kernel's source text, which is unchanged (its interpreter runs
it again as Python: the audit's ``kernel`` rule keeps that text what was audited, with no
attribute writes).
"""
from __future__ import annotations

import ast
import itertools
import linecache
import textwrap
import weakref
from typing import Iterable

#: the last line of every learner cell in a graded notebook
MARKER = "__tilegym_learner_cell__"
#: the first line of the grader's setup cell (setup_source)
_SETUP_FIRST_LINE = "from tilegym_edu.write_guard import install as __tilegym_install__"
#: names the rewritten code calls (defined in the notebook's namespace by install())
SETATTR, DELATTR, MAY_WRITE, LEARNER_CLASS, GETATTR = (
    "__tilegym_setattr__", "__tilegym_delattr__", "__tilegym_may_write__",
    "__tilegym_learner_class__", "__tilegym_getattr__")
_RESERVED = "__tilegym"

#: the classes learner cells defined, in this kernel
_LEARNER_CLASSES: weakref.WeakSet = weakref.WeakSet()


def mark(source: str) -> str:
    """A learner cell's source as the grading kernel runs it: ``source`` then :data:`MARKER`
    on a line of its own (line numbers stay the learner's)."""
    return f"{source}\n{MARKER}"


def learner_class(cls):
    """Register ``cls`` as a class the learner defined (the decorator the transformer adds
    to each of their classes, outermost)."""
    _LEARNER_CLASSES.add(cls)
    return cls


def writable(obj: object) -> bool:
    """Whether a learner's code may write attributes of ``obj``: an instance of one of their
    classes, such a class, or the ``ctx`` of one of their autograd Functions."""
    import torch
    if isinstance(obj, type):
        return obj in _LEARNER_CLASSES
    kind = type(obj)
    if kind in _LEARNER_CLASSES:
        return True
    return (isinstance(obj, torch.autograd.function.FunctionCtx)
            and getattr(kind, "_forward_cls", None) in _LEARNER_CLASSES)


def readable(obj: object) -> bool:
    """Whether a learner's code may read any attribute of ``obj``, not only the public API's:
    what :func:`writable` allows, a named tuple (its fields are its items), or a torch ``nn``
    module (a model's layers and weights, as the lesson builds them)."""
    import torch
    if writable(obj):
        return True
    return ((isinstance(obj, tuple) and hasattr(type(obj), "_fields"))
            or isinstance(obj, torch.nn.Module))


def _refuse(obj: object, name: str, what: str) -> None:
    from tilegym_edu.grading import SubmissionRefused
    raise SubmissionRefused(
        f"{what} `{name}` of {type(obj).__name__} {obj!r:.60}: the grader lets "
        "your code change only attributes of your own classes' instances (`self`) and of your "
        "autograd Function's `ctx`")


def guarded_getattr(obj: object, name: str) -> object:
    """``obj.name`` for a name outside the public API, if :func:`readable` allows it, or for a
    public name that touches the file system on a path (``Path.replace``), on anything but a
    path; else SubmissionRefused."""
    import pathlib

    from tilegym_edu import api_names
    from tilegym_edu.grading import SubmissionRefused
    if isinstance(obj, pathlib.PurePath) and name in api_names.file_system_names():
        raise SubmissionRefused(f"`{name}` of a path touches the file system, which graded code "
                                "may not")
    if not (name in api_names.public_api() or readable(obj)):
        raise SubmissionRefused(
            f"reading `{name}` of {type(obj).__name__}: graded code may read the public names "
            "of torch, Triton and the course's modules (tilegym_edu/api_names.py), those the "
            "lesson's cells read, and any attribute of your own classes' instances; "
            f"`{name}` is none of these here")
    return getattr(obj, name)


def may_write(obj: object, name: str) -> None:
    """SubmissionRefused unless :func:`writable` allows writing ``obj.name`` (checked before
    ``obj.name += ...``, whose in-place operation could change a foreign object's value)."""
    if not writable(obj):
        _refuse(obj, name, "writing")


def guarded_setattr(obj: object, name: str, value: object) -> None:
    """``obj.name = value`` if :func:`writable` allows it, else SubmissionRefused."""
    may_write(obj, name)
    setattr(obj, name, value)


def guarded_delattr(obj: object, name: str) -> None:
    """``del obj.name`` if :func:`writable` allows it, else SubmissionRefused."""
    if not writable(obj):
        _refuse(obj, name, "deleting")
    delattr(obj, name)


def _call(function: str, *args: ast.expr) -> ast.Expr:
    return ast.Expr(ast.Call(ast.Name(function, ast.Load()), list(args), []))


class _GuardWrites(ast.NodeTransformer):
    """Routes a learner cell's attribute writes through the guard and registers its
    classes (see the module docstring)."""

    def __init__(self, public: frozenset[str]):
        self.public = public      # attribute names read without a check
        self.temporaries = (f"{_RESERVED}_value_{n}" for n in itertools.count())

    def visit_Attribute(self, node: ast.Attribute) -> ast.expr:
        self.generic_visit(node)
        if isinstance(node.ctx, ast.Load) and node.attr not in self.public:
            return ast.Call(ast.Name(GETATTR, ast.Load()), [node.value, ast.Constant(node.attr)],
                            [])
        return node

    def _stores(self, target: ast.expr, after: list[ast.stmt]) -> ast.expr:
        """``target`` with each attribute in it replaced by a temporary name, and the
        guarded writes of those temporaries appended to ``after``."""
        if isinstance(target, ast.Attribute):
            temporary = next(self.temporaries)
            after.append(_call(SETATTR, target.value, ast.Constant(target.attr),
                               ast.Name(temporary, ast.Load())))
            return ast.Name(temporary, ast.Store())
        if isinstance(target, (ast.Tuple, ast.List)):
            target.elts = [self._stores(e, after) for e in target.elts]
        elif isinstance(target, ast.Starred):
            target.value = self._stores(target.value, after)
        return target

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        self.generic_visit(node)
        node.decorator_list.insert(0, ast.Name(LEARNER_CLASS, ast.Load()))
        return node

    def visit_Assign(self, node: ast.Assign) -> list[ast.stmt]:
        self.generic_visit(node)
        after: list[ast.stmt] = []
        node.targets = [self._stores(t, after) for t in node.targets]
        return [node, *after]

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.stmt | list[ast.stmt]:
        self.generic_visit(node)
        target = node.target
        if not isinstance(target, ast.Attribute):
            return node
        temporary = next(self.temporaries)
        read = ast.Attribute(target.value, target.attr, ast.Load())
        return [_call(MAY_WRITE, target.value, ast.Constant(target.attr)),
                ast.Assign([ast.Name(temporary, ast.Store())], read),
                ast.AugAssign(ast.Name(temporary, ast.Store()), node.op, node.value),
                _call(SETATTR, target.value, ast.Constant(target.attr),
                      ast.Name(temporary, ast.Load()))]

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.stmt:
        self.generic_visit(node)
        target = node.target
        if not isinstance(target, ast.Attribute):
            return node
        if node.value is None:
            return ast.Expr(target.value)
        return _call(SETATTR, target.value, ast.Constant(target.attr), node.value)

    def visit_Delete(self, node: ast.Delete) -> list[ast.stmt]:
        self.generic_visit(node)
        guarded = [_call(DELATTR, t.value, ast.Constant(t.attr))
                   for t in node.targets if isinstance(t, ast.Attribute)]
        node.targets = [t for t in node.targets if not isinstance(t, ast.Attribute)]
        return ([node] if node.targets else []) + guarded

    def _no_attribute_target(self, target: ast.expr, where: str) -> None:
        if any(isinstance(n, ast.Attribute) for n in ast.walk(target)):
            raise ValueError(f"an attribute as the target of {where}")

    def visit_For(self, node: ast.For) -> ast.For:
        self._no_attribute_target(node.target, "a for loop")
        return self.generic_visit(node)

    visit_AsyncFor = visit_For

    def visit_withitem(self, node: ast.withitem) -> ast.withitem:
        if node.optional_vars is not None:
            self._no_attribute_target(node.optional_vars, "a with statement")
        return self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> ast.comprehension:
        self._no_attribute_target(node.target, "a comprehension")
        return self.generic_visit(node)


def rewrite(tree: ast.Module, public: frozenset[str] | None = None) -> ast.Module:
    """A learner cell's module (ending with the MARKER statement) rewritten as the module
    docstring says, ``public`` the attribute names read without a check (None: the public
    API's only); any other module unchanged. Raises ValueError for a learner cell that names
    a reserved ``__tilegym`` name or writes an attribute where it cannot be guarded."""
    body = tree.body
    if not (body and isinstance(body[-1], ast.Expr) and isinstance(body[-1].value, ast.Name)
            and body[-1].value.id == MARKER):
        return tree
    tree.body = body[:-1]
    if _RESERVED in ast.dump(tree):
        raise ValueError(f"a name starting with `{_RESERVED}`, which belongs to the grader")
    if public is None:
        from tilegym_edu import api_names
        public = api_names.public_api() - api_names.file_system_names()
    tree = _GuardWrites(public).visit(tree)
    return ast.fix_missing_locations(tree)


class _Transformer(ast.NodeTransformer):
    """IPython's hook: ``visit`` gets each cell's module. A failure refuses the cell
    (InputRejected: IPython keeps the transformer, where another error would make IPython
    drop it and run the cell unrewritten)."""

    def __init__(self, public: frozenset[str]):
        self.public = public

    def visit(self, node: ast.AST) -> ast.AST:
        from IPython.core.error import InputRejected
        try:
            return rewrite(node, self.public) if isinstance(node, ast.Module) else node
        except Exception as error:  # noqa: BLE001 - every failure refuses the cell
            raise InputRejected(f"SubmissionRefused: the grader could not run this cell of "
                                f"yours: {error}") from None


def from_learner_cell(fn: object) -> bool:
    """Whether ``fn`` is a function a learner cell defined (its cell's text, which IPython
    keeps in linecache, ends with :data:`MARKER`)."""
    code = getattr(fn, "__code__", None)
    return code is not None and any(line.strip() == MARKER
                                    for line in linecache.getlines(code.co_filename))


def _not_runnable_again(fn: object) -> str | None:
    """Why Triton's interpreter may not run ``fn`` again from its text, or None. It runs the
    text at the top level of ``fn``'s module, so a wrapper (``torch.no_grad()``'s: the text is
    the wrapped function's, the globals the wrapper's module's), a closure or a nested
    function (the enclosing function's names become the module's) would mean something else
    there than what was audited (round 10 of the red team)."""
    import inspect
    if inspect.unwrap(fn) is not fn:
        return "it wraps another function"
    code = getattr(fn, "__code__", None)
    if code is None:
        return "it is not a plain function"
    if code.co_freevars or getattr(fn, "__qualname__", "") != fn.__name__:
        return "it is defined inside another function or class"
    return None


def _on_disk(fn: object) -> bool:
    """Whether ``fn``'s code comes from a file (a library's, the course package's), not from a
    notebook cell: a cell's function, learner's or not, is run with the learner cells'
    rewriting (the lesson's and the test cells' read only names it allows)."""
    import os
    return os.path.isfile(fn.__code__.co_filename)


def guard_interpreter(public: frozenset[str]) -> None:
    """Make Triton's interpreter (``FunctionRewriter``, which re-runs a function from its
    source text) compile exactly the function's own definition, found by parsing its source
    block (not the last line that starts with ``def ``), and give a notebook cell's function
    the rewriting a learner cell has (``public``: the names read without a check). A wrapper,
    a closure, a nested function (:func:`_not_runnable_again`) and a source block that is not
    one definition of that function are refused."""
    from triton.runtime import interpreter
    rewriter = interpreter.FunctionRewriter
    if getattr(rewriter, "tilegym_guarded", False):
        return

    def find_def(self, lines: list[str]) -> int:
        from tilegym_edu.grading import SubmissionRefused
        why = _not_runnable_again(self.fn)
        if why:
            raise SubmissionRefused(f"Triton's interpreter cannot run `{self.fn.__name__}`: "
                                    f"{why} (write a kernel as a plain `def` at the top level "
                                    "of a cell, with @triton.jit right above it)")
        try:
            body = ast.parse(textwrap.dedent("".join(lines))).body
        except SyntaxError:
            body = []
        if not (len(body) == 1 and isinstance(body[0], ast.FunctionDef)
                and body[0].name == self.fn.__name__):
            raise SubmissionRefused(f"Triton's interpreter cannot run `{self.fn.__name__}`: "
                                    "its source is not one function definition (write it as "
                                    "a plain `def` decorated with @triton.jit)")
        return body[0].lineno

    def transform_ast(self, src: str) -> ast.Module:
        """Triton's own _transform_ast (3.6 to 3.9), with the learner cell's rewriting first
        (Triton's adds reads of its own machinery, which the guard would refuse)."""
        tree = ast.parse(src)
        if not _on_disk(self.fn):
            tree = _GuardWrites(public).visit(tree)
        tree = ast.fix_missing_locations(self.ast_transformer.visit(tree))
        ast.increment_lineno(tree, self.def_file_lineno - 1)
        return tree

    rewriter._find_def, rewriter._transform_ast = find_def, transform_ast
    rewriter.tilegym_guarded = True


#: what the rewritten code calls, by name
GUARD_NAMES = {SETATTR: guarded_setattr, DELATTR: guarded_delattr, MAY_WRITE: may_write,
               LEARNER_CLASS: learner_class, GETATTR: guarded_getattr}


def install(lesson_attributes: Iterable[str] = (), shell=None) -> None:
    """Rewrite learner cells in this IPython kernel from now on, and define the names the
    rewritten code calls; ``lesson_attributes``: the attribute names the lesson's own cells
    read (:attr:`tilegym_edu.audit.LessonNames.attributes`), read without a check like the
    public API. The first cell of every graded notebook runs this."""
    from tilegym_edu import api_names, kernel_bounds
    if shell is None:
        from IPython import get_ipython
        shell = get_ipython()
    shell.user_ns.update(GUARD_NAMES)
    public = ((api_names.public_api() | frozenset(lesson_attributes))
              - api_names.file_system_names())
    guard_interpreter(public)
    kernel_bounds.confine()
    if not any(isinstance(t, _Transformer) for t in shell.ast_transformers):
        shell.ast_transformers.append(_Transformer(public))


def setup_source(lesson_attributes: Iterable[str]) -> str:
    """The source of the first cell of every graded notebook (submission.prepare puts it
    there), for a lesson whose own cells read ``lesson_attributes``: it binds only a dunder
    name, which no learner's code may use."""
    names = textwrap.fill(repr(tuple(sorted(lesson_attributes))), 96,
                          subsequent_indent="    ", break_long_words=False)
    return (f"{_SETUP_FIRST_LINE}\n"
            f"__tilegym_install__(\n    {names})")


def is_setup(source: str) -> bool:
    """Whether ``source`` is a setup cell :func:`setup_source` wrote."""
    return source.startswith(_SETUP_FIRST_LINE + "\n")
