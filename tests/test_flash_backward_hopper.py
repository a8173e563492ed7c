"""flash_backward_hopper without a GPU: its Gluon kernels run only on Hopper (tests/gpu/
test_flash_backward_hopper_gpu.py), so here flash_backward must keep to its Triton kernels, the
race of the two must run the path a configuration names, and the search spaces must keep the
invariants the kernels rely on."""
import pytest
import torch

from tilegym_edu.reference import flash, flash_backward, flash_backward_hopper, flash_hopper
from tilegym_edu.tune import Config, KernelGroup


def tensors(shape, dtype=torch.float16):
    return [torch.zeros(shape, dtype=dtype) for _ in range(3)]


def test_without_a_hopper_gpu_the_backward_runs_its_triton_kernels():
    q, k, v = tensors((1, 2, 128, 64), torch.float32)
    o, lse = flash.flash_forward(q, k, v, config=Config(BLOCK_M=16, BLOCK_N=16, num_warps=4,
                                                        num_stages=1))
    assert not flash_backward_hopper.backward_fits(q, k, v, lse)
    _, launchers = flash_backward.backward_launchers(q, k, v, o, lse, torch.ones_like(o), False)
    assert launchers["dkdv"][0] is flash_backward.flash_dkdv_kernel
    assert launchers["dq"][0] is flash_backward.flash_dq_kernel


@pytest.mark.parametrize("why, change", [
    ("grouped-query heads", lambda q, k, v, lse: (q, k[:, :1], v[:, :1], lse)),
    ("q longer than k", lambda q, k, v, lse: (q, k[:, :, :128], v[:, :, :128], lse)),
    ("lse a strided view", lambda q, k, v, lse: (q, k, v, lse.transpose(0, 1))),
    ("lse in float16", lambda q, k, v, lse: (q, k, v, lse.half())),
], ids=lambda x: x if isinstance(x, str) else "")
def test_backward_fits_takes_one_shape_and_contiguous_float32_lse(why, change, monkeypatch):
    monkeypatch.setattr(flash_backward_hopper, "hopper_fits", lambda q, k, v: True)
    q, k, v = tensors((2, 2, 256, 64))
    lse = torch.zeros(2, 2, 256)
    assert flash_backward_hopper.backward_fits(q, k, v, lse)
    assert not flash_backward_hopper.backward_fits(*change(q, k, v, lse)), why


def test_the_race_runs_the_path_a_configuration_names():
    ran = []
    paths = {"gluon": (flash_backward_hopper.dq_kernel, flash_backward_hopper.DQ_SPACE,
                       lambda c: ran.append(("gluon", dict(c)))),
             "triton": (flash_backward.flash_dq_kernel, flash_backward.DQ_SPACE,
                        lambda c: ran.append(("triton", dict(c))))}
    kernels, space, launch = flash_backward._path_race("dq_paths", paths)
    assert isinstance(kernels, KernelGroup)
    assert kernels.kernels == (flash_backward_hopper.dq_kernel, flash_backward.flash_dq_kernel)
    candidates = space.configs(level=1)
    assert candidates[0] == Config(PATH="gluon", **flash_backward_hopper.DQ_SPACE.default)
    assert {c["PATH"] for c in candidates} == {"gluon", "triton"}
    assert len(candidates) == (len(flash_backward_hopper.DQ_SPACE.configs(1))
                               + len(flash_backward.DQ_SPACE.configs(1)))
    launch(candidates[0])
    triton_config = Config(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=3)
    launch(triton_config)                      # no PATH: the Triton kernel, as before
    assert ran == [("gluon", dict(flash_backward_hopper.DQ_SPACE.default)),
                   ("triton", dict(triton_config))]


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
