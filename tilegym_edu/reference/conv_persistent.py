"""1x1 convolutions at cuDNN's speed: a persistent kernel whose input, filters and output all
move through tensor descriptors (TMA), and one tuned entry point, :func:`shape_conv2d`, that
races it, lesson 05's implicit GEMM, its split-K form (`conv_split_k`) and, on Hopper GPUs,
the Gluon implicit GEMM (`conv_hopper`) and its halo form (`conv_halo`) per layer.

Why: a 1x1 convolution of stride 1 without padding is a plain matrix product. Its input *is*
the (N·H·W, C) matrix (channels_last), its filters the (K, C) one, and y = x @ w^T. Its
reduction is short (C = 64 to 1024), so a kernel with one program per output tile spends much
of each program's life filling its pipeline and storing its tile. Lesson 03's answer is a
persistent kernel: one program per SM walks tiles pid, pid + NUM_PROGRAMS, ..., and with
FLATTEN the compiler pipelines the tile loop and the reduction as one, so the next tile's loads
overlap this tile's epilogue. On the H200 (docs/results/h200-2026-12-02-conv-shapes.md) it
ran ResNet-50's 1x1 layers at 56x56 at 0.97-0.98 of cuDNN, where lesson 05's kernel managed
0.69-0.91.

Only 1x1 layers: a first version also gathered the input tiles of 3x3, strided and odd layers
with pointers inside the persistent loop. It lost to lesson 05's kernel on every one of them
(0.33-0.71 of cuDNN against 0.59-1.25). Those layers go to the Gluon kernels where they run
(ResNet-50's 3x3 layers at 0.89-1.14x cuDNN on the H200, docs/results/h200.md; the halo kernel
where the input's traffic from L2 sets the pace), else to lesson 05's kernel.

Shapes and names as in `convolution`: x (N, C, H, W) and w (K, C, R, S) channels_last, y
(N, K, P, Q) channels_last; float16, bfloat16 or float32; no groups. :func:`descriptor_problem`,
`conv_hopper.hopper_conv_problem` and `conv_halo.halo_conv_problem` say why a layer cannot
take the persistent or a Gluon path, and :func:`shape_conv2d` races the others.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from tilegym_edu.grading import forbidden_in_graded_calls
from tilegym_edu.reference.convolution import (CONV_SPACE, Pair, check_conv_inputs, conv2d_kernel,
                                               conv_problem, filters_as_matrix, geometry,
                                               launch_conv2d, new_output)
from tilegym_edu.reference.conv_halo import (HALO_CONV_SPACE, halo_conv_kernel,
                                             halo_conv_problem, halo_ws_conv_kernel,
                                             launch_halo_conv2d)
from tilegym_edu.reference.conv_hopper import (HOPPER_CONV_SPACE, hopper_conv_kernel,
                                               hopper_conv_problem, launch_hopper_conv2d)
from tilegym_edu.reference.conv_split_k import (SPLIT_K_CONV_SPACE, launch_split_k_conv2d,
                                                split_k_conv2d_kernel)
from tilegym_edu.reference.pipelined import matmul_prune, persistent_grid_size
from tilegym_edu.reference.split_k import split_k_reduce_kernel
from tilegym_edu.tiles import grouped_tile
from tilegym_edu.tune import (Config, KernelGroup, SearchSpace, TuneResult, autotune,
                              configs_from_rows, path_configs, path_prune,
                              split_path)


@triton.jit(do_not_specialize=["M"])
def persistent_conv2d_kernel(a_desc, w_desc, y_desc, M, C, K, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             GROUP_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
                             FLATTEN: tl.constexpr):
    """y = x @ w^T for a 1x1 convolution of stride 1 without padding: a_desc is the (M = N·H·W,
    C) input matrix in BLOCK_M x BLOCK_K blocks, w_desc the (K, C) filter matrix in BLOCK_N x
    BLOCK_K blocks, y_desc the (M, K) output in BLOCK_M x BLOCK_N blocks. NUM_PROGRAMS programs
    each walk output tiles pid, pid + NUM_PROGRAMS, ... in grouped order; loads past an edge
    read zeros and stores past it are dropped by the hardware, so there are no masks."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(K, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    for tile in tl.range(pid, num_tiles, NUM_PROGRAMS, flatten=FLATTEN):
        pid_m, pid_n = grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for c0 in range(0, C, BLOCK_K):
            a = a_desc.load([pid_m * BLOCK_M, c0])
            b = w_desc.load([pid_n * BLOCK_N, c0])
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


def descriptor_problem(x: torch.Tensor, w: torch.Tensor, stride: Pair = 1, padding: Pair = 0,
                       dilation: Pair = 1) -> str:
    """Why the persistent kernel cannot run this layer ("" when it can): it takes 1x1 layers of
    stride 1 without padding, whose input is a matrix, with rows of input and output channels
    (C and K elements) a multiple of 16 bytes, as tensor descriptors need."""
    (sh, sw), (ph, pw), _ = geometry(stride, padding, dilation)
    K, C, R, S = w.shape
    if (R, S, sh, sw, ph, pw) != (1, 1, 1, 1, 0, 0):
        return (f"a {R}x{S} layer of stride {(sh, sw)} and padding {(ph, pw)} is not a matrix "
                "product of its input (only 1x1, stride 1, no padding is)")
    for what, elements in (("input channels (C)", C), ("output channels (K)", K)):
        if elements * x.element_size() % 16:
            return (f"rows of {elements} {what} are {elements * x.element_size()} bytes: tensor "
                    "descriptors need multiples of 16")
    return ""


def launch_persistent_conv2d(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, stride: Pair,
                             padding: Pair, dilation: Pair, config) -> torch.Tensor:
    """Run persistent_conv2d_kernel with ``config`` (every launch option) into the
    preallocated channels_last y, one program per SM; return y. The layer must pass
    :func:`descriptor_problem` (stride, padding and dilation are there for the paths'
    common signature)."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    N, C, H, W = x.shape
    K = w.shape[0]
    M = N * H * W
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    a_desc = TensorDescriptor.from_tensor(x.permute(0, 2, 3, 1).reshape(M, C), [bm, bk])
    w_desc = TensorDescriptor.from_tensor(filters_as_matrix(w), [bn, bk])
    y_desc = TensorDescriptor.from_tensor(y.permute(0, 2, 3, 1).reshape(M, K), [bm, bn])
    programs = persistent_grid_size(triton.cdiv(M, bm) * triton.cdiv(K, bn))
    persistent_conv2d_kernel[(programs,)](a_desc, w_desc, y_desc, M, C, K,
                                          NUM_PROGRAMS=programs, **config)
    return y


@forbidden_in_graded_calls
def persistent_conv2d(x: torch.Tensor, w: torch.Tensor, stride: Pair = 1, padding: Pair = 0,
                      dilation: Pair = 1, config=None) -> torch.Tensor:
    """y = F.conv2d(x, w, ...) with the persistent kernel; ``config`` overrides
    PERSISTENT_CONV_DEFAULT. ValueError with what to change when descriptors cannot serve the
    layer (descriptor_problem) or the inputs are not what lesson 05's kernel takes."""
    P, Q = check_conv_inputs(x, w, stride, padding, dilation)
    problem = descriptor_problem(x, w, stride, padding, dilation)
    if problem:
        raise ValueError(f"{problem}; use convolution.conv2d (pointer loads) for this layer")
    y = new_output(x, w.shape[0], P, Q)
    return launch_persistent_conv2d(x, w, y, stride, padding, dilation,
                                    {**PERSISTENT_CONV_DEFAULT, **(config or {})})


#: the ways to run a convolution here, each with its search space; a configuration of
#: SHAPE_CONV_SPACE names its way in PATH
CONV_PATHS = {"lesson05": CONV_SPACE, "persistent": PERSISTENT_CONV_SPACE,
              "split_k": SPLIT_K_CONV_SPACE, "hopper": HOPPER_CONV_SPACE,
              "halo": HALO_CONV_SPACE}
#: how each path runs: launch(x, w, y, stride, padding, dilation, options) -> y
LAUNCHES = {"lesson05": launch_conv2d, "persistent": launch_persistent_conv2d,
            "split_k": launch_split_k_conv2d, "hopper": launch_hopper_conv2d,
            "halo": launch_halo_conv2d}


def shape_conv_prune(config, problem, resources) -> str | None:
    """A path's own prune, no persistent configuration where descriptors cannot serve the
    layer (problem["descriptors"] says why), and no Gluon one where it cannot run
    (problem["hopper"] and problem["halo"] say why)."""
    if config["PATH"] == "persistent" and problem["descriptors"]:
        return f"the persistent kernel needs tensor descriptors: {problem['descriptors']}"
    if config["PATH"] == "hopper" and problem["hopper"]:
        return f"the Gluon kernel cannot run this layer: {problem['hopper']}"
    if config["PATH"] == "halo" and problem["halo"]:
        return f"the Gluon halo kernel cannot run this layer: {problem['halo']}"
    return path_prune(CONV_PATHS, config, problem, resources)


#: every path's level-1 candidates in one space: the tuner races them per layer and caches the
#: winner, PATH included; level 0 (and the interpreter) runs lesson 05's default
SHAPE_CONV_SPACE = SearchSpace(
    default=Config(**CONV_SPACE.default, PATH="lesson05"),
    small=path_configs(CONV_PATHS),
    prune=shape_conv_prune)

#: what the tuner keys SHAPE_CONV_SPACE's results on: the source of every kernel it races
SHAPE_CONV_KERNELS = KernelGroup("shape_conv2d", (conv2d_kernel, persistent_conv2d_kernel,
                                                  split_k_conv2d_kernel, split_k_reduce_kernel,
                                                  hopper_conv_kernel, halo_conv_kernel,
                                                  halo_ws_conv_kernel))


def run_conv_path(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, stride: Pair,
                  padding: Pair, dilation: Pair, config) -> torch.Tensor:
    """y = conv2d(x, w) into y on the path config["PATH"] names, the rest of it as options."""
    path, options = split_path(config)
    return LAUNCHES[path](x, w, y, stride, padding, dilation, options)


def shape_conv_problem(x: torch.Tensor, w: torch.Tensor, stride: Pair, padding: Pair,
                       dilation: Pair) -> dict[str, object]:
    """lesson 05's problem, why descriptors cannot serve the layer and why each Gluon kernel
    cannot run it ("" when they can)."""
    return {**conv_problem(x, w, stride, padding, dilation),
            "descriptors": descriptor_problem(x, w, stride, padding, dilation),
            "hopper": hopper_conv_problem(x, w, stride),
            "halo": halo_conv_problem(x, w, stride, padding, dilation)}


def tune_shape_conv(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, stride: Pair,
                    padding: Pair, dilation: Pair, level: int = 1,
                    progress: bool = False) -> TuneResult:
    """The tuner's race of every path of SHAPE_CONV_SPACE on this layer, launching into y (once
    per layer, then cached with its PATH). Layers faster than tune.TUNE_ABOVE_MS are raced too:
    the race is what shape_conv2d is for, and a 1x1 layer of 14x14 pixels runs in about 12 µs.
    Every path is timed as a CUDA graph, the GPU's work alone: the Gluon kernel's launch spends
    longer in Python (its tensor descriptors, about 0.1 ms on the H200's host) than a layer of
    ResNet-50 takes on the GPU, and a network of such layers runs as a graph
    (benchmarks/conv_shapes.py times every side so)."""
    def launch(config):
        return run_conv_path(x, w, y, stride, padding, dilation, config)
    return autotune(SHAPE_CONV_KERNELS, shape_conv_problem(x, w, stride, padding, dilation),
                    SHAPE_CONV_SPACE, launch, level=level, progress=progress, min_ms=0,
                    race_as_graphs=True)


@forbidden_in_graded_calls
def shape_conv2d(x: torch.Tensor, w: torch.Tensor, stride: Pair = 1, padding: Pair = 0,
                 dilation: Pair = 1, level: int = 1) -> torch.Tensor:
    """y = F.conv2d(x, w, ...) on whichever of lesson 05's kernel, the persistent 1x1 one,
    split-K and the two Gluon kernels :func:`tune_shape_conv` found fastest for this layer."""
    P, Q = check_conv_inputs(x, w, stride, padding, dilation)
    y = new_output(x, w.shape[0], P, Q)
    result = tune_shape_conv(x, w, y, stride, padding, dilation, level)
    return run_conv_path(x, w, y, stride, padding, dilation, result.config)


forbidden_in_graded_calls(persistent_conv2d_kernel)
