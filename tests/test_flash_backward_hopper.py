"""flash_backward_hopper without a GPU: its Gluon kernels run only on Hopper (tests/gpu/
test_flash_backward_hopper_gpu.py), so here attention_backward must keep to the Triton kernels
(and say why it refuses a Gluon configuration), the race of the two must run the path a
configuration names, and the search spaces must keep the invariants the kernels rely on."""
import pytest
import torch

from tilegym_edu.reference import flash, flash_backward, flash_backward_hopper, flash_hopper
from tilegym_edu.tune import Config, KernelGroup

pytestmark = pytest.mark.beside


def tensors(shape, dtype=torch.float16):
    return [torch.zeros(shape, dtype=dtype) for _ in range(3)]


SMALL = Config(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=1)


def backward_case(shape=(1, 2, 128, 32), causal=True, seed=0):
    """q, k, v (float32: the interpreter's tl.dot), o and lse of flash.py's forward, do."""
    g = torch.Generator().manual_seed(seed)
    q, k, v, do = (torch.randn(shape, generator=g) for _ in range(4))
    o, lse = flash.flash_forward(q, k, v, causal, config=SMALL)
    return q, k, v, o, lse, do


def test_without_a_hopper_gpu_the_fastest_backward_is_flash_backward():
    """Here (CPU tensors) backward_fits says no whatever the dtype, so attention_backward runs
    the Triton kernels: the same gradients as flash_backward, on the same configurations."""
    q, k, v, o, lse, do = backward_case()
    assert not flash_backward_hopper.backward_fits(q.half(), k.half(), v.half(), lse, do.half())
    configs = {"dkdv": SMALL, "dq": SMALL}
    _, launchers = flash_backward.fastest_launchers(q, k, v, o, lse, do, True)
    assert launchers["dkdv"][0] is flash_backward.flash_dkdv_kernel
    assert launchers["dq"][0] is flash_backward.flash_dq_kernel
    expected = flash_backward.flash_backward(q, k, v, o, lse, do, True, configs)
    got = flash_backward.attention_backward(q, k, v, o, lse, do, True, configs)
    assert all(torch.equal(a, b) for a, b in zip(got, expected))
    with_path = {name: Config(PATH="triton", **c) for name, c in configs.items()}
    got = flash_backward.attention_backward(q, k, v, o, lse, do, True, with_path)
    assert all(torch.equal(a, b) for a, b in zip(got, expected))


def test_a_gluon_configuration_on_inputs_it_does_not_fit_says_why():
    q, k, v, o, lse, do = backward_case()
    gluon = {"dkdv": Config(PATH="gluon", **flash_backward_hopper.DKDV_SPACE.default),
             "dq": Config(PATH="gluon", **flash_backward_hopper.DQ_SPACE.default)}
    with pytest.raises(ValueError, match="do not fit the Gluon kernels.*backward_fits"):
        flash_backward.attention_backward(q, k, v, o, lse, do, True, gluon)


@pytest.mark.parametrize("why, change", [
    ("k/v heads that do not divide q's", lambda q, k, v, lse: (q, k[:, :3], v[:, :3], lse)),
    ("k and v of different heads", lambda q, k, v, lse: (q, k[:, :2], v, lse)),
    ("q longer than k", lambda q, k, v, lse: (q, k[:, :, :128], v[:, :, :128], lse)),
    ("lse a strided view", lambda q, k, v, lse: (q, k, v,
                                                  torch.zeros(4, 2, 256).transpose(0, 1))),
    ("lse in float16", lambda q, k, v, lse: (q, k, v, lse.half())),
], ids=lambda x: x if isinstance(x, str) else "")
def test_backward_fits_takes_dividing_heads_and_contiguous_float32_lse(why, change, monkeypatch):
    monkeypatch.setattr(flash_backward_hopper, "hopper_fits", lambda q, k, v: True)
    q, k, v = tensors((2, 4, 256, 64))
    lse = torch.zeros(2, 4, 256)
    assert flash_backward_hopper.backward_fits(q, k, v, lse, q)
    for kv_heads in (2, 1):  # grouped- and multi-query heads
        assert flash_backward_hopper.backward_fits(q, k[:, :kv_heads], v[:, :kv_heads], lse, q)
    assert not flash_backward_hopper.backward_fits(*change(q, k, v, lse), q), why


def test_the_race_runs_the_path_a_configuration_names():
    ran = []
    race = flash_backward.DQ_RACE
    kernels, space, launch = flash_backward._racing(
        race, {"gluon": lambda c: ran.append(("gluon", dict(c))),
               "triton": lambda c: ran.append(("triton", dict(c)))})
    assert isinstance(kernels, KernelGroup) and kernels is race.kernels and space is race.space
    assert kernels.kernels == (flash_backward_hopper.dq_kernel, flash_backward.flash_dq_kernel)
    candidates = space.configs(level=1)
    assert candidates[0] == Config(PATH="gluon", **flash_backward_hopper.DQ_SPACE.default)
    assert {c["PATH"] for c in candidates} == {"gluon", "triton"}
    assert len(candidates) == (len(flash_backward_hopper.DQ_SPACE.configs(1))
                               + len(flash_backward.DQ_SPACE.configs(1)))
    level_2 = space.configs(level=2)
    assert len(level_2) > len(candidates) and all(c["PATH"] == "triton"
                                                  for c in level_2[len(candidates):])
    launch(candidates[0])
    triton_config = Config(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=3)
    launch(triton_config)                      # no PATH: the Triton kernel, as before
    assert ran == [("gluon", dict(flash_backward_hopper.DQ_SPACE.default)),
                   ("triton", dict(triton_config))]
    with pytest.raises(ValueError, match="PATH 'cuda'.*'gluon', 'triton'"):
        launch(Config(PATH="cuda", BLOCK_M=64))


def test_every_block_divides_the_sequence_multiple_the_kernels_take():
    """The kernels read q, k, v, dO as one matrix of rows: no block may reach the next head,
    which sequence lengths of a multiple of HOPPER_SEQ_MULTIPLE guarantee only if every block
    divides it; "ws" is two consumer warpgroups of 64 keys."""
    multiple = flash_hopper.HOPPER_SEQ_MULTIPLE
    for config in flash_backward_hopper.DKDV_SPACE.configs(level=1):
        assert multiple % config["BLOCK_N"] == 0 and multiple % config["BLOCK_M"] == 0, config
        if config["SCHEDULE"] == "ws":
            assert config["BLOCK_N"] == 2 * flash_backward_hopper.WG_KEYS.value, config
        else:
            assert config["SCHEDULE"] == "one" and config["BLOCK_N"] == 64, config
    for config in flash_backward_hopper.DQ_SPACE.configs(level=1):
        assert multiple % config["BLOCK_N"] == 0 and multiple % config["BLOCK_M"] == 0, config
        assert config["num_warps"] * 16 == config["BLOCK_M"], config   # 16 rows a warp


@pytest.mark.parametrize("head_dim", [64, 128])
def test_what_overflows_registers_at_head_size_128_is_pruned(head_dim):
    problem = {"head_dim": head_dim}
    wide = head_dim > 64
    for config in flash_backward_hopper.DKDV_SPACE.configs(level=1):
        reason = flash_backward_hopper.dkdv_prune(config, problem, None)
        assert (reason is not None) == (wide and config["BLOCK_M"] > 64), config
    for config in flash_backward_hopper.DQ_SPACE.configs(level=1):
        reason = flash_backward_hopper.dq_prune(config, problem, None)
        assert (reason is not None) == (wide and config["BLOCK_N"] > 64), config
    assert flash_backward_hopper.dkdv_prune(flash_backward_hopper.DKDV_SPACE.default,
                                            problem, None) is None
    assert flash_backward_hopper.dq_prune(flash_backward_hopper.DQ_SPACE.default,
                                          problem, None) is None


@pytest.mark.parametrize("config, words", [
    (Config(SCHEDULE="ws", BLOCK_N=64, BLOCK_M=64, STAGES=2), "'ws' takes BLOCK_N 128"),
    (Config(SCHEDULE="one", BLOCK_N=128, BLOCK_M=64, STAGES=2), "'one' takes BLOCK_N 64"),
    (Config(SCHEDULE="two", BLOCK_N=64, BLOCK_M=64, STAGES=2), "SCHEDULE must be one of"),
], ids=["ws-64", "one-128", "unknown"])
def test_a_dkdv_configuration_the_kernels_cannot_run_is_refused(config, words):
    assert words in flash_backward_hopper.dkdv_prune(config, {"head_dim": 64}, None)
    q, k, v = tensors((1, 2, 128, 64))
    with pytest.raises(ValueError, match=words):
        flash_backward_hopper.launch_dkdv(q, k, v, None, None, q, k, v, False, config)


def test_beside_the_gluon_kernels_the_triton_path_is_built_at_its_first_launch_and_copies():
    """_triton_copying_into sets backward_launchers up only when a Triton configuration first
    runs, once, and copies what each kernel made into the gradients the Gluon kernels fill."""
    q, k, v, o, lse, do = backward_case()
    expected = flash_backward.flash_backward(q, k, v, o, lse, do, True,
                                             {"dkdv": SMALL, "dq": SMALL})
    grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
    builds = []

    def build():
        builds.append(1)
        return flash_backward.backward_launchers(q, k, v, o, lse, do, True)
    triples = flash_backward._triton_copying_into(grads, build)
    assert [triples[name][:2] for name in ("dkdv", "dq")] == [
        (flash_backward.flash_dkdv_kernel, flash_backward.DKDV_SPACE),
        (flash_backward.flash_dq_kernel, flash_backward.DQ_SPACE)]
    assert not builds
    triples["dq"][2](SMALL)
    assert len(builds) == 1 and torch.equal(grads[0], expected[0])
    assert grads[1].isnan().all()  # dk/dv not launched yet
    triples["dkdv"][2](SMALL)
    assert len(builds) == 1
    assert all(torch.equal(a, b) for a, b in zip(grads, expected))


def test_where_the_gluon_kernels_fit_a_gluon_backward_launches_delta_once(monkeypatch):
    """fastest_launchers on inputs backward_fits takes (faked here: the Gluon kernels run only on
    Hopper): Gluon configurations fill the returned tensors after one flash_delta_kernel
    launch; a Triton configuration for one kernel still gives flash_backward's gradients."""
    q, k, v, o, lse, do = backward_case(shape=(1, 4, 128, 32))
    k, v = k[:, :2].contiguous(), v[:, :2].contiguous()  # grouped-query heads
    o, lse = flash.flash_forward(q, k, v, True, config=SMALL)
    expected = flash_backward.flash_backward(q, k, v, o, lse, do, True,
                                             {"dkdv": SMALL, "dq": SMALL})
    monkeypatch.setattr(flash_backward_hopper, "backward_fits", lambda *args: True)
    filled = {}

    def gluon_dkdv(q_, k_, v_, lse_, delta, do_, dk, dv, causal, config):
        filled["dkdv"] = (dk, dv)
        dk.copy_(expected[1])
        dv.copy_(expected[2])

    def gluon_dq(q_, k_, v_, lse_, delta, do_, dq, causal, config):
        filled["dq"] = dq
        dq.copy_(expected[0])
    monkeypatch.setattr(flash_backward_hopper, "launch_dkdv", gluon_dkdv)
    monkeypatch.setattr(flash_backward_hopper, "launch_dq", gluon_dq)
    delta_kernel, launches = flash_backward.flash_delta_kernel, []

    class CountingDelta:
        def __getitem__(self, grid):
            launches.append(grid)
            return delta_kernel[grid]
    monkeypatch.setattr(flash_backward, "flash_delta_kernel", CountingDelta())
    gluon = {"dkdv": Config(PATH="gluon", **flash_backward_hopper.DKDV_SPACE.default),
             "dq": Config(PATH="gluon", **flash_backward_hopper.DQ_SPACE.default)}
    dq, dk, dv = flash_backward.attention_backward(q, k, v, o, lse, do, True, gluon)
    assert len(launches) == 1
    assert filled["dq"] is dq and filled["dkdv"][0] is dk and filled["dkdv"][1] is dv
    mixed = {"dkdv": gluon["dkdv"], "dq": Config(PATH="triton", **SMALL)}
    got = flash_backward.attention_backward(q, k, v, o, lse, do, True, mixed)
    assert all(torch.equal(a, b) for a, b in zip(got, expected))
