"""Split-K for convolutions whose output has too few tiles to fill the GPU: lesson 05's implicit
GEMM with its reduction cut into SPLIT_K ranges, as lesson 03's split-K cuts a matmul's.

Why: ResNet-50's deep layers have few output pixels and a long reduction. At batch 32, the
7x7 C512 3x3 layer's GEMM is (1568, 4608) @ (4608, 512): 52 tiles of 128 x 128 for 132 SMs,
each walking 72 steps of 64 alone. On the H200 lesson 05's kernel ran it at 0.59 of cuDNN
(docs/results/h200-2026-12-02-conv-shapes.md). Here program (tile, split) reduces over steps
[split·STEPS, (split + 1)·STEPS) of the flat (r, s, channel block) loop into a float32 partial,
and split_k's reduction kernel adds the partials in a fixed order (split 0 first: the result
does not depend on scheduling) into y.

Shapes and names as in `convolution`: x (N, C, H, W) and w (K, C, R, S) channels_last, y
(N, K, P, Q) channels_last; one group. Scratch memory: (splits, N·P·Q, K) float32.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from tilegym_edu.grading import forbidden_in_graded_calls
from tilegym_edu.reference.convolution import (Pair, check_conv_inputs, geometry, new_output,
                                               output_size)
from tilegym_edu.reference.pipelined import matmul_prune
from tilegym_edu.reference.split_k import REDUCE_BLOCK, split_k_reduce_kernel
from tilegym_edu.tiles import grouped_tile
from tilegym_edu.tune import Config, SearchSpace, configs_from_rows


@triton.jit(do_not_specialize=["N", "H", "W", "P", "Q", "R", "STRIDE_H", "STRIDE_W",
                               "PAD_H", "PAD_W", "DIL_H", "DIL_W", "STEPS"])
def split_k_conv2d_kernel(x_ptr, w_ptr, partial_ptr, N, H, W, C, K, P, Q, R, S: tl.constexpr,
                          STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W, STEPS,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """partial[split] (N·P·Q, K) float32, contiguous = lesson 05's implicit GEMM over steps
    [split·STEPS, (split + 1)·STEPS) of its flat (r, s, channel block) loop, for the tile
    program_id(0) names in grouped order and split = program_id(1). Gathers as lesson 05's
    conv2d_kernel does: zeros in the padding, rows and columns past the edge wrapped (% M,
    % K) and never stored."""
    pid = tl.program_id(0)
    split = tl.program_id(1)
    M = N * P * Q
    pid_m, pid_n = grouped_tile(pid, tl.cdiv(M, BLOCK_M), tl.cdiv(K, BLOCK_N), GROUP_M)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % K
    offs_k = tl.arange(0, BLOCK_K)
    n = offs_m // (P * Q)
    h0 = ((offs_m // Q) % P) * STRIDE_H - PAD_H
    w0 = (offs_m % Q) * STRIDE_W - PAD_W
    x_rows = x_ptr + ((n * H + h0) * W + w0) * C
    w_cols = w_ptr + offs_n * (R * S * C)
    c_blocks = tl.cdiv(C, BLOCK_K)
    first = split * STEPS
    last = tl.minimum(first + STEPS, R * S * c_blocks)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for i in tl.range(first, last):
        rs = i // c_blocks
        r = rs // S
        s = rs % S
        c = (i % c_blocks) * BLOCK_K + offs_k
        h = h0 + r * DIL_H
        w = w0 + s * DIL_W
        row_ok = (h >= 0) & (h < H) & (w >= 0) & (w < W)
        a = tl.load(x_rows[:, None] + (r * DIL_H * W + s * DIL_W) * C + c[None, :],
                    mask=row_ok[:, None] & (c[None, :] < C), other=0.0)
        b = tl.load(w_cols[None, :] + rs * C + c[:, None], mask=c[:, None] < C, other=0.0)
        acc = tl.dot(a, b, acc)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(partial_ptr + split * M * K + rows[:, None] * K + cols[None, :], acc,
             mask=(rows[:, None] < M) & (cols[None, :] < K))


#: the split-K convolution's default: lesson 05's 128 x 64 tile, the reduction in 4 ranges
SPLIT_K_CONV_DEFAULT = dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=64, GROUP_M=8, SPLIT_K=4,
                            num_warps=4, num_stages=3)
_NAMES = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SPLIT_K", "num_warps", "num_stages")
SPLIT_K_CONV_SPACE = SearchSpace(
    default=Config(**SPLIT_K_CONV_DEFAULT),
    small=configs_from_rows(_NAMES, [
        (128, 64, 64, 8, 2, 4, 3), (128, 128, 64, 8, 2, 8, 3), (128, 128, 64, 8, 4, 8, 3),
        (64, 128, 64, 8, 4, 4, 3), (128, 64, 64, 8, 8, 4, 3), (64, 64, 64, 8, 4, 4, 4)]),
    grid={"BLOCK_M": (64, 128), "BLOCK_N": (64, 128), "BLOCK_K": (32, 64),
          "GROUP_M": (8,), "SPLIT_K": (2, 3, 4, 6, 8), "num_warps": (4, 8),
          "num_stages": (3, 4)},
    prune=lambda config, problem, resources: split_k_conv_prune(config, problem, resources),
    cap=60)


def steps_per_split(C: int, R: int, S: int, block_k: int, split_k: int) -> tuple[int, int]:
    """(STEPS, splits): how many of the R·S·ceil(C / BLOCK_K) reduction steps each range
    takes, and how many ranges that makes (at most split_k)."""
    total = R * S * triton.cdiv(C, block_k)
    steps = triton.cdiv(total, split_k)
    return steps, triton.cdiv(total, steps)


def split_k_conv_prune(config, problem, resources) -> str | None:
    """lesson 03's limits, no range shorter than four steps, and no partials past the 2**31
    elements the kernels' 32-bit offsets reach."""
    P, Q = (output_size(problem[size], problem[kernel], problem["stride"][axis],
                        problem["padding"][axis], problem["dilation"][axis])
            for axis, (size, kernel) in enumerate((("H", "R"), ("W", "S"))))
    steps, splits = steps_per_split(problem["C"], problem["R"], problem["S"], config["BLOCK_K"],
                                    config["SPLIT_K"])
    if steps < 4:
        return f"{config['SPLIT_K']} ranges of {steps} steps each: fewer than four"
    if splits * problem["N"] * P * Q * problem["K"] >= 2**31:
        return f"{splits} partials would pass the 2**31 elements 32-bit offsets reach"
    return matmul_prune(config, problem, resources)


def launch_split_k_conv2d(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, stride: Pair,
                          padding: Pair, dilation: Pair, config) -> torch.Tensor:
    """The partials, then their sum into the preallocated channels_last y; returns y."""
    options = dict(config)
    split_k = options.pop("SPLIT_K")
    (sh, sw), (ph, pw), (dh, dw) = geometry(stride, padding, dilation)
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    P, Q = y.shape[2], y.shape[3]
    M = N * P * Q
    steps, splits = steps_per_split(C, R, S, options["BLOCK_K"], split_k)
    partial = torch.empty((splits, M, K), device=x.device, dtype=torch.float32)
    tiles = triton.cdiv(M, options["BLOCK_M"]) * triton.cdiv(K, options["BLOCK_N"])
    split_k_conv2d_kernel[(tiles, splits)](x, w, partial, N, H, W, C, K, P, Q, R, S, sh, sw,
                                           ph, pw, dh, dw, steps, **options)
    split_k_reduce_kernel[(triton.cdiv(M * K, REDUCE_BLOCK),)](
        partial, y, M, K, splits, K, 1, BLOCK=REDUCE_BLOCK)
    return y


@forbidden_in_graded_calls
def split_k_conv2d(x: torch.Tensor, w: torch.Tensor, stride: Pair = 1, padding: Pair = 0,
                   dilation: Pair = 1, config=None) -> torch.Tensor:
    """y = F.conv2d(x, w, ...) by split-K; ``config`` overrides SPLIT_K_CONV_DEFAULT (SPLIT_K
    is how many ranges at most: fewer when the reduction is short)."""
    P, Q = check_conv_inputs(x, w, stride, padding, dilation)
    y = new_output(x, w.shape[0], P, Q)
    return launch_split_k_conv2d(x, w, y, stride, padding, dilation,
                                 {**SPLIT_K_CONV_DEFAULT, **(config or {})})


forbidden_in_graded_calls(split_k_conv2d_kernel)
