"""flash_backward_onepass without a GPU: its kernel runs only on Hopper (tests/gpu/
test_flash_backward_hopper_gpu.py), so here the one pass must stay out of attention_backward,
say why it refuses a "passes" configuration, and, on inputs faked to fit, run in place of the
two passes exactly when a configuration names it, into the tensors the two passes fill."""
import pytest
import torch

from tilegym_edu.reference import flash, flash_backward, flash_backward_hopper
from tilegym_edu.reference import flash_backward_onepass as onepass
from tilegym_edu import tune
from tilegym_edu.tune import Config, KernelGroup

pytestmark = pytest.mark.beside

SMALL = Config(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=1)
ONEPASS = Config(PATH="onepass", **onepass.ONEPASS_SPACE.default)


def backward_case(shape=(1, 4, 128, 32), kv_heads=2, causal=True):
    """q, k, v (float32: the interpreter's tl.dot; grouped-query heads), o and lse of
    flash.py's forward, do, and flash_backward's gradients."""
    g = torch.Generator().manual_seed(0)
    q, do = (torch.randn(shape, generator=g) for _ in range(2))
    k, v = (torch.randn(shape[0], kv_heads, *shape[2:], generator=g) for _ in range(2))
    o, lse = flash.flash_forward(q, k, v, causal, config=SMALL)
    expected = flash_backward.flash_backward(q, k, v, o, lse, do, causal,
                                             {"dkdv": SMALL, "dq": SMALL})
    return (q, k, v, o, lse, do), expected


def test_without_a_hopper_gpu_the_one_pass_is_not_offered_and_a_passes_config_says_why(
        computed):
    (q, k, v, o, lse, do), expected = computed
    _, launchers = flash_backward.fastest_launchers(q, k, v, o, lse, do, True)
    assert set(launchers) == {"dkdv", "dq"}
    with pytest.raises(ValueError, match="do not fit it.*onepass_fits.*leave out"):
        flash_backward.attention_backward(q, k, v, o, lse, do, True,
                                          {"dkdv": SMALL, "dq": SMALL, "passes": ONEPASS})
    # a tuned configuration that names the two passes runs them here too
    got = flash_backward.attention_backward(
        q, k, v, o, lse, do, True, {"dkdv": SMALL, "dq": SMALL, "passes": Config(PATH="two")})
    assert all(torch.equal(a, b) for a, b in zip(got, expected))


def test_the_one_pass_needs_the_gluon_kernels_inputs_and_the_tma_reduction(monkeypatch):
    q, k, v = (torch.zeros(1, 2, 128, 64) for _ in range(3))
    lse = torch.zeros(1, 2, 128)
    monkeypatch.setattr(onepass, "backward_fits", lambda *args: True)
    assert onepass.onepass_fits(q, k, v, lse, q)
    monkeypatch.setattr(onepass, "REDUCE_ADD", None)  # a Triton whose compiler lacks it
    assert not onepass.onepass_fits(q, k, v, lse, q)


@pytest.mark.parametrize("config, words", [
    (Config(STAGES=2), "needs BLOCK_M"),
    (Config(BLOCK_M=128, STAGES=2), "takes BLOCK_M 64, not 128"),
    (Config(BLOCK_M=64, STAGES=4), "takes STAGES 2 or 3, not 4"),
], ids=["no BLOCK_M", "BLOCK_M 128", "4 stages"])
def test_a_onepass_configuration_it_cannot_run_is_refused_before_any_launch(config, words):
    assert words in onepass.onepass_prune(config, {"head_dim": 64}, None)
    assert all(onepass.onepass_prune(c, {"head_dim": 128}, None) is None
               for c in onepass.ONEPASS_SPACE.configs(level=2))
    q = torch.zeros(1, 2, 128, 64)
    with pytest.raises(ValueError, match=words):
        onepass.launch_onepass(q, q, q, None, None, q, q.float(), q, q, q, False, config)


@pytest.fixture(scope="module")
def computed():
    """backward_case() once for the module (the interpreter takes about a second for it)."""
    return backward_case()


@pytest.fixture
def faked_fit(monkeypatch, fresh_cache, computed):
    """Inputs that fit both Gluon paths (faked: they run only on Hopper), the Gluon launches
    replaced by copies of flash_backward's gradients; returns (case, expected, calls), calls
    recording each launch's name and the tensors it filled."""
    case, expected = computed
    calls = []

    def gluon_dkdv(q, k, v, lse, delta, do, dk, dv, causal, config):
        calls.append(("dkdv", dk, dv))
        dk.copy_(expected[1])
        dv.copy_(expected[2])

    def gluon_dq(q, k, v, lse, delta, do, dq, causal, config):
        calls.append(("dq", dq))
        dq.copy_(expected[0])

    def one_pass(q, k, v, lse, delta, do, dq_accum, dq, dk, dv, causal, config):
        assert dq_accum.dtype == torch.float32 and dq_accum.shape == q.shape
        calls.append(("onepass", dq, dk, dv, dict(config)))
        for got, want in zip((dq, dk, dv), expected):
            got.copy_(want)
    monkeypatch.setattr(flash_backward_hopper, "backward_fits", lambda *args: True)
    monkeypatch.setattr(onepass, "onepass_fits", lambda *args: True)
    monkeypatch.setattr(flash_backward_hopper, "launch_dkdv", gluon_dkdv)
    monkeypatch.setattr(flash_backward_hopper, "launch_dq", gluon_dq)
    monkeypatch.setattr(onepass, "launch_onepass", one_pass)
    return case, expected, calls


GLUON = {"dkdv": Config(PATH="gluon", **flash_backward_hopper.DKDV_SPACE.default),
         "dq": Config(PATH="gluon", **flash_backward_hopper.DQ_SPACE.default)}


def test_a_onepass_configuration_runs_the_one_pass_alone_into_the_returned_tensors(faked_fit):
    case, expected, calls = faked_fit
    dq, dk, dv = flash_backward.attention_backward(*case, True, {"passes": ONEPASS})
    assert [c[0] for c in calls] == ["onepass"]
    assert calls[0][1] is dq and calls[0][2] is dk and calls[0][3] is dv
    assert calls[0][4] == dict(onepass.ONEPASS_SPACE.default)
    assert all(torch.equal(a, b) for a, b in zip((dq, dk, dv), expected))


@pytest.mark.parametrize("configs", [GLUON, {**GLUON, "passes": Config(PATH="two")}],
                         ids=["without passes", "passes two"])
def test_the_two_passes_run_without_the_one_pass(faked_fit, configs):
    case, expected, calls = faked_fit
    dq, dk, dv = flash_backward.attention_backward(*case, True, configs)
    assert [c[0] for c in calls] == ["dkdv", "dq"]
    assert all(torch.equal(a, b) for a, b in zip((dq, dk, dv), expected))


def test_the_passes_race_offers_the_two_passes_first_and_every_onepass_configuration(faked_fit):
    case, _, calls = faked_fit
    _, launchers = flash_backward.fastest_launchers(*case, True)
    assert set(launchers) == {"dkdv", "dq", "onepass"}
    kernels, space, launch = flash_backward.passes_race(launchers, GLUON)
    assert isinstance(kernels, KernelGroup)
    assert onepass.onepass_kernel in kernels.kernels
    assert flash_backward_hopper.dq_kernel in kernels.kernels
    assert flash_backward.flash_dkdv_kernel in kernels.kernels
    assert space.configs(level=0) == [Config(PATH="two")]
    assert space.configs(level=1) == [Config(PATH="two")] + [
        Config(PATH="onepass", **c) for c in onepass.ONEPASS_SPACE.configs(level=1)]
    launch(Config(PATH="two"))
    launch(space.configs(level=1)[-1])
    assert [c[0] for c in calls] == ["dkdv", "dq", "onepass"]
    assert calls[2][4] == dict(onepass.ONEPASS_SPACE.configs(level=1)[-1])


@pytest.mark.parametrize("configs, words", [
    ({"passes": Config(PATH="two")}, "need a configuration for dkdv and dq"),
    ({"dkdv": GLUON["dkdv"], "passes": Config(PATH="two")}, "need a configuration for dq"),
    ({"passes": Config(PATH="three")}, "PATH 'three'.*'two', 'onepass'"),
], ids=["two without either", "two without dq", "unknown path"])
def test_a_passes_configuration_that_cannot_run_says_what_to_change(faked_fit, configs, words):
    case, _, calls = faked_fit
    with pytest.raises(ValueError, match=words):
        flash_backward.attention_backward(*case, True, configs)
    assert calls == []


def test_the_passes_race_times_the_two_passes_as_tuned_and_level_0_skips_it(faked_fit,
                                                                             monkeypatch):
    """In the interpreter nothing is timed: every race returns its default, and the passes
    race's is the two passes; its problem names the two passes' configurations, and its "two"
    runs them."""
    case, expected, calls = faked_fit
    q, k = case[0], case[1]
    _, launchers = flash_backward.fastest_launchers(*case, True)
    problem = flash_backward.backward_problem(q, k, True)
    assert set(flash_backward.tune_attention_backward(problem, launchers, level=0)) == {
        "dkdv", "dq"}
    raced, autotune = [], flash_backward.autotune

    def recording(kernels, problem_, space, launch, **options):
        raced.append((kernels, problem_, launch))
        return autotune(kernels, problem_, space, launch, **options)
    monkeypatch.setattr(flash_backward, "autotune", recording)
    results = flash_backward.tune_attention_backward(problem, launchers)
    assert set(results) == {"dkdv", "dq", "passes"}
    assert results["passes"].config == Config(PATH="two")
    kernels, passes_problem, launch = raced[-1]
    assert kernels is flash_backward.PASSES_RACE.kernels
    assert passes_problem["two passes"] == "; ".join(
        f"{name} {dict(results[name].config)}" for name in ("dkdv", "dq"))
    launch(Config(PATH="two"))
    assert [c[0] for c in calls] == ["dkdv", "dq"]
    got = flash_backward.attention_backward(*case, True)
    assert [c[0] for c in calls] == ["dkdv", "dq"] * 2
    assert all(torch.equal(a, b) for a, b in zip(got, expected))


def test_repeated_backwards_add_nothing_to_the_tuners_lookups(faked_fit):
    """The races are made once (Race), so a training loop's backwards reuse the tuner's
    in-memory keys instead of adding three a call."""
    case, _, _ = faked_fit
    flash_backward.attention_backward(*case, True)
    keys = len(tune._KEYS)
    for _ in range(3):
        flash_backward.attention_backward(*case, True)
    assert len(tune._KEYS) == keys
