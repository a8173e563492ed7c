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
"""
from __future__ import annotations

import contextlib
import re
import sys
import types
import warnings
from typing import Any, Callable, Iterator

from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.compiler.errors import CompilationError
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction, create_function_from_signature

#: what the kernels are compiled for: an H100 or H200 (compute capability 9.0, warps of 32)
TARGET = GPUTarget("cuda", 90, 32)

#: the launches already compiled: (function, the globals it reads, its arguments' specialization,
#: its options)
_compiled: set[tuple] = set()


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


def _compile(fn: Callable, args: tuple, kwargs: dict) -> None:
    """Compile ``fn`` to Triton's IR for TARGET, specialized as a launch with these arguments
    would be (JITFunction.run's steps up to the compile), unless that specialization of ``fn``,
    reading the globals it reads now, was compiled before."""
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
        return
    options, signature, constexprs, attrs = jit._pack_args(backend, kwargs, bound_args,
                                                           specialization, options)
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    with _pristine_language():
        ASTSource(jit, signature, constexprs, attrs).make_ir(
            TARGET, options, backend.get_codegen_implementation(options),
            backend.get_module_map(), context)
    _compiled.add(key)


def check(fn: Callable, args: tuple, kwargs: dict) -> None:
    """Raise NotCompilable if Triton's compiler refuses the notebook's kernel ``fn`` (a Python
    function) launched with ``args`` and ``kwargs`` (its launch options among them); kernels
    of modules pass unchecked."""
    if getattr(fn, "__module__", None) != "__main__":
        return
    options = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}
    try:
        # Triton 3.9 warns, once, that its fp-fusion default will change: nothing to the learner
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            _compile(fn, args, options)
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
    """InterpretedFunction.run with :func:`check` before each launch."""
    def checked_run(self, *args, **kwargs):
        check(self.fn, args, kwargs)
        return run(self, *args, **kwargs)
    return checked_run
