# tilegym-notebook: {"metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}, "language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}

# %% [markdown] id="cell-00"
# # Lesson 01: Naive matrix multiplication
#
# *The CUDA thread model, the same kernel in Triton, and why both are slow.*
#
# Matrix multiplication is the kernel that deep learning spends most of its time in, and the one
# this course keeps coming back to. This lesson writes the simplest correct version twice and
# measures how far it is from the vendor library:
#
# 1. **The CUDA thread model**: a grid of blocks of threads, each thread finding its own work from
#    its indices, all of them sharing one global memory. You write the index arithmetic of a real
#    CUDA C kernel, with one thread per output element, and compile it from this notebook.
# 2. **The same algorithm in Triton**, where the unit of work is a *program*, a whole block of
#    threads, rather than a single thread. That difference matters more than it looks.
# 3. **Why it is slow**: count the FLOPs and the bytes, measure against cuBLAS on your GPU, put the
#    result on the roofline, and count, with the interpreter, every byte the naive kernel asks
#    memory for.
#
# | exercise | points | graded |
# | --- | --- | --- |
# | 1. the CUDA C kernel's index arithmetic, bounds check and K loop | 3 | GPU only |
# | 2. the naive matmul in Triton: any shape, fp32 and fp16, strided inputs | 4 | everywhere |
# | 3. the naive kernel's memory traffic, as a formula | 2 | everywhere |
#
# **Grading.** *GPU only* cells are graded on a GPU; without one the grader marks them *needs GPU*.
# Cells marked *Exercise* are graded by `tilegym-edu grade 01_naive_matmul` (or `make
# grade LESSON=01_naive_matmul`), which grades a copy of this notebook and never changes it.

# %% [markdown] id="cell-01"
# ## Setup
#
# As in every lesson, `import tilegym_edu` comes first: it decides whether kernels run on your GPU
# or in Triton's CPU interpreter, and the line it prints says which. Problem sizes come from
# `device.size(gpu=..., cpu=...)`.

# %% id="cell-02" nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
import tilegym_edu  # noqa: F401  (first: decides GPU or interpreter mode before triton is imported)

import time

import torch
import triton
import triton.language as tl

from tilegym_edu import audit, bench, check, device, grading, roofline
from tilegym_edu.traffic import count_traffic

print(device.banner())
DEVICE = device.DEVICE

# %% [markdown] id="cell-03"
# ## The problem and its PyTorch reference
#
# $C = AB$ with $A$ of shape $(M, K)$ and $B$ of shape $(K, N)$:
#
# $$c_{mn} = \sum_{k=0}^{K-1} a_{mk}\, b_{kn}, \qquad 0 \le m < M,\ 0 \le n < N.$$
#
# Each of the $MN$ outputs is a dot product of length $K$: $K$ multiplies and $K$ adds, so the whole
# product costs $2MNK$ floating-point operations (FLOPs). The definition, computed in float64 on the
# CPU, is what every kernel in this lesson is checked against. `make_matmul_inputs` draws fresh
# random inputs for one *case*: a dict with `M`, `N`, `K`, the `dtype`, and optionally a `layout`
# that hands the kernel a transposed view instead of a contiguous tensor.

# %% id="cell-04" nbgrader={"grade": false, "grade_id": "matmul_helpers", "locked": true, "schema_version": 3, "solution": false, "task": false}
def matmul_reference(a, b):
    """The definition. The grader calls it on float64 CPU copies of your inputs."""
    return a @ b


def make_matmul_inputs(case, generator):
    """a of shape (M, K) and b of shape (K, N) for case = {"M", "N", "K", "dtype"}, standard
    normal, on the lesson's device. case["layout"] = "a transposed" makes a the transposed view of
    a (K, M) tensor (strides (1, M)); "b transposed" does the same for b."""
    M, N, K, dtype = case["M"], case["N"], case["K"], case["dtype"]
    layout = case.get("layout", "contiguous")
    a = (check.random_tensor((K, M), dtype, generator).T if layout == "a transposed"
         else check.random_tensor((M, K), dtype, generator))
    b = (check.random_tensor((N, K), dtype, generator).T if layout == "b transposed"
         else check.random_tensor((K, N), dtype, generator))
    return a, b


a, b = make_matmul_inputs({"M": 3, "N": 5, "K": 4, "dtype": torch.float32,
                           "layout": "a transposed"},
                          torch.Generator().manual_seed(0))
print(f"a: shape {tuple(a.shape)}, strides {a.stride()}; "
      f"b: shape {tuple(b.shape)}, strides {b.stride()}")
print("reference:", tuple(matmul_reference(a, b).shape))

# %% [markdown] id="cell-05"
# ## 1. The CUDA thread model
#
# A CUDA **kernel** is a function, marked `__global__`, that every thread of a launch runs. The
# launch `kernel<<<grid, block>>>(args)` creates a **grid** of **blocks**, each block a group of up
# to 1024 **threads**; grid and block can each be one-, two- or three-dimensional. All threads run
# the same code. What tells them apart are four built-in variables:
#
# | variable | meaning |
# | --- | --- |
# | `threadIdx.x`, `.y`, `.z` | this thread's position inside its block |
# | `blockIdx.x`, `.y`, `.z` | this block's position inside the grid |
# | `blockDim.x`, `.y`, `.z` | the shape of a block (the same for every block) |
# | `gridDim.x`, `.y`, `.z` | the shape of the grid |
#
# From these, and nothing else, each thread works out which data is its own.
#
# **How it runs.** The GPU hands whole blocks to its *streaming multiprocessors* (SMs; an H200 has
# 132), several blocks per SM at a time, in no order you can rely on. A block stays on its SM until
# it finishes, so its threads can share fast on-chip memory and wait for each other; threads of
# different blocks cannot (Hopper's thread-block clusters, not used here, are the exception).
# Inside an SM, threads run in **warps** of 32 consecutive threads that issue each instruction
# together.
#
# **Global memory** is the GPU's DRAM (HBM on data-centre GPUs). Every thread can read and write all
# of it, and it is where PyTorch's tensors live, but a load from it takes hundreds of clock cycles
# and all SMs share its bandwidth. Between the two sit caches: a small L1 in each SM and a large L2
# shared by all of them. When the 32 threads of a warp load 32 neighbouring addresses, the hardware
# merges the requests into a few wide transactions (*coalescing*); when they load 32 scattered
# addresses it cannot.
#
# **A naive matmul: one thread per output element.** We launch blocks of 16 × 16 threads (256 each)
# on a grid of $\lceil N/16 \rceil \times \lceil M/16 \rceil$ blocks, x across the columns of $C$
# and y down its rows. Thread `(threadIdx.x, threadIdx.y)` of block `(blockIdx.x, blockIdx.y)` owns
#
# $$\text{col} = \text{blockIdx.x} \cdot \text{blockDim.x} + \text{threadIdx.x}, \qquad
#   \text{row} = \text{blockIdx.y} \cdot \text{blockDim.y} + \text{threadIdx.y}$$
#
# and computes $c[\text{row}, \text{col}]$ with a loop over $k$. Three details make or break it:
#
# * **Row-major addressing.** The tensors are contiguous and row-major: element $(i, j)$ of an
#   $R \times C$ matrix sits at offset $i \cdot C + j$. So $a[\text{row}, k]$ is `a[row * K + k]`,
#   $b[k, \text{col}]$ is `b[k * N + col]` and $c[\text{row}, \text{col}]$ is `c[row * N + col]`.
# * **x goes with columns, on purpose.** Threads next to each other in a warp have consecutive
#   `threadIdx.x`, hence consecutive `col`: in every iteration of the $k$ loop they read
#   neighbouring elements of a row of $b$ (coalesced), all read the same element of $a$ (one
#   broadcast), and at the end they write neighbouring elements of $c$. Swap x and y and each warp
#   reads a column of $a$ with a stride of $K$ elements between threads.
# * **The bounds check.** The grid rounds up: it has $16\lceil N/16\rceil \ge N$ columns of threads
#   and $16\lceil M/16\rceil \ge M$ rows. A thread past the last row or column must do nothing.
#   Without the check it reads past the ends of `a` and `b` and writes into the next row of `c`, or
#   past its end into some other tensor's memory, and nothing stops it.
#
# The next cell holds the C++ half, which you do not need to change: the host function that launches
# the kernel, the PyTorch wrapper that checks the inputs and allocates $C$, and the call to
# `torch.utils.cpp_extension.load_inline`, which writes the sources to a folder, compiles them with
# `nvcc` and a C++ compiler, and imports the result as a Python module. The line
# `/* THE KERNEL BODY */` is where your code goes.

# %% id="cell-06" nbgrader={"grade": false, "grade_id": "cuda_source", "locked": true, "schema_version": 3, "solution": false, "task": false}
from torch.utils import cpp_extension

CUDA_SOURCE = r"""
__global__ void naive_matmul_kernel(const float* __restrict__ a,   // (M, K), row-major
                                    const float* __restrict__ b,   // (K, N), row-major
                                    float* __restrict__ c,         // (M, N), row-major
                                    int M, int N, int K) {
/* THE KERNEL BODY */
}

// Host code: one thread per element of c, in 16 x 16 blocks.
void launch_naive_matmul(const float* a, const float* b, float* c, int M, int N, int K,
                         cudaStream_t stream) {
    dim3 block(16, 16);                        // 256 threads: x along the columns, y down the rows
    dim3 grid((N + 15) / 16, (M + 15) / 16);   // enough blocks to cover all M x N elements
    naive_matmul_kernel<<<grid, block, 0, stream>>>(a, b, c, M, N, K);
}
"""

CPP_SOURCE = r"""
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

void launch_naive_matmul(const float* a, const float* b, float* c, int M, int N, int K,
                         cudaStream_t stream);

torch::Tensor naive_matmul_cuda(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "a and b must be CUDA tensors");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32,
                "this kernel takes float32 tensors");
    TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0),
                "shapes must be (M, K) and (K, N)");
    a = a.contiguous();   // the kernel assumes row-major storage
    b = b.contiguous();
    auto c = torch::empty({a.size(0), b.size(1)}, a.options());
    launch_naive_matmul(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(),
                        a.size(0), b.size(1), a.size(1), at::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();   // turns a failed launch into a Python exception
    return c;
}
"""


def cuda_c_problem() -> str | None:
    """Why CUDA C cannot be compiled and run here, or None when it can."""
    if not device.ON_GPU:
        return "interpreter mode: there is no GPU to run CUDA C on, and CUDA C has no CPU version"
    if torch.version.cuda is None:
        return "this PyTorch is not a CUDA build (torch.version.cuda is None)"
    if cpp_extension.CUDA_HOME is None:
        return ("no CUDA toolkit (nvcc) found: install the one matching torch.version.cuda "
                f"({torch.version.cuda}) or point CUDA_HOME at it")
    if not cpp_extension.is_ninja_available():
        return "load_inline needs ninja: pip install ninja"
    return None


def build_naive_matmul_cuda(body: str):
    """Compile CUDA_SOURCE with ``body`` as the kernel's body; return naive_matmul_cuda(a, b).
    Building again with unchanged sources in the same Python process reuses the first build.
    A body that could reach outside the kernel (close its braces, #include, inline asm) is refused:
    the compiled code runs in this Python process."""
    problem = audit.cuda_body_problem(body)
    if problem:
        raise ValueError(problem)
    module = cpp_extension.load_inline(
        name="tilegym_naive_matmul_cuda", cpp_sources=CPP_SOURCE,
        cuda_sources=CUDA_SOURCE.replace("/* THE KERNEL BODY */", body),
        functions=["naive_matmul_cuda"], extra_cuda_cflags=["-O3"])
    return module.naive_matmul_cuda

# %% [markdown] id="cell-07"
# ## Exercise 1 (3 points, needs a GPU): the CUDA C kernel
#
# Write the body of `naive_matmul_kernel` (the signature is in `CUDA_SOURCE` above): work out `row`
# and `col` from `blockIdx`, `blockDim` and `threadIdx`, return early or skip the work when the
# thread is outside the $M \times N$ output, and otherwise loop over $k$, accumulating
# $a[\text{row}, k] \cdot b[k, \text{col}]$ in a `float`, and write the sum to $c[\text{row},
# \text{col}]$. `naive_matmul_cuda_body()` returns your CUDA C as a string: write it as `return r"""
# ... """`, statements only, without the braces of the function.
#
# The test compiles your kernel and checks it on non-square shapes that are not multiples of 16 (and
# on shapes it does not show you) against the float64 reference, to a relative error of $10^{-5}$.
# A failing check names the case, the seed, the relative error and the first wrong element; a body
# that does not compile fails with nvcc's error messages. Without a GPU the test says *needs GPU*
# and scores 0: there is nothing to run CUDA C on.
#
# The first build takes tens of seconds: it compiles PyTorch's headers too. If a build is
# interrupted (you restart the kernel while it compiles), the next one can wait forever for a lock
# file: delete the `tilegym_naive_matmul_cuda` folder under `~/.cache/torch_extensions` (or
# `$TORCH_EXTENSIONS_DIR`).

# %% id="cell-08" nbgrader={"grade": false, "grade_id": "cuda_kernel_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def naive_matmul_cuda_body() -> str:
    """The body of naive_matmul_kernel(a, b, c, M, N, K) in CUDA C: the statements between its
    braces. a is (M, K), b is (K, N), c is (M, N), all float32 and row-major; one thread per
    element of c, in 16 x 16 blocks (x along the columns of c, y down its rows)."""
    ### BEGIN SOLUTION
    return r"""
    // the element of c this thread owns
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {                          // the grid overhangs the matrix
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += a[row * K + k] * b[k * N + col];
        }
        c[row * N + col] = acc;
    }
"""
    ### END SOLUTION

# %% [markdown] id="cell-09"
# Compile it and check it against PyTorch on a shape that is neither square nor a multiple of 16. On
# a GPU the cell prints how long the build took; in interpreter mode it says why it skips.

# %% id="cell-10" nbgrader={"grade": false, "grade_id": "cuda_build", "locked": true, "schema_version": 3, "solution": false, "task": false}
naive_matmul_cuda = None
CUDA_C_PROBLEM = cuda_c_problem()
if CUDA_C_PROBLEM:
    print(f"skipping the CUDA C kernel: {CUDA_C_PROBLEM}")
else:
    start = time.perf_counter()
    naive_matmul_cuda = build_naive_matmul_cuda(naive_matmul_cuda_body())
    print(f"built in {time.perf_counter() - start:.1f} s")
    a = torch.randn(1000, 513, device=DEVICE)
    b = torch.randn(513, 777, device=DEVICE)
    print("relative error vs torch.matmul:", check.relative_error(naive_matmul_cuda(a, b), a @ b))

# %% id="cell-11" nbgrader={"grade": true, "grade_id": "test_cuda_kernel", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Exercise 1: the CUDA C kernel is correct on non-square shapes that are not multiples of 16
# (GPU only).
grading.require_gpu("the CUDA C exercise")
if cuda_c_problem():
    raise RuntimeError(f"cannot build CUDA C on this machine: {cuda_c_problem()}")
kernel = build_naive_matmul_cuda(naive_matmul_cuda_body())
cases = [{"M": M, "N": N, "K": K, "dtype": torch.float32}
         for M, N, K in [(1, 1, 1), (17, 33, 5), (64, 31, 130), (3, 100, 17)]]
grading.assert_correct(kernel, matmul_reference, make_matmul_inputs, cases,
                       tolerances={torch.float32: 1e-5})
### BEGIN HIDDEN TESTS
hidden_cases = [{"M": M, "N": N, "K": K, "dtype": torch.float32}
                for M, N, K in [(1000, 777, 513), (33, 1, 1000), (1, 257, 16), (129, 130, 1)]]
grading.assert_correct(kernel, matmul_reference, make_matmul_inputs, hidden_cases, seeds=(11,),
                       tolerances={torch.float32: 1e-5})
### END HIDDEN TESTS

# %% [markdown] id="cell-12"
# ## 2. The same algorithm in Triton
#
# Triton's unit of work is not a thread but a **program**: one instance of the kernel, which the
# compiler runs on a whole block of threads (`num_warps` warps of 32, four warps by default) and
# whose operations act on blocks of values. The literal translation of the CUDA kernel, one program
# per output element with a scalar loop over $k$, would look like this (do not run it):
#
# ```python
# m, n = tl.program_id(0), tl.program_id(1)
# acc = 0.0
# for k in range(0, K):                          # one element per iteration
#     a = tl.load(a_ptr + m * stride_am + k * stride_ak)
#     acc += a * tl.load(b_ptr + k * stride_bk + n * stride_bn)
# ```
#
# It is correct, and it is a bad idea in both of the course's modes:
#
# * **On a GPU**, each of those scalar loads and multiply-adds occupies a whole block of threads
#   that has nothing else to do: the block does the work of one CUDA thread. On an H200 this version
#   ran at 0.048 TFLOP/s (fp16, 1024³), while the naive CUDA C kernel of section 1, one *thread* per
#   output element, ran at 5.3 to 5.5 TFLOP/s (fp32, at 1000 × 777 × 513 and at 4096³; 0.10x
#   cuBLAS): about 100 times faster (docs/results/h200.md, 2026-11-29).
# * **In the interpreter**, cost goes by operations executed, not by elements, so one step per
#   element is ruinous: a 64³ product took 268 s on two CPU cores.
#
# So we **vectorise over $K$**: each program loads `BLOCK_K` elements of its row of $A$ and of its
# column of $B$ at once, multiplies them lane by lane into a `BLOCK_K`-long float32 accumulator, and
# sums the lanes at the end. That gives the program's threads work to share and cuts the loop to
# $\lceil K / \texttt{BLOCK\_K} \rceil$ steps. It is still *naive*: every output is computed on its
# own, and no element loaded by one program is reused by another, so it moves exactly as many bytes
# as the scalar version. On an H200 it ran at 0.24 TFLOP/s at 1024³, in fp16 and fp32 alike
# (docs/results/h200.md, 2026-11-29): five times the scalar version, and still roughly twenty times
# slower than the CUDA kernel. Each block of threads still computes one output element, against 256
# per block in the CUDA kernel: section 5 shows what that costs on your GPU.
#
# ## Exercise 2 (4 points): the naive matmul in Triton
#
# Write `naive_matmul_kernel` and its wrapper `naive_matmul(a, b, block_k=64)`:
#
# * **Grid** `(M, N)`: program `(tl.program_id(0), tl.program_id(1)) = (m, n)` computes $c[m, n]$.
# * **Strides, not shapes, locate elements**: $a[m, k]$ is at `a_ptr + m * stride_am + k *
#   stride_ak`, and likewise for $b$ and $c$. The wrapper passes `a.stride(0), a.stride(1)` and so
#   on, so transposed views work without a copy. The grader passes transposed views.
# * **Loop** over $k$ in steps of `BLOCK_K` with `offs_k = k0 + tl.arange(0, BLOCK_K)`, and **mask**
#   the loads with `offs_k < K` (`other=0.0`), so the last, partial step adds nothing past the end
#   of $K$.
# * **Accumulate in float32** (`.to(tl.float32)` after each load), reduce with `tl.sum(acc,
#   axis=0)`, and store in the output's dtype (`c_ptr.dtype.element_ty`).
# * The wrapper takes `a` of shape $(M, K)$ and `b` of shape $(K, N)$, both float32 or both float16,
#   with any strides, allocates $C$ of shape $(M, N)$ in their dtype, launches the kernel and
#   returns $C$.
#
# The grader checks shapes that are not square, not multiples of `BLOCK_K`, and degenerate ($M = 1$,
# $N = 1$, $K = 1$), in float32 and float16, on several seeds and on shapes it does not show you. A
# float32 result must be within $10^{-5}$ of the reference (relative error), which a float32
# accumulator reaches with room to spare; float16 results within $3 \cdot 10^{-3}$. As in lesson 00,
# PyTorch may only allocate, view and copy during grading (`torch.matmul` or `@` fails the
# exercise), and fresh allocations are filled with NaN. Keep the grid small while you experiment in
# interpreter mode: every program costs milliseconds.

# %% id="cell-13" nbgrader={"grade": false, "grade_id": "naive_matmul_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
# include: tilegym_edu/reference/matmul.py naive_matmul_kernel solution


# include: tilegym_edu/reference/matmul.py naive_matmul solution

# %% [markdown] id="cell-14"
# Check it before timing it. The checker is the one the grader uses; each line names the case, its
# relative error, and what went wrong if anything did.

# %% id="cell-15" nbgrader={"grade": false, "grade_id": "naive_matmul_checker", "locked": true, "schema_version": 3, "solution": false, "task": false}
for result in check.check(naive_matmul, matmul_reference, make_matmul_inputs, seeds=[0], cases=[
        {"M": 5, "N": 7, "K": 100, "dtype": torch.float32},
        {"M": 3, "N": 4, "K": 9, "dtype": torch.float16, "layout": "a transposed"}]):
    print(result.describe())

# %% id="cell-16" nbgrader={"grade": true, "grade_id": "test_naive_matmul_correct", "locked": true, "points": 4, "schema_version": 3, "solution": false, "task": false}
# Exercise 2: naive_matmul is correct on odd, non-square and degenerate shapes, fp32 and fp16,
# contiguous and transposed inputs.
shapes = [(1, 1, 1), (1, 9, 70), (7, 1, 33), (6, 5, 1), (9, 11, 130)]   # (M, N, K)
cases = [{"M": M, "N": N, "K": K, "dtype": dtype}
         for M, N, K in shapes for dtype in (torch.float32, torch.float16)]
cases += [{"M": 5, "N": 7, "K": 90, "dtype": dtype, "layout": layout}
          for dtype in (torch.float32, torch.float16)
          for layout in ("a transposed", "b transposed")]
grading.assert_correct(naive_matmul, matmul_reference, make_matmul_inputs, cases, seeds=(0, 1),
                       tolerances={torch.float32: 1e-5})
### BEGIN HIDDEN TESTS
hidden_shapes = [(3, 17, 65), (16, 2, 129), (2, 3, 64), (13, 4, 7)] + device.size(
    gpu=[(300, 257, 1000), (1, 1025, 3)], cpu=[])
hidden_cases = [{"M": M, "N": N, "K": K, "dtype": dtype}
                for M, N, K in hidden_shapes for dtype in (torch.float32, torch.float16)]
hidden_cases += [{"M": 4, "N": 3, "K": 66, "dtype": torch.float16, "layout": "a transposed"},
                 {"M": 2, "N": 6, "K": 1, "dtype": torch.float32, "layout": "b transposed"}]
grading.assert_correct(naive_matmul, matmul_reference, make_matmul_inputs, hidden_cases, seeds=(7,),
                       tolerances={torch.float32: 1e-5})
### END HIDDEN TESTS

# %% [markdown] id="cell-17"
# ## 3. Why it is slow, measured
#
# **What the problem costs.** $2MNK$ FLOPs. The fewest bytes it must move through global memory are
# one read of each input and one write of the output: $(MK + KN + MN)\,e$ for elements of $e$ bytes.
# Their ratio, the problem's *arithmetic intensity*, grows with the matrices: for $M = N = K = n$ it
# is $2n^3 / (3n^2 e) = 2n / (3e)$ FLOP per byte. A problem is *compute-bound* on a GPU when its
# intensity is above the GPU's *ridge point* (peak FLOP/s divided by bandwidth: where lesson 00's
# two roofs meet). The cell below prints both for this lesson's size. On an H200 at 1024³ the
# intensity is 12 times the ridge point in fp32 and 1.7 times in fp16: a matmul this large is
# compute-bound, so a good kernel is limited by arithmetic, not by memory.

# %% id="cell-18" tags=["demo"]
M = N = K = device.size(gpu=1024, cpu=12)
flops = 2 * M * N * K
spec, _ = roofline.resolve_spec()
print(f"M = N = K = {M}: {flops:,} FLOPs")
for dtype, peak in ((torch.float32, spec.fp32_tflops), (torch.float16, spec.fp16_tflops)):
    e = torch.empty(0, dtype=dtype).element_size()
    least = (M * K + K * N + M * N) * e
    ridge = roofline.ridge_point(peak, spec.memory_bandwidth_gbs)
    print(f"{str(dtype):>13}: at least {least:,} bytes, intensity {flops / least:,.1f} FLOP/byte; "
          f"ridge point of the {spec.name}: {ridge:.0f} FLOP/byte")

# %% [markdown] id="cell-19"
# **What the kernel achieves.** Now time the naive Triton kernel against `torch.matmul`, which calls
# cuBLAS on an NVIDIA GPU (with TF32, a faster fp32 mode of lower precision, off: PyTorch's default,
# so fp32 means full fp32), at the size above in fp32 and fp16. `bench.compare` interleaves the
# runs, flushes the L2 cache before each one and reports medians. TFLOP/s come from the $2MNK$
# FLOPs; GB/s from the fewest bytes, so that kernels are compared on the same work. On the roofline
# the points sit at the problem's intensity; in interpreter mode the times are the CPU
# interpreter's and the points are drawn hollow at the roof.

# %% id="cell-20" tags=["demo"]
a32, b32 = make_matmul_inputs({"M": M, "N": N, "K": K, "dtype": torch.float32},
                              torch.Generator().manual_seed(0))
a16, b16 = a32.half(), b32.half()
least_bytes = {f"{kind} {name}": (M * K + K * N + M * N) * e
               for kind in ("naive Triton", "torch.matmul")
               for name, e in (("fp32", 4), ("fp16", 2))}
slow = bench.compare({"naive Triton fp32": lambda: naive_matmul(a32, b32),
                      "torch.matmul fp32": lambda: a32 @ b32,
                      "naive Triton fp16": lambda: naive_matmul(a16, b16),
                      "torch.matmul fp16": lambda: a16 @ b16},
                     flops=flops, bytes=least_bytes)
bench.print_table(slow, baseline="torch.matmul fp32")
roofline.plot_roofline(slow);

# %% [markdown] id="cell-21"
# On a GPU the naive kernel lands orders of magnitude below the compute roof above it: the problem
# could be compute-bound, the kernel is nowhere near it. Two things are missing. The first is
# **reuse**: the program computing $c[m, n]$ loads row $m$ of $A$ and column $n$ of $B$ from global
# memory, the program computing $c[m, n+1]$ loads the same row again, and so does every other
# program of row $m$. The roofline's point assumes each element is read once; the next section
# counts what the kernel really asks for. The second is **tensor cores**: cuBLAS fp16 runs on the
# GPU's matrix units, and an elementwise multiply followed by a sum never will (lesson 02's `tl.dot`
# does).
#
# ## 4. Memory traffic, counted
#
# `count_traffic(fn, *args)` runs the Triton kernels that `fn` launches in the interpreter (on a GPU
# too) and adds up, over every program, the bytes of every `tl.load` and `tl.store`; lanes that a
# mask switches off move nothing. That is the traffic the kernel *requests* from global memory if no
# cache helps. Here it is for your kernel on a small problem, with two block sizes:

# %% id="cell-22"
a, b = make_matmul_inputs({"M": 5, "N": 7, "K": 100, "dtype": torch.float32},
                          torch.Generator().manual_seed(0))
for block_k in (64, 128):
    t = count_traffic(naive_matmul, a, b, block_k)
    print(f"BLOCK_K = {block_k:3}: {t.programs} programs loaded {t.loaded_bytes:,} bytes "
          f"and stored {t.stored_bytes:,} bytes")
print(f"a, b and c together hold {(5 * 100 + 100 * 7 + 5 * 7) * 4:,} bytes")

# %% [markdown] id="cell-23"
# ## Exercise 3 (2 points): the naive kernel's traffic as a formula
#
# Write `naive_traffic(M, N, K, element_size)`: the bytes the naive kernel loads and the bytes it
# stores, over the whole grid, for inputs and output of `element_size` bytes per element, as
# `count_traffic` counts them, returned as a tuple of two ints `(loaded, stored)`. Think per program
# first (what does program $(m, n)$ load, and does `BLOCK_K` change it?), then multiply by the
# number of programs. The test checks your formula on the shapes in the cell and on shapes it does
# not show you, against `count_traffic` of the course's reference kernel; a failure prints your
# tuple next to the expected one.

# %% id="cell-24" nbgrader={"grade": false, "grade_id": "naive_traffic_solution", "locked": false, "schema_version": 3, "solution": true, "task": false}
def naive_traffic(M: int, N: int, K: int, element_size: int) -> tuple[int, int]:
    """(bytes loaded, bytes stored) by the naive kernel for a (M, K) @ (K, N) product."""
    ### BEGIN SOLUTION
    loaded = M * N * 2 * K * element_size    # every program reads a row of a and a column of b
    stored = M * N * element_size            # and writes one element of c
    return loaded, stored
    ### END SOLUTION

# %% id="cell-25" nbgrader={"grade": true, "grade_id": "test_naive_traffic", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Exercise 3: naive_traffic matches what the naive kernel loads and stores.
for args, expected in [((64, 32, 16, 4), (262_144, 8_192)), ((1, 1, 1, 2), (4, 2))]:
    got = grading.formula_answer(naive_traffic, *args)
    assert got == expected, f"naive_traffic{args} = {got}, expected {expected}"
### BEGIN HIDDEN TESTS
# imported here, in the hidden tests, so that the learner's notebook never holds the reference
from tilegym_edu.reference.matmul import naive_matmul as reference_naive_matmul  # noqa: E402
for m_, n_, k_, dtype in [(3, 5, 7, torch.float32), (1, 4, 130, torch.float16),
                          (6, 1, 65, torch.float32), (2, 3, 1, torch.float16)]:
    a_, b_ = make_matmul_inputs({"M": m_, "N": n_, "K": k_, "dtype": dtype},
                                torch.Generator().manual_seed(3))
    counted = count_traffic(reference_naive_matmul, a_, b_)
    expected = (counted.loaded_bytes, counted.stored_bytes)
    got = grading.formula_answer(naive_traffic, m_, n_, k_, a_.element_size())
    assert got == expected, \
        f"naive_traffic({m_}, {n_}, {k_}, {a_.element_size()}) = {got}, counted {expected}"
# shapes drawn afresh at every grading, from a range no one could count ahead (the counted
# cases above agree with this rule: each output element reads a row of a and a column of b)
for m_, n_, k_, e_ in grading.drawn_cases(lambda rng: (rng.randint(1, 8192), rng.randint(1, 8192),
                                                      rng.randint(1, 8192), rng.choice([2, 4])), 3):
    expected = (2 * m_ * n_ * k_ * e_, m_ * n_ * e_)
    got = grading.formula_answer(naive_traffic, m_, n_, k_, e_)
    assert got == expected, f"naive_traffic({m_}, {n_}, {k_}, {e_}) = {got}, expected {expected}"
### END HIDDEN TESTS
print("naive_traffic matches the counted traffic")

# %% [markdown] id="cell-26"
# **What the algorithm needs against what the naive kernel asks for.** Your formula against the
# fewest bytes, $(MK + KN + MN)\,e$, at a few sizes in fp32. The ratio says how many times, on
# average, the naive kernel fetches each byte the problem needs: about $2n/3$ for square
# $n \times n$ matrices (each input element $n$ times, each output element once).

# %% id="cell-27" tags=["demo"]
print(f"{'M x N x K':>18}  {'naive kernel (bytes)':>22}  {'at least (bytes)':>18}  {'ratio':>7}")
for M_, N_, K_ in [(5, 7, 100), (1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 512)]:
    loaded, stored = naive_traffic(M_, N_, K_, 4)
    least = (M_ * K_ + K_ * N_ + M_ * N_) * 4
    shape = f"{M_} x {N_} x {K_}"
    print(f"{shape:>18}  {loaded + stored:>22,}  {least:>18,}  {(loaded + stored) / least:>6.0f}x")

intensity = 2 * 1024**3 / sum(naive_traffic(1024, 1024, 1024, 4))
ceiling = roofline.attainable_tflops(intensity, spec.fp32_tflops, spec.memory_bandwidth_gbs)
print(f"\nrequested traffic at 1024^3 fp32: {intensity:.3f} FLOP per byte; "
      f"if every byte came from DRAM, the {spec.name} could not exceed {ceiling:.2f} TFLOP/s")

# %% [markdown] id="cell-28"
# At 1024³ in fp32 the naive kernel asks for about 680 times the bytes the problem needs: two
# elements for every multiply-add (two FLOPs), an intensity of $1/e$ FLOP per byte. If all of them
# came from DRAM, the roofline would cap it at $0.25 \times 4{,}800$ GB/s $= 1.2$ TFLOP/s on an
# H200's datasheet. Yet on an H200 the naive CUDA C kernel ran at 5.06 TFLOP/s at this size
# (docs/results/h200.md, 2026-11-29). That is not a measurement error: neighbouring threads ask for
# the same elements at nearly the same time (the 16 threads of a block row share an element of $A$
# per step, the 16 of a block column an element of $B$), and the L1 and L2 caches serve those
# repeats without going to DRAM. The caches do some of the reuse the kernel never organised, as
# far as they happen to hold the data. Lesson 02 organises it: that ratio is what it attacks.
#
# ## 5. Compare: naive Triton, naive CUDA C and cuBLAS
#
# Every lesson ends with its kernels next to the vendor library. All versions are timed interleaved
# in one process on the same inputs; the CUDA C kernel only where it could be built. On a GPU, the
# ladder chart shows each version's TFLOP/s on a log scale and its speedup over the first.

# %% id="cell-29" tags=["demo"]
candidates = {"naive Triton fp32": lambda: naive_matmul(a32, b32)}
if naive_matmul_cuda is not None:
    candidates["naive CUDA C fp32"] = lambda: naive_matmul_cuda(a32, b32)
    least_bytes["naive CUDA C fp32"] = least_bytes["naive Triton fp32"]
candidates.update({"torch.matmul fp32": lambda: a32 @ b32,
                   "naive Triton fp16": lambda: naive_matmul(a16, b16),
                   "torch.matmul fp16": lambda: a16 @ b16})
results = bench.compare(candidates, flops=flops, bytes=least_bytes)
bench.print_table(results, baseline="torch.matmul fp32")
if device.ON_GPU:
    roofline.plot_ladder([m for m in results if m.name != "naive Triton fp16"],
                         title=f"Naive matmul against cuBLAS, {M} x {N} x {K}")
roofline.plot_roofline(results);

# %% [markdown] id="cell-30"
# Read the table from the top. The naive Triton kernel and the naive CUDA C kernel do the same
# arithmetic and ask for the same bytes, yet on a GPU the CUDA kernel is the faster one by a wide
# margin (your table says how wide). Each block of threads of the CUDA kernel produces 256 outputs.
# Each block of the Triton kernel produces one, and pays for that one number with its own start, its
# own address arithmetic and a reduction of a `BLOCK_K`-wide vector across its threads. "Naive"
# means different things in the two languages, and a speedup is only meaningful next to the name of
# the kernel it was measured against. Both are far from cuBLAS, in fp32 and even more in fp16, where
# cuBLAS uses the tensor cores.
#
# ## What comes next
#
# The naive kernel computes each output on its own, so it reads every input element about $n$ times
# where once would do. Lesson 02 gives each program a **tile** of $C$, `BLOCK_M` × `BLOCK_N`
# outputs: each block of $A$ it loads serves `BLOCK_N` outputs and each block of $B$ serves
# `BLOCK_M`, so the bytes requested fall by those factors, the arithmetic moves onto the tensor
# cores with `tl.dot`, and a *grouped* launch order makes programs that run together share tiles in
# L2. On an H200 the course's tiled kernel was 627 times faster than this lesson's naive Triton
# kernel at 1024³ in fp16, and reached 0.79x cuBLAS at 4096³ (benchmarks/matmul.py, 2026-11-29;
# docs/results/h200.md).
