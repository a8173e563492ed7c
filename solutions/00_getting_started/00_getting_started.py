# tilegym-notebook: {"metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}, "language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}

# %% [markdown] id="cell-00"
# # Lesson 00: Getting started — programs, masks, honest timing and the roofline
#
# Every lesson of this course asks one question: *how fast could this kernel possibly run on my GPU,
# and how close does my kernel get?* Before writing anything clever you need three tools:
#
# 1. **Triton's program model**: how one kernel launch is split into *programs*, each working on a
#    *block* of data, and why the last block needs a *mask*.
# 2. **Honest timing**: GPU work is asynchronous, the first call compiles, and caches flatter
#    repeated runs. Each of these can make a measurement wrong, the first two by orders of
#    magnitude.
# 3. **The roofline**: the two ceilings (memory bandwidth and arithmetic rate) that bound every
#    kernel, measured on *your* GPU.
#
# You finish by writing a fused elementwise kernel (one kernel doing the work of two: `silu_mul`,
# the activation of Llama's MLP) that is graded for correctness on awkward sizes and, on a GPU, for
# speed against a plain memory copy.
#
# **Grading.** Each *Exercise* has a cell for your code (it raises `NotImplementedError` until you
# write it) and a locked test cell after it. `tilegym-edu grade 00_getting_started` (or
# `make grade`) runs the test cells on a copy of this notebook, never changing it, and prints each
# exercise's points and, where it lost them, why. It grades the file on disk: save first.
# Cells tagged `demo` (the timings, sweeps and plots that show what a kernel does; JupyterLab
# shows a cell's tags in its property inspector) run when you run the notebook, but grading skips
# them: nothing graded depends on them, and skipping them keeps a grade to seconds, not minutes.
# `tilegym-edu grade 00_getting_started --exercise test_bytes` grades one exercise alone (the id of
# its test cell, as the grade table shows it: `test_bytes` is Exercise 2).

# %% [markdown] id="cell-01"
# ## Setup
#
# `import tilegym_edu` must come first, before `import triton`: it decides whether kernels run on a
# CUDA GPU or in Triton's CPU interpreter (`TRITON_INTERPRET=1`), and the line it prints says which.
# In interpreter mode every kernel runs on the CPU one program at a time. That is slow (milliseconds
# per program), so problem sizes come from `device.size(gpu=..., cpu=...)`, which picks a large size
# on a GPU and a small one in the interpreter.

# %% id="cell-02" nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import tilegym_edu  # noqa: F401  (first: decides GPU or interpreter mode before triton is imported)

import time

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from tilegym_edu import bench, check, device, grading, roofline

print(device.banner())
DEVICE = device.DEVICE

# %% [markdown] id="cell-03"
# ## 1. Triton's program model: vector addition
#
# A Triton kernel is a function that runs once per **program**. You launch a **grid** of programs;
# each one asks `tl.program_id(0)` which one it is and works on its own block of `BLOCK_SIZE`
# consecutive elements. Inside a program, `tl.arange(0, BLOCK_SIZE)` is a whole vector of offsets:
# one `tl.load` reads a block, not one number. The compiler spreads that block over the GPU's
# threads for you (in CUDA you would index single threads yourself; lesson 01 shows that).
# `BLOCK_SIZE` is a `tl.constexpr`, a compile-time constant: Triton compiles a version of the
# kernel for each value it is given (`tl.arange` needs a power of two). At the launch,
# `add_kernel[grid](x, y, out, ...)`, each tensor arrives in the kernel as a pointer to its first
# element, so `x_ptr + offsets` is a block of addresses.
#
# The grid has `cdiv(n, BLOCK_SIZE)` programs, so when `n` is not a multiple of the block the
# last program reaches past the end of the arrays. The **mask** `offsets < n` switches those lanes
# off: masked loads read nothing and masked stores write nothing. Forget it and the kernel reads and
# writes memory that is not yours.

# %% id="cell-04"
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    """out[i] = x[i] + y[i] for i < n_elements. Pointers: x, y, out of shape (n_elements,)."""
    pid = tl.program_id(axis=0)                        # which block this program handles
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements                        # the last block may be partial
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x + y for contiguous tensors of the same shape and dtype."""
    out = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, 1024),)                     # one program per 1024 elements
    add_kernel[grid](x, y, out, n, BLOCK_SIZE=1024)
    return out

# %% [markdown] id="cell-05"
# Check it before timing it, on a size that is *not* a multiple of the block, against PyTorch:
# the relative error $\lVert out - ref\rVert / \lVert ref\rVert$ should be 0 for an addition.

# %% id="cell-06"
n = 98_437                                             # not a multiple of 1024
x = torch.randn(n, device=DEVICE)
y = torch.randn(n, device=DEVICE)
print(f"{triton.cdiv(n, 1024)} programs; relative error vs PyTorch:",
      check.relative_error(add(x, y), x + y))

# %% [markdown] id="cell-07"
# ## 2. Timing pitfalls, shown live
#
# **Pitfall 1: no synchronization.** A kernel launch returns as soon as the work is *queued*; the
# GPU runs it later. A host clock around the launch alone measures the launch, not the kernel.
# `device.synchronize()` waits for the GPU (in interpreter mode it does nothing: there, a kernel
# has finished when its launch returns, so the last two numbers below are the same kind of time).
#
# **Pitfall 2: no warm-up.** The first call of a Triton kernel compiles it, and so does the first
# call with new argument dtypes or a new `tl.constexpr` value (and a few properties of the other
# arguments, such as whether an integer is a multiple of 16). Compiling takes far longer than
# running. We give the kernel a fresh `BLOCK_SIZE` so that its first call below really compiles.
# (Triton also keeps compiled kernels on disk, in `~/.triton/cache`: when you run this notebook
# again later, that first call loads the kernel instead of compiling it, and takes less time.)
#
# On the H200 of docs/results/h200.md (2026-11-29) the three lines read 76.0, 0.199 and 0.236 ms:
# the compile took as long as some 300 synchronized runs. This kernel's GPU work (about 0.1 ms,
# section 4) is shorter than its launch, so here the unsynchronized number is only a little low;
# for a kernel that runs far longer than its launch, it misses nearly all of the kernel.

# %% id="cell-08" tags=["demo"]
N = device.size(gpu=2**25, cpu=20_000)
x = torch.randn(N, device=DEVICE)
y = torch.randn(N, device=DEVICE)
out = torch.empty_like(x)
grid = (triton.cdiv(N, 2048),)

start = time.perf_counter()
add_kernel[grid](x, y, out, N, BLOCK_SIZE=2048)        # first call with BLOCK_SIZE=2048
device.synchronize()
first_call_ms = (time.perf_counter() - start) * 1e3

start = time.perf_counter()
add_kernel[grid](x, y, out, N, BLOCK_SIZE=2048)        # no synchronize: measures the launch
launch_only_ms = (time.perf_counter() - start) * 1e3
device.synchronize()

start = time.perf_counter()
add_kernel[grid](x, y, out, N, BLOCK_SIZE=2048)
device.synchronize()                                   # waits for the kernel to finish
synchronized_ms = (time.perf_counter() - start) * 1e3

print(f"first call (compiles on a GPU): {first_call_ms:9.3f} ms")
print(f"launch only, no synchronize:    {launch_only_ms:9.3f} ms")
print(f"launch + synchronize:           {synchronized_ms:9.3f} ms")

# %% [markdown] id="cell-09"
# **Pitfall 3: a warm cache.** A GPU keeps recently used data in its L2 cache (60 MiB on an H200).
# Time the same small kernel over and over and its inputs stay in L2, so you measure the cache,
# not memory. `bench` flushes L2 before every run (it zeroes a buffer twice the L2 size); pass
# `flush_l2=False` to see the difference on an input that fits in L2. On the H200 of
# docs/results/h200.md (2026-11-29) the warm runs took 0.00502 ms against 0.00774 ms flushed:
# 1.54x "faster" from the cache alone.
#
# `bench.compare` times several functions (`bench.bench` one) the way the course's timing rules
# ask:
# - warm-up calls first, so compilation stays out;
# - *CUDA events* (timestamps the GPU records in its own queue of work) around each run;
# - a *CUDA graph* (GPU work recorded once, then replayed with a single launch) for any function
#   whose call, launch and synchronize included, takes under 0.1 ms, so that Python's launch is
#   not what gets timed;
# - candidates *interleaved*, one run of each, round after round, so that a change of clock or
#   temperature hits all of them alike;
# - the *median* run with its 20th-80th percentile spread: a few runs slowed by something else
#   do not move it;
# - the SM clock it saw, read and never set (the streaming multiprocessors, SMs, run the
#   programs: an H200 has 132; their clock drops under heat or a power limit, and times rise).
#
# In interpreter mode it times the CPU interpreter and says so.

# %% id="cell-10" tags=["demo"]
n_small = device.size(gpu=2**20, cpu=4096)             # 3 x 4 MiB on a GPU: fits in L2
xs = torch.randn(n_small, device=DEVICE)
ys = torch.randn(n_small, device=DEVICE)
add_bytes = 3 * xs.element_size() * n_small            # read x and y, write out
cold = bench.bench(lambda: add(xs, ys), bytes=add_bytes, name="L2 flushed")
warm = bench.bench(lambda: add(xs, ys), bytes=add_bytes, name="warm L2", flush_l2=False)
bench.print_table([cold, warm], baseline="L2 flushed")

# %% [markdown] id="cell-11"
# ## 3. Your GPU's ceilings
#
# Two numbers bound every kernel: how fast the GPU moves bytes between memory and the chip, and how
# fast it does arithmetic. The datasheet gives both; what your GPU really does, through PyTorch,
# today, is lower: on the H200 of docs/results/h200.md (2026-11-29) a copy moved 4,207 GB/s
# against the datasheet's 4,800, and float16 `torch.matmul` ran at 663 TFLOP/s against 989.5.
# `tilegym_edu.ceilings.measure_ceilings()` measures a large device-to-device copy (GPU memory to
# GPU memory: *device* is CUDA's word for the GPU; bytes read plus bytes written) and
# `torch.matmul` (cuBLAS, NVIDIA's matrix library) per dtype, once per GPU, driver and torch
# version, and caches the result: only the first call pays for the measurement.
# The datasheet's FP16 figure is for the *tensor cores*, the units built for matrix products;
# *dense* means without the 2:4 sparsity NVIDIA's datasheets often quote, which doubles it.
# Without a GPU (or on one the course's table does not know) this cell shows an H200's datasheet,
# the GPU the roofline below is then drawn for.

# %% id="cell-12" tags=["demo"]
if device.ON_GPU:
    from tilegym_edu.ceilings import measure_ceilings
    measured = measure_ceilings()
    print(f"copy bandwidth: {measured.copy_gbs:,.0f} GB/s")
    for dtype_name, tflops in measured.matmul_tflops.items():
        print(f"torch.matmul {dtype_name}: {tflops:,.0f} TFLOP/s")
spec, is_this_gpu = roofline.resolve_spec()
print(f"datasheet of the {spec.name}: {spec.memory_bandwidth_gbs:,.0f} GB/s, "
      f"FP32 {spec.fp32_tflops} TFLOP/s, FP16 tensor {spec.fp16_tflops} TFLOP/s (dense)")
print(f"source: {spec.source}")

# %% [markdown] id="cell-13"
# ## 4. The roofline
#
# A kernel that does $F$ floating-point operations while moving $B$ bytes to and from the GPU's
# memory has *arithmetic intensity* $I = F/B$. It cannot run faster than $\min(P,\ I \cdot W)$
# TFLOP/s, where $P$ is the peak arithmetic rate in TFLOP/s and $W$ the memory bandwidth in TB/s.
# Left of the *ridge point* $I = P/W$, where the sloped memory roof meets the flat compute roof, a
# kernel is *memory-bound* (bandwidth limits it); right of it, *compute-bound*. Vector addition
# does 1 FLOP per element and moves 12 bytes per element in float32 (two loads, one store), so
# $I = 1/12$: it sits far left, under the sloped memory roof. No amount of clever code makes it
# compute-bound; the best it can do is move its bytes at full bandwidth (on the H200 of
# docs/results/h200.md, 2026-11-29: 4,115 GB/s). The plot draws the datasheet's roofs in black
# and, once `measure_ceilings` has run, the measured ones dotted. On a GPU the point shows where
# your measurement landed; in interpreter mode it is drawn hollow at the roof (the best the kernel
# could do).

# %% id="cell-14" tags=["demo"]
vector_add = bench.bench(lambda: add(x, y), flops=N, bytes=3 * 4 * N, name="vector add fp32")
bench.print_table([vector_add])
roofline.plot_roofline([vector_add]);

# %% [markdown] id="cell-15"
# ## Exercise 1 (4 points): a fused SiLU-and-multiply kernel
#
# Llama-style MLPs compute $\mathrm{silu}(x) \cdot y$ where $\mathrm{silu}(x) = x \cdot \sigma(x)$
# and $\sigma(x) = 1/(1+e^{-x})$. In PyTorch that is `F.silu(x) * y`: two kernels, and the
# intermediate `silu(x)` makes a round trip through memory. One fused kernel reads `x` and `y` once
# and writes the result once.
#
# Write `silu_mul_kernel` and its wrapper `silu_mul(x, y)` (the Python function that allocates
# the output and launches the kernel, as `add` does for `add_kernel`):
#
# - `x`, `y`: contiguous tensors of the same shape (any number of dimensions) and dtype
#   (`torch.float32` or `torch.float16`); return a new tensor of that shape and dtype.
#   *Contiguous*: the elements lie in memory one after another, so the kernel can treat any
#   shape as a flat array of `x.numel()` elements.
# - Compute in float32 inside the kernel (load, `.to(tl.float32)`, compute, convert back when you
#   store): float16 arithmetic loses accuracy for no gain in a memory-bound kernel.
# - Any number of elements: the grader uses sizes that are not multiples of your block, and sizes
#   it does not show you.
# - All arithmetic happens in your kernel: during grading, PyTorch may only allocate, view and
#   copy tensors (a call to `F.silu`, `torch.sigmoid` or `*` on tensors fails the exercise), and
#   freshly allocated tensors are filled with NaN, so an element you never write shows up.
#
# `tl.sigmoid` exists. Test your function as you go with the checker in the cell after the next.

# %% id="cell-16" nbgrader={"grade": false, "grade_id": "silu_mul_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
@triton.jit
def silu_mul_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    """out[i] = silu(x[i]) * y[i] for i < n_elements, computed in float32.
    Pointers: x, y, out, each of n_elements contiguous elements of one dtype."""
    ### BEGIN SOLUTION
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
    out = x * tl.sigmoid(x) * y
    tl.store(out_ptr + offsets, out.to(out_ptr.dtype.element_ty), mask=mask)
    ### END SOLUTION


def silu_mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """silu(x) * y for contiguous x, y of the same shape and dtype (float32 or float16)."""
    ### BEGIN SOLUTION
    if x.shape != y.shape or x.dtype != y.dtype:
        raise ValueError(f"x and y must match: got {tuple(x.shape)} {x.dtype} "
                         f"and {tuple(y.shape)} {y.dtype}")
    if not (x.is_contiguous() and y.is_contiguous()):
        raise ValueError("silu_mul needs contiguous tensors: call .contiguous() first")
    out = torch.empty_like(x)
    n = x.numel()
    BLOCK_SIZE = 1024
    silu_mul_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, y, out, n, BLOCK_SIZE=BLOCK_SIZE)
    return out
    ### END SOLUTION

# %% [markdown] id="cell-17"
# The checker the grader uses is yours too. `make_silu_inputs` draws fresh random inputs for one
# case; `silu_mul_reference` is the definition, computed in float64. Each line it prints names a
# case (shape, dtype, seed) and its relative error, or why it failed, with the first bad element.
# The graded cell after it checks more shapes and seeds, some it does not show, with a relative
# error of at most 1e-5 in float32 and 3e-3 in float16, and it runs your function under the rules
# above (no PyTorch arithmetic, NaN-filled allocations), which this quick check does not: there,
# `got nan` at the first bad element means an element your kernel never wrote.

# %% id="cell-18" nbgrader={"grade": false, "grade_id": "silu_mul_checker", "locked": true, "schema_version": 3, "solution": false, "task": false}
def make_silu_inputs(case, generator):
    """x and y of case["shape"] and case["dtype"], standard normal, on the lesson's device."""
    return (check.random_tensor(case["shape"], case["dtype"], generator),
            check.random_tensor(case["shape"], case["dtype"], generator))


def silu_mul_reference(x, y):
    return x * torch.sigmoid(x) * y


for result in check.check(silu_mul, silu_mul_reference, make_silu_inputs,
                          cases=[{"shape": (1000,), "dtype": torch.float32},
                                 {"shape": (3, 333), "dtype": torch.float16}], seeds=[0]):
    print(result.describe())

# %% id="cell-19" nbgrader={"grade": true, "grade_id": "test_silu_mul_correct", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
# Exercise 1: silu_mul is correct on odd sizes, several shapes, float32 and float16.
cases = [{"shape": shape, "dtype": dtype}
         for shape in [(1,), (7,), (1024,), (4097,), (37, 129)]
         for dtype in (torch.float32, torch.float16)]
grading.assert_correct(silu_mul, silu_mul_reference, make_silu_inputs, cases,
                       tolerances={torch.float32: 1e-5})
### BEGIN HIDDEN TESTS
hidden_cases = [{"shape": shape, "dtype": dtype}
                for shape in [(2,), (1023,), (1025,), (3000,), (5, 1, 613), (2, 3, 4, 5)]
                for dtype in (torch.float32, torch.float16)]
grading.assert_correct(silu_mul, silu_mul_reference, make_silu_inputs, hidden_cases,
                       seeds=(11, 12), tolerances={torch.float32: 1e-5})
### END HIDDEN TESTS

# %% [markdown] id="cell-20"
# ## Exercise 2 (2 points): count the bytes
#
# `silu_mul` is memory-bound (a handful of FLOPs per element, far left on the roofline), so its
# speed is set by the bytes it moves. Count them for `n` elements of `element_size` bytes each:
#
# - `fused_bytes(n, element_size)`: your kernel, reading `x` and `y` and writing the result once.
# - `eager_bytes(n, element_size)`: PyTorch's `F.silu(x) * y` run *eagerly* (each operation as
#   its own kernel, as the line is executed): two kernels; count every read and write of both,
#   the intermediate included.
#
# Their ratio is the speedup fusion can buy on a GPU when both run at full bandwidth.

# %% id="cell-21" nbgrader={"grade": false, "grade_id": "bytes_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def fused_bytes(n: int, element_size: int) -> int:
    """Bytes of device memory traffic of the fused kernel."""
    ### BEGIN SOLUTION
    return 3 * n * element_size
    ### END SOLUTION


def eager_bytes(n: int, element_size: int) -> int:
    """Bytes of device memory traffic of F.silu(x) * y in PyTorch (two kernels)."""
    ### BEGIN SOLUTION
    return (2 + 3) * n * element_size   # silu: read x, write t; mul: read t and y, write out
    ### END SOLUTION

# %% id="cell-22" nbgrader={"grade": true, "grade_id": "test_bytes", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 2: the byte counts of the fused kernel and of eager PyTorch.
def expect_bytes(count, n, size, want):
    got = grading.formula_answer(count, n, size)
    assert got == want, f"{count.__name__}({n}, {size}) = {got}, expected {want}"


expect_bytes(fused_bytes, 1000, 4, 12_000)
expect_bytes(eager_bytes, 1000, 4, 20_000)
### BEGIN HIDDEN TESTS
for n, size in [(1, 2), (12_345, 2), (2**26, 4)] + grading.drawn_cases(
        lambda rng: (rng.randint(1, 2**30), rng.choice([1, 2, 4, 8])), 3):
    expect_bytes(fused_bytes, n, size, 3 * n * size)
    expect_bytes(eager_bytes, n, size, 5 * n * size)
### END HIDDEN TESTS
print("byte counts correct")

# %% [markdown] id="cell-23"
# ## Exercise 3 (2 points, needs a GPU): near copy bandwidth
#
# A device-to-device copy is the fastest a memory-bound kernel can hope to go: it only reads and
# writes. This check times your `silu_mul` and a copy of the same number of bytes, interleaved in
# this process, on float16 inputs far larger than the L2 cache (2^26 elements, 128 MiB each), and
# checks the outputs of the timed runs. What is graded is your GB/s over the copy's, both counted
# on the same bytes: the copy's time over yours. It passes at the fraction in the course's
# threshold table (`tilegym_edu/thresholds.toml`); the cell prints the ratio, the threshold and
# the H200 figure it came from, and its message starts with *too slow* when it falls short.
# Without a GPU this cell says *needs GPU* and scores 0: interpreter time says nothing about GPU
# speed.
#
# If you fall short: is the block large enough to keep the memory system busy (try 1024 to 8192
# elements, and `num_warps=`, a launch option: how many warps, groups of 32 threads, run one
# program; 4 by default)? Does each program load and store its whole block at once, one `tl.load`
# per input, not a loop over elements?

# %% id="cell-24" nbgrader={"grade": true, "grade_id": "test_silu_mul_bandwidth", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 3: silu_mul moves its bytes at a good fraction of copy bandwidth (GPU only).
grading.require_gpu("the bandwidth check of silu_mul")
limit = grading.threshold("00_getting_started", "silu_mul_bandwidth")
n = 2**26
input_sets = [make_silu_inputs({"shape": (n,), "dtype": torch.float16},
                               torch.Generator().manual_seed(seed)) for seed in (0, 1)]
grading.assert_bandwidth_fraction(silu_mul, input_sets, silu_mul_reference, torch.float16,
                                  bytes=3 * n * 2, limit=limit)

# %% [markdown] id="cell-25"
# ## Compare: your kernel, PyTorch, and a copy
#
# The lesson ends where every lesson ends: your kernel next to the library. Eager PyTorch runs two
# kernels and moves 5 bytes for every 3 yours moves; the copy is the ceiling. All three are
# credited with the 3 the problem needs, so eager's lower GB/s is the cost of its extra traffic.
# On the H200 of docs/results/h200.md (2026-11-29) the reference solution took 0.0980 ms, eager
# 0.168 ms and the copy 0.0988 ms: fused was 1.72x eager, where the bytes predict 5/3 = 1.67x.
# On the roofline we count 6 FLOPs per element for `silu_mul` (negate, exp, add, divide, two
# multiplies; a convention: an exponential costs more than one multiply in hardware).

# %% id="cell-26" tags=["demo"]
n = device.size(gpu=2**26, cpu=8192)
x = torch.randn(n, device=DEVICE, dtype=torch.float16)
y = torch.randn(n, device=DEVICE, dtype=torch.float16)
candidates = {"silu_mul (yours)": lambda: silu_mul(x, y),
              "PyTorch F.silu(x) * y": lambda: F.silu(x) * y}
if device.ON_GPU:
    candidates["copy (same bytes)"] = grading.copy_baseline(3 * 2 * n)
# bytes: the fewest the problem needs (3 per element-byte), the same for all three
results = bench.compare(candidates, bytes=3 * 2 * n,
                        flops={"silu_mul (yours)": 6 * n, "PyTorch F.silu(x) * y": 6 * n})
bench.print_table(results, baseline="PyTorch F.silu(x) * y")
roofline.plot_roofline(results[:2]);

# %% [markdown] id="cell-27"
# ## What comes next
#
# Elementwise kernels are memory-bound: the best they can do is copy speed, and fusion is how they
# get closer. Matrix multiplication is the opposite: $2MNK$ FLOPs on $O(MN + NK + MK)$ data, so it
# *can* be compute-bound, if the kernel reuses each loaded element many times. Lesson 01 writes the
# naive version (one output element per thread in CUDA C, one per program in Triton) and measures
# how far below the roofline it lands.
