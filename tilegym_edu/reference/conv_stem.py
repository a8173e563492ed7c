"""A network's stem (few input channels, a wide filter: ResNet-50's 3 channels, 7x7, stride 2) at
cuDNN's speed, on NHWC data as in `convolution` (x (N, C, H, W) and w (K, C, R, S) channels_last,
y (N, K, P, Q) channels_last; cross-correlation, one group, no bias, dilation 1).

Why another kernel: the packed implicit GEMM of `conv_groups` (lesson 05's Exercise 4) reduces
over the R·S·C = 147 (r, s, c) indices of a stem, gathering each element with a division into
(r, s, c) and a bounds check. It ran at 0.56-0.59 of cuDNN on the H200. Here the input is first
copied into a buffer padded in space (so no load needs a bounds check) and in channels, to CP =
4 for 3 channels. Then one filter row's S pixels x CP channels are S·CP adjacent elements of one
input row: 28 for a 7x7 stem, read as ROW = 32 (the next pixel's 4 meet zero filter entries).
The reduction walks the R filter rows, one unmasked contiguous load of ROW elements per output
row each: 7 steps, where the packed kernel takes 5 steps of 32 scattered gathers. With the copy
and the padded filters timed, it ran the stem at 1.06-1.08x cuDNN on the H200
(docs/results/h200-2026-12-02-conv-shapes.md).

The copy costs memory: (N, H + 2·pad_h, W', CP) elements, W' = W + 2·pad_w or a little more
(the last output's ROW elements must stay inside), 1.4x x's bytes for the ResNet stem.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from tilegym_edu.grading import forbidden_in_graded_calls
from tilegym_edu.reference.convolution import Pair, check_conv_inputs, geometry, new_output
from tilegym_edu.reference.pipelined import matmul_prune
from tilegym_edu.tiles import grouped_tile
from tilegym_edu.tune import Config, SearchSpace, autotune, configs_from_rows

#: the most input channels the stem kernel takes: a filter row of S·CP elements must stay a
#: short contiguous run (8 channels x 7 pixels = 56 -> 64)
MAX_STEM_CHANNELS = 8


@triton.jit(do_not_specialize=["M", "P", "Q", "Hp", "Wp", "R", "STRIDE_H", "STRIDE_W"])
def stem_conv2d_kernel(xp_ptr, wp_ptr, y_ptr, M, K, P, Q, Hp, Wp, R, STRIDE_H, STRIDE_W,
                       CP: tl.constexpr, ROW: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """y (M = N·P·Q, K), row-major = the convolution of the padded input xp (N, Hp, Wp, CP),
    contiguous, with the padded filters wp (K, R, ROW), contiguous: one BLOCK_M x BLOCK_N tile
    per program, grouped order. Step r loads, for each output row (n, p, q), the ROW adjacent
    elements of xp that start at pixel (p·STRIDE_H + r, q·STRIDE_W), channel 0, and multiplies
    them with filter row r of every output channel of the tile. No masks on the loads: the
    padded buffers hold every element a step reads."""
    pid = tl.program_id(0)
    pid_m, pid_n = grouped_tile(pid, tl.cdiv(M, BLOCK_M), tl.cdiv(K, BLOCK_N), GROUP_M)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % K
    offs_k = tl.arange(0, ROW)
    n = offs_m // (P * Q)
    p = (offs_m // Q) % P
    q = offs_m % Q
    rows = xp_ptr + ((n * Hp + p * STRIDE_H) * Wp + q * STRIDE_W) * CP
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for r in tl.range(0, R):
        a = tl.load(rows[:, None] + r * Wp * CP + offs_k[None, :])
        b = tl.load(wp_ptr + offs_n[None, :] * (R * ROW) + r * ROW + offs_k[:, None])
        acc = tl.dot(a, b, acc)
    ym = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    yn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(y_ptr + ym[:, None] * K + yn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(ym[:, None] < M) & (yn[None, :] < K))


#: the stem kernel's hand-written configuration: the winner on the ResNet-50 stem, batch 32
#: and 64, on the H200 (benchmarks/conv_ideas.py)
STEM_DEFAULT = dict(BLOCK_M=128, BLOCK_N=64, GROUP_M=8, num_warps=4, num_stages=3)
STEM_SPACE = SearchSpace(
    default=Config(**STEM_DEFAULT),
    small=configs_from_rows(("BLOCK_M", "BLOCK_N", "GROUP_M", "num_warps", "num_stages"), [
        (256, 64, 8, 8, 3), (128, 64, 8, 4, 2), (64, 64, 8, 4, 3), (128, 32, 8, 4, 3),
        (128, 128, 8, 8, 3)]),
    prune=lambda config, problem, resources: matmul_prune(
        {**config, "BLOCK_K": stem_layout(problem["C"], problem["S"])[1]}, problem, resources))


def stem_layout(C: int, S: int) -> tuple[int, int]:
    """(CP, ROW): the padded channel count (a power of two) and the elements one filter row's
    load spans (S·CP rounded up to a power of two)."""
    CP = triton.next_power_of_2(C)
    return CP, triton.next_power_of_2(S * CP)


def stem_problem(x: torch.Tensor, w: torch.Tensor, stride: Pair, padding: Pair
                 ) -> dict[str, object]:
    """What the best configuration depends on: shapes, stride, padding, dtype."""
    (sh, sw), (ph, pw), _ = geometry(stride, padding, 1)
    return {"N": x.shape[0], "C": x.shape[1], "H": x.shape[2], "W": x.shape[3],
            "K": w.shape[0], "R": w.shape[2], "S": w.shape[3], "stride": (sh, sw),
            "padding": (ph, pw), "dtype": str(x.dtype).removeprefix("torch.")}


def padded_stem_operands(x: torch.Tensor, w: torch.Tensor, stride: Pair, padding: Pair,
                         Q: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(xp, wp): x copied into zeros of (N, H + 2·pad_h, Wp, CP), at (pad_h, pad_w), Wp wide
    enough that output Q - 1's load stays inside; and w as zeros of (K, R, ROW) holding filter
    row r's (s, c) entries at s·CP + c."""
    (sh, sw), (ph, pw), _ = geometry(stride, padding, 1)
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    CP, ROW = stem_layout(C, S)
    Wp = max(W + 2 * pw, (Q - 1) * sw + ROW // CP)
    xp = torch.zeros((N, H + 2 * ph, Wp, CP), device=x.device, dtype=x.dtype)
    xp[:, ph:ph + H, pw:pw + W, :C] = x.permute(0, 2, 3, 1)
    wp = torch.zeros((K, R, ROW), device=w.device, dtype=w.dtype)
    wp.view(K, R, ROW // CP, CP)[:, :, :S, :C] = w.permute(0, 2, 3, 1)
    return xp, wp


def launch_stem_conv2d(x: torch.Tensor, w: torch.Tensor, stride: Pair, padding: Pair,
                       config) -> torch.Tensor:
    """The padded copies, then stem_conv2d_kernel with ``config``; returns y, channels_last."""
    P, Q = check_conv_inputs(x, w, stride, padding)
    (sh, sw), _, _ = geometry(stride, padding, 1)
    xp, wp = padded_stem_operands(x, w, stride, padding, Q)
    N, K, R = x.shape[0], w.shape[0], w.shape[2]
    CP, ROW = stem_layout(x.shape[1], w.shape[3])
    y = new_output(x, K, P, Q)
    grid = (triton.cdiv(N * P * Q, config["BLOCK_M"]) * triton.cdiv(K, config["BLOCK_N"]),)
    stem_conv2d_kernel[grid](xp, wp, y, N * P * Q, K, P, Q, xp.shape[1], xp.shape[2], R, sh, sw,
                             CP=CP, ROW=ROW, **config)
    return y


@forbidden_in_graded_calls
def stem_conv2d(x: torch.Tensor, w: torch.Tensor, stride: Pair = 1, padding: Pair = 0,
                dilation: Pair = 1, config=None, level: int | None = None) -> torch.Tensor:
    """y = F.conv2d(x, w, stride=stride, padding=padding) for a layer of at most
    MAX_STEM_CHANNELS input channels; ``config`` overrides STEM_DEFAULT, ``level`` tunes it for
    this layer instead (cached). ValueError with what to use for other layers."""
    check_conv_inputs(x, w, stride, padding, dilation)
    if geometry(stride, padding, dilation)[2] != (1, 1):
        raise ValueError(f"the stem kernel reads adjacent pixels: dilation must be 1, got "
                         f"{dilation!r}; use conv_groups.packed_conv2d")
    if x.shape[1] > MAX_STEM_CHANNELS:
        raise ValueError(f"the stem kernel takes at most {MAX_STEM_CHANNELS} input channels, "
                         f"x has {x.shape[1]}; use convolution.conv2d")
    if level is not None:
        config = autotune(stem_conv2d_kernel, stem_problem(x, w, stride, padding), STEM_SPACE,
                          lambda c: launch_stem_conv2d(x, w, stride, padding, c), level=level,
                          progress=False).config
    return launch_stem_conv2d(x, w, stride, padding, {**STEM_DEFAULT, **(config or {})})


forbidden_in_graded_calls(stem_conv2d_kernel)
