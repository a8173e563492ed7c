# tilegym-notebook: {"metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}, "language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}

# %% [markdown] id="cell-00"
# # Lesson 03: Software pipelining — hiding latency, autotuning, persistent kernels
#
# Lesson 02's tiled kernel cut the bytes a matmul asks for by the size of its tiles and put the
# arithmetic on the tensor cores. What is left is *time*. Each step of its $K$ loop loads two tiles
# and multiplies them, and written that way the two never overlap: the tensor cores wait while a
# tile travels from memory, and the memory system waits while they multiply. This lesson overlaps
# them, and then learns to pick, for each GPU and each shape, the configuration that overlaps them
# best:
#
# 1. **A timing model of the $K$ loop.** You simulate a loop with $S$ tile buffers and find out how
#    many stages hide a load's latency, and what the rest costs.
# 2. **Pipelining in Triton**: `num_stages`, what the compiler emits for it, and the shared memory
#    every stage costs.
# 3. **Autotuning** with `tilegym_edu.tune`: search spaces at three levels, pruning what cannot fit,
#    compile failures, racing candidates with early stopping, and a cache so a shape is tuned once.
# 4. **Persistent kernels and the tensor memory accelerator (TMA)** on Hopper and later GPUs: one
#    program per SM walking over tiles, loading them through tensor descriptors without a single
#    mask.
# 5. **Split-K**, for outputs too small to give every SM a tile: the $K$ loop cut into ranges that
#    run at once, and their partial products added by a second kernel.
#
# | exercise | points | graded | needs |
# | --- | --- | --- | --- |
# | 1. the pipeline timing model | 3 | everywhere | |
# | 2. the shared memory a configuration needs | 2 | everywhere | |
# | 3. the pipelined, autotuned matmul: correct | 4 | everywhere | |
# | 3. its speed: over the kernel unpipelined; against cuBLAS | 2 + 2 | GPU only | 1.3x; 0.75 |
# | 4. the persistent tensor-descriptor matmul: correct | 3 | interpreter, or GPU of CC 9.0+ | |
# | 4. its speed against cuBLAS | 2 | GPU of CC 9.0+ | 0.85 |
# | 5. split-K: correct on odd shapes, and it stores exactly its partials | 3 + 2 | everywhere | |
# | 5. split-K's speed against cuBLAS on a 256 x 256 output | 2 | GPU only | 0.5 |
#
# *needs*: the least ratio a timed cell accepts, each set from an H200 run of the reference
# solution with a margin (`tilegym_edu/thresholds.toml` says which run and why).
#
# **Grading.** *GPU only* cells are graded on a GPU; without one the grader marks them *needs GPU*.
# Cells marked *Exercise* are graded by `tilegym-edu grade 03_software_pipelining` (or
# `make grade LESSON=03_software_pipelining`), which grades a copy of this notebook and never
# changes it.

# %% [markdown] id="cell-01"
# ## Setup
#
# `import tilegym_edu` comes first, as always: it decides whether kernels run on your GPU or in
# Triton's CPU interpreter. Besides the helpers you know, this lesson imports `tune`, the course's
# autotuner, the kernels of lessons 01 and 02 (the rungs of this lesson's ladder) and the course's
# reference solution of this lesson, `reference`, which sections 3 to 6 take apart before you write
# your own.

# %% id="cell-02" nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import tilegym_edu  # noqa: F401  (first: decides GPU or interpreter mode before triton is imported)

import re
import time

import matplotlib.pyplot as plt
import torch
import triton
import triton.language as tl

from tilegym_edu import bench, check, device, grading, roofline, tune
# lessons 01 and 02: the baselines
from tilegym_edu.reference.matmul import naive_matmul, tiled_matmul
# this lesson's reference solution
from tilegym_edu.reference import pipelined as reference
# helpers for Exercise 4
from tilegym_edu.reference.pipelined import persistent_grid_size, tma_problem
# ... and Exercise 5: split-K's default configuration and the reduction's block
from tilegym_edu.reference.split_k import REDUCE_BLOCK, SPLIT_K_DEFAULT
from tilegym_edu.tiles import grouped_tile     # lesson 02's grouped ordering, for your kernels

print(device.banner())
DEVICE = device.DEVICE
SIZE = device.size(gpu=4096, cpu=64)     # square problems of the demonstrations: SIZE x SIZE x SIZE
spec, _ = roofline.resolve_spec()         # this GPU's datasheet, or an H200's without a GPU
SMS = device.info().sm_count if device.ON_GPU else spec.sm_count

# %% [markdown] id="cell-03"
# ## 1. Where lesson 02 left us
#
# On an H200 lesson 02's tiled kernel reached 0.78x the speed of cuBLAS at 4096³ in fp16
# (docs/results/h200.md). It had help it never asked for. Triton compiles every kernel with a set of
# options, and one of them, `num_stages`, defaults to 3 on NVIDIA GPUs: the compiler already
# *software-pipelined* lesson 02's $K$ loop, keeping the loads of the next tiles in flight while
# `tl.dot` worked on the current ones. Here are the defaults of the Triton you have installed, read
# from its NVIDIA back end:

# %% id="cell-04"
# the options Triton compiles NVIDIA kernels with
from triton.backends.nvidia.compiler import CUDAOptions

print(f"triton {triton.__version__}: num_stages = {CUDAOptions.num_stages}, "
      f"num_warps = {CUDAOptions.num_warps}, unless a launch says otherwise")

# %% [markdown] id="cell-05"
# What those stages are worth shows when you take them away. This lesson's reference kernel (section
# 3: lesson 02's kernel with two small changes), with 128 × 128 × 64 tiles and 8 warps, at 4096³ in
# fp16, timed interleaved with cuBLAS in one run on an H200
# (docs/results/h200-2026-11-29-matmul-configs.json):
#
# | `num_stages` | 1 | 2 | 3 | 4 | cuBLAS |
# | --- | --- | --- | --- | --- | --- |
# | TFLOP/s | 326 | 456 | 617 | 604 | 674 |
# | fraction of cuBLAS | 0.48 | 0.68 | 0.92 | 0.90 | 1 |
#
# Without pipelining the same tiles run at half of cuBLAS; three stages take them to 0.92, and a
# fourth buys nothing. (The SM clock read 1590 MHz after that run, below the H200's 1980 MHz
# maximum: under sustained load the GPU clocks down, so absolute rates differ between runs and only
# rates measured together are compared. The ladder run of the same day, at 1905-1980 MHz,
# measured 391 and 655 TFLOP/s for one and three stages on these tiles: 1.68x,
# docs/results/h200.md.) This lesson explains those numbers, and then climbs past them.
#
# ## 2. Why the tiled kernel waits
#
# Follow one program of the tiled kernel in time. Each step of its $K$ loop loads the next tile of
# $A$ and of $B$ and waits for them to arrive; call that the **latency** $L$ (the tiles travel from
# DRAM or the L2 cache across the chip into the SM). Then `tl.dot` multiplies them, taking **compute
# time** $C$. Load, wait, compute, load, wait, compute: each step costs $L + C$, and the tensor
# cores are busy only $C / (L + C)$ of the time.
#
# The cure is as old as pipelined CPUs: issue the load of tile $j + 1$, and $j + 2$, before tile $j$
# is multiplied, so the next tiles are already there when the tensor cores want them. Tiles in
# flight need somewhere to land: a **buffer** each, in shared memory. With $S$ buffers a program can
# run up to $S - 1$ loads ahead of the tile it is multiplying, and a buffer can take a new tile only
# once the tile in it has been consumed. That is **software pipelining**, and $S$ is what Triton
# calls `num_stages`.
#
# How much does it buy, and how many stages are enough? A small model answers both.
#
# ## Exercise 1 (3 points): the pipeline timing model
#
# A program processes tiles $j = 0, 1, \ldots, T - 1$ in order, with $S \ge 1$ buffers. Times are
# real numbers; everything starts at time 0. The rules:
#
# 1. **Load of tile $j$** is issued at time 0 if $j < S$; otherwise when the compute of tile $j - S$
#    has finished (tile $j$ lands in the buffer tile $j - S$ used). It takes $L$.
# 2. **Compute of tile $j$** starts when the load of tile $j$ has finished *and* the compute of tile
#    $j - 1$ has finished (for tile 0, only the first). It takes $C$.
# 3. Nothing else limits loads: any number of them can be in flight at once. (The model is about
#    latency, not bandwidth.)
#
# Write `pipeline_schedule(T, S, L, C)`, returning one tuple
# `(load_start, load_end, compute_start, compute_end)` per tile, in tile order (an empty list for
# $T = 0$), and `pipeline_time(T, S, L, C)`, the time the last compute ends (0 for $T = 0$).
#
# Two checks you can do by hand: with $S = 1$ nothing overlaps, and the loop takes $T (L + C)$; with
# $S \ge T$ every load starts at once, and it takes $L + T C$. The grader checks many cases against
# the rules, some you do not see ($T = 0$, $T = 1$, $S > T$, $L = 0$, $C = 0$, fractions), to
# $10^{-9}$.

# %% id="cell-06" nbgrader={"grade": false, "grade_id": "pipeline_model_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def pipeline_schedule(T: int, S: int, L: float,
                      C: float) -> list[tuple[float, float, float, float]]:
    """(load_start, load_end, compute_start, compute_end) of tiles 0 .. T-1 of a loop with S
    buffers, loads of latency L and computes of duration C, under the rules above."""
    ### BEGIN SOLUTION
    schedule = []
    for j in range(T):
        load_start = 0.0 if j < S else schedule[j - S][3]   # tile j takes the buffer of tile j - S
        load_end = load_start + L
        compute_start = max(load_end, schedule[j - 1][3] if j else 0.0)
        schedule.append((load_start, load_end, compute_start, compute_start + C))
    return schedule
    ### END SOLUTION


def pipeline_time(T: int, S: int, L: float, C: float) -> float:
    """When the compute of the last of T tiles ends (0 for T = 0)."""
    ### BEGIN SOLUTION
    return pipeline_schedule(T, S, L, C)[-1][3] if T else 0.0
    ### END SOLUTION

# %% id="cell-07" nbgrader={"grade": true, "grade_id": "test_pipeline_schedule", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Exercise 1: pipeline_schedule and pipeline_time follow the rules of the model.
def expect_schedule(T, S, L, C, want):
    got = grading.formula_answer(pipeline_schedule, T, S, L, C)
    assert len(got) == len(want), (f"pipeline_schedule(T={T}, S={S}, L={L}, C={C}) returned "
                                   f"{len(got)} tiles, expected {T}")
    for j, (g, w) in enumerate(zip(got, want)):
        assert len(g) == 4 and all(abs(x - y) <= 1e-9 for x, y in zip(g, w)), \
            (f"pipeline_schedule(T={T}, S={S}, L={L}, C={C}): tile {j} is {tuple(g)}, "
             f"the rules give {tuple(w)}")


def expect_time(T, S, L, C, want):
    got = grading.formula_answer(pipeline_time, T, S, L, C)
    assert abs(got - want) <= 1e-9, (f"pipeline_time(T={T}, S={S}, L={L}, C={C}) = {got}, "
                                     f"the rules give {want}")


expect_schedule(4, 2, 3, 1, [(0, 3, 3, 4), (0, 3, 4, 5), (4, 7, 7, 8), (5, 8, 8, 9)])
expect_schedule(3, 1, 3, 1, [(0, 3, 3, 4), (4, 7, 7, 8), (8, 11, 11, 12)])
expect_time(8, 1, 3, 1, 32)     # S = 1: T (L + C)
expect_time(8, 8, 3, 1, 11)     # S >= T: L + T C
expect_time(0, 3, 3, 1, 0)
### BEGIN HIDDEN TESTS
def rules(T, S, L, C):
    out = []
    for j in range(T):
        ls = 0.0 if j < S else out[j - S][3]
        cs = max(ls + L, out[j - 1][3] if j else 0.0)
        out.append((ls, ls + L, cs, cs + C))
    return out


cases = [(1, 1, 3, 1), (1, 4, 2.5, 0.5), (0, 1, 1, 1), (5, 9, 3, 1), (6, 3, 0, 1), (6, 2, 3, 0),
         (7, 3, 0.7, 1.3), (10, 4, 3, 1), (12, 5, 7.25, 1.5), (9, 2, 1, 4), (16, 3, 2, 0.3333),
         (11, 6, 5, 0.125), (20, 7, 12.5, 2.25), (3, 3, 0, 0)]
cases += grading.drawn_cases(lambda rng: (rng.randint(1, 24), rng.randint(1, 8),
                                          rng.randint(0, 40) / 4, rng.randint(0, 16) / 8), 4)
for T, S, L, C in cases:
    expect_schedule(T, S, L, C, rules(T, S, L, C))
    expect_time(T, S, L, C, rules(T, S, L, C)[-1][3] if T else 0.0)
### END HIDDEN TESTS
print("pipeline_schedule and pipeline_time follow the rules")

# %% [markdown] id="cell-08"
# Now look at the schedules. Each panel below is one value of $S$ for $T = 8$ tiles with $L = 3$ and
# $C = 1$: a row per tile, its load in light blue and its compute in dark orange, drawn from *your*
# `pipeline_schedule`.

# %% id="cell-09" nbgrader={"grade": false, "grade_id": "gantt_chart", "locked": true, "schema_version": 3, "solution": false, "task": false}
T, L, C = 8, 3.0, 1.0
fig, axes = plt.subplots(4, 1, figsize=(9, 11), sharex=True)
for ax, S in zip(axes, (1, 2, 3, 4)):
    schedule = pipeline_schedule(T, S, L, C)
    for j, (load_start, load_end, compute_start, compute_end) in enumerate(schedule):
        ax.broken_barh([(load_start, load_end - load_start)], (j - 0.4, 0.35),
                       color="tab:blue", alpha=0.45)
        ax.broken_barh([(compute_start, compute_end - compute_start)], (j + 0.05, 0.35),
                       color="tab:orange")
    ax.set_title(f"S = {S}: the last compute ends at {pipeline_time(T, S, L, C):g}")
    ax.set_yticks(range(T))
    ax.set_ylabel("tile")
    ax.invert_yaxis()
    ax.grid(True, axis="x", alpha=0.3)
axes[0].legend(handles=[plt.Rectangle((0, 0), 1, 1, color="tab:blue", alpha=0.45),
                        plt.Rectangle((0, 0), 1, 1, color="tab:orange")],
               labels=["load", "compute"], loc="upper right")
axes[-1].set_xlabel(f"time (L = {L:g}, C = {C:g})")
fig.tight_layout()
plt.show()
print(f"S = 1 takes T (L + C) = {T * (L + C):g}; the tensor cores alone need T C = {T * C:g}, "
      f"and the first tile cannot start before L: no schedule beats L + T C = {L + T * C:g}")

# %% [markdown] id="cell-10"
# With one buffer the loads and computes alternate. A second buffer lets the load of the next tile
# run during the current compute, and the time nearly halves. With three the chart settles into a
# rhythm, but the compute row still has gaps; with four it has none, and the loop ends at $L + TC$,
# the best any schedule can do.
#
# **The steady state.** Follow one buffer. The compute of tile $j - S$ frees it; then tile $j$ must
# be loaded ($L$) and computed ($C$) before the buffer is free again for tile $j + S$. So each
# buffer carries at most one tile per $L + C$, and $S$ buffers at most $S$ tiles per $L + C$. And
# the tensor cores take $C$ per tile whatever the loads do. Once the loop has run for a while, a
# tile therefore costs
#
# $$\max\!\Big(C,\ \frac{L + C}{S}\Big),$$
#
# and the latency is hidden completely, every compute right after the previous one, as soon as
# $\frac{L + C}{S} \le C$, that is
#
# $$S \;\ge\; \frac{L + C}{C} \;=\; 1 + \frac{L}{C}.$$
#
# For $L = 3C$ that is four stages, as the chart showed. Here is your model against the formula, the
# time per tile measured over 60 tiles of a long loop:

# %% id="cell-11"
L, C = 3.0, 1.0
print(f"L = {L:g}, C = {C:g}: S >= (L + C) / C = {(L + C) / C:g} stages hide the latency")
print(f"{'S':>3}  {'time per tile, your schedule':>29}  {'max(C, (L + C) / S)':>20}")
for S in range(1, 7):
    schedule = pipeline_schedule(400, S, L, C)
    # over 60 tiles: a whole number of periods for S <= 6
    per_tile = (schedule[399][3] - schedule[339][3]) / 60
    print(f"{S:>3}  {per_tile:>29.4f}  {max(C, (L + C) / S):>20.4f}")

# %% [markdown] id="cell-12"
# Read the H200 measurements of section 1 with the model. One stage to two gave 1.40x and one to
# three 1.89x; a fourth gave nothing. In the model's terms, by three stages the loads were hidden
# and the tensor cores set the pace. Unlike the model, the fourth stage even cost a little (617 to
# 604 TFLOP/s): a stage is not free, it is a buffer in shared memory (section 4), and a program that
# takes more shared memory leaves room for fewer programs on the same SM. The model leaves out such
# things: a real SM runs several programs (and many warps) at once, which hide some of each other's
# waits, and loads share the memory system's bandwidth. Its lesson stands: **the stages needed grow
# with the ratio of latency to compute per step**, and that ratio depends on the GPU, the tile sizes
# and the problem. So the number of stages is not derived: it is measured, which is what autotuning
# (section 5) is for.
#
# ## 3. Pipelining in Triton
#
# You do not write the pipeline yourself. Triton's compiler rewrites the loop: a *prologue* issues
# the first $S - 1$ loads, the loop body issues the load for a later step before it computes on the
# current one, and the buffers rotate. You choose $S$:
#
# * **`num_stages=S` as a launch option**, `kernel[grid](..., num_stages=3)`, applies to every loop
#   of the kernel; per the docstring of `tl.range` in your Triton it pipelines the loads that feed a
#   `tl.dot`.
# * **`tl.range(start, end, num_stages=S)`** in place of `range` sets it for one loop (and, per the
#   same docstring, tries to pipeline most loads of that loop). `tl.range` takes other hints too,
#   such as `flatten=True` (section 6). A plain `range` loop is pipelined with the launch option.
#
# Here is this lesson's reference kernel, which Exercise 3 asks you to write out:

# %% id="cell-13"
print(tune.kernel_source(reference.pipelined_matmul_kernel))

# %% [markdown] id="cell-14"
# It is lesson 02's kernel with two changes:
#
# * **The $K$ loop is a `tl.range`** over the number of $K$ steps, `tl.cdiv(K, BLOCK_K)`; it is
#   pipelined with the launch option's `num_stages`. Without arguments `tl.range` pipelines as
#   `range` would; counting steps gives the last step's mask, `k_left = K - k * BLOCK_K`, and
#   `tl.range` is where a per-loop hint such as `num_stages=` would go.
# * **Rows and columns past the edge wrap around** (`% M`, `% N`) instead of being masked. A tile
#   that hangs over the bottom edge of $C$ loads rows $0, 1, \ldots$ of $A$ again where rows $M,
#   M+1, \ldots$ would be: real addresses inside $A$, so those loads need no mask, and the rows of
#   the result they produce are never stored (the store keeps its masks). The loads keep a single
#   mask, on $k$, `offs_k < k_left` (true everywhere but the last step), with `other=0.0` so the
#   columns past $K$ add zeros, instead of a 2-D mask on rows, columns and $k$: less index
#   arithmetic in the loop the compiler must pipeline. Triton's own matmul tutorial does the same.
#
# **What the compiler emits.** A compiled kernel carries its *metadata* (the shared memory it
# allocated, in bytes, `compiled.metadata.shared`), its register use (`compiled.n_regs` per thread,
# and `compiled.n_spills`, registers that did not fit and went to slow local memory) and every stage
# of its code, among them the PTX, NVIDIA's virtual assembly, in `compiled.asm["ptx"]`. In Triton
# 3.x a launch `kernel[grid](...)` returns that compiled kernel. The instructions that show what
# happened to the loads and the products:
#
# | PTX | what it is |
# | --- | --- |
# | `cp.async.ca` / `.cg` | an asynchronous copy, global to shared memory (Ampere on) |
# | `cp.async.bulk.tensor` | a tile copied by the tensor memory accelerator, TMA (Hopper on) |
# | `wgmma.mma_async` | a warpgroup's matrix product on Hopper's tensor cores |
# | `mma.sync` | a warp's matrix product on the tensor cores of Ampere and earlier |
# | `tcgen05.mma` | a matrix product on Blackwell's tensor cores |
#
# The cell below compiles the reference kernel with 1 to 4 stages on your GPU and counts them (the
# counts are of instructions in the code, not of instructions executed).

# %% id="cell-15" tags=["demo"]
PTX_MARKERS = {"cp.async": r"cp\.async\.c[ag]",
               "cp.async.bulk.tensor (TMA)": r"cp\.async\.bulk\.tensor",
               "wgmma.mma_async (Hopper)": r"wgmma\.mma_async", "mma.sync (Ampere)": r"mma\.sync",
               "tcgen05.mma (Blackwell)": r"tcgen05\.mma"}
TILES = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8)   # section 1's tiles

# Measured on an H200 (docs/results/h200.md): the same kernel and tiles, fp16, as the compiler
# built them.
H200_COMPILED = {   # num_stages: (shared bytes, registers, spills, cp.async, TMA, wgmma, mma.sync)
    1: (32768, 128, 0, 0, 0, 4, 0), 2: (65536, 122, 0, 16, 0, 4, 0),
    3: (98304, 124, 0, 24, 0, 4, 0), 4: (131072, 128, 0, 32, 0, 4, 0)}
FACTS = ["shared memory (bytes)", "registers per thread", "spilled registers"]


def compiled_facts(compiled):
    """What the compiler made of one launch: resources, and PTX instructions counted."""
    ptx = compiled.asm["ptx"]
    return [compiled.metadata.shared, compiled.n_regs, compiled.n_spills,
            *(len(re.findall(pattern, ptx)) for pattern in PTX_MARKERS.values())]


def print_facts(columns):
    """One row per fact, one column per num_stages ("-": not recorded); a column that is a string
    says why that configuration has no facts."""
    print(f"{'num_stages':>28}" + "".join(f"{s:>10}" for s in columns))
    for i, name in enumerate(FACTS + list(PTX_MARKERS)):
        cells = ["" if isinstance(v, str) else "-" if v[i] is None else f"{v[i]:,}"
                 for v in columns.values()]
        print(f"{name:>28}" + "".join(f"{cell:>10}" for cell in cells))
    for stages, v in columns.items():
        if isinstance(v, str):
            print(f"num_stages={stages}: {v}")


if device.ON_GPU:
    a = torch.randn(512, 512, device=DEVICE, dtype=torch.float16)
    b = torch.randn(512, 512, device=DEVICE, dtype=torch.float16)
    c = torch.empty(512, 512, device=DEVICE, dtype=torch.float16)
    columns = {}
    for stages in (1, 2, 3, 4):
        try:
            compiled = reference.pipelined_matmul_kernel[(16,)](
                a, b, c, 512, 512, 512, *a.stride(), *b.stride(), *c.stride(),
                **TILES, num_stages=stages)
            columns[stages] = compiled_facts(compiled)
        except Exception as error:   # OutOfResources on GPUs with less shared memory
            columns[stages] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
    print("this lesson's kernel, 128 x 128 x 64 tiles, 8 warps, fp16, "
          f"on the {device.info().name}:")
    print_facts(columns)
else:
    print("Compiled code needs a GPU. On an H200 (docs/results/h200.md), "
          "this kernel with 128 x 128 x 64 tiles and 8 warps, fp16:")
    print_facts({stages: [*facts, None] for stages, facts in H200_COMPILED.items()})

# %% [markdown] id="cell-16"
# On an H200 the kernel with one stage contains no asynchronous copy at all: each step loads its
# tiles with ordinary loads, waits, and multiplies. From two stages on the loads are `cp.async`
# copies straight into shared memory, 8 per stage: 16, 24, 32. One stage's tiles, $(128 \cdot 64 +
# 64 \cdot 128) \cdot 2$ = 32 KiB, spread over 256 threads are 128 bytes a thread, eight 16-byte
# copies; $8S$ copies is what you expect from a prologue that issues $S - 1$ steps' copies and a
# loop body that issues one more. (The same rule, the bytes of one stage over 16 bytes times the
# threads, times $S$, gives the count of every pipelined configuration of the H200 run.) The shared
# memory grows by exactly those 32 KiB per stage, and the products are `wgmma` instructions whatever
# the stages. Registers barely move (122 to 128 per thread), and none spill.
#
# **Time it.** The same tiles with 1 to 5 stages on your GPU, at 4096³ in fp16, interleaved with
# cuBLAS (configurations whose buffers do not fit your GPU's shared memory are left out):

# %% id="cell-17" tags=["demo"]
if device.ON_GPU:
    a = torch.randn(SIZE, SIZE, device=DEVICE, dtype=torch.float16)
    b = torch.randn(SIZE, SIZE, device=DEVICE, dtype=torch.float16)
    fns = {}
    for stages in (1, 2, 3, 4, 5):
        try:
            config = {**TILES, "num_stages": stages}
            reference.pipelined_matmul(a, b, config)   # compiles, or says why not
            fns[f"num_stages={stages}"] = (
                lambda config=config: reference.pipelined_matmul(a, b, config))
        except Exception as error:
            print(f"num_stages={stages}: {type(error).__name__}: {str(error).splitlines()[0]}")
    fns["cuBLAS (torch.matmul)"] = lambda: torch.matmul(a, b)
    stages_results = bench.compare(fns, flops=2 * SIZE**3, bytes=3 * SIZE * SIZE * 2)
    bench.print_table(stages_results, baseline="num_stages=1")
else:
    print("Timing the stages needs a GPU: interpreter times say nothing about GPU speed. "
          "On an H200 (docs/results/h200-2026-11-29-matmul-configs.json): "
          "326, 456, 617 and 604 TFLOP/s for 1 to 4 stages, cuBLAS 674.")

# %% [markdown] id="cell-18"
# ## 4. What a stage costs: shared memory
#
# Every stage is a buffer holding one step's tiles: a $B_M \times B_K$ tile of $A$ and a $B_K \times
# B_N$ tile of $B$. A configuration with $S$ stages and elements of $e$ bytes therefore needs
#
# $$S \cdot (B_M B_K + B_K B_N) \cdot e \quad\text{bytes of shared memory,}$$
#
# and the SM has only so much: 232,448 bytes (227 KiB) per program on an H200, less on most other
# GPUs (the CUDA programming guide lists 163 KiB for an A100 and 64 KiB for a T4). A configuration
# that needs more does not compile. Deep pipelines and big tiles compete for the same bytes.
#
# ## Exercise 2 (2 points): the shared memory a configuration needs
#
# Write `shared_memory_bytes(config, element_bytes)` for a configuration given as a mapping with
# keys `BLOCK_M`, `BLOCK_N`, `BLOCK_K` and `num_stages` (and possibly others, which do not matter
# here): a `tune.Config`, or a plain `dict`. The grader checks it against the bytes the compiler
# allocated on an H200 for configurations it does not show you, and in fp32.

# %% id="cell-19" nbgrader={"grade": false, "grade_id": "shared_memory_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def shared_memory_bytes(config, element_bytes: int) -> int:
    """Bytes of shared memory the pipelined kernel needs with `config` (BLOCK_M, BLOCK_N, BLOCK_K,
    num_stages) for elements of `element_bytes` bytes: one A tile and one B tile per stage."""
    ### BEGIN SOLUTION
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    return config["num_stages"] * (bm * bk + bk * bn) * element_bytes
    ### END SOLUTION

# %% id="cell-20" nbgrader={"grade": true, "grade_id": "test_shared_memory_bytes", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 2: shared_memory_bytes is what the compiler allocates for the pipelined kernel.
def expect_bytes(bm, bn, bk, warps, stages, e, want, source):
    config = tune.Config(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                         num_warps=warps, num_stages=stages)
    got = grading.formula_answer(shared_memory_bytes, config, e)
    assert got == want, f"shared_memory_bytes({config}, {e}) = {got:,}; {source} {want:,}"


expect_bytes(128, 128, 64, 8, 3, 2, 98_304, "the compiler allocated on an H200:")
expect_bytes(128, 128, 32, 4, 1, 2, 16_384, "the compiler allocated on an H200:")
expect_bytes(64, 64, 32, 4, 2, 4, 32_768, "expected (fp32):")
### BEGIN HIDDEN TESTS
for bm, bn, bk, warps, stages, want in [(128, 256, 32, 8, 5, 122_880), (64, 256, 32, 4, 4, 81_920),
                                        (128, 64, 64, 4, 4, 98_304), (256, 128, 64, 8, 3, 147_456),
                                        (128, 256, 64, 8, 4, 196_608),
                                        (128, 128, 64, 8, 2, 65_536)]:
    expect_bytes(bm, bn, bk, warps, stages, 2, want, "the compiler allocated on an H200:")
expect_bytes(32, 64, 16, 4, 4, 4, 24_576, "expected (fp32):")
for bm, bn, bk, stages, e in grading.drawn_cases(
        lambda rng: (*(rng.choice([16, 32, 64, 128, 256]) for _ in range(3)), rng.randint(1, 5),
                     rng.choice([2, 4])), 3):
    expect_bytes(bm, bn, bk, 4, stages, e, stages * (bm + bn) * bk * e, "the rules give")
as_dict = {"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 128, "num_stages": 3}
got = grading.formula_answer(shared_memory_bytes, as_dict, 2)
assert got == 73_728, f"shared_memory_bytes({as_dict}, 2) = {got}, expected 73,728"
### END HIDDEN TESTS
print("shared_memory_bytes matches the compiler")

# %% [markdown] id="cell-21"
# Here is your formula next to what the compiler allocated for the H200 runs of
# docs/results/h200.md. The second table is the persistent kernel of section 6, which also stages
# its output tile in shared memory before storing it (all of it, or half with `EPILOGUE_SPLIT=2`):
# formula plus that buffer, against the compiler.

# %% id="cell-22"
# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) -> shared bytes the compiler allocated, fp16
H200_SHARED = [
    ((128, 128, 64, 8, 1), 32768), ((128, 128, 64, 8, 3), 98304), ((128, 128, 32, 4, 5), 81920),
    ((128, 256, 64, 8, 3), 147456), ((128, 256, 64, 8, 4), 196608), ((256, 128, 64, 8, 3), 147456),
    ((128, 256, 32, 8, 5), 122880), ((64, 256, 32, 4, 4), 81920), ((128, 64, 64, 4, 4), 98304)]
H200_PERSISTENT_SHARED = [  # (..., EPILOGUE_SPLIT) -> bytes; None: failed to compile
    ((128, 256, 64, 8, 3, 1), 213016), ((128, 256, 64, 8, 3, 2), 180248),
    ((128, 256, 64, 8, 4, 2), 229408), ((128, 128, 64, 8, 4, 1), 163872),
    ((128, 128, 64, 8, 5, 2), 180264), ((128, 256, 32, 8, 6, 2), 180272),
    ((128, 256, 64, 8, 4, 1), None)]


def as_config(bm, bn, bk, warps, stages, **more):
    return tune.Config(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                       num_warps=warps, num_stages=stages, **more)


print(f"{'pipelined kernel, fp16':>28}  {'yours':>9}  {'H200 compiler':>13}")
for (bm, bn, bk, warps, stages), compiler in H200_SHARED:
    yours = shared_memory_bytes(as_config(bm, bn, bk, warps, stages), 2)
    print(f"{f'{bm}x{bn}x{bk} w{warps} s{stages}':>28}  {yours:>9,}  {compiler:>13,}")
print(f"\n{'persistent kernel, fp16':>28}  {'yours + C tile':>14}  {'H200 compiler':>13}  "
      "difference")
for (bm, bn, bk, warps, stages, split), compiler in H200_PERSISTENT_SHARED:
    needed = shared_memory_bytes(as_config(bm, bn, bk, warps, stages), 2) + bm * (bn // split) * 2
    shown = f"{compiler:>13,}  {compiler - needed:>+10}" if compiler else f"{'failed':>13}"
    print(f"{f'{bm}x{bn}x{bk} w{warps} s{stages} split{split}':>28}  {needed:>14,}  {shown}")

# %% [markdown] id="cell-23"
# For the pipelined kernel the formula is the compiler's figure, byte for byte. For the persistent
# kernel the compiler adds 8 bytes per stage, whatever the tiles: 8 bytes is the size of an
# `mbarrier`, the object a TMA copy signals its arrival through, so by the look of it one per
# buffer.
#
# The last line is the failure the H200 run recorded: 128 × 256 × 64 tiles, 4 stages, and the whole
# 128 × 256 output tile staged for the store (no split). The stages take $4 \cdot (128 \cdot 64 + 64
# \cdot 256) \cdot 2$ = 196,608 bytes, the output tile $128 \cdot 256 \cdot 2$ = 65,536 more, and
# the barriers 32: 262,176 bytes. The compiler's message was `OutOfResources: out of resource:
# shared memory, Required: 262176, Hardware limit: 232448`. The same tiles with the store split in
# halves need 229,408 bytes and fit; with 3 stages and no split, 213,016 fit too. On a GPU of
# compute capability 9.0 or newer (Hopper: tensor descriptors, section 6), the cell below asks your
# compiler:

# %% id="cell-24" tags=["demo"]
too_big = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, EPILOGUE_SPLIT=1, FLATTEN=True,
               num_warps=8, num_stages=4)
if device.ON_GPU and device.info().compute_capability >= (9, 0):
    a = torch.randn(512, 512, device=DEVICE, dtype=torch.float16)
    b = torch.randn(512, 512, device=DEVICE, dtype=torch.float16)
    try:
        reference.persistent_matmul(a, b, too_big)
        print("it compiled: this GPU offers more shared memory per program than an H200")
    except Exception as error:
        print(f"{type(error).__name__}: {error}")
else:
    print("On an H200 (docs/results/h200.md): OutOfResources: out of resource: shared memory, "
          "Required: 262176, Hardware limit: 232448.")

# %% [markdown] id="cell-25"
# A failed compile is a compile: seconds of the search spent to learn what arithmetic could have
# said. So an autotuner *prunes* first, with arithmetic like yours. Shared memory is
# one rule. The other is **registers**: the float32 accumulator, $B_M B_N$ values, lives in the
# registers of the program's $32 \cdot$`num_warps` threads, and a thread has at most 255 registers
# for everything it holds. The course's rule: at most 128 accumulator values per thread. 128 × 256
# tiles with 8 warps sit exactly at 128: on the H200 the pipelined kernel's 128 × 256 and 256 × 128
# configurations with 8 warps used 172 to 220 registers per thread, none spilled. 256 × 256 tiles
# with 8 warps would need 256 for the accumulator alone, more than a thread has.
#
# ## 5. Autotuning: measure, don't guess
#
# Which tiles, how many warps, how many stages? The answer depends on the GPU (its shared memory,
# its latency to compute ratio), on the shape (a short $K$ leaves little loop to pipeline; a small
# $M N$ leaves SMs idle with big tiles) and on the dtype. So it is measured, per GPU and per shape.
# `tilegym_edu.tune` does this the way production autotuners do:
#
# * **A search space at three levels.** `tune.SearchSpace(default=..., small=[...], grid={...},
#   prune=..., cap=...)`. Level 0 is the hand-written default alone; level 1 adds a short list of
#   configurations worth trying on any GPU (under a minute); level 2 adds every combination of the
#   `grid`, keeping at most `cap` after pruning.
# * **Pruning**: `prune(config, problem, resources)` returns why a configuration cannot run on this
#   GPU, or `None`; `resources` is a `tune.Resources` with this GPU's shared memory per program.
# * **Compile failures recorded**: every surviving candidate is run once, which compiles it; one the
#   compiler refuses (`OutOfResources`, for one) is recorded with its error, not fatal.
# * **Racing with early stopping**: the survivors are timed interleaved, a few runs each, round
#   after round. After each round a candidate whose *fastest* run is slower than the leader's
#   *median* by more than 5% is dropped: even its luckiest run lost to the leader's typical one. The
#   lowest median wins.
# * **One way of timing a race**: when a launch takes longer in Python than its kernel takes on
#   the GPU, timing plain launches measures Python, so short kernels are replayed from CUDA graphs
#   instead (the GPU's work alone). A race decides once, from its fastest launch's GPU time,
#   measured behind a GPU-side sleep that covers the host's launch (`bench.gpu_time_ms`; under
#   0.1 ms: graphs), and times every candidate that way in every round: mixing the two let a race
#   pick a configuration 1.21x the best one's GPU time (run 21's pick at MobileNetV2's 112²
#   depthwise layer, timed as graphs in run 23, docs/results/h200.md). When the bar was the host's
#   time, an H200 with a slow host raced lesson 06's decoding matmuls (one row of activations per
#   sequence) as plain launches, by our reading of the log, and picked this lesson's pipelined
#   kernel at 1.7x the GPU time of the kernel an earlier run had chosen (docs/results/h200.md).
#   With `race_as_graphs=True` a race uses graphs whatever its launch takes (plain launches, with
#   a note, only if a candidate cannot be captured).
# * **Too small to gain**: a problem whose default runs in under `tune.TUNE_ABOVE_MS` (0.02 ms) is
#   not tuned (`min_ms`): compiling the candidates would cost seconds to save microseconds.
# * **A cache**: the winner is stored per GPU, driver, Triton version, kernel source, problem,
#   level, candidate list, the race's rules and whether it was told to time graphs
#   (`race_as_graphs`), in memory and on disk (`tune.cache_path()`):
#   the second call for the same problem, even in a new process, is a lookup. Change the kernel,
#   a `@triton.jit` helper it calls or a constant it reads, and it tunes again.
# * **Clocks are read, never set**: the table reports the SM clock before and after the search.
# * **A progress bar** while it works. In interpreter mode there is nothing to time: `autotune`
#   returns the default configuration and says so.
# * **Not inside a correctness check**: `grading.assert_correct` runs your calls under
#   `tune.defaults_only()`, where `autotune` searches nothing: a problem tuned before keeps its
#   cached winner, any other runs the space's default (or the first candidate that fits).
#   Correctness must not depend on which configuration won.
#
# The course's search space for the pipelined kernel, `reference.PIPELINED_SPACE`, at each level,
# pruned for a 4096³ fp16 problem on your GPU (or an H200 without one):

# %% id="cell-26"
problem = {"M": 4096, "N": 4096, "K": 4096, "dtype": "float16"}
# without a GPU, an H200's limit
resources = tune.Resources.of_gpu() or tune.Resources(shared_bytes=232_448)
print(f"shared memory per program: {resources.shared_bytes:,} bytes")
for level in (0, 1, 2):
    kept, pruned = reference.PIPELINED_SPACE.candidates(level, problem, resources)
    print(f"level {level} ({tune.LEVELS[level]}): "
          f"{len(reference.PIPELINED_SPACE.configs(level))} configurations, "
          f"{len(kept)} kept, {len(pruned)} pruned")
for config, why in pruned[:4]:
    print(f"  pruned {config}: {why}")

# %% [markdown] id="cell-27"
# And a search: `tune.autotune(kernel, problem, space, launch, level=1)` calls `launch(config)` to
# run the kernel once on the problem's inputs with a configuration, here writing into a preallocated
# output. The first call searches (`cache=False` forces a search even if an earlier run stored a
# result); the second finds the result in the cache:

# %% id="cell-28" tags=["demo"]
M = N = K = SIZE
a = torch.randn(M, K, device=DEVICE, dtype=torch.float16)
b = torch.randn(K, N, device=DEVICE, dtype=torch.float16)
c = torch.empty(M, N, device=DEVICE, dtype=torch.float16)


def launch(config):
    grid = (triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"]),)
    reference.pipelined_matmul_kernel[grid](a, b, c, M, N, K,
                                            *a.stride(), *b.stride(), *c.stride(), **config)


problem = {"M": M, "N": N, "K": K, "dtype": "float16"}
start = time.perf_counter()
result = tune.autotune(reference.pipelined_matmul_kernel, problem, reference.PIPELINED_SPACE,
                       launch, level=1, cache=False)
first = time.perf_counter() - start
start = time.perf_counter()
again = tune.autotune(reference.pipelined_matmul_kernel, problem, reference.PIPELINED_SPACE,
                      launch, level=1)
second = time.perf_counter() - start
print(result.table())
if device.ON_GPU:
    print(f"\nfirst call (a search) {first:.1f} s; second call {second * 1e3:.2f} ms, "
          f"from the cache: {again.from_cache}, same winner: {again.config == result.config}")
else:
    print("\ninterpreter mode: both calls returned the default configuration at once, "
          "and nothing was cached")

# %% [markdown] id="cell-29"
# Each line of the table is one candidate: its median time, how far it is from the best, how many
# runs it got before racing stopped it, and what happened to it (the winner, raced to the end,
# dropped in round *n*, pruned with the reason, or failed with the compiler's error). In interpreter
# mode the table has only the default, and both calls return at once without caching anything.
#
# ## Exercise 3 (4 + 2 + 2 points): the pipelined, autotuned matmul
#
# Put the lesson together in one cell:
#
# 1. **`matmul_kernel`**: the reference kernel of section 3, word for word, under the name
#    `matmul_kernel` (the signature and docstring are given; write the body). Writing it out is
#    how you read it closely; the tests check what it computes and how fast, not its text.
# 2. **`fits(config, problem, resources)`**: the pruning rule of section 4. Return a string saying
#    why when the configuration needs more shared memory than `resources.shared_bytes` (use your
#    `shared_memory_bytes`, with the element size of `problem["dtype"]` from `ELEMENT_BYTES`) or
#    when its accumulator takes more than 128 registers per thread ($B_M B_N / (32 \cdot$
#    `num_warps`$)$); otherwise `None`.
# 3. **`matmul_config(a, b, level=1)`**: the `tune.Config` that `tune.autotune` picks for `a @ b`,
#    with the problem `{"M", "N", "K", "dtype"}` (the dtype as a string, `"float16"`), your
#    `MATMUL_SPACE`, and a launch function that writes into an output allocated once.
# 4. **`matmul(a, b, config=None)`**: `a @ b` for `a` $(M, K)$ and `b` $(K, N)$, fp16 or fp32, any
#    strides, any shape, returned in the inputs' dtype; with `config=None` it uses `matmul_config(a,
#    b)`.
# 5. **`MATMUL_SPACE`**, at the end of the cell: a `tune.SearchSpace` with the same configurations
#    as `reference.PIPELINED_SPACE` (print it, or read `tilegym_edu/reference/pipelined.py`), pruned
#    by your `fits`.
#
# The grader checks `matmul` on odd, tall, skinny and degenerate shapes ($K = 1$), transposed views,
# fp16 and fp32, with and without a configuration; calls must do their own arithmetic (no
# `torch.matmul`). On a GPU two timed checks follow, at 4096³ in fp16: your tuned `matmul` against
# the course's kernel with the default 128 × 128 × 64 tiles and `num_stages=1` (the H200 measured
# 1.86x with the reference solution), and against cuBLAS. The baselines are the course's, so nothing
# your code does can slow them. In interpreter mode `autotune` returns the default configuration,
# 128 × 128 × 64 tiles: the interpreter runs those few large programs quickly.

# %% id="cell-30" nbgrader={"grade": false, "grade_id": "matmul_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}   # element size by problem["dtype"]


def matmul_reference(a, b, *config):
    """The definition. The grader calls it on float64 CPU copies of your inputs."""
    return a @ b


def make_matmul_inputs(case, generator):
    """a (M, K) and b (K, N) for case = {"M", "N", "K", "dtype"}, standard normal, on the lesson's
    device, then case["config"] if the case names one. case["layout"]: "a transposed" /
    "b transposed" / "both transposed" make transposed views (a.t() of a (K, M) tensor: strides
    (1, M))."""
    M, N, K, dtype = case["M"], case["N"], case["K"], case["dtype"]
    layout = case.get("layout", "contiguous")
    a = (check.random_tensor((K, M), dtype, generator).t()
         if layout in ("a transposed", "both transposed")
         else check.random_tensor((M, K), dtype, generator))
    b = (check.random_tensor((N, K), dtype, generator).t()
         if layout in ("b transposed", "both transposed")
         else check.random_tensor((K, N), dtype, generator))
    return (a, b) + ((case["config"],) if "config" in case else ())


print(reference.PIPELINED_SPACE.default)
for config in reference.PIPELINED_SPACE.small:
    print(config)
print(reference.PIPELINED_SPACE.grid, "cap", reference.PIPELINED_SPACE.cap)

# %% id="cell-31" nbgrader={"grade": false, "grade_id": "matmul_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
# include: tilegym_edu/reference/pipelined.py pipelined_matmul_kernel as matmul_kernel solution


def fits(config, problem, resources) -> str | None:
    """Why `config` cannot run well for `problem` on a GPU with `resources` (a tune.Resources), or
    None if it can: too much shared memory, or an accumulator of more than 128 registers a
    thread."""
    ### BEGIN SOLUTION
    needed = shared_memory_bytes(config, ELEMENT_BYTES[problem["dtype"]])
    if needed > resources.shared_bytes:
        return (f"needs {needed // 1024} KiB of shared memory, the GPU offers "
                f"{resources.shared_bytes // 1024} KiB per block")
    accumulator = config["BLOCK_M"] * config["BLOCK_N"] // (32 * config["num_warps"])
    if accumulator > 128:
        return f"accumulator takes {accumulator} registers per thread (over 128: it would spill)"
    return None
    ### END SOLUTION


def matmul_config(a: torch.Tensor, b: torch.Tensor, level: int = 1) -> tune.Config:
    """The configuration tune.autotune picks for a @ b on this GPU (searched once per shape and
    dtype, then cached): the default one in interpreter mode."""
    ### BEGIN SOLUTION
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)

    def launch(config):
        grid = (triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"]),)
        matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                            c.stride(0), c.stride(1), **config)

    problem = {"M": M, "N": N, "K": K, "dtype": str(a.dtype).removeprefix("torch.")}
    return tune.autotune(matmul_kernel, problem, MATMUL_SPACE, launch, level=level).config
    ### END SOLUTION


def matmul(a: torch.Tensor, b: torch.Tensor, config=None) -> torch.Tensor:
    """a @ b with matmul_kernel: a (M, K), b (K, N), fp16 or fp32, any strides. `config` (a
    tune.Config) gives the block sizes, num_warps and num_stages; None tunes them
    (matmul_config)."""
    ### BEGIN SOLUTION
    if config is None:
        config = matmul_config(a, b)
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"]),)
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1), **config)
    return c
    ### END SOLUTION


# MATMUL_SPACE: the configurations of reference.PIPELINED_SPACE, pruned by fits.
### BEGIN SOLUTION
MATMUL_SPACE = tune.SearchSpace(
    default=tune.Config(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3),
    small=[tune.Config(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                       num_warps=warps, num_stages=stages)
           for bm, bn, bk, warps, stages in [(128, 256, 64, 8, 3), (128, 256, 32, 8, 5),
                                             (128, 128, 64, 8, 4), (128, 128, 32, 4, 5),
                                             (64, 128, 64, 4, 4), (128, 64, 64, 4, 4),
                                             (128, 128, 32, 4, 3), (64, 64, 32, 4, 3)]],
    grid={"BLOCK_M": (64, 128, 256), "BLOCK_N": (64, 128, 256), "BLOCK_K": (32, 64, 128),
          "GROUP_M": (8,), "num_warps": (4, 8), "num_stages": (2, 3, 4, 5)},
    prune=fits, cap=120)
### END SOLUTION

# %% [markdown] id="cell-32"
# Check it as you go with the grader's own checker:

# %% id="cell-33" nbgrader={"grade": false, "grade_id": "matmul_checker", "locked": true, "schema_version": 3, "solution": false, "task": false}
small = tune.Config(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=2, num_warps=4, num_stages=2)
for result in check.check(matmul, matmul_reference, make_matmul_inputs, seeds=[0], cases=[
        {"M": 37, "N": 29, "K": 70, "dtype": torch.float32, "config": small},
        {"M": 130, "N": 70, "K": 90, "dtype": torch.float16, "layout": "a transposed"}]):
    print(result.describe())

# %% id="cell-34" nbgrader={"grade": true, "grade_id": "test_matmul_correct", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
# Exercise 3: matmul is correct on odd, tall, skinny and degenerate shapes, fp16 and fp32,
# transposed views, with config=None (the default inside a check) and given configurations.
small = tune.Config(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=2, num_warps=4, num_stages=2)
wide = tune.Config(BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, GROUP_M=4, num_warps=4, num_stages=3)
tall = tune.Config(BLOCK_M=128, BLOCK_N=16, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=4)
skinny = tune.Config(BLOCK_M=16, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=3)
start = time.perf_counter()
cases = [
    {"M": 1, "N": 1, "K": 1, "dtype": torch.float32},
    {"M": 200, "N": 136, "K": 72, "dtype": torch.float16},
    {"M": 260, "N": 136, "K": 100, "dtype": torch.float32},
    {"M": 37, "N": 29, "K": 70, "dtype": torch.float16, "config": small},
    {"M": 300, "N": 1, "K": 100, "dtype": torch.float16, "config": tall},
    {"M": 1, "N": 300, "K": 65, "dtype": torch.float32, "config": skinny},
    {"M": 150, "N": 150, "K": 1, "dtype": torch.float16},
    {"M": 130, "N": 70, "K": 90, "dtype": torch.float16, "layout": "a transposed"},
    {"M": 70, "N": 130, "K": 33, "dtype": torch.float32, "layout": "both transposed",
     "config": wide},
]
grading.assert_correct(matmul, matmul_reference, make_matmul_inputs, cases, seeds=(0, 1))
### BEGIN HIDDEN TESTS
hidden_cases = [
    {"M": 129, "N": 257, "K": 65, "dtype": torch.float16, "layout": "b transposed"},
    {"M": 45, "N": 20, "K": 1, "dtype": torch.float32, "config": small},
    {"M": 3, "N": 5, "K": 200, "dtype": torch.float16, "layout": "both transposed"},
    {"M": 64, "N": 64, "K": 47, "dtype": torch.float32, "layout": "a transposed", "config": wide},
]
grading.assert_correct(matmul, matmul_reference, make_matmul_inputs, hidden_cases, seeds=(11,))
### END HIDDEN TESTS
print(f"checked in {time.perf_counter() - start:.1f} s")

# %% id="cell-35" nbgrader={"grade": true, "grade_id": "test_pipelined_vs_unpipelined", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 3b: the tuned matmul is much faster than the same kernel without pipelining: the
# reference kernel at its default configuration (128x128x64 tiles, 8 warps) with num_stages=1,
# fp16 4096^3 (GPU only). The baseline is the course's and fixed, so nothing in your code (not
# even a tuning cache entry) can make it slower.
grading.require_gpu("the speedup of your pipelined matmul over the same kernel unpipelined")
limit = grading.threshold("03_software_pipelining", "pipelined_vs_unpipelined")
input_sets = [make_matmul_inputs({"M": 4096, "N": 4096, "K": 4096, "dtype": torch.float16},
                                 torch.Generator().manual_seed(seed)) for seed in (0, 1)]
matmul(*input_sets[0])   # tuned once here (or found in the cache), outside the timing
unpipelined = {**reference.PIPELINED_DEFAULT, "num_stages": 1}
print(f"baseline: the reference kernel at {unpipelined}")
grading.assert_speedup(matmul, lambda a, b: reference.pipelined_matmul(a, b, unpipelined),
                       input_sets, matmul_reference, torch.float16, limit, flops=2 * 4096**3)

# %% id="cell-36" nbgrader={"grade": true, "grade_id": "test_pipelined_vs_cublas", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 3c: the tuned matmul reaches a good fraction of cuBLAS's speed, fp16 4096^3 (GPU only).
grading.require_gpu("the speed of your pipelined matmul against cuBLAS")
limit = grading.threshold("03_software_pipelining", "pipelined_vs_cublas")
input_sets = [make_matmul_inputs({"M": 4096, "N": 4096, "K": 4096, "dtype": torch.float16},
                                 torch.Generator().manual_seed(seed)) for seed in (0, 1)]
print(f"tuned configuration: {matmul_config(*input_sets[0])}")
# speed / cuBLAS speed = cuBLAS time / your time: assert_speedup with torch.matmul as the baseline
grading.assert_speedup(matmul, torch.matmul, input_sets, matmul_reference, torch.float16, limit,
                       flops=2 * 4096**3)

# %% [markdown] id="cell-37"
# If a timed check falls short on your GPU, look at the tuning table below first: did the default
# win, were configurations pruned or failed that should not have been? On an H200 the best pipelined
# configurations of the level-1 list, 128 × 256 × 64 with 3 stages and 128 × 256 × 32 with 5,
# reached 0.97x and 0.95x cuBLAS at 4096³ in fp16
# (docs/results/h200-2026-11-29-matmul-configs.json). The configuration your
# tuner chose for this lesson's problem size, and how it got there:

# %% id="cell-38" tags=["demo"]
a = torch.randn(SIZE, SIZE, device=DEVICE, dtype=torch.float16)
b = torch.randn(SIZE, SIZE, device=DEVICE, dtype=torch.float16)
problem = {"M": SIZE, "N": SIZE, "K": SIZE, "dtype": "float16"}
matmul_config(a, b)     # your Exercise 3 tunes this shape (or finds it in the cache) ...
yours = tune.autotune(matmul_kernel, problem, MATMUL_SPACE, lambda config: matmul(a, b, config),
                      level=1)
# ... and this call returns the same, cached, search with its table
print(yours.table())

# %% [markdown] id="cell-39"
# ## 6. Persistent kernels and the tensor memory accelerator
#
# Two costs are left that no number of stages removes.
#
# **The tail wave.** The pipelined kernel launches one program per output tile, and the GPU runs
# them in *waves*, as many at a time as its SMs hold. When the tiles do not divide evenly, the last
# wave runs on part of the GPU while the other SMs idle:

# %% id="cell-40"
for M, N, bm, bn in [(4096, 4096, 128, 256), (8192, 8192, 128, 256)]:
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    waves = tiles / SMS
    last = tiles - (triton.cdiv(tiles, SMS) - 1) * SMS
    print(f"{M}x{N} output, {bm}x{bn} tiles: {tiles} tiles on {SMS} SMs = {waves:.2f} waves "
          f"(one program per SM at a time); the last wave keeps {last} of {SMS} SMs busy")

# %% [markdown] id="cell-41"
# (A 128 × 256 × 64 configuration with three or more stages takes at least 144 KiB of shared memory,
# so an SM holds one such program at a time.) And **the prologue and epilogue of every tile**: each
# program starts with an empty pipeline, filling $S - 1$ stages before its first product, and ends
# by converting and storing its tile while its loads have long stopped. With a short $K$ these are a
# large share of each program's life: at $K = 512$ a 64-deep $K$ step leaves only 8 steps per tile.
#
# A **persistent kernel** launches one program per SM, and each program walks over tiles: `pid`,
# `pid + NUM_PROGRAMS`, `pid + 2 * NUM_PROGRAMS`, ... (in grouped order, as in lesson 02). There is
# no tail wave of launches, only some programs doing one tile more than others. And with
# `tl.range(..., flatten=True)` over the tiles, Triton pipelines the tile loop and the $K$ loop as
# one loop, so the first loads of a program's next tile are issued while it is still storing the
# current one.
#
# **Tensor descriptors and TMA.** Hopper GPUs (compute capability 9.0) added the *tensor memory
# accelerator*: a unit that copies a whole tile between global and shared memory on its own, from a
# description of the tensor (base address, shape, strides, and the tile's block shape), without the
# threads computing an address per element. In Triton you build the description on the host,
#
# ```python
# from triton.tools.tensor_descriptor import TensorDescriptor
# a_desc = TensorDescriptor.from_tensor(a, [BLOCK_M, BLOCK_K])   # a (M, K), BLOCK_M x BLOCK_K tiles
# ```
#
# pass it to the kernel like a tensor, and load a tile with `a_desc.load([row, col])` (the
# coordinates of its first element) or store one with `c_desc.store([row, col], tile)`. **The
# hardware handles the edges**: a load that reaches past the tensor reads zeros, a store past it is
# clipped. The kernel needs no masks at all, and no `% M` either. The price is a rule: TMA needs the
# last dimension contiguous (stride 1), and each row to start at a multiple of **16 bytes**: rows of
# fp16 must be a multiple of 8 elements long, of fp32 a multiple of 4. `tma_problem(a, b)` (imported
# in the setup cell) says what is wrong, or `None`. When it is not `None`, copying the inputs into
# buffers whose rows are padded with zeros to 16 bytes brings TMA back, for one more read and write
# of each input: on an H200 (docs/results/h200-2026-12-01-matmul-shapes.md, the times in
# h200-2026-12-01-matmul-shapes-padded.json) the persistent kernel on padded copies ran 8205 x 5921
# x 2949 in 0.755 ms, where cuBLAS, whose fastest kernels need the same alignment, took 2.138 ms
# (2.83x), and 4095 x 4097 x 4099 at 2.38x cuBLAS.
#
# The output tile is staged in shared memory before its TMA store; the reference splits it in two
# halves (`EPILOGUE_SPLIT=2`) to halve that buffer, the 64 KiB of section 4's failed configuration.
# On an H200 (docs/results/h200.md), the persistent kernel with 128 × 256 × 64 tiles, 8 warps, 4
# stages, split epilogue and `FLATTEN` ran at 1.00x cuBLAS at 4096³ and 0.97x at 8192 × 8192 × 512;
# without flattening, the same kind of kernel (3 stages) reached 0.82x at $K = 512$, and the best
# pipelined kernel 0.78x.
#
# The reference kernel:

# %% id="cell-42"
print(tune.kernel_source(reference.persistent_matmul_kernel))

# %% [markdown] id="cell-43"
# Read the epilogue: `tl.reshape` to $(B_M, 2, B_N/2)$, `tl.permute` to put the 2 last, and
# `tl.split` give the left and right halves of the tile, stored one after the other through a
# descriptor whose block is $B_M \times B_N/2$.
#
# ## Exercise 4 (3 + 2 points): the persistent tensor-descriptor matmul
#
# In one cell:
#
# 1. **`persistent_matmul_kernel`**: the reference kernel above, word for word (signature and
#    docstring given; the tests check what it computes and how fast, not its text).
# 2. **`tma_output(a, b)`**: a new $(M, N)$ output in `a`'s dtype, for row-major fp16 or fp32 `a`
#    $(M, K)$ and `b` $(K, N)$. Raise `ValueError` with `tma_problem`'s message when descriptors
#    cannot read the inputs, and when the output's rows ($N e$ bytes) are not a multiple of 16
#    bytes.
# 3. **`launch_persistent(a, b, c, config)`**: build the three descriptors (the output's block is
#    $B_M \times B_N /$ `EPILOGUE_SPLIT`) and launch `persistent_grid_size(number of tiles)`
#    programs (one per SM; 4 in the interpreter) with `NUM_PROGRAMS` set to that number, writing
#    `a @ b` into `c`.
# 4. **`persistent_matmul(a, b, config=None)`**: `a @ b` through the two; with `config=None`, tune
#    it with `tune.autotune` and your `PERSISTENT_SPACE`, launching into the one output.
# 5. **`PERSISTENT_SPACE`**, at the end of the cell: the configurations of
#    `reference.PERSISTENT_SPACE`, with a pruning function that adds the output tile's buffer, $B_M
#    \cdot (B_N /$ `EPILOGUE_SPLIT`$) \cdot e$ bytes, to `shared_memory_bytes`, and keeps the
#    register rule (your `fits` has it).
#
# Correctness is graded wherever tensor descriptors run: in the interpreter (with a Triton recent
# enough to have them), and on GPUs of compute capability 9.0 or newer; on older GPUs this cell says
# *needs GPU*. The shapes have rows TMA can read, and $M$, $N$, $K$ that are not multiples of the
# blocks; the fp16 checks pass `config=None`, which inside a correctness check runs a cached
# winner or your space's default (checks never tune: `tune.defaults_only`), the fp32 ones pass
# `FP32_TILES` (defined below), a configuration whose doubled fp32 buffers (128 KiB) fit every
# Hopper GPU, so the fp32 checks run the same tiles everywhere. The timed check compares your
# kernel with cuBLAS at 8192 × 8192 × 512 in fp16, the short-$K$ shape where persistence pays
# most.

# %% id="cell-44" nbgrader={"grade": false, "grade_id": "persistent_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
# include: tilegym_edu/reference/pipelined.py persistent_matmul_kernel solution


# include: tilegym_edu/reference/pipelined.py tma_output solution


# include: tilegym_edu/reference/pipelined.py launch_persistent solution


def persistent_matmul(a: torch.Tensor, b: torch.Tensor, config=None) -> torch.Tensor:
    """a @ b with persistent_matmul_kernel through tensor descriptors: a (M, K) and b (K, N)
    row-major, fp16 or fp32, rows a multiple of 16 bytes. `config` None tunes it."""
    ### BEGIN SOLUTION
    c = tma_output(a, b)
    if config is None:
        problem = {"M": a.shape[0], "N": b.shape[1], "K": a.shape[1],
                   "dtype": str(a.dtype).removeprefix("torch.")}
        config = tune.autotune(persistent_matmul_kernel, problem, PERSISTENT_SPACE,
                               lambda config: launch_persistent(a, b, c, config)).config
    launch_persistent(a, b, c, config)
    return c
    ### END SOLUTION


# PERSISTENT_SPACE: the configurations of reference.PERSISTENT_SPACE, pruned with the output
# tile's buffer.
### BEGIN SOLUTION
def fits_persistent(config, problem, resources):
    """fits, with the shared memory of the staged output tile (or its 1 / EPILOGUE_SPLIT part)."""
    element_bytes = ELEMENT_BYTES[problem["dtype"]]
    needed = (shared_memory_bytes(config, element_bytes)
              + config["BLOCK_M"] * (config["BLOCK_N"] // config["EPILOGUE_SPLIT"]) * element_bytes)
    if needed > resources.shared_bytes:
        return (f"needs {needed // 1024} KiB of shared memory with the output tile, the GPU offers "
                f"{resources.shared_bytes // 1024} KiB per block")
    return fits(config, problem, resources)


PERSISTENT_SPACE = tune.SearchSpace(
    default=tune.Config(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8,
                        EPILOGUE_SPLIT=2, FLATTEN=True, num_warps=8, num_stages=4),
    small=[tune.Config(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                       EPILOGUE_SPLIT=split, FLATTEN=flatten, num_warps=warps, num_stages=stages)
           for bm, bn, bk, split, flatten, warps, stages in [
               (128, 256, 64, 2, True, 8, 3), (256, 128, 64, 2, True, 8, 3),
               (128, 128, 64, 1, True, 8, 4), (128, 128, 64, 1, False, 4, 4),
               (128, 256, 32, 2, True, 8, 6), (128, 128, 32, 2, True, 8, 3)]],
    grid={"BLOCK_M": (128, 256), "BLOCK_N": (128, 256), "BLOCK_K": (32, 64, 128),
          "GROUP_M": (8,), "EPILOGUE_SPLIT": (1, 2), "FLATTEN": (True, False),
          "num_warps": (4, 8), "num_stages": (2, 3, 4, 5)},
    prune=fits_persistent, cap=120)
### END SOLUTION

# %% id="cell-45" nbgrader={"grade": false, "grade_id": "persistent_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
def make_tma_inputs(case, generator):
    """a (M, K) and b (K, N) for case = {"M", "N", "K", "dtype"}, row-major, then case["config"]
    if the case names one; case["layout"] = "a slice" takes a as the first K columns of a (M, 2K)
    tensor (rows 2K apart: still 16-byte aligned)."""
    M, N, K, dtype = case["M"], case["N"], case["K"], case["dtype"]
    a = (check.random_tensor((M, 2 * K), dtype, generator)[:, :K]
         if case.get("layout") == "a slice"
         else check.random_tensor((M, K), dtype, generator))
    b = check.random_tensor((K, N), dtype, generator)
    return (a, b) + ((case["config"],) if "config" in case else ())


# fp32 doubles every buffer: 128 x 128 x 32 tiles, 3 stages and a split store need 128 KiB
FP32_TILES = tune.Config(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, GROUP_M=8,
                         EPILOGUE_SPLIT=2, FLATTEN=True, num_warps=8, num_stages=3)


try:
    grading.require_tensor_descriptors("the persistent matmul")
    HAS_TMA = True
except grading.NeedsGPU as why:
    print(why)
    HAS_TMA = False
if HAS_TMA:
    for result in check.check(persistent_matmul, matmul_reference, make_tma_inputs,
                              seeds=[0], cases=[
            {"M": 200, "N": 136, "K": 72, "dtype": torch.float16},
            {"M": 77, "N": 20, "K": 36, "dtype": torch.float32, "config": FP32_TILES}]):
        print(result.describe())
    a, b = make_tma_inputs({"M": 20, "N": 16, "K": 33, "dtype": torch.float16},
                           torch.Generator().manual_seed(0))
    try:
        persistent_matmul(a, b)
    except ValueError as error:
        print(f"K = 33 in fp16: ValueError: {error}")

# %% id="cell-46" nbgrader={"grade": true, "grade_id": "test_persistent_correct", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Exercise 4: persistent_matmul is correct on shapes TMA can read that are not multiples of the
# blocks, fp16 (config=None) and fp32 (with FP32_TILES), and refuses layouts it cannot read.
grading.require_tensor_descriptors("the persistent matmul")
cases = [
    {"M": 200, "N": 136, "K": 72, "dtype": torch.float16},
    {"M": 1, "N": 8, "K": 8, "dtype": torch.float16},
    {"M": 300, "N": 264, "K": 40, "dtype": torch.float16, "layout": "a slice"},
    {"M": 77, "N": 20, "K": 36, "dtype": torch.float32, "config": FP32_TILES},
    {"M": 130, "N": 260, "K": 4, "dtype": torch.float32, "config": FP32_TILES},
]
grading.assert_correct(persistent_matmul, matmul_reference, make_tma_inputs, cases, seeds=(0, 1))
for shape, dtype, transpose in [((20, 33, 16), torch.float16, False),
                                ((20, 32, 16), torch.float16, True)]:
    M, K, N = shape
    a, b = make_tma_inputs({"M": M, "N": N, "K": K, "dtype": dtype},
                           torch.Generator().manual_seed(0))
    a = a.t().contiguous().t() if transpose else a
    try:
        persistent_matmul(a, b)
    except ValueError:
        pass
    else:
        raise AssertionError(f"persistent_matmul accepted a with shape {tuple(a.shape)} and "
                             f"strides {a.stride()} ({dtype}): {tma_problem(a, b)}; "
                             "it must raise ValueError")
### BEGIN HIDDEN TESTS
hidden_cases = [
    {"M": 129, "N": 392, "K": 136, "dtype": torch.float16},
    {"M": 5, "N": 12, "K": 68, "dtype": torch.float32, "layout": "a slice", "config": FP32_TILES},
]
grading.assert_correct(persistent_matmul, matmul_reference, make_tma_inputs, hidden_cases,
                       seeds=(11,))
a, b = make_tma_inputs({"M": 8, "N": 6, "K": 8, "dtype": torch.float32},
                       torch.Generator().manual_seed(0))
try:
    persistent_matmul(a, b)
except ValueError:
    pass
else:
    raise AssertionError("persistent_matmul accepted b with rows of 24 bytes (fp32, N = 6): "
                         "it must raise ValueError")
### END HIDDEN TESTS

# %% id="cell-47" nbgrader={"grade": true, "grade_id": "test_persistent_vs_cublas", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 4b: the persistent matmul against cuBLAS at 8192 x 8192 x 512, fp16 (GPU of compute
# capability 9.0 or newer).
grading.require_gpu("the speed of your persistent matmul against cuBLAS")
grading.require_tensor_descriptors("the persistent matmul")
limit = grading.threshold("03_software_pipelining", "persistent_vs_cublas")
input_sets = [make_tma_inputs({"M": 8192, "N": 8192, "K": 512, "dtype": torch.float16},
                              torch.Generator().manual_seed(seed)) for seed in (0, 1)]
persistent_matmul(*input_sets[0])   # tuned once here (or found in the cache), outside the timing
grading.assert_speedup(persistent_matmul, torch.matmul, input_sets, matmul_reference,
                       torch.float16, limit, flops=2 * 8192 * 8192 * 512)

# %% [markdown] id="cell-51"
# ## 7. Split-K: when the output is too small to fill the GPU
#
# Every kernel so far gives each program one tile of the output and lets it walk all of $K$. That
# needs enough tiles. A 256 x 256 output, say the product of two long and thin matrices in a
# gradient (256 x 524288 times 524288 x 256), has 4 tiles of 128 x 128: 4 programs for a GPU
# with `SMS` SMs (132 on an H200), each walking $K$ = 524288 alone in 8192 steps of 64 while the
# other SMs idle. No configuration of lesson 03's kernels helps: smaller tiles give at most 64
# programs of 32 x 32, with a quarter of the data reuse.
#
# **Split-K** also cuts the $K$ loop: with `SPLIT_K` = 64 ranges of 8192, the 4 tiles become 256
# programs. Each writes its partial product in float32 to a scratch buffer of (splits, M, N), and a
# second kernel adds the partials of each element, in a fixed order, so the result is the same on
# every run (adding them with atomics instead would be faster to write and would not be). The
# price is that buffer: written once and read once, `2 * splits * M * N * 4` bytes, here 33.6 MB
# against the 537 MB of `a` and `b`, 6%. For a square 4096³ product with 4 splits it would be 537 MB
# against 67 MB: split-K pays only when there are too few tiles and plenty of $K$. Measured on an
# H200 (docs/results/h200-2026-12-01-matmul-shapes.md): the 256 x 256 x 524288 product took 2.11
# ms on lesson 03's pipelined kernel, tuned, against cuBLAS's 0.143 ms (0.07x), and 0.176 ms with
# split-K tuned (32 ranges: 128 programs; 0.81x). With 128 x 256 tiles, as wide as the output, no
# two programs read the same range of `a`: 64 ranges then took 0.151 and 0.156 ms in two later runs
# (0.97x and 0.93x). On a square 4096³ product split-K ran at 0.38x cuBLAS where the persistent
# kernel reached 0.99x. Which path is fastest for a shape, the tuner
# can decide: the course's `tilegym_edu/reference/split_k.py` has a `shape_matmul` whose search
# space holds the pipelined, persistent and split-K kernels' candidates together, so the race picks
# the path as well as the tiles. On every shape of that page it ran as fast as the best single
# path.
#
# ## Exercise 5 (3 + 2 + 2 points): split-K
#
# Write `split_k_matmul(a, b, config=None)`:
#
# - `a` (M, K) and `b` (K, N), any strides, fp16 or fp32; the result (M, N) in `a`'s dtype,
#   accumulated in float32. A `ValueError` when `a`'s columns are not `b`'s rows.
# - `config` overrides `SPLIT_K_DEFAULT` (imported): lesson 03's block names, `GROUP_M`, warps and
#   stages, and `SPLIT_K`, how many ranges at most.
# - `k_per_split(K, split_k, block_k)`: each range's length, `K / split_k` rounded up to whole
#   `block_k` steps, so a short $K$ gets fewer ranges, never an empty one (Exercise 5b's test
#   calls it to count the stores it expects).
# - Two kernels: `split_k_matmul_kernel`, one program per (tile, range), storing its float32 partial
#   into the scratch buffer, and `split_k_reduce_kernel`, `REDUCE_BLOCK` (imported) elements of the
#   output per program, adding the partials split 0 first and storing the output once.
#
# Exercise 5a checks odd shapes (edges that are not multiples of a block, ranges ending inside a
# `BLOCK_K` step, more splits than $K$ has steps, a transposed `b`) in fp16 and fp32, and that two
# calls give the same bits. Exercise 5b counts the bytes it stores in the interpreter: exactly the
# partials of every range and the output once; and launch by launch, that each program of the first
# kernel loads one range of `a` and `b`, and that the second reads each partial once. On a GPU,
# Exercise 5c times the 256 x 256 x 524288 product with `SPLIT_K` = 32 (4 tiles x 32 ranges: 128
# programs for the H200's 132 SMs) against cuBLAS, and the cell after it sweeps `SPLIT_K` from 1 to
# 128.

# %% id="cell-52" nbgrader={"grade": false, "grade_id": "split_k_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
# include: tilegym_edu/reference/split_k.py split_k_matmul_kernel solution


# include: tilegym_edu/reference/split_k.py split_k_reduce_kernel solution


# include: tilegym_edu/reference/split_k.py k_per_split solution


# include: tilegym_edu/reference/split_k.py split_k_matmul solution

# %% id="cell-53" nbgrader={"grade": false, "grade_id": "split_k_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
def make_split_k_inputs(case, generator):
    """(a, b, config) for case = {"M", "N", "K", "dtype", "split"}: a and b standard normal
    (case["transposed"]: b as the .t() view of an (N, K) tensor), and small blocks (16 x 32 x 16)
    with SPLIT_K = case["split"]."""
    M, N, K, dtype = case["M"], case["N"], case["K"], case["dtype"]
    a = check.random_tensor((M, K), dtype, generator)
    if case.get("transposed"):
        b = check.random_tensor((N, K), dtype, generator).t()
    else:
        b = check.random_tensor((K, N), dtype, generator)
    config = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, GROUP_M=2, SPLIT_K=case["split"],
                  num_warps=4, num_stages=2)
    return a, b, config


for result in check.check(split_k_matmul, matmul_reference, make_split_k_inputs, seeds=[0],
                          cases=[{"M": 20, "N": 40, "K": 200, "dtype": torch.float16,
                                  "split": 4}]):
    print(result.describe())

# %% id="cell-54" nbgrader={"grade": true, "grade_id": "test_split_k_correct", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Exercise 5a: split_k_matmul is correct on odd shapes and splits, and gives the same bits twice.
cases = [
    {"M": 17, "N": 45, "K": 200, "dtype": torch.float32, "split": 3},
    {"M": 5, "N": 7, "K": 33, "dtype": torch.float16, "split": 8},
    {"M": 40, "N": 33, "K": 129, "dtype": torch.float16, "split": 4, "transposed": True},
    {"M": 1, "N": 1, "K": 1, "dtype": torch.float32, "split": 2},
]
grading.assert_correct(split_k_matmul, matmul_reference, make_split_k_inputs, cases,
                       seeds=(0, 1))
a, b, config = make_split_k_inputs({"M": 16, "N": 32, "K": 256, "dtype": torch.float32,
                                    "split": 8}, torch.Generator().manual_seed(0))
first, second = (grading.guarded_call(split_k_matmul, (a, b, config)) for _ in range(2))
assert torch.equal(first, second), (
    "two calls on the same inputs gave different bits: add the partials in a fixed order "
    "(split 0 first), not with atomics")
try:
    split_k_matmul(a, b[:-1], config)
except ValueError:
    pass
else:
    raise AssertionError("split_k_matmul accepted a (16, 256) a with a (255, 32) b: raise a "
                         "ValueError")
### BEGIN HIDDEN TESTS
grading.assert_correct(split_k_matmul, matmul_reference, make_split_k_inputs,
                       [{"M": 33, "N": 17, "K": 300, "dtype": torch.float16, "split": 16}],
                       seeds=(11,))
### END HIDDEN TESTS

# %% id="cell-55" nbgrader={"grade": true, "grade_id": "test_split_k_stores", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 5b: split_k_matmul stores every range's float32 partial and the output, once each.
M, N, K = 24, 40, 160
a, b, config = make_split_k_inputs({"M": M, "N": N, "K": K, "dtype": torch.float16, "split": 5},
                                   torch.Generator().manual_seed(0))
# the ranges by the reference's k_per_split, not by yours (returning K would ask for one range)
from tilegym_edu.reference import split_k as split_k_rule  # noqa: E402
length = split_k_rule.k_per_split(K, 5, config["BLOCK_K"])
splits, e = triton.cdiv(K, length), a.element_size()
partial_bytes = splits * M * N * 4
counted = grading.assert_traffic(
    split_k_matmul, (a, b, config), matmul_reference, torch.float16,
    what=f"{M} x {N} x {K} in {splits} ranges", stores=partial_bytes + M * N * e,
    store_hint=f": {splits} float32 partials of {M} x {N} (one per range) and the output once")
# launch by launch (round 14 of the red team stored the right bytes with one plain matmul and
# partials of zeros): the launch that stores the partials loads each tile's rows of a and columns
# of b in every range, at most one range a program; the one that stores the output reads each
# partial once
bm, bn = config["BLOCK_M"], config["BLOCK_N"]
one_range = e * (bm + bn) * length
fewest = e * (M * K * triton.cdiv(N, bn) + K * N * triton.cdiv(M, bm))   # edges masked
most = e * triton.cdiv(M, bm) * triton.cdiv(N, bn) * (bm + bn) * K         # whole blocks
by_stores = {launch.stored_bytes: launch for launch in counted.per_launch}
partials, output = by_stores.get(partial_bytes), by_stores.get(M * N * e)
assert partials is not None and output is not None, (
    f"no launch stored all {splits} partials ({partial_bytes:,} bytes) and another the output "
    f"({M * N * e:,}): the launches stored "
    f"{[launch.stored_bytes for launch in counted.per_launch]}; split_k_matmul_kernel stores "
    "every range's partial, split_k_reduce_kernel the output")
assert partials.busiest_program_loaded_bytes <= one_range, (
    f"a program of {partials.kernel} loaded {partials.busiest_program_loaded_bytes:,} bytes, "
    f"more than one range of a and b holds (({bm} + {bn}) x {length} x {e} = {one_range:,}): "
    "each program walks its own range of K, not all of it")
assert fewest <= partials.loaded_bytes <= most, (
    f"{partials.kernel} loaded {partials.loaded_bytes:,} bytes, where reading each tile's rows "
    f"of a and columns of b in every range once takes {fewest:,} to {most:,}")
assert output.loaded_bytes == partial_bytes, (
    f"{output.kernel} loaded {output.loaded_bytes:,} bytes: adding the partials reads each of "
    f"them once, {partial_bytes:,}")

# %% id="cell-57" nbgrader={"grade": true, "grade_id": "test_split_k_vs_cublas", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 5c: split-K against cuBLAS at 256 x 256 x 524288, fp16, SPLIT_K = 32 (GPU only).
grading.require_gpu("the speed of your split-K matmul against cuBLAS")
limit = grading.threshold("03_software_pipelining", "split_k_vs_cublas")
input_sets = [make_matmul_inputs({"M": 256, "N": 256, "K": 524288, "dtype": torch.float16},
                                 torch.Generator().manual_seed(seed)) for seed in (0, 1)]
grading.assert_speedup(lambda a, b: split_k_matmul(a, b, {"SPLIT_K": 32}), torch.matmul,
                       input_sets, matmul_reference, torch.float16, limit,
                       flops=2 * 256 * 256 * 524288)

# %% id="cell-56" tags=["demo"]
grading.require_gpu("timing split-K")
a = torch.randn(256, 524288, device=DEVICE, dtype=torch.float16)
b = torch.randn(524288, 256, device=DEVICE, dtype=torch.float16)
fns = {"cuBLAS": lambda: a @ b,
       "lesson 03's pipelined, default": lambda: reference.pipelined_matmul(a, b)}
for split in (1, 4, 16, 64, 128):
    fns[f"split-K, SPLIT_K={split}"] = (lambda split=split:
                                        split_k_matmul(a, b, {"SPLIT_K": split}))
bench.print_table(bench.compare(fns, flops=2 * 256 * 256 * 524288), baseline="cuBLAS")

# %% [markdown] id="cell-48"
# ## 8. The ladder
#
# Every version of the course's matmul so far, on the same fp16 inputs: lesson 01's naive kernel,
# lesson 02's tiled kernel, your pipelined kernel with its default configuration and tuned, the
# persistent kernel where tensor descriptors run, and cuBLAS. The naive kernel is timed on its own
# first: at 4096³ it takes about half a second a call on an H200 (docs/results/h200.md), so it gets
# only a few runs; the others are timed interleaved. On a GPU the ladder chart shows the climb on a
# log scale, and the roofline where each version sits.

# %% id="cell-49" tags=["demo"]
n = device.size(gpu=4096, cpu=8)
a = torch.randn(n, n, device=DEVICE, dtype=torch.float16)
b = torch.randn(n, n, device=DEVICE, dtype=torch.float16)
flops, moved = 2 * n**3, 3 * n * n * 2
tuned = matmul_config(a, b)          # your Exercise 3: the ladder needs it
naive = bench.bench(lambda: naive_matmul(a, b), flops=flops, bytes=moved,
                    name="naive (lesson 01)", max_runs=5)
versions = {"tiled (lesson 02)": lambda: tiled_matmul(a, b)}
here = tune.Resources.of_gpu()        # None in the interpreter: nothing to prune against
problem = {"M": n, "N": n, "K": n, "dtype": "float16"}
if here is None or fits(MATMUL_SPACE.default, problem, here) is None:
    versions["pipelined, default config"] = lambda: matmul(a, b, config=MATMUL_SPACE.default)
versions["pipelined, autotuned"] = lambda: matmul(a, b)
if HAS_TMA:
    versions["persistent + TMA"] = lambda: persistent_matmul(a, b)
versions["cuBLAS"] = lambda: torch.matmul(a, b)
ladder = [naive] + bench.compare(versions, flops=flops, bytes=moved)
print(f"{n}^3 fp16")
bench.print_table(ladder, baseline="cuBLAS")
if device.ON_GPU:
    roofline.plot_ladder(ladder, title=f"Matmul, {n}^3 fp16: from naive to cuBLAS")
    plt.show()
    roofline.plot_roofline(ladder)
    plt.show()
else:
    print("The ladder chart and the roofline need GPU timings: "
          "interpreter times say nothing about GPU speed.")

# %% [markdown] id="cell-50"
# ## What comes next
#
# Pipelining turned the tiled kernel's load-then-compute loop into one where the next tiles are
# always on their way: on an H200 the same tiles went from 0.48x to 0.92x cuBLAS with three stages,
# and the tuned, persistent TMA kernel matched cuBLAS at 4096³ (docs/results/h200.md). Along the way
# you modelled why stages hide latency, counted what they cost in shared memory, and let a tuner
# measure what arithmetic cannot decide.
#
# Lesson 04 takes these tools to attention. A FlashAttention kernel is two matmuls with a softmax
# between them, streamed over blocks of keys and values that are loaded, like the tiles here, while
# the previous block is being multiplied, and kept on chip so the attention matrix never reaches
# memory. Its block sizes, warps and stages are tuned with the same `tilegym_edu.tune`.
