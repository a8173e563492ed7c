# tilegym-notebook: {"metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}, "language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}

# %% [markdown] id="cell-00"
# # Lesson 05: Convolution
#
# *Direct, im2col + GEMM, and the implicit GEMM that never builds its matrix.*
#
# A 2-D convolution slides a small stack of filters over an image and, at every position, takes the
# dot product of each filter with the patch of input under it. It is the layer that made image
# recognition work (LeNet, AlexNet, ResNet) and it is still in vision models, in the patch embedding
# of vision transformers, and in audio and video models. Written naively it is seven nested loops; a
# GPU runs it fast only once those loops are turned into a **matrix product** that the tensor cores
# can eat. This lesson builds that in three versions:
#
# 1. **Direct**: the loop nest as a Triton kernel, one multiply-add at a time, on the CUDA cores.
# 2. **im2col + GEMM**: copy every input patch into a row of a big matrix $A$ and multiply it by the
#    filters with one cuBLAS call (a GEMM, general matrix multiply). Fast arithmetic, but $A$ is up
#    to $R \cdot S$ times the size of the input, written to memory and read back.
# 3. **Implicit GEMM** in Triton: lesson 02's tiled matmul, where each tile of $A$ is *gathered from
#    the input as it is needed* and never written anywhere. On an H200 the course's reference kernel
#    written this way ran at 0.69 to 0.97 of the speed of cuDNN (NVIDIA's library behind
#    `F.conv2d`) on five ResNet layers.
#
# Along the way: why the **memory layout** of the input (channels first, NCHW, or channels last,
# NHWC) decides how fast a convolution can run, and what stride, padding and dilation do to the
# index arithmetic.
#
# | exercise | points | graded |
# | --- | --- | --- |
# | 1. the im2col index map: which input element lands in $A$[row, col] | 3 | everywhere |
# | 2a. implicit-GEMM `conv2d`: stride 1, padding, odd sizes and channels | 4 | everywhere |
# | 2b. the same with strides, asymmetric padding and dilation | 3 | everywhere |
# | 2c. it never writes the unfolded matrix: memory traffic counted | 2 | everywhere |
# | 2d. speed over im2col + cuBLAS; 2e. speed against cuDNN | 2 + 3 | GPU only |
# | 3. depthwise convolution (MobileNet) | 3 | everywhere |
# | 3b. its speed against cuDNN on MobileNetV2's depthwise layers | 2 | GPU only |
# | 4. the packed implicit GEMM: a 3-channel stem, grouped convolution | 3 | everywhere |
# | 4b. its speed against cuDNN on ResNet-50's stem and a ResNeXt layer | 2 | GPU only |
#
# **Grading.** *GPU only* cells are graded on a GPU; without one the grader marks them *needs GPU*.
# Cells marked *Exercise* are graded by `tilegym-edu grade 05_convolution` (or `make
# grade LESSON=05_convolution`), which grades a copy of this notebook and never changes it.

# %% [markdown] id="cell-01"
# ## Setup
#
# `import tilegym_edu` comes first, as always. From the course's reference module this lesson
# imports versions 1 and 2 (`direct_conv2d` and its kernel, `im2col_conv2d` with the `im2col` and
# `filters_as_matrix` it is made of), a few helpers for Exercise 2 (an input validator, the
# output-size formula, the autotuner's search space for convolution and the problem description it
# is keyed on), the default configurations of Exercises 3 and 4 and, as `reference`, the course's
# own implicit-GEMM solution, which the comparison at the end times next to yours. Sizes come from
# `device.size`: the layer shown in detail is the first 3x3 layer of ResNet-50's first stage at
# batch 32 on a GPU (`FOCUS`), and a toy layer in the interpreter.

# %% id="cell-02" nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import tilegym_edu  # noqa: F401  (first: decides GPU or interpreter mode before triton is imported)

import inspect
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from tilegym_edu import bench, check, device, grading, progress, roofline, traffic
from tilegym_edu.reference import convolution as reference     # the course's reference solution
from tilegym_edu.reference.convolution import direct_conv2d, direct_conv2d_kernel  # version 1
from tilegym_edu.reference.convolution import filters_as_matrix, im2col, im2col_conv2d  # version 2
from tilegym_edu.reference.convolution import (CONV_SPACE, check_conv_inputs, conv_problem,
                                               output_size, pair)   # helpers for Exercise 2
from tilegym_edu.reference.conv_groups import (DEPTHWISE_DEFAULT, PACKED_DEFAULT,  # Exercises 3, 4
                                               groups_per_block)
from tilegym_edu.tune import autotune
from tilegym_edu.tiles import grouped_tile     # lesson 02's grouped ordering, for your kernels

print(device.banner())
DEVICE = device.DEVICE
spec, _ = roofline.resolve_spec()    # this GPU's datasheet, or an H200's without a GPU
LIBRARY = device.size(gpu="cuDNN", cpu="F.conv2d (CPU)")   # what F.conv2d runs on here
# the layer shown in detail: its name and its sizes
FOCUS_NAME = device.size(gpu="N32 C64 56x56 K64 3x3", cpu="N1 C16 8x8 K16 3x3")
FOCUS = device.size(gpu=dict(N=32, C=64, H=56, W=56, K=64, R=3, S=3, stride=1, padding=1),
                    cpu=dict(N=1, C=16, H=8, W=8, K=16, R=3, S=3, stride=1, padding=1))

# %% [markdown] id="cell-03"
# ## 1. Convolution as a loop nest
#
# `F.conv2d(x, w, stride, padding, dilation)` takes an input `x` of shape $(N, C, H, W)$ (batch,
# input channels, height, width) and filters `w` of shape $(K, C, R, S)$ ($K$ filters, each $C$
# channels deep and $R \times S$ pixels wide) and computes $y$ of shape $(N, K, P, Q)$:
#
# $$y[n, k, p, q] = \sum_{c=0}^{C-1} \sum_{r=0}^{R-1} \sum_{s=0}^{S-1}
# x\big[n,\ c,\ p\,\sigma_h - \pi_h + r\,\delta_h,\ \ q\,\sigma_w - \pi_w + s\,\delta_w\big]\; w[k,
# c, r, s],$$
#
# where $x$ reads as 0 outside the image. Output pixel $(p, q)$ looks at the window whose top-left
# corner is input pixel $(p\sigma_h - \pi_h,\ q\sigma_w - \pi_w)$:
#
# - the **stride** $\sigma$ is how far the window moves from one output pixel to the next (2 halves
#   the output's height and width: ResNet downsamples this way);
# - the **padding** $\pi$ is how many rows and columns of zeros surround the input (a 3x3 filter
#   with padding 1 and stride 1 keeps the size: "same" padding);
# - the **dilation** $\delta$ spreads the filter's taps apart (2 makes a 3x3 filter cover 5x5
#   pixels, skipping every other one).
#
# Each may differ between height and width (`stride=(2, 1)`). Strictly this is a cross-correlation
# (a mathematician's convolution would flip the filter), but deep learning calls it convolution, and
# the filters are learned either way. The output size is the number of positions where the (dilated)
# window fits in the padded input, taking every $\sigma$-th:
#
# $$P = \left\lfloor \frac{H + 2\pi_h - \delta_h (R - 1) - 1}{\sigma_h} \right\rfloor + 1,
# \qquad Q \text{ likewise.}$$
#
# That is `output_size` from the reference module. Here is the definition as seven nested loops in
# plain Python, checked against `F.conv2d` on two tiny inputs:

# %% id="cell-04"
print(inspect.getsource(output_size))


def conv2d_loops(x, w, stride=1, padding=0, dilation=1):
    """y = F.conv2d(x, w, stride=stride, padding=padding, dilation=dilation), by its definition:
    seven nested loops and one multiply-add in the innermost."""
    (sh, sw), (ph, pw), (dh, dw) = (pair(stride, "stride"), pair(padding, "padding"),
                                    pair(dilation, "dilation"))
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    P, Q = output_size(H, R, sh, ph, dh), output_size(W, S, sw, pw, dw)
    # Python lists: much faster to index one element at a time
    xs, ws = x.tolist(), w.tolist()
    y = torch.zeros(N, K, P, Q, dtype=x.dtype)
    for n in range(N):
        for k in range(K):
            for p in range(P):
                for q in range(Q):
                    total = 0.0
                    for c in range(C):
                        for r in range(R):
                            for s in range(S):
                                # the input row and column this tap reads; outside the
                                # image: padding, a zero
                                hi = p * sh - ph + r * dh
                                wi = q * sw - pw + s * dw
                                if 0 <= hi < H and 0 <= wi < W:
                                    total += xs[n][c][hi][wi] * ws[k][c][r][s]
                    y[n, k, p, q] = total
    return y


x = torch.randn(2, 3, 5, 6, dtype=torch.float64)
w = torch.randn(4, 3, 3, 3, dtype=torch.float64)
for options in [dict(padding=1), dict(stride=(2, 1), padding=(1, 0), dilation=2)]:
    y = conv2d_loops(x, w, **options)
    print(f"{options}: y {tuple(y.shape)}, relative error against F.conv2d "
          f"{check.relative_error(y, F.conv2d(x, w, **options)):.1e}")

# %% [markdown] id="cell-05"
# **Work and traffic.** The innermost statement runs once for each of the $N \cdot K \cdot P \cdot
# Q$ outputs and each of the $C \cdot R \cdot S$ terms of its sum, one multiply and one add:
#
# $$\text{FLOPs} = 2 \cdot N \cdot K \cdot P \cdot Q \cdot C \cdot R \cdot S .$$
#
# (Taps that fall in the padding are counted too, by the usual convention.) The fewest bytes a
# convolution can move through memory are its inputs read once and its output written once:
# $e\,(NCHW + KCRS + NKPQ)$ for elements of $e$ bytes. Their ratio is the arithmetic intensity,
# which places the layer on the roofline: left of the ridge point (the GPU's peak FLOP/s divided by
# its bandwidth) the layer is limited by memory, right of it by arithmetic.
#
# The layers this lesson measures are those of ResNet-50, the classic image classifier, at batch 32
# (one at 64): its 3x3 convolutions of 64, 128 and 256 channels, the 1x1 convolution that expands 64
# channels to 256, and a 3x3 with stride 2 of the kind that halves the image between stages. The
# cell below describes them once (the speed checks and the comparison use them) and computes their
# intensity in fp16:

# %% id="cell-06" nbgrader={"grade": false, "grade_id": "resnet_layers", "locked": true, "schema_version": 3, "solution": false, "task": false}
#: ResNet-50 layers (fp16, channels_last): the three 3x3 stride-1 layers are the ones Exercises 2d
#: and 2e grade; all five are compared at the end
RESNET_LAYERS = {
    "N32 C64 56x56 K64 3x3": dict(N=32, C=64, H=56, W=56, K=64, R=3, S=3, stride=1, padding=1),
    "N32 C256 14x14 K256 3x3": dict(N=32, C=256, H=14, W=14, K=256, R=3, S=3, stride=1, padding=1),
    "N64 C128 28x28 K128 3x3": dict(N=64, C=128, H=28, W=28, K=128, R=3, S=3, stride=1, padding=1),
    "N32 C64 56x56 K256 1x1": dict(N=32, C=64, H=56, W=56, K=256, R=1, S=1, stride=1, padding=0),
    "N32 C128 28x28 K128 3x3 stride 2": dict(N=32, C=128, H=28, W=28, K=128, R=3, S=3,
                                             stride=2, padding=1),
}
GRADED_LAYERS = ["N32 C64 56x56 K64 3x3", "N32 C256 14x14 K256 3x3", "N64 C128 28x28 K128 3x3"]
COMPARE_LAYERS = device.size(gpu=RESNET_LAYERS, cpu={FOCUS_NAME: FOCUS})


def layer_output_size(layer):
    """(P, Q) of a layer (dilation 1)."""
    return (output_size(layer["H"], layer["R"], layer["stride"], layer["padding"], 1),
            output_size(layer["W"], layer["S"], layer["stride"], layer["padding"], 1))


def layer_flops(layer):
    """2·N·K·P·Q·C·R·S."""
    P, Q = layer_output_size(layer)
    return 2 * layer["N"] * layer["K"] * P * Q * layer["C"] * layer["R"] * layer["S"]


def layer_min_bytes(layer, element_size=2):
    """x and w read once, y written once."""
    P, Q = layer_output_size(layer)
    N, C, K = layer["N"], layer["C"], layer["K"]
    return element_size * (N * C * layer["H"] * layer["W"]      # x
                           + K * C * layer["R"] * layer["S"]    # w
                           + N * K * P * Q)                     # y


def layer_tensors(layer, dtype=torch.float16, seed=0):
    """(x, w) of a layer: standard normal, channels_last, on the lesson's device."""
    generator = torch.Generator().manual_seed(seed)
    x = check.random_tensor((layer["N"], layer["C"], layer["H"], layer["W"]), dtype, generator)
    w = check.random_tensor((layer["K"], layer["C"], layer["R"], layer["S"]), dtype, generator)
    return x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last)


#: bench.compare replays from a CUDA graph every function whose warm-up call takes under this many
#: milliseconds (seen from the host), so that the GPU's work is timed and not Python's. These layers
#: take tens of microseconds on a recent GPU, less than the host time of one call of a Triton kernel
#: behind a Python wrapper (input checks, the tuner's cache, the launch: about 0.1 ms on an H200);
#: bench's default (0.1 ms) would leave such a wrapper out of the graph and time the host instead.
GRAPH_BELOW_MS = 1.0


ridge = roofline.ridge_point(spec.fp16_tflops, spec.memory_bandwidth_gbs)
print(f"{'layer':<34} {'GFLOP':>7} {'min MB':>7} {'FLOP/byte':>10}")
for name, layer in RESNET_LAYERS.items():
    intensity = layer_flops(layer) / layer_min_bytes(layer)
    print(f"{name:<34} {layer_flops(layer) / 1e9:>7.2f} {layer_min_bytes(layer) / 1e6:>7.1f} "
          f"{intensity:>10.0f}")
print(f"\nridge point of the {spec.name} (fp16 tensor cores, datasheet): {ridge:.0f} FLOP/byte")

# %% [markdown] id="cell-07"
# The 3x3 layers sit at or right of the ridge point: done well, they are limited by the tensor
# cores, not by memory. The 1x1 layer does 9 times fewer FLOPs per output and writes an output 4
# times its input, so it sits far left: memory-bound however it is computed. Those are the ceilings.
# Whether a kernel gets near them depends first on something the formula does not show: how the
# tensors are laid out in memory.
#
# ## 2. Memory layout: NCHW and NHWC
#
# A tensor of shape $(N, C, H, W)$ is one block of memory; its **strides** say how far apart
# neighbours are along each dimension. PyTorch's default, **NCHW** (contiguous), stores each channel
# as a whole $H \times W$ image, one after another. **NHWC** (`torch.channels_last`) keeps the shape
# $(N, C, H, W)$ (the same tensor to every PyTorch function) but stores, for each pixel, all $C$
# channels next to each other:
#
# | layout | element $(n, c, h, w)$ sits at | strides of $(N, C, H, W)$ |
# | --- | --- | --- |
# | NCHW | $((n \cdot C + c) \cdot H + h) \cdot W + w$ | $(CHW,\ HW,\ W,\ 1)$ |
# | NHWC (channels_last) | $((n \cdot H + h) \cdot W + w) \cdot C + c$ | $(HWC,\ 1,\ WC,\ C)$ |
#
# Checked on a small tensor: `tensor.stride()` and each element's place in the underlying storage.

# %% id="cell-08"
N, C, H, W = 2, 3, 4, 5
x_nchw = torch.randn(N, C, H, W)
# same values, same shape, other order in memory
x_nhwc = x_nchw.to(memory_format=torch.channels_last)
print("NCHW strides:", x_nchw.stride(), "  channels_last strides:", x_nhwc.stride())
for t, where in [(x_nchw, lambda n, c, h, w: ((n * C + c) * H + h) * W + w),
                 (x_nhwc, lambda n, c, h, w: ((n * H + h) * W + w) * C + c)]:
    memory = t.as_strided((t.numel(),), (1,))                # the storage, element by element
    assert all(memory[where(n, c, h, w)] == t[n, c, h, w] and
               where(n, c, h, w) == sum(i * s for i, s in zip((n, c, h, w), t.stride()))
               for n in range(N) for c in range(C) for h in range(H) for w in range(W))
print("every element sits where the formulas say, in both layouts")
print("the C channels of pixel (0, 1, 2):  NCHW offsets",
      [((0 * C + c) * H + 1) * W + 2 for c in range(C)],
      "  NHWC offsets", [((0 * H + 1) * W + 2) * C + c for c in range(C)])

# %% [markdown] id="cell-09"
# **Why channels last.** Section 4 turns convolution into a matrix product whose rows are output
# pixels and whose inner dimension runs over $(r, s, c)$: for a fixed tap $(r, s)$, a row needs
# **the $C$ channels of one input pixel**. In NHWC those are $C$ consecutive elements: a tile of
# `BLOCK_K` channels for each of `BLOCK_M` pixels is `BLOCK_M` contiguous runs of memory, which the
# GPU loads in full 128-byte transactions, exactly like a tile of an ordinary row-major matrix. In
# NCHW the channels of a pixel are $H \cdot W$ elements apart, so a row of the tile is `BLOCK_K`
# scattered elements; the only contiguous runs are neighbouring pixels of one channel, and those
# break at the end of every image row and, at stride 2, skip every other element. Every kernel in
# this lesson therefore takes `x`, `w` and `y` in channels_last (`check_conv_inputs` refuses
# anything else), and converting a model's tensors once with
# `.to(memory_format=torch.channels_last)` is how PyTorch users get the fast path too.
#
# cuDNN, the library behind `F.conv2d` on NVIDIA GPUs, handles both layouts. The next cell times it
# on the same values in each, for the three 3x3 layers (on a GPU only: interpreter times say nothing
# about GPU speed):

# %% id="cell-10" tags=["demo"]
grading.require_gpu("timing cuDNN on NCHW and channels_last inputs")
for name in GRADED_LAYERS:
    layer = RESNET_LAYERS[name]
    x, w = layer_tensors(layer)
    x_nchw, w_nchw = x.contiguous(), w.contiguous()        # the same values, stored NCHW
    stride, padding = layer["stride"], layer["padding"]
    print(f"\n{name}, fp16")
    bench.print_table(bench.compare({
        "cuDNN NCHW": lambda: F.conv2d(x_nchw, w_nchw, stride=stride, padding=padding),
        "cuDNN channels_last": lambda: F.conv2d(x, w, stride=stride, padding=padding)},
        flops=layer_flops(layer), bytes=layer_min_bytes(layer)), baseline="cuDNN NCHW")

# %% [markdown] id="cell-11"
# On an H200 (PyTorch 2.11, Triton 3.6, cuDNN 9.19, fp16), `benchmarks/convolution.py` measured
# cuDNN at these rates on the five ResNet layers, in TFLOP/s; the last column is the course's
# reference implicit-GEMM kernel of section 5, tuned, and its fraction of cuDNN on channels_last
# (`docs/results/h200-2026-12-01-convolution.json`):
#
# | layer | cuDNN NCHW | cuDNN channels_last | reference implicit GEMM |
# | --- | ---: | ---: | ---: |
# | N32 C64 56x56 K64 3x3 | 135 | 256 | 248 (0.97x) |
# | N32 C256 14x14 K256 3x3 | 206 | 340 | 264 (0.78x) |
# | N64 C128 28x28 K128 3x3 | 255 | 458 | 358 (0.78x) |
# | N32 C64 56x56 K256 1x1 | 150 | 146 | 100 (0.69x) |
# | N32 C128 28x28 K128 3x3 stride 2 | 69 | 139 | 109 (0.78x) |
#
# (The stride-2 layer kept the default configuration: it ran in 17 µs, and the tuner leaves
# problems under 20 µs alone.) On the 3x3 layers channels last was 1.6 to 2.0 times faster for the
# same library on the same values. On the 1x1 layer cuDNN's choice varies between runs: here the two
# layouts were level, but a run on 2026-11-30 measured NCHW at 63 TFLOP/s against 150 for
# channels_last (`docs/results/h200-2026-11-30-convolution-variants-first.json`). So that the
# comparison is fair, **every comparison with cuDNN in this lesson uses cuDNN's best layout,
# channels_last**. Your own GPU's figures come out of the cells above and at the end of the lesson.
#
# ## 3. Version 1: the direct kernel
#
# The loop nest maps onto a GPU directly: give each program a block of output pixels (`BLOCK_M` of
# the $N \cdot P \cdot Q$) and of output channels (`BLOCK_N` of the $K$), keep their sums in a
# `BLOCK_M` x `BLOCK_N` accumulator, and loop over $(r, s, c)$: load one input value for each pixel
# and one filter value for each output channel, and add their outer product. Here is the reference
# module's version 1:

# %% id="cell-12"
print(inspect.getsource(direct_conv2d_kernel.fn))

# %% [markdown] id="cell-13"
# It is correct (stride, padding, dilation and all), and each input value it loads serves `BLOCK_N`
# output channels, so it reuses data. What it cannot do is use the tensor cores: each step is an
# outer product of two vectors, one multiply-add per element on the ordinary CUDA cores, and
# `tl.dot` needs tiles with an inner dimension of at least 16. On an H200 the CUDA cores offer a
# small fraction of the tensor cores' fp16 rate. It also loads one scalar per pixel per step, $C$
# elements apart, so its loads are poorly coalesced. Checked against `F.conv2d` and timed at
# `FOCUS`:

# %% id="cell-14" tags=["demo"]
x, w = layer_tensors(FOCUS)
stride, padding = FOCUS["stride"], FOCUS["padding"]
y = direct_conv2d(x, w, stride, padding)
expected = F.conv2d(x.double().cpu(), w.double().cpu(), stride=stride, padding=padding)
print(f"direct_conv2d at {FOCUS_NAME}: relative error {check.relative_error(y, expected):.1e} "
      f"against float64 F.conv2d; "
      f"y is channels_last: {y.is_contiguous(memory_format=torch.channels_last)}")
bench.print_table(bench.compare({
    "direct (version 1)": lambda: direct_conv2d(x, w, stride, padding),
    f"{LIBRARY} channels_last": lambda: F.conv2d(x, w, stride=stride, padding=padding)},
    flops=layer_flops(FOCUS), bytes=layer_min_bytes(FOCUS)), baseline=f"{LIBRARY} channels_last")

# %% [markdown] id="cell-15"
# ## 4. Version 2: im2col + GEMM
#
# The sum in the definition is a dot product of length $C \cdot R \cdot S$: the window of input
# under output pixel $(n, p, q)$, flattened, against filter $k$, flattened the same way. Write all
# the windows as the rows of one matrix and all the filters as the columns of another, and the whole
# convolution is one matrix product, which cuBLAS runs on the tensor cores:
#
# - **$A$, the unfolded input** (the *im2col* matrix, "image to columns"): $N \cdot P \cdot Q$ rows,
#   one per output pixel, in $(n, p, q)$ order, so row $m$ is $n = m \div PQ$, $p = (m \div Q) \bmod
#   P$, $q = m \bmod Q$. It has $R \cdot S \cdot C$ columns in $(r, s, c)$ order: column $j$ is $r =
#   j \div SC$, $s = (j \div C) \bmod S$, $c = j \bmod C$ (channels fastest, as they lie in NHWC
#   memory). $A[m, j]$ is the input element tap $(r, s)$ of output pixel $(p, q)$ reads from channel
#   $c$, or 0 where that falls in the padding.
# - **$B$, the filters**: `filters_as_matrix(w)` is $(K, R \cdot S \cdot C)$, row $k$ filter $k$ in
#   the same $(r, s, c)$ order (a view, no copy, when `w` is channels_last); $B$ is its transpose.
# - **$y = A\,B$** is $(N \cdot P \cdot Q, K)$: row $m$ holds the $K$ channels of output pixel $m$,
#   which is exactly $y$ in NHWC memory. `im2col_conv2d` returns it as an $(N, K, P, Q)$
#   channels_last view.
#
# The reference's `im2col` builds $A$ with PyTorch: pad $x$, take a strided view of every window,
# copy it into a matrix. To see which input element lands where, feed it an **index tensor**: an $x$
# whose elements hold $1 +$ their own NCHW index (so that padding, a 0, stands out). Here is $A$ for
# a 1x1x3x4 input, a 2x2 filter and padding 1, each entry decoded back to the $(h, w)$ it came from:

# %% id="cell-16" nbgrader={"grade": false, "grade_id": "im2col_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
def index_tensor(x_shape):
    """An x of x_shape whose elements hold 1 + their flat NCHW index: float64, channels_last."""
    values = torch.arange(1, math.prod(x_shape) + 1, dtype=torch.float64)
    return values.reshape(x_shape).to(memory_format=torch.channels_last)


def decode(value, x_shape):
    """The (n, c, h, w) an entry of im2col(index_tensor(x_shape)) came from; None for padding
    (0)."""
    if value == 0:
        return None
    index, (_, C, H, W) = int(value) - 1, x_shape
    return index // (C * H * W), index // (H * W) % C, index // W % H, index % W


shape = (1, 1, 3, 4)
a = im2col(index_tensor(shape), 2, 2, padding=1)
Q = output_size(shape[3], 2, 1, 1, 1)
print(f"x {shape}, 2x2 filter, padding 1: A is {tuple(a.shape)}; row m = output pixel (p, q), "
      "column j = tap (r, s); each entry the (h, w) it reads, -- for padding")
for m, row in enumerate(a.tolist()):
    entries = [f"({d[2]},{d[3]})" if (d := decode(v, shape)) else "  -- " for v in row]
    print(f"  row {m:2} (p={m // Q}, q={m % Q}): " + "  ".join(entries))

# %% [markdown] id="cell-17"
# Neighbouring rows share most of their entries: the windows of neighbouring output pixels overlap.
# A 3x3 filter at stride 1 puts almost every input element into 9 rows of $A$, which is why $A$ is
# about $R \cdot S$ times the size of the input. Section 5 will need the same map without building
# $A$, written as arithmetic on indices. That is Exercise 1.
#
# ## Exercise 1 (3 points): the im2col index map
#
# Write `im2col_source(row, col, x_shape, kernel_size, stride=1, padding=0, dilation=1)`: the `(n,
# c, h, w)` index of the element of `x` that lands in $A$`[row, col]` (a tuple of four ints), or
# `None` when that entry is padding (a zero). `x_shape` is $(N, C, H, W)$, `kernel_size` is $(R,
# S)$; `stride`, `padding` and `dilation` are each an int or a (height, width) pair, as `F.conv2d`
# takes them: `pair(value, name)` turns either into a pair, and `output_size` gives $P$ and $Q$.
# Plain Python: no tensors needed.
#
# The grader compares your answer, for every `(row, col)` of $A$, with the reference `im2col`
# applied to an index tensor, on 1x1, 3x3 and 2x3 filters, strides 1, 2 and (2, 1), padding 0, 1 and
# (2, 0), dilation 1, 2 and (2, 1), odd and non-square inputs, and a batch of 2.

# %% id="cell-18" nbgrader={"grade": false, "grade_id": "im2col_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def im2col_source(row, col, x_shape, kernel_size, stride=1, padding=0, dilation=1):
    """The (n, c, h, w) index of x that im2col puts at A[row, col], or None where A holds padding.
    Rows of A are output pixels (n, p, q), columns are (r, s, c), channels fastest."""
    ### BEGIN SOLUTION
    N, C, H, W = x_shape
    R, S = kernel_size
    (sh, sw), (ph, pw), (dh, dw) = (pair(stride, "stride"), pair(padding, "padding"),
                                    pair(dilation, "dilation"))
    P, Q = output_size(H, R, sh, ph, dh), output_size(W, S, sw, pw, dw)
    n, p, q = row // (P * Q), row // Q % P, row % Q
    r, s, c = col // (S * C), col // C % S, col % C
    h = p * sh - ph + r * dh
    w = q * sw - pw + s * dw
    if 0 <= h < H and 0 <= w < W:
        return n, c, h, w
    return None
    ### END SOLUTION

# %% id="cell-19" nbgrader={"grade": true, "grade_id": "test_im2col_index", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Exercise 1: im2col_source gives, for every entry of A, the element of x that im2col puts there.
def check_im2col_source(what, x_shape, kernel_size, stride=1, padding=0, dilation=1):
    a = im2col(index_tensor(x_shape), *kernel_size, stride, padding, dilation)
    for row, values in enumerate(a.tolist()):
        for col, value in enumerate(values):
            expected = decode(value, x_shape)
            # a graded call: the lesson's own im2col (torch) is no way to the answer
            got = grading.formula_answer(im2col_source, row, col, x_shape, kernel_size, stride,
                                         padding, dilation)
            if isinstance(got, list):
                got = tuple(got)
            assert got == expected, (
                f"case {what} (x {x_shape}, kernel {kernel_size}, stride {stride}, "
                f"padding {padding}, dilation {dilation}): A[{row}, {col}] holds "
                + (f"x{expected}" if expected else "padding (None)")
                + f", but im2col_source returned {got!r}")
    print(f"{what}: all {a.numel()} entries of A ({a.shape[0]} x {a.shape[1]}) right")


check_im2col_source("1x1, batch 2", (2, 3, 4, 5), (1, 1))
check_im2col_source("3x3, padding 1, batch 2", (2, 2, 5, 7), (3, 3), padding=1)
check_im2col_source("2x3, stride 2", (1, 3, 7, 6), (2, 3), stride=2)
check_im2col_source("3x3, stride (2, 1), padding (2, 0)", (1, 2, 7, 5), (3, 3),
                    stride=(2, 1), padding=(2, 0))
check_im2col_source("3x3, dilation 2, padding 2, batch 2", (2, 2, 7, 6), (3, 3),
                    padding=2, dilation=2)
check_im2col_source("1x1, stride 2", (1, 4, 5, 7), (1, 1), stride=2)
### BEGIN HIDDEN TESTS
check_im2col_source("2x3, stride 2, padding 1, dilation (2, 1)", (1, 3, 9, 7), (2, 3),
                    stride=2, padding=1, dilation=(2, 1))


def draw_im2col_case(rng):
    """A small layer: x's shape, the kernel, stride, padding and dilation (each per axis),
    with at least one output position; drawn afresh at every grading, from more layers
    (about 10^7) than anyone could tabulate ahead with the lesson's im2col."""
    r, s = rng.randint(1, 4), rng.randint(1, 4)
    stride, padding, dilation = ((rng.randint(1, 3), rng.randint(1, 3)),
                                 (rng.randint(0, 2), rng.randint(0, 2)),
                                 (rng.randint(1, 3), rng.randint(1, 3)))
    h = rng.randint(max(1, dilation[0] * (r - 1) + 1 - 2 * padding[0]), 12)
    w = rng.randint(max(1, dilation[1] * (s - 1) + 1 - 2 * padding[1]), 12)
    return (rng.randint(1, 2), rng.randint(1, 4), h, w), (r, s), stride, padding, dilation


for x_shape, kernel_size, stride, padding, dilation in grading.drawn_cases(draw_im2col_case, 2):
    check_im2col_source("drawn", x_shape, kernel_size, stride, padding, dilation)
### END HIDDEN TESTS

# %% [markdown] id="cell-20"
# **What $A$ costs.** $A$ has $N \cdot P \cdot Q$ rows of $R \cdot S \cdot C$ elements, against the
# input's $N \cdot H \cdot W \cdot C$: about $R \cdot S / (\sigma_h \sigma_w)$ times the input
# (exactly that for every layer below; less for a layer without enough padding, whose windows stop
# short of the edges). The cell below builds $A$ for real, at batch 1 (it grows in proportion to
# $N$), for the lesson's layers and a few more stages of ResNet-50: its 7x7 stride-2 stem, its last
# 3x3 layer, and a 1x1 stride-2 "downsample" shortcut. It prints the bytes `im2col` returned
# against the input's, plots the ratio next to $R \cdot S / (\sigma_h \sigma_w)$, and checks
# `im2col_conv2d` against `F.conv2d`.

# %% id="cell-21" tags=["demo"]
MEMORY_LAYERS = {**{name: dict(layer, N=1) for name, layer in RESNET_LAYERS.items()},
                 "stem C3 224x224 K64 7x7 stride 2": dict(N=1, C=3, H=224, W=224, K=64, R=7, S=7,
                                                          stride=2, padding=3),
                 "C512 7x7 K512 3x3": dict(N=1, C=512, H=7, W=7, K=512, R=3, S=3,
                                           stride=1, padding=1),
                 "C256 56x56 K512 1x1 stride 2": dict(N=1, C=256, H=56, W=56, K=512, R=1, S=1,
                                                      stride=2, padding=0)}
a_bytes, x_bytes, ratios, expected = {}, {}, {}, {}
print(f"{'layer (batch 1, fp16)':<36} {'x':>10} {'A = im2col(x)':>14} {'A / x':>6}")
for name, layer in MEMORY_LAYERS.items():
    x = (torch.randn(1, layer["C"], layer["H"], layer["W"], dtype=torch.float16)
         .to(memory_format=torch.channels_last))
    a = im2col(x, layer["R"], layer["S"], layer["stride"], layer["padding"])
    label = name.removeprefix("N32 ").removeprefix("N64 ")     # batch 1 here
    a_bytes[name], x_bytes[name] = a.nbytes, x.nbytes
    ratios[label] = a.nbytes / x.nbytes
    expected[label] = layer["R"] * layer["S"] / layer["stride"] ** 2
    print(f"{label:<36} {x.nbytes / 2**10:>7,.0f} KiB {a.nbytes / 2**10:>10,.0f} KiB "
          f"{ratios[label]:>6.2f}")
name = GRADED_LAYERS[0]
batch = RESNET_LAYERS[name]["N"]
print(f"\nat batch {batch} (A grows with the batch), A for {name} takes "
      f"{batch * a_bytes[name] / 2**20:,.0f} MiB, x {batch * x_bytes[name] / 2**20:,.1f} MiB")

fig, ax = plt.subplots(figsize=(9, 3.8))
ax.bar(list(ratios), list(ratios.values()), color="C1", label="bytes of A / bytes of x (measured)")
ax.plot(list(expected), list(expected.values()), "k_", markersize=28, mew=2, label="R·S / stride²")
ax.set(ylabel="A / x", title="The im2col matrix against its input, batch 1, fp16")
ax.tick_params(axis="x", labelrotation=25, labelsize=8)
ax.legend(fontsize=8)
ax.grid(True, axis="y", alpha=0.3)
plt.tight_layout()
plt.show()

x, w = layer_tensors(dict(N=2, C=5, H=9, W=7, K=6, R=3, S=3), dtype=torch.float32)
for options in [dict(padding=1), dict(stride=(2, 1), padding=(0, 2), dilation=2)]:
    error = check.relative_error(im2col_conv2d(x, w, **options),
                                 F.conv2d(x.double(), w.double(), **options))
    print(f"im2col_conv2d {options}: relative error {error:.1e} against F.conv2d in float64")

# %% [markdown] id="cell-22"
# A 1x1 convolution at stride 1 needs no unfolding at all: in NHWC its $A$ *is* the input, viewed as
# an $(N \cdot H \cdot W, C)$ matrix (the ratio 1 above is the padded copy `im2col` makes).
# Everything with a larger window pays: 9 times the input for a 3x3 layer at stride 1, about 12 for
# the stem. And $A$ crosses memory twice, written by the unfolding and read by the matmul: for the
# first 3x3 layer that is 18 times the input's bytes on top of the fewest the layer needs (the
# input, the filters and an output of the input's size), which divides its arithmetic intensity by
# about 10 and moves it from right of the ridge point to far left of it. Timed at `FOCUS`:

# %% id="cell-23" tags=["demo"]
x, w = layer_tensors(FOCUS)
stride, padding = FOCUS["stride"], FOCUS["padding"]
results = bench.compare({
    "im2col + matmul (version 2)": lambda: im2col_conv2d(x, w, stride, padding),
    f"{LIBRARY} channels_last": lambda: F.conv2d(x, w, stride=stride, padding=padding)},
    flops=layer_flops(FOCUS), bytes=layer_min_bytes(FOCUS), graph_below_ms=GRAPH_BELOW_MS)
bench.print_table(results, baseline=f"{LIBRARY} channels_last")

# %% [markdown] id="cell-24"
# ## 5. Version 3: the implicit GEMM
#
# Version 2's matmul is fast; its problem is $A$. The **implicit GEMM** keeps the matmul and drops
# $A$: it runs lesson 02's tiled matmul $y = A\,B$, and wherever that kernel would load a `BLOCK_M`
# x `BLOCK_K` tile of $A$, it computes from Exercise 1's map which input elements the tile holds and
# gathers them straight from $x$. $A$ exists only one tile at a time, in registers and shared
# memory.
#
# Program `pid` owns a `BLOCK_M` x `BLOCK_N` tile of $y$: output pixels `offs_m` (rows $m$ of $A$)
# and output channels `offs_n` (columns of $B$). Then:
#
# - **Once, before the loop**, each row $m$ is split into $(n, p, q)$ and gets the input pixel its
#   window starts from, $h_0 = p\sigma_h - \pi_h$ and $w_0 = q\sigma_w - \pi_w$ (negative in the
#   padding), and a pointer to channel 0 of that pixel, `x_rows = x_ptr + ((n * H + h0) * W + w0) *
#   C`.
# - **Each step of the K loop** takes one tap $(r, s)$ and one block of `BLOCK_K` channels $c$: the
#   element of row $m$ is input pixel $h = h_0 + r\delta_h$, $w = w_0 + s\delta_w$, at address `((n
#   * H + h) * W + w) * C + c` = `x_rows + (r * DIL_H * W + s * DIL_W) * C + c`: `BLOCK_K`
#   consecutive channels per row, one coalesced load per row in NHWC. The mask is `row_ok & (c <
#   C)`: `row_ok` is false where $(h, w)$ falls outside the image (the padding: load zeros), and `c
#   < C` cuts off the channels past the last one. The matching `BLOCK_K` x `BLOCK_N` tile of $B$ is
#   rows `rs * C + c` of the filters.
# - `acc = tl.dot(a, b, acc)`, and after the loop one store of the tile of $y$ (masked at the
#   edges).
#
# **One flat loop.** The natural way to write the K loop is three loops: over $r$, over $s$, over
# channel blocks. But the compiler software-pipelines (lesson 03) only the innermost loop, and for
# ResNet's first stage $C = 64$: with `BLOCK_K = 64` the innermost loop has *one* iteration and
# nothing to overlap. The kernel runs one `tl.range` over all $R \cdot S \cdot \lceil C /
# \text{BLOCK\_K} \rceil$ steps (9 here) and recovers `rs = i // c_blocks`, $r$, $s$ and the channel
# block from the step number, so loads for the next steps are in flight while `tl.dot` works on this
# one, however few channels there are.
#
# **Wrap-around rows.** As in lesson 03, rows past $M = N \cdot P \cdot Q$ and columns past $K$ are
# taken modulo $M$ and $K$ (`% M`, `% K`) rather than masked: they compute something harmless from
# real data, and only the store is masked. Padding cannot use this trick; it needs `row_ok`.
#
# Before the kernel, the same algorithm in PyTorch, all rows at once, one `(r, s, channel block)`
# step at a time, gathering each slice of $A$ with the kernel's address arithmetic from the flat
# NHWC memory of $x$:

# %% id="cell-25"
def implicit_gemm_torch(x, w, stride=1, padding=0, dilation=1, block_k=4):
    """y = A @ B without building A: each (r, s, channel block) step gathers the (M, block_k) slice
    of A from x's NHWC memory with the kernel's addresses and masks. Float64, for checking."""
    (sh, sw), (ph, pw), (dh, dw) = (pair(stride, "stride"), pair(padding, "padding"),
                                    pair(dilation, "dilation"))
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    P, Q = output_size(H, R, sh, ph, dh), output_size(W, S, sw, pw, dw)
    x_memory = x.permute(0, 2, 3, 1).reshape(-1).double()      # x's elements in NHWC order
    b = filters_as_matrix(w).t().double()                       # B: (R·S·C, K)
    m = torch.arange(N * P * Q)
    n, p, q = m // (P * Q), m // Q % P, m % Q
    # once: where each row's window starts
    h0, w0 = p * sh - ph, q * sw - pw
    c_blocks = triton.cdiv(C, block_k)
    acc = torch.zeros(N * P * Q, K, dtype=torch.float64)
    for i in range(R * S * c_blocks):                           # one flat loop, as in the kernel
        rs = i // c_blocks
        r, s = rs // S, rs % S
        c = (i % c_blocks) * block_k + torch.arange(block_k)
        h, w_ = h0 + r * dh, w0 + s * dw
        row_ok = (h >= 0) & (h < H) & (w_ >= 0) & (w_ < W)
        mask = row_ok[:, None] & (c[None, :] < C)
        address = ((n * H + h) * W + w_)[:, None] * C + c[None, :]
        a = torch.where(mask, x_memory[address.clamp(0, x_memory.numel() - 1)], 0.0)
        b_tile = torch.where((c < C)[:, None], b[(rs * C + c).clamp(max=R * S * C - 1)], 0.0)
        acc += a @ b_tile
    return acc.view(N, P, Q, K).permute(0, 3, 1, 2)


x, w = layer_tensors(dict(N=2, C=6, H=7, W=9, K=5, R=3, S=3), dtype=torch.float32)
for options in [dict(padding=1), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2))]:
    error = check.relative_error(implicit_gemm_torch(x.cpu(), w.cpu(), **options),
                                 F.conv2d(x.double().cpu(), w.double().cpu(), **options))
    print(f"implicit GEMM in PyTorch, {options}: relative error {error:.1e} against F.conv2d")

# %% [markdown] id="cell-26"
# **Tuning.** The best `BLOCK_M`, `BLOCK_N`, `BLOCK_K`, `num_warps` and `num_stages` depend on the
# GPU, the layer and the dtype. Lesson 03's `autotune` picks them per problem: `CONV_SPACE`
# (imported) has a default (level 0, the winner on the first ResNet layer on an H200), twelve more
# configurations that won or came close on the H200's layers, or suit GPUs with less shared memory
# (level 1), and a full grid (level 2) pruned by shared memory and registers like lesson 03's.
# `conv_problem(x, w, stride, padding, dilation)` is the description the tuner caches a winner
# under. In the interpreter there is nothing to time, and `autotune` returns the default.
#
# **What version 1 and version 2 write.** `traffic.count_traffic` adds up the bytes of every
# `tl.load` and `tl.store` a Triton kernel makes, in the interpreter, and what PyTorch's operations
# outside the kernels read and write (a pad, a copy, a matmul: `torch_stored_bytes` says how much of
# the total was theirs). The direct kernel stores $y$ once and nothing else; im2col + GEMM, all
# PyTorch, writes the padded input, then $A$, then $y$:

# %% id="cell-27"
print("level 0, the default:", CONV_SPACE.default)
print(f"level 1 adds {len(CONV_SPACE.configs(1)) - 1} more, e.g.", *CONV_SPACE.configs(1)[1:4],
      sep="\n  ")

layer = dict(N=1, C=16, H=8, W=8, K=16, R=3, S=3, stride=1, padding=1)
x, w = layer_tensors(layer)
P, Q = layer_output_size(layer)
y_bytes, a_bytes = layer["N"] * layer["K"] * P * Q * 2, im2col(x, 3, 3, 1, 1).nbytes
counted = traffic.count_traffic(direct_conv2d, x, w, 1, 1)
unfolded = traffic.count_traffic(im2col_conv2d, x, w, 1, 1)
print(f"\nN1 C16 8x8 K16 3x3, padding 1, fp16: x {x.nbytes:,} bytes, y {y_bytes:,}, A {a_bytes:,}")
print(f"direct kernel: stored {counted.stored_bytes:,} bytes (y), loaded {counted.loaded_bytes:,}")
print(f"im2col + GEMM: stored {unfolded.stored_bytes:,} bytes (padded x, A, y; "
      f"{unfolded.torch_stored_bytes:,} by PyTorch), loaded {unfolded.loaded_bytes:,}")

# %% [markdown] id="cell-28"
# ## Exercise 2 (4 + 3 + 2 points, and 2 + 3 on a GPU): implicit-GEMM conv2d
#
# Write `conv2d_kernel` and `conv2d(x, w, stride=1, padding=0, dilation=1)`:
#
# - `x` is $(N, C, H, W)$ and `w` $(K, C, R, S)$, both channels_last, one dtype (`float16` or
#   `float32`, and `bfloat16` on a GPU). Call `check_conv_inputs(x, w, stride, padding, dilation)`
#   first: it raises a `ValueError` that says what to change for anything the kernel cannot take,
#   and returns $(P, Q)$.
# - Return a new `y` of shape $(N, K, P, Q)$ in x's dtype, **channels_last**
#   (`torch.empty(..., memory_format=torch.channels_last)`), equal to
#   `F.conv2d(x, w, stride=stride, padding=padding, dilation=dilation)`, accumulated in float32.
#   `stride`, `padding` and `dilation` are each an int or a pair (`pair` turns either into a pair).
# - Pick the launch configuration with `autotune(conv2d_kernel, conv_problem(x, w, stride, padding,
#   dilation), CONV_SPACE, launch, level=1).config`, where `launch(config)` runs your kernel once on
#   these inputs with that configuration (`BLOCK_M`, `BLOCK_N`, `BLOCK_K`, `GROUP_M`, `num_warps`,
#   `num_stages`). The grid is one program per tile of $y$: `cdiv(N * P * Q, BLOCK_M) * cdiv(K,
#   BLOCK_N)` programs in a 1-D grid, mapped to tiles in grouped order as in lesson 02
#   (`grouped_tile` is imported).
#
# **Why the layer's sizes are (mostly) not `tl.constexpr`.** Triton compiles a kernel once for every
# distinct set of `tl.constexpr` values, and also specializes plain integer arguments: one that
# equals 1 becomes a constant, one that is a multiple of 16 is marked so. With the filter size,
# stride, padding and dilation as constexprs, each new layer was a new compile, 1.5 to 3 s each on
# an H200, and tuning a layer compiled all its candidate configurations again. The given signature
# passes them, and the image sizes, as plain arguments and names them in `do_not_specialize`, so
# one compile serves every layer with the same dtype, filter width, block configuration and channel
# alignment. They cost next to nothing at run time: they are used once per program, or in an add or
# a multiply per step of the $K$ loop, next to a `tl.dot` of $128 \times 64 \times 64$. Two kinds
# of argument stay specialized. `C` and `K`: a channel count that is a multiple of 16 tells the
# compiler that rows of `x` and `w` start 16-byte aligned, which is what lets it load them as
# vectors. And the filter width `S`, a `tl.constexpr`: every step of the loop divides by it
# (`r, s = rs // S, rs % S`), and a division by a constant compiles to a multiply and a shift,
# where a division by a runtime value takes a sequence of instructions, in a loop whose steps are
# short: one $128 \times 64 \times 64$ `tl.dot` is about 280 cycles of one SM's tensor cores at
# the H200's datasheet peak ($2 \cdot 128 \cdot 64 \cdot 64$ FLOPs at 989 TFLOP/s over 132 SMs,
# 1.98 GHz).
#
# The kernel's signature and docstring are given; the grader calls only `conv2d`, so you may
# organise the kernel your own way. It checks (2a) stride 1 with 1x1 and 3x3 filters, padding 0 and
# 1, odd image sizes, channel counts that are not multiples of any block (3, 5, 20 in; 6, 18 out),
# batches of 1 and 2, fp16 and fp32, that `y` is channels_last, and that an NCHW `x` or a `w` with
# the wrong number of channels raises a `ValueError`; (2b) strides 2, (2, 1) and (1, 2), padding
# (1, 0) and 2, dilation 2, a 2x3 filter; (2c) the bytes your kernel stores and loads, counted in
# the interpreter; (2d, 2e) on a GPU, your speed on the three 3x3 ResNet layers against im2col +
# cuBLAS and against cuDNN. During grading PyTorch may only allocate, view and copy: a `conv2d`
# that calls `F.conv2d`, a matmul, `F.pad` or the reference's `conv2d` fails, with a
# `LibraryShortcut`, every exercise that calls it.

# %% id="cell-29" nbgrader={"grade": false, "grade_id": "conv2d_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
# include: tilegym_edu/reference/convolution.py conv2d_kernel solution


def conv2d(x: torch.Tensor, w: torch.Tensor, stride=1, padding=0, dilation=1) -> torch.Tensor:
    """y = F.conv2d(x, w, stride=stride, padding=padding, dilation=dilation) with conv2d_kernel:
    x (N, C, H, W) and w (K, C, R, S) channels_last, y (N, K, P, Q) channels_last in x's dtype.
    The launch configuration is tuned per problem (level 1 of CONV_SPACE, cached)."""
    ### BEGIN SOLUTION
    P, Q = check_conv_inputs(x, w, stride, padding, dilation)
    (sh, sw), (ph, pw), (dh, dw) = (pair(stride, "stride"), pair(padding, "padding"),
                                    pair(dilation, "dilation"))
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    y = torch.empty((N, K, P, Q), device=x.device, dtype=x.dtype, memory_format=torch.channels_last)

    def launch(config):
        grid = (triton.cdiv(N * P * Q, config["BLOCK_M"]) * triton.cdiv(K, config["BLOCK_N"]),)
        conv2d_kernel[grid](x, w, y, N, H, W, C, K, P, Q, R, S, sh, sw, ph, pw, dh, dw,
                            **config)

    config = autotune(conv2d_kernel, conv_problem(x, w, stride, padding, dilation), CONV_SPACE,
                      launch, level=1).config
    launch(config)
    return y
    ### END SOLUTION

# %% [markdown] id="cell-30"
# The grader's inputs and its definition (`F.conv2d`, run in float64 on the CPU), and its checker on
# two cases of your own:

# %% id="cell-31" nbgrader={"grade": false, "grade_id": "conv_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
def conv_reference(x, w, stride=1, padding=0, dilation=1):
    """The definition, run by the grader in float64 on the CPU."""
    return F.conv2d(x, w, stride=stride, padding=padding, dilation=dilation)


def make_conv_inputs(case, generator):
    """(x, w, stride, padding, dilation) for case = {"N", "C", "HW": (H, W), "K", "RS": (R, S),
    "dtype"} and, if given, "stride", "padding", "dilation" (default 1, 0, 1): x and w standard
    normal, channels_last, on the lesson's device."""
    (H, W), (R, S) = case["HW"], case["RS"]
    x = check.random_tensor((case["N"], case["C"], H, W), case["dtype"], generator)
    w = check.random_tensor((case["K"], case["C"], R, S), case["dtype"], generator)
    return (x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last),
            case.get("stride", 1), case.get("padding", 0), case.get("dilation", 1))


def layer_input_sets(layer, seeds=(0, 1), dtype=torch.float16):
    """Input sets [(x, w, stride, padding, dilation), ...] of a ResNet layer for the speed checks:
    a fresh x for each seed, one w."""
    _, w = layer_tensors(layer, dtype, seed=seeds[0])
    return [(layer_tensors(layer, dtype, seed)[0], w, layer["stride"], layer["padding"], 1)
            for seed in seeds]


for result in check.check(conv2d, conv_reference, make_conv_inputs, seeds=[0], cases=[
        {"N": 2, "C": 5, "HW": (7, 9), "K": 6, "RS": (3, 3), "padding": 1, "dtype": torch.float16},
        {"N": 1, "C": 3, "HW": (9, 8), "K": 4, "RS": (3, 3), "stride": (2, 1), "dilation": 2,
         "dtype": torch.float32}]):
    print(result.describe())

# %% id="cell-32" nbgrader={"grade": true, "grade_id": "test_conv2d_correct", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
# Exercise 2a: conv2d is correct at stride 1: 1x1 and 3x3 filters, padding 0 and 1, odd sizes,
# channel counts that are not multiples of any block, batches of 1 and 2, fp16 and fp32; y is
# channels_last; and conv2d refuses inputs its kernel cannot index.
cases = [
    {"N": 1, "C": 3, "HW": (7, 9), "K": 6, "RS": (1, 1), "dtype": torch.float32},
    {"N": 2, "C": 5, "HW": (11, 5), "K": 6, "RS": (3, 3), "padding": 1, "dtype": torch.float16},
    {"N": 1, "C": 20, "HW": (7, 9), "K": 18, "RS": (3, 3), "dtype": torch.float32},
    {"N": 2, "C": 20, "HW": (9, 7), "K": 18, "RS": (3, 3), "padding": 1, "dtype": torch.float16},
    {"N": 1, "C": 5, "HW": (5, 11), "K": 18, "RS": (1, 1), "padding": 1, "dtype": torch.float16},
    {"N": 2, "C": 3, "HW": (3, 3), "K": 6, "RS": (3, 3), "padding": 1, "dtype": torch.float32},
]
grading.assert_correct(conv2d, conv_reference, make_conv_inputs, cases, seeds=(0, 1))
args = make_conv_inputs(cases[1], torch.Generator().manual_seed(0))
y = grading.guarded_call(conv2d, args)
assert y.is_contiguous(memory_format=torch.channels_last), (
    f"conv2d returned y with strides {y.stride()}: allocate it channels_last "
    "(torch.empty(..., memory_format=torch.channels_last)), the layout the kernel writes")
x = torch.randn(1, 3, 5, 5, device=DEVICE)
w = torch.randn(4, 3, 3, 3, device=DEVICE).to(memory_format=torch.channels_last)
for bad, why in [((x, w), "an NCHW (not channels_last) x"),
                 ((x.to(memory_format=torch.channels_last), w[:, :2]),
                  "w with 2 channels for an x of 3")]:
    try:
        conv2d(*bad)
    except ValueError:
        pass
    else:
        raise AssertionError(f"conv2d accepted {why}: "
                             "call check_conv_inputs(x, w, stride, padding, dilation)")
### BEGIN HIDDEN TESTS
hidden_cases = [
    {"N": 1, "C": 8, "HW": (6, 10), "K": 7, "RS": (3, 1), "padding": (1, 0),
     "dtype": torch.float16},
]
grading.assert_correct(conv2d, conv_reference, make_conv_inputs, hidden_cases, seeds=(11,))
### END HIDDEN TESTS

# %% id="cell-33" nbgrader={"grade": true, "grade_id": "test_conv2d_strided", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Exercise 2b: conv2d is correct with strides (equal and per axis), asymmetric and wide padding,
# dilation, a 1x1 stride-2 shortcut and a 2x3 filter, on non-square inputs.
cases = [
    {"N": 2, "C": 5, "HW": (11, 9), "K": 6, "RS": (3, 3), "stride": 2, "padding": 1,
     "dtype": torch.float16},
    {"N": 1, "C": 20, "HW": (9, 11), "K": 18, "RS": (3, 3), "stride": (2, 1), "padding": (1, 0),
     "dtype": torch.float32},
    {"N": 2, "C": 3, "HW": (8, 11), "K": 6, "RS": (3, 3), "stride": (1, 2), "padding": 2,
     "dilation": 2, "dtype": torch.float16},
    {"N": 1, "C": 7, "HW": (10, 7), "K": 5, "RS": (1, 1), "stride": 2, "dtype": torch.float32},
    {"N": 1, "C": 4, "HW": (11, 6), "K": 6, "RS": (2, 3), "stride": (2, 1), "padding": 2,
     "dtype": torch.float16},
]
grading.assert_correct(conv2d, conv_reference, make_conv_inputs, cases, seeds=(0, 1))
### BEGIN HIDDEN TESTS
hidden_cases = [
    {"N": 2, "C": 6, "HW": (9, 9), "K": 6, "RS": (3, 3), "stride": 3, "padding": 1,
     "dilation": (1, 2), "dtype": torch.float32},
]
grading.assert_correct(conv2d, conv_reference, make_conv_inputs, hidden_cases, seeds=(11,))
### END HIDDEN TESTS

# %% [markdown] id="cell-34"
# **Exercise 2c, what the kernel may write and read.** Without a GPU nothing can be timed, but the
# bytes can be counted. The check below runs your `conv2d` on a small ResNet-like layer (batch 1,
# 16 channels in, 64 out, 8x8, 3x3, padding 1, fp16) under `traffic.count_traffic`, and checks
# three things:
#
# - **Stores.** An implicit GEMM stores $y$, once, and nothing else: the stored bytes must equal
#   $y$'s exactly, where the unfolded matrix alone would be 9 times the input. A message
#   "stored ... bytes, but the output holds ..." means your code writes something besides $y$ (an
#   unfolded matrix, partial sums) or writes some elements twice, e.g. rows past $M$ or columns
#   past $K$ that the store does not mask. What PyTorch writes in your wrapper counts as well (a
#   `clone`, a `copy_`, a conversion: the message says how many of the bytes were PyTorch's);
#   `torch.empty` and views write nothing.
# - **Loads.** Tiling is what makes a matrix product cheap in bytes (lesson 02): a program that
#   owns a `BLOCK_M` x `BLOCK_N` tile of $y$ loads each input value once for all `BLOCK_N` of its
#   output channels and each filter value once for all `BLOCK_M` of its pixels. Over the whole
#   layer that is $e\,M K\,CRS\,(1/\text{BLOCK\_N} + 1/\text{BLOCK\_M})$ bytes, with $M = NPQ$
#   and elements of $e$ bytes. The budget is 1.5 times what tiles of 16 x 16 (the smallest that
#   `tl.dot` takes) load with a whole tile at the edges: $1.5 \cdot
#   \lceil M/16 \rceil \lceil K/16 \rceil \cdot (16 + 16) \cdot CRS \cdot e$, here 221,184
#   bytes. It is worked out from the layer alone, not from your configuration. The course's
#   kernel, with the interpreter's configuration of 128 x 64 tiles (one program, half of its rows
#   wrapped past $M = 64$ with `% M`), loaded 49,408 bytes, 0.22 of the budget; with any of
#   `CONV_SPACE`'s tiles (64 to 256 each way) at most 0.61. Every tile of 16 to 256 rows and
#   columns stays within it, wrapped edges included, except the two thinnest long ones, 16 x 256
#   and 256 x 16, which on a layer this small load mostly wrapped columns or rows (1.40 and 1.20
#   of the budget). Padding taps and channels past $C$ that your masks switch off load nothing,
#   so `BLOCK_K` may be wider than $C$. A direct convolution that gives each program one output
#   pixel (all $K$ channels) and loops over $c$, $r$ and $s$ loads every filter value again for
#   every pixel: it loaded 1,195,136 bytes, 5.4 times the budget. "loaded ... bytes, over the
#   budget" means that: give each program a tile of at least 16 x 16 outputs and reduce it with
#   `tl.dot`.
# - **The output** of the counted run must be right, too.
#
# A second layer that the cell does not show, with strides, is held to the same rules.

# %% id="cell-35" nbgrader={"grade": true, "grade_id": "test_never_materialises", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 2c: conv2d stores y and nothing else (the unfolded matrix is never written), loads
# no more than 1.5x what 16 x 16 tiles of y need, and y is right.
def check_traffic(case):
    args = make_conv_inputs(case, torch.Generator().manual_seed(0))
    x, w, stride, padding, dilation = args
    # on a GPU this tunes (cached) for the counted call below: on inputs of its own (same
    # shapes), so that it can keep nothing the counted call could use
    conv2d(*make_conv_inputs(case, torch.Generator().manual_seed(1)))
    (N, C, H, W), (K, _, R, S) = x.shape, w.shape
    P, Q = check_conv_inputs(x, w, stride, padding, dilation)
    unfolded_bytes = N * P * Q * R * S * C * x.element_size()
    # what 16 x 16 tiles of y load, a whole tile at the edges: each program 16 rows of A
    # (gathered from x) and 16 columns of B (from w) over all C * R * S; from the layer alone
    tiles_16 = (triton.cdiv(N * P * Q, 16) * triton.cdiv(K, 16) * (16 + 16) * C * R * S
                * x.element_size())
    grading.assert_traffic(
        conv2d, args, conv_reference, x.dtype,
        what=f"N{N} C{C} {H}x{W} K{K} {R}x{S}, stride {stride}, padding {padding}, "
             f"{str(x.dtype)[6:]}",
        stores=N * K * P * Q * x.element_size(), loads_at_most=1.5 * tiles_16,
        store_hint=f" (the unfolded matrix would be {unfolded_bytes:,} bytes, "
                   f"{unfolded_bytes / x.nbytes:.1f} x the input)",
        load_hint=f", 1.5 x the {tiles_16:,} that tiles of 16 x 16 outputs load (each program "
                  "a tile's rows of the unfolded input and columns of the filters, once): a "
                  "kernel that gives each program one output pixel or one output element and "
                  "loops over c, r and s loads every filter value again for every pixel (and a "
                  "tile many times longer than the layer loads mostly wrapped rows). Give each "
                  "program a BLOCK_M x BLOCK_N tile of y, at least 16 x 16, and reduce it with "
                  "tl.dot")


check_traffic({"N": 1, "C": 16, "HW": (8, 8), "K": 64, "RS": (3, 3), "padding": 1,
               "dtype": torch.float16})
### BEGIN HIDDEN TESTS
check_traffic({"N": 2, "C": 12, "HW": (13, 13), "K": 64, "RS": (3, 3), "stride": 2,
               "padding": 1, "dtype": torch.float32})
### END HIDDEN TESTS

# %% [markdown] id="cell-36"
# ## Exercises 2d and 2e (2 + 3 points, need a GPU): speed
#
# Two checks on a GPU, on the three 3x3 ResNet layers (N32 C64 56x56 K64, N32 C256 14x14 K256, N64
# C128 28x28 K128, padding 1, fp16, channels_last), each measured in this process with your `conv2d`
# and the baseline interleaved, on two inputs, and the outputs of the timed runs checked against the
# float64 definition. Your `conv2d` is tuned on each layer before it is timed (the tuner's result is
# cached). These layers take tens of microseconds on a recent GPU, less than Python takes to call a
# wrapper like yours (input checks, the tuner's cache, the launch: on an H200 about 0.1 ms a call),
# so every function is timed as a replayed CUDA graph (`graph_below_ms=GRAPH_BELOW_MS`, set with the
# layers), which measures the GPU's work and not the host's. The slowest layer counts:
#
# - **2d, against im2col + cuBLAS** (`im2col_conv2d`, version 2): at least the threshold printed
#   (2.0).
# - **2e, against cuDNN** (`F.conv2d` on the same channels_last tensors): at least the threshold
#   printed (0.5). On an H200 the reference reached 0.97, 0.78 and 0.78 of cuDNN on these layers
#   (section 2's table).
#
# If you fall short: is `x` read in NHWC order, `BLOCK_K` channels per row, so the loads coalesce?
# Is the K loop one `tl.range` the compiler can pipeline? Did `autotune` run at level 1?

# %% id="cell-37" nbgrader={"grade": true, "grade_id": "test_conv2d_vs_im2col", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 2d: conv2d is several times faster than im2col + cuBLAS on each 3x3 ResNet layer
# (GPU only).
grading.require_gpu("the speed of conv2d against im2col + cuBLAS")
limit = grading.threshold("05_convolution", "conv_vs_im2col")
ratios = {}
for name in GRADED_LAYERS:
    layer = RESNET_LAYERS[name]
    input_sets = layer_input_sets(layer)
    # tune first (cached): the timed calls run the chosen configuration
    conv2d(*input_sets[0])
    x, w, stride, padding, dilation = input_sets[0]
    print(f"\n{name}, fp16")
    # timed as CUDA-graph replays: GPU time, not Python's
    yours, im2col_gemm = grading.measure_speed(
        conv2d, {"im2col + cuBLAS": lambda: im2col_conv2d(x, w, stride, padding, dilation)},
        input_sets, conv_reference, torch.float16, flops=layer_flops(layer),
        bytes=layer_min_bytes(layer))
    ratios[name] = im2col_gemm.median_ms / yours.median_ms
grading.assert_slowest_ratio(ratios, limit, "speedup over im2col + cuBLAS")

# %% id="cell-38" nbgrader={"grade": true, "grade_id": "test_conv2d_vs_cudnn", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Exercise 2e: conv2d reaches a good fraction of cuDNN's speed on each 3x3 ResNet layer (GPU only).
grading.require_gpu("the speed of conv2d against cuDNN")
limit = grading.threshold("05_convolution", "conv_vs_cudnn")
ratios = {}
for name in GRADED_LAYERS:
    layer = RESNET_LAYERS[name]
    input_sets = layer_input_sets(layer)
    conv2d(*input_sets[0])             # tune first (cached)
    x, w, stride, padding, dilation = input_sets[0]
    print(f"\n{name}, fp16")
    # timed as CUDA-graph replays: GPU time, not Python's
    yours, cudnn = grading.measure_speed(
        conv2d, {"cuDNN channels_last": lambda: F.conv2d(x, w, stride=stride, padding=padding)},
        input_sets, conv_reference, torch.float16, flops=layer_flops(layer),
        bytes=layer_min_bytes(layer))
    ratios[name] = cudnn.median_ms / yours.median_ms
grading.assert_slowest_ratio(ratios, limit, "fraction of cuDNN's speed")

# %% [markdown] id="cell-39"
# ## Compare: the three versions, the reference and cuDNN
#
# Every version of this lesson, timed interleaved on the same fp16 channels_last inputs: the direct
# kernel (version 1, at `FOCUS` only: it is slow), im2col + cuBLAS (version 2), your `conv2d`, the
# course's reference tuned at level 1, and `F.conv2d` on NCHW and on channels_last copies of the
# same values. On a GPU this runs on all five ResNet layers (each is tuned first, for your kernel
# and the reference, which takes a while the first time); in the interpreter on a toy layer, whose
# times say nothing about GPU speed. As in the speed checks, short calls are replayed from CUDA
# graphs. TFLOP/s come from $2NKPQCRS$ FLOPs, bytes from the fewest the layer needs, so on the
# roofline all versions of a layer share one intensity and differ only in height.

# %% id="cell-40" tags=["demo"]
rates = {}       # layer -> name -> TFLOP/s
focus = []       # the measurements at FOCUS
for name, layer in progress.track(list(COMPARE_LAYERS.items()), "layers"):
    x, w = layer_tensors(layer)
    x_nchw, w_nchw = x.contiguous(), w.contiguous()
    stride, padding = layer["stride"], layer["padding"]
    conv2d(x, w, stride, padding)                          # tune first (cached per problem)
    reference.conv2d(x, w, stride, padding, level=1)
    fns = {}
    if name == FOCUS_NAME:   # the direct kernel is slow: at FOCUS only
        fns["direct (version 1)"] = lambda: direct_conv2d(x, w, stride, padding)
    fns |= {"im2col + matmul (version 2)": lambda: im2col_conv2d(x, w, stride, padding),
            f"{LIBRARY} NCHW": lambda: F.conv2d(x_nchw, w_nchw, stride=stride, padding=padding),
            "conv2d (yours)": lambda: conv2d(x, w, stride, padding),
            "reference (tuned)": lambda: reference.conv2d(x, w, stride, padding, level=1),
            f"{LIBRARY} channels_last": lambda: F.conv2d(x, w, stride=stride, padding=padding)}
    results = bench.compare(fns, flops=layer_flops(layer), bytes=layer_min_bytes(layer),
                            graph_below_ms=GRAPH_BELOW_MS)
    rates[name] = {m.name: m.tflops for m in results}
    if name == FOCUS_NAME:
        focus = results
    x = w = x_nchw = w_nchw = None   # frees this layer's tensors before the next (as del would)

print(f"{FOCUS_NAME}, stride {FOCUS['stride']}, padding {FOCUS['padding']}, fp16, channels_last")
bench.print_table(focus, baseline="conv2d (yours)")
if device.ON_GPU:
    names = ["conv2d (yours)", "reference (tuned)", "cuDNN channels_last", "cuDNN NCHW",
             "im2col + matmul (version 2)"]
    print(f"\nTFLOP/s on {device.info().name}, fp16")
    print(f"{'layer':<34}" + "".join(f"{n.split(' (')[0][:14]:>16}" for n in names)
          + f"{'yours / cuDNN':>15}")
    for name, by_version in rates.items():
        print(f"{name:<34}" + "".join(f"{by_version[n]:>16.0f}" for n in names)
              + f"{by_version['conv2d (yours)'] / by_version['cuDNN channels_last']:>15.2f}")

# %% [markdown] id="cell-41"
# TFLOP/s per layer, and at `FOCUS` the ladder from version 1 up and the roofline (charts of speed
# on a GPU only):

# %% id="cell-42" tags=["demo"]
if not focus:
    raise NotImplementedError("the comparison needs your conv2d (Exercise 2): "
                              "write it, then run the cell above again")
if device.ON_GPU:
    names = ["im2col + matmul (version 2)", "cuDNN NCHW", "conv2d (yours)", "reference (tuned)",
             "cuDNN channels_last"]
    fig, ax = plt.subplots(figsize=(12, 4.5))
    width = 0.8 / len(names)
    for i, version in enumerate(names):
        ax.bar([j + i * width for j in range(len(rates))],
               [rates[layer][version] for layer in rates], width, label=version, color=f"C{i}")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(rates))], list(rates), fontsize=8)
    ax.set(ylabel="TFLOP/s", title=f"Convolution, fp16, on {device.info().name}")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    plt.tight_layout()
    plt.show()
    roofline.plot_ladder(focus, title=f"{FOCUS_NAME}, fp16: from the direct kernel up")
else:
    print("The TFLOP/s charts need GPU timings: interpreter times say nothing about GPU speed.")
roofline.plot_roofline([m for m in focus if "NCHW" not in m.name],
                       title=f"{FOCUS_NAME}, fp16, channels_last, on the roofline");

# %% [markdown] id="cell-44"
# ## 6. Layers that are not one big matrix product: stems, groups and depthwise
#
# The implicit GEMM reduces over $(r, s, \text{channel block})$, `BLOCK_K` channels a step. That
# assumes many channels. Three kinds of layer break the assumption:
#
# - **A stem**, a network's first layer, reads the image: $C = 3$. Each step of 16 or more channels
#   does 3 of useful work, and ResNet-50's 7x7 stem takes 49 such steps: at most 3/16 of the
#   tensor cores' work is useful. On an H200, at batch 32 in fp16, this lesson's `conv2d`, tuned,
#   ran the stem at 0.10 of cuDNN's speed (0.867 ms against 0.086). The fix is to **pack** the
#   reduction: one index $t = (r \cdot S + s) \cdot C + c$ over all $R \cdot S \cdot C = 147$
#   products, cut into `BLOCK_K` steps (5 of 32), each gathering the input elements its indices
#   name. In NHWC memory, with dilation 1, the $S \cdot C = 21$ elements of one filter row $r$ are
#   adjacent, so the gathers are mostly contiguous, and the filters' channels_last rows are exactly
#   $t$ in order. The course's packed kernel ran the same stem at 0.56 of cuDNN at its default
#   configuration and 0.59 tuned (`docs/results/h200-2026-12-02-conv-groups-graphs.json`).
# - **Grouped convolution** (`groups=G`, ResNeXt): output channel $k$ reads only the $C / G$ input
#   channels of its group $g = k \div (K / G)$, and `w` is $(K, C / G, R, S)$. It is $G$ separate
#   GEMMs, each reducing over $R \cdot S \cdot C / G$ (36 for ResNeXt-50 32x4d's 3x3 layers: few
#   again, so packed too). One kernel launch runs them all: `program_id(1)` is the group. But a
#   group of 4 output channels makes a GEMM 4 columns wide, and `tl.dot` works on tiles of at least
#   16 rows, columns and reduction steps: 12 of every 16 columns would be padding, and each pixel's
#   4 input channels an 8-byte load. So a program takes a **block** of adjacent groups instead,
#   8 of ResNeXt's (`groups_per_block`, imported, picks the largest power of two that divides $G$
#   and keeps the block within `GROUP_WIDTH` channels): 32 input channels, one 64-byte run per
#   pixel and tap, and 32 output columns. Output channel $j$ of the block reads only its own
#   group's channels, so the filter tile is **block-diagonal**: zeros wherever input channel $c$
#   and column $j$ belong to different groups. Most of its multiplies are by zero, 7 in 8 here,
#   but this layer does 36 multiply-adds per output, far too few to be bound by the tensor cores:
#   what it pays for is bytes, and the block loads them in full runs. On an H200, at batch 32 in
#   fp16, ResNeXt-50's N32 C128 56x56 3x3 layer ran at 0.13 of cuDNN's speed with one GEMM per
#   group (`docs/results/h200-2026-12-01-conv-groups.json`) and at 0.76 with blocks of 8 groups
#   (the stem's record above), both at the default configuration.
# - **Depthwise convolution** ($G = C$, MobileNet): each output channel reads one input channel.
#   There is no matrix product left: $y[n, k, p, q] = \sum_{r,s} x[n, k \div M, h, w] \cdot w[k, 0,
#   r, s]$, with $M = K / C$ outputs per input channel (1 or more). A 3x3 depthwise layer does 9
#   multiply-adds per output element. At MobileNetV2's 56x56 layer with 144 channels, batch 32,
#   fp16: 260 MFLOP against 57.8 MB of $x$ and $y$ (the filters are 2.6 KB), **4.5 FLOPs per
#   byte**. The H200's ridge point, 989 TFLOP/s over 4.8 TB/s, is at 206: this layer sits 46 times
#   to the left of it, among the memory-bound kernels. The goal is bytes per second, not TFLOP/s,
#   and tensor cores would not help: a program takes `BLOCK_M` output pixels x `BLOCK_C` channels
#   (adjacent in NHWC memory) and adds, for each of the $R \cdot S$ taps, a loaded tile of $x$
#   times that tap's `BLOCK_C` weights, in float32.
#
# ## Exercise 3 (3 points): depthwise convolution
#
# Write `depthwise_conv2d_kernel` and `depthwise_conv2d(x, w, stride=1, padding=0, dilation=1)`:
# `x` $(N, C, H, W)$ and `w` $(K, 1, R, S)$, channels_last, $K$ a multiple of $C$; `y` as for
# `conv2d`, equal to `F.conv2d(x, w, stride=stride, padding=padding, dilation=dilation,
# groups=C)`. Check the inputs with `check_conv_inputs(x, w, stride, padding, dilation, groups=C)`,
# and raise a `ValueError` for a `w` whose second dimension is not 1. Launch one program per
# `BLOCK_M` output pixels (`program_id(0)`) and `BLOCK_C` output channels (`program_id(1)`), with
# `DEPTHWISE_DEFAULT` (imported) as the configuration. The grader checks 1x1, 3x3 and 5x3 filters,
# strides, padding and dilation, one and three outputs per channel, channel counts that are not
# multiples of any block, fp16 and fp32, and that a `w` of 2 channels raises the `ValueError`.
#
# ## Exercise 4 (3 points): the packed implicit GEMM, for stems and groups
#
# Write `packed_conv2d_kernel` and `packed_conv2d(x, w, stride=1, padding=0, dilation=1,
# groups=1)`: `w` is $(K, C / G, R, S)$; `y` equals `F.conv2d(..., groups=groups)`. Check with
# `check_conv_inputs(x, w, stride, padding, dilation, groups)`. Take $G_B$ =
# `groups_per_block(G, C / G, K / G, PACKED_DEFAULT["GROUP_WIDTH"])` groups per block and launch a
# 2-D grid, `cdiv(N * P * Q, BLOCK_M) * cdiv(G_B * K / G, BLOCK_N)` tiles (grouped order,
# `grouped_tile`) by $G / G_B$ blocks, with the rest of `PACKED_DEFAULT` (imported) as the launch
# options. The grader checks a 7x7 stride-2 stem on 3 channels, a dilated stem, groups of 2 and 4
# with odd sizes, 16 groups in two blocks, a 1x1 layer, fp16 and fp32.

# %% id="cell-45" nbgrader={"grade": false, "grade_id": "depthwise_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
# include: tilegym_edu/reference/conv_groups.py depthwise_conv2d_kernel solution


def depthwise_conv2d(x: torch.Tensor, w: torch.Tensor, stride=1, padding=0,
                     dilation=1) -> torch.Tensor:
    """F.conv2d(x, w, ..., groups=C) for x (N, C, H, W) and w (K, 1, R, S) channels_last, K a
    multiple of C; y (N, K, P, Q) channels_last in x's dtype; DEPTHWISE_DEFAULT's launch."""
    ### BEGIN SOLUTION
    if w.dim() == 4 and w.shape[1] != 1:
        raise ValueError(f"depthwise filters read one channel each: w must be (K, 1, R, S), "
                         f"got {tuple(w.shape)}")
    C = x.shape[1] if x.dim() == 4 else 0
    P, Q = check_conv_inputs(x, w, stride, padding, dilation, groups=C)
    (sh, sw), (ph, pw), (dh, dw) = (pair(stride, "stride"), pair(padding, "padding"),
                                    pair(dilation, "dilation"))
    N, _, H, W = x.shape
    K, _, R, S = w.shape
    y = torch.empty((N, K, P, Q), device=x.device, dtype=x.dtype, memory_format=torch.channels_last)
    config = DEPTHWISE_DEFAULT
    grid = (triton.cdiv(N * P * Q, config["BLOCK_M"]), triton.cdiv(K, config["BLOCK_C"]))
    depthwise_conv2d_kernel[grid](x, w, y, N, H, W, C, K, P, Q, R, S, K // C, sh, sw, ph, pw,
                                  dh, dw, **config)
    return y
    ### END SOLUTION

# %% id="cell-46" nbgrader={"grade": false, "grade_id": "packed_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
# include: tilegym_edu/reference/conv_groups.py packed_conv2d_kernel solution


def packed_conv2d(x: torch.Tensor, w: torch.Tensor, stride=1, padding=0, dilation=1,
                  groups=1) -> torch.Tensor:
    """F.conv2d(x, w, ..., groups=groups) for x (N, C, H, W) and w (K, C // groups, R, S)
    channels_last; y (N, K, P, Q) channels_last in x's dtype; PACKED_DEFAULT's launch."""
    ### BEGIN SOLUTION
    P, Q = check_conv_inputs(x, w, stride, padding, dilation, groups)
    (sh, sw), (ph, pw), (dh, dw) = (pair(stride, "stride"), pair(padding, "padding"),
                                    pair(dilation, "dilation"))
    N, C, H, W = x.shape
    K, CG, R, S = w.shape
    y = torch.empty((N, K, P, Q), device=x.device, dtype=x.dtype, memory_format=torch.channels_last)
    config, KG = dict(PACKED_DEFAULT), K // groups
    GS = groups_per_block(groups, CG, KG, config.pop("GROUP_WIDTH"))
    grid = (triton.cdiv(N * P * Q, config["BLOCK_M"]) * triton.cdiv(GS * KG, config["BLOCK_N"]),
            groups // GS)
    packed_conv2d_kernel[grid](x, w, y, N, H, W, C, K, P, Q, R, S, CG, KG, GS, sh, sw, ph, pw,
                               dh, dw, **config)
    return y
    ### END SOLUTION

# %% id="cell-47" nbgrader={"grade": false, "grade_id": "groups_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
def groups_reference(x, w, stride=1, padding=0, dilation=1, groups=1):
    """The definition, run by the grader in float64 on the CPU."""
    return F.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)


def make_groups_inputs(case, generator):
    """(x, w, stride, padding, dilation, groups) for case = {"N", "C", "HW": (H, W), "K",
    "groups", "RS": (R, S), "dtype"} and, if given, "stride", "padding", "dilation": x and w
    standard normal, channels_last, on the lesson's device; w is (K, C // groups, R, S)."""
    (H, W), (R, S) = case["HW"], case["RS"]
    x = check.random_tensor((case["N"], case["C"], H, W), case["dtype"], generator)
    w = check.random_tensor((case["K"], case["C"] // case["groups"], R, S), case["dtype"],
                            generator)
    return (x.to(memory_format=torch.channels_last), w.to(memory_format=torch.channels_last),
            case.get("stride", 1), case.get("padding", 0), case.get("dilation", 1),
            case["groups"])


#: the layers of the speed checks and the demonstration (batch 32, fp16), as groups cases
DEPTHWISE_LAYERS = {
    "MobileNetV2 N32 C96 112x112 3x3 stride 2": {"N": 32, "C": 96, "HW": (112, 112), "K": 96,
                                                 "RS": (3, 3), "stride": 2, "padding": 1},
    "MobileNetV2 N32 C144 56x56 3x3": {"N": 32, "C": 144, "HW": (56, 56), "K": 144,
                                       "RS": (3, 3), "padding": 1},
}
PACKED_LAYERS = {
    "ResNet-50 stem N32 C3 224x224 K64 7x7 stride 2": {
        "N": 32, "C": 3, "HW": (224, 224), "K": 64, "groups": 1, "RS": (7, 7), "stride": 2,
        "padding": 3},
    "ResNeXt-50 N32 C128 56x56 K128 3x3, 32 groups": {
        "N": 32, "C": 128, "HW": (56, 56), "K": 128, "groups": 32, "RS": (3, 3), "padding": 1},
}


def case_flops_and_bytes(case, element_size=2):
    """(FLOPs, bytes) of a groups case: 2·N·K·P·Q·(C / groups)·R·S multiply-adds counted twice;
    x and w read once and y written once."""
    (H, W), (R, S) = case["HW"], case["RS"]
    stride, padding = case.get("stride", 1), case.get("padding", 0)
    P, Q = output_size(H, R, stride, padding, 1), output_size(W, S, stride, padding, 1)
    N, C, K, groups = case["N"], case["C"], case["K"], case.get("groups", case["C"])
    flops = 2 * N * K * P * Q * (C // groups) * R * S
    return flops, element_size * (N * C * H * W + K * (C // groups) * R * S + N * K * P * Q)


def assert_groups_speed(candidate, reference, make_inputs, layers, limit):
    """Time ``candidate`` against cuDNN on each layer of ``layers`` (inputs from make_inputs, in
    fp16, two seeds; CUDA-graph replays, interleaved), print the fraction of cuDNN's speed per
    layer and fail unless the slowest reaches ``limit``."""
    ratios = {}
    for name, case in layers.items():
        input_sets = [make_inputs({**case, "dtype": torch.float16},
                                  torch.Generator().manual_seed(seed)) for seed in (0, 1)]
        x, w, stride, padding = input_sets[0][:4]
        groups = x.shape[1] // w.shape[1]
        flops, moved = case_flops_and_bytes(case)
        print(f"\n{name}, fp16")
        yours, cudnn = grading.measure_speed(
            candidate, {"cuDNN channels_last": lambda: F.conv2d(x, w, stride=stride,
                                                                padding=padding, groups=groups)},
            input_sets, reference, torch.float16, flops=flops, bytes=moved)
        ratios[name] = cudnn.median_ms / yours.median_ms
    grading.assert_slowest_ratio(ratios, limit, "fraction of cuDNN's speed")


def depthwise_reference(x, w, stride=1, padding=0, dilation=1):
    """Exercise 3's definition: every group one input channel."""
    return groups_reference(x, w, stride, padding, dilation, groups=x.shape[1])


def make_depthwise_inputs(case, generator):
    """(x, w, stride, padding, dilation) as make_groups_inputs makes them with groups = C: w is
    (K, 1, R, S)."""
    return make_groups_inputs({**case, "groups": case["C"]}, generator)[:5]


for result in check.check(depthwise_conv2d, depthwise_reference, make_depthwise_inputs,
                          seeds=[0], cases=[{"N": 1, "C": 6, "HW": (7, 6), "K": 12, "RS": (3, 3),
                                             "padding": 1, "dtype": torch.float32}]):
    print(result.describe())
for result in check.check(packed_conv2d, groups_reference, make_groups_inputs, seeds=[0],
                          cases=[{"N": 1, "C": 3, "HW": (9, 8), "K": 8, "groups": 1,
                                  "RS": (5, 5), "stride": 2, "padding": 2,
                                  "dtype": torch.float16}]):
    print(result.describe())

# %% id="cell-48" nbgrader={"grade": true, "grade_id": "test_depthwise_correct", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Exercise 3: depthwise_conv2d is correct with one and three outputs per channel, strides, padding
# and dilation, odd sizes and channel counts, fp16 and fp32; and it refuses filters of more than
# one channel.
cases = [
    {"N": 2, "C": 20, "HW": (9, 8), "K": 20, "RS": (3, 3), "padding": 1,
     "dtype": torch.float16},
    {"N": 1, "C": 7, "HW": (11, 10), "K": 7, "RS": (3, 3), "stride": 2,
     "padding": 1, "dtype": torch.float32},
    {"N": 1, "C": 5, "HW": (8, 9), "K": 15, "RS": (5, 3), "stride": (1, 2),
     "padding": (2, 1), "dilation": 2, "dtype": torch.float16},
    {"N": 2, "C": 3, "HW": (4, 5), "K": 3, "RS": (1, 1), "dtype": torch.float32},
]
grading.assert_correct(depthwise_conv2d, depthwise_reference, make_depthwise_inputs, cases,
                       seeds=(0, 1))
x = torch.randn(1, 4, 5, 5, device=DEVICE).to(memory_format=torch.channels_last)
w = torch.randn(4, 2, 3, 3, device=DEVICE).to(memory_format=torch.channels_last)
try:
    depthwise_conv2d(x, w)
except ValueError:
    pass
else:
    raise AssertionError("depthwise_conv2d accepted filters of 2 channels: depthwise filters read "
                         "one channel each, raise a ValueError for a w that is not (K, 1, R, S)")
### BEGIN HIDDEN TESTS
hidden_cases = [
    {"N": 1, "C": 33, "HW": (6, 7), "K": 66, "RS": (3, 3), "stride": 2,
     "padding": 1, "dtype": torch.float16},
]
grading.assert_correct(depthwise_conv2d, depthwise_reference, make_depthwise_inputs,
                       hidden_cases, seeds=(11,))
### END HIDDEN TESTS

# %% id="cell-49" nbgrader={"grade": true, "grade_id": "test_packed_correct", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Exercise 4: packed_conv2d is correct on stems (3 channels, 7x7 stride 2, a dilated 3x5), groups
# of 2 and 4 with odd sizes, 16 groups of 3 channels in two blocks, and a 1x1 layer, in fp16 and
# fp32.
cases = [
    {"N": 2, "C": 3, "HW": (15, 13), "K": 8, "groups": 1, "RS": (7, 7), "stride": 2,
     "padding": 3, "dtype": torch.float16},
    {"N": 1, "C": 3, "HW": (9, 11), "K": 5, "groups": 1, "RS": (3, 5), "stride": (2, 1),
     "padding": (1, 2), "dilation": 2, "dtype": torch.float32},
    {"N": 2, "C": 8, "HW": (7, 6), "K": 12, "groups": 4, "RS": (3, 3), "padding": 1,
     "dtype": torch.float16},
    {"N": 1, "C": 12, "HW": (6, 7), "K": 6, "groups": 2, "RS": (3, 2), "stride": 2,
     "dtype": torch.float32},
    {"N": 1, "C": 48, "HW": (5, 6), "K": 48, "groups": 16, "RS": (3, 3), "padding": 1,
     "dtype": torch.float16},
    {"N": 1, "C": 5, "HW": (5, 5), "K": 17, "groups": 1, "RS": (1, 1), "dtype": torch.float16},
]
grading.assert_correct(packed_conv2d, groups_reference, make_groups_inputs, cases, seeds=(0, 1))
### BEGIN HIDDEN TESTS
hidden_cases = [
    {"N": 1, "C": 6, "HW": (10, 9), "K": 9, "groups": 3, "RS": (5, 5), "stride": 2,
     "padding": 2, "dtype": torch.float16},
]
grading.assert_correct(packed_conv2d, groups_reference, make_groups_inputs, hidden_cases,
                       seeds=(11,))
### END HIDDEN TESTS

# %% [markdown] id="cell-50"
# On a GPU, the next two cells time your kernels at their default configurations against cuDNN
# (`F.conv2d` on the same channels_last inputs), on the layers defined above
# (`DEPTHWISE_LAYERS`, `PACKED_LAYERS`), at batch 32 in fp16: your `depthwise_conv2d` on
# MobileNetV2's depthwise layers, where bytes per second are what count, and your `packed_conv2d`
# on ResNet-50's stem and on a ResNeXt layer of 32 groups of 4 channels. Each cell grades the
# slowest of its layers against the threshold it prints (0.4 of cuDNN's speed for 3b, 0.3 for 4b);
# on an H200 the reference measured 0.58 (the 56x56 depthwise layer) and 0.56 (the stem). The
# course's `benchmarks/conv_groups.py` tunes the reference kernels and runs more layers.

# %% id="cell-51" nbgrader={"grade": true, "grade_id": "test_depthwise_vs_cudnn", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 3b: depthwise_conv2d reaches a good fraction of cuDNN's speed on MobileNetV2's depthwise
# layers (GPU only).
grading.require_gpu("the speed of depthwise_conv2d against cuDNN")
assert_groups_speed(depthwise_conv2d, depthwise_reference, make_depthwise_inputs, DEPTHWISE_LAYERS,
                    grading.threshold("05_convolution", "depthwise_vs_cudnn"))

# %% id="cell-52" nbgrader={"grade": true, "grade_id": "test_packed_vs_cudnn", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 4b: packed_conv2d reaches a good fraction of cuDNN's speed on ResNet-50's stem and a
# ResNeXt layer (GPU only).
grading.require_gpu("the speed of packed_conv2d against cuDNN")
assert_groups_speed(packed_conv2d, groups_reference, make_groups_inputs, PACKED_LAYERS,
                    grading.threshold("05_convolution", "packed_vs_cudnn"))

# %% [markdown] id="cell-43"
# ## What comes next
#
# Convolution is a matrix product in disguise, and this lesson took the disguise off three ways. The
# direct loop nest is correct but cannot reach the tensor cores. im2col + GEMM reaches them, at the
# price of an intermediate $R \cdot S$ times the input, written and read back. The implicit GEMM
# keeps the matmul and drops the intermediate: the same move FlashAttention made with the attention
# scores in lesson 04, **compute what the next stage needs where it needs it, instead of writing it
# to memory**. The layout made the difference too: NHWC turns each tap's channels into one
# contiguous run, so a tile of the virtual matrix loads like a tile of a real one. In the run of
# section 2's table on an H200, at N32 C64 56x56 K64 3x3, the direct kernel reached 4 TFLOP/s,
# im2col + cuBLAS 32, the reference implicit GEMM 248 and cuDNN 256; on the 1x1 layer, where there
# is nothing to unfold, im2col + cuBLAS and the implicit GEMM were level (101 and 100). Over the
# five ResNet layers the reference reached 0.69 to 0.97 of cuDNN's speed. A variant that loaded the
# input through TMA tensor descriptors (for stride-1 "same" convolutions the rows a tap needs are
# one contiguous block of $x$ viewed as an $(N \cdot H \cdot W, C)$ matrix, with the rows that fall
# off an edge zeroed after the load) was slower, at 0.49 to 0.76 of cuDNN on the 3x3 layers
# (`docs/results/h200-2026-11-30-convolution-variants-grid.json`), and persistent variants did not
# help either. Your own GPU's figures are in the comparison above.
#
# What did pass cuDNN was the same idea with nothing left to the compiler. In Gluon, Triton's
# lower-level language, `tilegym_edu/reference/conv_hopper.py` fetches each filter tap's input as
# one TMA box of $x$ (a few images x rows x columns x 64 channels, the padding the hardware's zero
# fill) and hands that box, where it landed in shared memory, to the tensor cores as the tile of
# $A$: it reshapes the buffer's description, not the data, which Triton's `reshape` could not do
# without a trip through registers. On the H200 it ran ResNet-50's 3x3 layers at 0.87 to 1.15 of
# cuDNN's speed and the strided ones at 0.96 to 1.04, where this lesson's kernel managed 0.59 to
# 0.95 (the course's shape suite, each kernel timed on its own:
# `docs/results/h200-2026-12-04-conv-shapes-run-24.json`). The price is Python: building its three
# tensor descriptors takes the host about 0.1 ms a launch, longer than the layer takes the GPU, so
# it pays only where the network runs as a CUDA graph.
#
# Where it still trailed, counting bytes says why. For each filter tap it brings that tap's input
# box from L2, so a 3x3 layer reads every input pixel 9 times per block of output channels and a
# 5x5 layer 25 times. `tilegym_edu/reference/conv_halo.py` loads, per channel block, the input
# rows that every tap along one axis reads at once (the tile's rows plus the $R - 1$ rows of its
# halo) and gives each tap a view of that buffer shifted by whole rows, again without moving data.
# In the same run it took the suite's 5x5 layer from 0.81 (the first Gluon kernel) to 1.28 of
# cuDNN's speed, N64 C64 56x56 3x3 from 0.92 to 1.04 and a 7x7 layer to 1.40; `shape_conv2d` races
# the two Gluon kernels per layer (`docs/results/h200-2026-12-04-conv-shapes-run-24.md`).
#
# One layer still only tied cuDNN: N32 C512 7x7 3x3, about 21 µs a call. Nsight Compute on an H100
# said why (`docs/results/h200.md`, 2026-12-06): the SMs that ran the halo kernel kept their tensor
# cores busy 48% of the time, the SMs that ran cuDNN's kernel 63%. In the halo kernel one warpgroup
# both issues the next copies and multiplies, so a copy waits until the warpgroup comes back from
# its multiplies. cuDNN's kernel (its grid of 104 blocks of 384 threads says so) gives the copies a
# warp of their own, a *producer*, and the multiplies two warpgroups, *consumers* of 64 rows each
# that share one block of filters. The halo kernel's "specialised" schedule does the same with
# Gluon's `warp_specialize`: a producer warp keeps a ring of four stages full and two consumer
# warpgroups compute a 128 x 64 tile. On the H100 it ran the layer at 1.09 of cuDNN's speed, where
# the plain schedule's best ran at 0.91
# (`docs/results/h100-2026-12-06-gpu-run-74-halo-specialised.log`). Lesson 04's last section takes
# the same step for FlashAttention.
#
# Depthwise layers are won on bytes too. Exercise 3's kernel loads each input pixel once for
# each of the up to nine taps that read it, and the output rows above and below belong to other
# programs, so the SMs read the input from L2 several times over: at MobileNetV2's 56x56 layer it
# ran at 0.58 of cuDNN's speed on the H200 at its default configuration (Exercise 3b's cell) and
# 0.68 tuned (`docs/results/h200-2026-12-02-conv-shapes.md`). `depthwise_rows_kernel` in
# `tilegym_edu/reference/conv_groups.py` gives a program a run of output rows instead; it walks the
# input rows they need top to bottom, loads each once, one row ahead of the one it adds, and adds
# it to every output row that reads it. The tuner races the two kernels per layer; in the suite's
# run above the rows kernel won all four of MobileNetV2's depthwise layers, the 56x56 one at 0.99
# of cuDNN's speed, 14x14 at 1.22 and 7x7 at 1.12
# (`docs/results/h200-2026-12-04-conv-shapes-run-24.md`).
#
# This is the last lesson of the kernels track. **Lesson 06, the capstone**, puts the kernels of the
# track into a Llama-style language model.
