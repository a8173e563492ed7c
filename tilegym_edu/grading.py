"""What the test cells of the lessons call: correctness, speed and the shortcut guard.

* :func:`assert_correct` checks a learner's function against a float64 reference
  (:mod:`tilegym_edu.check`) with the call guarded: inside it PyTorch may allocate, view and
  copy tensors, but any arithmetic (``torch.matmul``, ``F.conv2d``, ``x * y`` ...) raises
  :class:`LibraryShortcut`, so the work must be done by the learner's kernels. Tensors allocated
  inside the call are filled with NaN, so elements a kernel never writes fail.
* :func:`assert_bandwidth_fraction` and :func:`assert_speedup` time the learner's function
  against a baseline in this process (:mod:`tilegym_edu.bench`), check the outputs of the timed
  runs, and compare the ratio with the course's threshold table (:func:`threshold`). Without a
  GPU they raise :class:`NeedsGPU`, which the grade table reports as "needs GPU".
"""
from __future__ import annotations

import functools
import math
import os
import random
import statistics
import time
import tomllib
import types
import weakref
from dataclasses import dataclass
from importlib import resources
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch
from torch.utils._python_dispatch import _disable_current_modes

from tilegym_edu import bench, device, figures, lesson_data, traffic
from tilegym_edu.check import (Case, check, compare_output, explain, generator_on,
                               tensors_in, to_reference)
from tilegym_edu.dispatch_mode import DispatchMode


class NeedsGPU(Exception):
    """A check that means something only on a GPU was asked for in interpreter mode."""


class LibraryShortcut(Exception):
    """A graded call used PyTorch (or a reference kernel) to do the work it must do itself."""


class SubmissionRefused(Exception):
    """The grader's audit refused a cell of the learner's code (tilegym_edu.audit): it ran
    this instead, naming the line and the rule."""


#: PyTorch operations a graded call may use: allocation, views, copies and dtype conversion.
#: These are ATen operator names; everything else (arithmetic, reductions, matmul, conv,
#: attention) raises LibraryShortcut while the call runs.
ALLOWED_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
    "zeros", "zeros_like", "new_zeros", "zero_", "fill_", "full", "full_like", "new_full",
    "view", "_unsafe_view", "reshape", "as_strided", "t", "transpose", "permute", "expand",
    "squeeze", "unsqueeze", "select", "slice", "unbind", "split", "split_with_sizes", "narrow",
    "alias", "detach", "lift_fresh", "clone", "copy_", "_to_copy", "contiguous",
    "set_", "resize_", "record_stream", "view_as_real", "view_as_complex",
})
_ALLOCATING_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty",
                             "new_empty_strided"})

_guard_depth = 0  # >0 while a graded call runs

#: set by the grader in the environment of a grading kernel (tilegym_edu.autograde.grade)
GRADING_ENV = "TILEGYM_GRADING"


class _ShortcutGuard(DispatchMode):
    """Raises on any PyTorch operation outside ALLOWED_OPS (plus ``allow``); with ``poison``,
    NaN-fills every floating-point tensor allocated uninitialised, so unwritten output
    elements show."""

    def __init__(self, allow: Iterable[str] = (), poison: bool = True):
        super().__init__()
        self.allowed = ALLOWED_OPS | frozenset(allow)
        self.poison = poison

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name not in self.allowed:
            raise LibraryShortcut(
                f"the graded call used torch operation '{name}' ({func}). Graded functions "
                "must do their arithmetic in your Triton kernel; PyTorch may only allocate, "
                "view and copy tensors here.")
        out = func(*args, **(kwargs or {}))
        if (self.poison and name in _ALLOCATING_OPS and isinstance(out, torch.Tensor)
                and out.is_floating_point()):
            with _disable_current_modes():   # the grader's write: no other mode counts it
                out.fill_(math.nan)
        return out


class HeldMemory(DispatchMode):
    """While active, tracks the tensor storage created by PyTorch operations and
    :meth:`held_bytes` says how much of it is still alive (a storage once, however many views
    hold it): what the code running inside holds at that moment, in bytes. Reading tensor
    values into Python (``float(t)``, printing) raises: numbers kept in Python would hide from
    the count. Lesson 04's streaming exercise kept a clone of every block it was given, which
    watching the blocks it was handed could not see (round 12 of the red team)."""

    def __init__(self):
        super().__init__()
        self._storages: dict[int, tuple[int, list[weakref.ref]]] = {}
        self._written: dict[int, int] = {}   # storage made before, written inside: held

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.overloadpacket.__name__ == "_local_scalar_dense":
            raise AssertionError("a tensor's values were read into Python here (float(), int(), "
                                 "print ...): keep them in tensors")
        # a tensor made before and written here holds what was written for the rest of the
        # call (round 13: a scratch tensor made in another cell got a copy of every block)
        for arg, value in zip(func._schema.arguments, [*args, *[None] * len(kwargs)]):
            value = kwargs.get(arg.name, value)
            if (isinstance(value, torch.Tensor) and arg.alias_info is not None
                    and arg.alias_info.is_write
                    and value.untyped_storage().data_ptr() not in self._storages):
                storage = value.untyped_storage()
                self._written[storage.data_ptr()] = storage.nbytes()
        out = func(*args, **kwargs)
        inputs = {t.untyped_storage().data_ptr() for t in _tensors([*args, *kwargs.values()])}
        for t in _tensors(out):
            storage = t.untyped_storage()
            entry = self._storages.get(storage.data_ptr())
            if entry is not None and any(ref() is not None for ref in entry[1]):
                entry[1].append(weakref.ref(t))          # a view of storage made here
            elif storage.data_ptr() not in inputs:       # new storage (or an address reused)
                self._storages[storage.data_ptr()] = (storage.nbytes(), [weakref.ref(t)])
        return out

    def held_bytes(self) -> int:
        """Bytes of the storages created inside that some tensor still holds, and of those
        made before that were written inside."""
        return sum(self._written.values()) + sum(
            nbytes for nbytes, refs in self._storages.values()
            if any(ref() is not None for ref in refs))


def guarded_call(fn: Callable[..., Any], args: Sequence[Any], allow: Iterable[str] = (),
                 poison: bool = True) -> Any:
    """``fn(*args)`` with library shortcuts forbidden and (``poison``) fresh allocations
    NaN-filled."""
    global _guard_depth
    _guard_depth += 1
    try:
        with _ShortcutGuard(allow, poison):
            return fn(*args)
    finally:
        _guard_depth -= 1


def in_graded_call() -> bool:
    """Whether a graded call (guarded_call, guarded_copy) is running now."""
    return _guard_depth > 0


#: the types a worked-out answer is made of (formula_answer), each exactly: no subclass, so no
#: method of the learner's runs when the tests compare it
_PLAIN_TYPES = (int, float, bool, type(None), str, range)
#: lazily made sequences that formula_answer turns into tuples (inside the graded call)
_LAZY_TYPES = (types.GeneratorType, map, zip, filter, reversed, enumerate)


def _plain_value(value: Any, name: str) -> Any:
    if type(value) in (tuple, list):
        return type(value)(_plain_value(v, name) for v in value)
    if type(value) in _LAZY_TYPES:
        return tuple(_plain_value(v, name) for v in value)
    if type(value) in _PLAIN_TYPES:
        return value
    raise TypeError(f"your `{name}` returned a {type(value).__name__}: answer with plain "
                    "Python numbers (int or float), or tuples and lists of them")


def formula_answer(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` for an exercise whose answer is worked out rather than run (the bytes a
    kernel moves, its tiles, a pipeline's schedule). It runs as a graded call: no PyTorch
    arithmetic, no kernel of the course's, no traffic count (round 23 of the red team returned
    what count_traffic measured of the learner's own kernel). Its value must be plain Python,
    each element exactly an int, float, bool, None, string or range, in tuples and lists
    (round 23 returned an object equal to anything, from a class enum made); a generator
    comes back as a tuple."""
    name = getattr(fn, "__name__", "function")
    return guarded_call(lambda: _plain_value(fn(*args), name), (), poison=False)


def guarded_copy(fn: Callable[..., Any], args: Sequence[Any], allow: Iterable[str] = ()) -> Any:
    """guarded_call(fn, args, allow), its tensor outputs copied while the guard still holds
    and the originals dropped there: learner code that runs later (a finalizer that the
    original's release sets off, round 5 of the red team) can change nothing that is
    compared, and what it does while they are dropped runs under the guard."""
    global _guard_depth
    _guard_depth += 1
    try:
        with _ShortcutGuard(allow, True):
            out = fn(*args)
            with _disable_current_modes():   # the grader's copy: a traffic count leaves it out
                copied = _detached_copy(out)
            del out
            return copied
    finally:
        _guard_depth -= 1


def without_allowances(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, which inside a graded call runs with ALLOWED_OPS alone, whatever ``allow`` the
    call was graded with. The lesson's own code may need an operation that the learner's
    functions it calls must not use: lesson 06's model looks up its embedding (``index``) and
    adds its residuals (``add``), and with those two allowed for the whole call a learner's
    SwiGLU, matmul and attention were built from table lookups and additions, with no kernel
    (round 22 of the red team). What ``fn`` returns must be a plain ``torch.Tensor``: an
    object whose methods the lesson's code calls later would run them with the allowance
    (round 23 returned one whose ``.view()`` did the SwiGLU by table lookups), and one with no
    autograd graph (round 24's graph held a generator whose ``finally`` did it when the model
    freed the tensor). Outside a graded call ``fn`` runs as it is."""
    @functools.wraps(fn)
    def strictly_guarded(*args, **kwargs):
        if not _guard_depth:
            return fn(*args, **kwargs)
        with _ShortcutGuard(poison=False):   # the call's own guard poisons allocations
            out = fn(*args, **kwargs)
        name = getattr(fn, "__name__", "function")
        if type(out) is not torch.Tensor:
            raise TypeError(f"your `{name}` returned a {type(out).__name__}, not a "
                            "torch.Tensor: return the output tensor itself")
        if out.grad_fn is not None:   # its graph holds your code's objects until it is freed
            raise TypeError(f"your `{name}` returned a tensor with an autograd graph "
                            f"({type(out.grad_fn).__name__}): the model runs without "
                            "gradients; return a tensor that needs none")
        return out
    return strictly_guarded


def forbidden_in_graded_calls(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator for the course's reference kernels: calling one inside a graded call raises.
    On a ``@triton.jit`` kernel it adds a pre-run hook instead, so a launch of the raw kernel
    (``kernel[grid](...)``) inside a graded call raises too."""
    if hasattr(fn, "add_pre_run_hook"):
        name = (getattr(fn, "__name__", None)
                or getattr(getattr(fn, "fn", None), "__name__", "kernel"))

        def refuse_launch(*args, **kwargs):
            if _guard_depth:
                raise LibraryShortcut(f"the graded call launched the course's reference kernel "
                                      f"'{name}'; write your own kernel.")
        fn.add_pre_run_hook(refuse_launch)
        return fn

    def wrapper(*args, **kwargs):
        if _guard_depth:
            raise LibraryShortcut(f"the graded call used the course's reference "
                                  f"'{fn.__qualname__}'; write your own kernel.")
        return fn(*args, **kwargs)
    wrapper.__name__, wrapper.__qualname__, wrapper.__doc__ = (
        fn.__name__, fn.__qualname__, fn.__doc__)
    wrapper.__wrapped__ = fn
    return wrapper


def refuse_triton_in_graded_calls(language: str) -> None:
    """From now on, in this process, a Triton kernel launched inside a graded call raises
    :class:`LibraryShortcut`, naming ``language``, the one the lesson grades (lesson 07:
    "cuTile"). Without it, lesson 03's or 04's Triton kernels pasted into lesson 07 would pass its
    cells. The check sits in Triton's launch hook, which every compiled launch calls (through
    ``kernel[grid]`` and a compiled kernel's own ``[grid]`` alike; the audit refuses what a
    launch without the hook needs). The grader's Triton baselines run outside graded calls.
    Interpreted kernels call no hook: the lessons that need this run their kernels on a GPU."""
    def refuse(metadata: Any) -> None:
        if _guard_depth:
            # Triton's launch metadata: a LazyDict, whose get() makes the dict
            data = metadata.get() if type(metadata).__name__ == "LazyDict" else metadata
            name = (data or {}).get("name", "kernel")
            raise LibraryShortcut(
                f"the graded call launched the Triton kernel '{name}': this lesson grades "
                f"{language} kernels. Write the kernel in {language} and launch it from your "
                f"function.")
    import triton
    if hasattr(triton, "knobs"):   # Triton >= 3.4: a chain of hooks
        triton.knobs.runtime.launch_enter_hook.add(refuse)
    else:                          # Triton 3.2-3.3: one hook, on the class
        triton.compiler.CompiledKernel.launch_enter_hook = refuse


def assert_correct(fn: Callable[..., Any], reference: Callable[..., torch.Tensor],
                   make_inputs: Callable[[Case, torch.Generator], Sequence[Any]],
                   cases: Iterable[Case], seeds: Iterable[int] = (0, 1, 2), *,
                   tolerances: Mapping[torch.dtype, float] | None = None,
                   allow: Iterable[str] = ()) -> None:
    """Fail with the first failing case (and how many failed) unless ``fn`` matches
    ``reference`` on every case and seed; either way, show the largest error (a figure).
    Arguments as for :func:`tilegym_edu.check.check`; ``allow`` names extra torch operations
    the call may use."""
    allow = tuple(allow)
    results = check(fn, reference, make_inputs, list(cases), graded_seeds(seeds),
                    tolerances=tolerances, call=lambda f, args: guarded_copy(f, args, allow))
    lesson_data.check_now()    # what the comparison read is what the lesson made
    compared = [figures.error(r.error, r.tolerance, 1) for r in results if r.error is not None]
    if compared:
        worst = figures.closest(compared)
        figures.emit(figures.error(worst["value"], worst["tolerance"], len(compared)))
    failed = [r for r in results if not r.passed]
    if failed:
        more = "".join(f"\n  also: {r.describe()}" for r in failed[1:4])
        raise AssertionError(f"{len(failed)} of {len(results)} checks failed. First: "
                             f"{failed[0].describe()}{more}")


def assert_traffic(fn: Callable[..., Any], args: Sequence[Any],
                   reference: Callable[..., torch.Tensor], dtype: torch.dtype, *,
                   what: str, stores: int, loads_at_most: float | None = None,
                   program_loads_at_most: float | None = None,
                   held_at_most: int | None = None,
                   store_hint: str = "", load_hint: str = "",
                   held_hint: str = "") -> traffic.Traffic:
    """Count the global-memory traffic of one guarded call ``fn(*args)`` (in Triton's interpreter,
    on any machine: tilegym_edu.traffic) and fail unless it stored exactly ``stores`` bytes,
    loaded at most ``loads_at_most`` (when given) and no more than ``program_loads_at_most`` in
    any one program of its kernels (when given: round 28 of the red team met lesson 02's total
    with one program that computed all of C, untiled), that no program held more than
    ``held_at_most`` bytes at once (when given: rounds 26-28 of the red team took a plain
    softmax over an attention row's every score, loaded at once, in column slices or as eight
    blocks, within the total), and returned what
    ``reference`` returns (a kernel that stores the right number of wrong bytes fails too).
    ``what`` names the case in every message; the hints follow the failure they explain.
    Shows the counts (a figure for the grade table) and returns them, launch by launch too.
    What PyTorch's copies and fills in ``fn`` move counts too (an im2col matrix built with
    them: round 13 of the red team). The floating-point inputs are shuffled in place first
    (same values, a new order each time), so no answer exists before the call. The inputs
    must come back unchanged: the reference reads copies taken before the call (a red team's
    kernel zeroed its inputs and stored zeros, which the reference then agreed with)."""
    # the floating-point inputs' elements in an order nobody knows in advance: the test cells
    # draw them from fixed seeds, and an answer computed beforehand from those (round 12 of
    # the red team: a copy kernel stored it) is wrong now
    order = torch.Generator().manual_seed(int.from_bytes(os.urandom(6), "little"))
    for a in args:
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            _shuffle_(a, order)
    reference_inputs = [to_reference(a) for a in args]
    originals = [a.clone() if isinstance(a, torch.Tensor) else None for a in args]
    outputs = []
    counted = traffic.count_traffic(lambda: outputs.append(guarded_copy(fn, args)))
    loaded, stored = counted.loaded_bytes, counted.stored_bytes
    budget = f" (budget {loads_at_most:,.0f})" if loads_at_most is not None else ""
    figures.emit(figures.traffic(loaded, loads_at_most or 0, stored, stores),
                 shown=f"{what}: loaded {loaded:,} bytes{budget}, stored {stored:,} (the output "
                       f"holds {stores:,})")
    changed = [i for i, (a, o) in enumerate(zip(args, originals))
               if o is not None and not torch.equal(a, o)]
    if changed:
        raise AssertionError(f"{what}: the counted run modified its input argument(s) {changed}: "
                             "a kernel may write only its output")
    if stored != stores:
        by_torch = _by_torch(counted.torch_stored_bytes)
        raise AssertionError(f"{what}: stored {stored:,} bytes{by_torch}, but the output holds "
                             f"{stores:,}: store each output element once and nothing else"
                             f"{store_hint}")
    if loads_at_most is not None and loaded > loads_at_most:
        by_torch = _by_torch(counted.torch_loaded_bytes)
        raise AssertionError(f"{what}: loaded {loaded:,} bytes{by_torch}, over the budget of "
                             f"{loads_at_most:,.0f}{load_hint}")
    most = max(counted.per_launch, key=lambda launch: launch.busiest_program_loaded_bytes,
               default=None)
    if (program_loads_at_most is not None and most
            and most.busiest_program_loaded_bytes > program_loads_at_most):
        raise AssertionError(f"{what}: a program of {most.kernel} loaded "
                             f"{most.busiest_program_loaded_bytes:,} bytes, more than the "
                             f"{program_loads_at_most:,.0f} one tile of the output needs"
                             f"{load_hint}")
    busiest = max(counted.per_launch, key=lambda launch: launch.most_held_bytes,
                  default=None)
    if held_at_most is not None and busiest and busiest.most_held_bytes > held_at_most:
        shape = " x ".join(str(n) for n in busiest.largest_tensor_shape)
        raise AssertionError(f"{what}: a program of {busiest.kernel} held "
                             f"{busiest.most_held_bytes:,} bytes at once (its values, "
                             f"pointers and masks together; the largest one {shape}), more than "
                             f"the {held_at_most:,} the tiles need{held_hint}")
    passed, _, message = compare_output(outputs[0], reference(*reference_inputs), dtype)
    if not passed:
        raise AssertionError(f"{what}: the counted run's output is wrong: {message}")
    lesson_data.check_now()
    return counted


def _by_torch(nbytes: int) -> str:
    """What a traffic message adds when PyTorch operations outside the kernels moved bytes."""
    return (f" ({nbytes:,} of them by PyTorch operations outside your kernels: a copy, fill or "
            "conversion in the wrapper moves memory too)") if nbytes else ""


def graded_seeds(seeds: Iterable[int]) -> tuple[int, ...]:
    """``seeds`` as given when a learner runs a test cell; in a grading kernel, seeds no one
    can know in advance (the same offset, drawn afresh for every call, added to each), so no
    answer can be computed ahead for the inputs. A failure names the seed it used."""
    seeds = tuple(seeds)
    if not os.environ.get(GRADING_ENV):
        return seeds
    offset = 1000 * int.from_bytes(os.urandom(3), "little")
    return tuple(offset + seed for seed in seeds)


def drawn_cases(draw: Callable[[random.Random], Any], count: int) -> list[Any]:
    """``count`` cases for a hidden test, each ``draw(rng)``: in a grading kernel from a
    generator seeded afresh (as graded_seeds), so no table of answers serves the next grading;
    otherwise from seed 0, the same every run. A hidden test lists its fixed cases and adds
    these: round 22 of the red team read each fixed hidden case of a formula exercise out of
    the feedback (what the learner's function was called with is the learner's to print) and
    a lookup table earned full marks."""
    seed = int.from_bytes(os.urandom(8), "little") if os.environ.get(GRADING_ENV) else 0
    rng = random.Random(seed)
    return [draw(rng) for _ in range(count)]


@dataclass(frozen=True)
class Threshold:
    """One row of the course's threshold table (tilegym_edu/thresholds.toml)."""

    lesson: str
    name: str
    minimum: float          # the ratio a learner's kernel must reach
    metric: str             # what the ratio is
    h200: float             # what the reference solution measured on an H200
    margin: str             # why the minimum sits where it does relative to the H200 figure
    source: str             # where the H200 figure is recorded
    versus: str = "baseline"  # what it is measured against, in a word or two: "cuDNN", "copy"


def threshold(lesson: str, name: str) -> Threshold:
    """The threshold ``name`` of ``lesson`` from the course's table."""
    table = tomllib.loads(resources.files("tilegym_edu").joinpath("thresholds.toml").read_text())
    try:
        row = table[lesson][name]
    except KeyError:
        raise KeyError(f"no threshold {lesson}.{name} in tilegym_edu/thresholds.toml") from None
    return Threshold(lesson=lesson, name=name, minimum=row["minimum"], metric=row["metric"],
                     versus=row["versus"],
                     h200=row["h200"], margin=row["margin"], source=row["source"])


def require_gpu(what: str) -> None:
    """Raise NeedsGPU, saying what could not be graded, unless kernels run on a GPU."""
    if not device.ON_GPU:
        raise NeedsGPU(f"{what} needs an NVIDIA GPU: this notebook runs in Triton's CPU "
                       "interpreter (no CUDA GPU visible), which can neither time GPU work nor "
                       "run CUDA C or cuTile. Run it on a machine with a CUDA GPU to earn these "
                       "points.")


def require_tensor_descriptors(what: str) -> None:
    """Raise NeedsGPU where tensor descriptors (TMA) cannot run: on a GPU below compute
    capability 9.0 (Hopper), or under a Triton whose interpreter lacks them. In interpreter
    mode with a recent Triton they run (on the CPU), so correctness can still be graded."""
    try:
        import triton.tools.tensor_descriptor  # noqa: F401
    except ImportError:
        raise NeedsGPU(f"{what} needs tensor descriptors, which this Triton "
                       f"({triton.__version__}) does not have: upgrade Triton") from None
    facts = device.info()
    if facts and facts.compute_capability < (9, 0):
        major, minor = facts.compute_capability
        raise NeedsGPU(f"{what} needs a GPU with the tensor memory accelerator (compute "
                       f"capability 9.0 or newer: H100, H200, B200); this {facts.name} is "
                       f"{major}.{minor}, so this cell is not graded here")


#: Time still pending after the candidate's own stream finished, above which its work is taken
#: to run on another stream: LEFT_BEHIND_US, or LEFT_BEHIND_FRACTION of the time its own stream
#: took, whichever is larger, on top of what a synchronize with nothing to wait for takes in the
#: same process. An idle GPU's synchronize costs ~10-15 µs of host time in a script on the H200;
#: inside a notebook's kernel it measured more (lesson 05's conv2d, honest: 35 µs, three tries
#: in a row, run 27 of 2026-12-04), and after a call that ran thousands of host operations
#: (lesson 06's model: 3.5 ms of GPU work) 50-90 µs with every kernel on the current stream,
#: while a side stream hides all of the work, so the fraction separates the two.
LEFT_BEHIND_US = 25.0
LEFT_BEHIND_FRACTION = 0.1


def _pending_us(step: Callable[[], Any]) -> tuple[float, float]:
    """(µs of GPU time ``step`` queued on the current stream, µs a device-wide synchronize then
    waited on the host), the GPU idle before ``step`` runs."""
    torch.cuda.synchronize()
    began = torch.cuda.Event(enable_timing=True)
    done = torch.cuda.Event(enable_timing=True)
    began.record()
    step()
    done.record()
    done.synchronize()
    start = time.perf_counter()
    torch.cuda.synchronize()
    return began.elapsed_time(done) * 1e3, (time.perf_counter() - start) * 1e6


def assert_no_work_left_behind(candidate: Callable[..., Any], args: Sequence[Any],
                               tries: int = 3) -> None:
    """Fail if ``candidate(*args)`` leaves GPU work running after everything it queued on the
    current stream is done: work on a side stream, which CUDA-event timing of the current
    stream never sees (a known way to fake speed). Three tries must all show it, each against
    a synchronize that had nothing to wait for, measured in between."""
    own, left, idle = [], [], []
    for _ in range(tries):
        own_us, left_us = _pending_us(lambda: candidate(*args))
        own.append(own_us)
        left.append(left_us)
        idle.append(_pending_us(lambda: None)[1])
    # the median idle synchronize: no candidate can inflate it (each starts on an idle GPU)
    idle_us = statistics.median(idle)
    allowed = max(LEFT_BEHIND_US, LEFT_BEHIND_FRACTION * max(own)) + idle_us
    if min(left) > allowed:
        raise AssertionError(
            f"the GPU was still busy {min(left):.0f} µs after your function's work on the current "
            f"stream had finished (which took {max(own):.0f} µs; a synchronize with nothing to "
            f"wait for took {idle_us:.0f} µs here): it ran work on another CUDA stream, which "
            "the timer cannot see. Launch on torch.cuda.current_stream(), or make it wait for "
            "your stream (torch.cuda.current_stream().wait_stream(side)) before returning.")


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in an output: a tensor, or the tensors of a tuple or list."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _shuffle_(t: torch.Tensor, generator: torch.Generator,
              values: torch.Tensor | None = None) -> None:
    """Write into ``t`` the elements of ``values`` (default: ``t`` itself) in a random order:
    the same values (so the same range, scale and validity: token ids stay token ids), in
    places a precomputed answer cannot know."""
    source = t if values is None else values
    # drawn where t lives: on the CPU a permutation of 10^8 elements takes seconds
    perm = torch.randperm(t.numel(), generator=generator_on(t.device, generator), device=t.device)
    t.copy_(source.reshape(-1)[perm].reshape(t.shape))


def _held_tensors(args: Sequence[Any]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(tensor, copy) for every tensor the non-tensor arguments hold (check.tensors_in: in
    their tuples, lists, dicts and attributes, a torch.nn.Module's parameters and buffers
    among them: the lesson 06 model's weights), each once."""
    found = {id(t): t for a in args if not isinstance(a, torch.Tensor)
             for t in tensors_in(a)}
    return [(t, t.detach().clone()) for t in found.values()]


class _CapturedCall:
    """One guarded call of the candidate on one input set, captured in a CUDA graph: what the
    timer replays is exactly the work that ran under the shortcut guard, and a candidate
    cannot tell a timed run from a checked one (there is no Python in a replay)."""

    def __init__(self, candidate: Callable[..., Any], args: Sequence[Any], allow: Iterable[str]):
        self.args = args
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):      # warm-up off the capture: compile, tune, allocate
            guarded_call(candidate, args, allow)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        rng_state = bench.default_generator().clone_state()
        try:
            # no NaN fills inside the graph: they would be timed; measure_speed poisons the
            # outputs once before the timed replays instead
            with torch.cuda.graph(self.graph):
                self.output = guarded_call(candidate, args, allow, poison=False)
        except Exception as exc:  # noqa: BLE001 - any capture failure: say what it means
            bench.recover_from_failed_capture(rng_state)
            if isinstance(exc, LibraryShortcut):
                raise
            raise AssertionError(
                f"your function could not be timed: capturing it in a CUDA graph failed "
                f"({explain(exc)}). A timed call must only queue GPU work on the current "
                "stream: no .cpu() or synchronize, no printing of tensors, no other streams "
                "left unjoined.") from None

    def __call__(self) -> None:
        self.graph.replay()


def measure_speed(candidate: Callable[..., Any], baselines: Mapping[str, Callable[[], Any]],
                  input_sets: Sequence[Sequence[Any]], reference: Callable[..., torch.Tensor],
                  dtype: torch.dtype, *, flops: float | None = None, bytes: float | None = None,
                  tolerances: Mapping[torch.dtype, float] | None = None,
                  allow: Iterable[str] = ()) -> list[bench.Measurement]:
    """Time ``candidate`` (rotating over ``input_sets``) interleaved with ``baselines``; the
    candidate's Measurement comes first. Every function is timed as CUDA-graph replays of its
    GPU work (a baseline that cannot be captured runs as it is), so host overhead counts on
    neither side.

    The candidate's timed work is its guarded call: each input set's call runs under the
    shortcut guard inside a CUDA graph capture, and the replays of those graphs are what is
    timed. Before timing, every input tensor is refilled with its original elements (as they
    were before the candidate first ran, so changing them gains nothing) in a random order, so
    the replays compute on inputs the candidate never saw while it ran; the tensors a
    non-tensor argument holds (a model's weights) must come back unchanged; afterwards the
    outputs of the timed replays are checked against ``reference`` on the shuffled inputs (in
    float64 on the GPU, or the CPU where the GPU has no room for it; a candidate that works in
    place is checked on one replay before timing). A candidate that leaves work on a side
    stream fails assert_no_work_left_behind; an impossible result is rejected.
    ``allow`` names extra torch operations the guarded call may use (as for assert_correct)."""
    require_gpu("this speed check")
    allow = tuple(allow)
    # the inputs as given, before the candidate ever sees them (it could change them)
    pristine = {id(t): (t, t.detach().clone())
                for args in input_sets for t in _tensors(list(args))}
    weights = _held_tensors(list({id(a): a for args in input_sets for a in args}.values()))
    guarded_call(candidate, input_sets[0], allow)  # the timed function must do its own arithmetic
    assert_no_work_left_behind(candidate, input_sets[0])
    calls = [_CapturedCall(candidate, args, allow) for args in input_sets]
    generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    for t, values in pristine.values():   # each tensor once, also one shared by input sets
        _shuffle_(t, generator, values)
    del pristine
    inputs = [tuple(to_reference(a, device.DEVICE) for a in call.args) for call in calls]
    in_place = [any(_shares_memory(o, t)
                    for o in _tensors(c.output) for t in _tensors(list(c.args)))
                for c in calls]
    outputs: list[Any] = [None] * len(calls)
    for i, call in enumerate(calls):
        for o in _tensors(call.output):
            if o.is_floating_point() and not in_place[i]:
                o.fill_(math.nan)          # an output the replays never write stays NaN
        if in_place[i]:
            call()
            outputs[i] = _detached_copy(call.output)
    state = {"next": 0}

    def rotate() -> None:
        calls[state["next"] % len(calls)]()
        state["next"] += 1

    measurements = bench.compare({"yours": rotate, **baselines}, flops=flops, bytes=bytes,
                                 graph_below_ms=math.inf, graphed=("yours",))
    torch.cuda.synchronize()
    for i, call in enumerate(calls):
        if not in_place[i]:
            outputs[i] = _detached_copy(call.output)
    if any(not torch.equal(t, before) for t, before in weights):
        raise AssertionError("your function changed tensors it was given inside another argument "
                             "(the model's weights): a timed call may write only its outputs")
    for i, (args, out) in enumerate(zip(inputs, outputs)):
        passed, error, message = compare_output(out, _reference_output(reference, args),
                                                dtype, tolerances)
        if not passed:
            raise AssertionError(f"the output of a timed run (input set {i}, its elements "
                                 f"shuffled after your function was captured) is wrong: {message}")
    for m in measurements:
        if m.problem:
            raise AssertionError(f"measurement of '{m.name}' rejected: {m.problem}")
    lesson_data.check_now()
    bench.print_table(measurements, baseline="yours")
    return measurements


def _reference_output(reference: Callable[..., torch.Tensor], args: Sequence[Any]) -> torch.Tensor:
    """``reference`` on float64 inputs, on the GPU: a speed check's problems are large, and
    float64 on the CPU takes seconds to minutes where the GPU takes milliseconds. Where the
    GPU has no room for it, on the CPU."""
    try:
        return reference(*args).cpu()
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return reference(*(to_reference(a) for a in args))


def _detached_copy(value: Any) -> Any:
    """A copy of a plain tensor, or of a plain tuple or list of them, made with torch's own
    methods; anything else (a Tensor subclass, whose `detach` could be the student's: round 6
    of the red team) comes back as it is, and the comparison refuses it."""
    if type(value) is torch.Tensor:  # noqa: E721 - exactly: a subclass's methods are not torch's
        return torch.Tensor.clone(torch.Tensor.detach(value))
    if type(value) is tuple or type(value) is list:   # `is`: a metaclass could answer ==
        return (tuple if type(value) is tuple else list)(_detached_copy(v) for v in value)
    return value


def assert_ratio(ratio: float, limit: Threshold) -> None:
    """Fail unless ``ratio`` reaches the threshold; say what was measured either way."""
    verdict = "passed" if ratio >= limit.minimum else "too slow"
    message = (f"{verdict}: {limit.metric} = {ratio:.2f}, threshold {limit.minimum:.2f} "
               f"(the reference solution reached {limit.h200:.2f} on an H200)")
    figures.emit(figures.ratio(ratio, limit.minimum, limit.versus, f"{limit.lesson}.{limit.name}"),
                 shown=message)
    if ratio < limit.minimum:
        raise AssertionError(message)



def assert_slowest_ratio(ratios: Mapping[str, float], limit: Threshold, label: str) -> None:
    """A speed cell over several layers: print ``label`` with every layer's ratio, name the
    slowest (the smallest ratio), and fail unless it reaches the threshold (assert_ratio)."""
    print(f"\n{label}: " + ", ".join(f"{name}: {r:.2f}" for name, r in ratios.items()))
    slowest = min(ratios, key=ratios.get)
    print(f"the slowest layer, {slowest}, counts")
    assert_ratio(ratios[slowest], limit)

def copy_baseline(nbytes: int) -> Callable[[], Any]:
    """A device-to-device copy moving ``nbytes`` in all (half read, half written)."""
    require_gpu("a copy-bandwidth baseline")
    return bench.device_copy(nbytes)


def assert_bandwidth_fraction(candidate: Callable[..., Any], input_sets: Sequence[Sequence[Any]],
                              reference: Callable[..., torch.Tensor], dtype: torch.dtype,
                              bytes: float, limit: Threshold, *,
                              tolerances: Mapping[torch.dtype, float] | None = None) -> None:
    """A memory-bound kernel's GB/s as a fraction of a device-to-device copy's, measured
    interleaved in this process; fails below ``limit``.

    Returns None on purpose, like every assert_* here: nbgrader takes a number left as a test
    cell's result for partial credit."""
    require_gpu(limit.metric)
    yours, copy = measure_speed(candidate, {"copy": copy_baseline(int(bytes))}, input_sets,
                                reference, dtype, bytes=bytes, tolerances=tolerances)
    assert_ratio(yours.gbs / copy.gbs, limit)


def assert_speedup(candidate: Callable[..., Any], baseline: Callable[..., Any],
                   input_sets: Sequence[Sequence[Any]], reference: Callable[..., torch.Tensor],
                   dtype: torch.dtype, limit: Threshold, *, flops: float | None = None,
                   bytes: float | None = None,
                   tolerances: Mapping[torch.dtype, float] | None = None,
                   allow: Iterable[str] = ()) -> None:
    """``candidate``'s speed over ``baseline``'s (same inputs), measured interleaved in this
    process; fails below ``limit``. Returns None (see assert_bandwidth_fraction).
    ``tolerances`` and ``allow`` as for measure_speed."""
    require_gpu(limit.metric)
    args = input_sets[0]
    yours, base = measure_speed(candidate, {"baseline": lambda: baseline(*args)}, input_sets,
                                reference, dtype, flops=flops, bytes=bytes, tolerances=tolerances,
                                allow=allow)
    assert_ratio(base.median_ms / yours.median_ms, limit)
