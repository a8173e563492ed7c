# tilegym-notebook: {"metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}, "language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}

# %% [markdown] id="cell-00"
# # Lesson 06 (capstone): a Llama-style decoder running on your kernels
#
# Kernels matter because models run on them. Lessons 00 to 05 built the pieces one at a time: an
# elementwise kernel near copy bandwidth, a pipelined matmul near cuBLAS, FlashAttention. This
# lesson puts them where they are used: a decoder-only language model in the architecture of Meta's
# Llama (the architecture most open models share, with small variations), written in plain PyTorch,
# then run again with every matmul, every attention and every normalisation replaced by **your**
# kernels.
#
# Three operations of the model have no kernel yet, and they are this lesson's exercises. Each is
# memory-bound (a few FLOPs per byte), so the goal is the one of lesson 00: read each input once,
# write each output once, and get near the GPU's copy bandwidth.
#
# 1. **RMSNorm**, fused: one pass over each row.
# 2. **Rotary position embedding** (RoPE), applied **in place** to q and k, which are strided views
#    into one projection's output: no copy.
# 3. **SwiGLU**, fused with its gate: `silu(gate) * up` from one projection's output.
#
# Then the swap, graded by the model's logits, and the measurement that matters: how many tokens a
# second the model processes on your GPU, on PyTorch eager, on `torch.compile` and on your kernels.
# Last, the model **generates**: one token at a time over a KV cache, on lesson 04's attention for
# every shape.
#
# | exercise | points | graded |
# | --- | --- | --- |
# | 1a. `rmsnorm`: odd widths, fp16 and fp32, rows of zeros and tiny values | 3 | everywhere |
# | 2a. `rope_`: in place on strided views of q and k, odd head counts, fp16/32 | 3 | everywhere |
# | 3a. `swiglu`: odd widths, fp16 and fp32 | 2 | everywhere |
# | 1b, 2b, 3b. each near copy bandwidth | 1 + 1 + 1 | GPU only |
# | 4a. your lesson 03 matmul and 04 attention on the model's shapes, GQA views | 2 | everywhere |
# | 4b. the model on your kernels: logits match PyTorch's | 4 | everywhere |
# | 4c. the model on your kernels at least as fast as PyTorch eager | 3 | on a GPU |
# | 5. decoding over a KV cache on your kernels: logits match PyTorch's | 2 | everywhere |
#
# **Grading.** *GPU only* cells are graded on a GPU; without one the grader marks them *needs GPU*.
# Cells marked *Exercise* are graded by `tilegym-edu grade 06_capstone`
# (or `make grade LESSON=06_capstone`), which grades a copy of this notebook and never changes it.

# %% [markdown] id="cell-01"
# ## Setup
#
# `import tilegym_edu` comes first, as always. The model lives in the course's module
# `tilegym_edu.reference.llama`: the PyTorch model (`Llama`), its sizes (`GPU_CONFIG`,
# `CPU_CONFIG`), the PyTorch definitions of the three operations your kernels must match, and the
# `Ops` object through which the model calls every operation that does arithmetic. From lessons 03
# and 04 this lesson imports only configuration helpers (search spaces, input checks), never their
# kernels: you bring your own in section 5.

# %% id="cell-02" nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import tilegym_edu  # noqa: F401  (first: decides GPU or interpreter mode before triton is imported)

import inspect
import math

import torch
import triton
import triton.language as tl

from tilegym_edu import bench, check, device, grading, tune
from tilegym_edu.reference import llama                                  # the model, in PyTorch
from tilegym_edu.reference.llama import (CPU_CONFIG, GPU_CONFIG, TORCH_OPS, KVCache, Llama,
                                         LlamaConfig, Ops, random_tokens, repeatable_decode_step,
                                         rmsnorm_torch, rope_tables, rope_torch, swiglu_torch)
from tilegym_edu.reference.attention import (ATTENTION_SPACE, LOG2E, attention_problem,
                                             check_attention_inputs)      # lesson 04's helpers
# ... and lesson 04's attention for every shape (its section 6)
from tilegym_edu.reference.flash import (DESCRIPTORS_FROM_BLOCK_D, FLASH_SPACE, block_d,
                                         check_flash_inputs, flash_problem, kv_descriptors)
from tilegym_edu.reference.pipelined import ELEMENT_BYTES                  # lesson 03's helper
from tilegym_edu.tiles import grouped_tile     # lesson 02's grouped ordering, for your kernels
from tilegym_edu.tune import SearchSpace, autotune

print(device.banner())
DEVICE = device.DEVICE
CONFIG = device.size(gpu=GPU_CONFIG, cpu=CPU_CONFIG)   # the model this lesson runs and times
BATCH, SEQ = device.size(gpu=(1, 2048), cpu=(1, 12))   # a prefill: one prompt of SEQ tokens
DTYPE = device.size(gpu=torch.float16, cpu=torch.float32)
print(CONFIG)

# %% [markdown] id="cell-03"
# ## 1. The model
#
# A decoder turns a sequence of token ids into, at every position, scores (**logits**) over the
# vocabulary for the next token. Serving a prompt starts with a **prefill**: the whole prompt goes
# through the model at once, each position attending to itself and the positions before it (causal
# attention); generating then adds one token at a time. Prefill is where a model does most of its
# matrix work at once, and it is what this lesson times.
#
# The Llama block, `n_layers` times, on activations `x` of shape (tokens, `dim`):
#
# $$h = \mathrm{RMSNorm}(x),\quad x \mathrel{+}= \mathrm{Attention}(h) W_o, \qquad
# h = \mathrm{RMSNorm}(x),\quad x \mathrel{+}= \mathrm{SwiGLU}(h W_{13})\, W_2$$
#
# - **RMSNorm** scales each row to unit root-mean-square, then by a learned weight $g$: $y = x /
#   \sqrt{\mathrm{mean}(x^2) + \epsilon} \cdot g$. Cheaper than LayerNorm (no mean to subtract) and,
#   in its authors' experiments (Zhang and Sennrich, 2019), about as good. $\epsilon$ (`1e-5` here)
#   keeps a row of zeros from dividing by zero.
# - **Attention** with $q, k, v$ from one projection $h W_{qkv}$, split into heads of `head_dim`.
#   Before the scores, q and k are **rotated** by their position (RoPE, section 3), so that $q \cdot
#   k$ depends on how far apart two tokens are. **Grouped-query attention** (GQA): only `n_kv_heads`
#   key/value heads, each shared by `n_heads / n_kv_heads` query heads, which shrinks the key/value
#   cache that generation keeps in memory.
# - **SwiGLU**: $W_{13}$ produces two halves, a gate and an "up" projection; the result is
#   $\mathrm{silu}(\mathrm{gate}) \odot \mathrm{up}$, projected back by $W_2$.
# - Residual connections (`x +=`) around both; a final RMSNorm and the output projection to the
#   vocabulary.
#
# The weights are random (drawn from a seeded generator), so the model says nothing sensible, but it
# does exactly the work a trained model of the same shape does: speed does not depend on the values.
# The forward pass, as the module writes it:

# %% id="cell-04"
print(inspect.getsource(Llama.attention))
print(inspect.getsource(Llama.forward))
print(inspect.getsource(Ops))

# %% [markdown] id="cell-05"
# Every operation that does arithmetic goes through `ops`: `ops.matmul`, `ops.attention`,
# `ops.rmsnorm`, `ops.rope_`, `ops.swiglu`. With `TORCH_OPS` (the default) they are PyTorch's; the
# swap in section 5 passes your kernels instead, and the model code does not change. Only the
# embedding lookup and the two residual additions stay in PyTorch. Three more fields exist:
# `cached_attention` (section 7), and `add_rmsnorm` and `matmul_swiglu`, fusions the course's
# reference kernels supply; where they are `None`, as in yours, the model adds and then calls
# `ops.rmsnorm`, and calls `ops.matmul` and then `ops.swiglu` (`add_and_norm`, `up_and_swiglu`).
#
# Two details of `attention` matter for kernels. First, `q`, `k` and `v` are **views** into the one
# `qkv` tensor of shape (batch, seq, n_heads + 2 n_kv_heads, head_dim): nothing is copied out, so a
# head's rows are far apart in memory, and RoPE must rotate them where they are. Second, GQA: each
# batch element is one attention call in which the key/value heads play the "batch" and the query
# heads of a group the "heads"; `k` and `v` are `.expand`ed over the group, a view whose stride
# along the group is **0**, so every query head of a group reads the same key/value memory and
# nothing is repeated. Your lesson 04 kernel takes strides as arguments, so it handles this as it
# is.
#
# The model at this lesson's size, and a first forward pass in PyTorch:

# %% id="cell-06" tags=["demo"]
model = Llama(CONFIG, DTYPE)
print(f"{model.parameters() / 1e6:.1f} M parameters, "
      f"{model.parameters() * model.embedding.element_size() / 2**20:.0f} MiB "
      f"in {str(DTYPE)[6:]}; head_dim {CONFIG.head_dim}, "
      f"{CONFIG.group} query heads per key/value head")
tokens = random_tokens(CONFIG, BATCH, SEQ, torch.Generator().manual_seed(0))
logits = model(tokens)
print(f"tokens {tuple(tokens.shape)} -> logits {tuple(logits.shape)}; "
      f"next-token guesses at the first positions: {logits[0, :6].argmax(-1).tolist()}")

# %% [markdown] id="cell-07"
# ## 2. Exercise 1: RMSNorm in one pass
#
# PyTorch runs RMSNorm as several kernels: square, mean, add, reciprocal square root, multiply,
# multiply, each reading its input from memory and writing its result back (with the conversions to
# float32 and back, more). A fused kernel reads each row once, keeps it in registers, computes the
# mean square there, and writes the normalised row once: the fewest bytes possible, $2 \cdot$ rows
# $\cdot$ dim elements plus the weight.
#
# Write `rmsnorm_kernel` and `rmsnorm(x, weight, eps)`:
#
# - `x` is (rows, dim), float16 or float32, rows of stride `x.stride(0)` (last dimension
#   contiguous); `weight` is (dim,) in x's dtype. Return a new (rows, dim) tensor in x's dtype.
# - One program per row; the whole row in one block (`BLOCK = triton.next_power_of_2(dim)`), masked.
#   Compute in float32: $y = x \cdot \mathrm{rsqrt}(\mathrm{mean}(x^2) + \epsilon) \cdot g$, with
#   the mean over the `dim` real elements (not the padded block).
#
# The grader checks odd widths, fp16 and fp32, and rows where $\epsilon$ matters: rows of zeros
# (which must come out zero, not NaN) and rows of values around $10^{-4}$ to $10^{-3}$, whose mean
# square ($10^{-8}$ to $10^{-6}$) is far below $\epsilon$, so that $\epsilon$ decides the result: a
# kernel that drops $\epsilon$, or adds it in the wrong place, fails. During grading PyTorch may
# only allocate, view and copy.

# %% id="cell-08" nbgrader={"grade": false, "grade_id": "rmsnorm_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
# include: tilegym_edu/reference/llama_kernels.py rmsnorm_kernel solution


# include: tilegym_edu/reference/llama_kernels.py rmsnorm solution

# %% id="cell-09" nbgrader={"grade": false, "grade_id": "rmsnorm_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
def make_rmsnorm_inputs(case, generator):
    """(x, weight, eps) for case = {"rows", "dim", "dtype"} and optionally "scale" (x's size) and
    "zero_rows" (how many rows are all zeros): x standard normal times scale, weight around 1."""
    x = check.random_tensor((case["rows"], case["dim"]), case["dtype"], generator,
                            case.get("scale", 1.0))
    x[:case.get("zero_rows", 0)] = 0
    noise = check.random_tensor((case["dim"],), torch.float32, generator)
    weight = (1 + 0.1 * noise).to(case["dtype"])
    return x, weight, 1e-5


def rmsnorm_reference(x, weight, eps):
    return rmsnorm_torch(x, weight, eps)


for result in check.check(rmsnorm, rmsnorm_reference, make_rmsnorm_inputs, seeds=[0], cases=[
        {"rows": 5, "dim": 100, "dtype": torch.float32},
        {"rows": 4, "dim": 33, "dtype": torch.float16, "zero_rows": 1, "scale": 1e-4}]):
    print(result.describe())

# %% id="cell-10" nbgrader={"grade": true, "grade_id": "test_rmsnorm_correct", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Exercise 1a: rmsnorm is correct on odd widths, fp16 and fp32, rows of zeros and of tiny values.
cases = [
    {"rows": 1, "dim": 1, "dtype": torch.float32},
    {"rows": 7, "dim": 100, "dtype": torch.float32},
    {"rows": 5, "dim": 333, "dtype": torch.float16},
    {"rows": 6, "dim": 64, "dtype": torch.float32, "zero_rows": 2},
    {"rows": 4, "dim": 70, "dtype": torch.float32, "scale": 1e-4},
    {"rows": 3, "dim": 129, "dtype": torch.float16, "scale": 1e-3, "zero_rows": 1},
]
grading.assert_correct(rmsnorm, rmsnorm_reference, make_rmsnorm_inputs, cases, seeds=(0, 1))
### BEGIN HIDDEN TESTS
grading.assert_correct(rmsnorm, rmsnorm_reference, make_rmsnorm_inputs,
                       [{"rows": 9, "dim": 257, "dtype": torch.float16, "scale": 3e-4,
                         "zero_rows": 3}], seeds=(11,))
### END HIDDEN TESTS

# %% [markdown] id="cell-11"
# **Exercise 1b (1 point, needs a GPU).** Your `rmsnorm` on 16384 rows of 4096 in fp16, timed
# interleaved with a device-to-device copy of the same number of bytes (x read, y written): its GB/s
# must reach the threshold printed, as a fraction of the copy's.
#
# What to expect, measured on an H200 (`benchmarks/capstone.py`, 2026-11-30): the reference solution
# moved 3,924 GB/s, 0.99 of the copy's (0.96 to 0.97 in the graded cell); PyTorch's
# `rmsnorm_torch`, which runs as separate kernels that each read and write the whole tensor, 305
# GB/s (0.08); `torch.compile` of the same function, which fuses it into one Triton kernel of its
# own, 0.90.

# %% id="cell-12" nbgrader={"grade": false, "grade_id": "bandwidth_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
BANDWIDTH_ROWS, BANDWIDTH_DIM = 16384, 4096     # the bandwidth checks' problem (GPU only)


def bandwidth_inputs(make_inputs, case, seeds=(0, 1)):
    """Input sets for a bandwidth check: make_inputs(case, generator) for each seed."""
    return [make_inputs(case, torch.Generator().manual_seed(seed)) for seed in seeds]

# %% id="cell-13" nbgrader={"grade": true, "grade_id": "test_rmsnorm_bandwidth", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Exercise 1b: rmsnorm runs near copy bandwidth (GPU only).
grading.require_gpu("the speed of rmsnorm")
case = {"rows": BANDWIDTH_ROWS, "dim": BANDWIDTH_DIM, "dtype": torch.float16}
grading.assert_bandwidth_fraction(rmsnorm, bandwidth_inputs(make_rmsnorm_inputs, case),
                                  rmsnorm_reference, torch.float16,
                                  bytes=2 * BANDWIDTH_ROWS * BANDWIDTH_DIM * 2,
                                  limit=grading.threshold("06_capstone", "rmsnorm_bandwidth"))

# %% [markdown] id="cell-14"
# ## 3. Exercise 2: rotary position embedding, in place
#
# Attention compares every query with every key through a dot product, which on its own knows
# nothing about where the tokens are. RoPE (Su et al., 2021) encodes the position $p$ by
# **rotating** q and k: the head's `head_dim` values are taken as `head_dim / 2` pairs, and pair $i$
# is turned by the angle $p\,\theta_i$ with $\theta_i = 10000^{-2i/\mathrm{head\_dim}}$. The dot
# product of q rotated by $p\theta$ and k rotated by $p'\theta$ equals that of q with k rotated by
# $(p' - p)\theta$: the score depends only on the distance between the tokens, not where they sit.
#
# Llama (as written in Hugging Face transformers, and here) pairs element $i$ with element $i +
# \mathrm{head\_dim}/2$, the "rotate half" layout. With $x_1$ the first half of a head and $x_2$ the
# second, and $c = \cos p\theta_i$, $s = \sin p\theta_i$ from the tables `rope_tables` makes:
#
# $$x_1' = x_1 c - x_2 s, \qquad x_2' = x_2 c + x_1 s .$$
#
# (The RoPE paper and Meta's original Llama code pair neighbours, $2i$ with $2i + 1$; Hugging Face's
# conversion reorders the rows of $W_q$ and $W_k$ so that "rotate half" gives the same scores.
# Mixing up the two layouts gives wrong results that look plausible.)
#
# Write `rope_kernel` and `rope_(x, cos, sin)`, which rotates `x` **in place** and returns `x`:
#
# - `x` is (batch, seq, heads, head_dim), fp16 or fp32, with **any strides**, except that the last
#   dimension is contiguous (stride 1): in the model it is a view into `qkv`. `head_dim` is a power
#   of two from 16 to 128, so `head_dim / 2` is one too (`tl.arange` needs one). `cos` and `sin`
#   are float32 (at least seq, head_dim / 2), rows contiguous, row `p` for position `p`.
# - Write the rotated values back into `x` itself: no new tensor, no copy. The grader checks that
#   the result is `x`, that `x` holds the rotated values, and that the rest of the tensor `x` is a
#   view of is untouched.
# - One program per token (`(seq, batch)` programs), all its heads in one 2-D block
#   (`BLOCK_H = triton.next_power_of_2(heads)` rows, `head_dim / 2` columns): load the two halves,
#   rotate in float32, store both.
#
# **Exercise 2b (1 point, needs a GPU)**, in the cell after the correctness check: `rope_` on q of a
# prefill (8192 tokens x 32 heads x 128, fp16, a view into a wider tensor), against a copy of the
# bytes it must move (x read once, written once). Measured on an H200: the reference solution 0.99
# of the copy (0.92 to 0.95 in the graded cell); PyTorch's out-of-place rotation copied back into x,
# 0.06; `torch.compile` of it, 0.37.

# %% id="cell-15" nbgrader={"grade": false, "grade_id": "rope_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
# include: tilegym_edu/reference/llama_kernels.py rope_kernel solution


# include: tilegym_edu/reference/llama_kernels.py rope_ solution

# %% id="cell-16" nbgrader={"grade": false, "grade_id": "rope_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
def make_rope_inputs(case, generator):
    """(x, cos, sin) for case = {"batch", "seq", "heads", "head_dim", "dtype"}: x standard normal;
    with case["view"] true, x is the middle `heads` heads of a tensor of heads + 3 (as q or k is a
    view of the model's qkv); the tables for seq + 3 positions, as the model's are longer
    than seq."""
    B, S, H, D, dtype = case["batch"], case["seq"], case["heads"], case["head_dim"], case["dtype"]
    if case.get("view"):
        x = check.random_tensor((B, S, H + 3, D), dtype, generator)[:, :, 1:H + 1]
    else:
        x = check.random_tensor((B, S, H, D), dtype, generator)
    cos, sin = rope_tables(S + 3, D, device_=DEVICE)
    return x, cos, sin


def rope_reference(x, cos, sin):
    return rope_torch(x, cos[:x.shape[1]], sin[:x.shape[1]])


def rope_on_a_copy(x, cos, sin):
    """rope_ on a copy of x: the checker wants its inputs back unchanged."""
    return rope_(x.clone(), cos, sin)


def check_in_place(case, seed=0):
    """rope_ rotates x where it lies: returns x itself, writes the rotated values into it, and
    leaves the rest of the tensor x is a view of (case["view"]) as it was."""
    x, cos, sin = make_rope_inputs(case, torch.Generator().manual_seed(seed))
    parent = x._base                                   # the tensor x is a view of, or None
    before = None if parent is None else parent.clone()
    expected = rope_reference(x.double().cpu(), cos.double().cpu(), sin.double().cpu())
    out = grading.guarded_call(rope_, (x, cos, sin))
    passed, _, message = check.compare_output(x, expected, case["dtype"])
    assert passed, f"case {case}: x after rope_(x, cos, sin) is not rotated in place: {message}"
    assert out is x or (isinstance(out, torch.Tensor) and out.data_ptr() == x.data_ptr()
                        and out.stride() == x.stride()), (
        f"case {case}: rope_ rotated x but returned something else: return x")
    if parent is not None:
        heads = case["heads"]
        for outside in (slice(0, 1), slice(heads + 1, None)):
            assert torch.equal(parent[:, :, outside], before[:, :, outside]), (
                f"case {case}: rope_ wrote outside x, into heads of the tensor x is a view of")


for result in check.check(rope_on_a_copy, rope_reference, make_rope_inputs, seeds=[0], cases=[
        {"batch": 1, "seq": 5, "heads": 3, "head_dim": 16, "dtype": torch.float32, "view": True}]):
    print(result.describe())

# %% id="cell-17" nbgrader={"grade": true, "grade_id": "test_rope_correct", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Exercise 2a: rope_ is correct (odd head counts and lengths, strided views, fp16 and fp32) and in
# place.
cases = [
    {"batch": 1, "seq": 1, "heads": 1, "head_dim": 16, "dtype": torch.float32},
    {"batch": 2, "seq": 7, "heads": 3, "head_dim": 16, "dtype": torch.float32, "view": True},
    {"batch": 1, "seq": 9, "heads": 5, "head_dim": 32, "dtype": torch.float16, "view": True},
    {"batch": 2, "seq": 4, "heads": 2, "head_dim": 64, "dtype": torch.float16},
]
grading.assert_correct(rope_on_a_copy, rope_reference, make_rope_inputs, cases, seeds=(0, 1))
for case in cases[1:3]:
    check_in_place(case)
print("rope_ rotates x in place and touches nothing else")
### BEGIN HIDDEN TESTS
hidden = {"batch": 3, "seq": 6, "heads": 7, "head_dim": 32, "dtype": torch.float16, "view": True}
grading.assert_correct(rope_on_a_copy, rope_reference, make_rope_inputs, [hidden], seeds=(11,))
check_in_place(hidden, seed=11)
### END HIDDEN TESTS

# %% id="cell-18" nbgrader={"grade": true, "grade_id": "test_rope_bandwidth", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Exercise 2b: rope_ runs near copy bandwidth (GPU only): q of a prefill, 8192 tokens x 32 heads x
# 128, fp16. rope_ works in place, so it is timed on one x, rotated again at every replay (rotations
# keep the values' size); the grader checks one replay of the timed work first, and check_in_place
# checks that x is rotated where it lies.
grading.require_gpu("the speed of rope_")
limit = grading.threshold("06_capstone", "rope_bandwidth")
case = {"batch": 1, "seq": 8192, "heads": 32, "head_dim": 128, "dtype": torch.float16, "view": True}
check_in_place(case)
x, cos, sin = make_rope_inputs(case, torch.Generator().manual_seed(1))
nbytes = 2 * x.numel() * x.element_size()          # x read once and written once
grading.assert_bandwidth_fraction(rope_, [(x, cos, sin)], rope_reference, torch.float16,
                                  bytes=nbytes, limit=limit)

# %% [markdown] id="cell-19"
# ## 4. Exercise 3: SwiGLU fused with its gate
#
# The MLP's first projection produces, for each token, `2 * hidden` values: the gate and the up
# projection side by side (one matmul instead of two). SwiGLU multiplies them, $\mathrm{silu}(g)
# \cdot u$ with $\mathrm{silu}(g) = g / (1 + e^{-g})$. Lesson 00's kernel did this on two separate
# tensors; here both halves come from one row of one tensor, and the kernel reads the row's two
# halves and writes one row of half the width.
#
# Write `swiglu_kernel` and `swiglu(h)`: `h` is (rows, 2 * hidden), fp16 or fp32, last dimension
# contiguous; return a new (rows, hidden) tensor in h's dtype. Compute in float32. Programs
# `(rows, cdiv(hidden, BLOCK))`, each one block of one row.
#
# **Exercise 3b (1 point, needs a GPU)**: `swiglu` on 16384 rows of hidden 4096 (h is 16384 x 8192,
# fp16) against a copy of h's bytes plus y's. Measured on an H200: the reference solution 0.97 of
# the copy (0.97 to 0.99 graded); PyTorch's `swiglu_torch` 0.12; `torch.compile` 1.01.

# %% id="cell-20" nbgrader={"grade": false, "grade_id": "swiglu_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
# include: tilegym_edu/reference/llama_kernels.py swiglu_kernel solution


# include: tilegym_edu/reference/llama_kernels.py swiglu solution

# %% id="cell-21" nbgrader={"grade": false, "grade_id": "swiglu_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
def make_swiglu_inputs(case, generator):
    """(h,) for case = {"rows", "hidden", "dtype"}: h standard normal times 3 (silu's curved
    part)."""
    return (check.random_tensor((case["rows"], 2 * case["hidden"]), case["dtype"], generator, 3.0),)


def swiglu_reference(h):
    return swiglu_torch(h)


for result in check.check(swiglu, swiglu_reference, make_swiglu_inputs, seeds=[0], cases=[
        {"rows": 3, "hidden": 37, "dtype": torch.float16}]):
    print(result.describe())

# %% id="cell-22" nbgrader={"grade": true, "grade_id": "test_swiglu_correct", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 3a: swiglu is correct on odd widths, fp16 and fp32.
cases = [
    {"rows": 1, "hidden": 1, "dtype": torch.float32},
    {"rows": 5, "hidden": 37, "dtype": torch.float32},
    {"rows": 3, "hidden": 1500, "dtype": torch.float16},
    {"rows": 7, "hidden": 72, "dtype": torch.float16},
]
grading.assert_correct(swiglu, swiglu_reference, make_swiglu_inputs, cases, seeds=(0, 1))
### BEGIN HIDDEN TESTS
grading.assert_correct(swiglu, swiglu_reference, make_swiglu_inputs,
                       [{"rows": 4, "hidden": 1025, "dtype": torch.float32}], seeds=(11,))
### END HIDDEN TESTS

# %% id="cell-23" nbgrader={"grade": true, "grade_id": "test_swiglu_bandwidth", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
# Exercise 3b: swiglu runs near copy bandwidth (GPU only): 16384 rows of hidden 4096 (h is 16384 x
# 8192), fp16.
grading.require_gpu("the speed of swiglu")
case = {"rows": BANDWIDTH_ROWS, "hidden": BANDWIDTH_DIM, "dtype": torch.float16}
grading.assert_bandwidth_fraction(swiglu, bandwidth_inputs(make_swiglu_inputs, case),
                                  swiglu_reference, torch.float16,
                                  bytes=3 * BANDWIDTH_ROWS * BANDWIDTH_DIM * 2,
                                  limit=grading.threshold("06_capstone", "swiglu_bandwidth"))

# %% [markdown] id="cell-24"
# ## 5. Bring your kernels
#
# The model's other work is matrix products (the projections: most of its FLOPs; counted at
# `GPU_CONFIG` for 2048 tokens, 2 x 2048 x 0.43 billion weights = 1.7 TFLOP of matmuls a prefill
# against 0.14 TFLOP of causal attention) and attention. You wrote both: the pipelined, autotuned
# `matmul` of lesson 03 and `flash_attention` of lesson 04. **Paste your own code here**, four
# solution cells whole, in this order: lesson 04's Exercises 4-6 (`attention_blocks`,
# `flash_attention_kernel`, `launch_attention` and `flash_attention`) and its Exercise 9
# (`flash_blocks`, `query_block`, `key_bounds`, `store_rows`, `flash_forward_kernel`,
# `launch_flash_forward` and `flash_forward`, the attention for every shape that section 7 decodes
# with), then lesson 03's Exercise 2 (`shared_memory_bytes`)
# and Exercise 3 (`matmul_kernel`, `fits`, `matmul_config`, `matmul` and, last, `MATMUL_SPACE`).
# Their helpers are imported above: `tune`, `ELEMENT_BYTES`, `grouped_tile`, `ATTENTION_SPACE`,
# `FLASH_SPACE` and the rest. If you did not finish those lessons, finish them first: the
# course's reference kernels cannot stand in (inside a graded call they raise `LibraryShortcut`,
# the grader's error for a graded call that uses the course's or PyTorch's arithmetic instead of
# your kernels).
#
# What the model asks of them, and Exercise 4a checks:
#
# - `matmul(a, b)`: a is (tokens, in) and b (in, out), both row-major, fp16 or fp32, with widths
#   that are not multiples of any block at the CPU size (`hidden` 72, `vocab` 101).
# - `flash_attention(q, k, v, causal=True)` on the grouped-query views: q is (n_kv_heads, group,
#   seq, head_dim) with the strides of a view into `qkv`, and k, v have stride **0** along the
#   group.

# %% id="cell-25" nbgrader={"grade": false, "grade_id": "bring_your_kernels", "locked": false, "schema_version": 3, "solution": true, "task": false}
# include: 04_flash_attention flash_attention_solution


# include: 04_flash_attention flash_forward_solution


# include: 03_software_pipelining shared_memory_solution


# include: 03_software_pipelining matmul_solution

# %% id="cell-26" nbgrader={"grade": false, "grade_id": "swap_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
def make_matmul_inputs(case, generator):
    """(a, b) for case = {"M", "K", "N", "dtype"}: a (M, K) activations, b (K, N) weights."""
    return (check.random_tensor((case["M"], case["K"]), case["dtype"], generator),
            check.random_tensor((case["K"], case["N"]), case["dtype"], generator,
                                case["K"] ** -0.5))


def make_gqa_inputs(case, generator):
    """(q, k, v) as the model hands them to attention for one batch element: views into a qkv tensor
    (seq, n_heads + 2 n_kv_heads, head_dim), k and v expanded over the group with stride 0."""
    S, nkv, group = case["seq"], case["n_kv_heads"], case["group"]
    D, dtype = case["head_dim"], case["dtype"]
    qkv = check.random_tensor((S, nkv * group + 2 * nkv, D), dtype, generator)
    q = qkv[:, :nkv * group].view(S, nkv, group, D).permute(1, 2, 0, 3)
    k = qkv[:, nkv * group:nkv * group + nkv].permute(1, 0, 2)[:, None].expand(nkv, group, S, D)
    v = qkv[:, nkv * group + nkv:].permute(1, 0, 2)[:, None].expand(nkv, group, S, D)
    return q, k, v


def causal_attention(q, k, v):
    return flash_attention(q, k, v, True)


def matmul_reference(a, b):
    return a @ b


def gqa_reference(q, k, v):
    return llama.attention_torch(q, k, v, True)


# the correctness checks run the small model everywhere (a float64 reference is cheap)
SMALL = CPU_CONFIG
MATMUL_SHAPES = [  # (in, out) of the small model's projections
    (SMALL.dim, (SMALL.n_heads + 2 * SMALL.n_kv_heads) * SMALL.head_dim),
    (SMALL.n_heads * SMALL.head_dim, SMALL.dim),
    (SMALL.dim, 2 * SMALL.hidden), (SMALL.hidden, SMALL.dim), (SMALL.dim, SMALL.vocab)]
print("the small model's projections (in, out):", MATMUL_SHAPES)

# %% id="cell-27" nbgrader={"grade": true, "grade_id": "test_your_kernels", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 4a: your matmul and flash_attention are correct on the small model's shapes and
# grouped-query views.
cases = [{"M": M, "K": K, "N": N, "dtype": dtype} for (K, N), M, dtype in
         zip(MATMUL_SHAPES, (12, 9, 18, 12, 7),
             (torch.float32, torch.float16, torch.float32, torch.float16, torch.float16))]
grading.assert_correct(matmul, matmul_reference, make_matmul_inputs, cases, seeds=(0,))
cases = [{"seq": 12, "n_kv_heads": 2, "group": 2, "head_dim": 16, "dtype": torch.float32},
         {"seq": 9, "n_kv_heads": 1, "group": 4, "head_dim": 32, "dtype": torch.float16}]
grading.assert_correct(causal_attention, gqa_reference, make_gqa_inputs, cases, seeds=(0, 1))
### BEGIN HIDDEN TESTS
grading.assert_correct(causal_attention, gqa_reference, make_gqa_inputs,
                       [{"seq": 21, "n_kv_heads": 2, "group": 3, "head_dim": 16,
                         "dtype": torch.float16}], seeds=(11,))
### END HIDDEN TESTS

# %% [markdown] id="cell-28"
# ### The swap
#
# An `Ops` with your six functions (the sixth, `cached_attention`, for section 7), and the same
# model runs on them. Exercise 4b checks the logits
# against the PyTorch model run in float64 on the CPU, on fresh token sequences: relative error
# $\lVert \text{yours} - \text{ref} \rVert / \lVert \text{ref} \rVert$ at most `MODEL_TOLERANCE`
# (1e-2) in either dtype. That is looser than a single kernel's tolerance (3e-3) because the error
# of every layer's operations adds up through the residual stream; a missing causal mask or a
# rotation of the wrong pairs is far outside it (a norm without its $\epsilon$ is not, at this
# model's activations of size about 1: Exercise 1a's rows of zeros catch that). During the check
# only the embedding lookup (`index`) and the residual additions (`add`) may use PyTorch arithmetic.

# %% id="cell-29" nbgrader={"grade": false, "grade_id": "model_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
MODEL_TOLERANCE = {torch.float32: 1e-2, torch.float16: 1e-2}
MODEL_ALLOW = ("index", "add")     # the embedding lookup and the residual additions


def cached_attention(q, k, v):
    """Decoding's attention (section 7) on your lesson 04 flash_forward: new queries over the
    KV cache, the causal mask aligned to the end."""
    return flash_forward(q, k, v, True)[0]


def your_ops() -> Ops:
    """The model's operations on your kernels. The model's own code may index (its embedding)
    and add (its residuals) inside a graded call; your functions may not, so each runs with
    only the operations every graded call allows (grading.without_allowances)."""
    ops = dict(matmul=matmul, attention=flash_attention, rmsnorm=rmsnorm, rope_=rope_,
               swiglu=swiglu, cached_attention=cached_attention)
    return Ops(**{name: grading.without_allowances(fn) for name, fn in ops.items()})


def small_model(dtype, seed=0):
    """The small model (CPU_CONFIG) in dtype on the lesson's device, built afresh for every
    check: a model kept between checks could be changed by code that ran before them (its
    reference too, which is computed from the model the check hands out)."""
    return Llama(SMALL, dtype, seed=seed)


def make_model_inputs(case, generator):
    """(tokens, model) for case = {"batch", "seq", "dtype"}: fresh tokens, the small model in
    dtype."""
    return (random_tokens(SMALL, case["batch"], case["seq"], generator),
            small_model(case["dtype"], case.get("weights", 0)))


def run_on_your_kernels(tokens, model):
    return model(tokens, your_ops())


def model_reference(tokens, model):
    """The PyTorch model, in float64 on the CPU."""
    return model.to(torch.float64, "cpu")(tokens.cpu())


tokens, model_small = make_model_inputs({"batch": 1, "seq": 12, "dtype": DTYPE},
                                        torch.Generator().manual_seed(0))
try:
    mine = run_on_your_kernels(tokens, model_small)
except NotImplementedError:
    raise NotImplementedError("the model runs on your kernels: finish Exercises 1a, 2a and 3a "
                              "and paste your lesson 03 and 04 kernels into section 5 "
                              "first") from None
theirs = model_reference(tokens, model_small)
print(f"small model, {str(DTYPE)[6:]}: relative error of the logits "
      f"{check.relative_error(mine, theirs):.1e}; same next-token guesses at "
      f"{(mine.cpu().argmax(-1) == theirs.argmax(-1)).float().mean().item():.0%} of positions")

# %% id="cell-30" nbgrader={"grade": true, "grade_id": "test_swapped_model", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
# Exercise 4b: the model on your kernels gives PyTorch's logits (fresh tokens; fp32 and fp16;
# batch 1 and 2).
cases = [{"batch": 1, "seq": 12, "dtype": torch.float32},
         {"batch": 2, "seq": 7, "dtype": torch.float16}]
grading.assert_correct(run_on_your_kernels, model_reference, make_model_inputs, cases, seeds=(0,),
                       tolerances=MODEL_TOLERANCE, allow=MODEL_ALLOW)
### BEGIN HIDDEN TESTS
grading.assert_correct(run_on_your_kernels, model_reference, make_model_inputs,
                       [{"batch": 1, "seq": 17, "dtype": torch.float16, "weights": 1}], seeds=(11,),
                       tolerances=MODEL_TOLERANCE, allow=MODEL_ALLOW)
### END HIDDEN TESTS

# %% [markdown] id="cell-31"
# ## 6. Measured end to end: prefill on PyTorch eager, torch.compile and your kernels
#
# On a GPU the cells below run the lesson's model (`GPU_CONFIG`, fp16) on one prompt of `SEQ` tokens
# three ways, and report **prefill throughput** in tokens per second:
#
# - **PyTorch eager**: the model as written, each operation a separate PyTorch call (cuBLAS for the
#   matmuls, `scaled_dot_product_attention`'s fastest backend for attention, several kernels for
#   each norm, rotation and SwiGLU).
# - **torch.compile**: the same Python, compiled by TorchInductor, which fuses the elementwise work
#   into Triton kernels of its own and keeps cuBLAS for the matmuls and cuDNN for attention.
# - **your kernels**: `your_ops()`.
#
# Then `torch.profiler` splits each version's GPU time by operation and by kernel, which shows where
# the time goes on your GPU and which of your kernels costs more than PyTorch's. (torch.compile's
# time is split by kernel only: Inductor fuses work across operations, so its kernels do not map
# back to one of them.) Without a GPU these cells say *needs GPU*; the interpreter's times say
# nothing about GPU speed.
#
# What an H200 measured (`benchmarks/capstone.py` in a plain Python process, 2026-11-30; torch 2.11,
# Triton 3.6; the lessons' reference solutions in place of yours; one prompt of 2048 tokens):
#
# | version | prefill | tokens/s | GPU time of its kernels |
# | --- | --- | --- | --- |
# | PyTorch eager | 6.98 ms | 293,515 | 6.06 ms |
# | torch.compile | 3.50 ms | 585,087 | 3.21 ms |
# | lesson solutions | 3.74 ms | 547,128 | 3.45 ms |
#
# By operation, in ms of GPU time (the graded run's profile): the matmuls took 2.44 on cuBLAS and
# 2.66 on the reference kernel, attention 0.42 on cuDNN's FlashAttention and 0.48 on lesson 04's,
# while RMSNorm, RoPE and SwiGLU together took 3.12 in eager PyTorch and 0.25 as fused kernels. The
# fused memory-bound kernels, not a faster matmul, are why a model on your kernels can beat eager
# PyTorch; `torch.compile` fuses the same three operations automatically and keeps cuBLAS, which is
# why it is fastest.
#
# Can kernels of our own beat it? The course's reference kernels try (`benchmarks/capstone.py`, same
# H200, 2026-12-04, `docs/results/h200.md`): every matmul on the fastest of lesson 03's paths, the
# MLP's up-projection with SwiGLU in its **epilogue** (each program keeps the gate's and the up
# projection's sums for the same columns and stores only silu(gate) * up, so the 185 MB of h at
# batch 4 never reach memory), the residual add fused into the norm after it, and attention on
# lesson 04's `flash_forward` with its programs **longest first**. The epilogue made the MLP's first
# half 1.01-1.03x cuBLAS followed by `torch.compile`'s SwiGLU (0.572 against 0.590 ms in one run,
# 0.628 against 0.635 in another, under a lower clock), yet with the attention of lesson 04's
# Exercise 9 (`flash_forward`) the whole prefill stayed at 0.95-0.98x `torch.compile` (batch 4:
# 14.15 against 13.50 ms): attention took 2.08 ms a prefill against cuDNN's 1.66, 67 µs a call
# against 52 (lesson 04's `flash_attention` was no faster: 63 µs). Each call is 16 heads of
# one causal sequence of 2048, 256 to 512 programs for 132 SMs: a few waves, and in grid order a
# head's query blocks run one after another, so the last heads' long blocks (a causal block sees
# more keys the later it sits) start last and run alone at the end. Launched the other way round,
# every head's last block first, the same kernel took 46.5 µs a call against cuDNN's 56.5 (63.7 in
# grid order), and the prefill replayed from CUDA graphs went ahead of `torch.compile`: 3.34-3.40
# against 3.44-3.51 ms at batch 1, 12.90-13.13 against 13.48-13.58 at batch 4 (1.03-1.04x, two
# runs). On bigger problems the same order was slower (B4 H32 S4096 D128: 1.40 against 1.31 ms,
# a head's keys leave L2 between its blocks), so the tuner races both orders
# (`flash.FLASH_ORDER_SPACE`). As plain calls batch 4 stayed ahead (13.21-13.39 against
# 13.52-13.67 ms), but batch 1 did not: there the GPU waits for Python, which spends 160 µs
# launching each attention call against SDPA's 50 (109 µs, and 0.89x `torch.compile`, after a
# later run's cheaper host path, docs/results/h200.md). Fusion wins where memory traffic is the
# cost; once the matmuls dominate, the race is decided by the matmuls and attention themselves, and
# by the order their programs run in.
#
# When four gradings ran this notebook, its timing cell measured eager at 7.8 to 13.9 ms and the
# reference kernels at 4.0 to 9.2 ms: the GPU's work did not change (its profiles agree to 0.03 ms),
# the host's speed did. The next cells show why.

# %% id="cell-32" tags=["demo"]
grading.require_gpu("timing the model's prefill")
model = Llama(CONFIG, torch.float16)
prompts = [random_tokens(CONFIG, BATCH, SEQ, torch.Generator().manual_seed(seed))
           for seed in (0, 1)]
ours = your_ops()
model(prompts[0], ours)   # tune your matmul on the model's shapes first (cached)
compiled = torch.compile(lambda tokens: model(tokens))
compiled(prompts[0])      # compile first
versions = {"PyTorch eager": lambda: model(prompts[0]),
            "torch.compile": lambda: compiled(prompts[0]),
            "your kernels": lambda: model(prompts[0], ours)}
measurements = bench.compare(versions, graph_below_ms=0)
bench.print_table(measurements, baseline="PyTorch eager")
for m in measurements:
    print(f"{m.name:<15} {BATCH * SEQ / (m.median_ms / 1e3):>12,.0f} tokens/s")

# %% id="cell-33" tags=["demo"]
from torch.profiler import ProfilerActivity, profile
from tilegym_edu.reference.llama_profile import gpu_ms_by_op, profiled

grading.require_gpu("profiling the model")

# GPU time by operation: profiled(ops) runs every operation inside a profiler range named after it
by_op = {"PyTorch eager": gpu_ms_by_op(lambda: model(prompts[0], profiled(TORCH_OPS))),
         "your kernels": gpu_ms_by_op(lambda: model(prompts[0], profiled(ours)))}
columns = list(by_op["PyTorch eager"])
print("GPU time of one prefill by operation, ms (kernel time; 'other' is the embedding, "
      "the residual additions and the copy of attention's output into o)")
print(f"{'':<15}" + "".join(f"{name:>10}" for name in columns))
for version, split in by_op.items():
    print(f"{version:<15}" + "".join(f"{split[name]:>10.3f}" for name in columns))

# GPU time by kernel: torch.compile's fused kernels are Inductor's, named triton_*
for name, run in versions.items():
    run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    print(f"\n{name}: GPU time by kernel, one prefill")
    print(prof.key_averages().table(sort_by="device_time_total", row_limit=6,
                                    max_name_column_width=60))

# %% [markdown] id="84e2f26c"
# ### When the GPU waits for Python
#
# A prefill on your kernels is about 100 kernel launches, each from Python: a wrapper that checks
# shapes, looks up its tuned configuration and calls Triton's launcher. On the H200 machine one
# small PyTorch addition cost 11 to 25 µs of host time, and the course's wrappers of this model 35
# to 43 µs (the elementwise kernels), 69 µs (`flash_attention`) and 72 to 110 µs (its matmuls;
# 2026-12-04, docs/results/h200.md). While the GPU is busier than that, the host runs ahead and the
# cost is hidden; when the host falls behind, the GPU idles and the prefill takes longer than its
# kernels. The profile above counts kernel time only, so compare its totals with the prefill times:
# the gap is time the GPU spent waiting.
#
# A **CUDA graph** removes the host from the loop: it records the launches of one call once, and a
# replay relaunches all of them with a single call, with the same arguments and the same memory. The
# next cell captures one prefill on your kernels and times the replay against a normal call. On the
# H200 the replay saved 0.14 ms when the host kept up (3.93 to 3.79 ms) and 9.1 ms in a grading run
# where it did not (12.72 to 3.58 ms). Serving systems capture their decoding steps in graphs for
# this reason; `torch.compile(mode="reduce-overhead")` does it for you.

# %% id="495a3e82" tags=["demo"]
grading.require_gpu("replaying the prefill from a CUDA graph")
# A CUDA graph records the kernel launches of one prefill (not the Python that made them);
# replaying it relaunches all of them with one call. Warm up on a side stream first, as
# torch.cuda.graph asks.
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    model(prompts[0], ours)
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    graphed_logits = model(prompts[0], ours)
graph.replay()
print(f"the replayed logits against a normal call: relative error "
      f"{check.relative_error(graphed_logits, model(prompts[0], ours)):.1e}")
replayed = bench.compare({"your kernels": versions["your kernels"],
                          "your kernels, CUDA graph": graph.replay},
                         graph_below_ms=0)
bench.print_table(replayed, baseline="your kernels")

# %% [markdown] id="cell-34"
# **Exercise 4c (3 points, needs a GPU).** Your kernels must run the prefill at least as fast as
# PyTorch eager (the threshold printed), timed interleaved on two prompts in this process, both
# sides replayed from CUDA graphs, so the host's speed counts on neither: the ratio compares GPU
# work. The timed outputs are checked against the model run in float32 by PyTorch (relative error
# at most 1e-2: fp16 through eight layers). On the H200 the reference solution measured 1.74x
# (1.73-1.77 in the gradings of 2026-12-01 to 12-05), and its logits differed from float32's by
# 1.4e-3, as eager PyTorch's do in fp16. If you fall short, the profile above says which operation
# costs more than PyTorch's: often a matmul whose configuration does not fit the model's shapes
# (autotune at level 1 searches lesson 03's small list), or attention, if your `ATTENTION_SPACE`
# lacks a good configuration for 4 x 4 heads of 2048 at head_dim 128.

# %% id="cell-35" nbgrader={"grade": true, "grade_id": "test_model_vs_eager", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Exercise 4c: the model on your kernels is at least as fast as PyTorch eager (GPU only).
grading.require_gpu("the model's speed on your kernels")


def float32_reference(tokens, model):
    """The timed outputs' reference: the PyTorch model in float32 on the GPU (float64 on the CPU
    would be far slower at this size)."""
    return model.to(torch.float32)(tokens.to(DEVICE)).double().cpu()


prompts = [random_tokens(CONFIG, BATCH, SEQ, torch.Generator().manual_seed(seed))
           for seed in (0, 1)]
# tuned and compiled before timing, on a model of its own: the timed model is built after, so
# nothing your kernels did before the check can have changed its weights
Llama(CONFIG, torch.float16)(prompts[0], your_ops())
model = Llama(CONFIG, torch.float16)
input_sets = [(tokens, model) for tokens in prompts]
grading.assert_speedup(run_on_your_kernels, lambda tokens, m: m(tokens), input_sets,
                       float32_reference, torch.float16,
                       grading.threshold("06_capstone", "model_vs_eager"),
                       tolerances={torch.float16: 1e-2}, allow=MODEL_ALLOW)

# %% [markdown] id="cell-39"
# ## 7. Generating text: decoding over a KV cache
#
# A prefill reads the prompt; **decoding** then writes the answer, one token at a time. Each step
# feeds one new token per sequence through the model and picks the next from the logits of the last
# position. Recomputing every earlier token's keys and values at each step would repeat the whole
# prefill for every new token, so a decoder keeps them: the **KV cache** (`KVCache`: each layer's
# `k` and `v`, (batch, n_kv_heads, max_seq, head_dim), filled up to `length`). A step computes q, k
# and v for the new token only, appends its k and v to the cache, and attends from its one query
# over every cached key: `ops.cached_attention(q, k, v)` with q (batch, n_heads, 1, head_dim) and k,
# v (batch, n_kv_heads, length, head_dim), the causal mask aligned to the end. That is lesson 04's
# Exercise 9, which is why section 5 asked for it: grouped-query heads without copies, one query
# over a long cache, the cache read once per group.
#
# `Llama.forward(tokens, ops, cache)` continues what the cache holds, and `Llama.generate(prompt,
# new_tokens, ops)` decodes greedily (the most likely token each step). The weights are random, so
# the tokens are not text: what matters here is that each step computes what a full pass over the
# sequence so far would. **Exercise 5 (2 points)** checks exactly that, on fresh tokens: a prompt
# through the cache, then a chunk of three tokens, then the last token alone, on your kernels, every
# position's logits against the PyTorch model run over the whole sequence in float64.
#
# Why decoding is a different problem from prefill: a step does 2 FLOPs per weight per sequence,
# but must read every weight once. At `GPU_CONFIG` that is the 0.43 billion weights of the layers
# and the output projection, 0.85 GB in fp16, against the H200's measured copy bandwidth of 4.2
# TB/s: no step at batch 1 can take less than 0.2 ms, whatever the kernels. At batch 1 the matmuls
# are matrix-vector products, memory-bound like this lesson's fused kernels; larger batches reuse
# each weight they read. The cell after the check times one step on PyTorch eager,
# `torch.compile`, your kernels and the course's reference kernels (below), each replayed from a
# CUDA graph (as serving engines run decoding), at batch 1 and 16 with 2040 tokens in the cache.
# On an H200 (run 38, 2026-12-05, docs/results/h200.md) the lessons' kernels took 1.11 ms a step
# at batch 1, against 1.01 eager and 0.50 compiled, and 0.87 ms at batch 16, against 1.27 and
# 0.63: five and a half times the 0.2 ms floor at batch 1. (That run's row attended over the cache
# with the course's flash decoding and fused the residual add into the norm; your `flash_forward`
# and plain add may be slower.) The matmuls are why: lesson 03's tiles are 64 or 128 rows tall,
# and a decoding step brings one row per sequence, so most of each tile is
# wasted and a few programs walk the weights for the whole GPU. That is lesson 03's section 7
# again: a small output wants its $K$ split.
#
# The course's reference kernels show how far that goes (`benchmarks/capstone.py`, same H200,
# `docs/results/h200-2026-12-02-decode.md`). Four changes took their step at batch 1 after 2040
# cached tokens from 1.07 ms to 0.53 ms, against `torch.compile`'s 0.50: a **skinny matmul** for
# at most 16 rows (16-row tiles, $K$ split so that every SM reads its share of the weights, and the
# last program of each column block adding the partial sums in the same launch), which read the
# weights at 1.2-3.1 TB/s, 0.92-1.17 times cuBLAS, where lesson 03's pipelined kernel managed
# 0.22-0.85 times; **flash decoding**, the keys of the cache split across programs in the same
# way, so one query per sequence no longer leaves 128 of 132 SMs idle; one rotary call for q and k
# together; and the residual add fused into the RMSNorm after it. At batch 16 the step took 0.66
# ms against 0.63. The modules are `tilegym_edu/reference/skinny.py` and `flash_decode.py`. A
# later run (2026-12-04, run 37) measured 1.03 ms at batch 1: by our reading of its log, its
# tuner had timed the races of those kernels as plain launches on a slow host, so the picks
# followed Python's time, not the GPU's. With those races timed as CUDA graphs (lesson 03's
# `race_as_graphs`), run 38 (2026-12-05) measured 0.53 ms again, against `torch.compile`'s 0.50
# (0.65 against 0.63 at batch 16).

# %% id="cell-40" nbgrader={"grade": true, "grade_id": "test_decoding", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 5: decoding over the KV cache on your kernels gives every position the logits of a full
# pass (fresh tokens; fp32 and fp16; batch 1 and 2).
def decode_on_your_kernels(tokens, model):
    """Logits (batch, seq, vocab) for tokens run through a KV cache: the first seq - 4 as a
    prompt, three as a chunk, the last alone."""
    cache, ops, seq = KVCache(model, tokens.shape[0]), your_ops(), tokens.shape[1]
    pieces = [model(tokens[:, :seq - 4], ops, cache),
              model(tokens[:, seq - 4:seq - 1], ops, cache), model(tokens[:, seq - 1:], ops, cache)]
    return torch.cat(pieces, dim=1)


cases = [{"batch": 1, "seq": 12, "dtype": torch.float32},
         {"batch": 2, "seq": 9, "dtype": torch.float16}]
grading.assert_correct(decode_on_your_kernels, model_reference, make_model_inputs, cases,
                       seeds=(0,), tolerances=MODEL_TOLERANCE, allow=MODEL_ALLOW + ("cat",))
### BEGIN HIDDEN TESTS
grading.assert_correct(decode_on_your_kernels, model_reference, make_model_inputs,
                       [{"batch": 1, "seq": 15, "dtype": torch.float16, "weights": 1}], seeds=(11,),
                       tolerances=MODEL_TOLERANCE, allow=MODEL_ALLOW + ("cat",))
### END HIDDEN TESTS

# %% id="cell-41" tags=["demo"]
from tilegym_edu.reference.llama_kernels import reference_ops   # skinny matmul, flash decoding

grading.require_gpu("timing a decoding step")
model = Llama(CONFIG, torch.float16)
compiled_forward = torch.compile(model.forward)
for batch in (1, 16):
    tokens = random_tokens(CONFIG, batch, 2041, torch.Generator().manual_seed(batch))
    steps = {"PyTorch eager": repeatable_decode_step(model, TORCH_OPS, tokens, 2040),
             "torch.compile": repeatable_decode_step(model, TORCH_OPS, tokens, 2040,
                                                     compiled_forward),
             "your kernels": repeatable_decode_step(model, your_ops(), tokens, 2040),
             "course reference": repeatable_decode_step(model, reference_ops(), tokens, 2040)}
    print(f"\none decoding step, batch {batch}, 2040 tokens in the cache")
    results = bench.compare(steps, graph_below_ms=math.inf)
    bench.print_table(results, baseline="PyTorch eager")
    for m in results:
        print(f"{m.name:<15} {batch / (m.median_ms / 1e3):>10,.0f} tokens/s")

# %% id="cell-42" tags=["demo"]
prompt = random_tokens(CONFIG, 1, 8, torch.Generator().manual_seed(0))
small = Llama(CONFIG, DTYPE)
print("greedy, PyTorch:     ", small.generate(prompt, 8)[0, 8:].tolist())
print("greedy, your kernels:", small.generate(prompt, 8, your_ops())[0, 8:].tolist())

# %% [markdown] id="cell-36"
# ## 8. Optional: a real Llama checkpoint
#
# If you have a Llama-architecture checkpoint on disk in the Hugging Face format (a folder with
# `config.json` and the weights, e.g. a small Llama 3.2 or TinyLlama you downloaded yourself), set
# `CHECKPOINT` below to its folder: the cell copies its weights into this lesson's `Llama`, runs a
# prompt through Hugging Face's implementation and through yours on your kernels, and compares the
# logits. Nothing is downloaded. It needs the `transformers` package, which the course does not
# install: `.venv/bin/pip install transformers` (and `accelerate` for large checkpoints). Without
# either, the cell says so and skips. The rotary tables are taken from the checkpoint's own rotary
# embedding, so checkpoints with scaled RoPE (Llama 3) work too; tied embeddings are handled; other
# variants (biases in the projections, sliding-window attention) are not Llama and are refused.

# %% id="cell-37" tags=["demo"]
CHECKPOINT = ""      # e.g. "/data/models/TinyLlama-1.1B-Chat-v1.0"


def llama_from_hf(hf, dtype):
    """This lesson's Llama with the weights of a transformers LlamaForCausalLM (kept on its
    device)."""
    c = hf.config
    cfg = LlamaConfig(dim=c.hidden_size, n_layers=c.num_hidden_layers,
                      n_heads=c.num_attention_heads, n_kv_heads=c.num_key_value_heads,
                      hidden=c.intermediate_size, vocab=c.vocab_size,
                      max_seq=min(c.max_position_embeddings, 4096), eps=c.rms_norm_eps)
    has_bias = getattr(c, "attention_bias", False) or getattr(c, "mlp_bias", False)
    windowed = getattr(c, "sliding_window", None) is not None
    if has_bias or windowed or cfg.head_dim * cfg.n_heads != c.hidden_size:
        raise ValueError("this checkpoint is not plain Llama (biases, a sliding window, or another "
                         "head size): not supported here")
    # a placeholder model: its configuration and weights are replaced below
    ours = Llama(LlamaConfig(dim=16, n_layers=0, n_heads=1, n_kv_heads=1, hidden=1, vocab=1,
                             max_seq=1), dtype)
    ours.cfg = cfg

    def t(w):   # a transformers weight (out, in) as this model's (in, out), on DEVICE in dtype
        return w.detach().to(DEVICE, dtype).t().contiguous()

    ours.embedding = hf.model.embed_tokens.weight.detach().to(DEVICE, dtype)
    ours.layers = [{"attn_norm": layer.input_layernorm.weight.detach().to(DEVICE, dtype),
                    "wqkv": torch.cat([t(layer.self_attn.q_proj.weight),
                                       t(layer.self_attn.k_proj.weight),
                                       t(layer.self_attn.v_proj.weight)], 1),
                    "wo": t(layer.self_attn.o_proj.weight),
                    "mlp_norm": layer.post_attention_layernorm.weight.detach().to(DEVICE, dtype),
                    "w13": torch.cat([t(layer.mlp.gate_proj.weight),
                                      t(layer.mlp.up_proj.weight)], 1),
                    "w2": t(layer.mlp.down_proj.weight)} for layer in hf.model.layers]
    ours.norm = hf.model.norm.weight.detach().to(DEVICE, dtype)
    ours.output = t(hf.lm_head.weight)
    positions = torch.arange(cfg.max_seq, device=DEVICE)[None]
    cos, sin = hf.model.rotary_emb(ours.embedding[:1][None].float(), positions)
    ours.cos = cos[0, :, :cfg.head_dim // 2].float().contiguous()
    ours.sin = sin[0, :, :cfg.head_dim // 2].float().contiguous()
    return ours


if not CHECKPOINT:
    print("skipped: set CHECKPOINT to the folder of a Llama checkpoint in Hugging Face format "
          "to run this section")
else:
    try:
        import transformers
    except ImportError:
        transformers = None
        print("skipped: this section needs transformers, which the course does not install: "
              ".venv/bin/pip install transformers")
    if transformers is not None:
        dtype = torch.float16 if device.ON_GPU else torch.float32
        hf = transformers.AutoModelForCausalLM.from_pretrained(CHECKPOINT, torch_dtype=dtype)
        hf = hf.to(DEVICE).eval()
        ours = llama_from_hf(hf, dtype)
        prompt = random_tokens(ours.cfg, 1, device.size(gpu=256, cpu=8),
                               torch.Generator().manual_seed(0))
        with torch.no_grad():
            expected = hf(prompt).logits.float()
            mine = ours(prompt, your_ops()).float()
        print(f"{CHECKPOINT}: {ours.parameters() / 1e9:.2f} B parameters; "
              f"your kernels against transformers: "
              f"relative error of the logits {check.relative_error(mine, expected):.1e}, "
              f"same next-token choice at "
              f"{(mine.argmax(-1) == expected.argmax(-1)).float().mean().item():.0%} of positions")

# %% [markdown] id="cell-38"
# ## What you built
#
# A language model of the architecture most open models share, running end to end on kernels you
# wrote: the matmul of lessons 02 and 03, the FlashAttention of lesson 04, and three fused
# memory-bound kernels from this lesson, each reading its input once. The profile in section 6
# shows, on your GPU, how a model's time splits between a handful of operations: a kernel that gets
# near the roofline on the ones that dominate moves the whole model. Your own GPU's figures are in
# the cells above.
#
# Where to go from here: **faster decoding** (at batch 1 the matmuls are matrix-vector products and
# the time is set by reading the weights: split-K matmuls, and attention split over the cache when
# one sequence cannot fill the GPU, FlashDecoding, as section 7's reference kernels do); fusing
# RMSNorm into the matmul that follows it; **quantised weights** (int8, fp8, int4) dequantised
# inside the matmul's loads, which cut the bytes a decoding step must read; and a key/value cache
# that FlashAttention reads in pages (PagedAttention).
