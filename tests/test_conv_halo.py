"""The halo convolution's host side, without a GPU: the plan each view order gives (checked by
following the kernel's loops in PyTorch, TMA's zero fill and clipped stores included, against
F.conv2d), which layers and machines it refuses and why, what its configurations take from
shared memory, its prune, and its place in shape_conv2d's race. Its kernel runs in
tests/gpu/test_conv_halo_gpu.py."""
import itertools

import pytest
import torch
import torch.nn.functional as F

from tests.test_conv_groups import inputs
from tilegym_edu import tune
from tilegym_edu.reference import conv_halo, conv_persistent

pytestmark = pytest.mark.beside

H200 = tune.Resources(shared_bytes=232448)


def _box_load(t: torch.Tensor, origin, box) -> torch.Tensor:
    """What a TMA copy of ``box`` at ``origin`` brings from t: zeros where it lies outside."""
    out = torch.zeros(box, dtype=t.dtype)
    src, dst = [], []
    for o, b, n in zip(origin, box, t.shape):
        lo, hi = max(o, 0), min(o + b, n)
        if hi <= lo:
            return out
        src.append(slice(lo, hi))
        dst.append(slice(lo - o, hi - o))
    out[tuple(dst)] = t[tuple(src)]
    return out


def _box_store(t: torch.Tensor, origin, value: torch.Tensor) -> None:
    """A TMA store of ``value`` at ``origin`` into t: what lies outside t is dropped."""
    src, dst = [], []
    for o, b, n in zip(origin, value.shape, t.shape):
        lo, hi = max(o, 0), min(o + b, n)
        if hi <= lo:
            return
        dst.append(slice(lo, hi))
        src.append(slice(lo - o, hi - o))
    t[tuple(dst)] = value[tuple(src)]


def emulate(x: torch.Tensor, w: torch.Tensor, padding, config) -> torch.Tensor:
    """halo_conv_kernel's loops on the CPU in float64, every program in turn, as
    launch_halo_conv2d sets them up: y (N, K, P, Q). A "specialised" configuration's consumer
    warpgroups each take B0 / consumers rows of the halo axis, as halo_ws_conv_kernel's do."""
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    ph, pw = padding
    P, Q = H + 2 * ph - R + 1, W + 2 * pw - S + 1
    b0, b1, b2, bn, bk, splits = (config[n] for n in ("B0", "B1", "B2", "BLOCK_N", "BLOCK_K",
                                                      "SPLIT_K"))
    consumers = config["num_warps"] // 4 if config.get("SCHEDULE") == "specialised" else 1
    rows = b0 // consumers
    plan = conv_halo.halo_plan(config["ORDER"], N, P, Q, R, S, ph, pw)
    x_view = x.double().permute(0, 2, 3, 1).permute(*plan.perm, 3)
    filters = w.double().permute(0, 2, 3, 1).reshape(K, R * S * C)
    out = torch.zeros((splits, *plan.out_sizes, K), dtype=torch.float64)
    c_blocks = -(-C // bk)
    steps = plan.taps2 * c_blocks
    per_split = -(-steps // splits)
    for split in range(splits):
        for a0 in range(0, plan.out_sizes[0], b0):
            for a1 in range(0, plan.out_sizes[1], b1):
                for a2 in range(0, plan.out_sizes[2], b2):
                    for k0, which in itertools.product(range(0, K, bn), range(consumers)):
                        acc = torch.zeros(rows * b1 * b2, bn, dtype=torch.float64)
                        for step in range(split * per_split,
                                          min(split * per_split + per_split, steps)):
                            t2, c0 = step // c_blocks, (step % c_blocks) * bk
                            shift = [0, 0, 0]
                            shift[plan.move_dim] = t2 - plan.pad2
                            halo = torch.cat([
                                _box_load(x_view, (a0 - plan.pad0, a1 + shift[1],
                                                   a2 + shift[2], c0), (b0, b1, b2, bk)),
                                _box_load(x_view, (a0 - plan.pad0 + b0, a1 + shift[1],
                                                   a2 + shift[2], c0), (plan.tail, b1, b2, bk))])
                            for t0 in range(plan.taps0):
                                column = (t0 * plan.tap_stride0 + t2 * plan.tap_stride2) * C + c0
                                first = t0 + which * rows
                                acc += (halo[first:first + rows].reshape(-1, bk)
                                        @ _box_load(filters, (k0, column), (bn, bk)).T)
                        _box_store(out[split], (a0 + which * rows, a1, a2, k0),
                                   acc.reshape(rows, b1, b2, bn))
    inverse = [plan.perm.index(axis) for axis in range(3)]
    return out.sum(0).permute(*inverse, 3).permute(0, 3, 1, 2)


#: (N, C, H, W, K, R, S, padding): edges of every kind on layers small enough to emulate
LAYERS = [(2, 24, 9, 11, 20, 3, 3, (1, 1)),      # C and K under one block: zero-filled channels
          (1, 40, 7, 6, 16, 5, 5, (2, 2)),       # 5 taps: a tail of 4 rows for 4
          (2, 16, 6, 10, 8, 3, 5, (1, 2)),       # a rectangular filter: different halos per axis
          (1, 8, 5, 5, 8, 3, 3, (0, 0)),         # no padding: the output smaller than the input
          (1, 8, 4, 5, 8, 2, 2, (1, 0))]         # 2 taps: a tail of one row


@pytest.mark.parametrize("layer", LAYERS, ids=str)
@pytest.mark.parametrize("order", conv_halo.HALO_ORDERS)
def test_the_plan_of_every_view_order_computes_the_convolution(layer, order):
    N, C, H, W, K, R, S, padding = layer
    x, w = inputs(N, C, H, W, K, C, R, S, torch.float32)
    config = dict(ORDER=order, B0=4, B1=2, B2=4, BLOCK_N=16, BLOCK_K=16, SPLIT_K=1, num_warps=4,
                  SCHEDULE="one")
    expected = F.conv2d(x.double(), w.double(), padding=padding)
    torch.testing.assert_close(emulate(x, w, padding, config), expected)


@pytest.mark.parametrize("row", conv_halo.HALO_CONV_CONFIGS, ids=str)
def test_every_configuration_computes_the_convolution(row):
    """Each configuration of the search space, its split-K ranges included, on a 3x3 and a
    5x5 layer whose sizes are not multiples of its boxes."""
    config = dict(zip(conv_halo.HALO_CONV_NAMES, row))
    for N, C, H, W, K, R, padding in ((3, 72, 9, 7, 24, 3, 1), (2, 40, 6, 5, 8, 5, 2)):
        x, w = inputs(N, C, H, W, K, C, R, R, torch.float32)
        expected = F.conv2d(x.double(), w.double(), padding=padding)
        torch.testing.assert_close(emulate(x, w, (padding, padding), config), expected)


@pytest.mark.parametrize("taps, tail", [(1, 1), (2, 1), (3, 2), (4, 4), (5, 4), (7, 8)])
def test_the_halo_tail_holds_the_taps_past_the_box(taps, tail):
    assert conv_halo.halo_tail(taps) == tail


def test_plans_of_the_two_halo_axes():
    """N8 C96 65x67 5x3 filter, padding (2, 1): along h the 5 taps of r share a buffer, along w
    the 3 of s."""
    rows = conv_halo.halo_plan("hwn", 8, 65, 67, 5, 3, 2, 1)
    assert rows == conv_halo.HaloPlan(perm=(1, 2, 0), move_dim=1, taps0=5, taps2=3, pad0=2,
                                      pad2=1, tap_stride0=3, tap_stride2=1, tail=4,
                                      out_sizes=(65, 67, 8))
    columns = conv_halo.halo_plan("wnh", 8, 65, 67, 5, 3, 2, 1)
    assert columns == conv_halo.HaloPlan(perm=(2, 0, 1), move_dim=2, taps0=3, taps2=5, pad0=1,
                                         pad2=2, tap_stride0=1, tap_stride2=3, tail=2,
                                         out_sizes=(67, 8, 65))
    with pytest.raises(ValueError, match="ORDER must be one of"):
        conv_halo.halo_plan("nhw", 8, 65, 67, 5, 3, 2, 1)


def test_every_configuration_is_a_valid_kernel_shape():
    """Each tap's sub-view starts a whole number of swizzle periods (8 rows) into the buffer,
    a row of channels fits one swizzled row, every warp holds 16-row slices of the tile, and
    boxes stay within TMA's 256 per axis."""
    for row in conv_halo.HALO_CONV_CONFIGS:
        config = dict(zip(conv_halo.HALO_CONV_NAMES, row))
        assert config["ORDER"] in conv_halo.HALO_ORDERS
        assert conv_halo.halo_shape_problem(config, 2) == "", row
        assert max(config["B0"], config["B1"], config["B2"], config["BLOCK_N"]) <= 256, row


@pytest.mark.parametrize("change, reason", [
    (dict(B1=2, B2=2), "not a multiple of the swizzle's 8"),
    (dict(BLOCK_K=128), "more than the 128 of one swizzled row"),
    (dict(num_warps=8), "16-row slices for 8 warps"),
    (dict(SCHEDULE="ping-pong"), "SCHEDULE must be one of"),
    (dict(B2=3, num_warps=12, SCHEDULE="specialised"), "1 or 2 warpgroups: num_warps 4 or 8"),
    (dict(B0=1, B2=16, num_warps=8, SCHEDULE="specialised"), "do not split between 2 consumer")])
def test_tiles_that_cannot_be_cut_into_the_taps_views_are_refused(change, reason):
    config = {**dict(zip(conv_halo.HALO_CONV_NAMES, ("hnw", 8, 8, 1, 64, 64, 3, 1, 4, "one"))),
              **change}
    assert reason in conv_halo.halo_shape_problem(config, 2)
    assert reason in conv_halo.halo_conv_prune(config, _problem(32, 512, 7, 7, 512, 3), H200)
    x, w = inputs(1, 64, 8, 8, 64, 64, 3, 3, torch.float16)
    y = torch.empty(1, 64, 8, 8, dtype=torch.float16)
    with pytest.raises(ValueError, match=reason):
        conv_halo.launch_halo_conv2d(x, w, y, 1, 1, 1, config)


def _problem(N, C, H, W, K, R, S=None, padding=1):
    x, w = inputs(N, C, H, W, K, C, R, S or R, torch.float16)
    return conv_persistent.shape_conv_problem(x, w, 1, padding, 1)


def test_shared_memory_as_the_compiler_counted_it():
    """Triton 3.6 compiled these for sm_90a to 132, 96 and 174 KiB (the kernel's metadata),
    as halo_shared_bytes says: stages x (halo rows + filter blocks) x BLOCK_K halves; the
    specialised schedule's to 196,840 bytes: its ring and, beside it, the output tile its
    consumers store through, 192 KiB, and 232 bytes of barriers and their alignment."""
    for row, taps, kib in ((("hnw", 8, 4, 8, 64, 32, 3, 1, 8, "one"), 5, 132),
                           (("hnw", 8, 2, 8, 64, 32, 3, 1, 4, "one"), 5, 96),
                           (("hnw", 8, 8, 1, 128, 64, 3, 1, 4, "one"), 3, 174),
                           (("hnw", 8, 16, 1, 64, 64, 4, 1, 8, "specialised"), 3, 192)):
        config = dict(zip(conv_halo.HALO_CONV_NAMES, row))
        assert conv_halo.halo_shared_bytes(config, taps, 2) == kib * 1024
    split = dict(zip(conv_halo.HALO_CONV_NAMES, ("hnw", 8, 16, 1, 128, 16, 2, 2, 4, "one")))
    assert conv_halo.halo_shared_bytes(split, 3, 2) == 128 * 128 * 4   # float32: 64 KiB compiled


def test_prune_says_why_a_configuration_sits_out():
    config = dict(zip(conv_halo.HALO_CONV_NAMES, ("hnw", 8, 8, 1, 128, 64, 3, 1, 4, "one")))
    assert conv_halo.halo_conv_prune(config, _problem(32, 512, 7, 7, 512, 3), H200) is None
    assert "shared memory" in conv_halo.halo_conv_prune(config, _problem(8, 96, 9, 9, 128, 5,
                                                                         padding=2), H200)
    assert "twice K" in conv_halo.halo_conv_prune(config, _problem(32, 512, 7, 7, 64, 3), H200)
    assert "one tap along the halo axis" in conv_halo.halo_conv_prune(
        config, _problem(32, 512, 7, 7, 512, 1, 3, (0, 1)), H200)
    # 9 output rows in boxes of 8: 16 computed for 9
    assert "rows per row stored" in conv_halo.halo_conv_prune(
        config, _problem(32, 512, 9, 9, 512, 3), H200)


def test_refuses_strides_dilations_and_machines_it_cannot_serve():
    x, w = inputs(1, 64, 8, 8, 64, 64, 3, 3, torch.float16)
    assert "stride 1 and dilation 1" in conv_halo.halo_conv_problem(x, w, 2, 1, 1)
    assert "dilation (2, 2)" in conv_halo.halo_conv_problem(x, w, 1, 2, 2)
    reason = conv_halo.halo_conv_problem(x, w, 1, 1, 1)
    assert "Hopper" in reason or "Triton" in reason          # no Hopper GPU here


def test_shape_conv2d_never_races_it_where_it_cannot_run():
    problem = _problem(1, 64, 8, 8, 64, 3)
    assert problem["halo"]
    config = next(c for c in conv_persistent.SHAPE_CONV_SPACE.configs(1) if c["PATH"] == "halo")
    assert "Gluon halo kernel" in conv_persistent.shape_conv_prune(config, problem, H200)
