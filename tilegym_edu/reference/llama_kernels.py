"""Lesson 06's fused kernels, and the model run on the course's reference kernels.

Three kernels, each a ``@triton.jit`` function and the wrapper that launches it: RMSNorm
(:func:`rmsnorm`), rotary embedding in place (:func:`rope_`) and SwiGLU (:func:`swiglu`). Each
is the worked solution of its lesson 06 exercise (the lesson includes it) and is checked against
its PyTorch definition in :mod:`tilegym_edu.reference.llama`. A fourth, :func:`add_rmsnorm`,
fuses the residual add into the norm after it (course machinery: no exercise).
:func:`reference_ops` is the :class:`~tilegym_edu.reference.llama.Ops` that runs the model on
them, on the reference matmuls of lesson 03 (and one with SwiGLU in its epilogue,
:mod:`~tilegym_edu.reference.fused_matmul`) and on lesson 04's flash attention. Inside a graded
call, a wrapper or a raw launch of its kernel raises LibraryShortcut.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from tilegym_edu import device
from tilegym_edu.grading import forbidden_in_graded_calls
from tilegym_edu.reference.llama import Ops
from tilegym_edu.tiles import next_power_of_2


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, n_cols, stride_x, stride_y, eps,
                   BLOCK: tl.constexpr):
    """y[row] = x[row] / sqrt(mean(x[row]^2) + eps) * w, one row per program: the row is read
    once, its mean square computed in float32 in registers, and written once."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    mean_sq = tl.sum(x * x, axis=0) / n_cols
    y = x * tl.rsqrt(mean_sq + eps) * w
    tl.store(y_ptr + row * stride_y + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@forbidden_in_graded_calls
def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm of each row of x (rows, dim) with weight (dim,), in one pass over x."""
    rows, n_cols = x.shape
    y = torch.empty((rows, n_cols), device=x.device, dtype=x.dtype)
    BLOCK = triton.next_power_of_2(n_cols)
    rmsnorm_kernel[(rows,)](x, weight, y, n_cols, x.stride(0), y.stride(0), eps,
                            BLOCK=BLOCK, num_warps=4 if BLOCK <= 2048 else 8)
    return y


@triton.jit
def add_rmsnorm_kernel(x_ptr, d_ptr, w_ptr, s_ptr, y_ptr, n_cols, stride_x, stride_d, stride_s,
                       stride_y, eps, BLOCK: tl.constexpr):
    """s[row] = x[row] + d[row] and y[row] = rmsnorm(s[row]) * w, one row per program: the
    residual add and the norm after it in one pass, x and d read once, s and y written once;
    the sum rounded to s's dtype before the norm, as an add and then rmsnorm_kernel would."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0)
    d = tl.load(d_ptr + row * stride_d + offs, mask=mask, other=0.0)
    total = (x + d).to(s_ptr.dtype.element_ty)
    tl.store(s_ptr + row * stride_s + offs, total, mask=mask)
    t = total.to(tl.float32)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = t * tl.rsqrt(tl.sum(t * t, axis=0) / n_cols + eps) * w
    tl.store(y_ptr + row * stride_y + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@forbidden_in_graded_calls
def add_rmsnorm(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor,
                eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(x + delta, RMSNorm(x + delta) with weight (dim,)) for x and delta (rows, dim), in one
    pass: the model's residual add and the norm that follows it (llama.add_and_norm)."""
    rows, n_cols = x.shape
    total = torch.empty((rows, n_cols), device=x.device, dtype=x.dtype)
    y = torch.empty((rows, n_cols), device=x.device, dtype=x.dtype)
    BLOCK = next_power_of_2(n_cols)
    add_rmsnorm_kernel[(rows,)](x, delta, weight, total, y, n_cols, x.stride(0), delta.stride(0),
                                total.stride(0), y.stride(0), eps, BLOCK=BLOCK,
                                num_warps=4 if BLOCK <= 2048 else 8)
    return total, y


@triton.jit
def rope_kernel(x_ptr, cos_ptr, sin_ptr, seq_len, heads,
                stride_xb, stride_xs, stride_xh, stride_cs,
                HALF: tl.constexpr, BLOCK_H: tl.constexpr):
    """Rotates, in place, every head of one token: program (s, b) of x (batch, seq, heads,
    2 * HALF). Element i of a head is paired with element i + HALF and the pair turned by the
    angle whose cos and sin are cos[s, i], sin[s, i]; math in float32."""
    s = tl.program_id(0)
    b = tl.program_id(1)
    offs_h = tl.arange(0, BLOCK_H)
    offs_d = tl.arange(0, HALF)
    mask = offs_h[:, None] < heads
    base = x_ptr + b * stride_xb + s * stride_xs + offs_h[:, None] * stride_xh + offs_d[None, :]
    x1 = tl.load(base, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(base + HALF, mask=mask, other=0.0).to(tl.float32)
    c = tl.load(cos_ptr + s * stride_cs + offs_d)[None, :]
    sn = tl.load(sin_ptr + s * stride_cs + offs_d)[None, :]
    tl.store(base, (x1 * c - x2 * sn).to(x_ptr.dtype.element_ty), mask=mask)
    tl.store(base + HALF, (x2 * c + x1 * sn).to(x_ptr.dtype.element_ty), mask=mask)


@forbidden_in_graded_calls
def rope_(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding applied to x (batch, seq, heads, head_dim) in place; x may be a strided
    view (last dimension contiguous); cos and sin are (>= seq, head_dim // 2) float32 with
    contiguous rows. Returns x."""
    batch, seq, heads, head_dim = x.shape
    if x.stride(-1) != 1 or cos.stride(-1) != 1 or sin.stride() != cos.stride():
        raise ValueError("x, cos and sin need a contiguous last dimension "
                         "(and cos, sin one layout)")
    rope_kernel[(seq, batch)](x, cos, sin, seq, heads, x.stride(0), x.stride(1), x.stride(2),
                              cos.stride(0), HALF=head_dim // 2,
                              BLOCK_H=triton.next_power_of_2(heads))
    return x


@triton.jit
def swiglu_kernel(h_ptr, y_ptr, n_cols, stride_h, stride_y, BLOCK: tl.constexpr):
    """y[row, j] = silu(h[row, j]) * h[row, n_cols + j]: the gate and up halves of one row of
    h read once each, y written once; program (row, column block)."""
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_cols
    gate = tl.load(h_ptr + row * stride_h + offs, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(h_ptr + row * stride_h + n_cols + offs, mask=mask, other=0.0).to(tl.float32)
    y = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(y_ptr + row * stride_y + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@forbidden_in_graded_calls
def swiglu(h: torch.Tensor, BLOCK: int = 1024) -> torch.Tensor:
    """silu(gate) * up for h (rows, 2 * hidden) = [gate | up]; returns (rows, hidden)."""
    rows, two_hidden = h.shape
    hidden = two_hidden // 2
    if h.stride(-1) != 1:
        raise ValueError("h needs a contiguous last dimension")
    y = torch.empty((rows, hidden), device=h.device, dtype=h.dtype)
    BLOCK = min(BLOCK, triton.next_power_of_2(hidden))
    swiglu_kernel[(rows, triton.cdiv(hidden, BLOCK))](h, y, hidden, h.stride(0), y.stride(0),
                                                      BLOCK=BLOCK)
    return y


def reference_ops(small_blocks: bool = not device.ON_GPU) -> Ops:
    """The model on the course's reference kernels: lesson 03's matmuls, lesson 04's
    `flash.flash_forward` tuned over FLASH_ORDER_SPACE (on the model's calls of 16 heads of one
    causal sequence its programs longest first: 46.5 µs a call on the H200 against cuDNN's 56.5
    and 63.7 in grid order, docs/results/h200.md, 2026-12-04), this lesson's kernels, the MLP's
    up-projection with SwiGLU in its epilogue (`fused_matmul.matmul_swiglu`) and flash decoding
    over a KV cache (`flash_decode`, the keys split across programs); in the interpreter with
    small blocks, so a forward pass takes seconds.
    On a GPU the matmuls are `split_k.shape_matmul`, which races lesson 03's paths and the
    skinny kernel per shape: a decoding step's few rows want K split, as lesson 03's section 7
    shows for a small output."""
    from tilegym_edu.reference import (attention, flash, flash_decode, fused_matmul, pipelined,
                                       split_k)
    from tilegym_edu.tune import Config
    small = Config(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=2) if small_blocks else None
    split_small = Config(**small, SPLITS=2) if small_blocks else None
    if small_blocks:
        def matmul(a, b):
            return pipelined.pipelined_matmul(a, b, dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32))

        def attn(q, k, v, causal=False):
            return attention.flash_attention(q, k, v, causal, config=small)

        def matmul_swiglu(h, w13):
            if fused_matmul.fused_problem(h, w13):       # float32: the small blocks, unfused
                return swiglu(matmul(h, w13))
            return fused_matmul.matmul_swiglu(h, w13, dict(
                BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=8, EPILOGUE_SPLIT=1, FLATTEN=False,
                num_warps=4, num_stages=2))
    else:
        matmul, matmul_swiglu = split_k.shape_matmul, fused_matmul.matmul_swiglu

        def attn(q, k, v, causal=False):
            return flash.flash_forward(q, k, v, causal, space=flash.FLASH_ORDER_SPACE)[0]

    def cached_attention(q, k, v):
        return flash_decode.flash_decode(q, k, v, causal=True, config=split_small)[0]
    return Ops(matmul=matmul, attention=attn, rmsnorm=rmsnorm, rope_=rope_, swiglu=swiglu,
               cached_attention=cached_attention, add_rmsnorm=add_rmsnorm,
               matmul_swiglu=matmul_swiglu)


__all__ = ["rmsnorm_kernel", "rmsnorm", "add_rmsnorm_kernel", "add_rmsnorm", "rope_kernel",
           "rope_", "swiglu_kernel", "swiglu", "reference_ops"]


# a launch of a raw kernel inside a graded call raises too
forbidden_in_graded_calls(rmsnorm_kernel)
forbidden_in_graded_calls(add_rmsnorm_kernel)
forbidden_in_graded_calls(rope_kernel)
forbidden_in_graded_calls(swiglu_kernel)
