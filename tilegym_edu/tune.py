"""Autotuning: pick the fastest launch configuration of a kernel for one problem, on this GPU.

How a search goes (:func:`autotune`):

0. **What is not tuned**: inside a correctness check (:func:`defaults_only`, which
   :func:`tilegym_edu.check.check` applies) the default configuration runs, or the first
   candidate that fits this GPU: correctness does not depend on speed, and tuning each odd
   little shape cost lesson 05 minutes of compiling. And when the default configuration runs
   in under :data:`TUNE_ABOVE_MS`, it is the answer (launch overhead dominates such a
   problem, and compiling every candidate would cost seconds to save microseconds).
1. **Candidates** come from a :class:`SearchSpace` at a *level*: 0 is the hand-written default
   alone, 1 a small list worth trying on any GPU (under a minute), 2 the full grid of every
   combination, capped. Each candidate is first put to a pruning predicate that rejects what
   cannot fit this GPU (shared memory, registers) without compiling it.
2. **Compilation**: every candidate runs once; one the compiler refuses (OutOfResources, for
   one) is recorded as failed, not fatal.
3. **Racing** with early stopping: survivors are timed interleaved, a few samples each, round
   after round. After each round a candidate whose *fastest* sample is slower than the
   leader's *median* by more than ``slack`` is dropped: even its luckiest run lost to the
   leader's typical one, so more samples would not save it. Racing ends when one is left or
   after ``max_rounds``; the lowest median wins.
4. **Caching**: the winner is stored per GPU, driver, Triton version, kernel source, problem,
   level, candidate list and race rules (RACE_RULES, and whether the race was told to time
   CUDA graphs), in memory and in ``$TILEGYM_CACHE_DIR/tune.json``: a second run,
   even in a new process, costs nothing. Change the kernel, a helper it calls or a constant
   it reads, and it tunes again.

Clocks are read before and after (never set). In interpreter mode there is nothing to time:
:func:`autotune` returns the default configuration and says so, unless it is given a
``measure`` function (the tests use synthetic timings that way).
"""
from __future__ import annotations

import contextlib
import contextvars
import datetime
import functools
import hashlib
import inspect
import itertools
import json
import math
import os
import statistics
import time
import types
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator, KeysView, Mapping, Sequence

import triton

from tilegym_edu import bench, device
from tilegym_edu.progress import ProgressBar

#: read-only, as is every table of a module a learner's code may import
LEVELS = types.MappingProxyType({0: "the hand-written default",
                                 1: "a small space (tunes in under a minute)",
                                 2: "the full grid, pruned and capped"})
#: a problem whose default configuration runs faster than this (milliseconds) is not tuned:
#: launch overhead (~5 µs) is a large part of its time, so the best configuration could save
#: microseconds, while compiling the candidates costs seconds. The correctness checks' small,
#: odd shapes are all such problems; the speed checks' are not: the smallest, lesson 05's
#: N32 C256 14x14 3x3 layer, runs in about 30 µs on an H200 and lost 9% of cuDNN's speed
#: untuned (0.70 against 0.77, 2026-12-01), which a 50 µs bar caused and this one does not
TUNE_ABOVE_MS = 0.02


class Config(Mapping[str, int]):
    """One launch configuration: the kernel's constexpr meta-parameters and the launch options
    ``num_warps`` and ``num_stages``. It is a read-only mapping, so ``kernel[grid](...,
    **config)`` launches with it. ``Config(BLOCK_M=128, ..., num_stages=3)``."""

    def __init__(self, **params: int | bool):
        self._params = dict(sorted(params.items()))

    def __getitem__(self, name: str) -> int:
        return self._params[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._params)

    def __len__(self) -> int:
        return len(self._params)

    def keys(self) -> KeysView[str]:
        """The names; ``**config`` and ``dict(config)`` read them here, faster than through
        Mapping's KeysView (a launch unpacks its config once)."""
        return self._params.keys()

    def __hash__(self) -> int:
        return hash(tuple(self._params.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self) == dict(other)

    def __repr__(self) -> str:
        return "Config(" + ", ".join(f"{k}={v}" for k, v in self._params.items()) + ")"

    def __str__(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self._params.items())

    def replace(self, **changes: int | bool) -> Config:
        """A copy with some values changed: ``config.replace(num_stages=1)``."""
        unknown = set(changes) - set(self._params)
        if unknown:
            raise KeyError(f"{sorted(unknown)} not in {self}")
        return Config(**{**self._params, **changes})


@dataclass(frozen=True)
class Resources:
    """What one program may use on this GPU: shared memory per block (bytes, with opt-in) and
    32-bit registers per thread."""

    shared_bytes: int
    registers_per_thread: int = 255

    @classmethod
    def of_gpu(cls, index: int = 0) -> Resources | None:
        """This GPU's limits, or None in interpreter mode (nothing to prune against)."""
        if not device.ON_GPU:
            return None
        import torch
        props = torch.cuda.get_device_properties(index)
        shared = getattr(props, "shared_memory_per_block_optin", 0) or 48 * 1024
        return cls(shared_bytes=int(shared))

    def shared_memory_problem(self, needed_bytes: int) -> str:
        """Why a program needing ``needed_bytes`` of shared memory cannot launch on this GPU
        ("" when it fits): a prune's reason."""
        if needed_bytes <= self.shared_bytes:
            return ""
        return (f"needs {needed_bytes // 1024} KiB of shared memory, the GPU offers "
                f"{self.shared_bytes // 1024} KiB per block")


#: prune(config, problem, resources) -> why the config cannot run here, or None if it can
Prune = Callable[[Config, Mapping[str, object], Resources], "str | None"]


#: the launch parameters of a tiled, matmul-like kernel, in the order its search space lists them
TILE_NAMES = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")


def configs_from_rows(names: Sequence[str], rows: Iterable[Sequence[int | bool]]
                      ) -> tuple[Config, ...]:
    """One Config per row, its values named by ``names`` in order: a search space's candidates
    written as a table."""
    return tuple(Config(**dict(zip(names, row))) for row in rows)


@dataclass(frozen=True)
class SearchSpace:
    """The configurations worth trying, by level.

    ``default`` is level 0; level 1 adds ``small``; level 2 adds every combination of
    ``grid`` (a mapping from parameter to values), keeping at most ``cap`` after pruning.
    ``prune`` is called with each candidate, the problem and the GPU's Resources."""

    default: Config
    small: Sequence[Config] = ()
    grid: Mapping[str, Sequence[int | bool]] = field(default_factory=dict)
    prune: Prune | None = None
    cap: int = 200

    def configs(self, level: int) -> list[Config]:
        """Every candidate of ``level``, default first, without duplicates, before pruning."""
        if level not in LEVELS:
            raise ValueError(f"level must be one of {sorted(LEVELS)} ({dict(LEVELS)}), "
                             f"not {level!r}")
        found = [self.default]
        if level >= 1:
            found += list(self.small)
        if level >= 2 and self.grid:
            names = list(self.grid)
            found += configs_from_rows(names, itertools.product(*(self.grid[n] for n in names)))
        return list(dict.fromkeys(found))

    def candidates(self, level: int, problem: Mapping[str, object],
                   resources: Resources | None) -> tuple[list[Config], list[tuple[Config, str]]]:
        """(kept, pruned with reasons) for ``level``. Without Resources (interpreter mode)
        nothing is pruned. At level 2 more than ``cap`` survivors are thinned evenly, the
        level-1 configurations always kept."""
        kept, pruned = [], []
        for config in self.configs(level):
            reason = self.prune(config, problem, resources) if self.prune and resources else None
            (pruned.append((config, reason)) if reason else kept.append(config))
        if len(kept) > self.cap:
            must = [c for c in kept if c in self.configs(1)]
            rest = [c for c in kept if c not in must]
            step = len(rest) / max(1, self.cap - len(must))
            chosen = {rest[int(i * step)] for i in range(self.cap - len(must))}
            pruned += [(c, f"over the cap of {self.cap} configurations") for c in rest
                       if c not in chosen]
            kept = must + [c for c in rest if c in chosen]
        return kept, pruned


# A space that races several kernels ("paths") names the one a configuration runs in its PATH;
# the rest of the configuration is that path's own options, checked by that path's own space.

def split_path(config: Mapping[str, object]) -> tuple[str, dict[str, object]]:
    """(config["PATH"], the rest of config as a dict): the path and its own options."""
    options = dict(config)
    return options.pop("PATH"), options


def path_configs(paths: Mapping[str, SearchSpace], level: int = 1) -> list[Config]:
    """Every path's configurations of ``level``, each with its PATH: the candidates of a space
    that races the paths."""
    return [Config(**c, PATH=path) for path, space in paths.items() for c in space.configs(level)]


def path_prune(paths: Mapping[str, SearchSpace], config: Config, problem: Mapping[str, object],
               resources: Resources) -> str | None:
    """The prune of the space config["PATH"] names, on the rest of the configuration (None
    where that space has no prune)."""
    path, options = split_path(config)
    own = paths[path].prune
    return own(Config(**options), problem, resources) if own else None


def path_space(paths: Mapping[str, SearchSpace], grid_path: str) -> SearchSpace:
    """One space that races several paths, each configuration naming its PATH and pruned by
    its path's own space: level 0 is the first path's default, level 1 adds every path's level-1
    configurations, level 2 the grid of ``grid_path``, capped to that path's own cap plus the
    other paths' level-1 configurations."""
    first = next(iter(paths))
    others = sum(len(space.configs(1)) for path, space in paths.items() if path != grid_path)
    return SearchSpace(default=Config(**paths[first].default, PATH=first),
                       small=path_configs(paths),
                       grid={"PATH": (grid_path,), **paths[grid_path].grid},
                       prune=functools.partial(path_prune, paths),
                       cap=paths[grid_path].cap + others)


@dataclass(frozen=True)
class Trial:
    """What happened to one candidate: status is "winner", "raced", "dropped in round N",
    "pruned: ..." or "failed: ..."; samples are milliseconds per call."""

    config: Config
    status: str
    samples_ms: tuple[float, ...] = ()

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.samples_ms) if self.samples_ms else None


@dataclass(frozen=True)
class TuneResult:
    """The outcome of a search: the winning configuration and how it was found."""

    config: Config
    level: int
    trials: tuple[Trial, ...]
    from_cache: bool
    seconds: float                     # wall time of the search (of the original one if cached)
    device: str
    sm_clock_mhz: tuple[int | None, int | None] = (None, None)  # read before and after
    note: str = ""

    def table(self) -> str:
        """One line per candidate, fastest first, pruned and failed ones last."""
        timed = sorted((t for t in self.trials if t.samples_ms), key=lambda t: t.median_ms)
        rest = [t for t in self.trials if not t.samples_ms]
        best = timed[0].median_ms if timed else None
        lines = [f"{'configuration':64s} {'median ms':>10s} {'vs best':>8s} "
                 f"{'samples':>7s}  status"]
        for t in timed + rest:
            median = f"{t.median_ms:10.4f}" if t.samples_ms else f"{'-':>10s}"
            ratio = f"{t.median_ms / best:7.2f}x" if t.samples_ms and best else f"{'-':>8s}"
            lines.append(f"{str(t.config):64s} {median} {ratio} {len(t.samples_ms):7d}  {t.status}")
        source = "from the cache" if self.from_cache else f"searched in {self.seconds:.1f} s"
        clocks = " -> ".join("?" if c is None else f"{c} MHz" for c in self.sm_clock_mhz)
        lines.append(f"level {self.level} ({LEVELS[self.level]}), {source}, on {self.device}, "
                     f"SM clock {clocks}" + (f"; {self.note}" if self.note else ""))
        return "\n".join(lines)


#: measure(configs) -> a few fresh timing samples (ms) of each config, timed interleaved
Measure = Callable[[Sequence[Config]], Mapping[Config, Sequence[float]]]


def race(configs: Sequence[Config], measure: Measure, *, max_rounds: int = 4,
         slack: float = 0.05, on_round: Callable[[int, int], None] | None = None,
         ) -> tuple[Config, list[Trial]]:
    """Time ``configs`` round after round, dropping the clearly slower (see the module
    docstring); returns the winner (lowest median) and a Trial per config."""
    if not configs:
        raise ValueError("race() needs at least one configuration")
    samples: dict[Config, list[float]] = {c: [] for c in configs}
    dropped: dict[Config, int] = {}
    alive = list(configs)
    for round_number in range(1, max_rounds + 1):
        batch = measure(alive)
        for c in alive:
            samples[c] += [float(t) for t in batch[c]]
        leader = min(alive, key=lambda c: statistics.median(samples[c]))
        bar = statistics.median(samples[leader]) * (1 + slack)
        for c in alive:
            if c != leader and min(samples[c]) > bar:
                dropped[c] = round_number
        alive = [c for c in alive if c not in dropped]
        if on_round:
            on_round(round_number, len(alive))
        if len(alive) == 1:
            break
    winner = min(alive, key=lambda c: statistics.median(samples[c]))
    trials = [Trial(c, "winner" if c == winner else
                    f"dropped in round {dropped[c]}" if c in dropped else "raced",
                    tuple(samples[c])) for c in configs]
    return winner, trials


def kernel_source(kernel: object) -> str:
    """The source text of a @triton.jit kernel (or any function)."""
    src = getattr(kernel, "src", None)
    return src if isinstance(src, str) else inspect.getsource(getattr(kernel, "fn", kernel))


def _jit_function(obj: object) -> types.FunctionType | None:
    """The Python function under a @triton.jit or Gluon wrapper (compiled or interpreted) of
    code outside Triton, else None: Triton's own jit functions (tl.sum, say) come with its
    version, which cache keys name."""
    fn = getattr(obj, "fn", None)
    if (inspect.isfunction(fn) and type(obj).__module__.startswith("triton.")
            and not fn.__module__.startswith("triton.")):
        return fn
    return None


def _referenced(fn: types.FunctionType) -> Iterator[tuple[str, object]]:
    """(name, value) of each global or closure name fn's code reads, and ``module.name`` for
    each name of its code that a module it reads has (``helpers.step``; a name that is some
    other object's attribute there too only makes the key stricter), in the code's order."""
    code = fn.__code__
    space = dict(fn.__globals__)
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        with contextlib.suppress(ValueError):   # a closure cell not yet filled
            space[name] = cell.cell_contents
    for name in code.co_names + code.co_freevars:
        if name not in space:
            continue
        value = space[name]
        yield name, value
        if isinstance(value, types.ModuleType):
            yield from ((f"{name}.{attr}", getattr(value, attr)) for attr in code.co_names
                        if attr != name and hasattr(value, attr))


def keyed_source(kernel: object) -> str:
    """What a cached result of ``kernel`` is keyed on: its source (each kernel's, for a
    KernelGroup; a host function's own), the source of every @jit function it calls,
    transitively, and the values of the constants (numbers, strings, constexprs) they read
    from their modules. A change to a helper the kernel calls tunes again, as a change to the
    kernel does."""
    if isinstance(kernel, KernelGroup):
        return "\n".join(keyed_source(k) for k in kernel.kernels)
    parts: dict[str, None] = {}   # in order, each once
    seen: set[int] = set()

    def visit(obj: object) -> None:
        fn = _jit_function(obj)
        if fn is None or id(fn) in seen:
            return
        seen.add(id(fn))
        parts[kernel_source(obj)] = None
        for name, value in _referenced(fn):
            if isinstance(value, (bool, int, float, str, triton.language.constexpr)):
                parts[f"{name} = {value!r}"] = None
            else:
                visit(value)

    visit(kernel)
    return "\n".join(parts) if parts else kernel_source(kernel)


class KernelGroup:
    """Several kernels tuned as one (a racing entry point's paths): its name, and every kernel
    (or host function) it may run, whose sources a cached result is keyed on
    (:func:`keyed_source`)."""

    def __init__(self, name: str, kernels: Sequence[object]):
        self.__name__, self.kernels = name, tuple(kernels)

    @property
    def src(self) -> str:
        return "\n".join(kernel_source(k) for k in self.kernels)


def kernel_name(kernel: object) -> str:
    """The function name of a @triton.jit kernel (or any function)."""
    return (getattr(kernel, "__name__", None)
            or getattr(getattr(kernel, "fn", None), "__name__", None) or "kernel")


def _device_identity() -> str:
    facts = device.info()
    gpu = (f"{facts.name} cc{facts.compute_capability[0]}.{facts.compute_capability[1]} "
           f"driver {facts.driver}" if facts else "Triton interpreter")
    return f"{gpu} | triton {triton.__version__}"


#: the version of the race's rules in cache keys: 2 since races time every candidate one
#: way (gpu_measure); winners of version 1's races, which could mix graphs and plain launches,
#: are tuned again
RACE_RULES = 2


def cache_key(kernel: object, problem: Mapping[str, object], level: int,
              configs: Sequence[Config], as_graphs: bool = False) -> str:
    """What a cached result depends on: GPU, driver, Triton, kernel source (its helpers'
    too: :func:`keyed_source`), problem, level, the candidates (a changed search space tunes
    again), RACE_RULES and whether the race was told to time graphs (autotune's
    ``race_as_graphs``: a winner of a race timed otherwise is not one of it)."""
    digest = hashlib.sha256(keyed_source(kernel).encode()).hexdigest()[:16]
    space = hashlib.sha256(repr(configs).encode()).hexdigest()[:12]
    shape = ",".join(f"{k}={problem[k]}" for k in sorted(problem))
    return (f"{_device_identity()} | {kernel_name(kernel)} {digest} | {shape} "
            f"| level {level} | space {space} | races {RACE_RULES}"
            + (" as graphs" if as_graphs else ""))


def cache_path() -> Path:
    """Where tuning results persist: next to the measured ceilings."""
    return device.cache_dir() / "tune.json"


#: (cache folder setting, key) -> result: the in-memory copy of each cache file's results
#: (a result stored under one TILEGYM_CACHE_DIR is not found under another)
_MEMORY: dict[tuple[str | None, str], TuneResult] = {}
#: (id(kernel), id(space), level, problem slot) -> (kernel, space, key): the key is computed once
#: per kernel object, search space object and problem (it hashes source text and every
#: candidate), so a cache hit costs dictionary lookups and no formatting. Kernel and space are
#: kept, so their ids stay theirs.
_KEYS: dict[tuple, tuple[object, SearchSpace, str]] = {}


def _problem_slot(problem: Mapping[str, object]) -> tuple:
    """``problem`` as part of a dictionary key, in microseconds: its items and the types of its
    values (True and 1, one key to a dictionary, are two problems to cache_key, which writes
    them out); values that cannot be hashed (a list, say) as their str, as cache_key writes
    them."""
    items = tuple(problem.items())
    try:
        hash(items)
    except TypeError:
        items = tuple((k, str(v)) for k, v in items)
    return items, tuple(map(type, problem.values()))


def _memoized_key(kernel: object, problem: Mapping[str, object], space: SearchSpace,
                  level: int, as_graphs: bool) -> str:
    """cache_key(kernel, problem, level, space.configs(level), as_graphs), computed once per
    kernel, space, level, problem and way of racing."""
    slot = (id(kernel), id(space), level, as_graphs, _problem_slot(problem))
    found = _KEYS.get(slot)
    if found is None or found[0] is not kernel or found[1] is not space:
        found = (kernel, space, cache_key(kernel, problem, level, space.configs(level),
                                          as_graphs))
        _KEYS[slot] = found
    return found[2]


def _cache_setting() -> str | None:
    """$TILEGYM_CACHE_DIR as set now (None: unset), which picks the cache file
    (device.cache_dir): read in a microsecond, where cache_path() resolves a home folder."""
    return os.environ.get("TILEGYM_CACHE_DIR")


def _to_json(result: TuneResult) -> dict:
    return {"config": dict(result.config), "level": result.level, "seconds": result.seconds,
            "device": result.device, "sm_clock_mhz": list(result.sm_clock_mhz),
            "note": result.note, "date": datetime.date.today().isoformat(),
            "trials": [{"config": dict(t.config), "status": t.status,
                        "samples_ms": list(t.samples_ms)} for t in result.trials]}


def _from_json(entry: dict) -> TuneResult:
    return TuneResult(
        config=Config(**entry["config"]), level=entry["level"], from_cache=True,
        trials=tuple(Trial(Config(**t["config"]), t["status"], tuple(t["samples_ms"]))
                     for t in entry["trials"]),
        seconds=entry["seconds"], device=entry["device"],
        sm_clock_mhz=tuple(entry["sm_clock_mhz"]), note=entry.get("note", ""))


def _load_cached(key: str) -> TuneResult | None:
    """The result stored under ``key`` in this cache folder's file (in memory once read), or
    None."""
    memory_key = (_cache_setting(), key)
    found = _MEMORY.get(memory_key)
    if found is not None:
        return found
    path = cache_path()
    if not path.exists():
        return None
    try:
        entry = json.loads(path.read_text()).get(key)
    except (json.JSONDecodeError, OSError):
        return None
    if entry is None:
        return None
    _MEMORY[memory_key] = _from_json(entry)
    return _MEMORY[memory_key]


def _store(key: str, result: TuneResult) -> None:
    _MEMORY[(_cache_setting(), key)] = replace(result, from_cache=True)
    path = cache_path()
    try:
        cache = json.loads(path.read_text()) if path.exists() else {}
    except (json.JSONDecodeError, OSError):
        cache = {}
    cache[key] = _to_json(result)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cache, indent=1))


def clear_cache() -> None:
    """Forget every tuning result, in memory and on disk."""
    _MEMORY.clear()
    cache_path().unlink(missing_ok=True)


def gpu_measure(launch: Callable[[Config], object],
                graph_below_ms: float = bench.GRAPH_THRESHOLD_MS) -> Measure:
    """Timing samples on the GPU for one race of ``launch`` (one measure a launch and a race:
    its graphs replay the tensors the launch read when they were captured): each round times
    every config five times, interleaved, L2 flushed before each run (tilegym_edu.bench
    rules), and every config the same way in every round. The race is timed as CUDA-graph
    replays, each config's graph captured at its first round, when the fastest of the first
    call's configs takes under ``graph_below_ms`` of GPU time (bench.gpu_time_ms: the host's
    launch hidden; in autotune's race, the first round of every candidate; its too-small check
    times the default alone with a measure of its own), always when ``graph_below_ms`` is
    math.inf; else, or when any config cannot be captured, as plain launches. Configs no longer
    asked for (dropped) release their graphs. The measure's ``as_graphs()`` says which way the
    race went (None before its first call).

    Why GPU time: the decision used to hold a launch's host time (synchronization included)
    against the bar, and a slow host pushed launches of short kernels over it. Their race was
    then timed as plain launches, whose samples hold the host's Python: on the H200 of run 37
    (2026-12-04) a decoding step's products were probably raced so (inferred from its log), and
    lesson 03's pipelined kernel ran them at 1.7x the skinny kernel's GPU time; raced as graphs
    in run 38 (2026-12-05), the skinny kernel won them again.

    Why one decision a race: bench.compare decides per function and per call, and the race
    called it once a round, so one round could mix both ways and two rounds could time one
    config both ways. On the H200 (2026-12-04, h200-2026-12-04-gpu-run-23-tuner-race.log)
    MobileNetV2's 112² depthwise launches took 0.12-0.19 ms of host time (three estimates
    each) for 0.04-0.09 ms of GPU work; in four rounds 15 of 26 candidates were timed as graphs
    in one round and as plain launches in another. Run 21's race on that layer had picked a
    configuration whose GPU time was 1.21x the best one's."""
    runners: dict[Config, Callable[[], object]] = {}
    as_graphs: bool | None = None   # the race's one decision, taken at its first call

    def measure(configs: Sequence[Config]) -> dict[Config, list[float]]:
        nonlocal as_graphs
        for gone in [c for c in runners if c not in configs]:
            del runners[gone]
        new = {c: (lambda c=c: launch(c)) for c in configs if c not in runners}
        if new and as_graphs is None:
            as_graphs = graph_below_ms == math.inf or min(
                bench.gpu_time_ms(fn, warmup_ms=2) for fn in new.values()) < graph_below_ms
        for c, fn in new.items():
            replay = bench.graph_replay(fn) if as_graphs else None
            if as_graphs and replay is None:   # one config cannot be captured: none is
                as_graphs = False
                runners.update({old: (lambda old=old: launch(old)) for old in runners})
            runners[c] = replay or fn
        results = bench.compare({str(c): runners[c] for c in configs}, warmup_ms=2, rep_ms=1,
                                max_runs=5, graph_below_ms=0,
                                graphed=[str(c) for c in configs] if as_graphs else [])
        by_name = {m.name: m for m in results}
        return {c: list(by_name[str(c)].times_ms) for c in configs}
    measure.as_graphs = lambda: as_graphs   # the race's decision (None before its first call)
    return measure


def _compile_all(configs: Sequence[Config], launch: Callable[[Config], object],
                 progress: ProgressBar) -> tuple[list[Config], list[Trial]]:
    """Run each config once (compiling it); the ones the compiler refuses become Trials."""
    working, failed = [], []
    for i, config in enumerate(configs):
        progress.show(i, len(configs), f"compiling {config}")
        try:
            launch(config)
            device.synchronize()
        except Exception as error:  # noqa: BLE001  (OutOfResources, CompilationError, ...)
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
            failed.append(Trial(config, f"failed: {type(error).__name__}: {first_line[:160]}"))
        else:
            working.append(config)
    if not working:
        raise RuntimeError("no configuration could run; the first failure was "
                           f"{failed[0].status[len('failed: '):]} (config {failed[0].config})")
    return working, failed


_DEFAULTS_ONLY = contextvars.ContextVar("tilegym_edu.tune.defaults_only", default=False)


@contextlib.contextmanager
def defaults_only():
    """Within it, :func:`autotune` searches nothing: a problem already tuned keeps its
    cached configuration, any other runs the default (or the first candidate that fits this
    GPU) and is not stored. Correctness checks run in it."""
    token = _DEFAULTS_ONLY.set(True)
    try:
        yield
    finally:
        _DEFAULTS_ONLY.reset(token)


def _untuned(config: Config, level: int, where: str, note: str, seconds: float = 0.0) -> TuneResult:
    """A result that searched nothing: ``config`` ran as it is, and ``note`` says why."""
    return TuneResult(config, level, (Trial(config, "winner"),), False, seconds, where, note=note)


def _too_small_to_tune(kept: Sequence[Config], default: Config,
                       launch: Callable[[Config], object], measure: Measure,
                       min_ms: float) -> float | None:
    """The default configuration's median time (ms) if it is a candidate here, runs, and is
    under ``min_ms``; else None (then the problem is tuned)."""
    if default not in kept:
        return None
    try:
        launch(default)          # compiles it
        device.synchronize()
    except Exception:  # noqa: BLE001  (the tuning that follows records why it failed)
        return None
    median = statistics.median(measure([default])[default])
    return median if median < min_ms else None


def autotune(kernel: object, problem: Mapping[str, object], space: SearchSpace,
             launch: Callable[[Config], object], *, level: int = 1, cache: bool = True,
             progress: bool = True, measure: Measure | None = None,
             resources: Resources | None = None, max_rounds: int = 4,
             slack: float = 0.05, min_ms: float = TUNE_ABOVE_MS,
             race_as_graphs: bool = False) -> TuneResult:
    """The fastest configuration of ``kernel`` for ``problem`` on this GPU.

    ``problem`` names what the best configuration depends on (e.g. M, N, K and dtype);
    ``launch(config)`` runs the kernel once on that problem's inputs with ``config``.
    ``level`` picks the search space (0, 1, 2: see SearchSpace). ``cache=False`` searches
    again even when a result is stored. ``resources`` defaults to this GPU's limits;
    ``measure`` defaults to GPU timing (in interpreter mode, without one, the default
    configuration is returned untimed). A problem whose default configuration runs in under
    ``min_ms`` is not tuned (:data:`TUNE_ABOVE_MS`): the default is returned, with a note.
    ``race_as_graphs`` has GPU timing replay every candidate from a CUDA graph, the GPU's work
    alone, however long its kernels run (:func:`gpu_measure`; plain launches only if one
    cannot be captured): for problems raced however fast they are (``min_ms=0``), run as graphs
    where they are used. Otherwise the race is timed as graphs only when its fastest launch
    takes under bench.GRAPH_THRESHOLD_MS of GPU time. It builds the GPU timing, so it is refused
    beside a ``measure``.
    """
    if race_as_graphs and measure is not None:
        raise ValueError("race_as_graphs sets how GPU timing runs the race; with a measure of "
                         "your own, time graphs in it (gpu_measure(launch, math.inf) does)")
    key = _memoized_key(kernel, problem, space, level, race_as_graphs)
    if cache:
        cached = _load_cached(key)
        if cached is not None:
            return cached
    if measure is None and not device.ON_GPU:
        return _untuned(space.default, level, "CPU (Triton interpreter)",
                        "interpreter mode: nothing to time, the default configuration is used")
    resources = resources or Resources.of_gpu()
    facts = device.info()
    where = facts.name if facts else "interpreter"
    if _DEFAULTS_ONLY.get():
        kept, _ = space.candidates(level, problem, resources)
        chosen = space.default if space.default in kept or not kept else kept[0]
        return _untuned(chosen, level, where, "inside a correctness check: not tuned")
    shape = ", ".join(f"{k}={v}" for k, v in problem.items())
    bar = ProgressBar(f"tuning {kernel_name(kernel)} ({shape})",
                    progress)
    start, clock_before = time.perf_counter(), device.sm_clock_mhz() if facts else None
    kept, pruned = space.candidates(level, problem, resources)
    if not kept:
        raise RuntimeError(f"every configuration of level {level} was pruned; the first: "
                           f"{pruned[0][0]}: {pruned[0][1]}")

    def timing() -> Measure:
        return measure or gpu_measure(launch, math.inf if race_as_graphs
                                      else bench.GRAPH_THRESHOLD_MS)
    small = None if min_ms <= 0 else _too_small_to_tune(kept, space.default, launch, timing(),
                                                        min_ms)
    if small is not None:
        result = _untuned(space.default, level, where,
                          f"not tuned: the default configuration runs in {small:.3f} ms, under "
                          f"{min_ms} ms, where tuning could save microseconds",
                          time.perf_counter() - start)
        _store(key, result)
        return result
    working, failed = _compile_all(kept, launch, bar)
    race_timing = timing()
    winner, raced = race(working, race_timing, max_rounds=max_rounds,
                         slack=slack, on_round=lambda r, alive: bar.show(
                             r, max_rounds, f"racing: {alive} of {len(working)} left"))
    plain = race_as_graphs and not race_timing.as_graphs()
    result = TuneResult(
        config=winner, level=level, from_cache=False,
        trials=tuple(raced + failed + [Trial(c, f"pruned: {why}") for c, why in pruned]),
        seconds=time.perf_counter() - start, device=where,
        sm_clock_mhz=(clock_before, device.sm_clock_mhz() if facts else None),
        note=("timed as plain launches, not the CUDA graphs asked for: a candidate could not "
              "be captured" if plain else ""))
    bar.close(f"best of {len(working)} in {result.seconds:.1f} s: {winner}")
    _store(key, result)
    return result
