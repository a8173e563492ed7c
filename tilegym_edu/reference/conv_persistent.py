"""Convolution at the vendor's speed on the layers where lesson 05's implicit GEMM falls behind:
a persistent implicit GEMM whose filters and output move through tensor descriptors (TMA), and
one tuned entry point that races it against lesson 05's kernel per layer.

Why persistent: lesson 05's kernel runs one program per output tile. A ResNet layer's GEMM has
a short reduction (R·S·C: 576 to 2304 for 3x3 layers, just C = 64 for a 1x1 layer), so each
program spends a large share of its life filling its pipeline and storing its tile, while the
tensor cores wait. Here one program per SM walks over tiles pid, pid + NUM_PROGRAMS, ... and,
with FLATTEN, the compiler pipelines the tile loop and the reduction as one: the next tile's
first loads overlap this tile's epilogue (lesson 03's persistent matmul, applied to
convolution; at K = 64 it took the matmul from 0.68 to 1.00 of cuBLAS on the H200).

What goes through descriptors: the filters, read as the (K, R·S·C) matrix of
:func:`~tilegym_edu.reference.convolution.filters_as_matrix` in BLOCK_N x BLOCK_K blocks, and
the output, the (N·P·Q, K) matrix of y, stored in BLOCK_M x BLOCK_N blocks. A block of
filters at channel block cb of tap rs may run past the tap's C channels into the next tap's
(when C is not a multiple of BLOCK_K); those columns meet zeros in the input tile, which is
masked to c < C, and add nothing. Input tiles are gathered with pointers as in lesson 05 (an
output row's input pixel moves with the tap, and the padding reads zeros), except for a 1x1
convolution of stride 1 without padding, whose input *is* the (N·H·W, C) matrix: it moves
through a descriptor too (A_DESC).

Shapes and names as in `convolution`: x (N, C, H, W) and w (K, C, R, S) channels_last, y
(N, K, P, Q) channels_last; float16, bfloat16 or float32; no groups. Descriptors need rows of a
multiple of 16 bytes: :func:`descriptor_problem` says when a layer cannot have them (the
3-channel stem: rows of 7·7·3 = 147 elements), and :func:`shape_conv2d` then races lesson 05's
kernel alone.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from tilegym_edu.grading import forbidden_in_graded_calls
from tilegym_edu.reference.convolution import (CONV_SPACE, Pair, check_conv_inputs, conv2d_kernel,
                                               conv_problem, filters_as_matrix, geometry,
                                               launch_conv2d, new_output)
from tilegym_edu.reference.pipelined import matmul_prune, persistent_grid_size
from tilegym_edu.tiles import grouped_tile
from tilegym_edu.tune import Config, KernelGroup, SearchSpace, autotune, configs_from_rows


@triton.jit(do_not_specialize=["N", "H", "W", "P", "Q", "R", "STRIDE_H", "STRIDE_W",
                               "PAD_H", "PAD_W", "DIL_H", "DIL_W"])
def persistent_conv2d_kernel(x_ptr, a_desc, w_desc, y_desc, N, H, W, C, K, P, Q, R,
                             S: tl.constexpr, STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                             BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                             NUM_PROGRAMS: tl.constexpr, FLATTEN: tl.constexpr,
                             A_DESC: tl.constexpr):
    """y = conv2d(x, w) as the implicit GEMM (N·P·Q, R·S·C) @ (R·S·C, K), NUM_PROGRAMS
    programs each walking output tiles pid, pid + NUM_PROGRAMS, ... in grouped order. The
    reduction is one flat loop over (r, s, channel block) as in lesson 05's kernel. w_desc is
    the (K, R·S·C) filter matrix in BLOCK_N x BLOCK_K blocks, y_desc the (N·P·Q, K) output in
    BLOCK_M x BLOCK_N blocks (rows past the edge are dropped by the hardware). With A_DESC (a
    1x1 convolution of stride 1 without padding) a_desc is the (N·H·W, C) input matrix in
    BLOCK_M x BLOCK_K blocks and x_ptr is not read; otherwise input tiles are gathered from
    x_ptr, zeros in the padding, and a_desc is not read."""
    pid = tl.program_id(0)
    M = N * P * Q
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(K, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    c_blocks = tl.cdiv(C, BLOCK_K)
    offs_k = tl.arange(0, BLOCK_K)
    for tile in tl.range(pid, num_tiles, NUM_PROGRAMS, flatten=FLATTEN):
        pid_m, pid_n = grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M)
        offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
        n = offs_m // (P * Q)
        p = (offs_m // Q) % P
        q = offs_m % Q
        h0 = p * STRIDE_H - PAD_H
        w0 = q * STRIDE_W - PAD_W
        x_rows = x_ptr + ((n * H + h0) * W + w0) * C
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for i in range(0, R * S * c_blocks):
            rs = i // c_blocks
            c0 = (i % c_blocks) * BLOCK_K
            if A_DESC:
                a = a_desc.load([pid_m * BLOCK_M, c0])
            else:
                r = rs // S
                s = rs % S
                c = c0 + offs_k
                h = h0 + r * DIL_H
                w = w0 + s * DIL_W
                row_ok = (h >= 0) & (h < H) & (w >= 0) & (w < W)
                a = tl.load(x_rows[:, None] + (r * DIL_H * W + s * DIL_W) * C + c[None, :],
                            mask=row_ok[:, None] & (c[None, :] < C), other=0.0)
            b = w_desc.load([pid_n * BLOCK_N, rs * C + c0])
            acc = tl.dot(a, b.T, acc)
        y_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(y_desc.dtype))


#: the persistent kernel's hand-written configuration (its space's level 0)
PERSISTENT_CONV_DEFAULT = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, FLATTEN=True,
                               num_warps=8, num_stages=3)

_NAMES = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "FLATTEN", "num_warps", "num_stages")

#: level 1: the tiles lesson 05's kernel won with on the H200's ResNet layers, persistent, and
#: 128 x 256 / 256 x 128 tiles for the wide layers
PERSISTENT_CONV_SPACE = SearchSpace(
    default=Config(**PERSISTENT_CONV_DEFAULT),
    small=configs_from_rows(_NAMES, [
        (128, 128, 64, 8, True, 8, 4), (128, 64, 64, 8, True, 4, 4),
        (128, 64, 64, 8, True, 4, 3), (64, 128, 64, 8, True, 4, 4),
        (128, 256, 64, 8, True, 8, 3), (256, 128, 64, 8, True, 8, 3),
        (128, 128, 32, 8, True, 8, 5), (64, 64, 64, 8, True, 4, 4),
        (128, 128, 64, 8, False, 8, 3)]),
    grid={"BLOCK_M": (64, 128, 256), "BLOCK_N": (64, 128, 256), "BLOCK_K": (32, 64, 128),
          "GROUP_M": (8,), "FLATTEN": (True, False), "num_warps": (4, 8),
          "num_stages": (2, 3, 4, 5)},
    prune=matmul_prune, cap=80)


def descriptor_problem(x: torch.Tensor, w: torch.Tensor) -> str:
    """Why the persistent kernel cannot read w and write y through descriptors ("" when it
    can): the filter matrix's rows (R·S·C elements) and the output's (K) must be multiples of
    16 bytes."""
    K, C, R, S = w.shape
    for what, elements in (("the filter matrix's rows (R·S·C)", R * S * C),
                           ("the output's rows (K)", K)):
        if elements * x.element_size() % 16:
            return (f"{what} hold {elements} elements, {elements * x.element_size()} bytes: "
                    "tensor descriptors need multiples of 16 bytes")
    return ""


def reads_input_as_matrix(x: torch.Tensor, w: torch.Tensor, stride: Pair, padding: Pair,
                          dilation: Pair) -> bool:
    """True for a 1x1 convolution of stride 1 without padding, whose input is the (N·H·W, C)
    matrix itself, when its rows are a multiple of 16 bytes (a descriptor can read it)."""
    (sh, sw), (ph, pw), _ = geometry(stride, padding, dilation)
    return (w.shape[2] == w.shape[3] == 1 and (sh, sw) == (1, 1) and (ph, pw) == (0, 0)
            and x.shape[1] * x.element_size() % 16 == 0)


def launch_persistent_conv2d(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, stride: Pair,
                             padding: Pair, dilation: Pair, config) -> torch.Tensor:
    """Run persistent_conv2d_kernel with ``config`` (every launch option) into the
    preallocated channels_last y, one program per SM; return y. The layer must pass
    :func:`descriptor_problem`."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    (sh, sw), (ph, pw), (dh, dw) = geometry(stride, padding, dilation)
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    P, Q = y.shape[2], y.shape[3]
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    w_desc = TensorDescriptor.from_tensor(filters_as_matrix(w), [bn, bk])
    y_desc = TensorDescriptor.from_tensor(y.permute(0, 2, 3, 1).reshape(N * P * Q, K), [bm, bn])
    a_desc = w_desc   # a placeholder the kernel does not read, unless the input is a matrix
    as_matrix = reads_input_as_matrix(x, w, stride, padding, dilation)
    if as_matrix:
        a_desc = TensorDescriptor.from_tensor(x.permute(0, 2, 3, 1).reshape(N * H * W, C),
                                              [bm, bk])
    programs = persistent_grid_size(triton.cdiv(N * P * Q, bm) * triton.cdiv(K, bn))
    persistent_conv2d_kernel[(programs,)](x, a_desc, w_desc, y_desc, N, H, W, C, K, P, Q, R, S,
                                          sh, sw, ph, pw, dh, dw, NUM_PROGRAMS=programs,
                                          A_DESC=as_matrix, **config)
    return y


@forbidden_in_graded_calls
def persistent_conv2d(x: torch.Tensor, w: torch.Tensor, stride: Pair = 1, padding: Pair = 0,
                      dilation: Pair = 1, config=None) -> torch.Tensor:
    """y = F.conv2d(x, w, ...) with the persistent kernel; ``config`` overrides
    PERSISTENT_CONV_DEFAULT. ValueError with what to change when descriptors cannot serve the
    layer (descriptor_problem) or the inputs are not what lesson 05's kernel takes."""
    P, Q = check_conv_inputs(x, w, stride, padding, dilation)
    problem = descriptor_problem(x, w)
    if problem:
        raise ValueError(f"{problem}; use convolution.conv2d (pointer loads) for this layer")
    y = new_output(x, w.shape[0], P, Q)
    return launch_persistent_conv2d(x, w, y, stride, padding, dilation,
                                    {**PERSISTENT_CONV_DEFAULT, **(config or {})})


#: the ways to run a convolution here, each with its search space; a configuration of
#: SHAPE_CONV_SPACE names its way in PATH
CONV_PATHS = {"lesson05": CONV_SPACE, "persistent": PERSISTENT_CONV_SPACE}


def shape_conv_prune(config, problem, resources) -> str | None:
    """A path's own prune, and no persistent configuration where descriptors cannot serve the
    layer (problem["descriptors"] says why)."""
    if config["PATH"] == "persistent" and problem["descriptors"]:
        return f"the persistent kernel needs tensor descriptors: {problem['descriptors']}"
    own = {k: v for k, v in config.items() if k != "PATH"}
    return CONV_PATHS[config["PATH"]].prune(own, problem, resources)


#: both paths' level-1 candidates in one space: the tuner races them per layer and caches the
#: winner, PATH included; level 0 (and the interpreter) runs lesson 05's default
SHAPE_CONV_SPACE = SearchSpace(
    default=Config(**CONV_SPACE.default, PATH="lesson05"),
    small=[Config(**c, PATH=path) for path, space in CONV_PATHS.items()
           for c in (space.default, *space.small)],
    prune=shape_conv_prune)

#: what the tuner keys SHAPE_CONV_SPACE's results on: the source of both kernels
SHAPE_CONV_KERNELS = KernelGroup("shape_conv2d", (conv2d_kernel, persistent_conv2d_kernel))


def run_conv_path(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, stride: Pair,
                  padding: Pair, dilation: Pair, config) -> torch.Tensor:
    """y = conv2d(x, w) into y on the path config["PATH"] names, the rest of it as options."""
    options = {k: v for k, v in config.items() if k != "PATH"}
    launch = launch_persistent_conv2d if config["PATH"] == "persistent" else launch_conv2d
    return launch(x, w, y, stride, padding, dilation, options)


def shape_conv_problem(x: torch.Tensor, w: torch.Tensor, stride: Pair, padding: Pair,
                       dilation: Pair) -> dict[str, object]:
    """lesson 05's problem, and why descriptors cannot serve the layer ("" when they can)."""
    return {**conv_problem(x, w, stride, padding, dilation),
            "descriptors": descriptor_problem(x, w)}


@forbidden_in_graded_calls
def shape_conv2d(x: torch.Tensor, w: torch.Tensor, stride: Pair = 1, padding: Pair = 0,
                 dilation: Pair = 1, level: int = 1) -> torch.Tensor:
    """y = F.conv2d(x, w, ...) on whichever of lesson 05's kernel and the persistent one the
    tuner found fastest for this layer (once per layer, then cached with its PATH)."""
    P, Q = check_conv_inputs(x, w, stride, padding, dilation)
    y = new_output(x, w.shape[0], P, Q)
    result = autotune(SHAPE_CONV_KERNELS, shape_conv_problem(x, w, stride, padding, dilation),
                      SHAPE_CONV_SPACE,
                      lambda c: run_conv_path(x, w, y, stride, padding, dilation, c),
                      level=level, progress=False)
    return run_conv_path(x, w, y, stride, padding, dilation, result.config)


forbidden_in_graded_calls(persistent_conv2d_kernel)
