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

import math
import time
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch
import triton
from torch.utils._python_dispatch import TorchDispatchMode

from tilegym_edu import bench, device
from tilegym_edu.check import Case, check, compare_output


class NeedsGPU(Exception):
    """A check that means something only on a GPU was asked for in interpreter mode."""


class LibraryShortcut(Exception):
    """A graded call used PyTorch (or a reference kernel) to do the work it must do itself."""


#: PyTorch operations a graded call may use: allocation, views, copies and dtype conversion.
#: These are ATen operator names; everything else (arithmetic, reductions, matmul, conv,
#: attention) raises LibraryShortcut while the call runs.
ALLOWED_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
    "zeros", "zeros_like", "new_zeros", "zero_", "fill_", "full", "full_like", "new_full",
    "view", "_unsafe_view", "reshape", "as_strided", "t", "transpose", "permute", "expand",
    "squeeze", "unsqueeze", "select", "slice", "unbind", "split", "split_with_sizes", "narrow",
    "alias", "detach", "lift_fresh", "clone", "copy_", "_to_copy", "contiguous",
    "set_", "resize_", "_local_scalar_dense", "record_stream", "view_as_real", "view_as_complex",
})
_ALLOCATING_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty",
                             "new_empty_strided"})

_guard_depth = 0  # >0 while a graded call runs


class _ShortcutGuard(TorchDispatchMode):
    """Raises on any PyTorch operation outside ALLOWED_OPS (plus ``allow``); NaN-fills every
    floating-point tensor allocated uninitialised, so unwritten output elements show."""

    def __init__(self, allow: Iterable[str] = ()):
        super().__init__()
        self.allowed = ALLOWED_OPS | frozenset(allow)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name not in self.allowed:
            raise LibraryShortcut(
                f"the graded call used torch operation '{name}' ({func}). Graded functions "
                "must do their arithmetic in your Triton kernel; PyTorch may only allocate, "
                "view and copy tensors here.")
        out = func(*args, **(kwargs or {}))
        if name in _ALLOCATING_OPS and isinstance(out, torch.Tensor) and out.is_floating_point():
            out.fill_(math.nan)
        return out


def guarded_call(fn: Callable[..., Any], args: Sequence[Any], allow: Iterable[str] = ()) -> Any:
    """``fn(*args)`` with library shortcuts forbidden and fresh allocations poisoned."""
    global _guard_depth
    _guard_depth += 1
    try:
        with _ShortcutGuard(allow):
            return fn(*args)
    finally:
        _guard_depth -= 1


def forbidden_in_graded_calls(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator for the course's reference kernels: calling one inside a graded call raises."""
    def wrapper(*args, **kwargs):
        if _guard_depth:
            raise LibraryShortcut(f"the graded call used the course's reference "
                                  f"'{fn.__qualname__}'; write your own kernel.")
        return fn(*args, **kwargs)
    wrapper.__name__, wrapper.__qualname__, wrapper.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    wrapper.__wrapped__ = fn
    return wrapper


def assert_correct(fn: Callable[..., Any], reference: Callable[..., torch.Tensor],
                   make_inputs: Callable[[Case, torch.Generator], Sequence[Any]],
                   cases: Iterable[Case], seeds: Iterable[int] = (0, 1, 2), *,
                   tolerances: Mapping[torch.dtype, float] | None = None,
                   allow: Iterable[str] = ()) -> None:
    """Fail with the first failing case (and how many failed) unless ``fn`` matches
    ``reference`` on every case and seed; print a one-line summary when it does.
    Arguments as for :func:`tilegym_edu.check.check`; ``allow`` names extra torch operations
    the call may use."""
    allow = tuple(allow)
    results = check(fn, reference, make_inputs, list(cases), tuple(seeds), tolerances=tolerances,
                    call=lambda f, args: guarded_call(f, args, allow))
    failed = [r for r in results if not r.passed]
    if failed:
        more = "".join(f"\n  also: {r.describe()}" for r in failed[1:4])
        raise AssertionError(f"{len(failed)} of {len(results)} checks failed. First: "
                             f"{failed[0].describe()}{more}")
    worst = max((r.error for r in results if r.error is not None), default=0.0)
    print(f"passed {len(results)} checks (cases x seeds); largest relative error {worst:.2g}")


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


def threshold(lesson: str, name: str) -> Threshold:
    """The threshold ``name`` of ``lesson`` from the course's table."""
    table = tomllib.loads(resources.files("tilegym_edu").joinpath("thresholds.toml").read_text())
    try:
        row = table[lesson][name]
    except KeyError:
        raise KeyError(f"no threshold {lesson}.{name} in tilegym_edu/thresholds.toml") from None
    return Threshold(lesson=lesson, name=name, minimum=row["minimum"], metric=row["metric"],
                     h200=row["h200"], margin=row["margin"], source=row["source"])


def require_gpu(what: str) -> None:
    """Raise NeedsGPU, saying what could not be graded, unless kernels run on a GPU."""
    if not device.ON_GPU:
        raise NeedsGPU(f"{what} needs an NVIDIA GPU: this notebook runs in Triton's CPU "
                       "interpreter, whose timings say nothing about GPU speed. Run it on a "
                       "machine with a CUDA GPU to earn these points.")


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


class _RotatingRunner:
    """Calls ``fn`` on one input set after another, keeping each set's latest output, so the
    outputs of timed runs can be checked afterwards (a kernel cannot cache one answer)."""

    def __init__(self, fn: Callable[..., Any], input_sets: Sequence[Sequence[Any]]):
        self.fn, self.input_sets = fn, input_sets
        self.outputs: list[Any] = [None] * len(input_sets)
        self.calls = 0

    def __call__(self) -> None:
        i = self.calls % len(self.input_sets)
        self.outputs[i] = self.fn(*self.input_sets[i])
        self.calls += 1


def _check_timed_outputs(runner: _RotatingRunner, reference: Callable[..., torch.Tensor],
                         dtype: torch.dtype, tolerances: Mapping[torch.dtype, float] | None) -> None:
    torch.cuda.synchronize()
    for i, (args, out) in enumerate(zip(runner.input_sets, runner.outputs)):
        ref = reference(*(a.detach().to("cpu", torch.float64) if isinstance(a, torch.Tensor)
                          and a.is_floating_point() else a for a in args))
        passed, error, message = compare_output(out, ref, dtype, tolerances)
        if not passed:
            raise AssertionError(f"the output of a timed run (input set {i}) is wrong: {message}")


#: Time still pending after the candidate's own stream finished, above which its work is taken
#: to run on another stream: LEFT_BEHIND_US, or LEFT_BEHIND_FRACTION of the time its own stream
#: took, whichever is larger. An idle GPU's synchronize costs ~10 µs of host time; after a call
#: that ran thousands of host operations (lesson 06's model: 3.5 ms of GPU work) the H200
#: machine measured 50-90 µs with every kernel on the current stream, while a side stream hides
#: all of the work, so the fraction separates the two.
LEFT_BEHIND_US = 25.0
LEFT_BEHIND_FRACTION = 0.1


def assert_no_work_left_behind(candidate: Callable[..., Any], args: Sequence[Any],
                               tries: int = 3) -> None:
    """Fail if ``candidate(*args)`` leaves GPU work running after everything it queued on the
    current stream is done: work on a side stream, which CUDA-event timing of the current
    stream never sees (a known way to fake speed). Three tries must all show it."""
    left, own = [], []
    for _ in range(tries):
        torch.cuda.synchronize()
        began = torch.cuda.Event(enable_timing=True)
        done = torch.cuda.Event(enable_timing=True)
        began.record()
        candidate(*args)
        done.record()
        done.synchronize()
        start = time.perf_counter()
        torch.cuda.synchronize()
        left.append((time.perf_counter() - start) * 1e6)
        own.append(began.elapsed_time(done) * 1e3)
    allowed = max(LEFT_BEHIND_US, LEFT_BEHIND_FRACTION * max(own))
    if min(left) > allowed:
        raise AssertionError(
            f"the GPU was still busy {min(left):.0f} µs after your function's work on the current "
            f"stream had finished (which took {max(own):.0f} µs): it ran work on another CUDA "
            "stream, which the timer cannot see. Launch on torch.cuda.current_stream(), or make "
            "it wait for your stream (torch.cuda.current_stream().wait_stream(side)) before "
            "returning.")


def measure_speed(candidate: Callable[..., Any], baselines: Mapping[str, Callable[[], Any]],
                  input_sets: Sequence[Sequence[Any]], reference: Callable[..., torch.Tensor],
                  dtype: torch.dtype, *, flops: float | None = None, bytes: float | None = None,
                  tolerances: Mapping[torch.dtype, float] | None = None,
                  graph_below_ms: float = bench.GRAPH_THRESHOLD_MS,
                  allow: Iterable[str] = ()) -> list[bench.Measurement]:
    """Time ``candidate`` (rotating over ``input_sets``) interleaved with ``baselines``, check
    every timed output, reject impossible results; the candidate's Measurement comes first.
    One guarded call first: a candidate that hands the work to a library raises
    LibraryShortcut here rather than being timed; and one that leaves work on a side stream
    fails assert_no_work_left_behind. ``graph_below_ms`` as for bench.compare; ``allow`` names
    extra torch operations the guarded call may use (as for assert_correct)."""
    require_gpu("this speed check")
    guarded_call(candidate, input_sets[0], allow)  # the timed function must do its own arithmetic
    assert_no_work_left_behind(candidate, input_sets[0])
    runner = _RotatingRunner(candidate, input_sets)
    measurements = bench.compare({"yours": runner, **baselines}, flops=flops, bytes=bytes,
                                 graph_below_ms=graph_below_ms)
    _check_timed_outputs(runner, reference, dtype, tolerances)
    for m in measurements:
        if m.problem:
            raise AssertionError(f"measurement of '{m.name}' rejected: {m.problem}")
    bench.print_table(measurements, baseline="yours")
    return measurements


def assert_ratio(ratio: float, limit: Threshold) -> None:
    """Fail unless ``ratio`` reaches the threshold; say what was measured either way."""
    verdict = "passed" if ratio >= limit.minimum else "too slow"
    message = (f"{verdict}: {limit.metric} = {ratio:.2f}, threshold {limit.minimum:.2f} "
               f"(the reference solution reached {limit.h200:.2f} on an H200)")
    if ratio < limit.minimum:
        raise AssertionError(message)
    print(message)


def copy_baseline(nbytes: int) -> Callable[[], Any]:
    """A device-to-device copy moving ``nbytes`` in all (half read, half written)."""
    require_gpu("a copy-bandwidth baseline")
    return bench.device_copy(nbytes)


def assert_bandwidth_fraction(candidate: Callable[..., Any], input_sets: Sequence[Sequence[Any]],
                              reference: Callable[..., torch.Tensor], dtype: torch.dtype,
                              bytes: float, limit: Threshold) -> None:
    """A memory-bound kernel's GB/s as a fraction of a device-to-device copy's, measured
    interleaved in this process; fails below ``limit``.

    Returns None on purpose, like every assert_* here: nbgrader takes a number left as a test
    cell's result for partial credit."""
    require_gpu(limit.metric)
    yours, copy = measure_speed(candidate, {"copy": copy_baseline(int(bytes))}, input_sets,
                                reference, dtype, bytes=bytes)
    assert_ratio(yours.gbs / copy.gbs, limit)


def assert_speedup(candidate: Callable[..., Any], baseline: Callable[..., Any],
                   input_sets: Sequence[Sequence[Any]], reference: Callable[..., torch.Tensor],
                   dtype: torch.dtype, limit: Threshold, *, flops: float | None = None,
                   bytes: float | None = None,
                   tolerances: Mapping[torch.dtype, float] | None = None,
                   graph_below_ms: float = bench.GRAPH_THRESHOLD_MS,
                   allow: Iterable[str] = ()) -> None:
    """``candidate``'s speed over ``baseline``'s (same inputs), measured interleaved in this
    process; fails below ``limit``. Returns None (see assert_bandwidth_fraction).
    ``tolerances``, ``graph_below_ms`` and ``allow`` as for measure_speed."""
    require_gpu(limit.metric)
    args = input_sets[0]
    yours, base = measure_speed(candidate, {"baseline": lambda: baseline(*args)}, input_sets,
                                reference, dtype, flops=flops, bytes=bytes, tolerances=tolerances,
                                graph_below_ms=graph_below_ms, allow=allow)
    assert_ratio(base.median_ms / yours.median_ms, limit)
