# tilegym-notebook: {"metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}, "language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}

# %% [markdown] id="cell-00"
# # Lesson 04: FlashAttention
#
# *Fused softmax, online softmax, and attention that never writes its scores.*
#
# Attention is the operation at the heart of every transformer: each query takes a weighted average
# of value vectors, weighted by the softmax of its similarity to every key. Written as three PyTorch
# operations it computes a $\text{seq} \times \text{seq}$ matrix of scores for every head and sends
# it through memory several times: memory grows with the square of the sequence length, and most of
# the time goes into moving scores rather than doing arithmetic. FlashAttention (Dao et al., 2022)
# computes exactly the same result in one kernel that streams keys and values through the chip and
# never writes the scores at all. This lesson builds it in six steps:
#
# 1. **The cost of the naive version**, measured: peak memory and time against sequence length.
# 2. **A fused softmax kernel**: one program per row, one read and one write of memory.
# 3. **The online softmax**: a running maximum and a running sum, rescaled as new values arrive, so
#    a row can be consumed in blocks without ever being held whole.
# 4. **FlashAttention forward in Triton**, causal masking included, tuned with lesson 03's
#    autotuner, and compared with every attention backend PyTorch offers (FlashAttention-2, cuDNN,
#    memory-efficient, math).
# 5. **The backward pass**, FlashAttention-2's: the probabilities recomputed from one number per
#    query, so that training needs no more memory than inference.
# 6. **Every shape a model brings**: grouped-query heads, decoding over a KV cache, head sizes that
#    are not powers of two.
#
# | exercise | points | graded |
# | --- | --- | --- |
# | 1. a fused row softmax: any row length, fp16 and fp32, huge values | 3 | everywhere |
# | 2. its bandwidth, as a fraction of a copy's | 2 | GPU only |
# | 3. online softmax statistics, in one pass over the blocks | 2 | everywhere |
# | 4. FlashAttention forward: any length, head_dim 16-128, strides, huge scores | 4 | everywhere |
# | 5. causal FlashAttention | 3 | everywhere |
# | 6. it never writes the scores: memory traffic within a budget | 2 | everywhere |
# | 7. speed over naive attention; memory ∝ seq, not seq²; against SDPA | 2 + 2 + 2 | GPU only |
# | 8. backward pass: dq, dk, dv; its speed against SDPA's backward | 4 + 2 | everywhere; GPU only |
# | 9. grouped-query, decoding, any head size; the cache read once per group | 4 + 2 | everywhere |
#
# **Grading.** *GPU only* cells are graded on a GPU; without one the grader marks them *needs GPU*.
# Cells marked *Exercise* are graded by `tilegym-edu grade 04_flash_attention` (or
# `make grade LESSON=04_flash_attention`), which grades a copy of this notebook and never changes
# it.

# %% [markdown] id="cell-01"
# ## Setup
#
# `import tilegym_edu` comes first, as always. From the course's reference module this lesson
# imports the baseline (`naive_attention`), two constants, an input validator, and the autotuner's
# search space for attention with the problem description it is keyed on, and what the backward pass
# of section 5 needs besides its kernels (two search spaces, a problem description, the tuning loop
# and a stride helper), and, for section 6, the general forward's search space, problem description,
# input validator and descriptor helpers; the kernels are yours to write. Sizes come from
# `device.size`: the comparisons at the end run at batch 4 with 32 heads of head_dim 128 on a GPU
# (the attention of a Llama-7B-sized model), and at a toy size in the interpreter.

# %% id="cell-02" nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import tilegym_edu  # noqa: F401  (first: decides GPU or interpreter mode before triton is imported)

import inspect
import math
import warnings
import weakref

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.nn.attention import SDPBackend, sdpa_kernel

from tilegym_edu import bench, check, device, grading, progress, roofline, traffic, tune
from tilegym_edu.reference import attention as reference     # the course's reference solution
# three PyTorch operations: the baseline
from tilegym_edu.reference.attention import naive_attention
from tilegym_edu.reference.attention import (ATTENTION_SPACE, LOG2E, MAX_SOFTMAX_COLS,
                                             attention_problem, check_attention_inputs)
# the general forward's search space, problem description and input validator
from tilegym_edu.reference.flash import (DESCRIPTORS_FROM_BLOCK_D, FLASH_SPACE, block_d,
                                         check_flash_inputs, descriptors_fit, flash_problem,
                                         kv_descriptors)
# the backward's search spaces, its problem description, the tuning loop, a stride helper and
# the descriptors of the blocks it streams
from tilegym_edu.reference.flash_backward import (DKDV_SPACE, DQ_SPACE, backward_problem,
                                                  head_strides, stream_descriptors,
                                                  tune_backward)
from tilegym_edu.tune import Config, SearchSpace, autotune

print(device.banner())
DEVICE = device.DEVICE
spec, _ = roofline.resolve_spec()    # this GPU's datasheet, or an H200's without a GPU
BATCH, HEADS, HEAD_DIM = device.size(gpu=(4, 32, 128), cpu=(1, 1, 64))   # the comparisons' problem
SEQ_LENS = device.size(gpu=(1024, 2048, 4096, 8192, 16384), cpu=(128,))  # ... at these lengths
FOCUS_SEQ = device.size(gpu=4096, cpu=128)                               # the one shown in detail
MEMORY_SEQS = device.size(gpu=(1024, 2048, 4096, 8192, 16384), cpu=())   # section 1's measurement
SOFTMAX_SHAPE = device.size(gpu=(65536, 1000), cpu=(16, 1000))           # (rows, cols)

# %% [markdown] id="cell-03"
# ## 1. What attention computes, and what it costs done naively
#
# For one head, the queries $Q$, keys $K$ and values $V$ are $S \times d$ matrices ($S$ the sequence
# length, $d$ the head dimension, 64 or 128 in most models), and
#
# $$O = \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt d}\right) V .$$
#
# Row $i$ of the *scores* $QK^\top/\sqrt d$ says how well query $i$ matches each key. The softmax,
# taken along each row, turns those scores into weights that are positive and sum to 1, and row $i$
# of the output is the weighted average of the rows of $V$. (Dividing by $\sqrt d$ keeps the scores
# of random vectors near unit size whatever $d$ is.) A model runs this for every batch element and
# every head at once: `q`, `k`, `v` and the output have shape `(batch, heads, seq, head_dim)`.
# **Causal** attention, used by every GPT-style decoder, lets query $i$ see only keys $j \le i$: the
# scores above the diagonal are set to $-\infty$ before the softmax, so their weights are exactly 0.
#
# **Work.** $QK^\top$ takes $2S^2d$ FLOPs per head and multiplying by $V$ another $2S^2d$: $4BHS^2d$
# in all for batch $B$ and $H$ heads, half of that when causal (the masked half need not be
# computed). The softmax's exponentials are $O(S^2)$ and, by the usual convention, not counted. The
# inputs and output hold only $4BHSd$ elements, so the problem's arithmetic intensity grows with
# $S$: at $S = 4096$ in fp16 it is $S/2 = 2048$ FLOP per byte, far right of any GPU's ridge point.
# Attention *could* be compute-bound.
#
# **The naive version** does not let it be. Here it is, the reference module's `naive_attention`,
# the baseline of this lesson: the `(batch, heads, seq, seq)` scores are a tensor in memory, written
# by the first matmul, read and written again by the softmax (in float32, for accuracy), and read by
# the second matmul. Below it, `attention_reference` is the definition the grader uses: the same
# three steps in float64 on the CPU, one head at a time.

# %% id="cell-04" nbgrader={"grade": false, "grade_id": "attention_reference", "locked": true, "schema_version": 3, "solution": false, "task": false}
print(inspect.getsource(naive_attention))


# include: tilegym_edu/reference/attention.py attention_by_head as attention_reference


q, k, v = (torch.randn(2, 3, 50, 64, device=DEVICE, dtype=torch.float16) for _ in range(3))
for causal in (False, True):
    error = check.relative_error(naive_attention(q, k, v, causal),
                                 attention_reference(q.double(), k.double(), v.double(), causal))
    print(f"naive_attention (causal={causal}) against the float64 definition: "
          f"relative error {error:.1e}")

# %% [markdown] id="cell-05"
# **How much memory?** Count what `naive_attention` holds at its peak, in fp16: the scores (2 bytes
# per score), their float32 copy (4 bytes) and the float32 softmax (4 bytes) are alive at the same
# moment, 10 bytes for each of the $BHS^2$ scores. At batch 1 with 16 heads that is 160 MiB at $S =
# 1024$ and, growing as $S^2$, 40 GiB at $S = 16384$: more than many GPUs have, for a single
# sequence. The output itself is only $BHSd$ elements.
#
# The next cell measures it. On a GPU, `peak_extra_bytes` reads PyTorch's allocator: the peak of
# `torch.cuda.max_memory_allocated()` during one call, minus what was allocated before (so the
# output counts, the inputs do not). It measures `naive_attention` and, for contrast, the course's
# reference FlashAttention (the kernel you write in section 4), and times both. Without a GPU, it
# shows the formula next to the same measurement made on an H200 (docs/results/h200.md).

# %% id="cell-06" nbgrader={"grade": false, "grade_id": "memory_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
def naive_peak_bytes(batch, heads, seq):
    """Peak extra bytes of naive_attention in fp16: 10 bytes per score (fp16 scores, their
    float32 copy and the float32 softmax, alive at once)."""
    return 10 * batch * heads * seq * seq


def peak_extra_bytes(fn):
    """(bytes, result): the GPU memory fn() allocates at its peak beyond what was allocated
    before it ran (its output included), and what fn returned."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    result = fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before, result


#: measured on an H200 (docs/results/h200.md), batch 1, 16 heads, head_dim 128, fp16:
#: seq -> (extra peak bytes of naive_attention, of the reference FlashAttention)
H200_PEAK_BYTES = {1024: (167_772_160, 4_194_304), 2048: (671_088_640, 8_388_608),
                   4096: (2_684_354_560, 16_777_216), 8192: (10_737_418_240, 33_554_432),
                   16384: (42_949_672_960, 67_108_864)}

# %% id="cell-07" tags=["demo"]
B, H, D = 1, 16, 128
naive_peak, flash_peak, naive_ms, flash_ms = {}, {}, {}, {}
for S in progress.track(MEMORY_SEQS, "naive vs flash, memory and time",
                        enabled=bool(MEMORY_SEQS)):  # GPU only
    q, k, v = (torch.randn(B, H, S, D, device=DEVICE, dtype=torch.float16) for _ in range(3))
    reference.flash_attention(q, k, v)      # the first call tunes (cached); measure the second
    flash_peak[S], _ = peak_extra_bytes(lambda: reference.flash_attention(q, k, v))
    fns = {"FlashAttention (reference)": lambda: reference.flash_attention(q, k, v)}
    try:
        naive_peak[S], _ = peak_extra_bytes(lambda: naive_attention(q, k, v))
        fns["naive PyTorch"] = lambda: naive_attention(q, k, v)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        print(f"seq {S}: naive_attention ran out of GPU memory")
    timed = {m.name: m.median_ms for m in bench.compare(fns, flops=4 * B * H * S * S * D)}
    flash_ms[S], naive_ms[S] = timed["FlashAttention (reference)"], timed.get("naive PyTorch")
    q = k = v = None   # frees this length's tensors before the next (as del would)
if device.ON_GPU:
    where = device.info().name
else:
    naive_peak = {S: naive for S, (naive, _) in H200_PEAK_BYTES.items()}
    flash_peak = {S: flash for S, (_, flash) in H200_PEAK_BYTES.items()}
    where = "an NVIDIA H200 (docs/results/h200.md)"

print(f"extra peak memory, batch {B}, {H} heads, head_dim {D}, fp16, measured on {where}")
print(f"{'seq':>6}  {'10 B per score':>15}  {'naive measured':>15}  {'flash measured':>15}  "
      f"{'output':>10}")
for S in flash_peak:
    naive = f"{naive_peak[S] / 2**20:,.0f} MiB" if S in naive_peak else "out of memory"
    print(f"{S:>6}  {naive_peak_bytes(B, H, S) / 2**20:>11,.0f} MiB  {naive:>15}  "
          f"{flash_peak[S] / 2**20:>11,.0f} MiB  {B * H * S * D * 2 / 2**20:>6,.0f} MiB")

fig, axes = plt.subplots(1, 2 if flash_ms else 1, figsize=(13 if flash_ms else 7, 4.5),
                         squeeze=False)
ax = axes[0, 0]
seqs = sorted(flash_peak)
ax.plot(seqs, [naive_peak_bytes(B, H, S) / 2**30 for S in seqs], "-", color="gray", linewidth=8,
        alpha=0.3, label="10 bytes per score (formula)")
ax.plot(sorted(naive_peak), [naive_peak[S] / 2**30 for S in sorted(naive_peak)], "o-",
        label="naive PyTorch")
ax.plot(seqs, [flash_peak[S] / 2**30 for S in seqs], "s-", label="FlashAttention (reference)")
if device.ON_GPU:
    ax.axhline(device.info().memory_bytes / 2**30, color="black", linewidth=1,
               label="this GPU's memory")
ax.set(xscale="log", yscale="log", xlabel="sequence length (tokens)",
       ylabel="extra peak memory (GiB)",
       title=f"Attention's memory on {where}\nbatch {B}, {H} heads, head_dim {D}, fp16")
ax.set_xscale("log", base=2)
if flash_ms:
    ax = axes[0, 1]
    naive_seqs = sorted(s for s in naive_ms if naive_ms[s])   # the lengths it ran at
    ax.plot(naive_seqs, [naive_ms[s] for s in naive_seqs], "o-", label="naive PyTorch")
    ax.plot(sorted(flash_ms), [flash_ms[s] for s in sorted(flash_ms)], "s-",
            label="FlashAttention (reference)")
    ax.set(xscale="log", yscale="log", xlabel="sequence length (tokens)",
           ylabel="time per call (ms)",
           title=f"Attention's time on {where}\nbatch {B}, {H} heads, head_dim {D}, fp16")
    ax.set_xscale("log", base=2)
for ax in axes[0]:
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown] id="cell-08"
# On an H200 the measurement matched the formula to the byte, and the reference FlashAttention's
# extra memory was exactly its output: 4 MiB at $S = 1024$, 64 MiB at $S = 16384$
# (docs/results/h200.md). Time follows the bytes: the naive version writes and reads the scores
# several times, while FlashAttention keeps them on chip. At batch 4, 32 heads, $S = 4096$, $d =
# 128$ in fp16, naive PyTorch ran at 55 TFLOP/s on an H200 and the autotuned reference
# FlashAttention at 510 (docs/results/h200.md). The rest of the lesson builds that kernel, starting
# with the part that makes streaming hard: the softmax.
#
# ## 2. A fused softmax kernel
#
# $$\mathrm{softmax}(x)_j = \frac{e^{x_j}}{\sum_k e^{x_k}} = \frac{e^{x_j - m}}{\sum_k e^{x_k - m}}
# \quad \text{for any } m .$$
#
# The second form is the one to compute, with $m = \max_k x_k$. Without it, $e^{x}$ overflows:
# float32 holds values up to about $3.4 \times 10^{38} \approx e^{88.7}$, so a score of 89 already
# gives `inf`, and `inf / inf` is NaN. With it, every exponent is $\le 0$, the largest term is
# exactly 1, and the sum lies between 1 and the row length. (fp16 is far tighter still: its largest
# value, 65,504, is about $e^{11}$. Compute in float32 and convert only the result.)
#
# Computed step by step, a softmax reads the row to find $m$, reads it again to sum the
# exponentials, and a third time to divide, writing the result: several passes over memory for a
# memory-bound operation. A **fused** kernel gives each row to one program, which loads the whole
# row once into registers, does all three steps there, and stores the result once: $2 \times$ the
# tensor's bytes of traffic, the least possible. A row of `cols` elements goes in one block of
# `BLOCK = next_power_of_2(cols)` lanes; the lanes past the end are masked, and loaded as $-\infty$
# (`other=-inf`), so that they cannot win the maximum and contribute $e^{-\infty} = 0$ to the sum.
#
# On an H200, the course's reference softmax moved its bytes at 0.84 times the speed of a
# device-to-device copy at 65,536 rows of 1,000 fp16 values, and `torch.softmax` at 0.62; at 16,384
# rows of 4,096 the figures were 0.97 and 0.32 (docs/results/h200.md).
#
# ## Exercise 1 (3 points): a fused row softmax
#
# Write `softmax_kernel` and its wrapper `softmax(x)`:
#
# - `x` is 2-D, `(rows, cols)`, `torch.float16` or `torch.float32`; the softmax runs along each row.
#   Its rows are contiguous (stride 1 along a row) but not necessarily adjacent: pass `x.stride(0)`
#   (the grader gives you rows of a wider tensor). Return a new tensor of `x`'s shape and dtype.
# - One program per row, the whole row in one block. Subtract the row's maximum before `tl.exp`, and
#   do the arithmetic in float32.
# - Raise a `ValueError` that says what is wrong for an input that is not 2-D, and for rows longer
#   than `MAX_SOFTMAX_COLS` (65,536; imported in the setup cell), which do not fit one program's
#   registers.
# - More warps for longer rows keep the GPU's memory system busy: 4 up to 2,048 columns, 8 up to
#   8,192, 16 beyond works well (pass `num_warps=` at launch).
#
# The grader checks row lengths that are not powers of two (1, 7, 1000, 4097 and others), fp16 and
# fp32, values near $\pm 10^4$ (where forgetting the maximum overflows), rows whose values are all
# equal, and rows of a wider tensor.

# %% id="cell-09" nbgrader={"grade": false, "grade_id": "softmax_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
# include: tilegym_edu/reference/attention.py softmax_kernel solution


# include: tilegym_edu/reference/attention.py softmax solution

# %% [markdown] id="cell-10"
# The grader's inputs and its definition of softmax (run in float64 on the CPU), and its checker on
# two cases of your own:

# %% id="cell-11" nbgrader={"grade": false, "grade_id": "softmax_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
def softmax_reference(x):
    """The definition, run by the grader in float64 on the CPU."""
    return torch.softmax(x, dim=-1)


def make_softmax_inputs(case, generator):
    """(x,) for case = {"shape": (rows, cols), "dtype"}: standard normal times case["scale"]
    (default 1), on the lesson's device. case["layout"] = "row-strided": x is the first cols
    columns of a (rows, cols + 3) tensor. case["rows"] = "equal": every value of a row the same."""
    (rows, cols), dtype, scale = case["shape"], case["dtype"], case.get("scale", 1.0)
    if case.get("rows") == "equal":
        x = check.random_tensor((rows, 1), dtype, generator, scale).expand(rows, cols).contiguous()
    elif case.get("layout") == "row-strided":
        x = check.random_tensor((rows, cols + 3), dtype, generator, scale)[:, :cols]
    else:
        x = check.random_tensor((rows, cols), dtype, generator, scale)
    return (x,)


for result in check.check(softmax, softmax_reference, make_softmax_inputs, seeds=[0], cases=[
        {"shape": (3, 1000), "dtype": torch.float32, "layout": "row-strided"},
        {"shape": (2, 77), "dtype": torch.float16, "scale": 1e4}]):
    print(result.describe())

# %% id="cell-12" nbgrader={"grade": true, "grade_id": "test_softmax_correct", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Exercise 1: softmax is correct on odd row lengths, fp16 and fp32, huge values, equal values,
# rows of a wider tensor; and it refuses what it cannot do.
cases = [
    {"shape": (1, 1), "dtype": torch.float32},
    {"shape": (3, 7), "dtype": torch.float16},
    {"shape": (4, 1000), "dtype": torch.float32, "layout": "row-strided"},
    {"shape": (2, 4097), "dtype": torch.float16},
    {"shape": (5, 1000), "dtype": torch.float32, "scale": 1e4},
    {"shape": (3, 333), "dtype": torch.float16, "scale": 1e4},
    {"shape": (3, 50), "dtype": torch.float32, "rows": "equal"},
]
grading.assert_correct(softmax, softmax_reference, make_softmax_inputs, cases, seeds=(0, 1),
                       tolerances={torch.float32: 1e-5})
for bad, why in [(torch.zeros(2, 3, 4, device=DEVICE), "a 3-D input"),
                 (torch.zeros(1, MAX_SOFTMAX_COLS + 1, device=DEVICE, dtype=torch.float16),
                  f"rows of {MAX_SOFTMAX_COLS + 1} values")]:
    try:
        softmax(bad)
    except ValueError:
        pass
    else:
        raise AssertionError(f"softmax accepted {why}: raise a ValueError that says why it cannot")
### BEGIN HIDDEN TESTS
hidden_cases = [
    {"shape": (2, 2), "dtype": torch.float16},
    {"shape": (1, 8193), "dtype": torch.float32},
    {"shape": (3, 129), "dtype": torch.float16, "layout": "row-strided", "scale": 1e4},
    {"shape": (2, 1000), "dtype": torch.float16, "rows": "equal"},
]
grading.assert_correct(softmax, softmax_reference, make_softmax_inputs, hidden_cases,
                       seeds=(11, 12), tolerances={torch.float32: 1e-5})
### END HIDDEN TESTS

# %% [markdown] id="cell-13"
# **One read, one write, counted.** `traffic.count_traffic` runs your kernel in the interpreter and
# adds up the bytes of every `tl.load` and `tl.store`: a fused softmax loads each element once and
# stores each once. Then the timing, against `torch.softmax` and, on a GPU, a device-to-device copy
# of the same number of bytes (the ceiling for a kernel that must read and write everything once):

# %% id="cell-14" tags=["demo"]
rows, cols = SOFTMAX_SHAPE
x = torch.randn(rows, cols, device=DEVICE, dtype=torch.float16)
counted = traffic.count_traffic(softmax, x[:8])
print(f"softmax of 8 x {cols} fp16 ({x[:8].nbytes:,} bytes): loaded {counted.loaded_bytes:,}, "
      f"stored {counted.stored_bytes:,} bytes in {counted.programs} programs")
candidates = {"softmax (yours)": lambda: softmax(x),
              "torch.softmax": lambda: torch.softmax(x, dim=-1)}
if device.ON_GPU:
    candidates["copy (same bytes)"] = grading.copy_baseline(2 * x.nbytes)
bench.print_table(bench.compare(candidates, bytes=2 * x.nbytes), baseline="torch.softmax")

# %% [markdown] id="cell-15"
# ## Exercise 2 (2 points, needs a GPU): near copy bandwidth
#
# Your `softmax` on 65,536 rows of 1,000 fp16 values, timed against a device-to-device copy of the
# same number of bytes (read plus written), interleaved in this process, with the outputs of the
# timed runs checked. The threshold and the H200 figure it was set from are printed. If you fall
# short: are you launching with enough warps for the block? Is the row read from memory exactly
# once?

# %% id="cell-16" nbgrader={"grade": true, "grade_id": "test_softmax_bandwidth", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 2: softmax moves its bytes at a good fraction of copy bandwidth (GPU only).
grading.require_gpu("the bandwidth check of softmax")
limit = grading.threshold("04_flash_attention", "softmax_bandwidth")
input_sets = [make_softmax_inputs({"shape": (65536, 1000), "dtype": torch.float16},
                                  torch.Generator().manual_seed(seed)) for seed in (0, 1)]
grading.assert_bandwidth_fraction(softmax, input_sets, softmax_reference, torch.float16,
                                  bytes=2 * input_sets[0][0].nbytes, limit=limit)

# %% [markdown] id="cell-17"
# ## 3. The online softmax
#
# Your softmax holds a whole row in one program. In attention a row of scores is $S$ values long,
# and producing it at all is what we want to avoid: the scores of a query come out of `tl.dot` one
# *block of keys* at a time, and to keep them on chip we must consume each block before computing
# the next. But the softmax seems to need the row's maximum before it can exponentiate anything, and
# the sum of all the exponentials before it can divide.
#
# The **online softmax** (Milakov and Gimelshein, 2018) gets around both with two running numbers
# per row: $m$, the maximum of the values seen so far, and $\ell = \sum e^{x - m}$ over the values
# seen so far, *relative to the current* $m$. When a new block $x^{(j)}$ arrives:
#
# $$m_\text{new} = \max\big(m,\ \max_k x^{(j)}_k\big), \qquad
# \ell_\text{new} = \ell \cdot e^{\,m - m_\text{new}} + \sum_k e^{\,x^{(j)}_k - m_\text{new}} .$$
#
# The factor $e^{m - m_\text{new}} \le 1$ *rescales* the old sum to the new maximum: each old term
# $e^{x - m}$ becomes $e^{x - m} e^{m - m_\text{new}} = e^{x - m_\text{new}}$. So after the last
# block $m$ is the row's maximum and $\ell = \sum_k e^{x_k - m}$ exactly, every exponent was $\le 0$
# (nothing overflows), and each block was seen once. $m$ starts at $-\infty$ and $\ell$ at 0.
#
# One trap, which attention's masks walk into: a row whose first blocks are entirely $-\infty$
# (masked scores) still has $m = -\infty$ after them, and then $m - m_\text{new} = -\infty -
# (-\infty)$ is NaN. Such a row has seen nothing yet: where $m_\text{new} = -\infty$, subtract 0
# instead of $m_\text{new}$ (every term is then $e^{-\infty} = 0$, and $\ell$ stays 0).
#
# ## Exercise 3 (2 points): online softmax statistics
#
# Write `softmax_stats(blocks)` in plain PyTorch (this one is not a kernel, and it is graded
# everywhere). `blocks` is an iterable of the column blocks of one `(rows, cols)` float64 matrix, in
# order, each a `(rows, block_cols)` tensor (the last one may be narrower). Return `(m, ell)`: two
# `(rows,)` tensors, the maximum of each row and $\ell = \sum_k e^{x_k - m}$ for each row.
#
# **One pass, streaming.** The grader hands you the blocks from a stream that fails if you iterate
# it a second time, or if you keep a block after you have asked for the one after next: keep the
# running statistics, not the blocks (no `torch.cat`, no `list(blocks)`). It uses values of $10^3$
# to $10^4$ (where a sum without the maximum overflows even in float64), rows whose first blocks are
# all $-\infty$, a single block, and blocks narrower at the end; it compares with `torch.logsumexp`.

# %% id="cell-18" nbgrader={"grade": false, "grade_id": "online_softmax_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def softmax_stats(blocks):
    """(m, ell) of the rows of a (rows, cols) matrix given as its column blocks, in order, each
    block seen once: m (rows,) the row maxima, ell (rows,) the sums of exp(x - m)."""
    ### BEGIN SOLUTION
    m = ell = None
    for block in blocks:
        block_max = block.amax(dim=1)
        if m is None:
            m = torch.full_like(block_max, -math.inf)
            ell = torch.zeros_like(block_max)
        m_new = torch.maximum(m, block_max)
        # rows that have seen only -inf keep m = -inf and ell = 0: subtract 0 for them, not -inf
        shift = torch.where(m_new == -math.inf, 0.0, m_new)
        ell = ell * torch.exp(m - shift) + torch.exp(block - shift[:, None]).sum(dim=1)
        m = m_new
    return m, ell
    ### END SOLUTION

# %% [markdown] id="cell-19"
# The stream the grader uses, and a first check: the statistics give the softmax of a row that was
# never held whole (each value's weight is $e^{x - m} / \ell$).

# %% id="cell-20" nbgrader={"grade": false, "grade_id": "online_softmax_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
class StreamedBlocks:
    """The column blocks of x (rows, cols), block_cols wide (the last one narrower if cols is not
    a multiple), for one pass only: iterating a second time fails, and so does asking for block
    i + 2 while block i is still referenced. With ``held`` (a grading.HeldMemory the caller
    runs under), asking for a block fails too while the caller holds more than four blocks'
    worth of tensors (a copy of every block is not streaming). handed_out counts the blocks
    given. x itself is kept where the code given the stream cannot reach it: in the private
    generator (round 14 of the red team read a public `blocks.x` and took the statistics of
    the whole matrix at once)."""

    def __init__(self, x, block_cols, held=None):
        self.handed_out, self.passes = 0, 0
        self._blocks = self._stream(x, block_cols, held)

    def __iter__(self):
        self.passes += 1
        if self.passes > 1:
            raise AssertionError("the blocks were iterated a second time: softmax_stats must "
                                 "make one pass over them")
        return self._blocks

    def _stream(self, x, block_cols, held):
        given = []   # weak references: they do not keep blocks alive
        for start in range(0, x.shape[1], block_cols):
            for i, ref in enumerate(given[:-1]):
                if ref() is not None:
                    raise AssertionError(f"block {i} was still referenced when block "
                                         f"{len(given)} was requested: keep running statistics, "
                                         "not the blocks")
            if held is not None:
                rows, item = x.shape[0], x.element_size()
                budget = 4 * rows * block_cols * item + 16 * rows * item
                if held.held_bytes() > budget:
                    raise AssertionError(f"{held.held_bytes():,} bytes of tensors were held "
                                         f"when block {len(given)} was requested, more than "
                                         f"four blocks' worth ({budget:,}): keep running "
                                         "statistics, not the blocks or copies of them")
            block = x[:, start:start + block_cols].clone()
            given.append(weakref.ref(block))
            self.handed_out += 1
            yield block


x = torch.randn(3, 1000, dtype=torch.float64) * 1e3
m, ell = softmax_stats(StreamedBlocks(x, 128))
streamed = torch.exp(x - m[:, None]) / ell[:, None]
print("softmax from the streamed statistics against torch.softmax: relative error",
      f"{check.relative_error(streamed, torch.softmax(x, dim=1)):.1e}")

# %% id="cell-21" nbgrader={"grade": true, "grade_id": "test_softmax_stats", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 3: softmax_stats gives each row's maximum and sum of exp(x - m) in one streaming pass.
def check_stats(x, block_cols, what):
    rows, cols = x.shape
    with grading.HeldMemory() as held:
        blocks = StreamedBlocks(x, block_cols, held)
        m, ell = softmax_stats(blocks)
    n_blocks = triton.cdiv(cols, block_cols)
    where = f"{what}: {rows} x {cols}, blocks of {block_cols}"
    assert blocks.handed_out == n_blocks, (
        f"{where}: read {blocks.handed_out} of the {n_blocks} blocks")
    for name, t in (("m", m), ("ell", ell)):
        assert isinstance(t, torch.Tensor) and t.shape == (rows,) and t.dtype == torch.float64, \
            f"{where}: {name} must be a float64 tensor of shape ({rows},), got {t!r:.80}"
    m_ref = x.amax(dim=1)
    ell_ref = torch.exp(torch.logsumexp(x, dim=1) - m_ref)
    assert torch.equal(m, m_ref), (
        f"{where}: m is not the row maximum (first row: {m[0]} vs {m_ref[0]})")
    error = (((ell - ell_ref).abs() / ell_ref).max().item() if torch.isfinite(ell).all()
             else math.inf)
    assert error <= 1e-9, (f"{where}: ell differs from sum(exp(x - m)) by up to {error:.3g} "
                           f"(relative); first row: {ell[0].item():.6g}, "
                           f"expected {ell_ref[0].item():.6g}")


generator = torch.Generator().manual_seed(0)


def randn(*shape):
    return torch.randn(*shape, generator=generator, dtype=torch.float64)


masked = randn(4, 96) * 100
masked[:2, :40] = -math.inf                                 # rows 0, 1: the first blocks all -inf
masked[2:, ::3] = -math.inf                                 # rows 2, 3: scattered -inf
for x, block_cols, what in [
        (randn(1, 1), 1, "one value"),
        (randn(3, 10), 4, "a narrower last block"),
        (randn(5, 100), 7, "standard normal"),
        (randn(4, 64), 64, "a single block"),
        (randn(2, 1000) * 1e3, 128, "values of 1e3"),
        (torch.sort(randn(3, 300) * 1e4, dim=1).values, 32, "ascending values of 1e4"),
        (masked, 16, "-inf entries")]:
    check_stats(x, block_cols, what)
### BEGIN HIDDEN TESTS
hidden = randn(2, 129) * 1e4
hidden[0, :64] = -math.inf
for x, block_cols, what in [
        (torch.sort(randn(6, 50) * 1e4, dim=1, descending=True).values, 50,
         "descending, one block"),
        (hidden, 64, "values of 1e4 after an -inf block"),
        (randn(3, 77) * 5e3 + 1e4, 10, "large offset")]:
    check_stats(x, block_cols, what)
### END HIDDEN TESTS
print("softmax_stats matches torch.logsumexp on every case, in one streaming pass")

# %% [markdown] id="cell-22"
# **From statistics to attention.** Attention needs more than $m$ and $\ell$: it needs $\sum_k
# \mathrm{softmax}(s)_k\, v_k = \frac{1}{\ell} \sum_k e^{s_k - m} v_k$ for each query. The same
# trick works for the vector sum: keep an *accumulator* $\text{acc} = \sum e^{s_k - m} v_k$ relative
# to the current maximum, multiply it by the same factor $\alpha = e^{m - m_\text{new}}$ whenever
# the maximum grows, and divide by $\ell$ once, at the very end. Here is the whole algorithm for one
# head, in plain PyTorch, taking keys and values one block at a time; it never holds more than a
# `(seq, block)` slice of the scores:

# %% id="cell-23"
def blockwise_attention(q, k, v, block):
    """softmax(q k^T / sqrt(d)) v for one head, q, k, v of shape (seq, d), with keys and values
    taken `block` rows at a time: the online softmax with an output accumulator."""
    seq, d = q.shape
    m = torch.full((seq,), -math.inf, dtype=q.dtype)     # running maximum of each query's scores
    ell = torch.zeros(seq, dtype=q.dtype)                 # running sum of exp(score - m)
    acc = torch.zeros_like(q)                             # running sum of exp(score - m) * v
    for start in range(0, seq, block):
        s = q @ k[start:start + block].T / math.sqrt(d)   # (seq, block): this block's scores only
        m_new = torch.maximum(m, s.amax(dim=1))
        alpha = torch.exp(m - m_new)                      # rescales everything summed so far
        p = torch.exp(s - m_new[:, None])
        ell = ell * alpha + p.sum(dim=1)
        acc = acc * alpha[:, None] + p @ v[start:start + block]
        m = m_new
    return acc / ell[:, None]


q, k, v = (torch.randn(1, 1, 300, 64, dtype=torch.float64) for _ in range(3))
error = check.relative_error(blockwise_attention(q[0, 0], k[0, 0], v[0, 0], 64),
                             attention_reference(q, k, v)[0, 0])
print(f"blockwise attention (blocks of 64) against the definition: relative error {error:.1e}")

# %% [markdown] id="cell-24"
# ## 4. FlashAttention forward in Triton
#
# FlashAttention is `blockwise_attention` turned inside out for a GPU: instead of all queries at
# once and a Python loop over key blocks, **one program per block of `BLOCK_M` queries of one
# (batch, head)**, each looping over the key and value blocks itself. The grid is `(cdiv(seq,
# BLOCK_M), batch * heads)`: `tl.program_id(0)` picks the query block, `tl.program_id(1)` the batch
# and head. A program:
#
# 1. loads its `BLOCK_M` × `head_dim` block of `q` **once**, and sets up its state in registers:
#    `acc` (`BLOCK_M` × `head_dim`, float32, zeros), `l_i` (zeros) and `m_i` ($-\infty$);
# 2. for each block of `BLOCK_N` keys: loads the `k` block, computes the `BLOCK_M` × `BLOCK_N`
#    scores with `tl.dot(q, tl.trans(k))`, updates `m_i`, `l_i` and `acc` exactly as
#    `blockwise_attention` does, loading the `v` block for `acc`'s `tl.dot`;
# 3. divides `acc` by `l_i` and **stores the output block: the only store of the kernel**.
#
# The scores exist only as a `BLOCK_M` × `BLOCK_N` tile in registers. Each program reads `q` once
# and the rows of `k` and `v` its queries may see; a tile of `k` or `v` loaded once serves `BLOCK_M`
# queries, the same reuse that made lesson 02's tiled matmul fast.
#
# **Details that matter:**
#
# - **exp2.** A GPU computes $2^x$ in one instruction; $e^x = 2^{x \log_2 e}$. The kernel folds
#   $\log_2 e / \sqrt d$ into one scale, `qk_scale = LOG2E / sqrt(head_dim)` (`LOG2E` is imported),
#   multiplies the scores by it, keeps `m_i` in the same base-2 units, and uses `tl.math.exp2`
#   everywhere: the same softmax with no extra multiply.
# - **Keys past the end.** When `seq` is not a multiple of `BLOCK_N`, the last key block reaches
#   past the end. Mask its loads (`other=0.0`) *and* set those scores to $-\infty$ with `tl.where`:
#   a key loaded as zeros has score 0, not $-\infty$, and would get a weight.
# - **Queries past the end.** The last query block may hang over the end too: load those rows as
#   zeros (their scores are all 0, harmless) and do not store them.
# - **Causal.** Query $i$ may see keys $j \le i$ only. For the query block starting at row `start_m
#   * BLOCK_M`, key blocks entirely before that row need no mask at all; blocks between `start_m *
#   BLOCK_M` and `(start_m + 1) * BLOCK_M` cross the diagonal and need the mask `offs_m[:, None] >=
#   cols[None, :]`; blocks after that are entirely masked and are **skipped**, which is where causal
#   attention saves half the work. (So that the diagonal starts on a key-block boundary, `BLOCK_M`
#   must be a multiple of `BLOCK_N`.)
# - **Masks cost time.** Most key blocks need no mask (all but the last without causal, all before
#   the diagonal with it). The reference writes the loop body once, as a `@triton.jit` function
#   `attention_blocks` with a `MASKED: tl.constexpr` flag, and calls it twice: once over the
#   unmasked blocks, once over the masked ones. The compiler generates the two loops separately, and
#   the hot one has no mask arithmetic.
# - **Strides.** Pass each tensor's batch, head and sequence strides: the grader uses views of
#   `(batch, seq, heads, head_dim)` tensors (`.transpose(1, 2)`, the layout a projection produces)
#   and keys and values with their own head strides. The last dimension is contiguous (stride 1):
#   the validator refuses anything else.
#
# **Tuning.** The best `BLOCK_M`, `BLOCK_N`, `num_warps` and `num_stages` depend on the GPU, the
# head dimension, the dtype and causality. Lesson 03's `tilegym_edu.tune.autotune` picks them: it
# times the candidates of a search space on your problem, interleaved, drops clear losers early, and
# caches the winner per GPU and problem. The search space for attention comes from the reference
# module, `ATTENTION_SPACE`: a default (level 0), five more candidates worth trying on any GPU
# (level 1), and a full grid (level 2) with a pruning rule that throws out, before compiling
# anything, the tiles that cannot fit this GPU's shared memory or registers. In the interpreter
# there is nothing to time, and `autotune` returns the default (`BLOCK_M=128, BLOCK_N=64`).

# %% id="cell-25"
print("level 0, the default:", ATTENTION_SPACE.default)
for config in ATTENTION_SPACE.configs(1)[1:]:
    print("level 1 adds:        ", config)
# this GPU's resources, or an H200's without a GPU
resources = tune.Resources.of_gpu() or tune.Resources(shared_bytes=232_448)
problem = attention_problem(torch.empty(BATCH, HEADS, FOCUS_SEQ, HEAD_DIM, dtype=torch.float16),
                            causal=False)
kept, pruned = ATTENTION_SPACE.candidates(2, problem, resources)
print(f"\nlevel 2 for {problem}: {len(kept)} candidates kept, {len(pruned)} pruned, e.g.")
for config, why in pruned[::max(1, len(pruned) // 4)]:
    print(f"  {config}: {why}")

# %% [markdown] id="cell-26"
# On an H200 the level-1 search chose `BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3` for all
# four problems measured (head_dim 64 and 128, causal and not, $S = 4096$;
# docs/results/h200-2026-11-29-attention.json), and gained 4% over the default at head_dim 128,
# non-causal (docs/results/h200.md).
#
# ## Exercises 4, 5, 6 (4 + 3 + 2 points): FlashAttention forward
#
# Write `flash_attention(q, k, v, causal=False, config=None, level=1)` and the kernels behind it:
#
# - `q`, `k`, `v`: `(batch, heads, seq, head_dim)`, one shape, one dtype (`float16` or `float32`,
#   and `bfloat16` on a GPU), `head_dim` 16, 32, 64 or 128, any strides with the last dimension
#   contiguous. Call `check_attention_inputs(q, k, v)` first (imported: it raises a `ValueError`
#   that says what to change). Return a new tensor of `q`'s shape and dtype:
#   $\mathrm{softmax}(qk^\top/\sqrt{d})\,v$, causal if asked, with the scores in float32.
# - `config`: a `Config` with `BLOCK_M`, `BLOCK_N`, `num_warps` and `num_stages`. Use it exactly
#   when given (the grader passes small blocks, and counts your memory traffic with them); when it
#   is `None`, take `autotune(flash_attention_kernel, attention_problem(q, causal), ATTENTION_SPACE,
#   launch, level=level).config`, where `launch(config)` runs your kernel once on these inputs.
#   `launch_attention` is there for that.
# - The kernel stores the output and nothing else; it loads each `q` block once and, in each
#   program, each `k` and `v` block at most once; causal programs skip the key blocks after the
#   diagonal.
#
# The cell below has the reference's structure: `attention_blocks` (the loop over a range of key
# blocks, masked or not), `flash_attention_kernel` (one program's work), `launch_attention` (grid
# and strides) and `flash_attention`. The grader calls only `flash_attention`, so you may organise
# the kernels your own way. It checks (Exercise 4) lengths that are not multiples of any block (1,
# 37, 130, 200, ...), head_dim 16 to 128, several batches and heads, fp16 and fp32, transposed and
# head-strided views, and scores around $10^3$, where any exponential without the maximum subtracted
# overflows; (Exercise 5) the same with `causal=True`; (Exercise 6) the bytes your kernel loads and
# stores, counted in the interpreter. During grading PyTorch may only allocate, view and copy:
# `F.scaled_dot_product_attention` or the reference fails every exercise.

# %% id="cell-27" nbgrader={"grade": false, "grade_id": "flash_attention_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
# include: tilegym_edu/reference/attention.py attention_blocks solution


# include: tilegym_edu/reference/attention.py flash_attention_kernel solution


# include: tilegym_edu/reference/attention.py launch_attention solution


# include: tilegym_edu/reference/attention.py flash_attention solution

# %% id="cell-28" nbgrader={"grade": false, "grade_id": "attention_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
def make_attention_inputs(case, generator):
    """(q, k, v, causal, config) for case = {"batch", "heads", "seq", "head_dim", "dtype"}: q, k, v
    standard normal on the lesson's device, causal = case.get("causal", False), and config from
    case["blocks"] = (BLOCK_M, BLOCK_N) (None without: the tuner's choice).
    case["layout"]: "bshd" makes each of q, k, v a .transpose(1, 2) view of a (batch, seq, heads,
    head_dim) tensor; "kv-strided" takes k and v as every other head of a tensor with twice the
    heads. case["scale"] multiplies q and k: 32 gives scores of about 1e3."""
    B, H, S, D, dtype = case["batch"], case["heads"], case["seq"], case["head_dim"], case["dtype"]
    layout, scale = case.get("layout", "contiguous"), case.get("scale", 1.0)

    def tensor(s, is_kv):
        if layout == "bshd":
            return check.random_tensor((B, S, H, D), dtype, generator, s).transpose(1, 2)
        if layout == "kv-strided" and is_kv:
            return check.random_tensor((B, 2 * H, S, D), dtype, generator, s)[:, ::2]
        return check.random_tensor((B, H, S, D), dtype, generator, s)

    blocks = case.get("blocks")
    config = (Config(BLOCK_M=blocks[0], BLOCK_N=blocks[1], num_warps=4, num_stages=2)
              if blocks else None)
    return (tensor(scale, False), tensor(scale, True), tensor(1.0, True),
            case.get("causal", False), config)


def speed_input_sets(B, H, S, D, seeds=(0, 1)):
    """Input sets [(q, k, v), ...] for the speed checks: fp16, (B, H, S, D), a fresh draw for
    each seed."""
    case = {"batch": B, "heads": H, "seq": S, "head_dim": D, "dtype": torch.float16}
    return [make_attention_inputs(case, torch.Generator().manual_seed(seed))[:3]
            for seed in seeds]


for result in check.check(flash_attention, attention_reference, make_attention_inputs,
                          seeds=[0], cases=[
        {"batch": 2, "heads": 2, "seq": 100, "head_dim": 64, "dtype": torch.float16},
        {"batch": 1, "heads": 2, "seq": 70, "head_dim": 32, "dtype": torch.float32, "causal": True,
         "layout": "bshd", "blocks": (32, 16)}]):
    print(result.describe())

# %% id="cell-29" nbgrader={"grade": true, "grade_id": "test_flash_attention_correct", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
# Exercise 4: flash_attention (non-causal) is correct on odd lengths, head_dim 16 to 128, batches
# and heads, fp16 and fp32, strided views, its own and the grader's block sizes, and huge scores.
cases = [
    {"batch": 1, "heads": 1, "seq": 1, "head_dim": 64, "dtype": torch.float32},
    {"batch": 2, "heads": 2, "seq": 37, "head_dim": 64, "dtype": torch.float16},
    {"batch": 1, "heads": 1, "seq": 130, "head_dim": 128, "dtype": torch.float32},
    {"batch": 1, "heads": 2, "seq": 200, "head_dim": 32, "dtype": torch.float16, "layout": "bshd"},
    {"batch": 1, "heads": 2, "seq": 50, "head_dim": 16, "dtype": torch.float16,
     "layout": "kv-strided", "blocks": (32, 16)},
    {"batch": 1, "heads": 1, "seq": 130, "head_dim": 64, "dtype": torch.float16, "scale": 32.0},
]
grading.assert_correct(flash_attention, attention_reference, make_attention_inputs, cases,
                       seeds=(0, 1))
q = torch.randn(1, 2, 16, 64, device=DEVICE)
for args, why in [((q, q, q[:, :1]), "v with another shape"),
                  ((q, q.transpose(2, 3).contiguous().transpose(2, 3), q),
                   "k with a non-contiguous last dimension")]:
    try:
        flash_attention(*args)
    except ValueError:
        pass
    else:
        raise AssertionError(f"flash_attention accepted {why}: "
                             "call check_attention_inputs(q, k, v)")
### BEGIN HIDDEN TESTS
hidden_cases = [
    {"batch": 1, "heads": 1, "seq": 77, "head_dim": 128, "dtype": torch.float16, "layout": "bshd",
     "scale": 32.0},
    {"batch": 2, "heads": 1, "seq": 100, "head_dim": 32, "dtype": torch.float32,
     "blocks": (64, 32)},
    {"batch": 1, "heads": 3, "seq": 2, "head_dim": 16, "dtype": torch.float16},
]
grading.assert_correct(flash_attention, attention_reference, make_attention_inputs, hidden_cases,
                       seeds=(11,))
### END HIDDEN TESTS

# %% id="cell-30" nbgrader={"grade": true, "grade_id": "test_flash_attention_causal", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Exercise 5: flash_attention with causal=True is correct on the same kinds of cases.
cases = [
    {"batch": 1, "heads": 1, "seq": 1, "head_dim": 64, "dtype": torch.float32, "causal": True},
    {"batch": 2, "heads": 2, "seq": 37, "head_dim": 64, "dtype": torch.float16, "causal": True},
    {"batch": 1, "heads": 1, "seq": 200, "head_dim": 128, "dtype": torch.float16, "causal": True,
     "layout": "bshd"},
    {"batch": 1, "heads": 1, "seq": 70, "head_dim": 32, "dtype": torch.float32, "causal": True,
     "blocks": (32, 16)},
    {"batch": 1, "heads": 1, "seq": 130, "head_dim": 64, "dtype": torch.float16, "causal": True,
     "scale": 32.0},
]
grading.assert_correct(flash_attention, attention_reference, make_attention_inputs, cases,
                       seeds=(0, 1))
### BEGIN HIDDEN TESTS
hidden_cases = [
    {"batch": 2, "heads": 1, "seq": 150, "head_dim": 16, "dtype": torch.float16, "causal": True,
     "layout": "kv-strided", "blocks": (64, 64)},
    {"batch": 1, "heads": 1, "seq": 64, "head_dim": 32, "dtype": torch.float32, "causal": True,
     "blocks": (64, 32)},
]
grading.assert_correct(flash_attention, attention_reference, make_attention_inputs, hidden_cases,
                       seeds=(11,))
### END HIDDEN TESTS

# %% [markdown] id="cell-31"
# **Exercise 6, what the kernel may move and hold.** Without a GPU nothing can be timed, but the
# bytes can be counted, and so can what a program keeps at once. The check below runs your
# `flash_attention` at batch 1, 1 head, head_dim 16 in fp16, with `BLOCK_M=16, BLOCK_N=16`, under
# `traffic.count_traffic`: without causal masking at $S = 1024$, with it at $S = 512$. Per head,
# the algorithm loads `q` once ($S d e$ bytes for elements of $e$ bytes) and, in each of the
# $\lceil S / B_M \rceil$ programs, every row of `k` and `v` that the program's queries may see: all
# $S$ of them without causal masking, only those up to the end of its own query block with it. It
# stores the output once, $S d e$ bytes. Your kernel must store exactly the output's bytes
# (anything like the $S \times S$ scores shows up at once: they are 64 times the output at $S =
# 1024$), load at most 1.25 times that budget, and compute the right output.
#
# It must also hold no more than 16 KiB at once in any program: 16 blocks of 1,024 bytes, a block
# being the largest of `BLOCK_M` x `BLOCK_N`, `BLOCK_M` x $d$ and `BLOCK_N` x $d$ in 4-byte values.
# Every value a program has made and still keeps counts, at its size in bytes: loaded blocks,
# scores, the accumulator, pointers (8 bytes each) and masks. That is the point of the online
# softmax: what a program needs on chip does not grow with $S$. The reference solution holds 9.5 KB
# (9,740 bytes). At $S = 1024$ a row of scores is 32 KiB even in fp16, and so is all of `k`
# (kept to go over the keys twice), however the loads or the blocks are cut. Multiply blocks with
# `tl.dot`: a three-dimensional broadcast product of a block of `q` and one of `k` takes 16 KiB
# by itself.

# %% id="cell-32" nbgrader={"grade": true, "grade_id": "test_never_writes_scores", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 6: flash_attention stores only its output, loads no more than the algorithm needs,
# and holds no more than 16 blocks of the config's tiles at once (the online softmax).
def attention_load_budget(batch, heads, seq, head_dim, element_size, block_m, causal):
    """Bytes: q once, and for each query block the k and v rows its queries may see."""
    seen = sum(min((i + 1) * block_m, seq) if causal else seq
               for i in range(triton.cdiv(seq, block_m)))
    return batch * heads * (seq + 2 * seen) * head_dim * element_size


def check_traffic(batch, heads, seq, head_dim, dtype, block_m, block_n, causal):
    case = {"batch": batch, "heads": heads, "seq": seq, "head_dim": head_dim, "dtype": dtype,
            "blocks": (block_m, block_n)}
    q, k, v, _, config = make_attention_inputs(case, torch.Generator().manual_seed(0))
    scores_bytes = batch * heads * seq * seq * q.element_size()
    block = 4 * max(block_m * block_n, block_m * head_dim, block_n * head_dim)
    budget = attention_load_budget(batch, heads, seq, head_dim, q.element_size(), block_m, causal)
    grading.assert_traffic(
        flash_attention, (q, k, v, causal, config), attention_reference, dtype,
        what=f"{'causal' if causal else 'non-causal'}, ({batch}, {heads}, {seq}, {head_dim}) "
             f"{str(dtype)[6:]}, blocks {block_m} x {block_n}",
        stores=q.numel() * q.element_size(), loads_at_most=1.25 * budget,
        held_at_most=16 * block,
        store_hint=f" (the {seq} x {seq} scores would be {scores_bytes:,} bytes: "
                   "they must stay on chip)",
        load_hint=": load q once per program and each k and v block once"
                  + (", and skip the key blocks after the diagonal" if causal else ""),
        held_hint=f" (16 blocks of {block:,} bytes; a row of {seq} scores is "
                  f"{2 * block_m * seq:,} bytes even in fp16): keep one block of keys and "
                  "their scores at a time, with a running maximum and sum, and multiply "
                  "blocks with tl.dot")


check_traffic(1, 1, 1024, 16, torch.float16, 16, 16, causal=False)
check_traffic(1, 1, 512, 16, torch.float16, 16, 16, causal=True)
### BEGIN HIDDEN TESTS
for causal in (False, True):
    check_traffic(1, 1, 128, 32, torch.float32, 64, 32, causal)
### END HIDDEN TESTS

# %% [markdown] id="cell-33"
# ## Exercise 7 (2 + 2 + 2 points, needs a GPU): speed and memory
#
# Three checks on a GPU, each measured in this process, with outputs checked against the float64
# definition:
#
# - **Against naive attention**, batch 1, 16 heads, $S = 4096$, head_dim 64, fp16: your speed over
#   `naive_attention`'s, timed interleaved; it needs 4x. (On an H200 at this shape the reference
#   took 0.165 ms and naive PyTorch 2.507 ms: 15.2x, in the grading of 2026-12-05,
#   docs/results/h200-2026-12-05-gpu-run-39-flash-lessons-04-06.log.)
# - **Peak memory**: the extra GPU memory of one call at $S = 4096$ and $S = 16384$ (batch 1, 16
#   heads, head_dim 64) must stay within twice the output's size: memory that grows with $S$, not
#   $S^2$.
# - **Against the best SDPA backend**, batch 4, 32 heads, $S = 4096$, head_dim 128, fp16: PyTorch's
#   `F.scaled_dot_product_attention` has several backends, chosen with
#   `torch.nn.attention.sdpa_kernel`: `FLASH_ATTENTION` (the FlashAttention-2 kernels built into
#   PyTorch), `CUDNN_ATTENTION` (NVIDIA cuDNN's fused attention), `EFFICIENT_ATTENTION` (the
#   memory-efficient kernel from xFormers) and `MATH` (plain operations, like the naive version).
#   Every backend that runs on your GPU is timed, interleaved with your kernel, and your speed is
#   compared with the fastest; it needs 0.5. On an H200 that was cuDNN, and the reference reached
#   0.78 of its speed (510 against 657 TFLOP/s, docs/results/h200.md; the grading of 2026-12-05
#   measured 0.78 again, 525 against 676).
#
# Each check tunes your kernel before timing it (the tuner's result is cached per problem). The
# helpers below run SDPA with one backend and find the backends that can run here.

# %% id="cell-34" nbgrader={"grade": false, "grade_id": "sdpa_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
SDPA_BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cuDNN": SDPBackend.CUDNN_ATTENTION,
                 "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}


def sdpa(q, k, v, backend, causal=False):
    """F.scaled_dot_product_attention with only `backend` allowed."""
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def available_sdpa_backends(q, k, v, causal=False, verbose=True, backends=SDPA_BACKENDS):
    """{name: backend} of the SDPA backends (of `backends`) that run on these inputs here. A
    backend this GPU or this PyTorch cannot run on them, or that runs out of memory, is left out
    (and named if verbose)."""
    found = {}
    for name, backend in backends.items():
        try:
            with warnings.catch_warnings():
                # PyTorch warns about each backend it cannot use
                warnings.simplefilter("ignore")
                sdpa(q, k, v, backend, causal)
            device.synchronize()
        except RuntimeError as error:                  # torch.cuda.OutOfMemoryError included
            if device.ON_GPU:
                torch.cuda.empty_cache()
            if verbose:
                print(f"SDPA {name} left out: {str(error).strip().splitlines()[0][:120]}")
        else:
            found[name] = backend
    return found


print("SDPA backends that run here:", ", ".join(available_sdpa_backends(
    *make_attention_inputs({"batch": 1, "heads": 2, "seq": 64, "head_dim": 64,
                            "dtype": torch.float16},
                           torch.Generator().manual_seed(0))[:3], verbose=False)))

# %% id="cell-35" nbgrader={"grade": true, "grade_id": "test_flash_vs_naive", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 7a: flash_attention is many times faster than naive attention (GPU only).
grading.require_gpu("the speedup of flash_attention over naive attention")
limit = grading.threshold("04_flash_attention", "flash_vs_naive")
B, H, S, D = 1, 16, 4096, 64
input_sets = speed_input_sets(B, H, S, D)
# tune first (cached): the timed calls run the chosen configuration
flash_attention(*input_sets[0])
grading.assert_speedup(flash_attention, naive_attention, input_sets, attention_reference,
                       torch.float16, limit, flops=4 * B * H * S * S * D)

# %% id="cell-36" nbgrader={"grade": true, "grade_id": "test_peak_memory", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 7b: one call of flash_attention needs memory for its output, not for the scores
# (GPU only).
grading.require_gpu("the peak memory of flash_attention")
B, H, D = 1, 16, 64
for S in (4096, 16384):
    q, k, v, *_ = make_attention_inputs({"batch": B, "heads": H, "seq": S, "head_dim": D,
                                         "dtype": torch.float16},
                                        torch.Generator().manual_seed(S))
    # tune first: the tuner's timing buffers are not the kernel's memory
    flash_attention(q, k, v)
    extra, out = peak_extra_bytes(lambda: grading.guarded_call(flash_attention, (q, k, v)))
    output_bytes, scores_bytes = q.numel() * q.element_size(), B * H * S * S * q.element_size()
    print(f"seq {S:>5}: extra peak memory {extra / 2**20:,.1f} MiB, "
          f"output {output_bytes / 2**20:,.1f} MiB "
          f"(the fp16 scores alone would take {scores_bytes / 2**30:,.1f} GiB)")
    rows = slice(None, None, S // 256)  # check 256 queries of 2 heads against the definition
    expected = attention_reference(*(t[:, :2].double().cpu() for t in (q[:, :, rows], k, v)))
    passed, _, message = check.compare_output(out[:, :2, rows], expected, torch.float16)
    assert passed, f"seq {S}: the output is wrong: {message}"
    assert extra <= 2 * output_bytes, (
        f"seq {S}: one call took {extra / 2**20:,.1f} MiB beyond its inputs, "
        f"more than twice its output ({output_bytes / 2**20:,.1f} MiB): "
        f"memory must grow with seq, not seq^2 "
        f"(the fp16 scores alone would take {scores_bytes / 2**30:,.2f} GiB)")

# %% id="cell-37" nbgrader={"grade": true, "grade_id": "test_flash_vs_best_sdpa", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 7c: flash_attention against the fastest SDPA backend on this GPU (GPU only).
grading.require_gpu("the speed of flash_attention against PyTorch's SDPA backends")
limit = grading.threshold("04_flash_attention", "flash_vs_best_sdpa")
B, H, S, D = 4, 32, 4096, 128
input_sets = speed_input_sets(B, H, S, D)
flash_attention(*input_sets[0])        # tune first (cached)
q, k, v = input_sets[0]
baselines = {f"SDPA {name}": (lambda backend=backend: sdpa(q, k, v, backend))
             for name, backend in available_sdpa_backends(q, k, v).items()}
yours, *others = grading.measure_speed(flash_attention, baselines, input_sets, attention_reference,
                                       torch.float16, flops=4 * B * H * S * S * D)
assert others, "no SDPA backend could run on this GPU: there is nothing to compare with"
fastest = min(others, key=lambda m: m.median_ms)
print(f"the fastest SDPA backend here: {fastest.name}")
grading.assert_ratio(fastest.median_ms / yours.median_ms, limit)

# %% [markdown] id="cell-38"
# ## Compare: your kernel, the reference, and every SDPA backend
#
# The comparison this lesson was for, at batch 4, 32 heads, head_dim 128 in fp16 on a GPU, for
# sequence lengths from 1,024 to 16,384, causal and not: your `flash_attention`, the course's
# reference, naive PyTorch and each SDPA backend, timed interleaved on the same inputs. TFLOP/s come
# from $4BHS^2d$ FLOPs (halved when causal); bytes from the fewest the problem needs (`q`, `k`, `v`
# read and the output written once), so on the roofline every version sits at the same intensity and
# only its height differs. Naive PyTorch and the math backend, which hold the scores in memory, are
# timed only up to $S = 4096$: beyond that the scores need 80 GiB at 8,192 (batch 4, 32 heads,
# fp16 and fp32 copies) and more memory than the GPU has at 16,384. On a GPU this
# cell takes a while (each of the ten problems is tuned first, for your kernel and for the
# reference); in the interpreter it times a toy problem, which says nothing about GPU speed.

# %% id="cell-39" tags=["demo"]
def attention_flops(batch, heads, seq, head_dim, causal):
    """4·B·H·S²·d: two matmuls of 2·S²·d per head; half of that when causal."""
    return 4 * batch * heads * seq * seq * head_dim // (2 if causal else 1)


def fits(fn):
    """Whether fn() runs without running out of GPU memory (always, in the interpreter)."""
    try:
        fn()
        device.synchronize()
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return False
    return True


rates = {False: {}, True: {}}        # causal -> name -> {seq: TFLOP/s}
focus = {}                           # causal -> the measurements at FOCUS_SEQ
for causal in (False, True):
    for S in progress.track(SEQ_LENS, f"{'causal' if causal else 'non-causal'} sweep"):
        q, k, v, *_ = make_attention_inputs({"batch": BATCH, "heads": HEADS, "seq": S,
                                             "head_dim": HEAD_DIM, "dtype": torch.float16},
                                            torch.Generator().manual_seed(S))
        flash_attention(q, k, v, causal)                 # tune first (cached per problem)
        reference.flash_attention(q, k, v, causal)
        fns = {"flash_attention (yours)": lambda: flash_attention(q, k, v, causal),
               "reference solution": lambda: reference.flash_attention(q, k, v, causal)}
        if S <= 4096 and fits(lambda: naive_attention(q, k, v, causal)):
            fns["naive PyTorch"] = lambda: naive_attention(q, k, v, causal)
        tried = {name: b for name, b in SDPA_BACKENDS.items() if name != "math" or S <= 4096}
        backends = available_sdpa_backends(q, k, v, causal, verbose=False, backends=tried)
        for name, backend in backends.items():
            fns[f"SDPA {name}"] = lambda backend=backend: sdpa(q, k, v, backend, causal)
        results = bench.compare(fns, flops=attention_flops(BATCH, HEADS, S, HEAD_DIM, causal),
                                bytes=4 * q.nbytes)
        for m in results:
            rates[causal].setdefault(m.name, {})[S] = m.tflops
        if S == FOCUS_SEQ:
            focus[causal] = results
        q = k = v = None   # frees this length's tensors before the next (as del would)

for causal in (False, True):
    print(f"\nbatch {BATCH}, heads {HEADS}, head_dim {HEAD_DIM}, fp16, seq {FOCUS_SEQ}, "
          f"{'causal' if causal else 'non-causal'}")
    bench.print_table(focus[causal], baseline="flash_attention (yours)")

# %% [markdown] id="cell-40"
# TFLOP/s against sequence length, and at $S$ = `FOCUS_SEQ` the ladder from naive PyTorch up and the
# roofline (the chart and the ladder on a GPU only; the roofline is drawn everywhere, and in the
# interpreter its heights mean nothing):

# %% id="cell-41" tags=["demo"]
if not focus:
    raise NotImplementedError("the comparison needs your flash_attention (Exercise 4): "
                              "write it, then run the sweep above again")
if device.ON_GPU:
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
    for ax, causal in zip(axes, (False, True)):
        for i, (name, by_seq) in enumerate(rates[causal].items()):
            seqs = sorted(by_seq)
            ax.plot(seqs, [by_seq[s] for s in seqs], "o-", color=f"C{i}", label=name)
        kind = "causal" if causal else "non-causal"
        ax.set(xscale="log", yscale="log", xlabel="sequence length (tokens)",
               title=f"{kind}: batch {BATCH}, {HEADS} heads, head_dim {HEAD_DIM}, fp16")
        ax.set_xscale("log", base=2)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("TFLOP/s (4·B·H·S²·d, halved when causal)")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Attention forward on {device.info().name}")
    plt.tight_layout()
    plt.show()
    order = ["naive PyTorch", "SDPA math", "SDPA efficient", "SDPA flash",
             "flash_attention (yours)", "reference solution", "SDPA cuDNN"]
    ladder = sorted(focus[False],
                    key=lambda m: order.index(m.name) if m.name in order else len(order))
    roofline.plot_ladder(ladder,
                         title=f"Attention, seq {FOCUS_SEQ}, non-causal, fp16: from naive up")
else:
    print("The TFLOP/s chart and the ladder need GPU timings: "
          "interpreter times say nothing about GPU speed.")
fastest_sdpa = min((m for m in focus[False] if m.name.startswith("SDPA")),
                   key=lambda m: m.median_ms)
# one label per point: the fastest SDPA backend stands for all of them
shown = [m for m in focus[False] if not m.name.startswith("SDPA")] + [fastest_sdpa]
roofline.plot_roofline(shown,
                       title=f"Attention, seq {FOCUS_SEQ}, non-causal, fp16, on the roofline");

# %% [markdown] id="cell-43"
# ## 5. The backward pass
#
# Training needs the gradients of a loss with respect to `q`, `k` and `v`. Autograd through
# `naive_attention` gets them by keeping the forward's $S \times S$ probabilities $P$ and reading
# them back: the memory the forward just learnt to avoid. FlashAttention-2 (Dao, 2023) keeps one
# number per query instead, the log-sum-exp of its scores, and recomputes $P$ block by block in
# the backward, where it is needed:
#
# $$P_{ij} = 2^{\,s_{ij} - \mathrm{lse}_i}, \qquad
# s_{ij} = \frac{\log_2 e}{\sqrt d}\, q_i \cdot k_j, \qquad
# \mathrm{lse}_i = \log_2 \textstyle\sum_j 2^{s_{ij}}$$
#
# (in log2 units, like the forward's running maximum: the forward's last `m_i + log2(l_i)` is
# exactly $\mathrm{lse}_i$). With $dO$ the gradient of the output $O = Pv$, the chain rule through
# the two matmuls and the softmax gives
#
# $$dv = P^\top dO, \qquad dP = dO\, v^\top, \qquad dS = P \circ (dP - \delta), \qquad
# \delta_i = \textstyle\sum_d dO_{id}\, O_{id},$$
#
# $$dq = \tfrac{1}{\sqrt d}\, dS\, k, \qquad dk = \tfrac{1}{\sqrt d}\, dS^\top q .$$
#
# $\delta_i$ is the softmax's correction term, $\sum_j P_{ij}\, dP_{ij}$; it equals the row sum of
# $dO \circ O$, which reads two $S \times d$ tensors instead of the scores. That makes five matmuls
# of $2 S^2 d$ FLOPs each against the forward's two: the backward does 2.5 times the forward's work.
#
# The work is split so that no two programs write the same gradient, and no atomics are needed:
# **one program per key block** keeps its `k` and `v` block on chip and streams every query block
# past, accumulating that block's `dk` and `dv`; **one program per query block** does the same for
# `dq`, streaming the key blocks. Both recompute $P$ and $dP$: the price of never storing them,
# seven matmuls for each pair of blocks where the formulas take five. A small kernel computes
# $\delta$ first. Causal attention skips what the mask hides: a key block is seen only by the
# queries at and after it, and a query block sees only the keys up to its diagonal.
#
# FlashAttention-2 itself saves the two extra matmuls: its key-block programs also add their
# share of $dq$ (that of the query block streaming past, $dS\,k$) into a float32 copy of $dq$ with
# atomic adds, many programs to the same rows at once, in no fixed order. In Triton on an H200
# that one pass ran at 0.58-0.78 of the two kernels' speed, whether each thread added its share
# by atomics or each block by one TMA bulk reduction. `benchmarks/attention_backward_ideas.py`
# took it apart at batch 4, 32 heads, $S = 4096$, head_dim 128: the dk/dv loop alone on one
# pass's tiles took 4.40 ms, adding the fifth matmul (summed in registers, $dq$ left wrong) 6.19
# ms, adding the atomics 7.74 ms; the two kernels took 3.90 + 3.02 = 6.92 ms. Without its atomics
# one pass would have won; they add a quarter to its time. FlashAttention-3's CUDA kernels hide
# the atomics behind the matmuls with warps of their own; Triton's compiler does not. What did
# pay, 6-9% of the whole backward's time: reading the streamed blocks (`q` and $dO$ for dk/dv,
# `k` and `v` for dq) through tensor descriptors, lesson 03's TMA copies, where the sequence is a
# whole number of blocks (every block whole, only the causal diagonal masked). The reference does
# so; your kernels need not (docs/results/h200.md, 2026-12-04).
#
# ## Exercise 8 (4 + 2 points, the second needs a GPU): FlashAttention backward
#
# Write `flash_backward(q, k, v, o, lse, do, causal=False, configs=None, level=1)`, returning
# `(dq, dk, dv)` with the shapes and dtypes of `q`, `k` and `v`:
#
# - `q`, `k`, `v` as in Exercise 4; `o` the forward's output; `lse` (batch, heads, seq) float32 in
#   log2 units, as above; `do` of `o`'s shape, any strides, its last dimension contiguous or not
#   (`do.contiguous()` costs one copy). The grader computes `o` and `lse` from the definition.
# - `configs`: `{"dkdv": Config, "dq": Config}`, each with `BLOCK_M`, `BLOCK_N`, `num_warps` and
#   `num_stages`; use them exactly when given. When `configs` is `None`, tune each kernel:
#   `tune_backward(backward_problem(q, k, causal), launchers, level)` takes
#   `{"dkdv": (kernel, DKDV_SPACE, launch), "dq": (kernel, DQ_SPACE, launch)}` and returns each
#   kernel's `TuneResult` (all four are imported in the setup cell).
# - The cell below has the reference's structure: `flash_delta_kernel` ($\delta$),
#   `flash_dkdv_kernel`, `flash_dq_kernel`, `backward_launchers` (computes $\delta$, allocates the
#   gradients and returns a launch function per kernel) and `flash_backward`. Their arguments also
#   take grouped-query heads (`GROUP` query heads sharing one key/value head) and fewer queries
#   than keys (`seq_q < seq_k`, the causal mask aligned to the end), because the course's general
#   attention (`tilegym_edu/reference/flash.py`) runs on the same kernels. The grader passes one
#   head count and one length (`GROUP` is 1 and `seq_q == seq_k`), but the demonstration at the end
#   of section 6 runs your backward on grouped-query heads: handle `GROUP` (each dk/dv program sums
#   over the `GROUP` query heads of its key/value head) to see it work there.
# - In both kernels `BLOCK_M` is a block of query rows and `BLOCK_N` a block of key rows: a dk/dv
#   program owns `BLOCK_N` keys and streams `BLOCK_M`-row query blocks past them; a dq program owns
#   `BLOCK_M` queries and streams `BLOCK_N` keys (the search spaces' pruning assumes so).
# - As in Exercise 4, only allocation, views and copies may run in PyTorch during grading: compute
#   $\delta$ in a kernel, and write every element of the gradients (fresh `torch.empty` tensors are
#   filled with NaN when graded).
#
# `backward_definition` below is what the grader checks against: the formulas above in float64
# PyTorch, from the `o` and `lse` it is given. Exercise 8a checks odd lengths, head_dim 16 to 128,
# fp16 and fp32, causal and not, strided views, and your and the grader's block sizes. Exercise 8b
# (GPU only) times your backward against the backward of the fastest SDPA backend, at batch 8, 16
# heads, $S = 2048$, head_dim 64, causal, fp16. On an H200 the reference's backward took 0.59 ms
# there and cuDNN's 0.55 ms: 0.93 of cuDNN's speed, and 1.5 times PyTorch's FlashAttention-2
# backward (`benchmarks/attention_shapes.py`, docs/results/h200-2026-12-04-attention-backward.json;
# 0.64 ms, 0.86 of cuDNN's, before the streamed blocks went by descriptors). The graded cell, which
# also times joining the three gradients into one tensor, measured 0.88 on 2026-12-05 (0.637
# against 0.558 ms); it needs 0.55.

# %% id="cell-44" nbgrader={"grade": false, "grade_id": "flash_backward_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
# include: tilegym_edu/reference/flash_backward.py flash_delta_kernel solution


# include: tilegym_edu/reference/flash_backward.py flash_dkdv_kernel solution


# include: tilegym_edu/reference/flash_backward.py flash_dq_kernel solution


# include: tilegym_edu/reference/flash_backward.py backward_launchers solution


# include: tilegym_edu/reference/flash_backward.py flash_backward solution

# %% id="cell-45" nbgrader={"grade": false, "grade_id": "backward_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
def masked_scores(q, k, causal):
    """q k^T / sqrt(head_dim), the keys after each query at -inf when causal."""
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~keep, -math.inf)
    return s


def backward_definition(q, k, v, o, lse, do, causal=False, *rest):
    """(dq, dk, dv) flattened into one tensor by the formulas of section 5, in the inputs'
    dtype (the grader passes float64 copies): P from the given lse (log2 units), delta from
    the given do and o. Arguments after causal (your configs) are ignored."""
    p = torch.exp(masked_scores(q, k, causal) - lse[..., None] * math.log(2))
    dv = p.transpose(-1, -2) @ do
    ds = p * (do @ v.transpose(-1, -2) - (do * o).sum(-1, keepdim=True))
    dq = ds @ k / math.sqrt(q.shape[-1])
    dk = ds.transpose(-1, -2) @ q / math.sqrt(q.shape[-1])
    return torch.cat([dq.flatten(), dk.flatten(), dv.flatten()])


def flat_gradients(*args):
    """Your flash_backward's (dq, dk, dv), flattened into one tensor as backward_definition's."""
    return torch.cat([g.flatten() for g in flash_backward(*args)])


def make_backward_inputs(case, generator):
    """(q, k, v, o, lse, do, causal, configs) for an attention case (make_attention_inputs'
    keys): o and lse computed from q, k, v in float64, do standard normal (case["do"] ==
    "strided": a view of every other element of its last dimension), and configs from
    case["blocks"] = (a key block, a query block) for dk/dv, the other way round for dq."""
    q, k, v, causal, _ = make_attention_inputs(case, generator)
    if case.get("do") == "strided":
        shape = (*q.shape[:-1], 2 * q.shape[-1])
        do = check.random_tensor(shape, case["dtype"], generator)[..., ::2]
    else:
        do = check.random_tensor(q.shape, case["dtype"], generator)
    s = masked_scores(q.double(), k.double(), causal)
    lse = (torch.logsumexp(s, dim=-1) / math.log(2)).float()
    o = (torch.softmax(s, dim=-1) @ v.double()).to(q.dtype)
    blocks = case.get("blocks")
    configs = ({"dkdv": Config(BLOCK_M=blocks[1], BLOCK_N=blocks[0], num_warps=4, num_stages=2),
                "dq": Config(BLOCK_M=blocks[0], BLOCK_N=blocks[1], num_warps=4, num_stages=2)}
               if blocks else None)
    return q, k, v, o, lse, do, causal, configs


for result in check.check(flat_gradients, backward_definition, make_backward_inputs, seeds=[0],
                          cases=[{"batch": 1, "heads": 2, "seq": 40, "head_dim": 32,
                                  "dtype": torch.float16, "causal": True}]):
    print(result.describe())

# %% id="cell-46" nbgrader={"grade": true, "grade_id": "test_flash_backward_correct", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
# Exercise 8a: flash_backward is correct on odd lengths, head_dim 16 to 128, fp16 and fp32, causal
# and not, strided views, and its own and the grader's block sizes.
cases = [
    {"batch": 1, "heads": 1, "seq": 1, "head_dim": 64, "dtype": torch.float32},
    {"batch": 2, "heads": 2, "seq": 37, "head_dim": 64, "dtype": torch.float16, "causal": True},
    {"batch": 1, "heads": 2, "seq": 100, "head_dim": 32, "dtype": torch.float16, "layout": "bshd"},
    {"batch": 1, "heads": 1, "seq": 70, "head_dim": 16, "dtype": torch.float32, "causal": True,
     "blocks": (32, 16)},
    {"batch": 1, "heads": 1, "seq": 130, "head_dim": 128, "dtype": torch.float16, "causal": True},
]
# float32 gets 1e-2, not 3e-3: on a GPU tl.dot rounds float32 to tf32, and P = exp(s - lse)
# carries a score's rounding error whole, against an lse the grader computed in float64 (with one
# key nothing averages it out: 3.3e-3 on an H200 for one seed of the seq=1 case)
TF32_BACKWARD = {torch.float32: 1e-2}
grading.assert_correct(flat_gradients, backward_definition, make_backward_inputs, cases,
                       seeds=(0, 1), allow=("cat",), tolerances=TF32_BACKWARD)
### BEGIN HIDDEN TESTS
hidden_cases = [
    {"batch": 2, "heads": 1, "seq": 50, "head_dim": 32, "dtype": torch.float16,
     "layout": "kv-strided", "do": "strided"},
    {"batch": 1, "heads": 2, "seq": 64, "head_dim": 64, "dtype": torch.float32, "causal": True,
     "blocks": (16, 32)},
]
grading.assert_correct(flat_gradients, backward_definition, make_backward_inputs, hidden_cases,
                       seeds=(11,), allow=("cat",), tolerances=TF32_BACKWARD)
### END HIDDEN TESTS

# %% id="cell-47" nbgrader={"grade": true, "grade_id": "test_backward_vs_best_sdpa", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 8b: flash_backward against the backward of the fastest SDPA backend (GPU only).
grading.require_gpu("the speed of flash_backward against PyTorch's SDPA backends")
limit = grading.threshold("04_flash_attention", "backward_vs_best_sdpa")
B, H, S, D = 8, 16, 2048, 64
case = {"batch": B, "heads": H, "seq": S, "head_dim": D, "dtype": torch.float16, "causal": True}
input_sets = [make_backward_inputs(case, torch.Generator().manual_seed(seed)) for seed in (0, 1)]
flash_backward(*input_sets[0])        # tune first (cached)
q, k, v, o, lse, do, *_ = input_sets[0]


def sdpa_backward(backend):
    """The backward alone of SDPA with `backend`: its forward runs once, here, on copies (the
    timing refills q, k and v in place, which autograd would refuse in tensors it saved)."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = sdpa(*leaves, backend, causal=True)
    return lambda: torch.autograd.grad(out, leaves, do, retain_graph=True)


# the math backend holds the scores and their gradient: gigabytes, and far behind the others
backends = {name: b for name, b in SDPA_BACKENDS.items() if name != "math"}
baselines = {f"SDPA {name}": sdpa_backward(backend) for name, backend in
             available_sdpa_backends(q, k, v, causal=True, backends=backends).items()}
yours, *others = grading.measure_speed(flat_gradients, baselines, input_sets,
                                       backward_definition, torch.float16,
                                       flops=5 * B * H * S * S * D, allow=("cat",))
assert others, "no SDPA backend could run on this GPU: there is nothing to compare with"
fastest = min(others, key=lambda m: m.median_ms)
print(f"the fastest SDPA backward here: {fastest.name}")
grading.assert_ratio(fastest.median_ms / yours.median_ms, limit)

# %% [markdown] id="cell-48"
# ## 6. Every shape a model brings
#
# Your `flash_attention` takes what this lesson has used so far: `q`, `k` and `v` of one shape,
# a head size that is a power of two. Models bring three more shapes, and the capstone (lesson 06)
# needs all three:
#
# - **Grouped-query attention** (GQA; Ainslie et al., 2023): Llama 2 70B, Llama 3 and most models
#   since keep fewer key/value heads than query heads. Lesson 06's model has 16 query heads and 4
#   key/value heads: each key/value head serves a *group* of 4 query heads, and the KV cache is a
#   quarter of the size. Copying `k` and `v` out to 16 heads would spend the memory GQA saves; the
#   kernel should read head `h // group` instead.
# - **Decoding with a KV cache**: a model generating text runs one new query per sequence against
#   the keys and values of every token so far, kept from earlier steps. So `q` has `seq_q = 1`
#   and `k`, `v` have `seq_k` rows. Causal masking is aligned to the end: query $i$ sits at
#   position $i + \mathrm{seq_k} - \mathrm{seq_q}$, so the one new query sees every key. A chunk
#   of several new queries (chunked prefill) is the same with `seq_q > 1`.
# - **Head sizes that are not powers of two** (80, 96, and up to 256): `tl.arange` needs a power of
#   two, so the kernel pads the head to `BLOCK_D = block_d(head_dim)` (imported: the head size
#   rounded up to a power of two, and at least 16, the least `tl.dot` takes) and masks the columns
#   past `head_dim` in every load and store, in the kernel, not by padding tensors in Python.
#
# The idea that makes GQA and decoding fast is to let **one program serve a whole group**. Its block
# of `BLOCK_M` rows holds the (query, head) pairs of the group's query heads, query-major: row $r$
# is query $r$ // `GROUP` of head `kv_head * GROUP + r % GROUP`. Every key/value block it loads then
# serves `GROUP` query heads instead of one, and a decode step's `GROUP` queries share one block of
# 16 rows (4 of them at `GROUP` 4), where one query per program would use only 1 of its 16 rows.
# Measured on an H200 (docs/results/h200-2026-12-01-attention-shapes.md), one decode step at batch
# 32 with 32 query heads and 8 key/value heads over a cache of 4096 took 0.298 ms with one program
# per query head and **0.134 ms** with one per group: 1.09 times cuDNN's speed. The same kernel runs
# a chunk of 512 queries over 4096 keys at 477 TFLOP/s, 1.5 times cuDNN (cuDNN gets the end-aligned
# mask as an explicit bias there) and prefill at 0.67-0.93 of cuDNN (0.72-0.93 up to head size 128).
#
# It also returns the log-sum-exp of each query's scores, $\mathrm{lse}_i = m_i + \log_2 \ell_i$:
# the one number per query the backward pass of section 5 needs, so that your two kernels together
# make a differentiable attention (the demonstration after the exercises runs `loss.backward()`
# through them and compares the gradients with PyTorch's).
#
# ## Exercise 9 (4 + 2 points): attention for every shape
#
# Write `flash_forward(q, k, v, causal=False, config=None, level=1)`, returning `(o, lse)`:
#
# - `q` is (batch, heads, seq_q, head_dim); `k` and `v` are (batch, kv_heads, seq_k, head_dim),
#   `heads` a multiple of `kv_heads`; `head_dim` 1 to 256; `seq_q <= seq_k` when
#   causal. Any strides with the last dimension contiguous; fp16, fp32 (and bf16 on a GPU). Call
#   `check_flash_inputs(q, k, v, causal)` first (imported: it says what to change).
# - `o` has `q`'s shape and dtype; `lse` is (batch, heads, seq_q) float32, in log2 units.
# - `config` as in Exercise 4; when `None`, tune over `FLASH_SPACE` (lesson 4's space with blocks
#   of 16 and 32 rows for decoding) with `flash_problem(q, k, causal)` as the problem.
# - Exercise 9b counts the bytes of a decode step (batch 1, 8 query heads in groups of 4, 64 cached
#   keys, head_dim 32, fp16, `BLOCK_M = 16`): `q` once, each key/value head's `k` and `v` once,
#   within 1.25 times that, and store exactly `o` and `lse` (float32), once each; its blocks are
#   `BLOCK_M = BLOCK_N = 16`. One program per query head loads them 4 times.
# - The reference's `flash_forward` also takes `space` (default `FLASH_SPACE`), the search space to
#   tune over; its docstring names the reference's own, `FLASH_ORDER_SPACE`, which this notebook
#   does not import. The grader passes none.
#
# The cell below has the reference's structure: `flash_blocks` (lesson 04's `attention_blocks` with
# the head columns masked and the queries' positions passed in); `query_block` (a block's rows,
# query-major, and its `q`), `key_bounds` (the keys it sees and where the masked blocks start) and
# `store_rows` (its `o` and `lse`), which the course's flash decoding kernel shares;
# `flash_forward_kernel`, `launch_flash_forward` and `flash_forward`. The grader calls only
# `flash_forward`: the helpers are one way to split the kernel. Write them as their docstrings say,
# or fold them into `flash_forward_kernel`. Because rows are (query, head) pairs and `BLOCK_M` may
# be smaller than `BLOCK_N` (16 against 64), lesson 4's rule for where the masked blocks start no
# longer holds: they start at the key block holding the block's first query's position,
# `start_m * BLOCK_M // GROUP + seq_k - seq_q`, rounded down to a multiple of `BLOCK_N`
# (`key_bounds`). The reference also takes two
# of the ideas that the optional last section measures: the scale folded into the exponent, and, for
# heads whose padded block `BLOCK_D` is 128 columns or more (head_dim 65 to 256), `k` and `v`
# read through tensor descriptors (lesson 03's TMA copies)
# wherever their rows follow one another: `kv_descriptors(k, v, BLOCK_N, block_d(head_dim))`
# (imported, with `DESCRIPTORS_FROM_BLOCK_D`, the 128) makes them, or returns `None` where they
# cannot be used. Its kernel also takes a configuration's `LONGEST_FIRST`: a 1-D grid whose programs
# start with every head's last (longest, when causal) query block, then every head's second last,
# and so on. On a grid of a few waves that keeps the last heads' long blocks from running alone at
# the end: the capstone's calls (16 heads of one causal sequence of 2048, head size 128) took
# 46.5 µs against 63.7 in grid order on an H200, while B4 H32 S4096 D128 causal slowed from 1.31
# to 1.40 ms, so only the reference's own search space (`FLASH_ORDER_SPACE`) races it. None of
# these is needed for the points here.

# %% id="cell-49" nbgrader={"grade": false, "grade_id": "flash_forward_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
# include: tilegym_edu/reference/flash.py flash_blocks solution


# include: tilegym_edu/reference/flash.py query_block solution


# include: tilegym_edu/reference/flash.py key_bounds solution


# include: tilegym_edu/reference/flash.py store_rows solution


# include: tilegym_edu/reference/flash.py flash_forward_kernel solution


# include: tilegym_edu/reference/flash.py launch_flash_forward solution


# include: tilegym_edu/reference/flash.py flash_forward solution

# %% id="cell-50" nbgrader={"grade": false, "grade_id": "general_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
def general_scores(q, k, causal):
    """q k^T / sqrt(head_dim) with each key/value head repeated for its group of query heads;
    when causal, the keys after each query at -inf, the mask aligned to the end."""
    group = q.shape[1] // k.shape[1]
    s = q @ k.repeat_interleave(group, dim=1).transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        seq_q, seq_k = q.shape[-2], k.shape[-2]
        keep = torch.ones(seq_q, seq_k, dtype=torch.bool, device=q.device).tril(seq_k - seq_q)
        s = s.masked_fill(~keep, -math.inf)
    return s


def general_reference(q, k, v, causal=False, *rest):
    """The output o, by the definition, in the inputs' dtype (float64 when grading)."""
    group = q.shape[1] // k.shape[1]
    return torch.softmax(general_scores(q, k, causal), dim=-1) @ v.repeat_interleave(group, 1)


def lse_reference(q, k, v, causal=False, *rest):
    """lse = log2 of the sum of 2^(scores in log2 units) = logsumexp(scores) / ln 2."""
    return torch.logsumexp(general_scores(q, k, causal), dim=-1) / math.log(2)


def output_of(*args):
    """Your flash_forward's o."""
    return flash_forward(*args)[0]


def lse_of(*args):
    """Your flash_forward's lse, in the inputs' dtype (so that the check's tolerance is that
    dtype's)."""
    return flash_forward(*args)[1].to(args[0].dtype)


def make_general_inputs(case, generator):
    """(q, k, v, causal, config) for case = {"batch", "heads", "kv_heads", "seq_q", "seq_k",
    "head_dim", "dtype"} and optionally "causal", "blocks" = (BLOCK_M, BLOCK_N) and "layout":
    "cache" takes k and v as the first seq_k rows of a cache of seq_k + 7 (a KV cache's view),
    "bshd" makes q a .transpose(1, 2) view."""
    B, H, KV = case["batch"], case["heads"], case["kv_heads"]
    SQ, SK, D, dtype = case["seq_q"], case["seq_k"], case["head_dim"], case["dtype"]
    layout = case.get("layout")
    if layout == "bshd":
        q = check.random_tensor((B, SQ, H, D), dtype, generator).transpose(1, 2)
    else:
        q = check.random_tensor((B, H, SQ, D), dtype, generator)
    rows = SK + 7 if layout == "cache" else SK
    k, v = (check.random_tensor((B, KV, rows, D), dtype, generator)[:, :, :SK] for _ in "kv")
    blocks = case.get("blocks")
    config = (Config(BLOCK_M=blocks[0], BLOCK_N=blocks[1], num_warps=4, num_stages=2)
              if blocks else None)
    return q, k, v, case.get("causal", False), config


for result in check.check(output_of, general_reference, make_general_inputs, seeds=[0], cases=[
        {"batch": 1, "heads": 4, "kv_heads": 2, "seq_q": 1, "seq_k": 40, "head_dim": 80,
         "dtype": torch.float16, "causal": True}]):
    print(result.describe())

# %% id="cell-51" nbgrader={"grade": true, "grade_id": "test_general_attention_correct", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
# Exercise 9a: flash_forward is right on grouped-query and multi-query heads, decoding and chunks
# at the end of a cache, head sizes that are not powers of two, causal and not; and its lse too.
cases = [
    {"batch": 2, "heads": 4, "kv_heads": 2, "seq_q": 37, "seq_k": 37, "head_dim": 64,
     "dtype": torch.float16, "causal": True},
    {"batch": 1, "heads": 4, "kv_heads": 1, "seq_q": 1, "seq_k": 50, "head_dim": 32,
     "dtype": torch.float32, "causal": True, "layout": "cache"},
    {"batch": 2, "heads": 6, "kv_heads": 2, "seq_q": 5, "seq_k": 33, "head_dim": 80,
     "dtype": torch.float16, "causal": True, "layout": "cache"},
    {"batch": 1, "heads": 2, "kv_heads": 2, "seq_q": 20, "seq_k": 70, "head_dim": 96,
     "dtype": torch.float32, "layout": "bshd"},
    {"batch": 1, "heads": 3, "kv_heads": 3, "seq_q": 30, "seq_k": 30, "head_dim": 24,
     "dtype": torch.float16, "blocks": (16, 32)},
]
grading.assert_correct(output_of, general_reference, make_general_inputs, cases, seeds=(0, 1))
grading.assert_correct(lse_of, lse_reference, make_general_inputs, cases[:3], seeds=(0,),
                       allow=("_to_copy",))
q = torch.randn(1, 4, 8, 16, device=DEVICE)
for args, why in [((q, q[:, :3], q[:, :3]), "4 query heads over 3 key/value heads"),
                  ((q, q[:, :, :4], q[:, :, :4], True), "8 causal queries over 4 keys")]:
    try:
        flash_forward(*args)
    except ValueError:
        pass
    else:
        raise AssertionError(f"flash_forward accepted {why}: "
                             "call check_flash_inputs(q, k, v, causal)")
### BEGIN HIDDEN TESTS
hidden_cases = [
    {"batch": 1, "heads": 8, "kv_heads": 2, "seq_q": 3, "seq_k": 61, "head_dim": 48,
     "dtype": torch.float16, "causal": True, "blocks": (16, 16)},
    {"batch": 2, "heads": 2, "kv_heads": 1, "seq_q": 1, "seq_k": 1, "head_dim": 16,
     "dtype": torch.float32, "causal": True},
]
grading.assert_correct(output_of, general_reference, make_general_inputs, hidden_cases,
                       seeds=(11,))
### END HIDDEN TESTS

# %% id="cell-52" nbgrader={"grade": true, "grade_id": "test_decode_reads_kv_once", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 9b: a decode step loads each key/value head once for its whole group of query heads.
case = {"batch": 1, "heads": 8, "kv_heads": 2, "seq_q": 1, "seq_k": 64, "head_dim": 32,
        "dtype": torch.float16, "causal": True, "blocks": (16, 16)}
q, k, v, causal, config = make_general_inputs(case, torch.Generator().manual_seed(0))
element = q.element_size()
kv_once = 2 * k.numel() * element                            # every cached key and value once
grading.assert_traffic(
    output_of, (q, k, v, causal, config), general_reference, torch.float16,
    what="a decode step, 8 query heads over 2 key/value heads, 64 cached keys, head_dim 32",
    stores=q.numel() * element + q.numel() // q.shape[-1] * 4,   # o, and lse in float32
    loads_at_most=1.25 * (q.numel() * element + kv_once),
    store_hint=": store o and lse once each, nothing else",
    load_hint=": let one program serve the whole group of query heads that share a key/value "
              "head, so that each key/value block is loaded once for the group")

# %% [markdown] id="cell-53"
# **Training through your kernels.** With the log-sum-exp from `flash_forward` and the gradients
# from `flash_backward`, a `torch.autograd.Function` makes attention differentiable on your own
# kernels: `loss.backward()` runs your backward. The cell below checks the gradients of one step
# against PyTorch's attention (SDPA, which has its own backward) on grouped-query heads.

# %% id="cell-54" tags=["demo"]
class YourAttention(torch.autograd.Function):
    """o = softmax(q k^T / sqrt(d)) v on your flash_forward, its backward on your flash_backward."""

    @staticmethod
    def forward(ctx, q, k, v, causal):
        o, lse = flash_forward(q, k, v, causal)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal = causal
        return o

    @staticmethod
    def backward(ctx, do):
        return (*flash_backward(*ctx.saved_tensors, do, ctx.causal), None)


B, H, KV, S, D = device.size(gpu=(4, 16, 4, 1024, 128), cpu=(1, 4, 2, 40, 32))
dtype = torch.float16 if device.ON_GPU else torch.float32
ours = [torch.randn(B, n, S, D, device=DEVICE, dtype=dtype, requires_grad=True)
        for n in (H, KV, KV)]
theirs = [t.detach().clone().requires_grad_() for t in ours]
do = torch.randn(B, H, S, D, device=DEVICE, dtype=dtype)
YourAttention.apply(*ours, True).backward(do)
F.scaled_dot_product_attention(*theirs, is_causal=True, enable_gqa=True).backward(do)
for name, a, b in zip(("dq", "dk", "dv"), ours, theirs):
    print(f"{name}: relative difference from PyTorch's "
          f"{check.relative_error(a.grad, b.grad.to(a.grad.dtype)):.1e}")

# %% [markdown] id="cell-55"
# ## Optional: what each Hopper idea buys the forward, measured
#
# Your kernel and the reference trail cuDNN at head size 128, by a quarter. FlashAttention-3 closes
# that gap on Hopper with hardware features that Triton 3.6 exposes at least in part. Which of them
# help a Triton kernel? `benchmarks/attention_forward_ideas.py` answers by measurement. It takes one
# forward kernel, puts each idea behind a switch, and times each variant at its best of five
# configurations against cuDNN, interleaved in one process on an H200 (2026-12-02, float16,
# TFLOP/s; the power limit held the clock at 1725-1920 MHz, the same for every column of a row):
#
# | shape | reference | pointers | + fma | + TMA (host) | TMA (device) | + WS | cuDNN |
# | --- | --- | --- | --- | --- | --- | --- | --- |
# | B4 H32 S4096 D128 | 459 | 432 | 449 | **488** | 462 | 432 | 624 |
# | same, causal | 400 | 394 | 405 | **452** | 421 | 381 | 536 |
# | B4 H32 S4096 D64 | 417 | 403 | 417 | 406 | 405 | 312 | 439 |
# | B16 H16 S1024 D128 | 392 | 389 | 391 | **427** | 381 | 349 | 555 |
#
# The ideas, column by column:
#
# - **+ fma**: the scale folded into the exponent. Take the row maximum of the raw scores, then
#   compute `exp2(s * scale - m)`: the multiply and the subtraction become one fused multiply-add
#   per score. The softmax is the part of the loop the tensor cores do not do; this gained 0.5-4%.
# - **+ TMA (host)**: k and v read through tensor descriptors built on the host (lesson 03's TMA:
#   one instruction copies a whole block into shared memory, with no address arithmetic in
#   registers). At head size 128 this gained 9-12% more, the fastest Triton forward of the table:
#   0.78x cuDNN non-causal and 0.84x causal. At head size 64 it gained nothing.
# - **TMA (device)**: the same descriptors built inside the kernel (`tl.make_tensor_descriptor`)
#   instead: 0-11% slower than those built on the host (5-7% on the two S4096 D128 rows, 11% at
#   B16 S1024, nothing on the non-causal head-size-64 row).
# - **+ WS**: warp specialisation (`tl.range(..., warp_specialize=True)`: some warps only copy,
#   the others only compute, FlashAttention-3's first idea). In Triton 3.6 on Hopper it did not
#   compile for 4-warp configurations, and where it compiled it lost to every variant without it.
#
# The course's reference forward (the solution of Exercise 9) now takes the first two: the scale in
# the exponent everywhere, and k and v by host descriptors where the head's block is 128 columns or
# wider (head_dim 65 to 256; measured at 96, 128 and 256). Tuned at level 1 and timed against cuDNN
# in one process on the H200 (2026-12-02, `benchmarks/attention_shapes.py`), that moved it from 0.77
# to 0.78x cuDNN on the first row, 0.78 to 0.81 causal, 0.72 to 0.74 on the fourth, 0.76 to 0.80 at
# head size 96 and 0.67 to 0.71 at 256. At head size 64 the descriptors made it 3-4% slower (0.93 to
# 0.89), so there it keeps its pointers, and the folded scale alone took it from 0.93 to **0.97x**
# cuDNN (non-causal) and from 0.92 to 0.95x (B8 H16 S2048, causal).
#
# None of them reaches cuDNN in Triton. The gap is not in the algorithm you wrote: lesson 07 writes
# the same forward in cuTile, whose compiler makes these choices itself, and on the same H200 it
# reached 575 TFLOP/s on the first row, 0.92x cuDNN.
#
# ### The last step: the schedule written out, in Gluon
#
# What closes the gap is telling the hardware when to do what. **Gluon**
# (`triton.experimental.gluon`, in the Triton 3.6 these figures ran on) is Triton's lower-level
# language: the program itself says which shared-memory buffer each TMA copy lands in, when each
# tensor-core matmul (`wgmma`, Hopper's asynchronous matmul, issued by a **warpgroup**: four
# warps, 128 threads, together) is issued, and when it is waited for.
# `tilegym_edu/reference/flash_hopper.py` writes the forward you know in three steps. Each is
# measured by `benchmarks/attention_hopper.py` on the first row (B4 H32 S4096 D128, float16, H200,
# 2026-12-03, run b; the power limit held the clock at 1740 MHz; cuDNN 626 TFLOP/s in the same run):
#
# | step | what changes | TFLOP/s | vs cuDNN |
# | --- | --- | --- | --- |
# | flash.py | Exercise 9's reference, tuned | 464 | 0.74x |
# | 1. pipelined by hand | block j's scores beside block j-1's P·V | 513 | 0.82x |
# | 2. warp-specialised | a producer warp, two consumer warpgroups | 614 | 0.98x |
# | 3. persistent | one program per SM, tile after tile | 640 | 1.02x |
#
# - **Pipelined by hand**: the matmul for block j's scores and the one for block j-1's P·V are
#   issued together, asynchronously; block j's softmax runs while P·V is still on the tensor cores.
#   K and v arrive by TMA in a ring of 3 shared-memory buffers, each with an mbarrier that says
#   when its bytes have landed. One warpgroup (4 warps) computes 64 query rows.
# - **Warp-specialised**: one warp only issues copies; two warpgroups of 64 rows only compute, and
#   share each k/v block, so it crosses from L2 once for 128 queries instead of 64.
# - **Persistent**: one program per SM takes tile after tile, so the next tile's loads overlap the
#   stores of this one.
#
# Step 1 is FlashAttention-3's overlap inside one warpgroup; step 2 its split of producers and
# consumers. Its third idea, making the two warpgroups take turns at the tensor cores (ping-pong,
# with mbarriers), gained nothing here, not even at head size 64 causal, where the softmax weighs
# most (run a: 617 against 631 TFLOP/s on this row, 309 against 311 on that one), and was dropped.
# The persistent grid is not always better: on the long causal row (B1 H16 S16384) it ran at 0.74x
# cuDNN, where step 2, whose programs the GPU's own scheduler hands out, ran at 1.14x. So the
# tuner races the steps' configurations per shape, and `attention_forward` uses the winner wherever
# the kernels take the inputs (Hopper, head size 64 or 128, lengths multiples of 128). Tuned, and
# timed against cuDNN in one process (`benchmarks/attention_and_capstone.py`, run 49 of 2026-12-05,
# milliseconds; the path is what `attention_forward`'s race picked; run 36b of 2026-12-04, before
# step 4 below, beside it):
#
# | shape (float16) | reference | cuDNN | ratio | run 36b | path |
# | --- | --- | --- | --- | --- | --- |
# | B4 H32 S4096 D128 | 1.692 | 1.678 | 0.992x | 1.006x | persistent |
# | same, causal | 0.9436 | 0.947 | 1.004x | 1.000x | warp-specialised |
# | B4 H32 S4096 D64 | 1.101 | 1.142 | 1.037x | 1.052x | persistent |
# | B1 H16 S16384 D128 causal | 1.638 | 1.795 | 1.096x | 1.108x | warp-specialised |
# | B16 H16 S1024 D128 | 0.2375 | 0.2327 | 0.980x | 0.996x | persistent |
# | B8 H16 S2048 D64 causal | 0.1827 | 0.1866 | 1.021x | 0.954x (flash.py) | persistent |
#
# At head size 64 a score costs half the matmul work it costs at 128 but the same exponential, so
# the softmax, which the tensor cores cannot take, weighs twice as much. A third consumer
# warpgroup (192 query rows a program, each warpgroup's softmax beside two others' matmuls) took
# the third row from 1.00x to 1.06x cuDNN (508 against 480 TFLOP/s, run g). The last row stayed
# behind through every Gluon schedule (0.90-0.92x; flash.py ran 0.94x), until step 4.
#
# **4. A schedule made on the host.** On a causal row the tiles differ: at S2048 a tile of 128
# queries near the start reads 1 key block, one near the end 16. The persistent grid dealt program p
# the tiles p, p+132, p+264 and so on, and the program with the most work had 1.19 times the mean
# (1.72 times with 192-row tiles: counted, run 44). Now the host deals the tiles once per problem,
# longest first, each to the program with the least work so far (LPT, "longest processing time
# first", the classic rule for jobs on identical machines, in
# `tilegym_edu/reference/tile_schedule.py`), and each program reads its list from a table: the
# busiest then has 1.004 times the mean. With q double-buffered as well (the producer loads the next
# tile's q while this one computes), the last row went from 0.954x to 1.021x cuDNN, and
# grouped-query attention (B4 H32/KV8 S4096 D128 causal) from 1.003x to 1.086x. The non-causal rows
# at head size 128 lost 1.5-2.5% meanwhile (0.99x and 0.98x cuDNN): their tiles are all alike, so
# their schedule did not change. Measured apart on an H100 (run 54), the second q buffer was the
# cost: without a mask one buffer ran 1.7% faster at B4 H32 S4096 D128 and 1.0% at B16 H16
# S1024, while on the causal row two buffers ran 5-11% faster. Only causal grids get two buffers
# now, and on the H100 (run 55) the two rows ran at 1.007x and 0.988x cuDNN.
#
# **5. o leaves by TMA.** Each consumer warpgroup wrote its 64 rows of o from registers with
# plain stores, and could start its next tile only once they were issued. Now it writes them to
# a shared-memory tile of its own and hands the copy to the TMA engine, which stores them while
# the warpgroup computes its next tile; it waits for the copy only before it writes that tile
# again. The tile costs 16 KiB of shared memory per warpgroup at head size 128, so it is used
# where it fits beside q's buffers and the ring (not beside two q buffers at head size 128). On
# an H100 (2026-12-06, run 66, tuned, one process) the two non-causal rows at head size 128 went
# to 1.013x and 1.029x cuDNN (1.00-1.02x before, run 63), the other rows at 1.02-1.09x, and head
# size 128 causal, which keeps one tile a program, at 0.999x.
#
# **6. The heads a group at a time.** Why did the persistent grid lose the causal rows at head size
# 128 to one tile a program? Not for lack of work to overlap: held at its power limit (a second of
# back-to-back runs, the clock down to 1410-1530 MHz) it ran 4.5-7.6% faster than one tile a
# program; only at full clock, in the tuner's short race, did it run 3-7% slower (H100, run 68).
# What full clock exposes is memory. Step 4 dealt every tile of every head at once, and each program
# took its tiles in head order, so at any moment the 132 programs were on 36-40 different heads:
# their keys and values, 2 MiB a head at S4096 D128, made 72-80 MiB, and the H100's L2 cache holds
# 50. A block one program had loaded was gone before the next program on that head asked for it,
# and came from memory again. One tile a program never had the problem: the GPU hands programs out
# in order, so the ones running together share a few heads. Now the host deals the heads a group at
# a time: as many heads as fit in half the L2 (12 here, read from the GPU), each group's tiles
# longest first to the least-loaded program, then the next group. The programs then work on 12
# heads at once, and the busiest has 1.0% more than the mean work. The persistent grid also gets a
# variant with one q buffer at head size 128 causal, so o's tiles fit and leave by TMA (step 5).
# Tuned, in one process on the H100 (2026-12-06, run 71; each side's best median of three rounds):
#
# | shape (float16 unless said) | before (run 66) | with head groups (run 71) | path |
# | --- | --- | --- | --- |
# | B4 H32 S4096 D128 causal | 0.999x | **1.091x** | persistent, one q buffer |
# | same, bfloat16 | 0.996x | **1.088x** | persistent, one q buffer |
# | B1 H16 S16384 D128 causal | 1.095x | 1.110x | persistent |
# | B4 H32/KV8 S4096 D128 causal | 1.089x | 1.107x | persistent, one q buffer |
# | B4 H32 S4096 D128, B16 H16 S1024 D128 | 1.013x, 1.029x | 1.015x, 1.028x | persistent |
# | B4 H32 S4096 D64, B8 H16 S2048 D64 causal | 1.038x, 1.022x | 1.037x, 1.025x | persistent |
#
# The groups matter only where one head's keys and values are large: with grouped-query heads
# (four query heads share one key/value head) and at head size 64 all the heads' keys fit in L2
# anyway, and grouping them changed nothing (run 70). Every row the Gluon kernels take is now
# ahead of cuDNN on this H100, by 1.5% to 11%; head sizes 96 and 256 still run on flash.py, at
# 0.77x and 0.72x.
#
# The exercises stay in Triton: Gluon kernels run only on the GPU they were written for, never in
# the interpreter, and a learner without a Hopper GPU could not run them.
#
# ### The backward, in Gluon too
#
# The backward you wrote in Exercise 8 runs two kernels, dk/dv per key block and dq per query
# block: seven matmuls for each pair of blocks, where one pass over the key blocks would do five.
# That one pass would have to add each key block's share of dq into global memory, and those
# additions lost in Triton (0.58-0.78x the two kernels' speed). On the H200 the two Triton kernels
# ran at 0.80x cuDNN's backward at B4 H32 S4096 D128.
# `tilegym_edu/reference/flash_backward_hopper.py` writes the same two kernels in Gluon with the
# forward's tricks:
#
# - the streamed blocks arrive through a ring of TMA buffers;
# - S and dP are issued together, so the exponential runs while dP is on the tensor cores;
# - in dk/dv the keys are the matmul's rows (S^T = K Q^T), so P^T and dS^T feed the next matmul
#   straight from registers, with no transpose.
#
# Alone, the Gluon dk/dv ran 1.12x the Triton kernel and dq 1.07-1.33x. The course's
# `attention_backward` races them against the Triton kernels for each shape, and (below) against
# a third way, the backward in one pass. Against cuDNN's backward (2026-12-04, float16 unless
# said; Triton kernels run c and run 31, Gluon run 34, with the one pass run 36):
#
# | shape | Triton kernels | with the Gluon kernels | with the one pass raced too |
# | --- | --- | --- | --- |
# | B4 H32 S4096 D128 | 0.80x | 0.86x | 0.96x (one pass) |
# | same, causal | 0.81x | 0.91x | 0.95x (one pass) |
# | same, causal, bfloat16 | 0.80x | 0.91x | 0.93x (one pass) |
# | B8 H16 S2048 D64 causal | 0.93x | 1.15x | 1.14x (two passes) |
# | B4, 32 query heads over 8 k/v heads, S4096 D128 causal | 0.81x | 0.91x | 0.91x (two passes) |
#
# Grouped-query heads take the Gluon kernels too: each dk/dv program walks the query blocks of
# every query head that shares its key/value head, summing their shares of dk and dv in registers.
#
# The first row was still behind: seven matmuls against five. Closing that gap means fusing dq
# into the dk/dv kernel while keeping its additions off the matmuls' path. FlashAttention-3 does
# that with TMA reductions: the copy engine adds a tile from shared memory into global memory, so
# the warps that issue the matmuls never wait on the additions. Triton 3.6's Gluon has no Python
# function for them, though its compiler has the operation underneath:
# `tilegym_edu/reference/flash_backward_onepass.py` names it in four lines and builds
# FlashAttention-3's schedule on it. TMA reductions alone are not enough (section 5's Triton one
# pass tried them too): with one warpgroup this kernel took 9.42 ms on the first row, and with a
# producer warp and two consumers splitting dq's columns, 5.08. Both consumer warpgroups put
# their dS^T in shared memory, then each multiplies all 128 keys' dS by half of K's columns and
# adds that half of the query block's dq into a float32 buffer, one addition per element per 128
# keys; a small kernel turns the buffer into dq at the end. In its first measurement (run 35) the
# one pass ran 0.92x cuDNN on the first row where the two passes ran 0.86x, and tied them causal.
# It is not faster everywhere: where the kernels are short, at head size 64, the two passes ran
# 1.18x cuDNN causal against the one pass's 0.95x, and 1.05x against 0.87x non-causal (run 35).
# So `attention_backward` races the one pass against the two passes for each shape: the last
# column of the table above says which won.

# %% [markdown] id="cell-42"
# ## What comes next
#
# Attention done naively is memory-bound by its own intermediate: the $S \times S$ scores.
# FlashAttention removes the intermediate instead of moving it faster, with two ideas that reach far
# beyond attention: **fuse** producer and consumer into one kernel so the data between them never
# leaves the chip, and **make the reduction online** (the running maximum and rescaled sums) so that
# a row can be consumed in blocks. On an H200 the reference kernel written this way ran at 510
# TFLOP/s at batch 4, 32 heads, $S = 4096$, head_dim 128, 1.4 times PyTorch's FlashAttention-2
# backend (358) and 0.78 of cuDNN's attention (657) (docs/results/h200.md). The rest of the gap is
# what FlashAttention-3 (Shah et al., 2024) goes after on Hopper: producer and consumer warps that
# specialise, asynchronous tensor-core instructions, and the softmax of one tile overlapped with the
# matmuls of the next; the optional section above closes it that way, in Gluon.
#
# Lesson 05 applies the first idea to **convolution**. The classic way to run a convolution on
# matrix hardware, *im2col*, copies every input patch into the rows of a large matrix and multiplies
# it by the filters: a GEMM, but with an intermediate many times the size of the input, written to
# memory and read back. An **implicit GEMM** never builds that matrix: it runs lesson 02's tiled
# matmul and computes, for each tile it loads, which input pixels (channels last, with stride and
# padding) the rows of the virtual im2col matrix would have held.
