"""The static audit of a learner's code, run by the grader before any of it executes.

A graded notebook runs the learner's cells and the course's test cells in one Python process,
so anything a test cell relies on could be changed by the learner's code unless that code is
kept from reaching it. The audit reads every cell the learner controls (solution cells and
cells they added or edited) and refuses the ones that could: each refusal names the line and
the rule, and the grader runs ``raise SubmissionRefused(...)`` in the cell's place, so only
the exercises that need that cell lose points.

What kernel code needs is allowed: Triton kernels and their wrappers, PyTorch calls, plain
Python (functions, loops, comprehensions, f-strings, dataclasses, generators), the imports a
lesson needs (:data:`ALLOWED_IMPORTS`), ``tilegym_edu``'s measuring modules (``device``,
``tune``, ``bench``, ``check`` ...). What is refused, by rule:

* ``syntax``: anything that is not plain Python (IPython magics ``%``, shell ``!``, ``?`` help),
  a cell IPython would run otherwise than it reads (prompts ``>>>``, ``...:``:
  :func:`runs_as_written`), and ``match`` (its class patterns read attributes by name);
* ``import``: modules outside :data:`ALLOWED_IMPORTS` (``os``, ``sys``, ``gc``, ``ctypes``,
  ``inspect``, ``numpy``, the course's reference kernels and grader ...), and ``import *``;
* ``name``: builtins that reach around Python's rules (``exec``, ``eval``, ``open``,
  ``getattr``, ``globals``, ``vars``, ``type`` ...), IPython's ``get_ipython``, ``In``, ``Out``
  and history names (``_i3``, ``_``), dunder names, the grader's module, the names Triton's
  interpreter puts in the notebook (``inspect``, ``np`` ...: :func:`interpreter_names`);
* ``attribute``: a module as a value (``f(torch.nn.functional)``: use its attributes),
  dunder and private (``_x``) attributes, frame and traceback attributes
  (``gi_frame``, ``f_back`` ...), ways out of torch (``.tolist()``, ``.numpy()``, ``.item()``,
  ``torch.tensor``, ``torch.from_numpy``), hooks and global switches (``register_*``,
  ``set_*``, ``torch.library``, ``torch.utils``, ``torch.backends``, ``triton.knobs`` ...),
  ``str.format`` (its ``{0.attr}`` fields read attributes), the course's reference kernels;
  and, in a chain on a module, any name outside the public API
  (:func:`tilegym_edu.api_names.public_api`) and the lesson's own cells' attribute names
  (``functools.recursive_repr``; elsewhere such a read is checked as it runs, by
  :mod:`tilegym_edu.write_guard`);
* ``assign``: writing an attribute of anything but ``self``/``ctx`` inside a function (what
  ``self`` is, :mod:`tilegym_edu.write_guard` checks as the code runs), an attribute as a
  loop's or ``with``'s target, items of a module's tables (``check.TOLERANCES[...] = ...``),
  ``global`` statements;
* ``lesson name``: rebinding, mutating or passing on a name the lesson's own cells define (the
  test cells' helpers and data), or rebinding a builtin (``len = ...``);
* ``class``: ``dataclass`` and ``total_ordering`` other than as decorators of the learner's
  own classes (they add methods to the class they are given); bases other than
  ``torch.autograd.Function`` (no ``torch.Tensor`` subclasses), metaclasses, dunder methods
  other than ``__init__`` (no home-made ``__eq__``), methods named ``_x`` (IPython's
  ``_repr_html_``);
* ``annotation``: strings in type annotations (``typing.get_type_hints`` evaluates them);
* ``except``: catching ``BaseException``, ``KeyboardInterrupt`` or ``SystemExit`` (a bare
  ``except:`` too): the grader interrupts a cell past its time limit;
* ``async``: coroutines and async generators (no place in kernel code);
* ``kernel``: ``jit`` other than as a kernel's decorator (``triton.jit(f)`` hands Triton's
  interpreter a function that was not audited as a kernel); a kernel inside a function or
  class, or with a decorator below its jit (the interpreter runs a kernel's text again at the
  top level of the module: enclosing names change meaning, and Triton compiles what the lower
  decorators return); in a ``@triton.jit`` function, a global name other than a module, a
  kernel, the lesson's names and a few builtins (:data:`KERNEL_BUILTINS`), a
  second line starting with ``def `` (an unpatched Triton interpreter runs the kernel's source
  again from the last such line), an attribute or item write, a call that changes a Python
  container (``.append``, ``.update`` ...), or an attribute outside the public API and the
  lesson's (Triton reads a kernel's source itself, so no run-time check reaches it).

The audit is a first wall, not the only one: attribute writes are checked again as they run
(:mod:`tilegym_edu.write_guard`), graded calls run under the shortcut guard
(:mod:`tilegym_edu.grading`), and untrusted class work runs in a sandbox
(:mod:`tilegym_edu.sandbox`).
"""
from __future__ import annotations

import __future__
import ast
import builtins
import functools
import importlib.util
import inspect
import re
import types
import typing
from dataclasses import dataclass
from typing import Iterable, Mapping

from tilegym_edu import api_names

#: modules a learner's cell may import (and their submodules where the entry ends with ".*")
ALLOWED_IMPORTS = frozenset({
    "math", "functools", "itertools", "typing", "dataclasses", "collections", "warnings",
    "time", "statistics", "random",
    "torch", "torch.nn", "torch.nn.functional", "torch.cuda",
    "triton", "triton.language", "triton.language.extra.*", "triton.tools.tensor_descriptor",
    "triton.testing",
    "tilegym_edu", "tilegym_edu.device", "tilegym_edu.tune", "tilegym_edu.bench",
    "tilegym_edu.check", "tilegym_edu.roofline", "tilegym_edu.specs", "tilegym_edu.traffic",
    "tilegym_edu.ceilings", "tilegym_edu.progress", "tilegym_edu.tiles",
    "tilegym_edu.cutile",   # lesson 07: cuda.tile (or its stand-in), cutile_kernel, launch
})

#: builtins and IPython names a learner's cell may not use at all
FORBIDDEN_NAMES = frozenset({
    "exec", "eval", "compile", "open", "getattr", "setattr", "delattr", "globals", "locals",
    "vars", "dir", "breakpoint", "input", "help", "memoryview", "bytearray", "bytes", "type",
    # a property's getter runs wherever its object is read: in a dataclass's generated repr
    # and ==, from the grader's own code (round 25 of the red team)
    "property",
    "exit", "quit", "copyright", "credits", "license",
    "get_ipython", "display", "In", "Out",
    "grading",   # the grader's module, imported by the lesson's setup cell
})
_DUNDER = re.compile(r"__\w+__")
_IPYTHON_HISTORY = re.compile(r"^(_+|_i+|_i\d+|_\d+|_ih|_oh|_dh|_exit_code)$")

#: attribute names a learner's cell may not read or write, on any object
FORBIDDEN_ATTRIBUTES = frozenset({
    # frames, tracebacks and code objects: the checker's locals are one f_back away
    "gi_frame", "gi_code", "gi_yieldfrom", "gi_running", "gi_suspended", "cr_frame", "cr_code",
    "cr_await", "ag_frame", "ag_code", "ag_await", "f_back", "f_locals", "f_globals",
    "f_builtins", "f_code", "f_trace", "f_lineno", "tb_frame", "tb_next", "with_traceback",
    "co_code", "co_consts", "co_names",
    # str.format and format_map look up attributes named in the format string
    "format", "format_map",
    # tensor data into Python (computed outside torch, then written back)
    "tolist", "numpy", "item", "untyped_storage", "storage", "apply_", "map_", "map2_",
    "handle",     # the numpy data of a value in Triton's interpreter
    # a compiled Triton kernel's record of the globals it read holds the notebook's namespace
    # (its __builtins__ included): found by walking the attributes of a @triton.jit kernel
    "used_global_vals", "device_caches",
    # Triton's interpreter: every interpreted kernel's code, in one dict shared by all
    "rewritten_fn",
    # what makes a kernel (or a function Triton runs again from its text) of a function other
    # than by decorating it with @triton.jit, which the audit reads as a kernel (round 9)
    "JITFunction", "KernelInterface", "InterpretedFunction", "constexpr_function", "aggregate",
    "MockTensor", "TensorWrapper",
    # a compiled kernel's launcher called by hand, with no launch hook (the hook is where a
    # lesson refuses Triton launches: grading.refuse_triton_in_graded_calls) needs these
    "packed_metadata", "function", "launch_metadata",
    # getattr by another name; classes with any base and dunders
    "getmembers", "getmembers_static", "getattr_static", "make_dataclass", "cached_property",
    # round 4 (2026-12-05): a Triton function's namespace (its module's, __builtins__ within),
    # a module as a call's value, attributes written by name (functools copies __code__ from
    # one function to another; enum puts members into a module's namespace), setters called
    # directly
    "get_capture_scope", "get_device_module", "update_wrapper", "wraps", "global_enum",
    "fset", "fdel",
    # round 7: typing.get_origin(typing.Type) is `type` itself
    "get_origin", "get_args",
    # ways to the interpreter's machinery from an object that is not a module
    "sys", "modules", "builtins", "get_ipython", "frame", "locals", "globals",
    "currentframe", "getargvalues",
    # functions that evaluate strings as code: typing's string annotations
    "get_type_hints", "get_annotations", "ForwardRef", "singledispatch", "singledispatchmethod",
    # the course's reference kernels and grading machinery
    "reference", "grading", "course", "classroom", "class_worker", "class_state",
    "class_gradebook", "class_cluster", "audit", "sandbox", "submission", "cli",
})
_FORBIDDEN_PREFIXES = ("register_", "set_", "_")

#: parts of modules a learner's cell may not reach (``torch.load``, ``torch.utils...``):
#: global switches, hooks, registries, file access, and tensors made from Python data
FORBIDDEN_MODULE_PARTS = frozenset({
    "torch.library", "torch.overrides", "torch.utils", "torch.fx", "torch.jit", "torch.export",
    "torch.ops", "torch.hub", "torch.backends", "torch.profiler", "torch.monitor",
    "torch.compile", "torch.compiler", "torch.manual_seed", "torch.seed", "torch.random",
    "torch.use_deterministic_algorithms", "torch.load", "torch.save", "torch.distributed",
    "torch.multiprocessing", "torch.serialization", "torch.classes", "torch.package",
    "torch.tensor", "torch.as_tensor", "torch.asarray", "torch.from_numpy", "torch.frombuffer",
    "torch.from_file", "torch.from_dlpack", "torch.UntypedStorage", "torch.TypedStorage",
    "torch.autograd.graph", "torch.autograd.profiler", "torch.nn.utils", "torch.cuda.memory",
    "torch.cuda.graph", "torch.cuda.CUDAGraph",
    "torch.cuda.manual_seed", "torch.cuda.manual_seed_all", "torch.cuda.graphs",
    # classes whose methods, called on a class as self, hand back `type` (round 5 and 6 of the
    # red team: `C = collections.Counter; C.copy(SomeClass)`)
    "collections.Counter", "collections.UserDict", "collections.UserList",
    "collections.UserString", "collections.ChainMap",
    "triton.knobs", "triton.runtime", "triton.compiler", "triton.backends",
    # Triton's compiler and its asynchronous mode, re-exported at the top
    "triton.compile", "triton.AsyncCompileMode", "triton.FutureKernel",
    # benchmark reports that write files where they are told (round 14 of the red team wrote
    # results.html outside the grading; graded code times with do_bench or tilegym_edu.bench)
    "triton.testing.perf_report", "triton.testing.Benchmark", "triton.testing.Mark",
    # the course's reference kernels and its grading machinery
    "tilegym_edu.reference", "tilegym_edu.grading", "tilegym_edu.course",
    "tilegym_edu.build", "tilegym_edu.autograde", "tilegym_edu.grade_report",
    "tilegym_edu.classroom", "tilegym_edu.class_worker", "tilegym_edu.class_state",
    "tilegym_edu.class_gradebook", "tilegym_edu.class_cluster", "tilegym_edu.audit",
    "tilegym_edu.sandbox",
    "tilegym_edu.submission", "tilegym_edu.stock", "tilegym_edu.executor", "tilegym_edu.cli",
    "tilegym_edu.figures", "tilegym_edu.feedback", "tilegym_edu.includes", "tilegym_edu.percent",
    "tilegym_edu.compat", "tilegym_edu.cutile_check", "tilegym_edu.wheelhouse", "tilegym_edu.hub",
    "tilegym_edu.write_guard", "tilegym_edu.api_names", "tilegym_edu.handed_in",
    "tilegym_edu.kernel_bounds", "tilegym_edu.kernel_compiles", "tilegym_edu.dispatch_mode",
    "tilegym_edu.lesson_data",
})

#: methods that change the object they are called on (lists, dicts, sets; torch's name_ ops)
MUTATING_METHODS = frozenset({
    "append", "extend", "insert", "pop", "popitem", "remove", "clear", "update", "setdefault",
    "sort", "reverse", "add", "discard", "difference_update", "intersection_update",
    "symmetric_difference_update", "resize_", "copy_", "fill_", "zero_",
})

#: builtins that only read their arguments: lesson data may be passed to them
READ_ONLY_BUILTINS = frozenset({
    "len", "list", "tuple", "dict", "set", "frozenset", "sorted", "reversed", "min", "max",
    "sum", "any", "all", "enumerate", "zip", "range", "iter", "isinstance", "str", "repr",
    "print", "int", "float", "bool", "abs", "round", "hash", "id", "callable"})

#: decorators that make a Triton (or Gluon) kernel, besides any `<module>.jit`
JIT_DECORATORS = frozenset({"jit"})
#: decorators that add methods to the class they are given: allowed only on the learner's own
#: class definitions (``dataclasses.dataclass(SomeGraderClass)`` would change that class)
CLASS_DECORATORS = frozenset({"dataclass", "total_ordering"})
#: builtins a kernel may call or name (others would run as Python in Triton's interpreter):
#: a few functions, and the exceptions (a blank exercise's kernel raises NotImplementedError).
#: Not `isinstance`: an argument's type differs between Triton's compiler (a float is an fp32
#: tensor) and its interpreter (a Python float), and round 30 of the red team hid from the
#: compile check (kernel_compiles) a branch only the interpreter ran
KERNEL_BUILTINS = frozenset({"range", "min", "max", "len", "int", "float", "bool", "abs",
                             "print", "tuple", "zip", "enumerate"}
                            | {name for name, value in vars(builtins).items()
                               if isinstance(value, type) and issubclass(value, Exception)})
#: the only base a learner's class may have
ALLOWED_BASES = frozenset({"torch.autograd.Function"})
#: the only dunder a learner's class may define
ALLOWED_DUNDER_DEFS = frozenset({"__init__"})
#: exceptions a cell must let through (the grader's time limit interrupts with them)
UNCATCHABLE = frozenset({"BaseException", "KeyboardInterrupt", "SystemExit", "GeneratorExit"})
#: names the code Triton's interpreter runs for a kernel looks up in the notebook (a learner's
#: `class interpreter_semantic` ran inside every kernel, the lesson's too: round 10)
INTERPRETER_REWRITE_NAMES = frozenset({"interpreter_semantic", "interpreter_builder"})
#: where an attribute may be written: the instance or autograd context of a learner's class
WRITABLE_RECEIVERS = frozenset({"self", "ctx"})

_BUILTIN_NAMES = frozenset(dir(builtins))


@dataclass(frozen=True)
class Refusal:
    """One thing the audit refused: where, by which rule, and what to do instead;
    ``statement`` is the (first, last) line of the top-level statement it is in, which the
    grader leaves out (the rest of the cell still runs)."""

    line: int
    rule: str
    message: str
    statement: tuple[int, int] = (0, 0)

    def describe(self) -> str:
        return f"line {self.line}: {self.message} [rule: {self.rule}]"


@dataclass(frozen=True)
class LessonNames:
    """What the lesson's own (trusted) cells bind at the top level of the notebook: imports
    (name -> dotted path of what it was imported from; ``modules`` those that are modules)
    and everything else they assign or define (``others``: functions, classes, data)."""

    imports: Mapping[str, str]
    modules: Mapping[str, str]
    others: frozenset[str]
    #: names the lesson's test cells bind (their checkers, references, inputs and expected
    #: values), imports aside: a learner's code may not read them, even where a trusted cell
    #: binds the same name, since while the tests run they hold the tests' data (round 8 of
    #: the red team returned a hidden test's own `rules(...)`; round 22 read the test loop's
    #: matrix `x` and the hidden expected value `counted`)
    tests: frozenset[str] = frozenset()
    #: attribute names the lesson's own cells read (``layer.q_proj``, ``kernel.fn``): a
    #: learner's code may read them too, besides the public API (:mod:`tilegym_edu.api_names`)
    attributes: frozenset[str] = frozenset()
    #: names the learner's cells bind only with a ``@triton.jit`` def (:func:`kernel_names`):
    #: the plain names a kernel may call besides the lesson's and a few builtins
    kernels: frozenset[str] = frozenset()

    def may_read(self, name: str) -> bool:
        """Whether a learner's code may read the attribute ``name`` of any object (what the
        audit does not refuse outright; other names are checked as the code runs, by
        :mod:`tilegym_edu.write_guard`, and refused in a Triton kernel)."""
        return name in self.attributes or name in api_names.public_api()


@functools.cache
def _is_module(path: str) -> bool:
    try:
        return importlib.util.find_spec(path) is not None
    except (ImportError, ValueError, AttributeError):
        return False


def lesson_names(trusted_sources: Iterable[str], test_sources: Iterable[str] = ()
                 ) -> LessonNames:
    """The top-level names bound by the lesson's trusted cells: ``trusted_sources`` and its
    test cells, ``test_sources`` (sources that do not parse, which a trusted cell never is, are
    skipped). Names the test cells bind, imports aside, are :attr:`LessonNames.tests`."""
    trusted, tests = list(trusted_sources), list(test_sources)
    imports: dict[str, str] = {}
    others: set[str] = set()
    attributes: set[str] = set()
    for source in [*trusted, *tests]:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        if source in trusted:
            attributes |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                           and not _forbidden_attribute(n.attr)}
        for node in tree.body:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        imports[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        imports[top] = top
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        for name in _module_bindings(tree):
            if name not in imports:
                others.add(name)
    modules = {name: path for name, path in imports.items() if _is_module(path)}
    test_data = _top_level_names(tests) - set(imports)
    return LessonNames(imports, modules, frozenset(others), frozenset(test_data),
                       frozenset(attributes))


def kernel_names(sources: Iterable[str]) -> frozenset[str]:
    """Names that ``sources`` (a notebook's cells) bind at the top level with a
    ``@triton.jit`` def and in no other way (a kernel may call them: a plain function of the
    same name in another cell would have run as Python inside the kernel)."""
    kernels: set[str] = set()
    others: set[str] = set()
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and any(_is_jit(d) for d in node.decorator_list):
                kernels.add(node.name)
            else:
                others |= _module_bindings(ast.Module(body=[node], type_ignores=[]))
    return frozenset(kernels - others)


def _top_level_names(sources: Iterable[str]) -> set[str]:
    names: set[str] = set()
    for source in sources:
        try:
            names |= _module_bindings(ast.parse(source))
        except SyntaxError:
            continue
    return names


def _module_bindings(tree: ast.Module) -> set[str]:
    """Names bound at module scope (comprehension and function scopes excluded, walrus
    targets inside top-level comprehensions included)."""
    names: set[str] = set()

    def visit(node: ast.AST, top: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if top:
                names.add(node.name)
            for d in node.decorator_list:
                visit(d, top)
            return
        if isinstance(node, ast.Lambda):
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)) and top:
            names.add(node.id)
        elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
        comprehension = isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp,
                                          ast.GeneratorExp))
        for child in ast.iter_child_nodes(node):
            visit(child, top and not comprehension)

    for statement in tree.body:
        visit(statement, True)
    return names


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a chain of attributes on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _is_constant(node: ast.expr) -> bool:
    """A literal number, string, True, False or None, or a negative number."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant)


def _last_name(node: ast.expr) -> str | None:
    """``c`` of ``a.b.c`` or of a name ``c``."""
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)


def _is_jit(decorator: ast.expr) -> bool:
    """``@triton.jit``, ``@gluon.jit``, ``@jit`` (with arguments or not)."""
    name = _dotted(decorator.func if isinstance(decorator, ast.Call) else decorator) or ""
    return name in JIT_DECORATORS or name.endswith(".jit")


def _import_allowed(module: str) -> bool:
    if module in ALLOWED_IMPORTS:
        return True
    return any(entry.endswith(".*") and module.startswith(entry[:-1]) for entry in ALLOWED_IMPORTS)


def _forbidden_attribute(name: str) -> bool:
    return (name in FORBIDDEN_ATTRIBUTES or name.startswith(_FORBIDDEN_PREFIXES)
            or name in shared_triton_containers())


@functools.cache
def shared_triton_containers() -> frozenset[str]:
    """Names of the lists, dicts and sets Triton's value classes hold (``tl.dtype.OTHER_TYPES``
    ...): one object for the whole process, reachable from any kernel through any value's
    dtype. Round 19 kept tiles in one between programs and launches."""
    return frozenset(name for cls in _kernel_value_classes() for name in dir(cls)
                     if not name.startswith("_")
                     and isinstance(getattr(cls, name, None), (list, dict, set, bytearray)))


@functools.cache
def triton_value_containers() -> frozenset[str]:
    """Names of the lists, dicts and sets Triton's values hold in themselves (a tuple's
    ``values``, a tuple type's ``types``): in the interpreter one such list serves every
    program of a launch, and round 21 kept tiles in a descriptor's ``shape.values``."""
    import triton.language as tl
    samples = [tl.pointer_type(tl.float32), tl.block_type(tl.float32, [16])]
    if hasattr(tl, "tuple"):
        pair = tl.tuple([tl.constexpr(1), tl.constexpr(2)])
        samples += [pair, pair.type]
    return frozenset(name for sample in samples for name, value in vars(sample).items()
                     if isinstance(value, (list, dict, set, bytearray)))


def _kernel_value_classes() -> list[type]:
    """The classes of what a kernel computes with: tensors, descriptors, dtypes, constexprs."""
    import triton.language as tl
    return [cls for cls in (getattr(tl, name, None) for name in (
        "tensor", "tensor_descriptor_base", "tensor_descriptor", "dtype", "constexpr",
        "pointer_type", "block_type")) if cls is not None]


def _sample_kernel_function(x):
    """A function to make kernel objects of (kernel_object_attributes)."""
    return x


@functools.cache
def kernel_object_attributes() -> frozenset[str]:
    """The attributes a kernel object carries (its function, its arguments' names, a dict of
    options ...), less those Triton's values have: a kernel never reads them, and round 20
    kept tiles in one (``kwargs``)."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction
    names = set(vars(InterpretedFunction(_sample_kernel_function)))
    try:
        names |= set(vars(JITFunction(_sample_kernel_function)))
    except Exception:  # noqa: BLE001 - a Triton that cannot make one here: the interpreter's
        pass
    return frozenset(n for n in names if not n.startswith("_")) - kernel_methods()


#: what _module_object returns for a chain that does not resolve (it fails when it runs)
_MISSING = object()


def _module_object(module: str, parts: list[str]) -> object:
    """The object ``module.parts...`` names, or _MISSING."""
    obj = importlib.import_module(module)
    for part in parts:
        try:
            obj = getattr(obj, part)
        except Exception:  # noqa: BLE001 - no such attribute: it fails when it runs
            return _MISSING
    return obj


def _kernel_module_callable(module: str, parts: list[str]) -> bool:
    """Whether ``module.parts...`` is a function, class or kernel (not a dtype or constant)."""
    import triton.language as tl
    obj = _module_object(module, parts)
    return obj is not _MISSING and callable(obj) and not isinstance(obj, (type, tl.dtype))


def _kernel_module_value_refused(module: str, parts: list[str]) -> str:
    """Why a kernel may not read ``module.parts...`` ('' if it may): what a kernel reads of a
    module is a module, a class, a function, a dtype or a constant, never a container or other
    object that would outlive the program (round 19's stash was a list of Triton's)."""
    import triton.language as tl
    obj = _module_object(module, parts)
    if (isinstance(obj, (types.ModuleType, type, tl.dtype, tl.constexpr, bool, int, float, str))
            or obj is None or obj is _MISSING or callable(obj)):
        return ""
    if isinstance(obj, (tuple, frozenset)) and all(
            isinstance(v, (tl.dtype, bool, int, float, str)) for v in obj):
        return ""
    return f"a {type(obj).__name__}, which every program and launch would share"


@functools.cache
def kernel_methods() -> frozenset[str]:
    """The public methods and attributes of Triton's values in a kernel (tensors, tensor
    descriptors, dtypes, constexprs), as this Triton has them: what a kernel may call on a
    value."""
    return frozenset(name for cls in _kernel_value_classes() for name in dir(cls)
                     if not name.startswith("_"))


def _own_nodes(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.AST]:
    """The nodes of ``function``'s body, those of the functions, lambdas and classes it
    defines left out."""
    nodes, stack = [], list(function.body)
    while stack:
        node = stack.pop()
        nodes.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                 ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))
    return nodes


def _local_names(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """Parameters and names assigned in ``function``'s own scope (not in nested functions)."""
    args = function.args
    names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a}
    body = function.body if isinstance(function.body, list) else [function.body]
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            stack.extend(node.decorator_list)
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {a.asname or a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        stack.extend(ast.iter_child_nodes(node))
    return names


class _Auditor(ast.NodeVisitor):
    """Walks one cell, keeping a stack of function scopes to tell a lesson's global name from
    a local of the same name."""

    def __init__(self, lesson: LessonNames, source: str = ""):
        self.lesson = lesson
        self.source_lines = source.splitlines()
        self.refusals: list[Refusal] = []
        self.scopes: list[set[str]] = []      # locals of the enclosing functions, innermost last
        self.classes: list[str] = []          # enclosing learner classes
        self.imports: dict[str, str] = {}     # names this cell's imports bind -> module
        self.statement = (0, 0)               # lines of the top-level statement being read
        self.kernels = 0                      # how many Triton kernels enclose this point
        self.cell_kernels = kernel_names([source])   # the kernels this cell defines
        self.decorators: set[int] = set()     # ids of the DECORATOR_ONLY nodes used as such

    # -- helpers -------------------------------------------------------------------------
    def refuse(self, node: ast.AST, rule: str, message: str) -> None:
        self.refusals.append(Refusal(getattr(node, "lineno", 0), rule, message, self.statement))

    def is_global(self, name: str) -> bool:
        return not any(name in scope for scope in self.scopes)

    def lesson_data(self, node: ast.AST) -> str | None:
        """The name, if ``node`` is a lesson-defined name other than a module or function
        (data the test cells may read), seen from the current scope."""
        if (isinstance(node, ast.Name) and node.id in self.lesson.others
                and self.is_global(node.id)):
            return node.id
        return None

    def check_binding(self, node: ast.AST, name: str, module: str | None = None) -> None:
        """A top-level binding of ``name`` (``module``: what an import binds it to)."""
        if self.scopes or self.classes:
            return
        if name in self.lesson.imports:
            if module != self.lesson.imports[name]:
                self.refuse(node, "lesson name", f"`{name}` is the lesson's import of "
                            f"`{self.lesson.imports[name]}`, which the test cells use: "
                            "give yours another name")
        elif name in self.lesson.others:
            self.refuse(node, "lesson name", f"`{name}` is defined by the lesson's own cells "
                        "and used by its tests: give yours another name")
        elif name in _BUILTIN_NAMES:
            self.refuse(node, "lesson name", f"`{name}` is a Python builtin the test cells "
                        "rely on: give yours another name")
        elif name in interpreter_names() | INTERPRETER_REWRITE_NAMES:
            self.refuse(node, "lesson name", f"`{name}` is a name Triton's interpreter puts in "
                        "the notebook for the kernels it runs: give yours another name")

    # -- statements ----------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not _import_allowed(alias.name):
                self.refuse(node, "import", f"`import {alias.name}` is not allowed in graded "
                            f"cells; allowed: {', '.join(sorted(ALLOWED_IMPORTS))}")
            bound = alias.asname or alias.name.split(".")[0]
            self.imports[bound] = alias.name if alias.asname else bound
            self.check_binding(node, bound, self.imports[bound])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = "." * node.level + (node.module or "")
        for alias in node.names:
            if alias.name == "*":
                self.refuse(node, "import", f"`from {module} import *` binds names nobody can "
                            "see: import the names you use")
                continue
            full = f"{module}.{alias.name}"
            allowed = (not node.level and _import_allowed(module)
                       and (module != "tilegym_edu" or _import_allowed(full)))
            if not allowed:
                self.refuse(node, "import", f"`from {module} import {alias.name}` is not "
                            "allowed in graded cells; allowed modules: "
                            f"{', '.join(sorted(ALLOWED_IMPORTS))}")
            if _forbidden_attribute(alias.name) or any(
                    full == p or full.startswith(p + ".") for p in FORBIDDEN_MODULE_PARTS):
                self.refuse(node, "import", f"`{full}` may not be imported in graded cells")
            elif (alias.name in JIT_DECORATORS | CLASS_DECORATORS
                  and alias.asname not in (None, alias.name)):
                self.refuse(node, "import", f"`{alias.name}` imported as `{alias.asname}`: "
                            f"import it as `{alias.name}`, so that the grader knows where you "
                            "use it")
            elif allowed and not _is_module(full):
                why, _ = _reach(module, (alias.name,), self.lesson.attributes)
                if why:
                    self.refuse(node, "import", f"`from {module} import {alias.name}`: {why}")
            self.imports[alias.asname or alias.name] = full
            self.check_binding(node, alias.asname or alias.name, full)

    def visit_Global(self, node: ast.Global) -> None:
        self.refuse(node, "assign", "`global` statements are not allowed: return values "
                    "from your functions instead")

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.check_function(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self.refuse(node, "async", "async functions have no place in kernel code")
        self.check_function(node)

    def check_jit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """Triton's interpreter runs a kernel by reading its source again and executing it
        from the last line that starts with `def `: only the kernel's own `def` line may
        (no nested functions, no such line in a string), or what runs is not what was
        audited. And kernel code never writes an attribute (Triton has no such thing)."""
        if self.scopes or self.classes:
            self.refuse(node, "kernel", f"the Triton kernel `{node.name}` is defined inside a "
                        "function or class: define kernels at the top level of a cell (Triton's "
                        "interpreter runs a kernel's text again at the top level, where the "
                        "enclosing names mean something else)")
        for default in [*node.args.defaults, *[d for d in node.args.kw_defaults if d]]:
            if not _is_constant(default):
                self.refuse(default, "kernel", f"the default `{ast.unparse(default)}` of a "
                            "Triton kernel: a kernel's defaults are numbers, strings, True, "
                            "False or None (Triton's interpreter shares a default object "
                            "between programs and launches)")
        if not _is_jit(node.decorator_list[-1]):
            self.refuse(node, "kernel", f"`@{ast.unparse(node.decorator_list[-1])}` below the "
                        f"jit decorator of `{node.name}`: the jit decorator goes right above "
                        "the `def` (Triton compiles what the decorators below it return, which "
                        "is not the function the grader read)")
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        lines = self.source_lines[first - 1:node.end_lineno]
        defs = [first + i for i, line in enumerate(lines) if line.strip().startswith("def ")]
        if defs != [node.lineno]:
            self.refuse(node, "kernel", f"in the Triton kernel `{node.name}`, only its own `def` "
                        "line may start with `def ` (Triton's interpreter runs the kernel from "
                        "the last such line): no nested functions, no such line in a string")
        parameters = {a.arg for a in [*node.args.posonlyargs, *node.args.args,
                                      *node.args.kwonlyargs]}
        local = _local_names(node)
        parents = {child: parent for parent in ast.walk(node)
                   for child in ast.iter_child_nodes(parent)}
        body = {id(n) for statement in node.body for n in ast.walk(statement)}
        for inner in ast.walk(node):
            if isinstance(inner, ast.Call):
                self.check_kernel_call(inner, local)
            if id(inner) in body:    # not the decorators and annotations
                self.check_kernel_held_by_name(inner, parents.get(inner), local)
            if (isinstance(inner, ast.Attribute) and inner.attr in triton_value_containers()
                    and self.lesson.may_read(inner.attr)):   # else refused as not public
                self.refuse(inner, "kernel", f"`{ast.unparse(inner)}`: a Triton kernel reads no "
                            "list inside a Triton value (round 21 kept tiles in a tensor "
                            "descriptor's `shape.values`, one list for every program)")
            if (isinstance(inner, ast.Attribute) and inner.attr in kernel_object_attributes()
                    and self.lesson.may_read(inner.attr)):   # else refused as not public
                self.refuse(inner, "kernel", f"`{ast.unparse(inner)}`: a Triton kernel reads no "
                            "attribute of a kernel object (round 20 kept tiles in one's "
                            "`kwargs` dict)")
            dotted = _dotted(inner) if isinstance(inner, ast.Attribute) else None
            root = dotted.split(".")[0] if dotted else None
            if root and root not in local and self.module_of(root):
                why = _kernel_module_value_refused(self.module_of(root), dotted.split(".")[1:])
                if why:
                    self.refuse(inner, "kernel", f"`{dotted}` in a Triton kernel: it is {why}")
            if (isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name)
                    and inner.value.id not in local and not self.module_of(inner.value.id)):
                self.refuse(inner, "kernel", f"`{ast.unparse(inner)}`: a Triton kernel reads "
                            "attributes of modules (`tl`, `triton`) and of its own values only "
                            "(round 18 kept tiles in a kernel object's `kwargs` dict)")
            if (isinstance(inner, (ast.Attribute, ast.Subscript))
                    and isinstance(inner.ctx, (ast.Store, ast.Del))):
                self.refuse(inner, "kernel", f"`{ast.unparse(inner)}`: a Triton kernel writes "
                            "no attributes and no items (in the interpreter a kernel is Python, "
                            "and a dict kept between programs hid loads from the traffic count)")
            elif isinstance(inner, ast.Call) and isinstance(inner.func, ast.Subscript):
                self.refuse(inner, "kernel", f"`{ast.unparse(inner)}`: a Triton kernel calls "
                            "nothing it took out of a container (round 17 called a Python "
                            "function kept in a kernel object's `values`)")
            elif (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name)
                  and inner.func.id in parameters):
                self.refuse(inner, "kernel", f"`{ast.unparse(inner)}`: a Triton kernel calls no "
                            "function it is given (in the interpreter it would run Python in the "
                            "middle of the launch)")
            elif isinstance(inner, ast.Attribute) and inner.attr in MUTATING_METHODS:
                # read, not only called: `put = t.copy_; put(...)` (round 15 of the red team)
                self.refuse(inner, "kernel", f"`{ast.unparse(inner)}`: a Triton kernel changes no "
                            "Python container and calls no tensor method")
            elif (isinstance(inner, ast.Subscript) and isinstance(inner.value, ast.Name)
                  and inner.value.id in self.cell_kernels | self.lesson.kernels
                  and isinstance(inner.ctx, ast.Load)):
                self.refuse(inner, "kernel", f"`{ast.unparse(inner)}`: a kernel launched from "
                            "inside a kernel (real Triton cannot; launch kernels from Python)")
            elif isinstance(inner, ast.Compare) and any(
                    isinstance(op, (ast.Is, ast.IsNot))
                    and not any(isinstance(side, ast.Constant) and side.value is None
                                for side in (left, right))
                    for op, left, right in zip(inner.ops, [inner.left, *inner.comparators],
                                               inner.comparators)):
                # round 32 of the red team: a tl.constexpr is a Python value to the compiler and
                # an object to the interpreter, so `is` took a branch the compile check never saw
                self.refuse(inner, "kernel", f"`{ast.unparse(inner)}`: in a Triton kernel `is` "
                            "compares only with None (use == for values)")

    def check_kernel_held_by_name(self, node: ast.AST, parent: ast.AST | None,
                                  local: set[str]) -> None:
        """In a kernel, another kernel, or a function of a module, is called by name (or handed
        to a call, as ``tl.reduce``'s combine function is), never kept in a local: through a
        local alias, round 20 read a kernel object's ``kwargs`` dict."""
        if not isinstance(node, (ast.Name, ast.Attribute)) or not isinstance(node.ctx, ast.Load):
            return
        if isinstance(parent, ast.Attribute) or (
                isinstance(parent, ast.Call) and (parent.func is node or node in parent.args)):
            return
        if isinstance(parent, ast.keyword):
            return
        if isinstance(node, ast.Name):
            held = (node.id not in local and node.id in self.cell_kernels | self.lesson.kernels)
        else:
            dotted = _dotted(node)
            root = dotted.split(".")[0] if dotted else None
            held = bool(root and root not in local and self.module_of(root)
                        and _kernel_module_callable(self.module_of(root), dotted.split(".")[1:]))
        if held:
            self.refuse(node, "kernel", f"`{ast.unparse(node)}` in a Triton kernel: call it by "
                        "name (or hand it to a call); a kernel keeps no function in a local")

    def check_kernel_call(self, call: ast.Call, local: set[str]) -> None:
        """A call in a Triton kernel: of ``tl``'s (or another module's) functions, of a kernel
        or a lesson's function by name, of a builtin of :data:`KERNEL_BUILTINS`, or of a method
        Triton's values have (:func:`kernel_methods`). Anything else runs as Python in the
        interpreter, in the middle of a launch: round 18 called a function it took out of a
        dict (``work = box.kwargs.get("work"); work()``)."""
        function = call.func
        if isinstance(function, ast.Name):
            if function.id not in local:
                return               # a global: check_kernel_global says which may be used
            what = "a value it made (only kernels, tl's functions and a few builtins)"
        elif isinstance(function, ast.Attribute):
            root = function.value
            while isinstance(root, ast.Attribute):
                root = root.value
            module = self.module_of(root.id) if isinstance(root, ast.Name) else None
            if module and module.split(".")[0] in ("triton", "math"):
                return               # tl.load, tl.math.exp2, triton.cdiv ...
            if module:
                what = f"`{module}`'s functions (in the interpreter they would run mid-launch)"
            elif function.attr in kernel_methods():
                return               # x.to(...), acc.reshape(...), desc.load(...)
            else:
                what = f"the method `{function.attr}`, which Triton's values do not have"
        else:
            what = "the result of an expression"
        self.refuse(call, "kernel", f"`{ast.unparse(call)}`: a Triton kernel calls {what}; it "
                    "calls `tl`'s functions, other kernels and its values' Triton methods")

    def check_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        kernel = any(_is_jit(d) for d in node.decorator_list)
        if kernel:
            self.check_jit_function(node)
            self.decorators |= {id(d.func if isinstance(d, ast.Call) else d)
                                for d in node.decorator_list if _is_jit(d)}
        if node.name.startswith("__") and node.name.endswith("__"):
            if not self.classes or node.name not in ALLOWED_DUNDER_DEFS:
                self.refuse(node, "class", f"defining `{node.name}` is not allowed (only "
                            "`__init__`, in a class)")
        elif node.name.startswith("_") and self.classes:
            self.refuse(node, "class", f"a method named `{node.name}` is not allowed: IPython "
                        "calls some on its own (`_repr_html_`, `_ipython_display_`, whose HTML "
                        "would reach the feedback): name it without the leading `_`")
        self.check_binding(node, node.name)
        self.check_generator_cleanup(node)
        for expression in [*node.decorator_list, *node.args.defaults,
                           *[d for d in node.args.kw_defaults if d]]:
            self.visit(expression)
        for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                    node.args.vararg, node.args.kwarg]:
            if arg is not None and arg.annotation is not None:
                self.check_annotation(arg.annotation)
        if node.returns:
            self.check_annotation(node.returns)
        self.check_parameters(node)
        self.scopes.append(_local_names(node))
        classes, self.classes = self.classes, []
        self.kernels += kernel
        for statement in node.body:
            self.visit(statement)
        self.kernels -= kernel
        self.classes = classes
        self.scopes.pop()

    def check_generator_cleanup(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """A generator's `finally`, `except` and `with` run when it is closed or collected,
        which may be long after its function returned, inside the grader's or the lesson's
        own code: round 24 of the red team computed lesson 06's SwiGLU there, where the model
        may add and index."""
        own = _own_nodes(node)
        if not any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in own):
            return
        for statement in own:
            if isinstance(statement, (ast.Try, ast.TryStar, ast.With)):
                self.refuse(statement, "generator", f"`{node.name}` is a generator (it "
                            "yields), and its try/with would run when the generator is "
                            "closed or collected, whenever that is: write the generator "
                            "without try and with, or return a list")

    def check_parameters(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
                         ) -> None:
        """Dunder parameter names are refused like dunder names (they would shadow the
        grader's)."""
        args = node.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if arg is not None and arg.arg.startswith("__"):
                self.refuse(node, "name", f"the parameter `{arg.arg}` (a dunder name) is not "
                            "allowed in graded cells")

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.check_parameters(node)
        for expression in [*node.args.defaults, *[d for d in node.args.kw_defaults if d]]:
            self.visit(expression)
        self.scopes.append(_local_names(node))
        self.visit(node.body)
        self.scopes.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.check_binding(node, node.name)
        for base in node.bases:
            if _dotted(base) not in ALLOWED_BASES:
                self.refuse(base, "class", f"a class may not derive from `{ast.unparse(base)}` "
                            f"(allowed: none, or {', '.join(sorted(ALLOWED_BASES))})")
        for keyword in node.keywords:
            self.refuse(node, "class", f"class keyword `{keyword.arg}=` (metaclasses) is not "
                        "allowed")
        for decorator in node.decorator_list:
            used = decorator.func if isinstance(decorator, ast.Call) else decorator
            if _last_name(used) in CLASS_DECORATORS:
                self.decorators.add(id(used))
            self.visit(decorator)
        self.classes.append(node.name)
        for statement in node.body:
            self.visit(statement)
        self.classes.pop()

    def check_annotation(self, node: ast.expr) -> None:
        """A type annotation: no strings in it (typing.get_type_hints and friends run them
        through eval, with the notebook's globals)."""
        if any(isinstance(n, ast.Constant) and isinstance(n.value, str) for n in ast.walk(node)):
            self.refuse(node, "annotation", f"the annotation `{ast.unparse(node)}` holds a "
                        "string, which typing evaluates as code: write the type itself "
                        "(`torch.Tensor`, not `'torch.Tensor'`)")
        self.visit(node)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        caught = ([] if node.type is None else node.type.elts
                  if isinstance(node.type, ast.Tuple) else [node.type])
        names = {_dotted(c) for c in caught}
        if node.type is None or names & UNCATCHABLE:
            self.refuse(node, "except", "catching BaseException, KeyboardInterrupt or "
                        "SystemExit (or a bare `except:`) is not allowed: catch Exception or "
                        "a narrower error, so the grader can stop a cell past its time limit")
        if node.name:
            self.check_binding(node, node.name)
        self.generic_visit(node)

    def visit_Match(self, node: ast.Match) -> None:
        self.refuse(node, "syntax", "`match` statements are not allowed in graded cells: their "
                    "class patterns read attributes by name (`case C(attr=x)`), which the grader "
                    "cannot check; use if/elif")
        self.generic_visit(node)

    def visit_AsyncFor(self, node: ast.AsyncFor) -> None:
        self.refuse(node, "async", "async code has no place in kernel code")
        self.generic_visit(node)

    visit_AsyncWith = visit_AsyncFor
    visit_Await = visit_AsyncFor

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.check_target(target)
        self.visit(node.value)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.check_target(node.target)
        self.visit(node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.check_target(node.target)
        self.check_annotation(node.annotation)
        if node.value:
            self.visit(node.value)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self.check_target(target)

    def refuse_attribute_target(self, target: ast.AST, where: str) -> None:
        """Attributes are written only by assignments, where the grader checks each write."""
        for node in ast.walk(target):
            if isinstance(node, ast.Attribute):
                self.refuse(node, "assign", f"`{ast.unparse(node)}` as the target of {where} "
                            "is not allowed: assign to a name, then the attribute")

    def visit_For(self, node: ast.For) -> None:
        self.refuse_attribute_target(node.target, "a for loop")
        self.check_target(node.target)
        self.visit(node.iter)
        for statement in [*node.body, *node.orelse]:
            self.visit(statement)

    def visit_withitem(self, node: ast.withitem) -> None:
        self.visit(node.context_expr)
        if node.optional_vars is not None:
            self.refuse_attribute_target(node.optional_vars, "a with statement")
            self.check_target(node.optional_vars)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.check_target(node.target, top_level=not self.scopes)
        self.visit(node.value)

    def check_target(self, target: ast.AST, top_level: bool | None = None) -> None:
        """An assignment, ``del`` or loop target."""
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self.check_target(element, top_level)
        elif isinstance(target, ast.Starred):
            self.check_target(target.value, top_level)
        elif isinstance(target, ast.Name):
            self.check_name(target)
            if top_level or (top_level is None and not self.scopes):
                self.check_binding(target, target.id)
        elif isinstance(target, ast.Attribute):
            self.check_attribute_name(target)
            receiver = target.value
            if not (self.classes or self.scopes) or not (
                    isinstance(receiver, ast.Name) and receiver.id in WRITABLE_RECEIVERS
                    and not self.is_global(receiver.id)):
                self.refuse(target, "assign", f"assigning `{ast.unparse(target)}` is not "
                            "allowed: only attributes of `self` or `ctx` inside your own class "
                            "may be written (never those of a module, a class or a library "
                            "object)")
            self.visit_attribute_base(receiver)
        elif isinstance(target, ast.Subscript):
            name = self.lesson_data(target.value)
            if name:
                self.refuse(target, "lesson name", f"`{name}` is defined by the lesson's own "
                            "cells and read by its tests: do not change it (copy it first)")
            self.refuse_module_data(target.value, target)
            self.visit(target.value)
            self.visit(target.slice)
        else:
            self.visit(target)

    # -- expressions ---------------------------------------------------------------------
    def check_name(self, node: ast.Name) -> None:
        name = node.id
        if name.startswith("__"):   # a local too: the grader's own names start so
            self.refuse(node, "name", f"`{name}` (a dunder name) is not allowed in graded "
                        "cells")
            return
        if not self.is_global(name):
            return
        if name in FORBIDDEN_NAMES:
            self.refuse(node, "name", f"`{name}` is not allowed in graded cells")
        elif name in self.lesson.tests:
            self.refuse(node, "lesson name", f"`{name}` is set by a test cell (while the tests "
                        "run it holds what they check your code with): your code may not read "
                        "it; give what you need a name of your own")
        elif (name in interpreter_names() and name not in self.lesson.imports
              and name not in self.lesson.others):
            self.refuse(node, "name", f"`{name}` is a name Triton's interpreter puts in the "
                        "notebook when it runs a kernel: graded cells may not use it (import "
                        "what you need under another name)")
        elif _IPYTHON_HISTORY.match(name):
            self.refuse(node, "name", f"`{name}` (a dunder or IPython history name) is not "
                        "allowed in graded cells")

    def visit_Name(self, node: ast.Name) -> None:
        self.check_name(node)
        if isinstance(node.ctx, ast.Load):
            self.check_decorator_use(node, node.id)
            if self.kernels and self.is_global(node.id):
                self.check_kernel_global(node)
        if isinstance(node.ctx, ast.Load) and self.module_of(node.id):
            self.refuse(node, "name", f"`{node.id}` is a module: use its attributes "
                        f"(`{node.id}.something`) rather than storing or passing the module")

    def module_of(self, name: str) -> str | None:
        """The module ``name`` stands for here, if it is an import (the lesson's or this
        cell's) and not shadowed by a local."""
        if not self.is_global(name):
            return None
        path = self.imports.get(name) or self.lesson.modules.get(name)
        return path if path and _is_module(path) else None

    def visit_ListComp(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp) -> None:
        self.visit_comprehension_scope(node.generators, [node.elt])

    visit_SetComp = visit_ListComp
    visit_GeneratorExp = visit_ListComp

    def visit_DictComp(self, node: ast.DictComp) -> None:
        self.visit_comprehension_scope(node.generators, [node.key, node.value])

    def visit_comprehension_scope(self, generators: list[ast.comprehension],
                                  results: list[ast.AST]) -> None:
        targets = {n.id for g in generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        self.visit(generators[0].iter)   # the first iterable is evaluated outside the scope
        self.scopes.append(targets)
        for i, generator in enumerate(generators):
            self.refuse_attribute_target(generator.target, "a comprehension")
            self.check_target(generator.target, top_level=False)
            if i:
                self.visit(generator.iter)
            for condition in generator.ifs:
                self.visit(condition)
        for result in results:
            self.visit(result)
        self.scopes.pop()

    def check_kernel_global(self, node: ast.Name) -> None:
        """A global name in a Triton kernel: a module, a kernel (the learner's or the
        lesson's), the lesson's names, or a builtin of :data:`KERNEL_BUILTINS`. In Triton's
        interpreter a kernel is Python: a plain function it called kept tiles in a dict between
        programs (round 10 of the red team), which compiled Triton would have refused."""
        name = node.id
        if (name in self.imports or name in self.lesson.imports or name in self.lesson.others
                or name in self.lesson.kernels or name in self.cell_kernels
                or name in KERNEL_BUILTINS):
            return
        self.refuse(node, "kernel", f"`{name}` in a Triton kernel: a kernel may use `tl`, "
                    "`triton`, its arguments, other kernels (`@triton.jit`), the lesson's names "
                    "and a few builtins (range, min, max, len ...); pass values as arguments")

    def check_decorator_use(self, node: ast.Attribute | ast.Name, name: str) -> None:
        """``jit`` only as the decorator of a kernel: called on a function or stored, it hands
        Triton's interpreter a function the audit did not read as a kernel (round 9 of the red
        team: ``triton.jit(f)()`` ran ``f`` again from its text, unguarded). The class
        decorators that add methods to the class they get (:data:`CLASS_DECORATORS`) only on
        the learner's own class definitions: called on a class of the grader's or torch's,
        they would change it."""
        if id(node) in self.decorators:
            return
        if name == "jit":
            self.refuse(node, "kernel", f"`{ast.unparse(node)}` may only decorate a kernel "
                        "(`@triton.jit` above its `def`), not be called or stored")
        elif name in CLASS_DECORATORS:
            self.refuse(node, "class", f"`{ast.unparse(node)}` may only decorate a class of "
                        f"yours (`@{name}` above its `class` line), not be called or stored")

    def check_attribute_name(self, node: ast.Attribute) -> None:
        self.check_decorator_use(node, node.attr)
        if _forbidden_attribute(node.attr):
            self.refuse(node, "attribute", f"`{ast.unparse(node)}` is not allowed in graded "
                        f"cells: {_attribute_reason(node.attr)}")
        elif self.kernels and not self.lesson.may_read(node.attr):
            self.refuse(node, "kernel", f"`{ast.unparse(node)}`: a Triton kernel reads only "
                        f"the public names of Triton and torch, and `{node.attr}` is not one")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        """An attribute read for its value (a chain's inner links are its bases, read by
        visit_attribute_base)."""
        self.check_attribute_name(node)
        if not self.check_module_part(node):
            dotted = _dotted(node)
            self.refuse(node, "attribute", f"`{dotted}` is a module: use its attributes "
                        f"(`{dotted}.something`) rather than storing or passing the module")
        self.visit_attribute_base(node.value)

    def visit_attribute_base(self, node: ast.AST) -> None:
        """What an attribute is read from: a module used through its attributes is fine."""
        while isinstance(node, ast.Attribute):
            self.check_attribute_name(node)
            node = node.value
        if isinstance(node, ast.Name):
            self.check_name(node)
        else:
            self.visit(node)

    def check_module_part(self, node: ast.Attribute) -> bool:
        """``a.b.c`` where ``a`` is a module: follow the chain through the real objects (a
        module re-exports others: ``F.torch``, ``device.os``), and refuse a forbidden part of
        a module, or an object from a module graded cells may not use. False when the chain
        is allowed but ends at a module (fine as the base of another attribute only)."""
        dotted = _dotted(node)
        if not dotted:
            return True
        root, *parts = dotted.split(".")
        module = self.module_of(root)
        if not module:
            return True
        why, is_module = _reach(module, tuple(parts), self.lesson.attributes)
        if why:
            self.refuse(node, "attribute", f"`{dotted}` is not allowed in graded cells: {why}")
        return not is_module

    def imported_data(self, node: ast.AST) -> str | None:
        """``a.b`` or ``a`` (as written) when ``node`` is a chain on a name an import binds
        (the lesson's or this cell's, not shadowed): what a module holds, which every cell
        and the grader share."""
        dotted = _dotted(node)
        root = dotted.split(".")[0] if dotted else None
        if root and self.is_global(root) and (root in self.imports or root in self.lesson.imports):
            return dotted
        return None

    def refuse_module_data(self, container: ast.AST, node: ast.AST) -> None:
        what = self.imported_data(container)
        if what:
            self.refuse(node, "assign", f"changing `{what}` is not allowed: it belongs to a "
                        "module, which the grader uses too (copy it first: `dict(...)`, "
                        "`list(...)`)")

    def visit_Constant(self, node: ast.Constant) -> None:
        """A string that is a dunder name: such names reach around the audit when passed to
        what reads attributes or items by name (`namespace["__builtins__"]`, functools'
        `assigned=("__code__",)`)."""
        if isinstance(node.value, str) and _DUNDER.fullmatch(node.value):
            self.refuse(node, "name", f"the string {node.value!r} names a dunder, which graded "
                        "cells may not use")

    def visit_Call(self, node: ast.Call) -> None:
        function = node.func
        if isinstance(function, ast.Attribute) and function.attr in MUTATING_METHODS:
            self.refuse_module_data(function.value, node)
            name = self.lesson_data(function.value)
            if name:
                self.refuse(node, "lesson name", f"`{name}.{function.attr}(...)` changes `{name}`"
                            ", which the lesson's own cells define and its tests read: copy it "
                            "first")
        reads_only = (isinstance(function, ast.Name) and function.id in READ_ONLY_BUILTINS
                      and self.is_global(function.id))
        for argument in [*node.args, *[k.value for k in node.keywords]]:
            value = argument.value if isinstance(argument, ast.Starred) else argument
            name = self.lesson_data(value)
            if name and not reads_only:
                self.refuse(value, "lesson name", f"`{name}` is defined by the lesson's own "
                            "cells and read by its tests: pass a copy (e.g. `{name}.clone()`, "
                            f"`list({name})`) rather than `{name}` itself".replace("{name}", name))
        self.generic_visit(node)


def _attribute_reason(name: str) -> str:
    if name.startswith("_"):
        return "private and dunder attributes belong to the library"
    if name.startswith(("register_", "set_")):
        return "hooks and global settings change what the tests run"
    if name in shared_triton_containers():
        return ("it is a list, dict or set Triton's classes share across the whole process "
                "(round 19 kept tiles in one)")
    return _ATTRIBUTE_REASONS.get(name, "it reaches outside kernel code")


_ATTRIBUTE_REASONS = {
    "format": "its {0.attribute} fields read any attribute: use an f-string",
    "format_map": "its {0.attribute} fields read any attribute: use an f-string",
    "tolist": "graded code computes in Triton, not on Python values",
    "numpy": "graded code computes in Triton, not in numpy",
    "item": "graded code computes in Triton, not on Python values",
    "tensor": "build tensors with torch.empty/zeros/randn; data from Python is a way around "
              "the kernel",
    "reference": "the course's reference kernels are not yours to call",
}


def runs_as_written(source: str) -> bool:
    """Whether IPython runs ``source`` as written. Its input transformations strip prompts
    (``>>>``, ``...:``) and the indentation of doctest-like stretches: a red team of
    2026-12-05 used them to run code the audit had read as a string, or as a function's body.
    Leading and trailing blank lines, which IPython drops, do not count."""
    from IPython.core.inputtransformer2 import TransformerManager
    return TransformerManager().transform_cell(source).strip("\n") == source.strip("\n")


def audit(source: str, lesson: LessonNames) -> list[Refusal]:
    """Every refusal for one cell's ``source``, in line order; [] when the cell may run. A
    cell nested too deeply for the audit to read (RecursionError) is refused whole."""
    try:
        return _audit(source, lesson)
    except (RecursionError, MemoryError):
        return [Refusal(1, "syntax", "this cell nests too deeply for the grader to read: split "
                        "its expressions", (1, max(1, len(source.splitlines()))))]


def _audit(source: str, lesson: LessonNames) -> list[Refusal]:
    if not runs_as_written(source):
        return [Refusal(1, "syntax", "IPython would run this cell differently from how it "
                        "reads (it strips prompts such as `>>>` and `...:`, and the indentation "
                        "of lines that follow one): remove the prompts",
                        (1, max(1, len(source.splitlines()))))]
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        text = (error.text or "").strip()
        hint = (" (IPython magics `%`, shell commands `!` and `?` help are not allowed in "
                "graded cells)" if text.startswith(("%", "!", "?")) or text.endswith("?")
                else "")
        lines = max(1, len(source.splitlines()))
        return [Refusal(error.lineno or 0, "syntax",
                        f"SyntaxError: {error.msg}{hint}: {text[:80]}", (1, lines))]
    auditor = _Auditor(lesson, source)
    for statement in tree.body:
        decorators = getattr(statement, "decorator_list", [])
        auditor.statement = (min([statement.lineno, *(d.lineno for d in decorators)]),
                             statement.end_lineno or statement.lineno)
        auditor.visit(statement)
    return sorted(set(auditor.refusals), key=lambda r: (r.line, r.rule, r.message))


#: modules whose objects a learner's cell may reach through the attributes of another module
_ALLOWED_ROOTS = frozenset(entry.split(".")[0] for entry in ALLOWED_IMPORTS)


def _allowed_value(value: object) -> bool:
    """Whether graded cells may hold ``value``: a module they may import, a plain constant,
    an inert typing object (a TypeVar: learners name a sequence length ``T``), or an object
    whose module is one of the allowed ones (not a forbidden part of it)."""
    if isinstance(value, typing.TypeVar) or value is __future__.annotations:
        return True
    if isinstance(value, types.ModuleType):
        return _import_allowed(value.__name__)
    home = getattr(value, "__module__", None)
    if not isinstance(home, str):
        return isinstance(value, (bool, int, float, str, type(None)))
    return home.split(".")[0] in _ALLOWED_ROOTS and not _forbidden_part(home)


@functools.cache
def interpreter_names() -> frozenset[str]:
    """The names Triton's interpreter copies into the namespace of each kernel it runs (its
    module's globals, where the namespace lacks them: the notebook's, for a kernel defined
    in a cell) whose values graded cells may not hold (``inspect``, ``np``, the interpreter's
    own machinery). A red team of 2026-12-05 used ``inspect.getmembers`` that way."""
    from triton.runtime import interpreter
    return frozenset(name for name, value in vars(interpreter).items()
                     if not name.startswith("__") and not _allowed_value(value))


def _forbidden_part(path: str) -> str | None:
    parts = path.split(".")
    for end in range(1, len(parts) + 1):
        prefix = ".".join(parts[:end])
        if prefix in FORBIDDEN_MODULE_PARTS:
            return prefix
    return None


@functools.cache
def _reach(module: str, parts: tuple[str, ...] | list[str],
           lesson_attributes: frozenset[str] = frozenset()) -> tuple[str | None, bool]:
    """(why reaching ``module.parts...`` is refused, or None; whether it ends at a module).
    The chain is followed through the real objects (the grader's own import of them): each
    module on the way restarts the path at its real name, so ``F.torch.save`` is
    ``torch.save``; an object defined in a module outside the allowed ones (``device.os``,
    ``tune.Path``) is refused, and so is a name outside the public API
    (:mod:`tilegym_edu.api_names`) and ``lesson_attributes`` (what the lesson's cells read)."""
    parts = tuple(parts)
    path, obj = module, importlib.import_module(module)
    is_module = True
    for part in parts:
        if part not in lesson_attributes and (
                part not in api_names.public_api()
                or (is_module and not api_names.standard_part_allowed(path, part))):
            return (f"`{part}` is not one of the names of `{path}` graded cells may use "
                    "(see tilegym_edu/api_names.py)"), False
        path = f"{path}.{part}"
        found = _forbidden_part(path)
        if found:
            return (f"`{found}` changes global settings, reads or writes files, or makes tensors "
                    "from Python data"), False
        owner = obj
        try:
            obj = getattr(obj, part)
        except Exception:  # noqa: BLE001 - no such attribute: it fails when it runs
            return None, False
        if isinstance(owner, type) and (inspect.isfunction(obj) or inspect.ismethoddescriptor(obj)):
            # a method read from its class runs on whatever it is given as self: round 5's
            # collections.Counter.copy(SomeClass) returned `type` itself
            return (f"`{part}` is read from the class `{owner.__name__}`: call it on an "
                    "instance"), False
        is_module = isinstance(obj, types.ModuleType)
        home = obj.__name__ if is_module else getattr(obj, "__module__", None)
        if isinstance(home, str):
            if home.split(".")[0] not in _ALLOWED_ROOTS:
                return f"it reaches `{home}`, which graded cells may not use", False
            # a re-export (torch.cuda.change_current_allocator is torch.cuda.memory's), except
            # Triton's public API, which triton.runtime defines (triton.jit, triton.cdiv)
            found = None if home.split(".")[0] == "triton" else _forbidden_part(home)
            if found:
                return (f"it is `{found}`'s, which graded cells may not use (re-exported as "
                        f"`{path}`)"), False
        if is_module:
            path = obj.__name__
    return None, is_module


def without_refused(source: str, refusals: list[Refusal]) -> str:
    """``source`` with every refused top-level statement commented out, line for line (line
    numbers stay those the learner sees)."""
    lines = source.splitlines()
    out = []
    for number, line in enumerate(lines, start=1):
        refused = any(first <= number <= last for r in refusals for first, last in [r.statement])
        out.append(f"# refused by the grader: {line}" if refused else line)
    return "\n".join(out)


def describe(refusals: list[Refusal], limit: int = 3) -> str:
    """One line for the grade table: the first ``limit`` refusals, and how many more."""
    shown = "; ".join(r.describe() for r in refusals[:limit])
    more = f" (and {len(refusals) - limit} more)" if len(refusals) > limit else ""
    return shown + more


#: what a CUDA C kernel body may not contain: preprocessor lines, inline assembly, the
#: alternative tokens that spell braces, and storage or linkage keywords
_CUDA_FORBIDDEN = re.compile(r"#|\basm\b|\b__asm__\b|<%|%>|<:|:>|%:|\?\?|\bextern\b|\bstatic\b|"
                             r"\b__host__\b|\b__global__\b|\b__device__\b|\btemplate\b")


def cuda_body_problem(body: str) -> str | None:
    """Why ``body`` cannot be the statements of a CUDA C kernel (it could close the kernel's
    braces and add host code, which would run in the grader's process), or None."""
    if not isinstance(body, str):
        return f"the body must be a str, got {type(body).__name__}"
    found = _CUDA_FORBIDDEN.search(body)
    if found:
        return (f"the kernel body may not contain `{found.group(0)}` (preprocessor lines, inline "
                "assembly, alternative tokens and declarations outside the kernel are not "
                "allowed): write only the statements of the kernel")
    depth = 0
    for char in body:
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth < 0:
            return ("the kernel body closes a brace it did not open: it must stay inside the "
                    "kernel's braces")
    if depth:
        return f"the kernel body leaves {depth} brace(s) open"
    return None
