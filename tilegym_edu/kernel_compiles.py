"""Whether Triton's compiler takes a kernel that Triton's interpreter runs.

In the interpreter a kernel is Python, and Python lets it do what no compiled kernel can:
``int()`` of a tensor is a Python number, a tuple can grow in a loop, a name annotated
``tl.constexpr`` keeps a Python value that ``|=`` then changes, a loop over ``range(x)`` leaves a
Python number behind. None of that is a tensor, so none of it is counted where the course counts
what a program holds or moves (:mod:`tilegym_edu.traffic`): round 29 of the grader's red team
kept every key an attention program had seen in one Python int, and took a plain softmax in
two passes over them within Exercise 6's bounds. A GPU would never have run that kernel.

So before an interpreted launch runs a kernel defined in the notebook, :func:`check` has
Triton's own front end compile it (and the kernels it calls) to Triton's IR for an NVIDIA
Hopper GPU, with the launch's arguments: no GPU is needed and it takes milliseconds, once per
kernel and specialization. A kernel the compiler refuses fails the launch with the compiler's
message. Kernels of the course's modules are compiled where they are tested, not here.

The compiler and the interpreter read one source, but not always the same lines of it: a branch
on something that is a constant to the compiler and not to the interpreter (``isinstance`` of
an argument, ``is 1``: rounds 30-32) is decided differently by each. So the check also notes
which lines of the notebook's kernels the compiler visited for the launch, and while the
launch runs, each statement of those kernels first asks (:func:`_ran`) whether the
compiler visited it (by where it starts and ends, so a one-line ``if C: ...`` counts as two),
and so
does each half of ``a if C else b`` and each operand of ``and``/``or`` after the first:
code the compiler never compiled fails the launch.
"""
from __future__ import annotations

import ast
import contextlib
import functools
import re
import sys
import types
import warnings
from typing import Any, Callable, Iterator

from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.compiler.code_generator import CodeGenerator
from triton.compiler.errors import CompilationError
from triton.runtime import interpreter
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction, create_function_from_signature

#: what the kernels are compiled for: an H100 or H200 (compute capability 9.0, warps of 32)
TARGET = GPUTarget("cuda", 90, 32)

#: the launches already compiled, by (function, the globals it reads, its arguments'
#: specialization, its options): where in the notebook's kernels the compiler went,
#: {(file, function name): {(line, column, end line, end column)}}
_compiled: dict[tuple, dict] = {}

#: where the launch now running may go (one of _compiled's values), while it runs
_running: list[dict] = []


class NotCompilable(Exception):
    """A kernel ran in Triton's interpreter that Triton's compiler refuses."""


#: triton.language's modules and classes, as this module found them when imported: the course
#: imports it before any kernel runs (the grading kernel's first cell; a lesson's setup cell).
#: Triton's interpreter patches them while it runs a kernel (interpreter._patch_lang), and a
#: kernel that calls another (a reduction's combine function) leaves some of it behind, which
#: the compiler cannot work with (its arithmetic would go to the interpreter's builder)
def _language_objects() -> list:
    found = []
    for name, module in list(sys.modules.items()):
        if name.startswith("triton.language") and isinstance(module, types.ModuleType):
            found.append(module)
            found += [value for value in vars(module).values() if isinstance(value, type)
                      and value.__module__.startswith("triton.language")]
    return list({id(obj): obj for obj in found}.values())


_PRISTINE = [(obj, dict(vars(obj))) for obj in _language_objects()]
_ABSENT = object()


#: JITFunctions of triton.language's own kernels (tl.max, tl.sum ...): in interpreter mode
#: `triton.jit` made them InterpretedFunctions
_LIBRARY_TWINS: dict = {}


def _compilable(value: object) -> object:
    """``value``, or the JITFunction twin of an interpreted kernel of triton.language."""
    if isinstance(value, InterpretedFunction):
        return _twin(value.fn, _LIBRARY_TWINS)
    return value


@contextlib.contextmanager
def _pristine_language() -> Iterator[None]:
    """triton.language as it was before any interpreted run, its kernels compilable, put back
    as it is after."""
    changed = []
    for obj, pristine in _PRISTINE:
        now = vars(obj)
        for name in set(now) | set(pristine):
            current = now.get(name, _ABSENT)
            before = _compilable(pristine.get(name, _ABSENT))
            if before is not current and not name.startswith("__dict"):
                changed.append((obj, name, current))
                if before is _ABSENT:
                    delattr(obj, name)
                else:
                    setattr(obj, name, before)
    try:
        yield
    finally:
        for obj, name, current in changed:
            if current is _ABSENT:
                if name in vars(obj):
                    delattr(obj, name)
            else:
                setattr(obj, name, current)


def _twin(fn: Callable, made: dict) -> JITFunction:
    """A JITFunction of the Python function ``fn`` (an interpreted kernel's), whose globals
    show each interpreted kernel it reads as such a JITFunction too (in interpreter mode
    `triton.jit` makes InterpretedFunctions, which the compiler cannot call)."""
    if fn in made:
        return made[fn]
    scope = dict(fn.__globals__)
    twin = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    twin.__module__, twin.__qualname__ = fn.__module__, fn.__qualname__
    twin.__annotations__, twin.__kwdefaults__ = fn.__annotations__, fn.__kwdefaults__
    made[fn] = jit = JITFunction(twin)
    for name in fn.__code__.co_names:
        if isinstance(scope.get(name), InterpretedFunction):
            scope[name] = _twin(scope[name].fn, made)
    return jit


def _globals_read(fn: Callable, seen: set) -> tuple:
    """(name, value) of each global the kernel ``fn`` and the kernels it calls read (kernels by
    identity, the rest by repr: kernel_bounds allows only modules, kernels, builtins, dtypes,
    numbers and strings there). Part of the cache's key: round 32 of the red team compiled a
    kernel, then changed a tl.constexpr global, or rebound a helper kernel, that it read."""
    if fn in seen:
        return ()
    seen.add(fn)
    read = []
    for name in fn.__code__.co_names:
        value = fn.__globals__.get(name, _ABSENT)
        if isinstance(value, InterpretedFunction):
            read += [(name, value), *_globals_read(value.fn, seen)]
        elif not isinstance(value, types.ModuleType):
            read.append((name, repr(value)))
    return tuple(read)


#: JITFunction twins of the notebook's kernels, by (function, the globals it reads)
_TWINS: dict = {}


@contextlib.contextmanager
def _visited_code() -> Iterator[dict]:
    """{(file, function name): where each statement and expression of it Triton's compiler
    visits starts and ends (line, column, end line, end column)} for the notebook's kernels,
    filled while the block compiles (CodeGenerator.visit, which everything it compiles passes
    through; a branch decided at compile time is not visited)."""
    spans: dict = {}
    visit = CodeGenerator.visit

    def visit_noting_the_line(self, node):
        fn = getattr(self.jit_fn, "fn", None)
        line = getattr(node, "lineno", None)
        if line is not None and getattr(fn, "__module__", "") == "__main__":
            spans.setdefault((self.file_name, fn.__name__), set()).add(
                (self.begin_line + line, node.col_offset, self.begin_line + node.end_lineno,
                 node.end_col_offset))
        return visit(self, node)

    CodeGenerator.visit = visit_noting_the_line
    try:
        yield spans
    finally:
        CodeGenerator.visit = visit


def _compile(fn: Callable, args: tuple, kwargs: dict) -> dict:
    """Compile ``fn`` to Triton's IR for TARGET, specialized as a launch with these arguments
    would be (JITFunction.run's steps up to the compile), unless that specialization of ``fn``,
    reading the globals it reads now, was compiled before; the spans the compiler visited
    (_visited_code)."""
    from triton._C.libtriton import ir

    read = _globals_read(fn, set())
    jit = _TWINS.get((fn, read))
    if jit is None:
        jit = _TWINS[fn, read] = _twin(fn, {})
    backend = make_backend(TARGET)
    binder = create_function_from_signature(jit.signature, jit.params, backend)
    bound_args, specialization, options = binder(*args, **kwargs)
    key = (fn, read, str(specialization), str(sorted(kwargs.items())))
    if key in _compiled:
        return _compiled[key]
    options, signature, constexprs, attrs = jit._pack_args(backend, kwargs, bound_args,
                                                           specialization, options)
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    with _pristine_language(), _visited_code() as spans:
        ASTSource(jit, signature, constexprs, attrs).make_ir(
            TARGET, options, backend.get_codegen_implementation(options),
            backend.get_module_map(), context)
    _compiled[key] = {name: frozenset(found) for name, found in spans.items()}
    return _compiled[key]


def check(fn: Callable, args: tuple, kwargs: dict) -> dict | None:
    """Raise NotCompilable if Triton's compiler refuses the notebook's kernel ``fn`` (a Python
    function) launched with ``args`` and ``kwargs`` (its launch options among them); else the
    spans of the notebook's kernels it visited ({(file, function name): spans}). Kernels of
    modules pass unchecked (None)."""
    if getattr(fn, "__module__", None) != "__main__":
        return None
    options = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}
    try:
        # Triton 3.9 warns, once, that its fp-fusion default will change: nothing to the learner
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return _compile(fn, args, options)
    except CompilationError as error:
        raise NotCompilable(
            f"kernel `{fn.__name__}` runs in Triton's interpreter, but Triton's compiler refuses "
            f"it ({_where(error)}), so no GPU could run it. In the interpreter a kernel is Python: "
            "int() of a tensor, a tuple that grows in a loop or a tl.constexpr that changes are "
            "Python values, which a compiled kernel does not have; write the kernel in Triton's "
            "operations on tensors") from None


def _where(error: CompilationError) -> str:
    """'line L of the kernel, `code`: message', one line, from the compiler's error (its
    text: "at L:C:", the kernel's source up to the line, a caret, the message); where the error
    is in a kernel it calls, that kernel's."""
    while isinstance(error.__cause__, CompilationError):
        error = error.__cause__
    lines = [line for line in str(error).splitlines() if line.strip()]
    message = lines[-1].strip() if lines else "no message"
    name = re.search(r"def\s+(\w+)", getattr(error, "src", None) or "")
    if len(lines) >= 3 and lines[0].startswith("at ") and lines[-2].strip() == "^":
        return (f"line {lines[0][3:].split(':')[0]} of `{name.group(1) if name else 'it'}`, "
                f"`{lines[-3].strip()}`: {message}")
    return message


def wrap_run(run: Callable[..., Any]) -> Callable[..., Any]:
    """InterpretedFunction.run with :func:`check` before each launch, and the launch run
    where its kernels' statements may run only the spans the compiler visited."""
    def checked_run(self, *args, **kwargs):
        spans = check(self.fn, args, kwargs)
        if spans is None:
            return run(self, *args, **kwargs)
        _running.append(spans)
        try:
            return run(self, *args, **kwargs)
        except Exception as error:  # the interpreter wraps it in an InterpreterError
            if isinstance(error.__cause__, NotCompilable):
                raise error.__cause__ from None
            raise
        finally:
            _running.pop()
    return checked_run


def _ran(kernel: tuple, line: int, column: int, end_line: int, end_column: int) -> None:
    """Called by each statement (and expression Python may skip) of the notebook's
    kernel ``kernel`` (file, function name) that starts at ``line`` and ``column`` and ends at
    ``end_line`` and ``end_column``, as the interpreter runs it: NotCompilable unless the
    launch's compile visited it (an expression ``a if C else b`` starts where ``a`` does, so
    where the code ends tells them apart)."""
    if not _running:
        return
    visited = _running[-1].get(kernel)
    if visited is None or (line, column, end_line, end_column) not in visited:
        raise NotCompilable(
            f"kernel `{kernel[1]}` ran the code at line {line}, column {column + 1} in Triton's "
            "interpreter, code Triton's compiler skipped for this launch: the two took "
            "different branches (a test on something that is a constant to the compiler and a "
            "value to the interpreter, such as an argument's type or identity). No GPU would "
            "run that code; branch on tl.constexpr parameters or on tensors, never on what kind "
            "of object a value is")


def _guard(node: ast.AST) -> ast.Call:
    """The call ``tilegym_ran(L, C, EL, EC)`` for a node from line L, column C to line EL,
    column EC."""
    where = (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)
    call = ast.Call(ast.Name("tilegym_ran", ast.Load()),
                    [ast.Constant(value) for value in where], [])
    return ast.copy_location(call, node)


def _guarded(value: ast.expr) -> ast.expr:
    """``value`` made ``(guard, value)[1]``: evaluated, it first calls its guard."""
    pair = ast.copy_location(ast.Tuple([_guard(value), value], ast.Load()), value)
    return ast.copy_location(ast.Subscript(pair, ast.Constant(1), ast.Load()), value)


class _Guard(ast.NodeTransformer):
    """A kernel's body with a guard (_guard) before each statement that runs something (a
    lone constant, a docstring, does not), in both halves of ``a if C else b``, and on every
    operand of ``x and y`` or ``x or y`` after the first (Triton's compiler, like Python, skips
    the rest once a constant decides it)."""
    def visit(self, node: ast.AST):
        node = super().visit(node)
        if isinstance(node, ast.stmt) and not (isinstance(node, ast.Expr)
                                               and isinstance(node.value, ast.Constant)):
            return [ast.copy_location(ast.Expr(_guard(node)), node), node]
        return node

    def visit_IfExp(self, node: ast.IfExp) -> ast.IfExp:
        self.generic_visit(node)
        node.body, node.orelse = _guarded(node.body), _guarded(node.orelse)
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.BoolOp:
        self.generic_visit(node)
        node.values = node.values[:1] + [_guarded(value) for value in node.values[1:]]
        return node


def wrap_compile_and_exec(compile_and_exec: Callable[..., Any]) -> Callable[..., Any]:
    """FunctionRewriter._compile_and_exec (how Triton's interpreter makes the function it runs
    from a kernel's source) where each statement of a notebook's kernel, and each expression
    Python may skip, first calls :func:`_ran` (_Guard). The call
    reaches it through a closure, not a global: the notebook owns the kernel's globals."""
    def compile_guarded(self, transformed_ast):
        if getattr(self.fn, "__module__", None) != "__main__":
            return compile_and_exec(self, transformed_ast)
        kernel = _Guard().generic_visit(transformed_ast.body[0])  # its body, not the def
        scope = ast.parse("def tilegym_scope(tilegym_ran):\n    pass").body[0]
        scope.body = [kernel, ast.Return(ast.Name(kernel.name, ast.Load()))]
        module = ast.fix_missing_locations(ast.Module([scope], type_ignores=[]))
        fn_globals = self.fn.__globals__
        for name, value in vars(interpreter).items():  # as Triton's own _compile_and_exec does
            fn_globals.setdefault(name, value)
        made: dict = {}
        exec(compile(module, self.filename, "exec"), fn_globals, made)
        return made["tilegym_scope"](functools.partial(_ran, (self.filename, kernel.name)))
    return compile_guarded
