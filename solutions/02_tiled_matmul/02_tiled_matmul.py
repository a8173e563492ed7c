# tilegym-notebook: {"metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}, "language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}

# %% [markdown] id="cell-00"
# # Lesson 02: Tiled matrix multiplication — reuse, `tl.dot`, and the order of programs
#
# Lesson 01's naive kernel gives every output element its own program. Each program reads a whole
# row of $A$ and a whole column of $B$, and its neighbours read the same row and column again: for
# $n \times n$ matrices the kernel asks memory for about $2n/3$ times the bytes the problem needs,
# and it never touches the GPU's matrix units. This lesson fixes both, in the kernel every fast
# matmul is built on:
#
# 1. **Tiles and reuse**: each program computes a `BLOCK_M` × `BLOCK_N` tile of $C$, so every block
#    of $A$ it loads serves `BLOCK_N` outputs and every block of $B$ serves `BLOCK_M`. You count
#    what that saves and derive the arithmetic intensity as a function of the block sizes.
# 2. **`tl.dot`**: one tile product, run on the tensor cores.
# 3. **Masks at the edges** and **grouped program ordering**, which decides how well the L2 cache
#    catches what the tiles still load twice.
# 4. **Fusion and batching**: a bias + ReLU epilogue applied before the tile ever leaves the chip,
#    and a batched matmul on arbitrary strides.
#
# | exercise | points | graded |
# | --- | --- | --- |
# | 1. the bytes a tiled matmul loads, as a formula | 2 | everywhere |
# | 2. the tiled matmul kernel: any shape, fp32 and fp16, strided inputs | 4 | everywhere |
# | 3. its memory traffic, within a budget | 2 | everywhere |
# | 4. its speed: over the naive kernel, and as a fraction of cuBLAS | 2 + 2 | GPU only |
# | 5. a fused bias + ReLU epilogue | 3 | everywhere |
# | 6. batched matmul on arbitrary strides | 3 | everywhere |
#
# **Grading.** *GPU only* cells are graded on a GPU; without one the grader marks them *needs GPU*.
# Cells marked *Exercise* are graded by `tilegym-edu grade 02_tiled_matmul` (or `make
# grade LESSON=02_tiled_matmul`), which grades a copy of this notebook and never changes it.

# %% [markdown] id="cell-01"
# ## Setup
#
# `import tilegym_edu` comes first, as always: it decides whether kernels run on your GPU or in
# Triton's CPU interpreter. The block sizes of this lesson come from `device.size`: 128 × 128 × 32
# on a GPU (the reference solution's default), 32 × 32 × 32 in the interpreter, where every program
# costs milliseconds.

# %% id="cell-02" nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import tilegym_edu  # noqa: F401  (first: decides GPU or interpreter mode before triton is imported)

import torch
import triton
import triton.language as tl

from tilegym_edu import bench, check, device, grading, roofline, traffic
from tilegym_edu.reference import matmul as reference    # the course's reference solution
from tilegym_edu.reference.matmul import naive_matmul    # lesson 01's kernel: the baseline

print(device.banner())
DEVICE = device.DEVICE
BLOCK_M, BLOCK_N, BLOCK_K = device.size(gpu=(128, 128, 32), cpu=(32, 32, 32))
spec, _ = roofline.resolve_spec()    # this GPU's datasheet, or an H200's without a GPU

# %% [markdown] id="cell-03"
# ## 1. Where lesson 01 left us
#
# The problem is the same: $C = AB$ with $A$ of shape $(M, K)$ and $B$ of shape $(K, N)$, $2MNK$
# FLOPs, and at least $(MK + KN + MN)\,e$ bytes of memory traffic for elements of $e$ bytes. The
# helpers below are the checker's: `matmul_reference` is the definition (the grader runs it in
# float64 on the CPU), and `make_matmul_inputs` draws fresh random inputs for one *case*, a dict
# with `M`, `N`, `K`, the `dtype`, optionally a `layout` (transposed views, or every other column of
# a wider tensor) and optionally the `blocks` to call your kernel with.

# %% id="cell-04" nbgrader={"grade": false, "grade_id": "matmul_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
def matmul_reference(a, b, *blocks):
    """The definition. The grader calls it on float64 CPU copies of your inputs."""
    return a @ b


def make_matmul_inputs(case, generator):
    """a (M, K) and b (K, N) for case = {"M", "N", "K", "dtype"}, standard normal, on the lesson's
    device, followed by the block sizes case["blocks"] = (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M) when
    the case names them. case["layout"]: "a transposed" / "b transposed" / "both transposed" make
    transposed views (a of a (K, M) tensor: strides (1, M)); "strided" takes every other column of
    a (M, 2K) tensor for a and every other row of a (2K, N) tensor for b."""
    M, N, K, dtype = case["M"], case["N"], case["K"], case["dtype"]
    layout = case.get("layout", "contiguous")
    if layout == "strided":
        a = check.random_tensor((M, 2 * K), dtype, generator)[:, ::2]
        b = check.random_tensor((2 * K, N), dtype, generator)[::2]
    else:
        a = (check.random_tensor((K, M), dtype, generator).T
             if layout in ("a transposed", "both transposed")
             else check.random_tensor((M, K), dtype, generator))
        b = (check.random_tensor((N, K), dtype, generator).T
             if layout in ("b transposed", "both transposed")
             else check.random_tensor((K, N), dtype, generator))
    return (a, b, *case.get("blocks", ()))


a, b = make_matmul_inputs({"M": 3, "N": 5, "K": 4, "dtype": torch.float16, "layout": "strided"},
                          torch.Generator().manual_seed(0))
print(f"a: shape {tuple(a.shape)}, strides {a.stride()}; "
      f"b: shape {tuple(b.shape)}, strides {b.stride()}")

# %% [markdown] id="cell-05"
# Lesson 01's kernel, imported from the course's reference (`naive_matmul`), runs one program per
# output element. Counted in the interpreter with `traffic.count_traffic`, it loads $2MNK$ elements:
# a row of $A$ and a column of $B$ for each of the $MN$ outputs. Its requested traffic is $2e$ bytes
# per multiply-add, an intensity of $1/e$ FLOP per byte, far left of the ridge point of any GPU:

# %% id="cell-06"
M, N, K = 8, 8, 64          # one program per output element: keep the interpreter's work tiny
a, b = make_matmul_inputs({"M": M, "N": N, "K": K, "dtype": torch.float16},
                          torch.Generator().manual_seed(0))
print("naive_matmul against the float64 reference: relative error",
      f"{check.relative_error(naive_matmul(a, b), matmul_reference(a.double(), b.double())):.1e}")
counted = traffic.count_traffic(naive_matmul, a, b)
print(f"{counted.programs} programs loaded {counted.loaded_bytes:,} bytes "
      f"= 2·M·N·K·2 = {2 * M * N * K * 2:,}; a, b and c hold {(M * K + K * N + M * N) * 2:,} bytes")
intensity = 2 * M * N * K / counted.total_bytes
ridge = roofline.ridge_point(spec.fp16_tflops, spec.memory_bandwidth_gbs)
print(f"requested intensity {intensity:.2f} FLOP/byte; "
      f"ridge point of the {spec.name} in fp16: {ridge:.0f} FLOP/byte")

# %% [markdown] id="cell-07"
# ## 2. Tiles and reuse
#
# Give each program a **tile** of $C$ instead of one element: program $(i, j)$ computes the $B_M
# \times B_N$ block of $C$ in tile row $i$ and tile column $j$ (writing $B_M$ for `BLOCK_M` and so
# on). That block is a sum over $K$ of products of a $B_M \times K$ strip of $A$ with a $K \times
# B_N$ strip of $B$, and the program walks along $K$ in steps of $B_K$:
#
# $$C_{ij} = \sum_{t} A_{it}\, B_{tj},
# \qquad A_{it}: B_M \times B_K, \quad B_{tj}: B_K \times B_N .$$
#
# At each step it loads one tile of $A$ and one of $B$, $(B_M + B_N)\,B_K$ elements, and does $2 B_M
# B_N B_K$ FLOPs with them: every element of the $A$ tile is used $B_N$ times (once per column of
# the output tile) and every element of the $B$ tile $B_M$ times. The naive kernel is the case $B_M
# = B_N = 1$: each element loaded is used once. So per element loaded, a program does
#
# $$\frac{2 B_M B_N B_K}{(B_M + B_N)\,B_K} = \frac{2 B_M B_N}{B_M + B_N} \text{ FLOPs}$$
#
# which is $B$ for square $B \times B$ tiles: 128 × 128 tiles do 128 times the work per load of the
# naive kernel. The accumulator, a $B_M \times B_N$ block of float32, stays in registers (each
# thread's own storage, the fastest there is) for the whole walk along $K$ and is written once at
# the end.
#
# ## Exercise 1 (2 points): the bytes a tiled matmul loads
#
# Over the whole grid, how many bytes does the tiled kernel load? Write `tiled_loaded_bytes(M, N, K,
# BLOCK_M, BLOCK_N, element_size)` for shapes that are multiples of the blocks ($M$ of $B_M$, $N$ of
# $B_N$, $K$ of $B_K$), counting only loads (the store of $C$ is $MN e$ bytes, once). Think about
# how many programs read each tile row of $A$, and each tile column of $B$. `BLOCK_K` is not an
# argument: work out why it does not matter.
#
# The test checks your formula on the values below and, on shapes it does not show you, against
# `traffic.count_traffic` of the reference kernel.

# %% id="cell-08" nbgrader={"grade": false, "grade_id": "loaded_bytes_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def tiled_loaded_bytes(M: int, N: int, K: int, BLOCK_M: int, BLOCK_N: int,
                       element_size: int) -> int:
    """Bytes the tiled kernel loads for a (M, K) @ (K, N) product, with M a multiple of BLOCK_M,
    N of BLOCK_N and K of BLOCK_K."""
    ### BEGIN SOLUTION
    # A is read once by each of the N // BLOCK_N tile columns,
    # B once by each of the M // BLOCK_M tile rows.
    return element_size * (M * K * (N // BLOCK_N) + K * N * (M // BLOCK_M))
    ### END SOLUTION

# %% id="cell-09" nbgrader={"grade": true, "grade_id": "test_tiled_loaded_bytes", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 1: tiled_loaded_bytes gives the bytes the tiled kernel loads.
for args, expected in [((64, 64, 64, 32, 32, 2), 32_768), ((128, 64, 32, 32, 16, 4), 98_304),
                       ((4096, 4096, 4096, 128, 128, 2), 2**31), ((16, 16, 16, 16, 16, 4), 2_048)]:
    got = grading.formula_answer(tiled_loaded_bytes, *args)
    assert got == expected, f"tiled_loaded_bytes{args} = {got}, expected {expected}"
### BEGIN HIDDEN TESTS
for (M, N, K, bm, bn, bk), dtype in [((64, 32, 48, 32, 16, 16), torch.float32),
                                     ((32, 64, 32, 16, 32, 32), torch.float16),
                                     ((48, 16, 16, 16, 16, 16), torch.float32)]:
    a, b = make_matmul_inputs({"M": M, "N": N, "K": K, "dtype": dtype},
                              torch.Generator().manual_seed(5))
    counted = traffic.count_traffic(reference.tiled_matmul, a, b, bm, bn, bk).loaded_bytes
    got = grading.formula_answer(tiled_loaded_bytes, M, N, K, bm, bn, a.element_size())
    assert got == counted, (f"tiled_loaded_bytes({M}, {N}, {K}, {bm}, {bn}, {a.element_size()}) "
                            f"= {got}, the reference kernel loaded {counted}")


def draw_tiling(rng):
    """Tiles that divide the matrices, from a range no one could count ahead, and an element
    size."""
    bm, bn = rng.choice([16, 32, 64, 128, 256]), rng.choice([16, 32, 64, 128, 256])
    return (bm * rng.randint(1, 64), bn * rng.randint(1, 64), 16 * rng.randint(1, 512), bm, bn,
            rng.choice([2, 4]))


# drawn afresh at every grading; the counted cases above agree with this rule: every tile of
# the output reads a bm-row band of a and a bn-column band of b, K deep
for M, N, K, bm, bn, e in grading.drawn_cases(draw_tiling, 3):
    expected = (M // bm) * (N // bn) * (bm + bn) * K * e
    got = grading.formula_answer(tiled_loaded_bytes, M, N, K, bm, bn, e)
    assert got == expected, (f"tiled_loaded_bytes({M}, {N}, {K}, {bm}, {bn}, {e}) = {got}, "
                             f"expected {expected}")
### END HIDDEN TESTS
print("tiled_loaded_bytes matches the tiled kernel's loads")

# %% [markdown] id="cell-10"
# **Intensity grows with the tile.** With your formula, the requested arithmetic intensity of the
# whole kernel is $2MNK$ divided by the bytes loaded plus the $MNe$ bytes stored. Here it is at
# 4096³ in fp16 for square tiles from $1 \times 1$ (the naive kernel) up, next to the intensity of
# the problem itself (every element moved once) and the ridge point of `spec` (your GPU, or an
# H200 without one):

# %% id="cell-11"
S = 4096
print(f"{'BLOCK_M x BLOCK_N':>20}  {'bytes loaded':>16}  {'intensity (FLOP/byte)':>22}")
for block in (1, 16, 32, 64, 128, 256):
    loaded = tiled_loaded_bytes(S, S, S, block, block, 2)
    label = f"{block} x {block}" + (" (naive)" if block == 1 else "")
    print(f"{label:>20}  {loaded:>16,}  {2 * S**3 / (loaded + S * S * 2):>22,.1f}")
print(f"\nthe problem itself at {S}^3 fp16: {2 * S**3 / (3 * S * S * 2):,.0f} FLOP/byte; "
      f"ridge point of the {spec.name}: {ridge:.0f} FLOP/byte")

# %% [markdown] id="cell-12"
# For square $B \times B$ tiles the intensity is about $B / e$ FLOP per byte (for $e = 2$: 64 at
# $B = 128$): the bigger the tile, the more reuse. Three things stop the growth:
#
# * **Registers.** The float32 accumulator is $B_M B_N$ values spread over the program's threads: a
#   128 × 128 tile is 16,384 values, 128 per thread with 4 warps (128 threads), of at most 255
#   registers a thread may have.
# * **Shared memory**, the SM's small, fast on-chip scratchpad, where the compiler stages the tiles
#   of $A$ and $B$ (section 3). One step along $K$ takes $(B_M + B_N) B_K e$ bytes: 16 KiB for
#   128 × 128 × 32 in fp16. Triton keeps three such *stages* in flight by default, tiles loaded
#   ahead of the step that uses them (lesson 03): 48 KiB, which fits even a T4's 64 KiB.
# * **Parallelism.** A 4096² output has 1,024 tiles of 128 × 128 for the GPU's SMs (132 on an
#   H200); a 512² output has only 16, and most SMs would idle.
#
# And the count is a *request*, an upper bound on DRAM traffic: a tile of $A$ that one program loads
# is loaded again by every program of the same tile row, and if those run at about the same time the
# second load hits in the L2 cache. Section 5 arranges for that.
#
# ## 3. `tl.dot`: a tile product on the tensor cores
#
# Inside a program, a tile is a 2-D block of values, and its addresses are a 2-D block of pointers.
# `offs_m[:, None]` is a column of `BLOCK_M` row indices and `offs_k[None, :]` a row of `BLOCK_K`
# column indices; combined with the strides they broadcast to a `BLOCK_M` × `BLOCK_K` grid of
# addresses, entry $(i, j)$ pointing at $a[i, j]$ whatever the layout of $a$ (a transposed view only
# changes the strides). `tl.dot(a, b)` multiplies two such blocks. The smallest kernel that uses it,
# one program and one product, with `b` a transposed view:

# %% id="cell-13"
@triton.jit
def tile_dot_kernel(a_ptr, b_ptr, c_ptr, stride_am, stride_ak, stride_bk, stride_bn,
                    stride_cm, stride_cn,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """c = a @ b in float32 for one tile: a (BLOCK_M, BLOCK_K), b (BLOCK_K, BLOCK_N), c (BLOCK_M,
    BLOCK_N). One program, one tl.dot, no loop and no masks."""
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # a tile: (BLOCK_M, BLOCK_K); b tile: (BLOCK_K, BLOCK_N)
    a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b = tl.load(b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn)
    c = tl.dot(a, b)                                   # (BLOCK_M, BLOCK_N), accumulated in float32
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, c)


a = torch.randn(32, 16, device=DEVICE, dtype=torch.float16)
b = torch.randn(64, 16, device=DEVICE, dtype=torch.float16).T      # (16, 64), strides (1, 16)
c = torch.empty(32, 64, device=DEVICE, dtype=torch.float32)
tile_dot_kernel[(1,)](a, b, c, *a.stride(), *b.stride(), *c.stride(),
                      BLOCK_M=32, BLOCK_N=64, BLOCK_K=16)
print("tile product against the float64 reference: relative error",
      f"{check.relative_error(c, a.double() @ b.double()):.1e}")

# %% [markdown] id="cell-14"
# **What `tl.dot` becomes.** On NVIDIA GPUs from Volta on, each SM has *tensor cores*: units that
# multiply small matrices (on Hopper a warpgroup of 4 warps issues one `wgmma` instruction for a $64
# \times N \times 16$ fp16 product) at many times the rate of ordinary fused multiply-adds. Triton
# compiles `tl.dot` to those instructions. The compiler stages each loaded tile in shared memory,
# from where the tensor cores read it (directly on Hopper, through registers on older GPUs), and
# keeps the accumulator in the threads' registers. So a program's data moves global memory → (L2)
# → shared memory → tensor cores → registers, and only the final tile goes back to global memory.
# Things to know when you use it:
#
# * **Precision.** fp16 inputs are multiplied exactly and accumulated in float32 (the default output
#   of `tl.dot`; pass the accumulator as the third argument, `tl.dot(a, b, acc)`, to add into it).
#   float32 inputs go through *TF32* on GPUs that have it (10-bit mantissa, like fp16): fast, with a
#   relative error of $7.7 \times 10^{-4}$ on a 1024³ product on an H200 (benchmarks/matmul.py,
#   2026-11-29, docs/results/h200.md), which the course's float32 tolerance allows;
#   `input_precision="ieee"` asks for full float32 at a fraction of the speed. The interpreter
#   computes `tl.dot` in float32 with numpy.
# * **Shapes.** Block sizes are powers of two (`tl.arange` needs that), and `tl.dot` needs $B_K$ of
#   at least 16 for fp16. Smaller $B_M$ or $B_N$ compile, padded up to the tensor cores' own tile
#   shape, which wastes part of every instruction: this course's blocks are all 16 or more.
# * **Why fp32 accumulation.** An fp16 accumulator keeps 11 significant bits, and every one of the
#   $K / B_K$ additions of a long dot product rounds the running sum to them: the error grows with
#   $K$. A float32 accumulator makes rounding the final result to fp16 the only error that matters.
#
# ## 4. Walking K, and the edges
#
# A program of the tiled kernel starts with pointers to its first tiles, the `BLOCK_M` × `BLOCK_K`
# tile at the left end of its strip of $A$ and the `BLOCK_K` × `BLOCK_N` tile at the top of its
# strip of $B$, and after each `tl.dot` moves them one step along $K$: `a_ptrs += BLOCK_K *
# stride_ak` and `b_ptrs += BLOCK_K * stride_bk`. The grid has `cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)`
# programs, so shapes that are not multiples of the blocks leave three edges:
#
# * **The K tail.** The last step may reach past $K$. Mask those columns of the $A$ tile and rows of
#   the $B$ tile with `(k0 + offs_k) < K`, and load them as `other=0.0`: zeros add nothing to the
#   dot product. (Without `other`, masked-off lanes of a load hold whatever the hardware left
#   there.)
# * **The M and N tails.** Tiles in the last tile row or column hang over the edge of $C$. Their
#   loads need the row mask `offs_m < M` on $A$ and the column mask `offs_n < N` on $B$ (or they
#   read outside the tensors), and the store needs both, or it writes outside $C$.
# * **Tiny shapes.** $M$, $N$ or $K$ can be 1: a tile of 16 or more then holds one valid row or
#   column, and the masks do all the work.
#
# ## 5. Which program computes which tile: grouped ordering
#
# A GPU starts a kernel's programs roughly in the order of their number, as many at a time as its
# SMs hold, and starts the next ones as the first finish. So the order in which program numbers map
# to tiles decides which tiles are in flight together, and with them which strips of $A$ and $B$ the
# L2 cache must hold at once. The obvious order goes along tile rows: programs 0, 1, 2, ... take the
# tiles of row 0, then row 1. The first *wave* of programs (those running together at the start)
# then covers a few rows of tiles completely: it needs a few strips of $A$ but *every* strip of
# $B$. **Grouped ordering** goes down `GROUP_M` tile rows before it moves one tile column to the
# right, so a wave covers a squarer patch of $C$ and needs fewer strips in all. Every tiled kernel
# of this course computes its tile from its program number with the helper below. A `@triton.jit`
# function can be called from inside a kernel like any function (Triton inlines it); under the
# decorator, `.fn` is the plain Python function, so you can also run it on ints and print the
# order:

# %% id="cell-15" nbgrader={"grade": false, "grade_id": "grouped_tile", "locked": true, "schema_version": 3, "solution": false, "task": false}
# include: tilegym_edu/tiles.py grouped_tile


def print_launch_order(num_pid_m, num_pid_n, group_m):
    order = [[0] * num_pid_n for _ in range(num_pid_m)]
    for pid in range(num_pid_m * num_pid_n):
        pid_m, pid_n = grouped_tile.fn(pid, num_pid_m, num_pid_n, group_m)
        order[pid_m][pid_n] = pid
    print(f"GROUP_M = {group_m}: the program that computes each tile of C")
    for row in order:
        print("   " + " ".join(f"{pid:3d}" for pid in row))


print_launch_order(5, 8, group_m=1)
print_launch_order(5, 8, group_m=2)

# %% [markdown] id="cell-16"
# With `GROUP_M = 1` this is the row-by-row order; with 2, programs 0 to 15 fill the first two tile
# rows column by column, and the 5th row, alone, forms a shorter last group.
#
# Now a rough model of what the order does to memory traffic. Take a wave of programs, one 128 ×
# 128 program per SM, and suppose they walk along $K$ together, so that the L2 cache hands each
# strip of $A$ ($128 \times K$) and of $B$ ($K \times 128$) to every program of the wave that needs
# it, and that nothing is shared from one wave to the next. Then a wave reads from DRAM each strip
# its tiles touch, once, and does $2 \cdot 128^2 K$ FLOPs per tile. Its FLOPs per byte are the
# wave's arithmetic intensity: above the GPU's ridge point the wave is compute-bound in either
# order, below it memory is the limit and fewer strips per wave means more speed. In fp16:

# %% id="cell-17"
def wave_intensity(S, block, group_m, programs_at_once, element_size=2):
    """FLOPs per byte of DRAM traffic of the first wave of programs of an S^3 product, with square
    tiles of `block` in grouped order, if the wave reads each strip of A and B it touches once."""
    tiles_per_side = triton.cdiv(S, block)
    wave = [grouped_tile.fn(pid, tiles_per_side, tiles_per_side, group_m)
            for pid in range(min(programs_at_once, tiles_per_side**2))]
    # the strips it reads: tile rows of A, tile columns of B
    strips = len({m for m, _ in wave}) + len({n for _, n in wave})
    return len(wave) * 2 * block * block * S / (strips * block * S * element_size)


sms = device.info().sm_count if device.ON_GPU else spec.sm_count
print(f"a wave of {sms} programs of 128 x 128 (one per SM); "
      f"ridge point of the {spec.name} in fp16: {ridge:.0f} FLOP/byte")
for S in (4096, 8192, 16384):
    print(f"  {S:>5}^3: GROUP_M = 1: {wave_intensity(S, 128, 1, sms):4.0f} FLOP/byte,   "
          f"GROUP_M = 8: {wave_intensity(S, 128, 8, sms):4.0f} FLOP/byte")

# %% [markdown] id="cell-18"
# The row order's wave touches a few rows of tiles but every column, so its intensity falls as the
# matrices grow (each row holds more tiles, each with its own strip of $B$); the grouped wave
# touches about as many rows as columns and keeps its intensity. The model predicts no difference
# while both stay above the ridge point, and a gain once the row order drops below it. On an H200 at
# 4096³ the order made no difference (600 TFLOP/s with `GROUP_M = 8`, 608 row by row;
# benchmarks/matmul.py, 2026-11-29, docs/results/h200.md). After the exercise you test the
# prediction on your GPU.
#
# ## Exercise 2 (4 points): the tiled matmul
#
# Write `tiled_matmul_kernel` and its wrapper `tiled_matmul(a, b, block_m, block_n, block_k,
# group_m, num_warps)`:
#
# - `a` of shape $(M, K)$ and `b` of shape $(K, N)$, both `torch.float16` or both `torch.float32`,
#   with **any strides** (transposed views, every other column of a wider tensor): pass all six
#   strides to the kernel. Return a new $(M, N)$ tensor in the inputs' dtype.
# - **Accumulate in float32** with `tl.dot`, and convert to the output dtype only when you store.
# - **Any shape**: $M$, $N$, $K$ from 1 up, none of them a multiple of a block; mask every edge.
# - **A 1-D grid** of `cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)` programs in **grouped order**: compute
#   `pid_m, pid_n = grouped_tile(tl.program_id(0), num_pid_m, num_pid_n, GROUP_M)` with
#   `num_pid_m = tl.cdiv(M, BLOCK_M)` and `num_pid_n = tl.cdiv(N, BLOCK_N)`.
# - **Use the block sizes you are given**: the grader passes its own, rectangular ones included, and
#   counts your memory traffic with them in Exercise 3. The defaults are for a GPU; in the
#   interpreter pass blocks of 16 or 32.
#
# The grader checks odd, non-square and degenerate shapes, transposed and strided inputs, and shapes
# it does not show you; during grading PyTorch may only allocate, view and copy (`torch.matmul` or
# `@` fails the exercise), and fresh allocations are filled with NaN. One check is a long $K$
# (2,048) in fp16 at a tolerance of $5 \times 10^{-4}$: rounding the output to fp16 costs a correct
# kernel about $2 \times 10^{-4}$, while an fp16 accumulator loses several times that.
#
# Sections 2 to 5 hold every piece: the grouped program-to-tile map, pointer blocks built from
# `offs_m[:, None]` and `offs_k[None, :]` with the strides, the loop over $K$ with `tl.dot` into a
# float32 accumulator, masked loads with `other=0.0`, and a masked store.

# %% id="cell-19" nbgrader={"grade": false, "grade_id": "tiled_matmul_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
# include: tilegym_edu/reference/matmul.py tiled_matmul_kernel solution


# include: tilegym_edu/reference/matmul.py tiled_matmul solution

# %% [markdown] id="cell-20"
# Check it as you go with the grader's own checker; each line names the case, the relative error,
# and what went wrong if anything did.

# %% id="cell-21" nbgrader={"grade": false, "grade_id": "tiled_matmul_checker", "locked": true, "schema_version": 3, "solution": false, "task": false}
for result in check.check(tiled_matmul, matmul_reference, make_matmul_inputs, seeds=[0], cases=[
        {"M": 37, "N": 29, "K": 70, "dtype": torch.float32, "blocks": (32, 32, 32, 8)},
        {"M": 20, "N": 45, "K": 33, "dtype": torch.float16, "layout": "a transposed",
         "blocks": (16, 32, 16, 2)}]):
    print(result.describe())

# %% id="cell-22" nbgrader={"grade": true, "grade_id": "test_tiled_matmul_correct", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
# Exercise 2: tiled_matmul is correct on odd, non-square and degenerate shapes, fp32 and fp16,
# transposed and strided inputs, with several block sizes and group sizes.
cases = [
    {"M": 1, "N": 1, "K": 1, "dtype": torch.float32, "blocks": (16, 16, 16, 1)},
    {"M": 37, "N": 29, "K": 70, "dtype": torch.float16, "blocks": (32, 32, 32, 8)},
    {"M": 37, "N": 29, "K": 70, "dtype": torch.float32, "blocks": (32, 32, 32, 8)},
    {"M": 64, "N": 48, "K": 33, "dtype": torch.float32, "layout": "a transposed",
     "blocks": (32, 16, 32, 2)},
    {"M": 20, "N": 70, "K": 45, "dtype": torch.float16, "layout": "b transposed",
     "blocks": (16, 32, 16, 2)},
    {"M": 1, "N": 50, "K": 33, "dtype": torch.float16, "blocks": (16, 16, 16, 8)},
    {"M": 45, "N": 1, "K": 20, "dtype": torch.float32, "layout": "both transposed",
     "blocks": (16, 16, 16, 8)},
    {"M": 100, "N": 40, "K": 17, "dtype": torch.float16, "layout": "strided",
     "blocks": (16, 32, 16, 4)},
    {"M": 70, "N": 70, "K": 40, "dtype": torch.float16, "blocks": (BLOCK_M, BLOCK_N, BLOCK_K, 8)},
]
grading.assert_correct(tiled_matmul, matmul_reference, make_matmul_inputs, cases)
# A long K in fp16: a float32 accumulator stays near the 2e-4 of rounding the output to fp16; an
# fp16 accumulator rounds the running sum at every step and lands several times higher.
long_k = [{"M": 32, "N": 32, "K": 2048, "dtype": torch.float16,
           "blocks": (BLOCK_M, BLOCK_N, BLOCK_K, 8)}]
grading.assert_correct(tiled_matmul, matmul_reference, make_matmul_inputs, long_k,
                       tolerances={torch.float16: 5e-4})
### BEGIN HIDDEN TESTS
hidden_cases = [
    {"M": 2, "N": 3, "K": 5, "dtype": torch.float16, "blocks": (16, 16, 16, 1)},
    {"M": 33, "N": 65, "K": 1, "dtype": torch.float32, "layout": "b transposed",
     "blocks": (32, 32, 32, 8)},
    {"M": 150, "N": 20, "K": 24, "dtype": torch.float32, "blocks": (16, 32, 16, 4)},
    {"M": 17, "N": 31, "K": 129, "dtype": torch.float16, "layout": "a transposed",
     "blocks": (16, 16, 32, 2)},
    {"M": 24, "N": 40, "K": 50, "dtype": torch.float32, "layout": "strided",
     "blocks": (32, 16, 16, 3)},
]
grading.assert_correct(tiled_matmul, matmul_reference, make_matmul_inputs, hidden_cases,
                       seeds=(11, 12))
### END HIDDEN TESTS

# %% [markdown] id="cell-23"
# ## Exercise 3 (2 points): within the traffic budget
#
# Without a GPU nothing here can be timed, but the bytes your kernel asks for can be counted, and
# they are what tiling is about. This check runs your `tiled_matmul` on a 64³ fp16 product with 32 ×
# 32 × 32 blocks under `traffic.count_traffic`. It must store exactly the $MNe$ bytes of $C$ (each
# element once), load at most 1.5 times the $e\,MNK\,(1/B_N + 1/B_M)$ bytes that 32 × 32 tiles need
# (the naive kernel loads 32 times that here), with no program loading more than one tile's rows
# of $A$ and columns of $B$, $(B_M + B_N) K e$ bytes, and compute the right product; a second
# check, on a shape and blocks it does not show you, holds it to the same rules. It is graded
# everywhere. *Over the budget* usually means your wrapper ignores the block sizes it is given
# (smaller tiles load more, larger ones more a program); *stored ... but the output holds* means
# $C$ stored more than once (a store inside the $K$ loop) or in a dtype other than the inputs'.

# %% id="cell-24" nbgrader={"grade": true, "grade_id": "test_tiled_matmul_traffic", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 3: tiled_matmul loads no more than 1.5x what its tiles need (a tile's rows and columns
# a program) and stores C exactly once.
def check_traffic(M, N, K, dtype, block_m, block_n, block_k):
    a, b = make_matmul_inputs({"M": M, "N": N, "K": K, "dtype": dtype},
                              torch.Generator().manual_seed(0))
    ideal = a.element_size() * M * N * K * (1 / block_n + 1 / block_m)
    grading.assert_traffic(tiled_matmul, (a, b, block_m, block_n, block_k), matmul_reference, dtype,
                           what=f"{M}x{N}x{K} {str(dtype).removeprefix('torch.')}, blocks "
                                f"{block_m}x{block_n}x{block_k}",
                           stores=M * N * a.element_size(), loads_at_most=1.5 * ideal,
                           program_loads_at_most=(block_m + block_n) * K * a.element_size(),
                           load_hint=": each program computes one block_m x block_n tile of C "
                                     "and loads its rows of A and columns of B once")


check_traffic(64, 64, 64, torch.float16, 32, 32, 32)
### BEGIN HIDDEN TESTS
check_traffic(96, 64, 80, torch.float32, 32, 16, 16)
### END HIDDEN TESTS

# %% [markdown] id="cell-25"
# ## 6. Time it: does the order of programs matter on your GPU?
#
# Section 5's model predicted when grouped ordering should pay. Here is the measurement: your kernel
# with `GROUP_M = 1` (row by row) against `GROUP_M = 8`, fp16, at 4096³, 8192³ and 16384³,
# interleaved in one process. The L2 cache is flushed before every run, so each run starts from DRAM
# as a real workload would. The effect lives in the L2 cache of a real GPU: the interpreter has none
# to show.

# %% id="cell-26" tags=["demo"]
if device.ON_GPU:
    for S in (4096, 8192, 16384):
        a = torch.randn(S, S, device=DEVICE, dtype=torch.float16)
        b = torch.randn(S, S, device=DEVICE, dtype=torch.float16)
        orders = bench.compare(
            {"GROUP_M=1": lambda: tiled_matmul(a, b, BLOCK_M, BLOCK_N, BLOCK_K, group_m=1),
             "GROUP_M=8": lambda: tiled_matmul(a, b, BLOCK_M, BLOCK_N, BLOCK_K, group_m=8)},
            flops=2 * S**3, bytes=3 * S * S * 2)
        print(f"{S}^3 fp16")
        bench.print_table(orders, baseline="GROUP_M=1")
else:
    print("The order of programs matters through the L2 cache of a GPU: "
          "this comparison needs a GPU to see.\n"
          "On an H200 at 4096^3 it made no difference "
          "(600 against 608 TFLOP/s, docs/results/h200.md).")

# %% [markdown] id="cell-27"
# ## Exercise 4 (2 + 2 points, needs a GPU): speed
#
# Two timed checks, each against a baseline in the same process, interleaved, with the outputs of
# the timed runs checked too. The thresholds and the H200 figures they were set from are printed.
#
# - **Tiled against naive**, fp16 1024³: your `tiled_matmul` (its default blocks) against lesson
#   01's naive kernel; you need 10 times its speed. On an H200 the reference solution was 484 times
#   faster in this cell (2026-11-29, docs/results/h200.md).
# - **Tiled against cuBLAS**, fp16 4096³: your speed as a fraction of `torch.matmul`'s; you need
#   0.5. On an H200 the reference reached 0.78 in this cell (2026-11-29, docs/results/h200.md).
#
# Without a GPU both cells say *needs GPU* and score 0. If you fall short on a GPU: are your
# defaults 128 × 128 tiles? Does `tl.dot` get fp16 operands (not values you converted to float32
# first)?

# %% id="cell-28" nbgrader={"grade": true, "grade_id": "test_tiled_vs_naive", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 4a: tiled_matmul is many times faster than lesson 01's naive kernel (GPU only).
grading.require_gpu("the speedup of tiled_matmul over the naive kernel")
limit = grading.threshold("02_tiled_matmul", "tiled_vs_naive")
input_sets = [make_matmul_inputs({"M": 1024, "N": 1024, "K": 1024, "dtype": torch.float16},
                                 torch.Generator().manual_seed(seed)) for seed in (0, 1)]
grading.assert_speedup(tiled_matmul, naive_matmul, input_sets, matmul_reference, torch.float16,
                       limit, flops=2 * 1024**3)

# %% id="cell-29" nbgrader={"grade": true, "grade_id": "test_tiled_vs_cublas", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 4b: tiled_matmul reaches a good fraction of cuBLAS's speed (GPU only).
grading.require_gpu("the speed of tiled_matmul against cuBLAS")
limit = grading.threshold("02_tiled_matmul", "tiled_vs_cublas")
input_sets = [make_matmul_inputs({"M": 4096, "N": 4096, "K": 4096, "dtype": torch.float16},
                                 torch.Generator().manual_seed(seed)) for seed in (0, 1)]
# speed / cuBLAS speed = cuBLAS time / your time: assert_speedup with torch.matmul as the baseline
grading.assert_speedup(tiled_matmul, torch.matmul, input_sets, matmul_reference, torch.float16,
                       limit, flops=2 * 4096**3)

# %% [markdown] id="cell-30"
# ## 7. Fusing the epilogue
#
# A linear layer rarely stops at $AB$: it adds a bias and applies an activation, $\mathrm{relu}(AB +
# \text{bias})$. In eager PyTorch, `torch.relu(a @ b + bias)` is three kernels, and $C$ makes two
# round trips through memory between them: written by the matmul, read and written by the addition,
# read and written by the ReLU. In a tiled kernel the finished tile is still in registers when the
# $K$ loop ends: adding the bias and taking the ReLU there costs a load of `BLOCK_N` bias values per
# program and no extra trip for $C$ at all. That is an *epilogue*, and fusing epilogues is a large
# part of what libraries like cuBLASLt and CUTLASS offer.
#
# ## Exercise 5 (3 points): a fused bias + ReLU epilogue
#
# Write `matmul_bias_relu_kernel` and `matmul_bias_relu(a, b, bias, ...)`, returning
# $\mathrm{relu}(AB + \text{bias})$ for `a` $(M, K)$, `b` $(K, N)$ and `bias` of shape $(N,)$ (added
# to every row), all of one dtype, fp16 or fp32, with any strides (the bias too). Everything from
# Exercise 2 holds: float32 accumulation, any shape, the block sizes you are given, output in the
# input dtype. The epilogue belongs in the same kernel: after the $K$ loop, load the bias for the
# tile's columns once (masked), add it to the float32 accumulator, apply the ReLU (`tl.maximum`),
# then store. Start from your tiled kernel.

# %% id="cell-31" nbgrader={"grade": false, "grade_id": "matmul_bias_relu_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@triton.jit
def matmul_bias_relu_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                            stride_am, stride_ak, stride_bk, stride_bn, stride_bias,
                            stride_cm, stride_cn,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                            GROUP_M: tl.constexpr):
    """c = relu(a @ b + bias[None, :]): the tiled matmul with the bias and ReLU applied to each
    float32 tile before it is stored. Pointers: a (M, K), b (K, N), bias (N,), c (M, N)."""
    ### BEGIN SOLUTION
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_mask = (k0 + offs_k) < K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & k_mask[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_mask[:, None] & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    bias = tl.load(bias_ptr + offs_n * stride_bias, mask=offs_n < N, other=0.0)  # once per tile
    acc = acc + bias.to(tl.float32)[None, :]
    acc = tl.maximum(acc, 0.0)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)
    ### END SOLUTION


def matmul_bias_relu(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, block_m: int = 128,
                     block_n: int = 128, block_k: int = 32, group_m: int = 8,
                     num_warps: int = 4) -> torch.Tensor:
    """relu(a @ b + bias) in one kernel, for a (M, K), b (K, N), bias (N,) of one dtype."""
    ### BEGIN SOLUTION
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)
    matmul_bias_relu_kernel[grid](a, b, bias, c, M, N, K,
                                  a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                  bias.stride(0), c.stride(0), c.stride(1),
                                  BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                                  GROUP_M=group_m, num_warps=num_warps)
    return c
    ### END SOLUTION

# %% id="cell-32" nbgrader={"grade": false, "grade_id": "bias_relu_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
def bias_relu_reference(a, b, bias, *blocks):
    """The definition, run by the grader in float64 on the CPU."""
    return torch.relu(a @ b + bias)


def make_bias_relu_inputs(case, generator):
    """a, b (and the blocks) as make_matmul_inputs makes them, with a bias of shape (N,) inserted
    after b; case["bias"] = "strided" takes every other element of a (2N,) tensor."""
    a, b, *blocks = make_matmul_inputs(case, generator)
    N, dtype = case["N"], case["dtype"]
    bias = (check.random_tensor((2 * N,), dtype, generator)[::2] if case.get("bias") == "strided"
            else check.random_tensor((N,), dtype, generator))
    return (a, b, bias, *blocks)


for result in check.check(matmul_bias_relu, bias_relu_reference, make_bias_relu_inputs,
                          seeds=[0], cases=[
        {"M": 37, "N": 29, "K": 70, "dtype": torch.float32, "blocks": (32, 32, 32, 8)}]):
    print(result.describe())

# %% id="cell-33" nbgrader={"grade": true, "grade_id": "test_matmul_bias_relu_correct", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Exercise 5: matmul_bias_relu is correct on odd and degenerate shapes, fp32 and fp16, strided
# inputs.
cases = [
    {"M": 1, "N": 1, "K": 1, "dtype": torch.float32, "blocks": (16, 16, 16, 1)},
    {"M": 37, "N": 29, "K": 70, "dtype": torch.float16, "blocks": (32, 32, 32, 8)},
    {"M": 37, "N": 29, "K": 70, "dtype": torch.float32, "blocks": (32, 32, 32, 8)},
    {"M": 20, "N": 70, "K": 45, "dtype": torch.float16, "layout": "a transposed",
     "blocks": (16, 32, 16, 2)},
    {"M": 64, "N": 48, "K": 33, "dtype": torch.float32, "layout": "b transposed", "bias": "strided",
     "blocks": (BLOCK_M, BLOCK_N, BLOCK_K, 8)},
]
grading.assert_correct(matmul_bias_relu, bias_relu_reference, make_bias_relu_inputs, cases)
### BEGIN HIDDEN TESTS
hidden_cases = [
    {"M": 50, "N": 1, "K": 20, "dtype": torch.float16, "layout": "strided",
     "blocks": (16, 16, 16, 4)},
    {"M": 3, "N": 40, "K": 66, "dtype": torch.float32, "bias": "strided",
     "blocks": (16, 32, 32, 1)},
]
grading.assert_correct(matmul_bias_relu, bias_relu_reference, make_bias_relu_inputs, hidden_cases,
                       seeds=(11, 12))
### END HIDDEN TESTS

# %% [markdown] id="cell-34"
# **What fusion saves, counted.** Below, the unfused version does what eager PyTorch does, in
# Triton: the reference tiled matmul writes $C$, one small kernel adds the bias (it loads, for every
# element, the element and its bias), and another applies the ReLU. The formulas next to the counts
# use your `tiled_loaded_bytes` for the matmul's loads; the rest is one load or store per element of
# $C$ (and one bias value per element, or per tile column in the fused kernel).

# %% id="cell-35"
@triton.jit
def add_bias_kernel(x_ptr, bias_ptr, out_ptr, n_elements, N, BLOCK_SIZE: tl.constexpr):
    """out = x + bias[None, :] for a contiguous (M, N) x with n_elements = M * N, bias (N,)."""
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    bias = tl.load(bias_ptr + offsets % N, mask=mask)
    tl.store(out_ptr + offsets, x + bias, mask=mask)


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    """out = max(x, 0) for n_elements contiguous elements."""
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


def unfused_bias_relu(a, b, bias, block_m=BLOCK_M, block_n=BLOCK_N, block_k=BLOCK_K):
    """relu(a @ b + bias) as three kernels, as eager PyTorch runs it (bias contiguous)."""
    c = reference.tiled_matmul(a, b, block_m, block_n, block_k)
    n = c.numel()
    grid = (triton.cdiv(n, 1024),)
    with_bias = torch.empty_like(c)
    add_bias_kernel[grid](c, bias, with_bias, n, c.shape[1], BLOCK_SIZE=1024)
    out = torch.empty_like(c)
    relu_kernel[grid](with_bias, out, n, BLOCK_SIZE=1024)
    return out


M = N = K = 64
bm = bn = bk = 32
a, b, bias = make_bias_relu_inputs({"M": M, "N": N, "K": K, "dtype": torch.float16},
                                   torch.Generator().manual_seed(1))
fused = traffic.count_traffic(matmul_bias_relu, a, b, bias, bm, bn, bk)
unfused = traffic.count_traffic(unfused_bias_relu, a, b, bias, bm, bn, bk)
mm_loads = tiled_loaded_bytes(M, N, K, bm, bn, 2)
predicted = {"fused (yours)": (mm_loads + N * (M // bm) * 2, M * N * 2),
             "unfused (3 kernels)": (mm_loads + 3 * M * N * 2, 3 * M * N * 2)}
print(f"{M}x{N}x{K} fp16, blocks {bm}x{bn}x{bk}")
for name, counted in (("fused (yours)", fused), ("unfused (3 kernels)", unfused)):
    loads, stores = predicted[name]
    print(f"{name:>20}: {counted.launches} launch(es), loaded {counted.loaded_bytes:,} bytes "
          f"(formula {loads:,}), stored {counted.stored_bytes:,} (formula {stores:,})")

# %% [markdown] id="cell-36"
# At this toy size the matmul's own loads dominate the count. On a GPU at 4096³ in fp16 the balance
# differs: the matmul's inputs are 64 MiB, re-read only as far as the L2 cache fails to hold them,
# while the two extra kernels read and write $C$ four more times, another $4 \cdot MN e$ = 128 MiB.
# Here is the measurement, against PyTorch's `torch.relu(a @ b + bias)` (cuBLAS plus two elementwise
# kernels):

# %% id="cell-37" tags=["demo"]
S = device.size(gpu=4096, cpu=64)
a, b, bias = make_bias_relu_inputs({"M": S, "N": S, "K": S, "dtype": torch.float16},
                                   torch.Generator().manual_seed(2))
epilogues = bench.compare(
    {"fused (yours)": lambda: matmul_bias_relu(a, b, bias, BLOCK_M, BLOCK_N, BLOCK_K),
     "unfused Triton (3 kernels)": lambda: unfused_bias_relu(a, b, bias),
     "PyTorch torch.relu(a @ b + bias)": lambda: torch.relu(a @ b + bias)},
    flops=2 * S**3, bytes=(3 * S * S + S) * 2)
bench.print_table(epilogues, baseline="PyTorch torch.relu(a @ b + bias)")

# %% [markdown] id="cell-38"
# ## Exercise 6 (3 points): batched matmul
#
# Attention heads, grouped experts and many small layers multiply *batches* of independent matrices:
# $C_z = A_z B_z$ for $z = 0, \ldots, B - 1$ (here $B$ is the batch size, not the matrix). One
# kernel launch can do them all: give the grid a second axis, `tl.program_id(1)`, for the batch
# index, and move each program's base pointers to its batch with the **batch strides** before doing
# exactly what the tiled kernel does.
#
# Write `bmm_kernel` and `bmm(a, b, ...)` for `a` of shape $(B, M, K)$ and `b` of shape $(B, K, N)$,
# fp16 or fp32, returning $(B, M, N)$ in the input dtype. Strides are arbitrary: the grader passes
# transposed views (`x.transpose(1, 2)` of a $(B, K, M)$ tensor) and batch slices (`y[::2]` of a
# $(2B, K, N)$ tensor, whose batch stride is twice its matrix size), so `a` and `b` rarely share a
# batch stride. The grid is `(cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N), B)`.

# %% id="cell-39" nbgrader={"grade": false, "grade_id": "bmm_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@triton.jit
def bmm_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
               stride_ab, stride_am, stride_ak, stride_bb, stride_bk, stride_bn,
               stride_cb, stride_cm, stride_cn,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               GROUP_M: tl.constexpr):
    """c[z] = a[z] @ b[z] for z = program_id(1): a (B, M, K), b (B, K, N), c (B, M, N), each
    with its own batch stride (stride_ab, stride_bb, stride_cb)."""
    ### BEGIN SOLUTION
    pid = tl.program_id(0)
    z = tl.program_id(1)
    a_ptr += z * stride_ab
    b_ptr += z * stride_bb
    c_ptr += z * stride_cb
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_mask = (k0 + offs_k) < K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & k_mask[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_mask[:, None] & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)
    ### END SOLUTION


def bmm(a: torch.Tensor, b: torch.Tensor, block_m: int = 128, block_n: int = 128,
        block_k: int = 32, group_m: int = 8, num_warps: int = 4) -> torch.Tensor:
    """a @ b for a batch: a (B, M, K), b (B, K, N) -> (B, M, N), any strides."""
    ### BEGIN SOLUTION
    batch, M, K = a.shape
    N = b.shape[2]
    c = torch.empty((batch, M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n), batch)
    bmm_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), a.stride(2),
                     b.stride(0), b.stride(1), b.stride(2), c.stride(0), c.stride(1), c.stride(2),
                     BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                     GROUP_M=group_m, num_warps=num_warps)
    return c
    ### END SOLUTION

# %% id="cell-40" nbgrader={"grade": false, "grade_id": "bmm_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
def bmm_reference(a, b, *blocks):
    """The definition, run by the grader in float64 on the CPU."""
    return a @ b


def make_bmm_inputs(case, generator):
    """a (B, M, K) and b (B, K, N) for case = {"batch", "M", "N", "K", "dtype"}, then the blocks
    case["blocks"] if given. case["layout"] may name "a transposed" (a is x.transpose(1, 2) of a
    (B, K, M) tensor) and "b batch-strided" (b is y[::2] of a (2B, K, N) tensor), or both."""
    B, M, N, K, dtype = case["batch"], case["M"], case["N"], case["K"], case["dtype"]
    layout = case.get("layout", "contiguous")
    a = (check.random_tensor((B, K, M), dtype, generator).transpose(1, 2)
         if "a transposed" in layout
         else check.random_tensor((B, M, K), dtype, generator))
    b = (check.random_tensor((2 * B, K, N), dtype, generator)[::2] if "b batch-strided" in layout
         else check.random_tensor((B, K, N), dtype, generator))
    return (a, b, *case.get("blocks", ()))


for result in check.check(bmm, bmm_reference, make_bmm_inputs, seeds=[0], cases=[
        {"batch": 3, "M": 20, "N": 37, "K": 45, "dtype": torch.float32, "layout": "a transposed",
         "blocks": (32, 32, 32, 8)}]):
    print(result.describe())

# %% id="cell-41" nbgrader={"grade": true, "grade_id": "test_bmm_correct", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Exercise 6: bmm is correct on odd shapes, fp32 and fp16, transposed and batch-strided inputs.
cases = [
    {"batch": 1, "M": 1, "N": 1, "K": 1, "dtype": torch.float32, "blocks": (16, 16, 16, 1)},
    {"batch": 3, "M": 20, "N": 37, "K": 45, "dtype": torch.float16, "blocks": (32, 32, 32, 8)},
    {"batch": 2, "M": 29, "N": 40, "K": 33, "dtype": torch.float32, "layout": "a transposed",
     "blocks": (16, 32, 16, 2)},
    {"batch": 2, "M": 40, "N": 24, "K": 33, "dtype": torch.float16, "layout": "b batch-strided",
     "blocks": (32, 32, 32, 8)},
    {"batch": 3, "M": 5, "N": 33, "K": 64, "dtype": torch.float32,
     "layout": "a transposed, b batch-strided", "blocks": (BLOCK_M, BLOCK_N, BLOCK_K, 8)},
]
grading.assert_correct(bmm, bmm_reference, make_bmm_inputs, cases)
### BEGIN HIDDEN TESTS
hidden_cases = [
    {"batch": 4, "M": 3, "N": 17, "K": 9, "dtype": torch.float16, "layout": "a transposed",
     "blocks": (16, 16, 16, 4)},
    {"batch": 2, "M": 33, "N": 40, "K": 1, "dtype": torch.float32, "layout": "b batch-strided",
     "blocks": (32, 32, 32, 1)},
]
grading.assert_correct(bmm, bmm_reference, make_bmm_inputs, hidden_cases, seeds=(11, 12))
### END HIDDEN TESTS

# %% [markdown] id="cell-42"
# One launch for the whole batch, against PyTorch's batched matmul (cuBLAS):

# %% id="cell-43" tags=["demo"]
B, S = device.size(gpu=(16, 1024), cpu=(2, 32))
a, b = make_bmm_inputs({"batch": B, "M": S, "N": S, "K": S, "dtype": torch.float16},
                       torch.Generator().manual_seed(3))
batched = bench.compare({"bmm (yours)": lambda: bmm(a, b, BLOCK_M, BLOCK_N, BLOCK_K),
                         "torch.bmm": lambda: torch.bmm(a, b)},
                        flops=2 * B * S**3, bytes=3 * B * S * S * 2)
bench.print_table(batched, baseline="torch.bmm")

# %% [markdown] id="cell-44"
# ## Compare: naive, tiled, and cuBLAS
#
# The comparison this lesson was for: lesson 01's naive kernel, your tiled kernel, the course's
# reference solution and cuBLAS, timed interleaved in one process on the same fp16 inputs. TFLOP/s
# come from the $2MNK$ FLOPs; GB/s from the fewest bytes the problem needs, so every version sits at
# the same intensity on the roofline and only its height differs. On a GPU the ladder chart shows
# the climb on a log scale, with each version's speedup over the naive kernel. (At 4096³ the naive
# kernel took 558 ms a call on an H200, benchmarks/matmul.py, 2026-11-29, docs/results/h200.md:
# this cell takes a while.)

# %% id="cell-45" tags=["demo"]
S = device.size(gpu=4096, cpu=16)
a, b = make_matmul_inputs({"M": S, "N": S, "K": S, "dtype": torch.float16},
                          torch.Generator().manual_seed(4))
results = bench.compare(
    {"naive (lesson 01)": lambda: naive_matmul(a, b),
     "tiled (yours)": lambda: tiled_matmul(a, b, BLOCK_M, BLOCK_N, BLOCK_K),
     "tiled (reference solution)": lambda: reference.tiled_matmul(a, b, BLOCK_M, BLOCK_N, BLOCK_K),
     "cuBLAS (torch.matmul)": lambda: torch.matmul(a, b)},
    flops=2 * S**3, bytes=3 * S * S * 2)
bench.print_table(results, baseline="naive (lesson 01)")
if device.ON_GPU:
    roofline.plot_ladder(results, title=f"Matmul, {S}^3 fp16: naive, tiled, cuBLAS")
else:
    print("The ladder chart needs GPU timings: interpreter times say nothing about GPU speed.")
roofline.plot_roofline(results);

# %% [markdown] id="cell-46"
# ## What comes next
#
# Tiling took the kernel from one useful FLOP per two bytes requested to dozens, and `tl.dot` put
# the arithmetic on the tensor cores: on an H200 the reference solution ran 484 times faster than
# the naive kernel at 1024³ and reached 0.78x cuBLAS at 4096³ (this lesson's cells, 2026-11-29,
# docs/results/h200.md). What is left is *time*, not bytes. Inside each program the $K$ loop loads
# a tile, then multiplies it: the tensor cores wait while a tile travels from memory, and the
# memory system waits while they multiply. Triton's compiler already overlaps the two a little by
# itself (it software-pipelines such loops with `num_stages=3` by default on NVIDIA GPUs), but how
# deep the pipeline is, how many warps share a tile and which block sizes fit in shared memory
# decide how close a kernel gets to the roof. Lesson 03 makes the pipeline explicit: latency
# hiding, `num_stages` and `num_warps`, autotuning, and on Hopper, persistent kernels fed by the
# tensor memory accelerator (TMA).
