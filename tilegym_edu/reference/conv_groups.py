"""Convolution for the layers lesson 05's implicit GEMM serves badly: few input channels (a
network's stem), grouped convolution (``groups=``, ResNeXt) and depthwise convolution
(MobileNet), on NHWC data as in `convolution` (same names: x (N, C, H, W) and w (K, C // G, R,
S) channels_last, y (N, K, P, Q) channels_last; cross-correlation, no bias).

Why a different kernel for few channels: lesson 05's kernel reduces over (r, s, channel block),
BLOCK_K channels a step. A stem layer has C = 3: each step of 16 or more channels does 3 of
useful work, and a 7x7 filter takes 49 steps. Here the reduction index runs over the packed
(r, s, c) instead, R·S·C of them (147 for the stem) cut into BLOCK_K steps, each gathering the
input elements its indices name. Within one filter row r, the S·C elements (s, c) of a pixel
row are adjacent in NHWC memory (with dilation 1), so the gathers are mostly contiguous.

Why groups need it too: with ``groups`` = G, output channel k reads only the C / G input
channels of its group g = k // (K / G). The packed kernel runs one GEMM per block of groups
(program_id 1 is the block), reducing over R·S·(C / G) per group. A group of ResNeXt's 4
channels is too narrow for a tile on its own, so a block packs several adjacent groups into one
block-diagonal GEMM (groups_per_block): the zeros off the diagonal are wasted multiplies, but
the layer is memory-bound and its tiles are then full.

Depthwise (C / G = 1: every output channel reads one input channel) is not a matrix product:
y[n, k, p, q] = Σ_{r,s} x[n, k // M, h, w] · w[k, 0, r, s], with M = K / C output channels per
input channel. Each program takes BLOCK_M output pixels x BLOCK_C channels, adjacent in NHWC
memory, and adds R·S products of loaded tiles: no tensor cores, few FLOPs per byte; on the
roofline it sits with the memory-bound kernels of lesson 06, not with the matmuls.
"""
from typing import Mapping

import torch
import triton
import triton.language as tl

from tilegym_edu.grading import forbidden_in_graded_calls
from tilegym_edu.reference.convolution import Pair, check_conv_inputs, geometry, new_output
from tilegym_edu.reference.pipelined import matmul_prune
from tilegym_edu.tiles import grouped_tile
from tilegym_edu.tune import TILE_NAMES, Config, SearchSpace, configs_from_rows


@triton.jit(do_not_specialize=["N", "H", "W", "P", "Q", "R", "STRIDE_H", "STRIDE_W",
                               "PAD_H", "PAD_W", "DIL_H", "DIL_W"])
def packed_conv2d_kernel(x_ptr, w_ptr, y_ptr, N, H, W, C, K, P, Q, R, S: tl.constexpr,
                         CG: tl.constexpr, KG, GS: tl.constexpr, STRIDE_H, STRIDE_W, PAD_H,
                         PAD_W, DIL_H, DIL_W, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """Implicit GEMM of the GS adjacent groups of block g = program_id(1) (CG input and KG
    output channels per group): one BLOCK_M x BLOCK_N tile of y's (N·P·Q, GS·KG) block per
    program_id(0), in grouped order. The reduction runs over the packed index
    t = (r·S + s)·(GS·CG) + c, R·S·GS·CG of them, BLOCK_K a step: index t gathers input channel
    g·GS·CG + c of pixel (h0 + r·DIL_H, w0 + s·DIL_W), or zero in the padding. Output channel j
    of the block belongs to group j // KG and reads only that group's CG channels: its filter
    element (r, s, c % CG) where c // CG is its group, zero elsewhere (a block-diagonal filter
    tile, gathered from w's channels_last rows, which are (r, s, c) in that order). With GS = 1
    this is one GEMM per group. CG, GS and S are constexprs, so t's division into (r, s, c)
    compiles to multiplies and shifts."""
    pid = tl.program_id(0)
    g = tl.program_id(1)
    M = N * P * Q
    CB: tl.constexpr = GS * CG                          # input channels of one block
    KB = GS * KG                                        # output channels of one block
    pid_m, pid_n = grouped_tile(pid, tl.cdiv(M, BLOCK_M), tl.cdiv(KB, BLOCK_N), GROUP_M)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % KB
    offs_k = tl.arange(0, BLOCK_K)
    n = offs_m // (P * Q)
    h0 = ((offs_m // Q) % P) * STRIDE_H - PAD_H
    w0 = (offs_m % Q) * STRIDE_W - PAD_W
    taps = R * S * CB
    w_cols = w_ptr + (g * KB + offs_n) * (R * S * CG)   # filter k's (r, s, c) = 0, per column
    group_of_column = offs_n // KG
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in tl.range(0, tl.cdiv(taps, BLOCK_K)):
        t = step * BLOCK_K + offs_k
        rs = t // CB
        c = t % CB
        h = h0[:, None] + (rs // S)[None, :] * DIL_H
        w = w0[:, None] + (rs % S)[None, :] * DIL_W
        ok = (t < taps)[None, :] & (h >= 0) & (h < H) & (w >= 0) & (w < W)
        a = tl.load(x_ptr + ((n[:, None] * H + h) * W + w) * C + g * CB + c[None, :],
                    mask=ok, other=0.0)
        own = (t < taps)[:, None] & ((c // CG)[:, None] == group_of_column[None, :])
        b = tl.load(w_cols[None, :] + (rs * CG + c % CG)[:, None], mask=own, other=0.0)
        acc = tl.dot(a, b, acc)
    offs_ym = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_yn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    y_mask = (offs_ym[:, None] < M) & (offs_yn[None, :] < KB)
    tl.store(y_ptr + offs_ym[:, None] * K + g * KB + offs_yn[None, :],
             acc.to(y_ptr.dtype.element_ty), mask=y_mask)


@triton.jit(do_not_specialize=["N", "H", "W", "P", "Q", "R", "STRIDE_H", "STRIDE_W",
                               "PAD_H", "PAD_W", "DIL_H", "DIL_W"])
def depthwise_conv2d_kernel(x_ptr, w_ptr, y_ptr, N, H, W, C, K, P, Q, R, S: tl.constexpr,
                            MULT: tl.constexpr, STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H,
                            DIL_W, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr):
    """Depthwise: output channel k reads input channel k // MULT alone. One program per
    BLOCK_M output pixels (program_id 0) x BLOCK_C output channels (program_id 1): for each
    of the R·S taps, a (BLOCK_M, BLOCK_C) tile of x (channels adjacent in NHWC memory) times
    that tap's BLOCK_C weights, added in float32; y stored once."""
    M = N * P * Q
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    m_ok, k_ok = offs_m < M, offs_k < K
    n = offs_m // (P * Q)
    h0 = ((offs_m // Q) % P) * STRIDE_H - PAD_H
    w0 = (offs_m % Q) * STRIDE_W - PAD_W
    x_rows = x_ptr + n * (H * W * C)
    c = offs_k // MULT
    acc = tl.zeros((BLOCK_M, BLOCK_C), dtype=tl.float32)
    for tap in tl.range(0, R * S):
        h = h0 + (tap // S) * DIL_H
        w = w0 + (tap % S) * DIL_W
        ok = m_ok & (h >= 0) & (h < H) & (w >= 0) & (w < W)
        a = tl.load(x_rows[:, None] + (h * W + w)[:, None] * C + c[None, :],
                    mask=ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(w_ptr + offs_k * (R * S) + tap, mask=k_ok, other=0.0)
        acc += a.to(tl.float32) * b.to(tl.float32)[None, :]
    tl.store(y_ptr + offs_m[:, None] * K + offs_k[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=m_ok[:, None] & k_ok[None, :])


def groups_per_block(groups: int, CG: int, KG: int, width: int) -> int:
    """How many adjacent groups (of CG input and KG output channels) one program of
    packed_conv2d_kernel takes: the largest power of two that divides ``groups`` and keeps the
    block within ``width`` channels on either side; 1 when one group already fills it. Narrow
    groups (ResNeXt's 4 channels) then share a tile: a 4-column GEMM would leave most of a tensor
    core's 16 or more columns idle, a block-diagonal one of 8 groups fills 32 (and computes
    zeros in the rest, which a memory-bound layer can afford)."""
    block = 1
    while groups % (2 * block) == 0 and 2 * block * max(CG, KG) <= width:
        block *= 2
    return block


#: level 0 of PACKED_SPACE: small output-channel tiles (a stem has 64, a group often fewer);
#: GROUP_WIDTH is the most channels a block of narrow groups spans (groups_per_block; 1 keeps
#: one GEMM per group, whose 64 x 32 tiles were the fastest on ResNeXt's strided layer before
#: blocks existed)
PACKED_DEFAULT = dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, GROUP_WIDTH=32,
                      num_warps=4, num_stages=3)
_PACKED_NAMES = TILE_NAMES + ("GROUP_WIDTH",)
PACKED_SPACE = SearchSpace(
    default=Config(**PACKED_DEFAULT),
    small=configs_from_rows(_PACKED_NAMES, [
        (128, 64, 64, 8, 4, 3, 64), (256, 64, 32, 8, 8, 3, 64), (64, 64, 32, 8, 4, 4, 64),
        (128, 32, 32, 8, 4, 3, 32), (64, 32, 16, 8, 4, 3, 32), (128, 128, 32, 8, 8, 3, 128),
        (64, 16, 16, 8, 4, 3, 16), (128, 32, 64, 8, 4, 3, 32), (256, 32, 32, 8, 8, 3, 32),
        (128, 64, 64, 8, 4, 4, 64), (64, 32, 16, 8, 4, 3, 1)]),
    grid={"BLOCK_M": (64, 128, 256), "BLOCK_N": (16, 32, 64, 128), "BLOCK_K": (16, 32, 64),
          "GROUP_M": (8,), "GROUP_WIDTH": (16, 32, 64), "num_warps": (4, 8),
          "num_stages": (2, 3, 4)},
    prune=matmul_prune, cap=60)

#: level 0 of DEPTHWISE_SPACE: 64 pixels x 64 channels (128 bytes of fp16 per pixel row)
DEPTHWISE_DEFAULT = dict(BLOCK_M=64, BLOCK_C=64, num_warps=4, num_stages=2)
_DEPTHWISE_NAMES = ("BLOCK_M", "BLOCK_C", "num_warps", "num_stages")
DEPTHWISE_SPACE = SearchSpace(
    default=Config(**DEPTHWISE_DEFAULT),
    small=configs_from_rows(_DEPTHWISE_NAMES, [
        (32, 64, 4, 2), (128, 64, 8, 2), (64, 128, 8, 2), (32, 128, 4, 2), (128, 32, 4, 2),
        (16, 256, 8, 2), (256, 32, 8, 2), (128, 16, 4, 2), (256, 16, 8, 2)]),
    grid={"BLOCK_M": (16, 32, 64, 128, 256), "BLOCK_C": (16, 32, 64, 128, 256),
          "num_warps": (4, 8),
          "num_stages": (1, 2, 3)},
    cap=40)


@forbidden_in_graded_calls
def packed_conv2d(x: torch.Tensor, w: torch.Tensor, stride: Pair = 1, padding: Pair = 0,
                  dilation: Pair = 1, groups: int = 1,
                  config: Mapping[str, int] | None = None) -> torch.Tensor:
    """F.conv2d(x, w, stride=..., padding=..., dilation=..., groups=groups) with the packed
    implicit GEMM, one per block of groups_per_block groups; ``config`` overrides
    PACKED_DEFAULT."""
    P, Q = check_conv_inputs(x, w, stride, padding, dilation, groups)
    (sh, sw), (ph, pw), (dh, dw) = geometry(stride, padding, dilation)
    N, C, H, W = x.shape
    K, CG, R, S = w.shape
    options = {**PACKED_DEFAULT, **(config or {})}
    y = new_output(x, K, P, Q)
    KG = K // groups
    GS = groups_per_block(groups, CG, KG, options.pop("GROUP_WIDTH"))
    grid = (triton.cdiv(N * P * Q, options["BLOCK_M"]) * triton.cdiv(GS * KG, options["BLOCK_N"]),
            groups // GS)
    packed_conv2d_kernel[grid](x, w, y, N, H, W, C, K, P, Q, R, S, CG, KG, GS, sh, sw, ph, pw,
                               dh, dw, **options)
    return y


@forbidden_in_graded_calls
def depthwise_conv2d(x: torch.Tensor, w: torch.Tensor, stride: Pair = 1, padding: Pair = 0,
                     dilation: Pair = 1, config: Mapping[str, int] | None = None) -> torch.Tensor:
    """F.conv2d(x, w, ..., groups=C) for x (N, C, H, W) and w (K, 1, R, S), K a multiple of C
    (K / C output channels per input channel); ``config`` overrides DEPTHWISE_DEFAULT."""
    if x.dim() == 4 and w.dim() == 4 and w.shape[1] != 1:
        raise ValueError(f"depthwise filters read one channel each: w must be (K, 1, R, S), "
                         f"got {tuple(w.shape)}; use packed_conv2d for C // groups > 1")
    C = x.shape[1] if x.dim() == 4 else 0
    P, Q = check_conv_inputs(x, w, stride, padding, dilation, C)
    (sh, sw), (ph, pw), (dh, dw) = geometry(stride, padding, dilation)
    N, _, H, W = x.shape
    K, _, R, S = w.shape
    options = {**DEPTHWISE_DEFAULT, **(config or {})}
    y = new_output(x, K, P, Q)
    grid = (triton.cdiv(N * P * Q, options["BLOCK_M"]), triton.cdiv(K, options["BLOCK_C"]))
    depthwise_conv2d_kernel[grid](x, w, y, N, H, W, C, K, P, Q, R, S, K // C, sh, sw, ph, pw,
                                  dh, dw, **options)
    return y


@forbidden_in_graded_calls
def grouped_conv2d(x: torch.Tensor, w: torch.Tensor, stride: Pair = 1, padding: Pair = 0,
                   dilation: Pair = 1, groups: int = 1) -> torch.Tensor:
    """F.conv2d with ``groups``, on the kernel that fits: depthwise when every group has one
    input channel, else the packed implicit GEMM (each at its default configuration)."""
    if x.dim() == 4 and groups == x.shape[1] and w.dim() == 4 and w.shape[1] == 1:
        return depthwise_conv2d(x, w, stride, padding, dilation)
    return packed_conv2d(x, w, stride, padding, dilation, groups)


forbidden_in_graded_calls(packed_conv2d_kernel)
forbidden_in_graded_calls(depthwise_conv2d_kernel)
