"""Loads and stores of Triton's interpreter kept inside the tensors a launch was given.

In the interpreter a kernel's pointers are host addresses, and nothing stops a pointer made from
an integer (``addr.to(tl.pointer_type(tl.float32))``) from reaching any memory of the Python
process: round 15 of the grader's red team hid a copy of every block of lesson 04's streaming
exercise in a tensor passed only as ``SCRATCH.data_ptr()``, where no PyTorch operation, and so
no count of held memory, ever saw it; the same route reads and writes the grader's own objects.
:func:`confine` (installed in the grading kernel, tilegym_edu.write_guard) makes every load,
store and atomic of an interpreted launch check its addresses: each element it touches must lie
in the storage of a tensor (or tensor descriptor) among the launch's arguments, else
:class:`OutOfBounds` names the kernel and what to do. A launch's arguments may be only tensors
(not as constexprs), numbers, strings, dtypes and tuples of them, and a kernel may not
launch another (rounds 15 and 16: a tensor or a function given as a constexpr ran PyTorch's
copies, or kept loaded values, in the middle of the launch). While its programs run, no PyTorch
operation may run, and the globals a kernel (and each kernel it calls) reads may be only
modules, kernels, Triton's and Python's builtin functions, dtypes, numbers, strings and tuples of
them (round 19 ran PyTorch's copies from an object's method in the middle of a launch, and kept
tiles in a list a kernel could reach). On a GPU, compiled kernels are not affected;
``count_traffic`` runs them through the interpreter, and there they are checked too.
"""
from __future__ import annotations

import dis
import functools
import inspect
import types

import numpy as np
import torch

from tilegym_edu import kernel_compiles
from tilegym_edu.dispatch_mode import DispatchMode


class OutOfBounds(Exception):
    """A kernel in Triton's interpreter touched memory outside the tensors it was given."""


#: the running launch, if any (a kernel cannot launch another): its kernel's name, its
#: arguments' storages as (first address, one past the last), and the mode that refuses PyTorch
#: while its programs run
_launches: list[tuple[str, list[tuple[int, int]], "_NoTorch"]] = []


def _storage_ranges(values) -> list[tuple[int, int]]:
    """(start, end) of the storage of every tensor among ``values``, in their tuples and in
    tensor descriptors (their ``base``)."""
    ranges, stack = [], list(values)
    while stack:
        value = stack.pop()
        if isinstance(value, torch.Tensor):
            storage = value.untyped_storage()
            ranges.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
        elif isinstance(value, tuple):
            stack.extend(value)
        elif isinstance(getattr(value, "base", None), torch.Tensor):
            stack.append(value.base)
    return ranges


def _refused(value, constexpr: bool) -> str:
    """What is wrong with ``value`` as a kernel argument ('' if nothing). The interpreter hands a
    kernel its constexprs unchanged and runs the kernel's body as Python, so anything callable
    or holding a tensor there runs or reaches PyTorch in the middle of the launch (round 15: a
    tensor's copy_; round 16: a function the kernel called, which built an im2col matrix, or
    kept loaded values between programs; round 17: the same function inside a kernel object)."""
    import triton.language as tl
    from triton.tools.tensor_descriptor import TensorDescriptor
    if isinstance(value, tuple):
        return next((why for v in value if (why := _refused(v, constexpr))), "")
    if isinstance(value, tl.constexpr):
        return _refused(value.value, constexpr)
    if isinstance(value, (torch.Tensor, TensorDescriptor)):
        return "a tensor given as a tl.constexpr" if constexpr else ""
    if isinstance(value, (bool, int, float, str, np.number, np.bool_, torch.dtype,
                          tl.dtype)) or value is None:
        return ""   # not a kernel either: round 17 hid a Python function in the `values` of a
        # @triton.heuristics kernel it passed
    return f"a {type(value).__name__}"


class _NoTorch(DispatchMode):
    """Entered while an interpreted launch's programs run: any PyTorch operation raises."""

    def __init__(self, kernel: str):
        super().__init__()
        self.kernel = kernel

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        raise OutOfBounds(f"kernel `{self.kernel}` ran the PyTorch operation `{func}` while its "
                          "programs ran: a kernel computes with `tl`'s operations only (in the "
                          "interpreter PyTorch would run as Python in the middle of the launch)")


def _global_refused(value) -> str:
    """What is wrong with ``value`` as a global a kernel reads ('' if nothing; a kernel is
    checked by :func:`check_globals` in its turn)."""
    import triton.language as tl
    if isinstance(value, tuple):
        return next((why for v in value if (why := _global_refused(v))), "")
    if isinstance(value, tl.constexpr):
        return _global_refused(value.value)
    if (isinstance(value, (types.ModuleType, types.BuiltinFunctionType, bool, int, float, str,
                           np.number, torch.dtype, tl.dtype)) or value is None
            or (isinstance(value, type) and value.__module__ == "builtins")):
        return ""
    if (getattr(value, "__module__", None) or "").split(".")[0] == "triton" or (
            type(value).__module__.split(".")[0] == "triton"):
        return ""   # tl.load, triton.cdiv, what the interpreter puts in a kernel's globals
    return f"a {type(value).__name__}"


def _kernel_function(value):
    """The Python function of a Triton kernel (None for anything else)."""
    fn = getattr(value, "fn", None)
    return fn if isinstance(fn, types.FunctionType) else None


@functools.lru_cache(maxsize=4096)
def _globals_read(code: types.CodeType) -> frozenset[str]:
    """The global names ``code`` loads (not the attribute names it reads: ``tl.cdiv`` reads no
    global ``cdiv``), its comprehensions' and nested code's included."""
    names = {i.argval for i in dis.get_instructions(code)
             if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _globals_read(const)
    return frozenset(names)


def _holds_one(value) -> bool:
    """Whether an argument is the int 1 or a tuple holding it (at any depth): a constant to
    Triton's compiler (round 32 of the red team: inside a tuple too)."""
    if type(value) is int:
        return value == 1
    return isinstance(value, tuple) and any(_holds_one(item) for item in value)


def _only_numbers(value) -> bool:
    """Whether an argument is a number, None or a tuple of those (at any depth)."""
    if isinstance(value, tuple):
        return all(_only_numbers(item) for item in value)
    return value is None or type(value) in (int, float, bool)


def check_globals(fn, seen: set | None = None) -> None:
    """Raise OutOfBounds unless every global ``fn`` (a kernel's Python function) reads, and those
    of each kernel it calls, is of a kind a kernel may read (:func:`_global_refused`)."""
    seen = set() if seen is None else seen
    if id(fn) in seen:
        return
    seen.add(id(fn))
    for name in sorted(_globals_read(fn.__code__) & fn.__globals__.keys()):
        value = fn.__globals__[name]
        inner = _kernel_function(value)
        if inner is not None:
            check_globals(inner, seen)
            continue
        why = _global_refused(value)
        if why:
            raise OutOfBounds(f"kernel `{fn.__name__}` reads the global `{name}`, {why}: a kernel "
                              "reads tl, other kernels, numbers, strings and dtypes; pass "
                              "anything else as an argument")


def check_addresses(pointers: np.ndarray, mask: np.ndarray | None, element_bytes: int,
                    what: str) -> None:
    """Raise OutOfBounds unless every address of ``pointers`` (where ``mask`` is on) and the
    ``element_bytes`` after it lie inside one storage of the running launch's arguments."""
    if not _launches:
        raise OutOfBounds(f"a Triton function {what} memory outside a kernel launch: launch "
                          "kernels with kernel[grid](...)")
    kernel, ranges, _ = _launches[-1]
    addresses = np.asarray(pointers, dtype=np.uint64).reshape(-1)
    if mask is not None:
        addresses = addresses[np.asarray(mask, dtype=bool).reshape(-1)]
    inside = np.zeros(addresses.shape, dtype=bool)
    for start, end in ranges:
        inside |= (addresses >= start) & (addresses + element_bytes <= end)
    if not inside.all():
        outside = int(addresses[~inside][0])
        raise OutOfBounds(f"kernel `{kernel}` {what} address {outside:#x}, outside every tensor "
                          "passed to it: a kernel may touch only its tensor arguments (an offset "
                          "in the wrong units, a missing mask, or a pointer made from an integer)")


def _leave(mode: _NoTorch) -> None:
    """Leave ``mode`` if this launch entered it and has not left it yet."""
    if getattr(mode, "tilegym_entered", False):
        mode.tilegym_entered = False
        mode.__exit__(None, None, None)


def confine() -> None:
    """Patch Triton's interpreter (once): a launch of a notebook's kernel is first compiled by
    Triton's compiler and runs only the code it compiled (kernel_compiles), a launch records
    its arguments' storages, and every load, store and atomic checks its addresses against
    them (check_addresses)."""
    from triton.runtime import interpreter
    executor, builder = interpreter.GridExecutor, interpreter.InterpreterBuilder
    if getattr(executor, "tilegym_confined", False):
        return
    init_args, call = executor._init_args_hst, executor.__call__
    restore_args = executor._restore_args_dev
    load, store = builder.create_masked_load, builder.create_masked_store
    atomic_rmw, atomic_cas = builder.create_atomic_rmw, builder.create_atomic_cas

    def bytes_of(pointers) -> int:
        return pointers.get_element_ty().primitive_bitwidth // 8

    def recorded_init_args(self, args_dev, kwargs):
        # checked before the interpreter touches them (it calls a tensor-like argument's methods)
        bound = inspect.getcallargs(self.fn, *args_dev, **kwargs)
        for name, value in bound.items():
            why = _refused(value, constexpr=name in self.constexprs)
            if why:
                raise OutOfBounds(f"kernel `{self.fn.__name__}`'s argument `{name}` is {why}: "
                                  "pass tensors (as pointers, without tl.constexpr), numbers, "
                                  "strings, dtypes and tuples of them")
        check_globals(self.fn)
        # an int argument equal to 1 (or a tuple holding one) is a constant to Triton's compiler
        # (Python ints), tensors to its interpreter: an int32 overflow then took a branch the
        # compiler had dropped, out of the compile check's sight (kernel_compiles); here it is
        # constant too
        ones = [name for name, value in bound.items()
                if _holds_one(value) and name not in self.constexprs]
        for name in ones:
            if not _only_numbers(bound[name]):
                raise OutOfBounds(f"kernel `{self.fn.__name__}`'s argument `{name}` is a tuple "
                                  "holding 1 beside tensors: pass the 1 as an argument of its "
                                  "own")
        self.constexprs = [*self.constexprs, *ones]
        args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
        _launches[-1][1].extend(_storage_ranges([*args_hst, *kwargs_hst.values()]))
        no_torch = _launches[-1][2]
        no_torch.__enter__()          # the programs run next; restore_args leaves it
        no_torch.tilegym_entered = True
        return args_hst, kwargs_hst

    def unguarded_restore_args(self, *args, **kwargs):
        _leave(_launches[-1][2])
        return restore_args(self, *args, **kwargs)

    def confined_call(self, *args, **kwargs):
        name = getattr(self.fn, "__name__", "kernel")
        if _launches:
            raise OutOfBounds(f"kernel `{_launches[-1][0]}` launched `{name}` from inside "
                              "itself: real Triton cannot; launch kernels from Python")
        _launches.append((name, [], _NoTorch(name)))
        if callable(self.grid):
            # the grid function gets a copy of the launch's arguments: round 21's put a Python
            # list in the dict the interpreter then hands the kernel, after they were checked
            grid = self.grid
            self.grid = lambda meta: grid(dict(meta))
        try:
            return call(self, *args, **kwargs)
        finally:
            _leave(_launches.pop()[2])

    def checked_load(self, ptrs, mask, *rest, **kwargs):
        check_addresses(ptrs.data, mask.data, bytes_of(ptrs), "loaded from")
        return load(self, ptrs, mask, *rest, **kwargs)

    def checked_store(self, ptrs, value, mask, *rest, **kwargs):
        check_addresses(ptrs.data, mask.data, bytes_of(ptrs), "stored to")
        return store(self, ptrs, value, mask, *rest, **kwargs)

    def checked_atomic_rmw(self, op, ptr, val, mask, *rest, **kwargs):
        check_addresses(ptr.data, mask.data, bytes_of(ptr), "updated (atomically)")
        return atomic_rmw(self, op, ptr, val, mask, *rest, **kwargs)

    def checked_atomic_cas(self, ptr, *rest, **kwargs):
        check_addresses(ptr.data, None, bytes_of(ptr), "updated (atomically)")
        return atomic_cas(self, ptr, *rest, **kwargs)

    executor._init_args_hst, executor.__call__ = recorded_init_args, confined_call
    executor._restore_args_dev = unguarded_restore_args
    builder.create_masked_load, builder.create_masked_store = checked_load, checked_store
    builder.create_atomic_rmw, builder.create_atomic_cas = checked_atomic_rmw, checked_atomic_cas
    # the notebook's kernels must also be ones Triton's compiler takes (kernel_compiles)
    interpreter.InterpretedFunction.run = kernel_compiles.wrap_run(
        interpreter.InterpretedFunction.run)
    # ... and run only the code the compiler visited for the launch
    rewriter = interpreter.FunctionRewriter
    rewriter._compile_and_exec = kernel_compiles.wrap_compile_and_exec(rewriter._compile_and_exec)
    executor.tilegym_confined = True
