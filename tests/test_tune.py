"""tilegym_edu.tune on the CPU: configurations, levels, pruning, racing on synthetic timings,
the cache, compile failures and the progress bar. (tests/gpu/test_tune_gpu.py times real
kernels.)"""
import json
import random
from pathlib import Path

import pytest
import torch

from tilegym_edu import tune
from tilegym_edu.reference import pipelined

REPO = Path(__file__).resolve().parent.parent
H200 = tune.Resources(shared_bytes=232448)  # what torch reports for an H200 (opt-in maximum)
PROBLEM = {"M": 4096, "N": 4096, "K": 4096, "dtype": "float16"}


pytestmark = pytest.mark.usefixtures("fresh_cache")   # every test: a tuning cache of its own


def cfg(block, stages=3, warps=4):
    return tune.Config(BLOCK=block, num_warps=warps, num_stages=stages)


SPACE = tune.SearchSpace(default=cfg(64), small=[cfg(128), cfg(64), cfg(32)],
                         grid={"BLOCK": (32, 64, 128, 256), "num_warps": (4, 8),
                               "num_stages": (2, 3)})


def kernel_a():
    return 1


def kernel_b():
    return 2


class SyntheticGPU:
    """Timings with a true mean per config and 2% noise; counts what it was asked."""

    def __init__(self, means, seed=0):
        self.means, self.rng, self.calls = means, random.Random(seed), 0

    def __call__(self, configs):
        self.calls += 1
        return {c: [self.means[c] * (1 + 0.02 * self.rng.random()) for _ in range(5)]
                for c in configs}


# --- Config --------------------------------------------------------------------------------

def test_config_is_a_hashable_mapping_for_kernel_launches():
    c = tune.Config(BLOCK_N=64, BLOCK_M=128, num_stages=3)
    assert dict(c) == {"BLOCK_M": 128, "BLOCK_N": 64, "num_stages": 3}
    assert c == tune.Config(num_stages=3, BLOCK_M=128, BLOCK_N=64)
    assert len({c, tune.Config(num_stages=3, BLOCK_M=128, BLOCK_N=64)}) == 1
    assert str(c) == "BLOCK_M=128 BLOCK_N=64 num_stages=3"

    def launch(**kwargs):
        return kwargs
    assert launch(**c) == dict(c)


def test_config_replace_changes_one_value_and_refuses_unknown_names():
    c = tune.Config(BLOCK_M=128, num_stages=3)
    assert c.replace(num_stages=1) == tune.Config(BLOCK_M=128, num_stages=1)
    assert c["num_stages"] == 3
    with pytest.raises(KeyError, match="num_warps"):
        c.replace(num_warps=8)


# --- levels and pruning --------------------------------------------------------------------

def test_level_0_is_the_default_alone():
    assert SPACE.configs(0) == [cfg(64)]


def test_level_1_adds_the_small_list_without_duplicates():
    assert SPACE.configs(1) == [cfg(64), cfg(128), cfg(32)]


def test_level_2_adds_the_whole_grid():
    configs = SPACE.configs(2)
    assert configs[:3] == SPACE.configs(1)
    # the three level-1 configs are in the grid too
    assert len(configs) == len(set(configs)) == 4 * 2 * 2
    assert tune.Config(BLOCK=256, num_warps=8, num_stages=2) in configs


def test_unknown_level_is_refused_with_the_levels_listed():
    with pytest.raises(ValueError, match="level must be one of"):
        SPACE.configs(3)


def test_pruning_rejects_with_a_reason_and_only_with_resources():
    def prune(config, problem, resources):
        return "too big" if config["BLOCK"] * 1000 > resources.shared_bytes else None
    space = tune.SearchSpace(default=cfg(64), small=[cfg(128), cfg(256)], prune=prune)
    kept, pruned = space.candidates(1, PROBLEM, tune.Resources(shared_bytes=150_000))
    assert kept == [cfg(64), cfg(128)] and pruned == [(cfg(256), "too big")]
    assert space.candidates(1, PROBLEM, None) == (space.configs(1), [])


def test_the_cap_thins_the_grid_but_keeps_level_1():
    space = tune.SearchSpace(default=cfg(64), small=[cfg(128)], cap=6,
                             grid={"BLOCK": tuple(range(16, 16 * 40, 16)), "num_warps": (4,),
                                   "num_stages": (3,)})
    kept, pruned = space.candidates(2, PROBLEM, H200)
    assert len(kept) == 6 and kept[:2] == [cfg(64), cfg(128)]
    assert len(kept) + len(pruned) == len(space.configs(2))
    assert all(reason == "over the cap of 6 configurations" for _, reason in pruned)


def test_matmul_prune_rejects_what_failed_to_compile_on_the_h200():
    # 128x256x64, 4 stages, unsplit epilogue: the compiler asked for 262,176 bytes of 232,448
    failed = tune.Config(**{**pipelined.PERSISTENT_DEFAULT, "EPILOGUE_SPLIT": 1})
    assert "shared memory" in pipelined.matmul_prune(failed, PROBLEM, H200)
    persistent = tune.Config(**pipelined.PERSISTENT_DEFAULT)
    assert pipelined.matmul_prune(persistent, PROBLEM, H200) is None
    too_many_registers = tune.Config(BLOCK_M=128, BLOCK_N=256, BLOCK_K=32, num_warps=4,
                                     num_stages=2)
    assert "registers" in pipelined.matmul_prune(too_many_registers, PROBLEM, H200)


def test_shared_memory_model_matches_what_the_compiler_allocated_on_the_h200():
    record = json.loads((REPO / "docs/results/h200-2026-11-29-matmul-configs.json").read_text())
    checked = 0
    for name, facts in record["configs"].items():
        if "shared_bytes" not in facts:
            continue
        config = facts["config"]
        model = pipelined.matmul_shared_bytes(config, 2, config.get("EPILOGUE_SPLIT"))
        if name.startswith("pipelined"):
            assert model == facts["shared_bytes"], name
        else:  # plus a few barriers
            assert 0 <= facts["shared_bytes"] - model <= 64, name
        checked += 1
    assert checked >= 20


def test_every_level_1_matmul_config_fits_the_h200():
    for space in (pipelined.PIPELINED_SPACE, pipelined.PERSISTENT_SPACE):
        kept, pruned = space.candidates(1, PROBLEM, H200)
        assert pruned == [] and len(kept) >= 5
        kept2, pruned2 = space.candidates(2, PROBLEM, H200)
        assert len(kept2) == space.cap and pruned2


# --- racing ----------------------------------------------------------------------------------

def test_race_drops_clearly_slower_candidates_after_one_round():
    fast, close, slow = cfg(64), cfg(128), cfg(32)
    gpu = SyntheticGPU({fast: 1.0, close: 1.01, slow: 1.5})
    winner, trials = tune.race([fast, close, slow], gpu, max_rounds=4)
    status = {t.config: t.status for t in trials}
    assert winner == fast
    assert status[slow] == "dropped in round 1"
    assert status[close] == "raced"  # within noise of the leader: raced to the end
    assert len(next(t for t in trials if t.config == slow).samples_ms) == 5
    assert len(next(t for t in trials if t.config == close).samples_ms) == 20


def test_race_stops_as_soon_as_one_candidate_is_left():
    fast, slow = cfg(64), cfg(32)
    gpu = SyntheticGPU({fast: 1.0, slow: 2.0})
    rounds = []
    winner, _ = tune.race([fast, slow], gpu, max_rounds=4,
                          on_round=lambda r, alive: rounds.append((r, alive)))
    assert winner == fast and gpu.calls == 1 and rounds == [(1, 1)]


def test_race_keeps_a_candidate_whose_best_run_beats_the_leaders_median():
    a, b = cfg(64), cfg(32)

    def measure(configs):  # b is noisy: slower median, but some runs faster than a's median
        return {c: ([1.0] * 5 if c == a else [0.99, 1.2, 1.2, 1.2, 1.2]) for c in configs}
    winner, trials = tune.race([a, b], measure, max_rounds=2)
    assert winner == a and {t.status for t in trials} == {"winner", "raced"}


def test_race_on_many_synthetic_candidates_finds_the_fastest_cheaply():
    configs = [cfg(16 * i) for i in range(1, 31)]
    means = {c: 1.0 + 0.1 * i for i, c in enumerate(configs)}
    means[configs[17]] = 0.8
    gpu = SyntheticGPU(means, seed=3)
    winner, trials = tune.race(configs, gpu)
    assert winner == configs[17]
    samples = sum(len(t.samples_ms) for t in trials)
    assert samples < 0.3 * len(configs) * 20  # early stopping: far fewer than racing all 4 rounds


# --- autotune: interpreter default, cache, failures, progress --------------------------------

def test_without_a_gpu_or_timings_the_default_is_returned_and_says_why():
    result = tune.autotune(kernel_a, PROBLEM, SPACE, launch=lambda c: None)
    assert result.config == SPACE.default and "interpreter mode" in result.note


def test_second_call_comes_from_the_cache_without_timing_anything():
    gpu = SyntheticGPU({cfg(64): 1.0, cfg(128): 0.5, cfg(32): 2.0})
    first = tune.autotune(kernel_a, PROBLEM, SPACE, lambda c: None, measure=gpu, progress=False)
    calls = gpu.calls
    second = tune.autotune(kernel_a, PROBLEM, SPACE, lambda c: None, measure=gpu, progress=False)
    assert first.config == second.config == cfg(128)
    assert not first.from_cache and second.from_cache and gpu.calls == calls
    tune._MEMORY.clear()  # a new process: read back from disk
    third = tune.autotune(kernel_a, PROBLEM, SPACE, lambda c: None, measure=gpu, progress=False)
    assert third.from_cache and third.config == cfg(128) and gpu.calls == calls
    assert third.trials == first.trials and tune.cache_path().exists()


def test_cache_is_keyed_by_kernel_source_problem_level_and_space():
    gpu = SyntheticGPU({cfg(64): 1.0, cfg(128): 0.5, cfg(32): 2.0})

    def tuned(kernel=kernel_a, problem=PROBLEM, level=1, space=SPACE):
        return tune.autotune(kernel, problem, space, lambda c: None, level=level, measure=gpu,
                             progress=False)
    tuned()
    assert not tuned(kernel=kernel_b).from_cache
    assert not tuned(problem={**PROBLEM, "K": 512}).from_cache
    assert not tuned(level=0).from_cache
    assert not tuned(space=tune.SearchSpace(default=cfg(64), small=[cfg(128)])).from_cache
    assert tuned().from_cache


#: a kernel module whose helper and constant the tests vary: {body} is the helper's return
KERNEL_MODULE = """
import triton
import triton.language as tl

SCALE = {scale}


@triton.jit
def helper(x):
    return {body}


@triton.jit
def kernel(p):
    tl.store(p, tl.sum(helper(tl.load(p + tl.arange(0, 4))) * SCALE, axis=0))
"""


def kernel_module(folder, name, scale=2, body="x * 2"):
    """The module KERNEL_MODULE makes, written to folder/name.py and imported (inspect needs
    its file)."""
    import importlib.util
    path = folder / f"{name}.py"
    path.write_text(KERNEL_MODULE.format(scale=scale, body=body))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cache_keys_cover_the_helpers_a_kernel_calls_and_the_constants_it_reads(tmp_path):
    plain = kernel_module(tmp_path, "plain")
    keyed = tune.keyed_source(plain.kernel)
    assert "def helper" in keyed and "SCALE = 2" in keyed
    assert "def sum" not in keyed          # Triton's own jit functions come with its version
    assert tune.keyed_source(kernel_module(tmp_path, "same").kernel) == keyed
    assert tune.keyed_source(kernel_module(tmp_path, "helper", body="x * 3").kernel) != keyed
    assert tune.keyed_source(kernel_module(tmp_path, "scale", scale=3).kernel) != keyed
    group = tune.KernelGroup("both", (plain.kernel, kernel_a))
    assert tune.keyed_source(group) == keyed + "\n" + tune.kernel_source(kernel_a)

    gpu = SyntheticGPU({cfg(64): 1.0, cfg(128): 0.5, cfg(32): 2.0})

    def tuned(module):
        return tune.autotune(module.kernel, PROBLEM, SPACE, lambda c: None, measure=gpu,
                             progress=False)
    tuned(plain)
    assert tuned(kernel_module(tmp_path, "again")).from_cache
    assert not tuned(kernel_module(tmp_path, "edited", body="x * 3")).from_cache


def test_cache_false_searches_again():
    gpu = SyntheticGPU({cfg(64): 1.0, cfg(128): 0.5, cfg(32): 2.0})
    tune.autotune(kernel_a, PROBLEM, SPACE, lambda c: None, measure=gpu, progress=False)
    calls = gpu.calls
    again = tune.autotune(kernel_a, PROBLEM, SPACE, lambda c: None, measure=gpu, progress=False,
                          cache=False)
    assert not again.from_cache and gpu.calls > calls


def test_configs_that_fail_to_compile_are_recorded_not_fatal():
    def launch(config):
        if config["BLOCK"] == 128:
            raise RuntimeError("out of resource: shared memory, Required: 262176\nmore detail")
    gpu = SyntheticGPU({cfg(64): 1.0, cfg(128): 0.5, cfg(32): 2.0})
    result = tune.autotune(kernel_a, PROBLEM, SPACE, launch, measure=gpu, progress=False)
    status = {t.config: t.status for t in result.trials}
    assert result.config == cfg(64)
    assert status[cfg(128)] == ("failed: RuntimeError: out of resource: shared memory, "
                                "Required: 262176")
    assert "failed: RuntimeError" in result.table()


def test_when_nothing_can_run_the_error_names_the_first_failure():
    def launch(config):
        raise NameError("name 'tl' is not defined")
    with pytest.raises(RuntimeError, match="NameError: name 'tl' is not defined"):
        tune.autotune(kernel_a, PROBLEM, SPACE, launch, measure=SyntheticGPU({}), progress=False)


def test_when_everything_is_pruned_the_error_says_why():
    space = tune.SearchSpace(default=cfg(64), prune=lambda c, p, r: "does not fit")
    with pytest.raises(RuntimeError, match="pruned.*does not fit"):
        tune.autotune(kernel_a, PROBLEM, space, lambda c: None, measure=SyntheticGPU({}),
                      resources=H200, progress=False)


def test_pruned_configs_appear_in_the_result():
    space = tune.SearchSpace(default=cfg(64), small=[cfg(256)],
                             prune=lambda c, p, r: "too big" if c["BLOCK"] > 128 else None)
    result = tune.autotune(kernel_a, PROBLEM, space, lambda c: None, resources=H200,
                           measure=SyntheticGPU({cfg(64): 1.0}), progress=False)
    assert {t.status for t in result.trials} == {"winner", "pruned: too big"}


def test_progress_goes_in_plain_lines_to_a_log_and_ends_with_the_winner(capsys):
    gpu = SyntheticGPU({cfg(64): 1.0, cfg(128): 0.5, cfg(32): 2.0})
    tune.autotune(kernel_a, PROBLEM, SPACE, lambda c: None, measure=gpu)
    out = capsys.readouterr().out     # captured: not a terminal, so no redrawing
    assert "\r" not in out and "compiling" in out and "racing" in out
    last = out.rstrip().splitlines()[-1]
    assert "best of 3" in last and "BLOCK=128 num_stages=3 num_warps=4" in last
    tune.autotune(kernel_a, PROBLEM, SPACE, lambda c: None, measure=gpu)
    assert capsys.readouterr().out == ""  # from the cache: nothing to show


def test_table_lists_every_candidate_fastest_first():
    gpu = SyntheticGPU({cfg(64): 1.0, cfg(128): 0.5, cfg(32): 2.0})
    table = tune.autotune(kernel_a, PROBLEM, SPACE, lambda c: None, measure=gpu,
                          progress=False).table()
    lines = table.splitlines()
    assert "BLOCK=128" in lines[1] and "winner" in lines[1] and "1.00x" in lines[1]
    assert "dropped in round 1" in table and "level 1" in lines[-1] and "searched in" in lines[-1]


# --- the reference tuned matmuls in the interpreter ------------------------------------------

@pytest.mark.parametrize("persistent", [False, True], ids=["pipelined", "persistent"])
def test_tuned_reference_matmul_is_correct_in_the_interpreter(persistent):
    a = torch.randn(72, 40, dtype=torch.float16)
    b = torch.randn(40, 48, dtype=torch.float16)
    ref = a.double() @ b.double()
    out = pipelined.tuned_matmul(a, b, persistent=persistent)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 3e-3


def test_persistent_refuses_rows_tma_cannot_address():
    a = torch.randn(8, 45, dtype=torch.float16)
    b = torch.randn(45, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match="multiples of 16 bytes"):
        pipelined.persistent_matmul.__wrapped__(a, b)
    with pytest.raises(ValueError, match="contiguous"):
        pipelined.persistent_matmul.__wrapped__(torch.randn(16, 8, dtype=torch.float16).t(), b[:16])


@pytest.mark.parametrize("shared_kib, dtype", [(227, "float32"), (99, "float16"), (99, "float32"),
                                               (64, "float16"), (64, "float32")])
def test_level_1_keeps_a_pipelined_config_on_smaller_gpus_and_in_float32(shared_kib, dtype):
    kept, _ = pipelined.PIPELINED_SPACE.candidates(1, {"dtype": dtype},
                                                   tune.Resources(shared_kib * 1024))
    assert kept


def test_level_1_keeps_a_persistent_config_in_float32_on_hopper():
    kept, _ = pipelined.PERSISTENT_SPACE.candidates(1, {"dtype": "float32"}, H200)
    assert kept


def test_a_cache_hit_is_cheap_and_follows_a_new_space_object():
    gpu = SyntheticGPU({cfg(64): 1.0, cfg(128): 0.5, cfg(32): 2.0})
    tune.autotune(kernel_a, PROBLEM, SPACE, lambda c: None, measure=gpu, progress=False)
    same_configs = tune.SearchSpace(default=cfg(64), small=[cfg(128), cfg(64), cfg(32)],
                                    grid=SPACE.grid)
    assert tune.autotune(kernel_a, PROBLEM, same_configs, lambda c: None, measure=gpu,
                         progress=False).from_cache  # same candidates: same key


def tuned_once(problem=PROBLEM):
    """autotune of kernel_a on ``problem``, and the SyntheticGPU it timed (or did not)."""
    gpu = SyntheticGPU({cfg(64): 1.0, cfg(128): 0.5, cfg(32): 2.0})
    return tune.autotune(kernel_a, problem, SPACE, lambda c: None, measure=gpu,
                         progress=False), gpu


def test_a_hit_returns_the_stored_result_without_hashing_sources_again(monkeypatch):
    first, _ = tuned_once()
    reordered, _ = tuned_once(dict(reversed(PROBLEM.items())))   # one key, whatever the order
    with monkeypatch.context() as patch:
        patch.setattr(tune, "cache_key", lambda *args: pytest.fail("key computed again"))
        second, gpu = tuned_once()
        third, _ = tuned_once()
    assert second is third is reordered and second.from_cache and gpu.calls == 0
    assert second.config == first.config == cfg(128)


def test_the_memo_misses_after_clear_cache_and_in_another_cache_folder(tmp_path, monkeypatch):
    tuned_once()
    tune.clear_cache()
    again, gpu = tuned_once()
    assert not again.from_cache and gpu.calls
    monkeypatch.setenv("TILEGYM_CACHE_DIR", str(tmp_path / "other"))   # _MEMORY not cleared
    elsewhere, gpu = tuned_once()
    assert not elsewhere.from_cache and gpu.calls
    assert (tmp_path / "other" / "tune.json").exists()


def test_the_memo_tells_values_apart_as_the_cache_key_writes_them():
    """True and 1 are one dictionary key but two problems ("causal=True", "causal=1"); a value
    that cannot be hashed is keyed by its str."""
    assert not tuned_once({**PROBLEM, "causal": 1})[0].from_cache
    assert not tuned_once({**PROBLEM, "causal": True})[0].from_cache
    assert tuned_once({**PROBLEM, "causal": 1})[0].from_cache
    assert not tuned_once({**PROBLEM, "strides": [1, 2]})[0].from_cache
    assert tuned_once({**PROBLEM, "strides": [1, 2]})[0].from_cache
    assert not tuned_once({**PROBLEM, "strides": [2, 1]})[0].from_cache


def test_a_problem_too_small_to_gain_is_not_tuned_and_says_why():
    """The correctness checks' small shapes: the default runs in microseconds, so no other
    candidate is even compiled."""
    launched = []
    gpu = SyntheticGPU({cfg(64): 0.01, cfg(128): 0.005, cfg(32): 0.02})
    result = tune.autotune(kernel_a, PROBLEM, SPACE, launched.append, measure=gpu, progress=False)
    assert result.config == SPACE.default and launched == [SPACE.default] and gpu.calls == 1
    assert "not tuned" in result.note and "0.010 ms" in result.note
    assert tune.autotune(kernel_a, PROBLEM, SPACE, launched.append, measure=gpu).from_cache
    # with the bar lowered, the same problem is tuned and the faster candidate wins
    tuned = tune.autotune(kernel_a, PROBLEM, SPACE, launched.append, measure=gpu, cache=False,
                          progress=False, min_ms=0.001)
    assert tuned.config == cfg(128)


def test_inside_a_correctness_check_nothing_is_tuned_or_stored():
    gpu = SyntheticGPU({cfg(64): 1.0, cfg(128): 0.5, cfg(32): 2.0})
    launched = []
    with tune.defaults_only():
        result = tune.autotune(kernel_a, PROBLEM, SPACE, launched.append, measure=gpu)
    assert result.config == SPACE.default and "correctness check" in result.note
    assert launched == [] and gpu.calls == 0
    tuned = tune.autotune(kernel_a, PROBLEM, SPACE, launched.append, measure=gpu, progress=False)
    assert not tuned.from_cache and tuned.config == cfg(128)    # nothing was stored
    with tune.defaults_only():                                  # a tuned problem keeps its winner
        kept = tune.autotune(kernel_a, PROBLEM, SPACE, launched.append, measure=gpu)
        assert kept.config == cfg(128)


def test_inside_a_correctness_check_a_default_that_cannot_fit_gives_way():
    big = tune.Config(BLOCK=4096, num_warps=4, num_stages=3)
    space = tune.SearchSpace(default=big, small=[cfg(64)],
                             prune=lambda c, p, r: "too big" if c["BLOCK"] > 1024 else None)
    tiny = tune.Resources(shared_bytes=1024)
    with tune.defaults_only():
        result = tune.autotune(kernel_a, PROBLEM, space, lambda c: None,
                               measure=SyntheticGPU({}), resources=tiny)
    assert result.config == cfg(64)


def test_configs_from_rows_names_each_row_in_order():
    rows = [(128, 64, 4), (64, 32, 8)]
    assert tune.configs_from_rows(("BLOCK_M", "BLOCK_N", "num_warps"), rows) == (
        tune.Config(BLOCK_M=128, BLOCK_N=64, num_warps=4),
        tune.Config(BLOCK_M=64, BLOCK_N=32, num_warps=8))


def test_a_space_of_paths_names_each_configuration_s_path_and_prunes_with_its_space():
    wide = tune.SearchSpace(default=tune.Config(BLOCK=64), small=(tune.Config(BLOCK=128),),
                            prune=lambda c, p, r: "too wide" if c["BLOCK"] > p["N"] else None)
    plain = tune.SearchSpace(default=tune.Config(WARPS=4))
    paths = {"wide": wide, "plain": plain}
    assert tune.path_configs(paths) == [tune.Config(BLOCK=64, PATH="wide"),
                                        tune.Config(BLOCK=128, PATH="wide"),
                                        tune.Config(WARPS=4, PATH="plain")]
    assert tune.split_path(tune.Config(BLOCK=128, PATH="wide")) == ("wide", {"BLOCK": 128})
    resources = tune.Resources(shared_bytes=48 * 1024)
    assert tune.path_prune(paths, tune.Config(BLOCK=128, PATH="wide"), {"N": 64},
                           resources) == "too wide"
    assert tune.path_prune(paths, tune.Config(BLOCK=64, PATH="wide"), {"N": 64}, resources) is None
    assert tune.path_prune(paths, tune.Config(WARPS=4, PATH="plain"), {"N": 1}, resources) is None


def _fake_gpu(monkeypatch, gpu_ms):
    """bench's timing replaced by a record of what gpu_measure asked for: gpu_ms(config name)
    is each launch's GPU time, graph_replay tags a function as a replay, compare records the
    names it was told were graphs."""
    from tilegym_edu import bench
    seen = {"estimated": [], "captured": [], "compared": []}
    monkeypatch.setattr(bench, "gpu_time_ms",
                        lambda fn, warmup_ms: seen["estimated"].append(fn()) or gpu_ms[fn()])
    monkeypatch.setattr(bench, "graph_replay",
                        lambda fn: seen["captured"].append(fn()) or (lambda: ("replay", fn())))

    def compare(fns, graph_below_ms, graphed, **options):
        assert graph_below_ms == 0, "compare must not decide again"
        seen["compared"].append({name: name in graphed for name in fns})
        return [bench.Measurement(name, (1.0,)) for name in fns]
    monkeypatch.setattr(bench, "compare", compare)
    return seen


def test_a_race_times_every_config_the_same_way_in_every_round(monkeypatch):
    """One decision a race, kept: a launch near the 0.1 ms threshold is not timed as a graph in
    one round and as plain launches in the next (the H200's race of 2026-12-04, runs 21 and
    23)."""
    a, b, c = (tune.Config(BLOCK=n) for n in (1, 2, 3))
    seen = _fake_gpu(monkeypatch, {str(a): 0.08, str(b): 0.12, str(c): 0.3})  # around 0.1 ms
    measure = tune.gpu_measure(str)                  # launch(config) returns the config's name
    assert set(measure([a, b, c])) == {a, b, c}
    measure([a, b])
    measure([a])
    assert seen["estimated"] == [str(a), str(b), str(c)]   # once, at the first round
    assert seen["captured"] == [str(a), str(b), str(c)]    # one graph each, replayed after
    assert seen["compared"] == [{str(a): True, str(b): True, str(c): True},
                                {str(a): True, str(b): True}, {str(a): True}]
    assert measure.as_graphs() is True


def test_a_race_whose_first_launch_is_long_runs_every_candidate_as_it_is(monkeypatch):
    a, b = tune.Config(BLOCK=1), tune.Config(BLOCK=2)
    seen = _fake_gpu(monkeypatch, {str(a): 0.5, str(b): 0.05})
    measure = tune.gpu_measure(str)
    measure([a])          # the too-small-to-tune check measures the default alone first
    measure([a, b])
    assert seen["captured"] == [] and seen["estimated"] == [str(a)]
    assert seen["compared"] == [{str(a): False}, {str(a): False, str(b): False}]


def test_a_race_told_to_graph_everything_estimates_nothing(monkeypatch):
    a = tune.Config(BLOCK=1)
    seen = _fake_gpu(monkeypatch, {})
    tune.gpu_measure(str, graph_below_ms=float("inf"))([a])
    assert seen["estimated"] == [] and seen["captured"] == [str(a)]


def test_a_race_with_a_config_that_cannot_be_captured_times_every_config_plainly(monkeypatch):
    """Graphs for some and plain launches for others would be the mix gpu_measure is there to
    prevent: one config that cannot be captured (it synchronizes, say) makes the race plain."""
    from tilegym_edu import bench
    a, b, c = (tune.Config(BLOCK=n) for n in (1, 2, 3))
    seen = _fake_gpu(monkeypatch, {str(a): 0.05, str(b): 0.05, str(c): 0.05})
    monkeypatch.setattr(bench, "graph_replay",
                        lambda fn: None if fn() == str(b) else (lambda: ("replay", fn())))
    measure = tune.gpu_measure(str)
    measure([a, b, c])
    measure([a, c])
    assert seen["compared"] == [{str(a): False, str(b): False, str(c): False},
                                {str(a): False, str(c): False}]
    assert measure.as_graphs() is False


def test_the_cache_key_names_the_race_rules():
    key = tune.cache_key(pipelined.pipelined_matmul_kernel, {"M": 1}, 1, [cfg(64)])
    assert key.endswith(f"| races {tune.RACE_RULES}")
    graphs = tune.cache_key(pipelined.pipelined_matmul_kernel, {"M": 1}, 1, [cfg(64)], True)
    assert graphs == key + " as graphs"


def _gpu_timing_recorded(monkeypatch, means, captured=True):
    """autotune on a pretend GPU whose timing is SyntheticGPU(means), timing graphs when asked
    to if ``captured``; returns the list of the graph_below_ms each gpu_measure autotune built
    was given."""
    import math
    built = []

    def gpu_measure(launch, graph_below_ms=tune.bench.GRAPH_THRESHOLD_MS):
        built.append(graph_below_ms)
        timing = SyntheticGPU(means)
        timing.as_graphs = lambda: captured and graph_below_ms == math.inf
        return timing
    monkeypatch.setattr(tune, "gpu_measure", gpu_measure)
    monkeypatch.setattr(tune.device, "ON_GPU", True)
    monkeypatch.setattr(tune.device, "info", lambda: None)
    monkeypatch.setattr(tune.device, "synchronize", lambda: None)
    return built


def test_a_race_told_to_time_graphs_is_timed_so_and_cached_apart(monkeypatch):
    """race_as_graphs: the race's measure graphs every candidate (however long its launch takes
    on the host), and its winner is not the answer to a race timed the usual way: on the H200
    of run 37 (2026-12-04) a decoding step's products got kernels 1.7x slower than the skinny
    kernel, probably from races timed as plain launches, and such winners must not stand in."""
    import math
    built = _gpu_timing_recorded(monkeypatch, {cfg(64): 1.0, cfg(128): 0.5, cfg(32): 2.0})
    launched = []
    graphs = tune.autotune(kernel_a, PROBLEM, SPACE, launched.append, resources=H200,
                           progress=False, min_ms=0, race_as_graphs=True)
    assert graphs.config == cfg(128) and not graphs.from_cache
    assert built == [math.inf]                   # min_ms 0: no too-small check, the race's
    assert launched.count(SPACE.default) == 1    # compiled once, not run by a check
    plain = tune.autotune(kernel_a, PROBLEM, SPACE, launched.append, resources=H200,
                          progress=False, min_ms=0)
    assert not plain.from_cache and built[1:] == [tune.bench.GRAPH_THRESHOLD_MS]
    assert tune.autotune(kernel_a, PROBLEM, SPACE, launched.append, resources=H200,
                         min_ms=0, race_as_graphs=True).from_cache
    assert graphs.note == "" and plain.note == ""
    with pytest.raises(ValueError, match="gpu_measure"):
        tune.autotune(kernel_a, PROBLEM, SPACE, launched.append, race_as_graphs=True,
                      measure=SyntheticGPU({}))


def test_a_race_asked_for_graphs_that_ran_plain_says_so(monkeypatch):
    _gpu_timing_recorded(monkeypatch, {cfg(64): 1.0, cfg(128): 0.5, cfg(32): 2.0},
                         captured=False)
    result = tune.autotune(kernel_a, PROBLEM, SPACE, lambda c: None, resources=H200,
                           progress=False, min_ms=0, race_as_graphs=True)
    assert result.config == cfg(128) and "plain launches" in result.note


def test_a_program_that_overflows_shared_memory_is_refused_with_both_sizes():
    gpu = tune.Resources(shared_bytes=227 * 1024)
    assert gpu.shared_memory_problem(227 * 1024) == ""
    assert gpu.shared_memory_problem(228 * 1024) == (
        "needs 228 KiB of shared memory, the GPU offers 227 KiB per block")


class _Recorded(Exception):
    """Raised by a stand-in for autotune once it has recorded how it was called."""


@pytest.mark.parametrize("case", ["decode rows", "more rows", "decode attention",
                                  "prefill through the cache", "conv"])
def test_the_races_run_however_fast_are_timed_as_graphs(case, monkeypatch):
    """A decoding step's products and attention, and every convolution layer, are raced at any
    size (min_ms=0) and as CUDA graphs: their launches take longer in Python than on the GPU.
    Other products keep the usual bar and timing; a prefill through the cache is raced at any
    size, timed the usual way (graphs would keep each candidate's scratch memory)."""
    from tilegym_edu.reference import conv_persistent, flash_decode, split_k
    asked = {}

    def record(*args, **options):
        asked.update(options)
        raise _Recorded
    module, call = {
        "decode rows": (split_k, lambda: split_k.shape_matmul(torch.randn(16, 64),
                                                              torch.randn(64, 32))),
        "more rows": (split_k, lambda: split_k.shape_matmul(torch.randn(17, 64),
                                                            torch.randn(64, 32))),
        "decode attention": (flash_decode, lambda: flash_decode.flash_decode(
            torch.randn(1, 4, flash_decode.DECODE_QUERIES, 16), torch.randn(1, 2, 40, 16),
            torch.randn(1, 2, 40, 16), causal=True)),
        "prefill through the cache": (flash_decode, lambda: flash_decode.flash_decode(
            torch.randn(1, 4, flash_decode.DECODE_QUERIES + 1, 16), torch.randn(1, 2, 40, 16),
            torch.randn(1, 2, 40, 16), causal=True)),
        "conv": (conv_persistent, lambda: conv_persistent.shape_conv2d(
            torch.randn(1, 8, 6, 6).to(memory_format=torch.channels_last),
            torch.randn(8, 8, 3, 3).to(memory_format=torch.channels_last), padding=1)),
    }[case]
    monkeypatch.setattr(module, "autotune", record)
    with pytest.raises(_Recorded):
        call()
    if case == "more rows":
        assert "min_ms" not in asked and not asked.get("race_as_graphs")
    elif case == "prefill through the cache":    # raced at any size, graphs only for a step's
        assert asked["min_ms"] == 0 and asked["race_as_graphs"] is False
    else:
        assert asked["min_ms"] == 0 and asked["race_as_graphs"] is True
