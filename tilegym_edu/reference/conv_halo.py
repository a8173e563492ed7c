"""The "halo" convolution for Hopper GPUs, in Gluon: `conv_hopper`'s implicit GEMM, with each
input pixel brought from L2 into shared memory once per channel block for all the filter taps
along one axis, not once per tap.

Why: for filter tap (r, s) conv_hopper's kernel loads the box of input pixels that tap reads,
so a 3x3 layer brings every input pixel from L2 to the SMs 9 times per block of output
channels, a 5x5 one 25 times. Where the GPU's L2 bandwidth, not its tensor cores, sets the pace
(many pixels, few channels; or few pixels, deep channels) that traffic is the time. Here the
output tile is a box of B0 x B1 x B2 pixels of the output seen in ``ORDER`` (its first axis,
output rows "h" or columns "w", is the *halo axis*), and a program loads, per tap along the
other axis and channel block, B0 + R - 1 rows of the halo axis at once. The R taps along the
halo axis then read R sub-views of that one buffer, each shifted by a whole multiple of B1·B2
rows of BLOCK_K channels: a multiple of 8 rows, the shared-memory swizzle's period, so each
sub-view is a valid tensor-core operand where it lies. The input traffic falls from R·B0 to
B0 + R - 1 rows; the filter blocks of all R taps come with each step.

On the H200 (docs/results/h200.md, 2026-12-04, an exploration before this module) it ran
the layers conv_hopper's kernel was slowest on at 1.27x cuDNN (N8 C96 65x67 5x5 K40, against
0.80x) and 1.03x (N64 C64 56² 3x3, against 0.92x).

Tensor descriptors take power-of-two boxes, so the halo comes in two copies: B0 rows, then a
box of TAILP (the next power of two >= R - 1) rows right behind them.

Two schedules (a configuration's SCHEDULE). "one" (halo_conv_kernel): the program's warps both
issue the copies and multiply, so a copy waits for the warpgroup to come back from its
multiplies. "specialised" (halo_ws_conv_kernel): a producer warp keeps the ring full while one
or two consumer warpgroups multiply, each its share of the tile's rows, as cuDNN's kernel for
N32 C512 7² does (Nsight Compute, docs/results/h200.md, 2026-12-06). There, 128 x 64 tiles of two
consumers and a 4-stage ring ran at 1.09x cuDNN on an H100 where the best "one" tiles, 64 x
64 two programs an SM, ran at 0.91x (run 74).

Shapes and names as in ``convolution``: x (N, C, H, W) and w (K, C, R, S) channels_last, y
(N, K, P, Q) channels_last; float16 or bfloat16; stride 1, dilation 1, any padding, no groups; C
and K multiples of 8. :func:`halo_conv_problem` says why a layer or GPU cannot take it. Gluon
kernels do not run in Triton's interpreter: the kernel's tests are in tests/gpu/.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilegym_edu.grading import forbidden_in_graded_calls
from tilegym_edu.reference.convolution import Pair, geometry, output_size
from tilegym_edu.reference.conv_hopper import (_descriptor, hopper_conv_problem, program_tile,
                                               reduce_splits, split_output, store_box,
                                               store_box_through, twice_the_output_channels)
from tilegym_edu.tiles import cdiv
from tilegym_edu.tune import Config, SearchSpace, configs_from_rows

try:  # Gluon's Hopper modules (Triton 3.5 and newer); hopper_conv_problem says no without
    from triton.experimental.gluon.language.nvidia.hopper import (mbarrier, tma, warpgroup_mma,
                                                                   warpgroup_mma_wait)
except ImportError:  # pragma: no cover
    pass


#: registers a thread of the specialised kernel's second consumer warpgroup and of its producer
#: warp may hold (setmaxnreg: multiples of 8 from 24 to 256)
WS_CONSUMER_REGS = gl.constexpr(168)
WS_PRODUCER_REGS = gl.constexpr(48)


@gluon.jit
def _halo_issue(x_desc, xt_desc, w_desc, a_smem, b_smem, bars, j, first, a0, a1, a2, k0, C,
                PAD0, PAD2, WS0, WS2, T0: gl.constexpr, B0: gl.constexpr, B1: gl.constexpr,
                B2: gl.constexpr, TAILP: gl.constexpr, MOVE_DIM: gl.constexpr,
                BLOCK_K: gl.constexpr, STAGES: gl.constexpr):
    """Start the TMA copies of the program's j-th reduction step (step first + j of the flat
    (tap along the other axis, channel block) loop) into ring slot j % STAGES: B0 + TAILP rows
    of the halo axis (two boxes) at that tap's offset, and the T0 filter blocks of the taps
    along the halo axis. a_smem is (STAGES·(B0 + TAILP), B1·B2, BLOCK_K): a slot is B0 + TAILP
    chunks of one halo row each, so every copy and every operand starts at a chunk."""
    NCH: gl.constexpr = B0 + TAILP
    dtype: gl.constexpr = x_desc.dtype
    step = first + j
    c_blocks = gl.cdiv(C, BLOCK_K)
    t2 = step // c_blocks
    c0 = (step % c_blocks) * BLOCK_K
    slot = j % STAGES
    bar = bars.index(slot)
    mbarrier.expect(bar, x_desc.block_type.nbytes + xt_desc.block_type.nbytes
                    + T0 * w_desc.block_type.nbytes)
    if MOVE_DIM == 1:
        o1 = a1 + t2 - PAD2
        o2 = a2
    else:
        o1 = a1
        o2 = a2 + t2 - PAD2
    main = a_smem.index(slot * NCH)._reinterpret(dtype, [B0, B1, B2, BLOCK_K], x_desc.layout)
    tma.async_copy_global_to_shared(x_desc, [a0 - PAD0, o1, o2, c0], bar, main)
    tail = a_smem.index(slot * NCH + B0)._reinterpret(dtype, [TAILP, B1, B2, BLOCK_K],
                                                       xt_desc.layout)
    tma.async_copy_global_to_shared(xt_desc, [a0 - PAD0 + B0, o1, o2, c0], bar, tail)
    for t0 in gl.static_range(T0):
        tma.async_copy_global_to_shared(w_desc, [k0, (t0 * WS0 + t2 * WS2) * C + c0], bar,
                                        b_smem.index(slot * T0 + t0))


@gluon.jit
def halo_conv_kernel(x_desc, xt_desc, w_desc, y_desc, D0, D1, D2, C, K, PAD0, PAD2, WS0, WS2,
                     T2, T0: gl.constexpr, B0: gl.constexpr, B1: gl.constexpr,
                     B2: gl.constexpr, TAILP: gl.constexpr, MOVE_DIM: gl.constexpr,
                     BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr,
                     SPLIT_K: gl.constexpr, num_warps: gl.constexpr):
    """One (B0·B1·B2) x BLOCK_N tile of y a program, y seen as (D0, D1, D2, K), the output's
    pixels in the view's order (halo axis first). x_desc is a 4-D descriptor over x viewed the
    same way (input sizes), in (B0, B1, B2, BLOCK_K) boxes; xt_desc the same view in (TAILP,
    B1, B2, BLOCK_K) boxes; w_desc the (K, R·S·C) filter matrix in (BLOCK_N, BLOCK_K) blocks;
    y_desc a 5-D one over (SPLIT_K, D0, D1, D2, K) in (1, B0, B1, B2, BLOCK_N) boxes: y itself
    when SPLIT_K is 1, else float32 partial sums. The reduction walks T2 taps of the other axis
    x the channel blocks, in a ring of STAGES buffers; each step runs T0 wgmmas, tap t0 on halo
    rows t0 .. t0 + B0 - 1 of the buffer. Tap (t0, t2) is filter column (t0·WS0 + t2·WS2)·C;
    MOVE_DIM is the view's axis (1 or 2) the other spatial axis sits on."""
    BLOCK_M: gl.constexpr = B0 * B1 * B2
    CH: gl.constexpr = B1 * B2
    NCH: gl.constexpr = B0 + TAILP
    dtype: gl.constexpr = x_desc.dtype
    split, a0, a1, a2, k0, first, count = program_tile(D0, D1, D2, K, T2, 1, C, B0, B1, B2,
                                                       BLOCK_N, BLOCK_K, SPLIT_K)

    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 16])
    tile_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_K], dtype)
    a_smem = gl.allocate_shared_memory(dtype, [STAGES * NCH, CH, BLOCK_K], tile_layout)
    b_smem = gl.allocate_shared_memory(dtype, [STAGES * T0, BLOCK_N, BLOCK_K], w_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=1)

    for i in gl.static_range(STAGES - 1):
        if i < count:
            _halo_issue(x_desc, xt_desc, w_desc, a_smem, b_smem, bars, i, first, a0, a1, a2, k0,
                        C, PAD0, PAD2, WS0, WS2, T0, B0, B1, B2, TAILP, MOVE_DIM, BLOCK_K, STAGES)
    acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=acc_layout)
    for i in range(count):
        slot = i % STAGES
        mbarrier.wait(bars.index(slot), (i // STAGES) & 1)
        for t0 in gl.static_range(T0):
            a_tap = a_smem.index(slot * NCH + t0)._reinterpret(dtype, [BLOCK_M, BLOCK_K],
                                                               tile_layout)
            acc = warpgroup_mma(a_tap, b_smem.index(slot * T0 + t0).permute((1, 0)), acc,
                                is_async=True)
        # each wgmma is one commit group: with this step's T0 left in flight, step i - 1's
        # are done and its slot can take step i + STAGES - 1
        acc = warpgroup_mma_wait(T0, deps=(acc,))
        if i + STAGES - 1 < count:
            _halo_issue(x_desc, xt_desc, w_desc, a_smem, b_smem, bars, i + STAGES - 1, first, a0,
                        a1, a2, k0, C, PAD0, PAD2, WS0, WS2, T0, B0, B1, B2, TAILP, MOVE_DIM,
                        BLOCK_K, STAGES)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))
    store_box(acc, y_desc, split, a0, a1, a2, k0, B0, B1, B2, BLOCK_N)


@gluon.jit
def _halo_ws_load(x_desc, xt_desc, w_desc, a_smem, b_smem, ready, empty, first, count, a0, a1,
                  a2, k0, C, PAD0, PAD2, WS0, WS2, T0: gl.constexpr, B0: gl.constexpr,
                  B1: gl.constexpr, B2: gl.constexpr, TAILP: gl.constexpr,
                  MOVE_DIM: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr):
    """halo_ws_conv_kernel's producer warp: the program's ``count`` steps into the ring, each
    slot once every consumer has released it (``empty``; a new barrier passes phase 1)."""
    for j in range(count):
        mbarrier.wait(empty.index(j % STAGES), ((j // STAGES) & 1) ^ 1)
        _halo_issue(x_desc, xt_desc, w_desc, a_smem, b_smem, ready, j, first, a0, a1, a2, k0, C,
                    PAD0, PAD2, WS0, WS2, T0, B0, B1, B2, TAILP, MOVE_DIM, BLOCK_K, STAGES)


@gluon.jit
def _halo_ws_consume(shared, WHICH: gl.constexpr, CONSUMERS: gl.constexpr, T0: gl.constexpr,
                     B0: gl.constexpr, B1: gl.constexpr, B2: gl.constexpr,
                     TAILP: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                     STAGES: gl.constexpr):
    """Consumer warpgroup WHICH of halo_ws_conv_kernel: rows WHICH·ROWS .. (WHICH + 1)·ROWS - 1
    of the tile (B0 / CONSUMERS rows of the halo axis), each tap's operand the slice of that
    tap's shifted view; it releases a step's slot once its wgmmas are done, then stores its
    rows as a (B0 / CONSUMERS, B1, B2) box. ``shared``: the kernel's (a_smem, b_smem, ready,
    empty, out_smem, y_desc, split, a0, a1, a2, k0, count)."""
    a_smem, b_smem, ready, empty, out_smem, y_desc, split, a0, a1, a2, k0, count = shared
    ROWS: gl.constexpr = B0 * B1 * B2 // CONSUMERS
    CH: gl.constexpr = B1 * B2
    NCH: gl.constexpr = B0 + TAILP
    dtype: gl.constexpr = a_smem.dtype
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16])
    acc = gl.zeros([ROWS, BLOCK_N], gl.float32, layout=acc_layout)
    for i in range(count):
        slot = i % STAGES
        mbarrier.wait(ready.index(slot), (i // STAGES) & 1)
        for t0 in gl.static_range(T0):
            a_tap = a_smem.index(slot * NCH + t0 + WHICH * (ROWS // CH))._reinterpret(
                dtype, [ROWS, BLOCK_K], a_smem.layout)
            acc = warpgroup_mma(a_tap, b_smem.index(slot * T0 + t0).permute((1, 0)), acc,
                                is_async=True)
        # with this step's T0 wgmmas in flight, step i - 1's are done: its slot is free
        acc = warpgroup_mma_wait(T0, deps=(acc,))
        if i > 0:
            mbarrier.arrive(empty.index((i - 1) % STAGES), count=1)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    store_box_through(acc, out_smem.index(WHICH), y_desc, split, a0 + WHICH * (B0 // CONSUMERS),
                      a1, a2, k0, B0 // CONSUMERS, B1, B2, BLOCK_N)


@gluon.jit
def halo_ws_conv_kernel(x_desc, xt_desc, w_desc, y_desc, D0, D1, D2, C, K, PAD0, PAD2, WS0,
                        WS2, T2, T0: gl.constexpr, B0: gl.constexpr, B1: gl.constexpr,
                        B2: gl.constexpr, TAILP: gl.constexpr, MOVE_DIM: gl.constexpr,
                        BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr,
                        SPLIT_K: gl.constexpr, CONSUMERS: gl.constexpr,
                        num_warps: gl.constexpr):
    """halo_conv_kernel's tile and ring, warp-specialised: a producer warp issues every step's
    copies as soon as its slot is free, and CONSUMERS warpgroups (1 or 2; the first is the
    launch's num_warps = 4) each multiply B0·B1·B2 / CONSUMERS of the tile's rows, so the loads
    of the next steps never wait behind a warpgroup's multiplies. Arguments as
    halo_conv_kernel's, y_desc in (1, B0 / CONSUMERS, B1, B2, BLOCK_N) boxes."""
    BLOCK_M: gl.constexpr = B0 * B1 * B2
    CH: gl.constexpr = B1 * B2
    NCH: gl.constexpr = B0 + TAILP
    dtype: gl.constexpr = x_desc.dtype
    split, a0, a1, a2, k0, first, count = program_tile(D0, D1, D2, K, T2, 1, C, B0, B1, B2,
                                                       BLOCK_N, BLOCK_K, SPLIT_K)
    tile_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_K], dtype)
    a_smem = gl.allocate_shared_memory(dtype, [STAGES * NCH, CH, BLOCK_K], tile_layout)
    b_smem = gl.allocate_shared_memory(dtype, [STAGES * T0, BLOCK_N, BLOCK_K], w_desc.layout)
    out_dtype: gl.constexpr = y_desc.dtype
    out_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for(
        [BLOCK_M // CONSUMERS, BLOCK_N], out_dtype)
    out_smem = gl.allocate_shared_memory(out_dtype, [CONSUMERS, BLOCK_M // CONSUMERS, BLOCK_N],
                                         out_layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=CONSUMERS)  # every consumer releases each slot
    shared = (a_smem, b_smem, ready, empty, out_smem, y_desc, split, a0, a1, a2, k0, count)
    # the partitions must be spelled out in the call: Gluon takes no function in a variable
    if CONSUMERS == 2:
        gl.warp_specialize([
            (_halo_ws_consume, (shared, 0, CONSUMERS, T0, B0, B1, B2, TAILP, BLOCK_N, BLOCK_K,
                                STAGES)),
            (_halo_ws_consume, (shared, 1, CONSUMERS, T0, B0, B1, B2, TAILP, BLOCK_N, BLOCK_K,
                                STAGES)),
            (_halo_ws_load, (x_desc, xt_desc, w_desc, a_smem, b_smem, ready, empty, first, count,
                             a0, a1, a2, k0, C, PAD0, PAD2, WS0, WS2, T0, B0, B1, B2, TAILP,
                             MOVE_DIM, BLOCK_K, STAGES)),
        ], [4, 1], [WS_CONSUMER_REGS, WS_PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (_halo_ws_consume, (shared, 0, CONSUMERS, T0, B0, B1, B2, TAILP, BLOCK_N, BLOCK_K,
                                STAGES)),
            (_halo_ws_load, (x_desc, xt_desc, w_desc, a_smem, b_smem, ready, empty, first, count,
                             a0, a1, a2, k0, C, PAD0, PAD2, WS0, WS2, T0, B0, B1, B2, TAILP,
                             MOVE_DIM, BLOCK_K, STAGES)),
        ], [1], [WS_PRODUCER_REGS])


class HaloPlan(NamedTuple):
    """How a layer maps onto halo_conv_kernel for a view ``order`` (a permutation of "nhw"
    whose first letter, "h" or "w", is the halo axis). perm: the (N, H, W) axes in view order;
    move_dim: the view axis (1 or 2) of the other spatial axis; taps0 / taps2: the filter's taps
    along the halo / the other axis (T0, T2); pad0 / pad2: the padding along them;
    tap_stride0 / tap_stride2: a tap's step in the filter matrix's (r·S + s) index along each;
    tail: TAILP, the halo box's rows past B0; out_sizes: (D0, D1, D2), the output in view
    order."""
    perm: tuple[int, int, int]
    move_dim: int
    taps0: int
    taps2: int
    pad0: int
    pad2: int
    tap_stride0: int
    tap_stride2: int
    tail: int
    out_sizes: tuple[int, int, int]


def halo_tail(taps0: int) -> int:
    """TAILP: the rows of the halo past B0 that a tile of taps0 taps along the halo axis
    reads (taps0 - 1), rounded up to a power of two as a descriptor's box must be."""
    return 1 if taps0 <= 2 else 1 << (taps0 - 2).bit_length()


#: the view orders a configuration may name: the halo axis first
HALO_ORDERS = ("hnw", "hwn", "wnh", "whn")


@functools.lru_cache(maxsize=1024)
def halo_plan(order: str, N: int, P: int, Q: int, R: int, S: int, pad_h: int,
              pad_w: int) -> HaloPlan:
    """The HaloPlan of an (N, P, Q) output, an R x S filter and that padding in view ``order``
    (one of HALO_ORDERS)."""
    if order not in HALO_ORDERS:
        raise ValueError(f"ORDER must be one of {HALO_ORDERS} (the halo axis, h or w, first), "
                         f"not {order!r}")
    along_h = order[0] == "h"
    other = "w" if along_h else "h"
    taps0, taps2 = (R, S) if along_h else (S, R)
    sizes = {"n": N, "h": P, "w": Q}
    return HaloPlan(perm=tuple("nhw".index(axis) for axis in order),
                    move_dim=order.index(other), taps0=taps0, taps2=taps2,
                    pad0=pad_h if along_h else pad_w, pad2=pad_w if along_h else pad_h,
                    tap_stride0=S if along_h else 1, tap_stride2=1 if along_h else S,
                    tail=halo_tail(taps0),
                    out_sizes=tuple(sizes[axis] for axis in order))


def halo_conv_problem(x: torch.Tensor, w: torch.Tensor, stride: Pair = 1, padding: Pair = 0,
                      dilation: Pair = 1) -> str:
    """Why halo_conv_kernel cannot run this layer here ("" when it can): what
    conv_hopper.hopper_conv_problem asks (a Hopper GPU, a measured Triton, float16 or
    bfloat16, C and K multiples of 8), and stride 1 and dilation 1 (a tap's shift along the
    halo axis must be one row of the buffer)."""
    (sh, sw), _, (dh, dw) = geometry(stride, padding, dilation)
    if (sh, sw, dh, dw) != (1, 1, 1, 1):
        return (f"it takes stride 1 and dilation 1, not stride {(sh, sw)} and dilation "
                f"{(dh, dw)}")
    return hopper_conv_problem(x, w, stride)


def launch_halo_conv2d(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, stride: Pair,
                       padding: Pair, dilation: Pair, config) -> torch.Tensor:
    """Run halo_conv_kernel, or halo_ws_conv_kernel where config["SCHEDULE"] is
    "specialised", with ``config`` (HALO_CONV_NAMES) into the preallocated channels_last y;
    return y. The layer must pass :func:`halo_conv_problem` (stride and
    dilation are there for the paths' common signature); ValueError, saying why, for a
    configuration halo_shape_problem refuses. With SPLIT_K > 1 the kernel writes
    float32 partial sums that conv_hopper.reduce_splits adds into y."""
    _, (ph, pw), _ = geometry(stride, padding, dilation)
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    P, Q = y.shape[2], y.shape[3]
    b0, b1, b2, bn, bk, splits = (config[name] for name in ("B0", "B1", "B2", "BLOCK_N",
                                                            "BLOCK_K", "SPLIT_K"))
    shape = halo_shape_problem(config, x.element_size())
    if shape:
        raise ValueError(f"this halo configuration cannot run: {shape}")
    plan = halo_plan(config["ORDER"], N, P, Q, R, S, ph, pw)
    out = split_output(y, splits)
    x_view = x.permute(0, 2, 3, 1).permute(*plan.perm, 3)
    y_view = out.permute(0, *(1 + axis for axis in plan.perm), 4)
    d0, d1, d2 = plan.out_sizes
    tiles = cdiv(d0, b0) * cdiv(d1, b1) * cdiv(d2, b2) * cdiv(K, bn)
    specialised = config["SCHEDULE"] == "specialised"
    consumers = config["num_warps"] // 4 if specialised else 1
    args = (_descriptor(x_view, (b0, b1, b2, bk)), _descriptor(x_view, (plan.tail, b1, b2, bk)),
            _descriptor(w.permute(0, 2, 3, 1).reshape(K, R * S * C), (bn, bk)),
            _descriptor(y_view, (1, b0 // consumers, b1, b2, bn)), d0, d1, d2, C, K, plan.pad0,
            plan.pad2, plan.tap_stride0, plan.tap_stride2, plan.taps2)
    options = dict(T0=plan.taps0, B0=b0, B1=b1, B2=b2, TAILP=plan.tail, MOVE_DIM=plan.move_dim,
                   BLOCK_N=bn, BLOCK_K=bk, STAGES=config["STAGES"], SPLIT_K=splits)
    if specialised:
        halo_ws_conv_kernel[(tiles * splits,)](*args, **options, CONSUMERS=consumers,
                                               num_warps=4)
    else:
        halo_conv_kernel[(tiles * splits,)](*args, **options, num_warps=config["num_warps"])
    return reduce_splits(out, y)


#: a configuration's names: the view order and output box (B0 rows of the halo axis), then as
#: conv_hopper's, then SCHEDULE: "one" (halo_conv_kernel: num_warps warps load and multiply) or
#: "specialised" (halo_ws_conv_kernel: num_warps / 4 consumer warpgroups and a producer warp)
HALO_CONV_NAMES = ("ORDER", "B0", "B1", "B2", "BLOCK_N", "BLOCK_K", "STAGES", "SPLIT_K",
                   "num_warps", "SCHEDULE")
#: the schedules a configuration may name
HALO_SCHEDULES = ("one", "specialised")

#: the configurations the tuner races (the first is the default): the best of each layer and
#: the runners-up within 3% in runs 5 and 15 on the H200 (docs/results/h200.md, 2026-12-04):
#: 256-row tiles of two warpgroups for N64 C64 56², 64-row ones with 2 stages for the 5x5 layer,
#: 64 x 64 tiles two programs an SM for C512 7²; and the specialised schedule's two best on an
#: H100 (run 74, 2026-12-06): 128 x 64 tiles, 4 stages, N32 C512 7² at 1.09x cuDNN
HALO_CONV_CONFIGS = (("hnw", 8, 4, 8, 64, 32, 3, 1, 8, "one"),
                     ("hwn", 8, 8, 4, 64, 32, 3, 1, 8, "one"),
                     ("hnw", 8, 2, 8, 64, 32, 3, 1, 4, "one"),
                     ("hnw", 8, 2, 8, 64, 64, 2, 1, 4, "one"),
                     ("hwn", 8, 2, 8, 64, 32, 2, 1, 4, "one"),
                     ("hnw", 4, 4, 8, 64, 32, 2, 1, 4, "one"),
                     ("wnh", 8, 8, 2, 64, 32, 2, 1, 4, "one"),
                     ("hnw", 8, 8, 1, 64, 64, 3, 1, 4, "one"),
                     ("hwn", 8, 1, 8, 64, 64, 3, 1, 4, "one"),
                     ("hnw", 8, 8, 1, 128, 64, 3, 1, 4, "one"),
                     ("hwn", 8, 1, 16, 64, 64, 4, 1, 8, "specialised"),
                     ("hnw", 8, 16, 1, 64, 64, 4, 1, 8, "specialised"))

#: a configuration is skipped where its boxes compute more than this many output rows per row
#: stored (P, Q or N not a multiple of the box): the exploration's winners wasted at most 14%
MAX_WASTE = 1.25


def halo_shape_problem(config, element_bytes: int) -> str:
    """Why a configuration's tile cannot be cut into the taps' shifted views ("" when it can):
    each view starts B1·B2 rows into the buffer, which must be a whole number of the swizzle's
    8-row periods, and a row of BLOCK_K channels must fit one 128-byte swizzle row (a wider
    one is stored as column blocks, and a shift by rows would mix them: BLOCK_K 128 in
    float16 computed garbage on the H200, run 16); every warp of the tile's warpgroups takes
    16 of its rows."""
    chunk = config["B1"] * config["B2"]
    if chunk % 8:
        return f"B1·B2 = {chunk} rows is not a multiple of the swizzle's 8"
    if config["BLOCK_K"] * element_bytes > 128:
        return (f"BLOCK_K = {config['BLOCK_K']} channels are {config['BLOCK_K'] * element_bytes}"
                " bytes, more than the 128 of one swizzled row")
    if config["B0"] * chunk % (16 * config["num_warps"]):
        return (f"a tile of {config['B0'] * chunk} rows does not split into 16-row slices for "
                f"{config['num_warps']} warps")
    if config["SCHEDULE"] not in HALO_SCHEDULES:
        return f"SCHEDULE must be one of {HALO_SCHEDULES}, not {config['SCHEDULE']!r}"
    if config["SCHEDULE"] == "specialised":
        if config["num_warps"] not in (4, 8):
            return (f"the specialised schedule's consumers are 1 or 2 warpgroups: num_warps 4 "
                    f"or 8, not {config['num_warps']}")
        consumers = config["num_warps"] // 4
        if config["B0"] % consumers:
            return (f"B0 = {config['B0']} halo rows do not split between {consumers} consumer "
                    "warpgroups (each takes whole rows of the halo axis)")
    return ""


def halo_shared_bytes(config, taps0: int, element_bytes: int) -> int:
    """Shared memory a configuration takes (bytes) with ``taps0`` taps along the halo axis:
    the ring (each stage B0 + TAILP chunks of B1·B2 rows and taps0 filter blocks, BLOCK_K
    channels wide) and the output tile (float32 when the reduction is split), which the "one"
    schedule stores through the ring's memory once the ring is done with (the larger of the
    two) and the "specialised" one through a buffer of its own (the sum)."""
    tail = halo_tail(taps0)
    chunk = config["B1"] * config["B2"]
    stage = ((config["B0"] + tail) * chunk + taps0 * config["BLOCK_N"]) * config["BLOCK_K"]
    out_bytes = 4 if config["SPLIT_K"] > 1 else element_bytes
    ring = config["STAGES"] * stage * element_bytes
    out = config["B0"] * chunk * config["BLOCK_N"] * out_bytes
    return ring + out if config["SCHEDULE"] == "specialised" else max(ring, out)


def halo_conv_prune(config, problem, resources) -> str | None:
    """Why the tuner skips ``config`` for ``problem`` (None: it races): its tile cannot be cut
    into the taps' views (halo_shape_problem), the filter has one tap along its halo axis
    (nothing to share), its ring overflows shared memory, its BLOCK_N is twice the output
    channels or more, or its boxes compute more than MAX_WASTE rows per row stored."""
    (sh, sw), (ph, pw), (dh, dw) = geometry(problem["stride"], problem["padding"],
                                            problem["dilation"])
    P = output_size(problem["H"], problem["R"], sh, ph, dh)
    Q = output_size(problem["W"], problem["S"], sw, pw, dw)
    plan = halo_plan(config["ORDER"], problem["N"], P, Q, problem["R"], problem["S"], ph, pw)
    shape = halo_shape_problem(config, 2)  # float16 or bfloat16
    if shape:
        return shape
    if plan.taps0 == 1:
        return (f"the filter has one tap along the halo axis ({config['ORDER'][0]}): nothing "
                "to share")
    if overflow := resources.shared_memory_problem(halo_shared_bytes(config, plan.taps0, 2)):
        return overflow  # float16 or bfloat16
    wide = twice_the_output_channels(config, problem)
    if wide:
        return wide
    box = (config["B0"], config["B1"], config["B2"])
    computed = 1
    for size, edge in zip(plan.out_sizes, box):
        computed *= cdiv(size, edge) * edge
    waste = computed / (problem["N"] * P * Q)
    if waste > MAX_WASTE:
        return f"its boxes compute {waste:.2f} output rows per row stored (> {MAX_WASTE})"
    return None


#: the tuner's search space: level 0 the default, level 1 every configuration above
HALO_CONV_SPACE = SearchSpace(default=Config(**dict(zip(HALO_CONV_NAMES, HALO_CONV_CONFIGS[0]))),
                              small=configs_from_rows(HALO_CONV_NAMES, HALO_CONV_CONFIGS[1:]),
                              prune=halo_conv_prune)

forbidden_in_graded_calls(halo_conv_kernel)
forbidden_in_graded_calls(halo_ws_conv_kernel)
