"""Matmul for a few rows (a decoding step's): every SM streaming its share of b, and the K
ranges' partial sums added by the last program to finish, in the same launch.

Why: a decoding step multiplies one token per sequence (M = 1 to 16 rows) by the model's
weights. Such a product does 2 FLOPs per weight it reads, so its time is the time to read b:
on the H200 cuBLAS read the capstone's weights at 1.2-3.0 TB/s (docs/results/h200.md). Lesson
03's kernels cover the output with 128-row tiles, so an (M = 1, N = 2048) output is 16 tiles:
16 programs on 132 SMs, each walking all of K alone, and they read b at 0.2-0.7 TB/s.
This kernel takes BLOCK_M = 16 rows (M at most 16: the rest are masked), BLOCK_N columns and
one of SPLIT_K ranges of K per program, so (N / BLOCK_N) x SPLIT_K programs share the
reading. Each writes its float32 partial (BLOCK_M x BLOCK_N) to scratch memory and counts
itself in that column block's counter; the program that counts last adds the block's partials,
in a fixed order (split 0 first: the result does not depend on scheduling), writes c and sets
the counter back to zero for the next call. One launch, no second reduction kernel: at a few
microseconds a product, a launch is a large part of the bill. On the H200, tuned, it ran the
capstone's decoding products at 0.92-1.17x cuBLAS, 1.2-3.1 TB/s
(docs/results/h200-2026-12-02-decode.md).

Shapes: ``a`` (M, K), M <= 16, ``b`` (K, N), any strides; c (M, N) in a's dtype, accumulated in
float32.
"""
import torch
import triton
import triton.language as tl

from tilegym_edu.grading import forbidden_in_graded_calls
from tilegym_edu.reference.counters import arrival_counters
from tilegym_edu.reference.pipelined import ELEMENT_BYTES, matmul_shared_bytes
from tilegym_edu.tune import Config, SearchSpace, configs_from_rows

#: the most rows the kernel takes: the smallest tile tl.dot multiplies
SKINNY_ROWS = 16


@triton.jit
def skinny_matmul_kernel(a_ptr, b_ptr, c_ptr, partial_ptr, count_ptr, M, N, K, K_PER_SPLIT,
                         stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr):
    """c = a @ b for M <= 16 rows: program (column block program_id(0), K range
    program_id(1)) multiplies the (16, K_PER_SPLIT) slice of a by the (K_PER_SPLIT, BLOCK_N)
    block of b in float32. With SPLIT_K = 1 it writes its block of c; otherwise it writes the
    block to partial (SPLIT_K, 16, N) float32 and counts itself in count_ptr[column block]
    (int32, zero between calls); the last of the SPLIT_K programs to count adds the partials
    (split 0 first), writes c and resets the count to zero."""
    BLOCK_M: tl.constexpr = 16
    pid_n = tl.program_id(0)
    split = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok, n_ok = offs_m < M, offs_n < N
    k_start = split * K_PER_SPLIT
    k_len = tl.minimum(K - k_start, K_PER_SPLIT)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + (k_start + offs_k)[None, :] * stride_ak
    b_ptrs = b_ptr + (k_start + offs_k)[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(k_len, BLOCK_K)):
        k_ok = offs_k < k_len - k * BLOCK_K
        a = tl.load(a_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    c_mask = m_ok[:, None] & n_ok[None, :]
    if SPLIT_K == 1:
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)
    else:
        block = offs_m[:, None] * N + offs_n[None, :]          # this block in one partial
        tl.store(partial_ptr + split * BLOCK_M * N + block, acc, mask=c_mask)
        tl.debug_barrier()                     # every thread's partial stored before the count
        arrived = tl.atomic_add(count_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:             # the last of this column block's programs
            total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for s in range(SPLIT_K):
                total += tl.load(partial_ptr + s * BLOCK_M * N + block, mask=c_mask,
                                 other=0.0, cache_modifier=".cg")
            tl.store(c_ptrs, total.to(c_ptr.dtype.element_ty), mask=c_mask)
            tl.atomic_xchg(count_ptr + pid_n, 0, sem="relaxed", scope="gpu")


#: the hand-written configuration: 128 columns (256 bytes of each row of b), K in 4 ranges
SKINNY_DEFAULT = dict(BLOCK_N=128, BLOCK_K=128, SPLIT_K=4, num_warps=4, num_stages=4)

_NAMES = ("BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps", "num_stages")


def skinny_prune(config, problem, resources) -> str | None:
    """No more rows than the kernel takes, no K range shorter than two BLOCK_K steps, and
    stages that fit in shared memory (each holds a 16 x BLOCK_K tile of a and a BLOCK_K x
    BLOCK_N one of b)."""
    if problem["M"] > SKINNY_ROWS:
        return f"{problem['M']} rows: the skinny kernel takes at most {SKINNY_ROWS}"
    if config["SPLIT_K"] * 2 * config["BLOCK_K"] > max(problem["K"], 2 * config["BLOCK_K"]):
        return (f"K = {problem['K']} in {config['SPLIT_K']} ranges leaves fewer than two "
                f"steps of {config['BLOCK_K']} each")
    needed = matmul_shared_bytes({**config, "BLOCK_M": SKINNY_ROWS},
                                 ELEMENT_BYTES[str(problem["dtype"])])
    return resources.shared_memory_problem(needed) or None


#: level 1: column blocks of 64 to 256, K in 1 to 16 ranges, so that from a 2048-wide to a
#: 32000-wide output some configuration runs one to three programs per SM
SKINNY_SPACE = SearchSpace(
    default=Config(**SKINNY_DEFAULT),
    small=configs_from_rows(_NAMES, [
        (128, 128, 1, 4, 4), (128, 128, 2, 4, 4), (128, 128, 8, 4, 4), (64, 128, 4, 4, 4),
        (64, 128, 8, 4, 4), (64, 256, 8, 4, 3), (64, 128, 16, 4, 4), (128, 64, 16, 4, 4),
        (256, 64, 4, 8, 4), (256, 128, 1, 8, 3), (128, 256, 2, 8, 3), (32, 256, 8, 4, 3),
        (256, 64, 1, 8, 4), (64, 64, 16, 4, 5)]),
    grid={"BLOCK_N": (32, 64, 128, 256), "BLOCK_K": (64, 128, 256),
          "SPLIT_K": (1, 2, 4, 8, 16, 32), "num_warps": (4, 8), "num_stages": (3, 4, 5)},
    prune=skinny_prune, cap=80)

@forbidden_in_graded_calls
def skinny_matmul(a: torch.Tensor, b: torch.Tensor, config=None) -> torch.Tensor:
    """a @ b for a with at most 16 rows; ``config`` (a mapping) overrides SKINNY_DEFAULT
    (SPLIT_K is how many K ranges at most: fewer when K is short). Needs (SPLIT_K, 16, N)
    float32 of scratch memory when K is split."""
    (M, K), N = a.shape, b.shape[1]
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a is {tuple(a.shape)} and b {tuple(b.shape)}: a's columns must be "
                         "b's rows")
    if M > SKINNY_ROWS:
        raise ValueError(f"a has {M} rows: skinny_matmul takes at most {SKINNY_ROWS}; use "
                         "split_k.shape_matmul, which picks a kernel for any shape")
    options = {**SKINNY_DEFAULT, **(config or {})}
    block_k = options["BLOCK_K"]
    length = triton.cdiv(triton.cdiv(K, options["SPLIT_K"]), block_k) * block_k
    splits = max(1, triton.cdiv(K, length))
    options["SPLIT_K"] = splits
    blocks = triton.cdiv(N, options["BLOCK_N"])
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    partial = (torch.empty((splits, SKINNY_ROWS, N), device=a.device, dtype=torch.float32)
               if splits > 1 else c)
    skinny_matmul_kernel[(blocks, splits)](
        a, b, c, partial, arrival_counters(a.device, blocks), M, N, K, length, a.stride(0),
        a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), **options)
    return c


forbidden_in_graded_calls(skinny_matmul_kernel)
