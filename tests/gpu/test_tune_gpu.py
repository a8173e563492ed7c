"""tilegym_edu.tune on a real GPU: a level-1 search of the reference pipelined matmul times
every candidate, records the clocks, picks a correct configuration and is cached; a
configuration the compiler refuses is recorded as failed; this GPU's limits prune; a race
times each candidate the same way in every round."""
import time

import pytest
import torch

from tilegym_edu import bench, tune
from tilegym_edu.reference import pipelined


pytestmark = pytest.mark.usefixtures("fresh_cache")   # every test: a tuning cache of its own


def inputs(n=2048):
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    return a, b


def test_level_1_search_times_every_candidate_and_is_cached():
    a, b = inputs()
    launch = lambda config: pipelined.pipelined_matmul.__wrapped__(a, b, config)  # noqa: E731
    problem = pipelined.matmul_problem(a, b)
    result = tune.autotune(pipelined.pipelined_matmul_kernel, problem, pipelined.PIPELINED_SPACE,
                           launch, min_ms=0)      # tuned whatever its size
    print(result.table())
    assert not result.from_cache and result.config in pipelined.PIPELINED_SPACE.configs(1)
    assert all(t.samples_ms for t in result.trials)  # level 1 fits this GPU: all raced
    assert all(c is not None for c in result.sm_clock_mhz)
    start = time.perf_counter()
    again = tune.autotune(pipelined.pipelined_matmul_kernel, problem, pipelined.PIPELINED_SPACE,
                          launch, min_ms=0)
    assert again.from_cache and again.config == result.config
    assert time.perf_counter() - start < 0.05
    out = launch(result.config)
    ref = a.double() @ b.double()
    assert ((out.double() - ref).norm() / ref.norm()).item() < 3e-3


def test_a_configuration_the_compiler_refuses_is_recorded_not_fatal():
    a, b = inputs(1024)
    huge = tune.Config(**{**pipelined.PIPELINED_DEFAULT, "BLOCK_M": 256, "BLOCK_N": 256,
                          "BLOCK_K": 128, "num_stages": 5})
    space = tune.SearchSpace(default=tune.Config(**pipelined.PIPELINED_DEFAULT), small=[huge])
    result = tune.autotune(pipelined.pipelined_matmul_kernel, pipelined.matmul_problem(a, b),
                           space, lambda c: pipelined.pipelined_matmul.__wrapped__(a, b, c),
                           min_ms=0)
    status = {t.config: t.status for t in result.trials}
    assert status[huge].startswith("failed: OutOfResources"), status[huge]
    assert result.config == space.default


def test_this_gpus_limits_prune_what_cannot_fit():
    resources = tune.Resources.of_gpu()
    assert resources.shared_bytes >= 48 * 1024
    kept, pruned = pipelined.PIPELINED_SPACE.candidates(2, {"dtype": "float16"}, resources)
    assert kept and pruned
    for config, reason in pruned:
        assert "shared memory" in reason or "registers" in reason or "cap" in reason


def test_a_problem_that_runs_in_microseconds_is_not_tuned():
    a, b = inputs(64)      # one program: a few microseconds, far under tune.TUNE_ABOVE_MS
    problem = pipelined.matmul_problem(a, b)
    result = tune.autotune(pipelined.pipelined_matmul_kernel, problem, pipelined.PIPELINED_SPACE,
                           lambda c: pipelined.pipelined_matmul.__wrapped__(a, b, c))
    trials = [(str(t.config), t.status, t.median_ms) for t in result.trials[:3]]
    assert result.config == pipelined.PIPELINED_SPACE.default and "not tuned" in result.note, (
        result.config, result.note, trials)


def test_a_race_captures_each_candidate_once_and_replays_it_every_round(monkeypatch):
    """Raced as graphs, each candidate is captured at its first round and that graph is what
    every later round replays."""
    captured, real = [], bench.graph_replay
    monkeypatch.setattr(bench, "graph_replay", lambda fn: captured.append(fn) or real(fn))
    x = torch.randn(1 << 20, device="cuda")
    y = torch.empty_like(x)
    configs = [tune.Config(SCALE=s) for s in (1.0, 2.0, 3.0)]
    measure = tune.gpu_measure(lambda c: torch.mul(x, c["SCALE"], out=y),
                               graph_below_ms=float("inf"))   # whatever this host's speed
    for alive in (configs, configs[:2], configs[:1]):
        samples = measure(alive)
        assert set(samples) == set(alive)
        assert all(len(times) == 5 and min(times) > 0 for times in samples.values())
    assert len(captured) == 3


def _samples(launch, as_graphs):
    """Every timing sample of an untuned race of two configs of ``launch`` (ms)."""
    space = tune.SearchSpace(default=tune.Config(SCALE=1.0), small=[tune.Config(SCALE=2.0)])
    result = tune.autotune(launch, {"as_graphs": as_graphs}, space, launch, min_ms=0,
                           race_as_graphs=as_graphs, progress=False)
    return [s for t in result.trials for s in t.samples_ms]


def _behind_slow_python(elements: int):
    """launch(config): 2 ms of Python (a sleep), then one kernel scaling ``elements`` floats by
    config["SCALE"]."""
    x = torch.randn(elements, device="cuda")
    y = torch.empty_like(x)

    def launch(config):
        time.sleep(0.002)
        torch.mul(x, config["SCALE"], out=y)
    return launch


def test_a_short_kernel_behind_a_slow_hosts_python_is_raced_on_its_gpu_time():
    """A launch that spends 2 ms in Python before a kernel of a few microseconds: the race
    decides from the kernel's GPU time (bench.gpu_time_ms) and replays graphs. It used to decide
    from the host time, 2 ms, and time plain launches whose samples all held the sleep: on run
    37's slow host (2026-12-04) a decoding step's products were probably ranked so."""
    assert max(_samples(_behind_slow_python(1 << 16), as_graphs=False)) < 0.5


def test_a_race_told_to_time_graphs_times_even_a_long_kernel_so():
    """race_as_graphs: a kernel of about 0.25 ms of GPU time (over the 0.1 ms bar) behind 2 ms
    of Python is raced on its GPU time; raced the usual way, as plain launches, every sample
    holds the host's 2 ms."""
    launch = _behind_slow_python(1 << 27)
    assert max(_samples(launch, as_graphs=True)) < 1.0
    assert min(_samples(launch, as_graphs=False)) > 1.5
