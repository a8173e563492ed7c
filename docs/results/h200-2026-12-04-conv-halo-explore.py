"""Exploration (scratch, not part of the course): the three convolution layers of
benchmarks/conv_shapes.py that still miss issue 19's targets, against cuDNN, with configurations
of the Gluon implicit GEMM (tilegym_edu/reference/conv_hopper.py) that HOPPER_CONV_CONFIGS does
not hold, and with a variant kernel written here, the "halo" kernel.

    PYTHONPATH=. OUT=/some/folder python docs/results/h200-2026-12-04-conv-halo-explore.py
    python docs/results/h200-2026-12-04-conv-halo-explore.py --plan        # the candidates and their arithmetic, no GPU

Layers (fp16, NHWC, as conv_shapes.py measures them; docs/results/h200-2026-12-04-conv-shapes.md):
  5x5    N8 C96 65x67 K40 5x5 pad 2   ours 49.3 us (128,64,32,6,1,4) vs cuDNN 39.4, target 0.9x
  c512   N32 C512 7x7 K512 3x3         ours 23.8 us (128,128,64,4,2,4) vs cuDNN 21.2, target 1.0x
  n64c64 N64 C64 56x56 K64 3x3         ours 45.9 us (128,64,64,3,1,4) vs cuDNN 42.1, target 1.0x

The halo kernel. conv_hopper's kernel loads, for each filter tap (r, s) and channel block, one
TMA box of input pixels: every input pixel is brought from L2 into shared memory R·S times per
output-channel block. By the estimate in --plan (boxes counted whole), the current winners move
266 / 132 / 347 MB from L2 into shared memory per call, 5.4 / 5.5 / 7.6 TB/s at their measured
times: plausibly the ceiling (not measured). Here x is viewed with the "halo" axis
(output rows, or columns) outermost, e.g. (H, N, W, C), and one box of (B0 + R - 1) rows of that
axis is loaded per (other tap, channel block): the R taps along the halo axis are then R
sub-views of the one buffer, shifted by whole multiples of B1·B2 rows (kept a multiple of 8, the
swizzle period, so every sub-view is a valid wgmma operand without moving data). The tile's rows
come out in (halo, N, other) order; the output is stored through the matching permuted view of y.
A-operand traffic falls from R·B0 to B0 + R - 1 rows. Only stride 1, dilation 1 (the three layers).
Tensor descriptors need power-of-two boxes, so the halo comes in two copies: the B0 rows, then a
box of the next power of two >= R - 1 rows right behind them.

Method. Every candidate is first compiled, run once into a NaN-filled output and checked against
float32 F.conv2d in a pool of child processes (parallel compiles; a candidate that faults or hangs
takes down only its child). The main process then checks each survivor again (max abs error
printed) and times them all interleaved with cuDNN channels_last and the current configuration
through tilegym_edu.bench.compare(graph_below_ms=math.inf) (CUDA graphs, L2 flushed), then the best
few again with more runs. Everything goes to $OUT/conv_explore.json. Bounded by EXPLORE_BUDGET_S
(default 215 s of wall time); a candidate that fails to compile is printed and skipped.
--no-pool checks in the main process (a faulting kernel then ends the run; what was timed is
already in the JSON). Checked offline before the first GPU run: all 58 kernels compile for sm_90a
with Triton 3.6 (no spills, no ptxas warnings), and a numpy emulation of the halo kernel's
indexing (TMA zero fill, clipped stores, split-K) reproduced F.conv2d on every halo candidate.
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import argparse
import json
import math
import multiprocessing
import os
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,
                                                               warpgroup_mma, warpgroup_mma_wait)

from tilegym_edu import bench
from tilegym_edu.reference import conv_hopper
from tilegym_edu.reference import convolution as conv
from tilegym_edu.reference.split_k import REDUCE_BLOCK, split_k_reduce_kernel

T_START = time.perf_counter()
BUDGET_S = float(os.environ.get("EXPLORE_BUDGET_S", "215"))
SMEM_PER_SM = 228 * 1024          # H100/H200: 228 KiB per SM, 227 KiB at most per block
SMEM_PER_BLOCK = 227 * 1024


def elapsed() -> float:
    return time.perf_counter() - T_START


def log(*args) -> None:
    print(f"[{elapsed():6.1f}s]", *args, flush=True)


# ---------------------------------------------------------------------------------------------
# The halo kernel
# ---------------------------------------------------------------------------------------------

@gluon.jit
def _halo_issue(x_desc, xt_desc, w_desc, a_smem, b_smem, bars, j, first, a0, a1, a2, k0, C,
                PAD0, PAD2, WS0, WS2, T0: gl.constexpr, B0: gl.constexpr, B1: gl.constexpr,
                B2: gl.constexpr, TAILP: gl.constexpr, MOVE_DIM: gl.constexpr,
                BLOCK_K: gl.constexpr, STAGES: gl.constexpr):
    """TMA copies of the program's j-th step (step first + j of the flat (other tap, channel
    block) loop) into ring slot j % STAGES: the halo, B0 + TAILP rows of the halo axis (two
    boxes: B0 rows, then TAILP rows) at the other tap's offset, and the T0 filter blocks of the
    taps along the halo axis. a_smem is (STAGES·NCH, B1·B2, BLOCK_K): a slot is NCH chunks of
    one halo row each, so every copy and every operand starts at a chunk (index + reinterpret,
    as conv_hopper does for its boxes)."""
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
    d = t2 - PAD2
    if MOVE_DIM == 1:
        o1 = a1 + d
        o2 = a2
    else:
        o1 = a1
        o2 = a2 + d
    main = a_smem.index(slot * NCH)._reinterpret(dtype, [B0, B1, B2, BLOCK_K], x_desc.layout)
    tma.async_copy_global_to_shared(x_desc, [a0 - PAD0, o1, o2, c0], bar, main)
    tail = a_smem.index(slot * NCH + B0)._reinterpret(dtype, [TAILP, B1, B2, BLOCK_K],
                                                       xt_desc.layout)
    tma.async_copy_global_to_shared(xt_desc, [a0 - PAD0 + B0, o1, o2, c0], bar, tail)
    for t0 in gl.static_range(T0):
        tma.async_copy_global_to_shared(w_desc, [k0, (t0 * WS0 + t2 * WS2) * C + c0], bar,
                                        b_smem.index(slot * T0 + t0))


@gluon.jit
def halo_conv_kernel(x_desc, xt_desc, w_desc, y_desc, D0, D1, D2, C, K, PAD0, PAD2, WS0, WS2, T2,
                     T0: gl.constexpr, B0: gl.constexpr, B1: gl.constexpr, B2: gl.constexpr,
                     TAILP: gl.constexpr, MOVE_DIM: gl.constexpr, BLOCK_N: gl.constexpr,
                     BLOCK_K: gl.constexpr, STAGES: gl.constexpr, SPLIT_K: gl.constexpr,
                     num_warps: gl.constexpr):
    """One (B0·B1·B2) x BLOCK_N tile of y a program, y seen as (D0, D1, D2, K) = the output in
    view order (halo axis first). x_desc: 4-D over x viewed the same way (input sizes), boxes
    (B0, B1, B2, BLOCK_K); xt_desc the same view in (TAILP, B1, B2, BLOCK_K) boxes; w_desc the
    (K, R·S·C) filter matrix in (BLOCK_N, BLOCK_K) blocks; y_desc 5-D over (SPLIT_K, D0, D1, D2,
    K) in (1, B0, B1, B2, BLOCK_N) boxes. The reduction walks T2 taps of the other axis x channel
    blocks; each step runs T0 wgmmas, tap t0 on the halo rows t0 .. t0 + B0 - 1."""
    BLOCK_M: gl.constexpr = B0 * B1 * B2
    CH: gl.constexpr = B1 * B2
    NCH: gl.constexpr = B0 + TAILP
    dtype: gl.constexpr = x_desc.dtype
    n_blocks = gl.cdiv(K, BLOCK_N)
    boxes2 = gl.cdiv(D2, B2)
    boxes1 = gl.cdiv(D1, B1)
    tiles = gl.cdiv(D0, B0) * boxes1 * boxes2 * n_blocks
    pid = gl.program_id(0)
    split = pid // tiles
    k0 = (pid % n_blocks) * BLOCK_N
    box = (pid % tiles) // n_blocks
    a2 = (box % boxes2) * B2
    a1 = ((box // boxes2) % boxes1) * B1
    a0 = (box // (boxes2 * boxes1)) * B0
    steps = T2 * gl.cdiv(C, BLOCK_K)
    per_split = gl.cdiv(steps, SPLIT_K)
    first = split * per_split
    count = gl.minimum(first + per_split, steps) - first

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
        # each wgmma is one commit group: with T0 (this step's) left in flight, step i - 1's
        # are done and its slot can take step i + STAGES - 1
        acc = warpgroup_mma_wait(T0, deps=(acc,))
        if i + STAGES - 1 < count:
            _halo_issue(x_desc, xt_desc, w_desc, a_smem, b_smem, bars, i + STAGES - 1, first, a0,
                        a1, a2, k0, C, PAD0, PAD2, WS0, WS2, T0, B0, B1, B2, TAILP, MOVE_DIM,
                        BLOCK_K, STAGES)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))

    out_dtype: gl.constexpr = y_desc.dtype
    out_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_N], out_dtype)
    out_smem = gl.allocate_shared_memory(out_dtype, [BLOCK_M, BLOCK_N], out_layout)
    out_smem.store(acc.to(out_dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(
        y_desc, [split, a0, a1, a2, k0],
        out_smem._reinterpret(out_dtype, [1, B0, B1, B2, BLOCK_N], y_desc.layout))
    tma.store_wait(0)


# ---------------------------------------------------------------------------------------------
# Launchers (compile_only: a function (kernel, grid, args, kwargs) used by the offline check)
# ---------------------------------------------------------------------------------------------

def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_pow2(v: int) -> int:
    return 1 << max(0, (v - 1).bit_length())


def _reduce(out, y, M, K, splits):
    split_k_reduce_kernel[(cdiv(M * K, REDUCE_BLOCK),)](out, y, M, K, splits, K, 1,
                                                        BLOCK=REDUCE_BLOCK)


def launch_gluon(x, w, y, padding, cand, compile_only=None):
    """conv_hopper.launch_hopper_conv2d (stride 1, dilation 1) with an optional box override."""
    ph, pw = padding
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    P, Q = y.shape[2], y.shape[3]
    bm, bn, bk, stages, splits, warps = cand["cfg"]
    box_n, box_h, box_w = cand.get("box") or conv_hopper.box_shape(bm, N, P, Q)
    assert box_n * box_h * box_w == bm, (cand["cfg"], cand.get("box"))
    if splits == 1:
        out = y.permute(0, 2, 3, 1).unsqueeze(0)
    else:
        out = torch.empty((splits, N, P, Q, K), device=y.device, dtype=torch.float32)
    x_view = x.permute(0, 2, 3, 1).view(N, H, 1, W, C)
    x_desc = conv_hopper._descriptor(x_view, (box_n, box_h, 1, box_w, bk))
    w_desc = conv_hopper._descriptor(w.permute(0, 2, 3, 1).reshape(K, R * S * C), (bn, bk))
    y_desc = conv_hopper._descriptor(out, (1, box_n, box_h, box_w, bn))
    tiles = cdiv(N, box_n) * cdiv(P, box_h) * cdiv(Q, box_w) * cdiv(K, bn)
    args = (x_desc, w_desc, y_desc, N, P, Q, C, K, ph, pw, 1, 1, 1, 1, R)
    kwargs = dict(S=S, BOX_N=box_n, BOX_H=box_h, BOX_W=box_w, BLOCK_N=bn, BLOCK_K=bk,
                  STAGES=stages, SPLIT_K=splits, num_warps=warps)
    if compile_only is not None:
        return compile_only(conv_hopper.hopper_conv_kernel, (tiles * splits,), args, kwargs)
    conv_hopper.hopper_conv_kernel[(tiles * splits,)](*args, **kwargs)
    if splits > 1:
        _reduce(out, y, N * P * Q, K, splits)
    return y


HALO_INDEX = {"n": 0, "h": 1, "w": 2}


def halo_geometry(cand, x_shape, w_shape, padding):
    """Everything the halo launch derives from the candidate and the layer."""
    N, C, H, W = x_shape
    K, _, R, S = w_shape
    ph, pw = padding
    P, Q = H + 2 * ph - R + 1, W + 2 * pw - S + 1
    order = cand["order"]
    halo = order[0]
    other = "w" if halo == "h" else "h"
    assert halo in "hw" and sorted(order) == ["h", "n", "w"], order
    T0, T2 = (R, S) if halo == "h" else (S, R)
    g = dict(order=order, perm=[HALO_INDEX[c] for c in order], move=order.index(other),
             T0=T0, T2=T2, PAD0=ph if halo == "h" else pw, PAD2=pw if halo == "h" else ph,
             WS0=S if halo == "h" else 1, WS2=1 if halo == "h" else S,
             tailp=next_pow2(T0 - 1) if T0 > 1 else 1)
    sizes = {"n": N, "h": P, "w": Q}
    g["D"] = tuple(sizes[c] for c in order)
    return g


def launch_halo(x, w, y, padding, cand, compile_only=None):
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    P, Q = y.shape[2], y.shape[3]
    B0, B1, B2 = cand["box"]
    bn, bk, stages, splits, warps = cand["cfg"]
    g = halo_geometry(cand, tuple(x.shape), tuple(w.shape), padding)
    assert (B1 * B2) % 8 == 0, "B1·B2 must be a multiple of 8 (the swizzle period)"
    perm = g["perm"]
    if splits == 1:
        out = y.permute(0, 2, 3, 1).unsqueeze(0)
    else:
        out = torch.empty((splits, N, P, Q, K), device=y.device, dtype=torch.float32)
    x_view = x.permute(0, 2, 3, 1).permute(*perm, 3)
    y_view = out.permute(0, *[1 + p for p in perm], 4)
    x_desc = conv_hopper._descriptor(x_view, (B0, B1, B2, bk))
    xt_desc = conv_hopper._descriptor(x_view, (g["tailp"], B1, B2, bk))
    w_desc = conv_hopper._descriptor(w.permute(0, 2, 3, 1).reshape(K, R * S * C), (bn, bk))
    y_desc = conv_hopper._descriptor(y_view, (1, B0, B1, B2, bn))
    D0, D1, D2 = g["D"]
    tiles = cdiv(D0, B0) * cdiv(D1, B1) * cdiv(D2, B2) * cdiv(K, bn)
    args = (x_desc, xt_desc, w_desc, y_desc, D0, D1, D2, C, K, g["PAD0"], g["PAD2"], g["WS0"],
            g["WS2"], g["T2"])
    kwargs = dict(T0=g["T0"], B0=B0, B1=B1, B2=B2, TAILP=g["tailp"], MOVE_DIM=g["move"],
                  BLOCK_N=bn, BLOCK_K=bk, STAGES=stages, SPLIT_K=splits, num_warps=warps)
    if compile_only is not None:
        return compile_only(halo_conv_kernel, (tiles * splits,), args, kwargs)
    halo_conv_kernel[(tiles * splits,)](*args, **kwargs)
    if splits > 1:
        _reduce(out, y, N * P * Q, K, splits)
    return y


def launch(x, w, y, padding, cand, compile_only=None):
    fn = launch_halo if cand["kind"] == "halo" else launch_gluon
    return fn(x, w, y, padding, cand, compile_only)


# ---------------------------------------------------------------------------------------------
# Layers and candidates
# ---------------------------------------------------------------------------------------------

#: key -> (N, C, H, W, K, R, stride, padding), the current configuration and figures of
#: docs/results/h200-2026-12-04-conv-shapes.json (us), issue 19's target
LAYERS = {
    "5x5": dict(shape=(8, 96, 65, 67, 40, 5, 1, 2), current=(128, 64, 32, 6, 1, 4),
                ours_us=49.3, cudnn_us=39.4, target=0.9),
    "c512": dict(shape=(32, 512, 7, 7, 512, 3, 1, 1), current=(128, 128, 64, 4, 2, 4),
                 ours_us=23.8, cudnn_us=21.2, target=1.0),
    "n64c64": dict(shape=(64, 64, 56, 56, 64, 3, 1, 1), current=(128, 64, 64, 3, 1, 4),
                   ours_us=45.9, cudnn_us=42.1, target=1.0),
}


def G(cfg, box=None, why=""):
    """A conv_hopper configuration (BLOCK_M, BLOCK_N, BLOCK_K, STAGES, SPLIT_K, num_warps)."""
    return dict(kind="gluon", cfg=tuple(cfg), box=tuple(box) if box else None, why=why)


def H(order, box, cfg, why=""):
    """A halo configuration: view order (halo axis first), box (B0, B1, B2), (BLOCK_N, BLOCK_K,
    STAGES, SPLIT_K, num_warps)."""
    return dict(kind="halo", order=order, box=tuple(box), cfg=tuple(cfg), why=why)


CANDIDATES = {
    "5x5": [
        # --- the halo kernel: 5 taps along the halo axis from one box (A traffic / 2.5-4)
        H("wnh", (8, 8, 2), (64, 32, 2, 1, 4), "W-halo, all 8 images, 2 rows: 297 tiles, 64 KiB"),
        H("wnh", (8, 8, 2), (64, 32, 3, 1, 4), "same, 3 stages (2 CTAs/SM)"),
        H("hnw", (4, 4, 8), (64, 32, 2, 1, 4), "H-halo 4 rows x 4 images x 8 cols"),
        H("hwn", (8, 2, 8), (64, 32, 2, 1, 4), "H-halo 8 rows x 2 cols x 8 images"),
        H("wnh", (16, 8, 1), (64, 32, 2, 1, 4), "W-halo 16 cols: A / 4, 19% rows wasted"),
        H("wnh", (8, 8, 1), (64, 32, 3, 1, 4), "64-row tiles, 585 of them: even waves"),
        H("wnh", (8, 8, 1), (64, 32, 2, 1, 4), "64-row tiles, 2 stages, 4 CTAs/SM"),
        H("wnh", (8, 8, 2), (64, 32, 2, 1, 8), "two warpgroups"),
        H("wnh", (8, 8, 2), (64, 64, 2, 1, 4), "BLOCK_K 64: 128B swizzle, channels 96-127 zero"),
        # --- conv_hopper's kernel, configurations never raced on this layer
        G((64, 64, 32, 6, 1, 4), why="64-row tiles: ~580 tiles, 4 CTAs/SM, even waves"),
        G((64, 64, 32, 8, 1, 4), why="64-row tiles, deeper ring"),
        G((64, 64, 64, 4, 1, 4), why="64-row tiles, BLOCK_K 64"),
        G((128, 64, 32, 8, 1, 4), why="deeper ring (2 CTAs/SM)"),
        G((128, 64, 32, 5, 1, 4), why="between the 4 and 6 stages raced"),
        G((128, 64, 32, 6, 1, 8), why="two warpgroups on the current tile"),
        G((128, 32, 32, 6, 1, 4), why="BLOCK_N 32 (K 40 = 2 blocks): 2x the tiles"),
        G((256, 64, 32, 4, 1, 8), why="256-row tiles halve the filter traffic"),
        G((128, 64, 32, 6, 1, 4), box=(8, 2, 8), why="wider box: 512 B TMA rows, 297 tiles"),
        G((128, 64, 32, 6, 1, 4), box=(8, 1, 16), why="widest box: 1 KiB TMA rows"),
    ],
    "c512": [
        H("hnw", (8, 16, 1), (128, 64, 2, 2, 4), "H-halo 8 rows (7 used) x 16 images x 1 col"),
        H("hnw", (8, 16, 1), (128, 64, 3, 2, 4), "same, 3 stages (204 KiB)"),
        H("hnw", (8, 16, 1), (128, 32, 4, 2, 4), "same, BLOCK_K 32, 4 stages"),
        H("hnw", (8, 16, 1), (128, 64, 2, 2, 8), "same, two warpgroups"),
        H("hnw", (8, 8, 1), (128, 64, 3, 1, 4), "64-row halo tiles: 112 CTAs, no split-K pass"),
        H("hnw", (8, 8, 1), (128, 32, 5, 1, 4), "same, BLOCK_K 32, 5 stages"),
        H("hnw", (8, 8, 1), (256, 32, 3, 2, 4), "64 x 256 halo tiles, split 2: 112 CTAs"),
        H("hnw", (8, 32, 1), (128, 64, 2, 4, 8), "256 x 128 halo tiles, split 4: 112 CTAs"),
        H("hnw", (8, 16, 1), (256, 32, 3, 4, 8), "128 x 256 halo tiles, split 4: 112 CTAs"),
        G((128, 128, 64, 6, 2, 4), why="deeper ring: 6 stages won 128x64 here (25.4 us)"),
        G((128, 128, 64, 5, 2, 4), why="5 stages"),
        H("hnw", (8, 8, 1), (128, 32, 3, 2, 4), "64-row halo tiles, split 2: 224 CTAs, 2/SM"),
        G((64, 128, 64, 6, 1, 4), why="no split: 112 CTAs, no reduction pass"),
        G((64, 128, 64, 8, 1, 4), why="no split, 8 stages"),
        G((128, 64, 64, 8, 1, 4), why="no split, 8 stages (6 stages: 25.4 us)"),
        G((128, 256, 64, 4, 4, 8), why="128x256: less traffic a flop, split 4: 112 CTAs"),
        G((256, 128, 64, 4, 4, 8), why="256x128, split 4"),
        G((128, 128, 64, 4, 2, 8), why="the current tile with two warpgroups"),
        G((64, 256, 64, 4, 2, 4), why="64x256 split 2: 112 CTAs"),
        G((128, 128, 32, 8, 2, 4), why="BLOCK_K 32, 8 stages"),
    ],
    "n64c64": [
        H("hnw", (8, 2, 8), (64, 64, 2, 1, 4), "H-halo 8 rows x 2 images x 8 cols: exact tiling"),
        H("hnw", (8, 2, 8), (64, 32, 3, 1, 4), "same, BLOCK_K 32, 3 stages (3 CTAs/SM)"),
        H("hnw", (8, 2, 8), (64, 32, 4, 1, 4), "same, BLOCK_K 32, 4 stages"),
        H("hnw", (4, 4, 8), (64, 64, 2, 1, 4), "H-halo 4 rows x 4 images x 8 cols"),
        H("hnw", (8, 4, 8), (64, 32, 3, 1, 8), "256-row halo tiles (filters / 2 too)"),
        H("hnw", (8, 4, 8), (64, 64, 2, 1, 8), "256-row halo tiles, BLOCK_K 64"),
        H("hnw", (8, 4, 8), (64, 32, 2, 1, 8), "256-row halo tiles, 2 stages, 3 CTAs/SM"),
        H("hnw", (8, 2, 8), (64, 64, 2, 1, 8), "two warpgroups"),
        H("hnw", (8, 2, 8), (64, 64, 3, 1, 4), "3 stages (1 CTA/SM)"),
        G((128, 64, 64, 3, 1, 8), why="the current tile with two warpgroups"),
        G((64, 64, 64, 3, 1, 4), why="64-row tiles, 4 CTAs/SM"),
        G((64, 64, 64, 4, 1, 4), why="64-row tiles, 3 CTAs/SM"),
        G((256, 64, 64, 2, 1, 8), why="256 rows halve filter traffic, 2 CTAs/SM"),
        G((256, 64, 32, 4, 1, 8), why="256 rows, BLOCK_K 32"),
        G((256, 64, 32, 3, 1, 8), why="256 rows, BLOCK_K 32, 3 CTAs/SM"),
        G((128, 64, 64, 3, 1, 4), box=(4, 4, 8), why="the current config, box 4 images x 4 x 8"),
    ],
}


def cand_name(cand) -> str:
    if cand["kind"] == "halo":
        bn, bk, st, sk, nw = cand["cfg"]
        B0, B1, B2 = cand["box"]
        return f"halo {cand['order']} {B0}x{B1}x{B2} N{bn} K{bk} st{st} sk{sk} w{nw}"
    name = "gluon " + str(cand["cfg"])
    return name + (f" box{cand['box']}" if cand.get("box") else "")


def plan_row(layer_key, cand) -> dict:
    """Tiles, CTAs, shared memory, CTAs an SM by shared memory, and the bytes the TMA copies
    move from L2 into shared memory per call (boxes counted whole, padding included)."""
    N, C, H, W, K, R, stride, pad = LAYERS[layer_key]["shape"]
    S = R
    P, Q = H + 2 * pad - R + 1, W + 2 * pad - S + 1
    if cand["kind"] == "halo":
        bn, bk, st, sk, nw = cand["cfg"]
        B0, B1, B2 = cand["box"]
        g = halo_geometry(cand, (N, C, H, W), (K, C, R, S), (pad, pad))
        D0, D1, D2 = g["D"]
        bm = B0 * B1 * B2
        tiles = cdiv(D0, B0) * cdiv(D1, B1) * cdiv(D2, B2) * cdiv(K, bn)
        stage = ((B0 + g["tailp"]) * B1 * B2 + g["T0"] * bn) * bk * 2
        ring = st * stage
        per_tile = g["T2"] * cdiv(C, bk) * stage
        box = cand["box"]
    else:
        bm, bn, bk, st, sk, nw = cand["cfg"]
        box = cand.get("box") or conv_hopper.box_shape(bm, N, P, Q)
        tiles = cdiv(N, box[0]) * cdiv(P, box[1]) * cdiv(Q, box[2]) * cdiv(K, bn)
        ring = st * (bm + bn) * bk * 2
        per_tile = R * S * cdiv(C, bk) * (bm + bn) * bk * 2
    smem = max(ring, bm * bn * (4 if sk > 1 else 2))
    ctas_per_sm = min(SMEM_PER_SM // (smem + 1024), 64 // nw) if smem <= SMEM_PER_BLOCK else 0
    rows = tiles // cdiv(K, bn) * bm
    return dict(tiles=tiles, ctas=tiles * sk, block_m=bm, box=list(box), smem_kib=smem / 1024,
                ctas_per_sm=ctas_per_sm, waves=tiles * sk / max(1, 132 * ctas_per_sm),
                rows_computed=rows, rows_useful=N * P * Q, l2_to_smem_mb=tiles * per_tile / 1e6)


def all_tasks():
    tasks = []
    for key, layer in LAYERS.items():
        cur = G(layer["current"], why="the current winner (benchmarks/conv_shapes.py)")
        cur["current"] = True
        for cand in [cur, *CANDIDATES[key]]:
            tasks.append(dict(layer=key, cand=cand, name=cand_name(cand)))
    # interleave the layers, so a cut-short run still covers each
    order = sorted(range(len(tasks)),
                   key=lambda i: ([t["name"] for t in tasks if t["layer"] == tasks[i]["layer"]]
                                  .index(tasks[i]["name"]), list(LAYERS).index(tasks[i]["layer"])))
    return [dict(tasks[i], id=n) for n, i in enumerate(order)]


# ---------------------------------------------------------------------------------------------
# Data, checks, child processes
# ---------------------------------------------------------------------------------------------

_TENSORS: dict = {}


def layer_tensors(key):
    if key not in _TENSORS:
        N, C, H, W, K, R, stride, pad = LAYERS[key]["shape"]
        torch.manual_seed(0)
        x = torch.randn(N, C, H, W, device="cuda", dtype=torch.float16).contiguous(
            memory_format=torch.channels_last)
        w = (torch.randn(K, C, R, R, device="cuda", dtype=torch.float16) / (C * R * R) ** 0.5
             ).contiguous(memory_format=torch.channels_last)
        P, Q = conv.check_conv_inputs(x, w, stride, pad)
        tf32 = torch.backends.cudnn.allow_tf32
        torch.backends.cudnn.allow_tf32 = False      # a float32 reference, not TF32
        try:
            expected = F.conv2d(x.float(), w.float(), stride=stride, padding=pad)
        finally:
            torch.backends.cudnn.allow_tf32 = tf32
        _TENSORS[key] = dict(x=x, w=w, P=P, Q=Q, K=K, pad=(pad, pad), stride=stride,
                             expected=expected)
    return _TENSORS[key]


def check(key, cand) -> dict:
    """Run cand once into a NaN-filled output; its errors against float32 F.conv2d."""
    L = layer_tensors(key)
    y = conv.new_output(L["x"], L["K"], L["P"], L["Q"]).fill_(math.nan)
    start = time.perf_counter()
    launch(L["x"], L["w"], y, L["pad"], cand)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    diff = (y.float() - L["expected"])
    rel = (diff.norm() / L["expected"].norm()).item()
    max_abs = diff.abs().max().item()
    ok = math.isfinite(rel) and math.isfinite(max_abs) and rel < 1e-2
    return dict(status="ok" if ok else "wrong", rel_error=rel, max_abs_error=max_abs,
                first_call_s=seconds)


_POISONED = False


def child_task(task):
    """In a child process: compile (fills Triton's disk cache), run once, check."""
    global _POISONED
    base = dict(id=task["id"], layer=task["layer"], name=task["name"])
    if _POISONED:
        return dict(base, status="requeue")
    try:
        return dict(base, **check(task["layer"], task["cand"]))
    except Exception as exc:  # noqa: BLE001 - every failure is a result here
        message = f"{type(exc).__name__}: {exc}"
        try:
            torch.cuda.synchronize()
            (torch.ones(1, device="cuda") + 1).item()
        except Exception:  # noqa: BLE001
            _POISONED = True
            message += " [the child's CUDA context failed]"
        return dict(base, status="error", error=message[-3000:],
                    traceback=traceback.format_exc()[-3000:])


def precompile(tasks, deadline: float, stall_s: float = 45.0) -> dict[int, dict]:
    """child_task for every task in a pool of spawned processes, until the deadline. A task
    whose child's CUDA context had failed before it ran ("requeue") goes to a new pool; one that
    never came back (its child hung or died) is not tried again. No result for stall_s seconds
    while tasks are out ends the round (a child holding a hung kernel)."""
    results: dict[int, dict] = {}
    workers = max(2, min(8, (os.cpu_count() or 4) - 2))
    pending = list(tasks)
    for round_ in range(3):
        if not pending or elapsed() > deadline - 10:
            break
        log(f"precompile round {round_ + 1}: {len(pending)} candidates, "
            f"{min(workers, len(pending))} processes")
        ctx = multiprocessing.get_context("spawn")
        pool = ctx.Pool(min(workers, len(pending)))
        got = 0
        try:
            it = pool.imap_unordered(child_task, pending, chunksize=1)
            while got < len(pending):
                left = deadline - elapsed()
                if left <= 0:
                    log("precompile: deadline reached")
                    break
                # the first results wait for the children's imports (torch, CUDA)
                wait = min(left, stall_s if got else max(stall_s, 75.0))
                try:
                    r = it.next(timeout=wait)
                except multiprocessing.TimeoutError:
                    log(f"precompile: no result for {wait:.0f} s, giving up on the rest")
                    break
                got += 1
                results[r["id"]] = r
                if "rel_error" in r:
                    extra = (f"rel {r['rel_error']:.2e} max|err| {r['max_abs_error']:.3g} "
                             f"({r['first_call_s']:.1f} s)")
                else:
                    extra = (r.get("error") or "").splitlines()[0][:300] if r.get("error") else ""
                log(f"  child: {r['layer']:7s} {r['name']:48s} {r['status']:7s} {extra}")
        finally:
            pool.terminate()
            pool.join()
        requeue = [t for t in pending if results.get(t["id"], {}).get("status") == "requeue"]
        for t in requeue:
            del results[t["id"]]
        pending = requeue
    for t in tasks:
        results.setdefault(t["id"], dict(id=t["id"], layer=t["layer"], name=t["name"],
                                         status="timeout",
                                         error="no result from the child processes (not reached "
                                               "before the deadline, or its child hung or died)"))
    return results


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------

def time_layer(key, tasks, child_results, record, deadline):
    layer = LAYERS[key]
    L = layer_tensors(key)
    x, w, pad, stride = L["x"], L["w"], L["pad"], L["stride"]
    N, C, H, W, K, R, _, _ = layer["shape"]
    title = f"N{N} C{C} {H}x{W} K{K} {R}x{R} stride {stride} pad {pad[0]}"
    log(f"== {key}: {title}")
    flops = conv.conv_flops(x, w, L["P"], L["Q"])
    rows = {}
    fns = {"cuDNN channels_last": lambda: F.conv2d(x, w, stride=stride, padding=pad)}
    cudnn_out = fns["cuDNN channels_last"]()
    cudnn_rel = ((cudnn_out.float() - L["expected"]).norm() / L["expected"].norm()).item()
    cudnn_max_abs = (cudnn_out.float() - L["expected"]).abs().max().item()
    print(f"   cuDNN channels_last: max|err| {cudnn_max_abs:.3g} rel {cudnn_rel:.2e}")
    for t in tasks:
        cand = t["cand"]
        row = dict(name=t["name"], kind=cand["kind"], cfg=list(cand["cfg"]),
                   order=cand.get("order"), box=cand.get("box"), why=cand.get("why"),
                   current=bool(cand.get("current")), plan=plan_row(key, cand),
                   child=child_results.get(t["id"]))
        rows[t["name"]] = row
        child = row["child"] or {}
        if child and child.get("status") != "ok":
            row["status"] = f"skipped ({child.get('status')})"
            print(f"   SKIP {t['name']}: {child.get('status')} "
                  f"{(child.get('error') or '').splitlines()[:1]}")
            continue
        if elapsed() > deadline:
            row["status"] = "skipped (out of time)"
            continue
        try:
            row.update(check(key, cand))
        except Exception as exc:  # noqa: BLE001
            row["status"] = "error"
            row["error"] = f"{type(exc).__name__}: {exc}"[-3000:]
            print(f"   FAIL {t['name']}: {row['error'].splitlines()[0][:300]}")
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001 - the context is gone: stop here
                raise
            continue
        print(f"   check {t['name']:48s} max|err| {row['max_abs_error']:.3g} "
              f"rel {row['rel_error']:.2e} {row['status']}")
        if row["status"] == "ok":
            y = conv.new_output(x, L["K"], L["P"], L["Q"])
            fns[t["name"]] = lambda cand=cand, y=y: launch(x, w, y, pad, cand)
    record["layers"][key] = dict(title=title, target=layer["target"], docs=dict(
        ours_us=layer["ours_us"], cudnn_us=layer["cudnn_us"], current=list(layer["current"])),
        cudnn_rel_error=cudnn_rel, cudnn_max_abs_error=cudnn_max_abs, candidates=rows)
    if len(fns) < 2:
        return
    log(f"timing {len(fns)} functions interleaved")
    results = bench.compare(fns, flops=flops, rep_ms=400, graph_below_ms=math.inf)
    report(key, results, rows, record, "first")
    if elapsed() < deadline:
        ranked = sorted((m for m in results if m.name != "cuDNN channels_last"),
                        key=lambda m: m.median_ms)
        keep = [m.name for m in ranked[:6]]
        keep += [n for n, r in rows.items() if r["current"] and n in fns and n not in keep]
        again = {n: fns[n] for n in ["cuDNN channels_last", *keep]}
        log(f"confirming the best {len(keep)} with more runs")
        results = bench.compare(again, flops=flops, rep_ms=1500, graph_below_ms=math.inf)
        report(key, results, rows, record, "confirm")


def report(key, results, rows, record, label):
    cudnn = next(m for m in results if m.name == "cuDNN channels_last")
    layer = record["layers"][key]
    layer.setdefault("cudnn", {})[label] = dict(median_us=cudnn.median_ms * 1e3,
                                                 p20_us=cudnn.p20_ms * 1e3,
                                                 p80_us=cudnn.p80_ms * 1e3, runs=cudnn.runs,
                                                 sm_clock_mhz=cudnn.sm_clock_mhz)
    for m in results:
        if m.name in rows:
            rows[m.name].setdefault("timing", {})[label] = dict(
                median_us=m.median_ms * 1e3, p20_us=m.p20_ms * 1e3, p80_us=m.p80_ms * 1e3,
                runs=m.runs, tflops=m.tflops, vs_cudnn=cudnn.median_ms / m.median_ms,
                cuda_graph=m.cuda_graph, problem=m.problem)
    ranked = sorted((m for m in results if m.name != "cuDNN channels_last"),
                    key=lambda m: m.median_ms)
    current = next((m for m in results if rows.get(m.name, {}).get("current")), None)
    print(f"-- {key} ({label} timing, {len(results) - 1} candidates): cuDNN "
          f"{cudnn.median_ms * 1e3:.1f} us"
          + (f", current {current.name} {current.median_ms * 1e3:.1f} us "
             f"= {cudnn.median_ms / current.median_ms:.3f}x" if current else "")
          + f", target {record['layers'][key]['target']}x")
    print(f"   {'candidate':52s} {'us':>7s} {'p20-p80':>13s} {'vs cuDNN':>8s} {'vs cur':>7s}"
          f" {'tiles':>6s} {'CTA/SM':>6s} {'L2->SM MB':>9s}")
    for m in ranked[:8]:
        plan = rows[m.name]["plan"]
        vs_cur = current.median_ms / m.median_ms if current else float("nan")
        print(f"   {m.name:52s} {m.median_ms * 1e3:7.1f} "
              f"{m.p20_ms * 1e3:6.1f}-{m.p80_ms * 1e3:6.1f} {cudnn.median_ms / m.median_ms:7.3f}x"
              f" {vs_cur:6.3f}x {plan['ctas']:6d} {plan['ctas_per_sm']:6d}"
              f" {plan['l2_to_smem_mb']:9.0f}")
    best = ranked[0] if ranked else None
    if best is not None:
        layer.setdefault("best", {})[label] = dict(name=best.name,
                                                   median_us=best.median_ms * 1e3,
                                                   vs_cudnn=cudnn.median_ms / best.median_ms)


def write(record, out_dir: Path) -> None:
    record["elapsed_s"] = elapsed()
    path = out_dir / "conv_explore.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1, default=str))
    tmp.replace(path)


def print_plan() -> None:
    for t in all_tasks():
        p = plan_row(t["layer"], t["cand"])
        print(f"{t['id']:3d} {t['layer']:7s} {t['name']:50s} tiles {p['tiles']:5d} ctas "
              f"{p['ctas']:5d} smem {p['smem_kib']:6.1f} KiB  CTA/SM {p['ctas_per_sm']} waves "
              f"{p['waves']:5.2f} rows {p['rows_computed'] / p['rows_useful']:.3f}x "
              f"L2->SM {p['l2_to_smem_mb']:6.1f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", action="store_true", help="print the candidates, run nothing")
    parser.add_argument("--no-pool", action="store_true",
                        help="compile and check in this process (no child processes)")
    parser.add_argument("--layers", nargs="*", default=list(LAYERS), choices=list(LAYERS))
    args = parser.parse_args()
    if args.plan:
        print_plan()
        return
    out_dir = Path(os.environ.get("OUT") or "conv_explore_out")
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.cuda.init()
    record = dict(date=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                  gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                  triton=triton.__version__, cudnn=torch.backends.cudnn.version(),
                  budget_s=BUDGET_S, layers={})
    tasks = [t for t in all_tasks() if t["layer"] in args.layers]
    # drop what shared memory cannot hold before compiling it
    runnable = []
    for t in tasks:
        p = plan_row(t["layer"], t["cand"])
        if p["smem_kib"] * 1024 > SMEM_PER_BLOCK:
            log(f"skip {t['name']} ({t['layer']}): {p['smem_kib']:.0f} KiB of shared memory")
            continue
        runnable.append(t)
    log(f"{len(runnable)} candidates (with the 3 current configurations), budget {BUDGET_S:.0f} s")
    child_results: dict[int, dict] = {}
    if not args.no_pool:
        try:
            child_results = precompile(runnable, deadline=0.6 * BUDGET_S)
            if all(r["status"] == "timeout" for r in child_results.values()):
                log("no child process answered; checking in this process instead")
                child_results = {}
        except Exception:  # noqa: BLE001 - fall back to checking here
            log("the process pool failed; checking in this process:\n" + traceback.format_exc())
            child_results = {}
    record["children"] = list(child_results.values())
    write(record, out_dir)
    for key in args.layers:
        if elapsed() > BUDGET_S - 15:
            log(f"out of time before {key}")
            break
        try:
            time_layer(key, [t for t in runnable if t["layer"] == key], child_results, record,
                       deadline=BUDGET_S - 20)
        except Exception:  # noqa: BLE001
            log(f"{key} failed:\n{traceback.format_exc()}")
            record["layers"].setdefault(key, {})["error"] = traceback.format_exc()[-3000:]
            write(record, out_dir)
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001 - the CUDA context is gone
                break
        write(record, out_dir)
    print("\n== summary (confirmed timing where there is one)")
    for key, layer in record["layers"].items():
        best = (layer.get("best") or {})
        b = best.get("confirm") or best.get("first")
        if b:
            verdict = "MEETS" if b["vs_cudnn"] >= layer["target"] else "below"
            print(f"  {key:7s} best {b['name']:50s} {b['median_us']:6.1f} us "
                  f"{b['vs_cudnn']:.3f}x cuDNN, target {layer['target']}x: {verdict}")
    write(record, out_dir)
    log(f"wrote {out_dir / 'conv_explore.json'}")


if __name__ == "__main__":
    main()
