# tilegym-notebook: {"metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}, "language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}

# %% [markdown] id="cell-00"
# # Lesson 07: cuTile — the same kernels in CUDA Tile, side by side with Triton
#
# Every kernel of this course so far was written in Triton: a program per block, pointers with
# offsets, masks on every edge, and `num_warps` / `num_stages` chosen by hand or by the tuner.
# NVIDIA's **cuTile** (CUDA Tile Python, the `cuda-tile` package, imported as `cuda.tile`) is a
# second tile language for the same GPUs. TileGym, the project this course is named after, writes
# its kernels in cuTile first. It moves the line between what you write and what the compiler
# decides: you write tiles, and never a pointer or a mask; the compiler picks the threads, the
# shared-memory staging, whether to use the tensor memory accelerator (TMA) and the pipeline depth.
#
# This lesson writes four kernels you already wrote in Triton again in cuTile, and measures, on
# your GPU, what each language gives:
#
# 1. **The tile model.** What `ct.load(array, index, shape)` means next to Triton's pointer
#    arithmetic and masks, worked out in plain Python (graded everywhere).
# 2. **A fused elementwise kernel**: lesson 00's `silu(a) * b`.
# 3. **The tiled matmul** of lessons 02 and 03: `ct.mma` in place of `tl.dot`, zero padding in
#    place of the K mask.
# 4. **A persistent, latency-hinted matmul**: one block per SM, and `latency=` standing where
#    `num_stages` stood.
# 5. **The FlashAttention forward** of lesson 04, causal and not, with the loop bounds of its
#    causal mask worked out first in plain Python (graded everywhere).
# 6. **A comparison** of Triton, cuTile and the vendor library for each kernel.
#
# | exercise | points | graded |
# | --- | --- | --- |
# | 1. tile arithmetic: the grid and the elements one `ct.load` reads | 3 | everywhere |
# | 2. `silu_mul` in cuTile: correct; its bandwidth against a copy | 3 + 2 | GPU with cuTile |
# | 3. the tiled matmul: correct; against Triton and cuBLAS | 4 + 3 | GPU with cuTile |
# | 4. the persistent matmul: correct; against Triton and cuBLAS | 3 + 3 | GPU with cuTile |
# | 5. the key tiles a query tile visits, and which need a mask | 2 | everywhere |
# | 6. FlashAttention forward: correct; against Triton and cuDNN | 4 + 3 | GPU with cuTile |
#
# **What this lesson needs.** cuTile has no CPU interpreter: its kernels run only on an NVIDIA GPU
# of compute capability 8.x to 12.x, with a driver of r580 or later, and with `cuda-tile` and its
# compiler toolchain installed (`make cutile` installs them; `tilegym-edu doctor` checks them).
# Without those, the lesson still opens and reads: the kernels below are defined but not compiled,
# every cell that would run one says what it needs, and Exercises 1 and 5 are graded anyway. The
# other exercises are marked *needs GPU* on a machine without one; on a GPU without a working
# cuTile they are marked *failed*, with a reason that says what is missing and names `make cutile`.
#
# **Grading.** Cells marked *Exercise* are graded by `tilegym-edu grade 07_cutile` (or
# `make grade LESSON=07_cutile`), which grades a copy of this notebook and never changes it.

# %% [markdown] id="cell-01"
# ## Setup
#
# `import tilegym_edu` first, as always. Then cuTile, through `tilegym_edu.cutile`: where
# `cuda.tile` is installed, `ct` is that module and `cutile_kernel` is `ct.kernel`; where it is not,
# `ct` is a stand-in that says what to install, and `cutile_kernel` keeps your function as it is,
# so every cell of the lesson can still run. `ConstInt` and `ConstBool` mark compile-time
# parameters (more below); `launch(device, grid, kernel, args)` is `ct.launch` (section 1) on that
# device's current PyTorch stream, the one the course's timer measures. The course's cuTile
# module lends you its input checks and default tiles for your wrappers, and lessons 03 and 04's
# Triton kernels are the baselines.

# %% id="cell-02" nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import tilegym_edu  # noqa: F401  (first: decides GPU or interpreter mode before triton is imported)

import math
import time
from typing import Mapping

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from tilegym_edu import bench, check, cutile, device, grading, roofline
# cuTile, or where it is not installed a stand-in that says what to install
from tilegym_edu.cutile import ConstBool, ConstInt, ct, cutile_kernel, launch
# input checks, default tiles and the grouped order of the course's cuTile kernels
from tilegym_edu.reference.cutile_kernels import (
    ATTENTION_DEFAULT, LOG2E, MATMUL_DEFAULT, PERSISTENT_DEFAULT, SILU_MUL_TILE,
    check_attention_inputs, check_matmul_inputs, check_silu_mul_inputs, grouped_tile,
    tile_options)
# the Triton kernels of lessons 03 and 04: the baselines
from tilegym_edu.reference import attention as triton_attention
from tilegym_edu.reference import pipelined as triton_matmul
# graded calls may launch cuTile kernels only: a Triton kernel there loses its cell
grading.refuse_triton_in_graded_calls("cuTile")

print(device.banner())
DEVICE = device.DEVICE
try:
    grading.require_gpu("running cuTile kernels")
    cutile.require("running cuTile kernels")
    CUTILE_RUNS, WHY_NOT = True, ""
    print("cuTile runs here: every cell of this lesson will run its kernels")
except (grading.NeedsGPU, cutile.CutileMissing) as why:
    CUTILE_RUNS, WHY_NOT = False, str(why)
    print(f"Reading mode. {WHY_NOT}")

# %% [markdown] id="cell-03"
# ## 1. The tile model, next to Triton's
#
# A Triton program computes its own addresses. Lesson 00's kernel, for one block of a vector:
#
# ```python
# pid = tl.program_id(0)
# offsets = pid * BLOCK + tl.arange(0, BLOCK)     # element indices of this block
# mask = offsets < n                              # the last block may run past the end
# x = tl.load(x_ptr + offsets, mask=mask)
# tl.store(out_ptr + offsets, y, mask=mask)
# ```
#
# A cuTile block asks for a tile and gets it:
#
# ```python
# bid = ct.bid(0)
# x = ct.load(a, index=(bid,), shape=(TILE,))      # tile number bid of a, cut into tiles of TILE
# ct.store(out, index=(bid,), tile=y)
# ```
#
# `a` is not a pointer but an **array**: cuTile receives the PyTorch tensor itself, with its shape
# and strides, so `a.shape[0]` is known inside the kernel. The index counts **tiles, not
# elements**: `ct.load(a, (i, j), (TM, TN))` cuts `a` into a grid of `TM × TN` tiles and returns
# tile `(i, j)`, elements `a[i*TM : (i+1)*TM, j*TN : (j+1)*TN]`. Where that tile runs past the edge
# of the array the load **pads** the missing elements (with what, `padding_mode=` says: zeros,
# NaN, ±inf, or by default *undetermined*), and the store **drops** them. The mask you wrote by
# hand in Triton is still there, but in the language. A tile wholly outside the array is undefined
# behaviour, so the grid covers the array and no more.
#
# Two more rules shape every kernel below. Tile dimensions are **compile-time constants and
# powers of two**: a parameter annotated `ConstInt` (that is, `ct.Constant[int]`) is baked into
# the compiled kernel, one compilation per value, as `tl.constexpr` is in Triton. And a kernel is
# **launched, never called**: `ct.launch(stream, grid, kernel, args)` with a grid of one to three
# block counts and the kernel's arguments in order, where Triton writes `kernel[grid](*args)`.
#
# ## Exercise 1 (3 points): tile arithmetic
#
# Write two functions in plain Python (no torch, no cuTile: this is graded on any machine):
#
# - `tile_grid(shape, tile_shape)`: how many tiles of `tile_shape` cover an array of `shape`,
#   per axis (the grid a kernel with one block per tile launches). A 1000 × 999 matrix in
#   128 × 128 tiles takes `(8, 8)`.
# - `tile_span(shape, index, tile_shape)`: the elements of the array that
#   `ct.load(array, index, tile_shape)` reads from memory, as one `range` of element indices per
#   axis; the rest of the tile is padding. For that matrix, tile `(7, 7)` reads
#   `(range(896, 1000), range(896, 999))`. The index is one the grid holds.
#
# The 1-D case is exactly Triton's mask: `tile_span((n,), (pid,), (BLOCK,))` holds the offsets of
# block `pid` for which `offsets < n`.

# %% id="cell-04" nbgrader={"grade": false, "grade_id": "tile_arithmetic_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def tile_grid(shape: tuple[int, ...], tile_shape: tuple[int, ...]) -> tuple[int, ...]:
    """Tiles of tile_shape along each axis of an array of shape: ceil(n / t) per axis."""
    ### BEGIN SOLUTION
    return tuple(-(-n // t) for n, t in zip(shape, tile_shape))
    ### END SOLUTION


def tile_span(shape: tuple[int, ...], index: tuple[int, ...],
              tile_shape: tuple[int, ...]) -> tuple[range, ...]:
    """Per axis, the range of element indices of an array of shape that
    ct.load(array, index, tile_shape) reads (the elements inside the array)."""
    ### BEGIN SOLUTION
    return tuple(range(i * t, min((i + 1) * t, n)) for n, i, t in zip(shape, index, tile_shape))
    ### END SOLUTION

# %% id="cell-05" nbgrader={"grade": true, "grade_id": "test_tile_arithmetic", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Exercise 1: the grid of tiles over an array, and the elements one tile reads.
def expected_span(shape, index, tile_shape):
    """Element by element: the indices of the tile that fall inside the array, per axis."""
    spans = []
    for n, i, t in zip(shape, index, tile_shape):
        inside = [i * t + e for e in range(t) if i * t + e < n]
        spans.append(range(inside[0], inside[-1] + 1))
    return tuple(spans)


def check_tiles(shape, tile_shape):
    grid = tuple(grading.formula_answer(tile_grid, shape, tile_shape))
    assert grid == tuple(-(-n // t) for n, t in zip(shape, tile_shape)), (
        f"tile_grid({shape}, {tile_shape}) = {grid}")
    corners = {tuple(g - 1 for g in grid), tuple(0 for _ in grid),
               tuple(g // 2 for g in grid)}
    for index in sorted(corners):
        span = grading.formula_answer(tile_span, shape, index, tile_shape)
        want = expected_span(shape, index, tile_shape)
        assert tuple(span) == want, (f"tile_span({shape}, {index}, {tile_shape}) = {span}, "
                                     f"expected {want}")


for shape, tile_shape in [((1000, 999), (128, 128)), ((98_437,), (1024,)), ((1,), (16,)),
                          ((256, 256), (64, 128)), ((2, 3, 77, 64), (1, 1, 64, 64))]:
    check_tiles(shape, tile_shape)
assert tuple(grading.formula_answer(tile_grid, (1000, 999), (128, 128))) == (8, 8)
assert tuple(grading.formula_answer(tile_span, (1000, 999), (7, 7), (128, 128))) == (
    range(896, 1000), range(896, 999))
### BEGIN HIDDEN TESTS
for shape, tile_shape in [((4097,), (1024,)), ((1029, 517), (64, 64)), ((77, 1030), (128, 256)),
                          ((16, 16), (16, 16)), ((3, 1000, 129), (1, 32, 64))
                          ] + grading.drawn_cases(
        lambda rng: tuple(zip(*((rng.randint(1, 3000), rng.choice([1, 16, 32, 64, 128, 256]))
                                for _ in range(rng.randint(1, 3))))), 4):
    check_tiles(shape, tile_shape)
### END HIDDEN TESTS
print("tile arithmetic correct")

# %% [markdown] id="cell-06"
# ## 2. A fused elementwise kernel: `silu(a) * b`
#
# Lesson 00's kernel is the first you write in cuTile. Next to your Triton version it has no
# offsets, no mask and no `n_elements` argument (the array knows its length), and the dtype
# conversions are methods of the tile (`.astype`). cuTile has no `sigmoid`, so silu is written out
# as $x / (1 + e^{-x})$, with `ct.exp`. The last tile runs past the end of the arrays: its loads
# read undetermined padding, which is harmless because the store drops those elements before they
# reach memory.
#
# Its wrapper flattens the tensors (a kernel over 1-D arrays serves every shape), launches one
# block per tile with `launch`, and returns the output.
#
# ## Exercise 2 (3 points, needs a GPU with cuTile): `silu_mul` in cuTile
#
# Write `silu_mul_kernel` and `silu_mul(a, b)` in cuTile: contiguous CUDA tensors of one shape (any
# number of dimensions) and one dtype, float32, float16 or bfloat16, computed in float32 inside
# the kernel, returned in the inputs' shape and dtype. `check_silu_mul_inputs(a, b)` raises a
# `ValueError` that says what to change for inputs the kernel cannot take; `SILU_MUL_TILE` (1024,
# lesson 00's block) is a good tile. During grading, as in every lesson, PyTorch may only allocate,
# view and copy, and fresh outputs are filled with NaN, so an element you never store shows up.

# %% id="cell-07" nbgrader={"grade": false, "grade_id": "silu_mul_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
# include: tilegym_edu/reference/cutile_kernels.py silu_mul_kernel solution


# include: tilegym_edu/reference/cutile_kernels.py silu_mul solution

# %% [markdown] id="cell-08"
# The checker the grader uses, yours to run: inputs drawn fresh for each case, and the definition
# in float64.

# %% id="cell-09" nbgrader={"grade": false, "grade_id": "silu_mul_checker", "locked": true, "schema_version": 3, "solution": false, "task": false}
def make_silu_inputs(case, generator):
    """a and b of case["shape"] and case["dtype"], standard normal, on the lesson's device."""
    return (check.random_tensor(case["shape"], case["dtype"], generator),
            check.random_tensor(case["shape"], case["dtype"], generator))


def silu_mul_reference(a, b):
    return a * torch.sigmoid(a) * b


if CUTILE_RUNS:
    for result in check.check(silu_mul, silu_mul_reference, make_silu_inputs, seeds=[0], cases=[
            {"shape": (1000,), "dtype": torch.float32},
            {"shape": (3, 333), "dtype": torch.bfloat16}]):
        print(result.describe())
else:
    print(f"silu_mul not checked: {WHY_NOT}")

# %% id="cell-10" nbgrader={"grade": true, "grade_id": "test_silu_mul_correct", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Exercise 2: silu_mul in cuTile is correct on odd sizes and shapes, float32, float16 and
# bfloat16 (GPU with cuTile).
grading.require_gpu("cuTile's silu_mul")
cutile.require("cuTile's silu_mul")
cases = [{"shape": shape, "dtype": dtype}
         for shape in [(1,), (7,), (1024,), (4097,), (37, 129), (1_000_003,)]
         for dtype in (torch.float32, torch.float16, torch.bfloat16)]
grading.assert_correct(silu_mul, silu_mul_reference, make_silu_inputs, cases,
                       tolerances={torch.float32: 1e-5})
### BEGIN HIDDEN TESTS
hidden_cases = [{"shape": shape, "dtype": dtype}
                for shape in [(2,), (1023,), (1025,), (5, 1, 613), (2, 3, 4, 5)]
                for dtype in (torch.float32, torch.float16, torch.bfloat16)]
grading.assert_correct(silu_mul, silu_mul_reference, make_silu_inputs, hidden_cases,
                       seeds=(11, 12), tolerances={torch.float32: 1e-5})
### END HIDDEN TESTS

# %% [markdown] id="cell-11"
# ### Exercise 2b (2 points, needs a GPU with cuTile): near copy bandwidth
#
# The same check as lesson 00's: your `silu_mul` timed interleaved with a device-to-device copy of
# the same bytes, float16, $2^{26}$ elements, the outputs of the timed runs checked too. The
# threshold is lesson 00's, 0.6; the reference solution measured 0.80 here on an H200 (the grade
# table prints what your GPU measured).

# %% id="cell-12" nbgrader={"grade": true, "grade_id": "test_silu_mul_bandwidth", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 2b: cuTile's silu_mul moves its bytes at a good fraction of copy bandwidth (GPU with
# cuTile).
grading.require_gpu("the bandwidth check of cuTile's silu_mul")
cutile.require("the bandwidth check of cuTile's silu_mul")
limit = grading.threshold("07_cutile", "silu_mul_bandwidth")
n = 2**26
input_sets = [make_silu_inputs({"shape": (n,), "dtype": torch.float16},
                               torch.Generator().manual_seed(seed)) for seed in (0, 1)]
grading.assert_bandwidth_fraction(silu_mul, input_sets, silu_mul_reference, torch.float16,
                                  bytes=3 * n * 2, limit=limit)

# %% [markdown] id="cell-13"
# ## 3. The tiled matmul: `ct.mma` and zero padding
#
# Lesson 03's pipelined kernel, in cuTile. One block computes one `TILE_M × TILE_N` tile of
# `c = a @ b`, in lesson 02's grouped order (`grouped_tile`, a plain Python function the kernel
# calls: cuTile compiles it into the kernel). The $K$ loop loads a tile of `a` and a tile of `b`
# by tile index and multiplies them with **`ct.mma(x, y, acc)`**, which is `x @ y + acc` on the
# tensor cores, keeping `acc`'s dtype (float32): Triton's `acc = tl.dot(x, y, acc)`.
#
# What is gone is every line of address arithmetic: no `stride_am`, no `offs_k`, no `% M` wrap of
# the rows, no `k < K` mask. In their place is **`padding_mode=ct.PaddingMode.ZERO`** on both loads.
# When $K$ is not a multiple of `TILE_K`, the last step's tiles run past the edge of `a` (to the
# right) and of `b` (below); padded with zeros, the extra products add nothing. With the default,
# undetermined padding, they would add whatever the padding holds: zero padding is the K mask.
#
# Also gone are `num_warps` and `num_stages`: the compiler decides how many threads run a block,
# how the tiles are staged in shared memory, whether to load them with TMA (only when the strides
# allow it, so rows of any length still work), and how deep to pipeline the loop. What you choose
# is the tiles and a few kernel options, and they matter more than Triton would lead you to
# expect. On an H200 (cuda-tile 1.7.0, 2026-12-02) this kernel, with no kernel options, ran a 4096³
# float16 product at 690 TFLOP/s on 128 × 128 × 64 tiles (0.90x cuBLAS) and at 45 TFLOP/s on
# 128 × 256 × 64, the tiles Triton's tuner picks for the same product: a 128 × 256 float32
# accumulator needs more registers than the compiler's default of four worker warps a block (one
# warpgroup) holds. The options go in the decorator. `@cutile_kernel(num_worker_warps=8)` gives
# such tiles two warpgroups, and they then ran level with 128 × 128; `@cutile_kernel(occupancy=2)`,
# two blocks per SM, took 128 × 128 × 64 from 0.92x to 0.95x cuBLAS at 4096³ and from 0.98x to
# 1.00x at 8192³ (interleaved, in one process, while the power limit held the clock at 1575 and
# 1410 MHz; at 1980 MHz the 4096³ product then ran at 718 TFLOP/s, 0.94x). The exercise's kernel
# comes decorated with the second, and `MATMUL_DEFAULT` holds 128 × 128 × 64 tiles; the course's
# `benchmarks/cutile_hints.py` times the rest.
#
# ## Exercise 3 (4 points, needs a GPU with cuTile): the tiled matmul in cuTile
#
# Write `matmul_kernel` and `matmul(a, b, config=None)`: `a` (M, K) and `b` (K, N), row-major
# CUDA tensors, both float16 or both bfloat16, any sizes; return (M, N) in their dtype,
# accumulated in float32. `config` overrides `MATMUL_DEFAULT` (`TILE_M`, `TILE_N`, `TILE_K`,
# `GROUP_M`); `tile_options(config, MATMUL_DEFAULT)` merges and checks it, and
# `check_matmul_inputs(a, b)` checks the inputs. Besides `ct.load` and `ct.mma`, the kernel needs
# `ct.cdiv` (tile counts, from `a.shape` and `b.shape`), `ct.zeros` with `dtype=ct.float32` for
# the accumulator, and `.astype(c.dtype)` before the store.

# %% id="cell-14" nbgrader={"grade": false, "grade_id": "matmul_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
# include: tilegym_edu/reference/cutile_kernels.py matmul_kernel solution


# include: tilegym_edu/reference/cutile_kernels.py matmul solution

# %% id="cell-15" nbgrader={"grade": false, "grade_id": "matmul_checker", "locked": true, "schema_version": 3, "solution": false, "task": false}
#: other tiles than the default: 64 x 64 tiles make 153 output tiles of 1029 x 517, more than an
#: H200 has SMs, so the persistent kernel's blocks loop over tiles
SMALL_TILES = {"TILE_M": 64, "TILE_N": 64, "TILE_K": 32, "GROUP_M": 4}


def matmul_reference(a, b, *config):
    """The definition. The grader calls it on float64 copies of your inputs."""
    return a @ b


def make_matmul_inputs(case, generator):
    """a (M, K) and b (K, N) for case = {"M", "N", "K", "dtype"}, standard normal, row-major, on
    the lesson's device, then case["config"] if the case names one."""
    a = check.random_tensor((case["M"], case["K"]), case["dtype"], generator)
    b = check.random_tensor((case["K"], case["N"]), case["dtype"], generator)
    return (a, b) + ((case["config"],) if "config" in case else ())


#: odd sizes (K = 33 and 771: rows that are not multiples of 16 bytes), a single element, whole
#: tiles, K = 1, in both dtypes; the first and third with the small tiles too
MATMUL_CASES = [{"M": M, "N": N, "K": K, "dtype": dtype, **extra}
                for M, N, K, extra in [(1029, 517, 771, {}), (1, 1, 1, {}), (256, 256, 256, {}),
                                       (77, 1030, 33, {}), (150, 150, 1, {}),
                                       (1029, 517, 771, {"config": SMALL_TILES}),
                                       (256, 256, 256, {"config": SMALL_TILES})]
                for dtype in (torch.float16, torch.bfloat16)]

if CUTILE_RUNS:
    for result in check.check(matmul, matmul_reference, make_matmul_inputs, seeds=[0], cases=[
            {"M": 200, "N": 136, "K": 72, "dtype": torch.float16},
            {"M": 77, "N": 30, "K": 33, "dtype": torch.bfloat16, "config": SMALL_TILES}]):
        print(result.describe())
else:
    print(f"matmul not checked: {WHY_NOT}")

# %% id="cell-16" nbgrader={"grade": true, "grade_id": "test_matmul_correct", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
# Exercise 3: the cuTile matmul is correct on odd and degenerate shapes, float16 and bfloat16,
# with its default tiles and with others (GPU with cuTile).
grading.require_gpu("cuTile's matmul")
cutile.require("cuTile's matmul")
grading.assert_correct(matmul, matmul_reference, make_matmul_inputs, MATMUL_CASES, seeds=(0, 1))
### BEGIN HIDDEN TESTS
hidden_cases = [{"M": M, "N": N, "K": K, "dtype": dtype}
                for M, N, K in [(129, 257, 65), (3, 5, 200), (300, 1, 100)]
                for dtype in (torch.float16, torch.bfloat16)]
grading.assert_correct(matmul, matmul_reference, make_matmul_inputs, hidden_cases, seeds=(11,))
### END HIDDEN TESTS

# %% [markdown] id="cell-17"
# ### Exercise 3b (3 points, needs a GPU with cuTile): against Triton and cuBLAS
#
# At 4096³ in float16, your `matmul` (its default tiles) is timed interleaved with two baselines:
# lesson 03's Triton kernel at its default configuration, the same 128 × 128 × 64 tiles with
# 8 warps and 3 stages, and cuBLAS (`torch.matmul`). Both ratios must reach their thresholds,
# 0.8 against Triton and 0.6 against cuBLAS; the reference solution measured 1.03 and 0.96 here on
# an H200 (the cell prints what your GPU measured).

# %% id="cell-18" nbgrader={"grade": true, "grade_id": "test_matmul_speed", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Exercise 3b: the cuTile matmul against lesson 03's Triton kernel (the same tiles) and against
# cuBLAS, float16 4096^3 (GPU with cuTile).
grading.require_gpu("the speed of cuTile's matmul")
cutile.require("the speed of cuTile's matmul")
size = 4096
input_sets = [make_matmul_inputs({"M": size, "N": size, "K": size, "dtype": torch.float16},
                                 torch.Generator().manual_seed(seed)) for seed in (0, 1)]
a, b = input_sets[0]
yours, triton_default, cublas = grading.measure_speed(
    matmul, {"Triton (lesson 03, default)": lambda: triton_matmul.pipelined_matmul(a, b),
             "cuBLAS": lambda: torch.matmul(a, b)},
    input_sets, matmul_reference, torch.float16, flops=2 * size**3)
grading.assert_ratio(triton_default.median_ms / yours.median_ms,
                     grading.threshold("07_cutile", "matmul_vs_triton"))
grading.assert_ratio(cublas.median_ms / yours.median_ms,
                     grading.threshold("07_cutile", "matmul_vs_cublas"))

# %% [markdown] id="cell-19"
# ## 4. A persistent matmul, and latency hints
#
# Lesson 03's persistent kernel launched one program per SM and let each walk over output tiles,
# so that one tile's epilogue overlaps the next tile's loads; it needed tensor descriptors, and so
# rows of a multiple of 16 bytes. In cuTile the loop is the same,
# `for tile in range(ct.bid(0), num_tiles, ct.num_blocks(0))`, with `ct.num_blocks(0)` the grid's
# size, and the loads inside are the matmul's own. There is no descriptor to build: the compiler
# uses TMA where the layout allows and ordinary loads where it does not, so any $K$ works.
#
# What stands nearest to `num_stages` is the **latency hint**: `ct.load(..., latency=L)`, a
# constant from 1 to 10, tells the compiler how heavy the DRAM traffic behind that load is; higher
# values typically make it prefetch deeper. It is a hint, not a count of buffers. Whether it helps
# this loop, and which value, is a question for your GPU: the cell after the exercise times a few.
# The reference's `PERSISTENT_DEFAULT` is 128 × 256 × 64 tiles with `LATENCY=5`, its kernel
# decorated `@cutile_kernel(num_worker_warps=8)`: on the H200 that ran at 1.02x cuBLAS at the speed
# cell's 8192 × 8192 × 512 and 0.96x at 4096³, where 128 × 128 tiles reached 0.85x and 0.76x.
#
# ## Exercise 4 (3 points, needs a GPU with cuTile): the persistent matmul
#
# Write `persistent_matmul_kernel` and `persistent_matmul(a, b, config=None)`: the inputs and result
# of `matmul`, with one block per SM (never more blocks than output tiles; the SM count is
# `torch.cuda.get_device_properties(a.device).multi_processor_count`), each looping over tiles.
# `config` overrides `PERSISTENT_DEFAULT` (`TILE_M`, `TILE_N`, `TILE_K`, `GROUP_M` and `LATENCY`,
# the hint on the loads of `a` and `b`).

# %% id="cell-20" nbgrader={"grade": false, "grade_id": "persistent_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
# include: tilegym_edu/reference/cutile_kernels.py persistent_matmul_kernel solution


# include: tilegym_edu/reference/cutile_kernels.py persistent_matmul solution

# %% id="cell-21" nbgrader={"grade": true, "grade_id": "test_persistent_correct", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Exercise 4: the persistent matmul is correct on the matmul's cases, with its default tiles and
# small ones that make blocks loop over several tiles, and another latency hint (GPU with cuTile).
grading.require_gpu("cuTile's persistent matmul")
cutile.require("cuTile's persistent matmul")
hinted = {**SMALL_TILES, "LATENCY": 8}
cases = [{**case, "config": hinted} if "config" in case else case for case in MATMUL_CASES]
grading.assert_correct(persistent_matmul, matmul_reference, make_matmul_inputs, cases,
                       seeds=(0, 1))
### BEGIN HIDDEN TESTS
hidden_cases = [{"M": M, "N": N, "K": K, "dtype": dtype, "config": config}
                for M, N, K in [(2000, 700, 65), (129, 257, 40)]
                for dtype in (torch.float16, torch.bfloat16)
                for config in ({**SMALL_TILES, "LATENCY": 1}, {"TILE_M": 32, "TILE_N": 32})]
grading.assert_correct(persistent_matmul, matmul_reference, make_matmul_inputs, hidden_cases,
                       seeds=(11,))
### END HIDDEN TESTS

# %% [markdown] id="cell-22"
# Which latency hint suits this loop? A few values at 8192 × 8192 × 512 (the shape of the speed
# check below, where each tile has only 8 steps of $K$ and the persistent loop matters most),
# timed interleaved with cuBLAS:

# %% id="cell-23" tags=["demo"]
if CUTILE_RUNS:
    a = torch.randn(8192, 512, device=DEVICE, dtype=torch.float16)
    b = torch.randn(512, 8192, device=DEVICE, dtype=torch.float16)
    hints = {f"persistent, LATENCY={hint}":
             (lambda hint=hint: persistent_matmul(a, b, {"LATENCY": hint}))
             for hint in (1, 3, 6, 10)}
    bench.print_table(bench.compare({**hints, "cuBLAS": lambda: torch.matmul(a, b)},
                                    flops=2 * 8192 * 8192 * 512), baseline="cuBLAS")
else:
    print(f"The latency hints are not timed: {WHY_NOT}")

# %% [markdown] id="cell-24"
# ### Exercise 4b (3 points, needs a GPU with cuTile): against Triton and cuBLAS
#
# At 8192 × 8192 × 512 in float16, your `persistent_matmul` is timed interleaved with cuBLAS and,
# where tensor descriptors run (compute capability 9.0 or newer), with lesson 03's persistent
# Triton kernel at its default configuration. Each ratio must reach its threshold, 0.6 against
# cuBLAS and 0.8 against Triton; the reference solution measured 1.02 and 1.05 here on an H200.

# %% id="cell-25" nbgrader={"grade": true, "grade_id": "test_persistent_speed", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Exercise 4b: the persistent cuTile matmul against cuBLAS and, on compute capability 9.0+,
# lesson 03's persistent Triton kernel, float16 8192 x 8192 x 512 (GPU with cuTile).
grading.require_gpu("the speed of cuTile's persistent matmul")
cutile.require("the speed of cuTile's persistent matmul")
M, N, K = 8192, 8192, 512
input_sets = [make_matmul_inputs({"M": M, "N": N, "K": K, "dtype": torch.float16},
                                 torch.Generator().manual_seed(seed)) for seed in (0, 1)]
a, b = input_sets[0]
baselines = {"cuBLAS": lambda: torch.matmul(a, b)}
try:
    grading.require_tensor_descriptors("lesson 03's persistent Triton kernel")
    baselines["Triton (lesson 03, persistent)"] = lambda: triton_matmul.persistent_matmul(a, b)
except grading.NeedsGPU as why:
    print(f"compared with cuBLAS only: {why}")
yours, cublas, *triton_persistent = grading.measure_speed(
    persistent_matmul, baselines, input_sets, matmul_reference, torch.float16,
    flops=2 * M * N * K)
grading.assert_ratio(cublas.median_ms / yours.median_ms,
                     grading.threshold("07_cutile", "persistent_vs_cublas"))
for measured in triton_persistent:
    grading.assert_ratio(measured.median_ms / yours.median_ms,
                         grading.threshold("07_cutile", "persistent_vs_triton"))

# %% [markdown] id="cell-26"
# ## 5. FlashAttention forward
#
# Lesson 04's kernel streams the keys and values of one (batch, head) past a tile of queries,
# keeping the online softmax's running maximum `m_i`, sum `l_i` and output `acc` on chip. In cuTile
# the arrays are 4-D, `(batch, heads, seq, head_dim)`, and the tiles are too: the queries are tile
# `(batch, head, block_m, 0)` of shape `(1, 1, TILE_M, HEAD_DIM)`, reshaped to
# `(TILE_M, HEAD_DIM)`. Three things set the kernel you write in Exercise 6 apart from lesson 04's.
#
# - **The transposed key tile.** `q @ kᵀ` needs k's tile as `(HEAD_DIM, TILE_N)`. Lesson 04
#   loaded it as `(TILE_N, HEAD_DIM)` and multiplied by `tl.trans(k)`; cuTile's
#   `order=(0, 1, 3, 2)` loads tile `(batch, head, 0, j)` of k viewed with its last two axes
#   swapped, already transposed.
# - **Masks only where needed.** Key tiles wholly inside the sequence and, when causal, wholly
#   below the diagonal need no mask. Lesson 04 wrote two loops by hand, one without masks and one
#   with. Here one loop tests `j >= first_masked`, and cuTile's compiler splits it into the same
#   two loops (a loop whose only `if` compares the loop index with a fixed value is split there).
#   The masks are `ct.where(valid, qk, -inf)`.
# - **The causal stop.** A causal query tile stops at the key tile holding its last row's diagonal.
#
# The tiles matter here too. On the H200, 64 queries against 128 keys a step ran batch 4, 32 heads,
# 4096 positions, head size 128 at 575 TFLOP/s, 0.92x cuDNN and 1.24x the course's Triton forward.
# The same kernel on 128 × 128 tiles ran at 301. `ATTENTION_DEFAULT` is 64 × 128.
#
# Exercise 5 is the arithmetic of the last two, where the masks start and where a causal tile
# stops, in plain Python.
#
# ## Exercise 5 (2 points): the key tiles of a query tile
#
# Write `key_tiles(block_m, seq_len, TILE_M, TILE_N, causal)` for query tile `block_m` (rows
# `block_m * TILE_M` up to `(block_m + 1) * TILE_M`, those below `seq_len`), returning
# `(end, first_masked)`:
#
# - `end`: the number of key tiles (`TILE_N` keys each) the tile must visit: key tile `j` is
#   visited for `j < end`, and no tile at or past `end` holds a key any of its rows may see
#   (keys `< seq_len`; when causal, key `c` is seen by row `r` only if `c <= r`);
# - `first_masked`: the first key tile that needs a mask: every tile before it holds only keys
#   that every row of the tile may see; it is `end` when no visited tile needs one.
#
# Tiles are powers of two of at least 16.

# %% id="cell-27" nbgrader={"grade": false, "grade_id": "key_tiles_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def key_tiles(block_m: int, seq_len: int, TILE_M: int, TILE_N: int,
              causal: bool) -> tuple[int, int]:
    """(end, first_masked) for query tile block_m: the key tiles visited are 0 .. end - 1, and
    those before first_masked need no mask."""
    ### BEGIN SOLUTION
    if causal:
        end = -(-min((block_m + 1) * TILE_M, seq_len) // TILE_N)
        first_masked = min(block_m * TILE_M // TILE_N, seq_len // TILE_N)
    else:
        end = -(-seq_len // TILE_N)
        first_masked = seq_len // TILE_N
    return end, first_masked
    ### END SOLUTION

# %% id="cell-28" nbgrader={"grade": true, "grade_id": "test_key_tiles", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 5: the key tiles each query tile visits, and the first that needs a mask, against
# every (row, key) pair.
def expected_key_tiles(block_m, seq_len, TILE_M, TILE_N, causal):
    rows = range(block_m * TILE_M, min((block_m + 1) * TILE_M, seq_len))
    tiles = -(-seq_len // TILE_N) + 1

    def seen(r, c):
        return c < seq_len and (not causal or c <= r)
    useful = [j for j in range(tiles) if any(seen(r, c) for r in rows
                                             for c in range(j * TILE_N, (j + 1) * TILE_N))]
    end = max(useful) + 1
    whole = [all(seen(r, c) for r in rows for c in range(j * TILE_N, (j + 1) * TILE_N))
             for j in range(end)]
    return end, whole.index(False) if False in whole else end


def check_key_tiles(seq_lens, tile_pairs):
    for seq_len in seq_lens:
        for TILE_M, TILE_N in tile_pairs:
            for causal in (False, True):
                for block_m in range(-(-seq_len // TILE_M)):
                    got = tuple(grading.formula_answer(key_tiles, block_m, seq_len, TILE_M,
                                                       TILE_N, causal))
                    want = expected_key_tiles(block_m, seq_len, TILE_M, TILE_N, causal)
                    assert got == want, (
                        f"key_tiles(block_m={block_m}, seq_len={seq_len}, TILE_M={TILE_M}, "
                        f"TILE_N={TILE_N}, causal={causal}) = {got}, expected (end, first_masked)"
                        f" = {want}")


check_key_tiles([1, 77, 129], [(16, 16), (32, 16), (16, 32)])
### BEGIN HIDDEN TESTS
check_key_tiles([64, 100, 200], [(64, 16), (16, 64), (32, 32)])
for seq_len, tiles in grading.drawn_cases(
        lambda rng: (rng.randint(1, 300), (rng.choice([16, 32, 64]), rng.choice([16, 32, 64]))), 2):
    check_key_tiles([seq_len], [tiles])
### END HIDDEN TESTS
print("key tiles correct")

# %% [markdown] id="cell-29"
# ## Exercise 6 (4 points, needs a GPU with cuTile): FlashAttention forward in cuTile
#
# Write `flash_attention_kernel` and `flash_attention(q, k, v, causal=False, config=None)`:
# softmax(q kᵀ / √head_dim) v, causal if asked, for `q`, `k`, `v` of one shape
# `(batch, heads, seq, head_dim)`, contiguous CUDA tensors, all float16 or all bfloat16, head_dim
# 64 or 128 (a tile dimension: a power of two), any `seq`; the scores in float32, the output of
# q's shape and dtype. `config` overrides `ATTENTION_DEFAULT` (`TILE_M` queries and `TILE_N` keys
# per tile). As in lesson 04, the softmax runs in base 2: pass `qk_scale = LOG2E / √head_dim` and
# use `ct.exp2`. The grid is (query tiles, batch × heads). A parameter annotated `float` is a
# runtime scalar, not a constant. `check_attention_inputs(q, k, v)` checks the inputs. Besides
# `ct.mma` and `ct.where`, the kernel needs `ct.arange` and `ct.full` (row, column and mask tiles),
# `ct.max` and `ct.sum` (with `axis=-1, keepdims=True`), `ct.maximum`, and a tile's `.reshape`;
# `t[:, None]` adds an axis, as in NumPy.
#
# `@cutile_kernel(occupancy=2)` asks the compiler for two blocks per SM, as cuTile's own attention
# sample does.

# %% id="cell-30" nbgrader={"grade": false, "grade_id": "flash_attention_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
# include: tilegym_edu/reference/cutile_kernels.py flash_attention_kernel solution


# include: tilegym_edu/reference/cutile_kernels.py flash_attention solution

# %% id="cell-31" nbgrader={"grade": false, "grade_id": "attention_checker", "locked": true, "schema_version": 3, "solution": false, "task": false}
# include: tilegym_edu/reference/attention.py attention_by_head as attention_reference


def cudnn_attention(q, k, v, causal=False):
    """PyTorch's SDPA with its cuDNN backend alone: NVIDIA's fused attention, the vendor's."""
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def make_attention_inputs(case, generator):
    """(q, k, v, causal) for case = {"batch", "heads", "seq", "head_dim", "dtype"}: standard
    normal, contiguous, on the lesson's device; causal = case.get("causal", False); then
    {"TILE_M", "TILE_N"} from case["tiles"] if the case names them."""
    shape = (case["batch"], case["heads"], case["seq"], case["head_dim"])
    q, k, v = (check.random_tensor(shape, case["dtype"], generator) for _ in range(3))
    tiles = case.get("tiles")
    config = ({"TILE_M": tiles[0], "TILE_N": tiles[1]},) if tiles else ()
    return (q, k, v, case.get("causal", False)) + config


if CUTILE_RUNS:
    for result in check.check(flash_attention, attention_reference, make_attention_inputs,
                              seeds=[0], cases=[
            {"batch": 2, "heads": 2, "seq": 100, "head_dim": 64, "dtype": torch.float16},
            {"batch": 1, "heads": 2, "seq": 77, "head_dim": 128, "dtype": torch.bfloat16,
             "causal": True}]):
        print(result.describe())
else:
    print(f"flash_attention not checked: {WHY_NOT}")

# %% id="cell-32" nbgrader={"grade": true, "grade_id": "test_flash_attention_correct", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
# Exercise 6: flash_attention in cuTile is correct, causal and not, on odd lengths, head_dim 64
# and 128, float16 and bfloat16, with its own tiles and with query tiles wider and narrower than
# key tiles (GPU with cuTile).
grading.require_gpu("cuTile's flash_attention")
cutile.require("cuTile's flash_attention")
cases = [{"batch": batch, "heads": heads, "seq": seq, "head_dim": head_dim, "dtype": dtype,
          "causal": causal, **extra}
         for batch, heads, seq, head_dim, extra in [
             (2, 3, 1000, 64, {}), (2, 3, 77, 128, {}), (1, 1, 1, 64, {}),
             (1, 2, 333, 64, {"tiles": (64, 32)}), (1, 2, 333, 64, {"tiles": (32, 64)})]
         for causal in (False, True)
         for dtype in (torch.float16, torch.bfloat16)]
grading.assert_correct(flash_attention, attention_reference, make_attention_inputs, cases,
                       seeds=(0,))
### BEGIN HIDDEN TESTS
hidden_cases = [{"batch": 1, "heads": 2, "seq": seq, "head_dim": head_dim, "dtype": dtype,
                 "causal": causal}
                for seq, head_dim in [(129, 64), (513, 128)]
                for causal in (False, True)
                for dtype in (torch.float16, torch.bfloat16)]
grading.assert_correct(flash_attention, attention_reference, make_attention_inputs, hidden_cases,
                       seeds=(11,))
### END HIDDEN TESTS

# %% [markdown] id="cell-33"
# ### Exercise 6b (3 points, needs a GPU with cuTile): against Triton and cuDNN
#
# Batch 4, 32 heads, seq 4096, head_dim 128, float16, non-causal (lesson 04's shape): your
# `flash_attention` timed interleaved with lesson 04's Triton kernel (tuned once first, then its
# cached configuration) and with cuDNN's fused attention through PyTorch's SDPA (the fastest
# backend lesson 04 found on an H200). Both ratios must reach their thresholds, 0.8 against Triton
# and 0.5 against cuDNN; the reference solution measured 1.24 and 0.92 here on an H200.

# %% id="cell-34" nbgrader={"grade": true, "grade_id": "test_flash_attention_speed", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Exercise 6b: cuTile's flash_attention against lesson 04's Triton kernel and cuDNN's attention
# (SDPA), float16, batch 4, 32 heads, seq 4096, head_dim 128 (GPU with cuTile).
grading.require_gpu("the speed of cuTile's flash_attention")
cutile.require("the speed of cuTile's flash_attention")
B, H, S, D = 4, 32, 4096, 128
case = {"batch": B, "heads": H, "seq": S, "head_dim": D, "dtype": torch.float16}
input_sets = [make_attention_inputs(case, torch.Generator().manual_seed(seed))[:3]
              for seed in (0, 1)]
q, k, v = input_sets[0]
triton_attention.flash_attention(q, k, v)     # tuned once here (or found in the cache)
yours, triton_flash, cudnn = grading.measure_speed(
    flash_attention, {"Triton (lesson 04)": lambda: triton_attention.flash_attention(q, k, v),
                      "cuDNN (SDPA)": lambda: cudnn_attention(q, k, v)},
    input_sets, attention_reference, torch.float16, flops=4 * B * H * S * S * D)
grading.assert_ratio(triton_flash.median_ms / yours.median_ms,
                     grading.threshold("07_cutile", "flash_vs_triton"))
grading.assert_ratio(cudnn.median_ms / yours.median_ms,
                     grading.threshold("07_cutile", "flash_vs_cudnn"))

# %% [markdown] id="cell-35"
# ## 6. Triton, cuTile and the vendor, side by side
#
# One table per kernel: the throughput of your cuTile kernel, the course's Triton kernel and the
# vendor library on the same inputs, timed interleaved (GB/s for the memory-bound `silu_mul`,
# TFLOP/s for the rest), and all of them on one roofline. Then, per kernel, the lines of code of
# the course's Triton and cuTile kernels (docstrings, comments and blank lines left out) and the
# time of a first call in bfloat16 less a second call: compilation, mostly. Triton's attention is
# left out there (its first call tunes as well), and so is its persistent matmul. A first call may
# show less than a compile: Triton keeps compiled kernels on disk (`~/.triton/cache`), cuTile too
# (where `CUDA_TILE_CACHE_DIR` says), and cuTile may reuse a kernel the checks above compiled in
# bfloat16 with the same constants. Every number below is measured on your GPU. What an H200
# measured, with every tile shape tried, is in the course's
# `docs/results/h200-2026-12-02-cutile.md`.

# %% id="cell-36" tags=["demo"]
from tilegym_edu.includes import code_lines
from tilegym_edu.reference import llama_kernels


def first_call_s(fn):
    """Seconds of a first call of fn less those of a second: its compilation, mostly."""
    times = []
    for _ in range(2):
        start = time.perf_counter()
        fn()
        device.synchronize()
        times.append(time.perf_counter() - start)
    return times[0] - times[1]


CUTILE_FILE = "tilegym_edu/reference/cutile_kernels.py"
LINES = {  # kernel: (Triton file and functions, cuTile functions)
    "silu_mul": (("tilegym_edu/reference/llama_kernels.py", "swiglu_kernel"),
                 ("silu_mul_kernel",)),
    "matmul": (("tilegym_edu/reference/pipelined.py", "pipelined_matmul_kernel"),
               ("matmul_kernel", "grouped_tile")),
    "persistent matmul": (("tilegym_edu/reference/pipelined.py", "persistent_matmul_kernel"),
                          ("persistent_matmul_kernel", "grouped_tile")),
    "flash attention": (("tilegym_edu/reference/attention.py", "flash_attention_kernel",
                         "attention_blocks"), ("flash_attention_kernel",)),
}
if CUTILE_RUNS:
    n = 2**26
    x, y = (torch.randn(n, device=DEVICE, dtype=torch.float16) for _ in range(2))
    h = torch.cat([x.view(-1, 4096), y.view(-1, 4096)], dim=1)   # swiglu's input: [gate | up]
    size = 4096
    a, b = (torch.randn(size, size, device=DEVICE, dtype=torch.float16) for _ in range(2))
    ap = torch.randn(8192, 512, device=DEVICE, dtype=torch.float16)
    bp = torch.randn(512, 8192, device=DEVICE, dtype=torch.float16)
    B, H, S, D = 4, 32, 4096, 128
    q, k, v = (torch.randn(B, H, S, D, device=DEVICE, dtype=torch.float16) for _ in range(3))
    rows = {
        "silu_mul": ({"cuTile (yours)": lambda: silu_mul(x, y),
                      "Triton (lesson 06's swiglu)": lambda: llama_kernels.swiglu(h),
                      "copy (same bytes)": grading.copy_baseline(3 * 2 * n)},
                     {"bytes": 3 * 2 * n,   # 6 FLOPs an element, as lesson 00 counts them
                      "flops": {"cuTile (yours)": 6 * n, "Triton (lesson 06's swiglu)": 6 * n}}),
        "matmul": ({"cuTile (yours)": lambda: matmul(a, b),
                    "Triton (lesson 03, default)": lambda: triton_matmul.pipelined_matmul(a, b),
                    "cuBLAS": lambda: torch.matmul(a, b)},
                   {"flops": 2 * size**3, "bytes": 3 * size * size * 2}),
        "persistent matmul": ({"cuTile (yours)": lambda: persistent_matmul(ap, bp),
                               "cuBLAS": lambda: torch.matmul(ap, bp)},
                              {"flops": 2 * 8192 * 8192 * 512,
                               "bytes": (2 * 8192 * 512 + 8192 * 8192) * 2}),
        "flash attention": ({"cuTile (yours)": lambda: flash_attention(q, k, v),
                             "Triton (lesson 04)": (
                                 lambda: triton_attention.flash_attention(q, k, v)),
                             "cuDNN (SDPA)": lambda: cudnn_attention(q, k, v)},
                            {"flops": 4 * B * H * S * S * D, "bytes": 4 * B * H * S * D * 2}),
    }
    facts = device.info()
    if facts.compute_capability >= (9, 0):
        rows["persistent matmul"][0]["Triton (lesson 03, persistent)"] = (
            lambda: triton_matmul.persistent_matmul(ap, bp))
    # first calls in bfloat16, which nothing above ran: a compilation each (Triton's
    # autotuned kernels are left out: their first call tunes as well)
    xb, yb, hb, ab, bb, apb, bpb, qb, kb, vb = (t.bfloat16() for t in (x, y, h, a, b, ap, bp,
                                                                     q, k, v))
    first_calls = {
        "silu_mul": (lambda: llama_kernels.swiglu(hb), lambda: silu_mul(xb, yb)),
        "matmul": (lambda: triton_matmul.pipelined_matmul(ab, bb), lambda: matmul(ab, bb)),
        "persistent matmul": (None, lambda: persistent_matmul(apb, bpb)),
        "flash attention": (None, lambda: flash_attention(qb, kb, vb)),
    }
    measured = []
    for kernel, (candidates, work) in rows.items():
        print(f"\n{kernel}")
        results = bench.compare(candidates, **work)
        bench.print_table(results, baseline="cuTile (yours)")
        measured += [m for m in results if m.name != "copy (same bytes)"]
    roofline.plot_roofline(measured, title="Triton, cuTile and the vendor, float16")
    print(f"\n{'kernel':<18} {'lines: Triton':>14} {'cuTile':>7} {'first call s: Triton':>21} "
          f"{'cuTile':>7}")
    for kernel, ((triton_file, *triton_names), cutile_names) in LINES.items():
        triton_first, cutile_first = (f"{first_call_s(fn):.2f}" if fn else "-"
                                      for fn in first_calls[kernel])
        print(f"{kernel:<18} {code_lines(triton_file, *triton_names):>14} "
              f"{code_lines(CUTILE_FILE, *cutile_names):>7} {triton_first:>21} {cutile_first:>7}")
else:
    print(f"The comparison needs cuTile kernels that run: {WHY_NOT}")
    for kernel, ((triton_file, *triton_names), cutile_names) in LINES.items():
        print(f"{kernel}: {code_lines(triton_file, *triton_names)} lines of Triton, "
              f"{code_lines(CUTILE_FILE, *cutile_names)} of cuTile")

# %% [markdown] id="cell-37"
# ## What you have seen
#
# The same four kernels, written twice. In cuTile the index arithmetic and the masks of every
# Triton kernel of this course became tile indices and a padding mode, `tl.dot` became `ct.mma`,
# `tl.constexpr` became `ct.Constant`, the persistent kernel lost its tensor descriptors and its
# 16-byte rule, and the attention kernel's two hand-written loops became one that the compiler
# splits. What you gave up is control: there is no `num_warps` and no `num_stages` to set, only
# tiles, latency hints and a few kernel options (blocks per SM, worker warps, blocks launched
# together as a cluster), so when the compiler's choice is wrong there are fewer levers. Whether
# it is wrong on your GPU is what the tables above measured: read them kernel by kernel, since the
# answer need not be the same for a memory-bound kernel, a matmul and an attention.
#
# This is the last lesson of the course. From here, TileGym's own kernels
# (`src/tilegym/ops/cutile/`) are written the way this lesson wrote them, and the course's tools
# (the checker, the timer, the roofline) work on them unchanged.
