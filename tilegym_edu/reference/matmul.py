"""Matmul kernels of lessons 01 and 02: naive (one program per output element) and tiled.

Shapes: ``a`` is (M, K), ``b`` is (K, N), the result (M, N), in the inputs' dtype (float16 or
float32) with float32 accumulation. Strides are passed explicitly, so transposed views work.
"""
import torch
import triton
import triton.language as tl

from tilegym_edu.grading import forbidden_in_graded_calls
from tilegym_edu.tiles import grouped_tile


@triton.jit
def naive_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                        BLOCK_K: tl.constexpr):
    """c[m, n] = sum_k a[m, k] * b[k, n]; program (m, n) computes that one element, reading a
    row of a and a column of b BLOCK_K elements at a time."""
    m = tl.program_id(0)
    n = tl.program_id(1)
    acc = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        mask = offs_k < K
        a = tl.load(a_ptr + m * stride_am + offs_k * stride_ak, mask=mask, other=0.0)
        b = tl.load(b_ptr + offs_k * stride_bk + n * stride_bn, mask=mask, other=0.0)
        acc += a.to(tl.float32) * b.to(tl.float32)
    c = tl.sum(acc, axis=0)
    tl.store(c_ptr + m * stride_cm + n * stride_cn, c.to(c_ptr.dtype.element_ty))


@forbidden_in_graded_calls
def naive_matmul(a: torch.Tensor, b: torch.Tensor, block_k: int = 64) -> torch.Tensor:
    """a @ b with one program per output element: a grid of M x N programs."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    naive_matmul_kernel[(M, N)](a, b, c, M, N, K, a.stride(0), a.stride(1),
                                b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                                BLOCK_K=block_k)
    return c


@triton.jit
def tiled_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        GROUP_M: tl.constexpr):
    """c = a @ b; each program computes one BLOCK_M x BLOCK_N tile of c, walking K in
    BLOCK_K steps with tl.dot. Programs are numbered in groups of GROUP_M tile rows so that
    programs running at the same time share tiles of a and b in L2."""
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
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


@forbidden_in_graded_calls
def tiled_matmul(a: torch.Tensor, b: torch.Tensor, block_m: int = 128, block_n: int = 128,
                 block_k: int = 32, group_m: int = 8, num_warps: int = 4) -> torch.Tensor:
    """a @ b with one program per BLOCK_M x BLOCK_N tile of the output. Use blocks of 16 to 32
    in interpreter mode, where each program costs milliseconds."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)
    tiled_matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1),
                              b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                              BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                              GROUP_M=group_m, num_warps=num_warps)
    return c


# a launch of a raw kernel inside a graded call raises too
forbidden_in_graded_calls(naive_matmul_kernel)
forbidden_in_graded_calls(tiled_matmul_kernel)
