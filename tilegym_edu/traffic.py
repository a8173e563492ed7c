"""Global-memory traffic of Triton kernels, counted in Triton's interpreter.

A GPU profiler reports the bytes a kernel moves between memory and the chip. Without one (or
without a GPU) we can still count what the kernel *asks for*: run it in Triton's interpreter
and add up, over every program instance, the bytes of every ``tl.load`` and ``tl.store``
(tensor descriptors' too; an atomic counts as a load and a store of each element it touches;
lanes switched off by a mask move nothing). That is the traffic the kernel would cause if no
cache helped: the right number for comparing algorithms (a tiled matmul loads each element far
fewer times than a naive one), and an upper bound on what a real GPU moves.

``count_traffic(fn, *args)`` runs ``fn`` (a kernel launch, or a wrapper that launches kernels)
and counts every kernel it launches. It works in both modes: on a GPU, kernels defined for the
GPU are run through the interpreter for the count, on the same tensors (the interpreter copies
them to the host and back). Keep the inputs small: the interpreter costs milliseconds per
program instance.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
from triton.runtime import interpreter
from triton.runtime.jit import JITFunction

from tilegym_edu import compat


@dataclass(frozen=True)
class Traffic:
    """What kernels asked of global memory: bytes summed over all program instances."""

    loaded_bytes: int
    stored_bytes: int
    programs: int        # program instances run
    launches: int        # kernel launches

    @property
    def total_bytes(self) -> int:
        return self.loaded_bytes + self.stored_bytes


class _Counter:
    def __init__(self) -> None:
        self.loaded = self.stored = self.programs = self.launches = 0

    def result(self) -> Traffic:
        return Traffic(self.loaded, self.stored, self.programs, self.launches)


_MISSING = object()


def _element_bytes(ptrs) -> int:
    return ptrs.get_element_ty().primitive_bitwidth // 8


@contextlib.contextmanager
def _counting(counter: _Counter) -> Iterator[None]:
    builder = interpreter.InterpreterBuilder
    load, store = builder.create_masked_load, builder.create_masked_store
    atomic_rmw, atomic_cas = builder.create_atomic_rmw, builder.create_atomic_cas
    set_grid_idx, run = builder.set_grid_idx, interpreter.InterpretedFunction.run
    jit_run, jit_call = JITFunction.run, JITFunction.__call__

    def counted_load(self, ptrs, mask, *rest, **kwargs):
        counter.loaded += int(np.count_nonzero(mask.data)) * _element_bytes(ptrs)
        return load(self, ptrs, mask, *rest, **kwargs)

    def counted_store(self, ptrs, value, mask, *rest, **kwargs):
        counter.stored += int(np.count_nonzero(mask.data)) * _element_bytes(ptrs)
        return store(self, ptrs, value, mask, *rest, **kwargs)

    # an atomic reads and writes each element it touches (tl.atomic_add(p, 0) is a load: round 7
    # of the red team read a matmul's inputs so, uncounted)
    def counted_atomic_rmw(self, op, ptr, val, mask, *rest, **kwargs):
        moved = int(np.count_nonzero(mask.data)) * _element_bytes(ptr)
        counter.loaded += moved
        counter.stored += moved
        return atomic_rmw(self, op, ptr, val, mask, *rest, **kwargs)

    def counted_atomic_cas(self, ptr, *rest, **kwargs):
        moved = int(np.size(ptr.data)) * _element_bytes(ptr)
        counter.loaded += moved
        counter.stored += moved
        return atomic_cas(self, ptr, *rest, **kwargs)

    def counted_program(self, *args, **kwargs):
        counter.programs += 1
        return set_grid_idx(self, *args, **kwargs)

    def counted_run(self, *args, **kwargs):
        counter.launches += 1
        fn = self.fn
        defaults = [*(fn.__defaults__ or ()), *(fn.__kwdefaults__ or {}).values()]
        containers = _containers([*args, *kwargs.values(), *defaults])
        if containers:   # a kernel could keep what it loaded in one, between programs (its own
            # default arguments too: round 11 of the red team)
            raise TypeError(f"a kernel argument is a Python {containers[0]}: pass tensors, "
                            "numbers and constexprs")
        return run(self, *args, **kwargs)

    # Kernels compiled for a GPU run through the interpreter while counting, nested calls too.
    def interpreted_run(self, *args, **kwargs):
        return interpreter.InterpretedFunction(self.fn).run(*args, **kwargs)

    def interpreted_call(self, *args, **kwargs):
        return interpreter.InterpretedFunction(self.fn)(*args, **kwargs)

    # The interpreter patches triton.language while it runs and, for nested calls, does not
    # always undo it; harmless in interpreter mode, fatal to later GPU compiles. Remember the
    # first value of everything it patches and put all of it back at the end.
    originals: dict[tuple[int, str], tuple[object, str, object]] = {}
    set_attr = interpreter._LangPatchScope.set_attr

    def recorded_set_attr(self, obj, name, value):
        originals.setdefault((id(obj), name), (obj, name, getattr(obj, name, _MISSING)))
        set_attr(self, obj, name, value)

    builder.create_masked_load, builder.create_masked_store = counted_load, counted_store
    builder.create_atomic_rmw, builder.create_atomic_cas = counted_atomic_rmw, counted_atomic_cas
    builder.set_grid_idx, interpreter.InterpretedFunction.run = counted_program, counted_run
    JITFunction.run, JITFunction.__call__ = interpreted_run, interpreted_call
    interpreter._LangPatchScope.set_attr = recorded_set_attr
    try:
        yield
    finally:
        builder.create_masked_load, builder.create_masked_store = load, store
        builder.create_atomic_rmw, builder.create_atomic_cas = atomic_rmw, atomic_cas
        builder.set_grid_idx, interpreter.InterpretedFunction.run = set_grid_idx, run
        JITFunction.run, JITFunction.__call__ = jit_run, jit_call
        interpreter._LangPatchScope.set_attr = set_attr
        for obj, name, value in originals.values():
            if value is not _MISSING:
                setattr(obj, name, value)
            elif name in vars(obj):
                delattr(obj, name)


def _containers(values: list[Any]) -> list[str]:
    """The type names of the mutable Python containers among ``values`` and in their tuples."""
    found, stack = [], list(values)
    while stack:
        value = stack.pop()
        if isinstance(value, tuple):
            stack.extend(value)
        elif isinstance(value, (dict, list, set, bytearray)):
            found.append(type(value).__name__)
    return found


def count_traffic(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Traffic:
    """Run ``fn(*args, **kwargs)`` with every Triton kernel it launches in the interpreter, and
    return the bytes they loaded and stored.

    Example: ``count_traffic(add, x, y).loaded_bytes == 2 * x.nbytes``.
    """
    compat.patch_interpreter()
    counter = _Counter()
    with _counting(counter):
        fn(*args, **kwargs)
    return counter.result()
