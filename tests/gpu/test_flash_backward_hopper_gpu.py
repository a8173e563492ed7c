"""The Gluon backward for Hopper (reference/flash_backward_hopper.py and the one pass of
flash_backward_onepass.py), every configuration the tuner races, on a GPU of compute capability
9.x: dk, dv and dq against float64 autograd, head sizes 64 and 128, causal and not, float16
(and bfloat16 on one shape); and flash_backward.attention_backward, which races them against
the Triton kernels and the one pass against the two: every path timed in a fresh race, a
Triton configuration running the Triton kernels, and every path on grouped-query heads."""
import pytest
import torch

from tilegym_edu.check import TOLERANCES, relative_error
from tilegym_edu.reference import flash, flash_backward, flash_backward_hopper as G
from tilegym_edu.reference import flash_backward_onepass as O
from tilegym_edu.tune import Config, KernelGroup, autotune

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
    reason="the Gluon backward is written for Hopper (compute capability 9.x) GPUs")

#: (batch, heads, kv_heads, seq, head_dim): lengths multiples of 128, as backward_fits asks;
#: the last two grouped-query (four query heads a k/v head) and multi-query
SHAPES = [(2, 4, 4, 256, 64), (1, 2, 2, 384, 128), (1, 2, 2, 1024, 128), (2, 8, 2, 256, 128),
          (1, 4, 1, 384, 64)]


def case(shape, dtype, causal, seed=0):
    """q, k, v, do, o, lse (flash.py's forward), delta, and float64 autograd's dq, dk, dv."""
    batch, heads, kv_heads, seq, head_dim = shape
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, do = (torch.randn(batch, heads, seq, head_dim, device="cuda", generator=g).to(dtype)
             for _ in range(2))
    k, v = (torch.randn(batch, kv_heads, seq, head_dim, device="cuda", generator=g).to(dtype)
            for _ in range(2))
    o, lse = flash.flash_forward(q, k, v, causal)
    delta = (o.float() * do.float()).sum(-1)
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    flash.attention_reference(*leaves, causal).backward(do.double())
    return (q, k, v, do, o, lse, delta), [t.grad for t in leaves]


def assert_close(name, got, expected):
    error = relative_error(got, expected)
    assert error <= TOLERANCES[got.dtype], f"{name}: relative error {error:.2e}"


def configs(space, prune, head_dim):
    return [c for c in space.configs(level=1) if prune(c, {"head_dim": head_dim}, None) is None]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_dkdv_configuration_is_right(shape, causal):
    (q, k, v, do, o, lse, delta), (_, dk_ref, dv_ref) = case(shape, torch.float16, causal)
    assert G.backward_fits(q, k, v, lse, do)
    for config in configs(G.DKDV_SPACE, G.dkdv_prune, shape[-1]):
        dk, dv = torch.full_like(k, float("nan")), torch.full_like(v, float("nan"))
        G.launch_dkdv(q, k, v, lse, delta, do, dk, dv, causal, config)
        assert_close(f"dk {dict(config)}", dk, dk_ref)
        assert_close(f"dv {dict(config)}", dv, dv_ref)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_dq_configuration_is_right(shape, causal):
    (q, k, v, do, o, lse, delta), (dq_ref, _, _) = case(shape, torch.float16, causal)
    for config in configs(G.DQ_SPACE, G.dq_prune, shape[-1]):
        dq = torch.full_like(q, float("nan"))
        G.launch_dq(q, k, v, lse, delta, do, dq, causal, config)
        assert_close(f"dq {dict(config)}", dq, dq_ref)


def run_onepass(q, k, v, do, lse, delta, causal, config):
    """(dq, dk, dv) of one launch_onepass into NaN-filled tensors (the accumulator too: the
    launch must zero it)."""
    accumulator = torch.full(q.shape, float("nan"), device="cuda")
    grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
    O.launch_onepass(q, k, v, lse, delta, do, accumulator, *grads, causal, config)
    return grads


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_onepass_configuration_is_right_and_dk_dv_repeat_bit_for_bit(shape, causal):
    """dq is summed by reduce-adds in whatever order they land; dk and dv in registers, so two
    runs must give the same bits."""
    (q, k, v, do, o, lse, delta), expected = case(shape, torch.float16, causal)
    assert O.onepass_fits(q, k, v, lse, do)
    for config in O.ONEPASS_SPACE.configs(level=2):
        first = run_onepass(q, k, v, do, lse, delta, causal, config)
        again = run_onepass(q, k, v, do, lse, delta, causal, config)
        for name, got, want in zip("dq dk dv".split(), first, expected):
            assert_close(f"{name} {dict(config)}", got, want)
        assert torch.equal(first[1], again[1]) and torch.equal(first[2], again[2]), config


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_bfloat16(causal):
    (q, k, v, do, o, lse, delta), (dq_ref, dk_ref, dv_ref) = case((1, 2, 2, 1024, 128),
                                                                   torch.bfloat16, causal)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    G.launch_dkdv(q, k, v, lse, delta, do, dk, dv, causal, G.DKDV_SPACE.default)
    G.launch_dq(q, k, v, lse, delta, do, dq, causal, G.DQ_SPACE.default)
    onepass = run_onepass(q, k, v, do, lse, delta, causal, O.ONEPASS_SPACE.default)
    for name, got, expected in (("dq", dq, dq_ref), ("dk", dk, dk_ref), ("dv", dv, dv_ref)):
        assert_close(name, got, expected)
    for name, got, expected in zip("dq dk dv".split(), onepass, (dq_ref, dk_ref, dv_ref)):
        assert_close(f"{name} (one pass)", got, expected)


def race_both_paths(shape, causal, seed=0):
    """fastest_launchers' dk/dv and dq triples on a case of ``shape``, each raced afresh (no
    cache, every candidate timed), then passes_race with their winners: every PATH must be
    timed, the gradients the races' launches left must match float64, and so must
    attention_backward's, with each winner and with the one pass.
    Returns the case, float64's gradients and the launchers."""
    (q, k, v, do, o, lse, _), expected = case(shape, torch.float16, causal, seed=seed)
    grads, launchers = flash_backward.fastest_launchers(q, k, v, o, lse, do, causal)
    assert set(launchers) == {"dkdv", "dq", "onepass"}
    problem = flash_backward.backward_problem(q, k, causal)
    winners = {}

    def race(name, triple, paths):
        kernels, space, launch = triple
        result = autotune(kernels, problem, space, launch, cache=False, progress=False,
                          min_ms=0)
        timed = {t.config["PATH"] for t in result.trials if t.samples_ms}
        assert timed == paths, (name, result.trials)
        winners[name] = result.config
    for name in ("dkdv", "dq"):
        race(name, launchers[name], {"gluon", "triton"})
    race("passes", flash_backward.passes_race(launchers, winners), {"two", "onepass"})
    for name, got, want in zip("dq dk dv".split(), grads, expected):  # the race's last launch
        assert_close(f"{name} after the races", got, want)
    for configs in (None, {"passes": Config(PATH="onepass", **O.ONEPASS_SPACE.default)}):
        for name, got, want in zip("dq dk dv".split(), flash_backward.attention_backward(
                q, k, v, o, lse, do, causal, configs), expected):
            assert_close(f"{name} ({configs})", got, want)
    return (q, k, v, do, o, lse), expected, launchers


def test_attention_backward_races_both_paths_and_is_right(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEGYM_CACHE_DIR", str(tmp_path))
    (q, k, v, do, o, lse), expected, launchers = race_both_paths((2, 4, 4, 1024, 128), True,
                                                                 seed=1)
    assert all(isinstance(kernels, KernelGroup) for kernels, _, _ in launchers.values())
    # a Triton configuration without PATH (the Triton kernels' own) runs the Triton kernels only
    def refuse(*args):
        raise AssertionError("a Gluon kernel ran for a Triton configuration")
    monkeypatch.setattr(G, "launch_dkdv", refuse)
    monkeypatch.setattr(G, "launch_dq", refuse)
    monkeypatch.setattr(O, "launch_onepass", refuse)
    fixed = {"dkdv": Config(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2),
             "dq": Config(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)}
    for name, got, want in zip("dq dk dv".split(), flash_backward.attention_backward(
            q, k, v, o, lse, do, True, configs=fixed), expected):
        assert_close(f"{name} (Triton)", got, want)


def test_grouped_query_heads_race_both_paths_and_take_a_triton_path_config(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("TILEGYM_CACHE_DIR", str(tmp_path))
    (q, k, v, do, o, lse), expected, _ = race_both_paths((1, 8, 2, 512, 64), False)
    assert G.backward_fits(q, k, v, lse, do)
    configs = {"dkdv": Config(PATH="triton", BLOCK_M=64, BLOCK_N=64, num_warps=4,
                              num_stages=2),
               "dq": Config(PATH="triton", BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2)}
    for name, got, want in zip("dq dk dv".split(), flash_backward.attention_backward(
            q, k, v, o, lse, do, False, configs), expected):
        assert_close(f"{name} (Triton)", got, want)
