"""Timing done right, and the records it produces.

The rules (the course's design page has the reasons):

* GPU work is asynchronous: each run is timed with CUDA events recorded on the stream around it.
* Warm up first, so compilation and autotuning stay out of the numbers.
* Flush the L2 cache before every run, so data is read from memory as in a real workload.
* A call that takes under GRAPH_THRESHOLD_MS (0.1 ms) seen from the host, launch and
  synchronize included, is captured in a CUDA graph and timed as its replay, so Python launch
  overhead does not leave the GPU idle inside the timed region.
* Several functions are timed interleaved (a run of each, round after round), so clock and
  thermal drift affect all of them alike; report the median with the 20th-80th percentile spread.
* Clocks are read (never set) and recorded with the result.
* A result above the device's roofline is impossible: it is flagged as a measurement error.

In interpreter mode the same calls work and time the CPU interpreter; the results are labelled
as interpreter time, which says nothing about GPU speed.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, replace
from typing import Callable, Collection, Mapping

import torch

from tilegym_edu import device
from tilegym_edu.specs import find_spec

#: functions whose warm-up calls take less than this, seen from the host (launch and
#: synchronization included), are timed through a CUDA graph: their GPU work is at most a few
#: tens of microseconds, and Python's launch overhead would otherwise leave the GPU idle inside
#: the timed region
GRAPH_THRESHOLD_MS = 0.100
#: a rate this far above the datasheet peak cannot be real
ROOFLINE_SLACK = 1.05


@dataclass(frozen=True)
class Measurement:
    """The timed runs of one function, and the rates they imply.

    ``flops`` is the number of floating-point operations one call performs and ``bytes`` the
    fewest bytes it must move through device memory (inputs read once, outputs written once);
    either may be None when it does not apply.
    """

    name: str
    times_ms: tuple[float, ...]      # every timed run, in milliseconds
    flops: float | None = None
    bytes: float | None = None
    interpreter: bool = False         # True: Triton's CPU interpreter, not GPU time
    device: str = ""                  # GPU name, or "CPU (Triton interpreter)"
    sm_clock_mhz: int | None = None   # SM clock read right after timing
    cuda_graph: bool = False          # timed through CUDA graph replays
    l2_flushed: bool = False          # the L2 cache was flushed before every run
    problem: str | None = None        # why this result cannot be trusted, if it cannot

    @property
    def runs(self) -> int:
        return len(self.times_ms)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times_ms)

    def percentile_ms(self, q: float) -> float:
        """The q-th percentile (0-100) of the run times, linearly interpolated."""
        ordered = sorted(self.times_ms)
        pos = (len(ordered) - 1) * q / 100
        low, high = math.floor(pos), math.ceil(pos)
        return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)

    @property
    def p20_ms(self) -> float:
        return self.percentile_ms(20)

    @property
    def p80_ms(self) -> float:
        return self.percentile_ms(80)

    @property
    def tflops(self) -> float | None:
        """Achieved TFLOP/s (1e12 operations per second) at the median time."""
        return None if self.flops is None else self.flops / (self.median_ms * 1e-3) / 1e12

    @property
    def gbs(self) -> float | None:
        """Achieved GB/s (1e9 bytes per second) at the median time."""
        return None if self.bytes is None else self.bytes / (self.median_ms * 1e-3) / 1e9

    @property
    def intensity(self) -> float | None:
        """Arithmetic intensity: FLOPs per byte moved."""
        if self.flops is None or not self.bytes:
            return None
        return self.flops / self.bytes


def roofline_problem(m: Measurement, device_name: str,
                     memory_bytes: int | None = None) -> str | None:
    """Why ``m`` is impossible on ``device_name`` (above its datasheet roofline), or None."""
    spec = find_spec(device_name, memory_bytes)
    if spec is None or m.interpreter:
        return None
    if m.gbs is not None and m.gbs > ROOFLINE_SLACK * spec.memory_bandwidth_gbs:
        return (f"{m.gbs:,.0f} GB/s is above the {spec.name}'s memory bandwidth "
                f"({spec.memory_bandwidth_gbs:,.0f} GB/s): a measurement error (data left in "
                "cache, work not synchronized, or a wrong byte count)")
    peak = max(r for r in (spec.fp32_tflops, spec.tf32_tflops, spec.fp16_tflops,
                           spec.bf16_tflops) if r is not None)
    if m.tflops is not None and m.tflops > ROOFLINE_SLACK * peak:
        return (f"{m.tflops:,.1f} TFLOP/s is above the {spec.name}'s peak ({peak:,.0f} TFLOP/s): "
                "a measurement error (work not synchronized, or a wrong FLOP count)")
    return None


def device_copy(nbytes: int) -> Callable[[], object]:
    """A function that copies ``nbytes // 2`` bytes device to device: ``nbytes`` moved in all
    (read + write), the yardstick of memory-bound kernels. Needs a GPU."""
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def _flush_buffer() -> torch.Tensor:
    """A buffer twice the L2 size; zeroing it evicts everything the timed function left there."""
    facts = device.info()
    l2 = facts.l2_bytes if facts and facts.l2_bytes else 128 * 2**20
    return torch.empty(2 * l2 // 4, dtype=torch.int32, device="cuda")


def default_generator() -> torch.Generator:
    """The default CUDA generator of the current device (what torch.randn on the GPU draws from)."""
    return torch.cuda.default_generators[torch.cuda.current_device()]


def recover_from_failed_capture(rng_state: torch.Generator) -> None:
    """After a capture that failed half-way, PyTorch leaves the default CUDA generator in
    capture mode (every later random op raises "Offset increment outside graph capture"):
    give it back ``rng_state`` (``default_generator().clone_state()`` taken before the
    capture), and wait for the GPU."""
    default_generator().graphsafe_set_state(rng_state)
    torch.cuda.synchronize()


def graph_replay(fn: Callable[[], object]) -> Callable[[], object] | None:
    """``fn`` captured in a CUDA graph (replaying it relaunches the same work), or None if
    ``fn`` cannot be captured (it synchronizes, runs host code that must run every time, or
    works on other threads, as autograd's backward does)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    rng_state = default_generator().clone_state()
    try:
        with torch.cuda.stream(stream):
            fn()  # the capture must not be a first call: allocations and compilation happen here
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
    except RuntimeError:
        recover_from_failed_capture(rng_state)
        return None
    return graph.replay


def host_time_ms(fn: Callable[[], object], warmup_ms: float) -> float:
    """Warm ``fn`` up for about ``warmup_ms`` (at least twice); return its mean time per call
    (ms) seen from the host, launch and synchronization included: what compare() holds
    against ``graph_below_ms``."""
    fn()
    torch.cuda.synchronize()
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        torch.cuda.synchronize()
        elapsed_ms = (time.perf_counter() - start) * 1e3
        if elapsed_ms >= warmup_ms or calls >= 1000:
            return elapsed_ms / calls


#: more cycles a second than any GPU's SM clock runs: host time turned into a GPU sleep at this
#: rate lasts at least as long on any GPU
_CYCLES_PER_S_AT_MOST = 3e9


def gpu_time_ms(fn: Callable[[], object], warmup_ms: float) -> float:
    """``fn``'s GPU time per call (ms), whatever the host's speed: warmed up as
    :func:`host_time_ms` does, then timed three times between CUDA events while the GPU, put to
    sleep first for 1.5 times a call's host time, waits out the host's launch; the least of the
    three. No L2 flush: an estimate for deciding how to time ``fn``, not a measurement."""
    host_ms = host_time_ms(fn, warmup_ms)
    cycles = int(1.5 * host_ms * 1e-3 * _CYCLES_PER_S_AT_MOST)
    times = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(cycles)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return min(times)


def _time_gpu(fns: Mapping[str, Callable[[], object]], warmup_ms: float, rep_ms: float,
              flush_l2: bool, max_runs: int, graph_below_ms: float,
              already_graphed: frozenset[str]) -> tuple[dict[str, list[float]], dict[str, bool]]:
    estimates = {name: host_time_ms(fn, warmup_ms) for name, fn in fns.items()}
    runners, graphed = {}, {}
    for name, fn in fns.items():
        if name in already_graphed:
            runners[name], graphed[name] = fn, True
            continue
        replay = graph_replay(fn) if estimates[name] < graph_below_ms else None
        runners[name], graphed[name] = (replay, True) if replay else (fn, False)
    runs = max(5, min(max_runs, int(rep_ms / max(sum(estimates.values()), 1e-3))))
    flush = _flush_buffer() if flush_l2 else None
    # Without a flush, something must still keep the GPU busy while the host enqueues the timed
    # work, or the host's launch latency lands inside the timed region: a ~50 µs spin does.
    spin_cycles = 100_000
    names = list(runners)
    events = {name: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                     for _ in range(runs)] for name in names}
    torch.cuda.synchronize()
    for r in range(runs):
        order = names[r % len(names):] + names[:r % len(names)]  # rotate: no fixed position
        for name in order:
            if flush is not None:
                flush.zero_()
            else:
                torch.cuda._sleep(spin_cycles)
            start, end = events[name][r]
            start.record()
            runners[name]()
            end.record()
    torch.cuda.synchronize()
    times = {name: [s.elapsed_time(e) for s, e in events[name]] for name in names}
    return times, graphed


def _time_interpreter(fns: Mapping[str, Callable[[], object]], rep_ms: float,
                      max_runs: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in fns}
    for name, fn in fns.items():  # first call: warm-up (and a time estimate)
        start = time.perf_counter()
        fn()
        times[name].append((time.perf_counter() - start) * 1e3)
    per_round = sum(t[0] for t in times.values())
    runs = max(1, min(max_runs, int(rep_ms / max(per_round, 1e-3))))
    for _ in range(runs):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) * 1e3)
    return {name: t[1:] for name, t in times.items()}


def compare(fns: Mapping[str, Callable[[], object]], *,
            flops: float | Mapping[str, float] | None = None,
            bytes: float | Mapping[str, float] | None = None, warmup_ms: float = 25,
            rep_ms: float = 200, flush_l2: bool = True, max_runs: int = 1000,
            graph_below_ms: float = GRAPH_THRESHOLD_MS,
            graphed: Collection[str] = ()) -> list[Measurement]:
    """Time several functions of no arguments interleaved, one Measurement each.

    ``flops`` and ``bytes`` describe one call: one number for all functions, or a mapping from
    function name to number (functions it does not name get None). Set
    ``flush_l2=False`` only to show what a warm cache does. A function whose warm-up call
    takes under ``graph_below_ms`` (host time, synchronization included) is timed as a replayed
    CUDA graph: raise it for short kernels behind wrappers with a lot of Python in them, so
    the GPU's work is timed and not the host's. ``graphed`` names functions that already
    replay CUDA graphs (timed as they are, recorded as graphs). In interpreter mode the functions
    run a few times each and the results are labelled as interpreter time.
    """
    if not fns:
        raise ValueError("compare() needs at least one function")

    def per_function(value, name):
        return value.get(name) if isinstance(value, Mapping) else value

    if not device.ON_GPU:
        times = _time_interpreter(fns, rep_ms=max(rep_ms, 1000), max_runs=min(max_runs, 5))
        return [Measurement(name, tuple(t), per_function(flops, name), per_function(bytes, name),
                            interpreter=True, device="CPU (Triton interpreter)")
                for name, t in times.items()]
    times, was_graphed = _time_gpu(fns, warmup_ms, rep_ms, flush_l2, max_runs, graph_below_ms,
                                   frozenset(graphed))
    facts = device.info()
    clock = device.sm_clock_mhz()
    results = []
    for name, t in times.items():
        m = Measurement(name, tuple(t), per_function(flops, name), per_function(bytes, name),
                        device=facts.name, sm_clock_mhz=clock,
                        cuda_graph=was_graphed[name], l2_flushed=flush_l2)
        results.append(replace(m, problem=roofline_problem(m, facts.name, facts.memory_bytes)))
    return results


def compare_best(fns: Mapping[str, Callable[[], object]], *, rounds: int = 3,
                 **options) -> list[Measurement]:
    """``compare`` ``rounds`` times over, each function's Measurement from the round where its
    median was lowest: "each side's best median of three interleaved runs", the comparison
    the course's benchmark tables state. Every round interleaves all the functions, so a slow
    spell of the GPU (a clock held down by power or heat) costs each side alike, and a side
    whose runs are sometimes slow is judged by the round that went well, as its rival is.
    ``options`` are compare's."""
    if rounds < 1:
        raise ValueError(f"compare_best() needs at least one round, not {rounds}")
    best: dict[str, Measurement] = {}
    for _ in range(rounds):
        for m in compare(fns, **options):
            if m.name not in best or m.median_ms < best[m.name].median_ms:
                best[m.name] = m
    return list(best.values())


def bench(fn: Callable[[], object], *, flops: float | None = None, bytes: float | None = None,
          name: str | None = None, **options) -> Measurement:
    """Time one function of no arguments: ``bench(lambda: add(x, y), bytes=3 * x.nbytes)``."""
    return compare({name or getattr(fn, "__name__", "fn"): fn}, flops=flops, bytes=bytes,
                   **options)[0]


def format_table(measurements: list[Measurement], baseline: str | None = None) -> str:
    """A plain-text table: median time and spread, TFLOP/s, GB/s, and speed relative to
    ``baseline`` (a measurement name) when given."""
    if not measurements:
        return "(no measurements)"
    by_name = {m.name: m for m in measurements}
    if baseline is not None and baseline not in by_name:
        raise KeyError(f"baseline {baseline!r} is not among {sorted(by_name)}")
    header = ["", "median ms", "p20-p80 ms", "runs", "TFLOP/s", "GB/s"]
    if baseline:
        header.append(f"vs {baseline}")
    rows = []
    for m in measurements:
        row = [m.name, f"{m.median_ms:.4g}", f"{m.p20_ms:.4g}-{m.p80_ms:.4g}", str(m.runs),
               "-" if m.tflops is None or m.interpreter else f"{m.tflops:.3g}",
               "-" if m.gbs is None or m.interpreter else f"{m.gbs:,.0f}"]
        if baseline:
            row.append(f"{by_name[baseline].median_ms / m.median_ms:.2f}x")
        rows.append(row)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in
                       enumerate(zip(r, widths))) for r in [header, *rows]]
    first = measurements[0]
    if first.interpreter:
        note = "interpreter time on the CPU: says nothing about GPU speed"
    else:
        clock = f", SM clock {first.sm_clock_mhz} MHz" if first.sm_clock_mhz else ""
        warm = [m.name for m in measurements if not m.l2_flushed]
        cache = ("L2 flushed before each run" if not warm else "warm L2 (not flushed)"
                 if len(warm) == len(measurements) else f"L2 flushed except for {', '.join(warm)}")
        note = f"{first.device}{clock}, {cache}, CUDA events"
    lines.append(f"({note})")
    lines += [f"WARNING {m.name}: {m.problem}" for m in measurements if m.problem]
    return "\n".join(lines)


def print_table(measurements: list[Measurement], baseline: str | None = None) -> None:
    print(format_table(measurements, baseline))
