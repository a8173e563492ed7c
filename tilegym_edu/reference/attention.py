"""Kernels of lesson 04: a fused row softmax and the FlashAttention forward pass.

Attention shapes: ``q``, ``k``, ``v`` and the output are (batch, heads, seq, head_dim), any
strides, float16 or float32 (bfloat16 on a GPU), head_dim a power of two from 16 to 128;
the scores softmax(q @ k^T * scale) are computed in float32 and never written to memory.
"""
import math

import torch
import triton
import triton.language as tl

from tilegym_edu.grading import forbidden_in_graded_calls
from tilegym_edu.tune import Config, SearchSpace, autotune, configs_from_rows

#: log2(e): exp(x) = exp2(x * LOG2E), and exp2 is the GPU's native instruction
LOG2E = 1.4426950408889634
#: the longest row the one-block softmax takes; longer rows need the online softmax
MAX_SOFTMAX_COLS = 65536


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    """y[row] = softmax(x[row]) for the row this program owns: one read of x, one write of y.
    BLOCK >= n_cols holds the whole row; the row maximum is subtracted before exp, so large
    inputs cannot overflow; arithmetic in float32."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    numerator = tl.exp(x)
    y = numerator / tl.sum(numerator, axis=0)
    tl.store(y_ptr + row * stride_y + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@forbidden_in_graded_calls
def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension of a 2-D tensor (rows, cols), same dtype as x."""
    if x.dim() != 2:
        raise ValueError(f"softmax takes a 2-D tensor (rows, cols), got shape {tuple(x.shape)}")
    rows, cols = x.shape
    if cols > MAX_SOFTMAX_COLS:
        raise ValueError(f"rows of {cols} elements do not fit one block (at most "
                         f"{MAX_SOFTMAX_COLS}): use the online softmax")
    y = torch.empty_like(x)
    block = triton.next_power_of_2(cols)
    num_warps = 4 if block <= 2048 else 8 if block <= 8192 else 16
    softmax_kernel[(rows,)](x, y, cols, x.stride(0), y.stride(0), BLOCK=block,
                            num_warps=num_warps)
    return y


@triton.jit
def attention_blocks(acc, l_i, m_i, q, k_ptr, v_ptr, stride_kn, stride_vn, offs_m, offs_n,
                     offs_d, lo, hi, seq_len, qk_scale,
                     BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """Fold key/value blocks lo, lo + BLOCK_N, ... < hi into the running state of one query
    block: acc (BLOCK_M, HEAD_DIM) the unnormalised output, l_i the running sum of
    exponentials, m_i the running maximum (in log2 units). MASKED blocks mask keys past
    seq_len and, if CAUSAL, keys after the query; unmasked blocks skip that work."""
    for start_n in tl.range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        if MASKED:
            k = tl.load(k_ptr + cols[:, None] * stride_kn + offs_d[None, :],
                        mask=cols[:, None] < seq_len, other=0.0)
        else:
            k = tl.load(k_ptr + cols[:, None] * stride_kn + offs_d[None, :])
        qk = tl.dot(q, tl.trans(k)) * qk_scale
        if MASKED:
            valid = cols[None, :] < seq_len
            if CAUSAL:
                valid = valid & (offs_m[:, None] >= cols[None, :])
            qk = tl.where(valid, qk, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.math.exp2(qk - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if MASKED:
            v = tl.load(v_ptr + cols[:, None] * stride_vn + offs_d[None, :],
                        mask=cols[:, None] < seq_len, other=0.0)
        else:
            v = tl.load(v_ptr + cols[:, None] * stride_vn + offs_d[None, :])
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def flash_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr,
                           stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
                           stride_vb, stride_vh, stride_vs, stride_ob, stride_oh, stride_os,
                           H, seq_len, qk_scale,
                           HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """o = softmax(q k^T * scale) v for one BLOCK_M block of queries of one (batch, head):
    program (i, b * H + h). Keys and values stream through in BLOCK_N blocks with the online
    softmax; the seq x seq scores never leave the chip. Last dimension contiguous (stride 1).
    Blocks that need no mask run without one; causal attention stops at the diagonal and
    masks only the blocks it crosses (BLOCK_M must be a multiple of BLOCK_N)."""
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    q_ptr += b * stride_qb + h * stride_qh
    k_ptr += b * stride_kb + h * stride_kh
    v_ptr += b * stride_vb + h * stride_vh
    o_ptr += b * stride_ob + h * stride_oh
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + offs_m[:, None] * stride_qs + offs_d[None, :],
                mask=offs_m[:, None] < seq_len, other=0.0)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    m_i = tl.full((BLOCK_M,), -float("inf"), dtype=tl.float32)
    if CAUSAL:
        unmasked_end = start_m * BLOCK_M
        end = tl.minimum((start_m + 1) * BLOCK_M, seq_len)
    else:
        unmasked_end = (seq_len // BLOCK_N) * BLOCK_N
        end = seq_len
    acc, l_i, m_i = attention_blocks(acc, l_i, m_i, q, k_ptr, v_ptr, stride_ks, stride_vs,
                                     offs_m, offs_n, offs_d, 0, unmasked_end, seq_len,
                                     qk_scale, BLOCK_N, False, CAUSAL)
    acc, l_i, m_i = attention_blocks(acc, l_i, m_i, q, k_ptr, v_ptr, stride_ks, stride_vs,
                                     offs_m, offs_n, offs_d, unmasked_end, end, seq_len,
                                     qk_scale, BLOCK_N, True, CAUSAL)
    out = acc / l_i[:, None]
    tl.store(o_ptr + offs_m[:, None] * stride_os + offs_d[None, :],
             out.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < seq_len)


def check_attention_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Raise ValueError, saying what to change, unless q, k, v can go to the kernel."""
    if q.dim() != 4:
        raise ValueError(f"q must be (batch, heads, seq, head_dim), got shape {tuple(q.shape)}")
    if k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"q, k, v must have one shape; got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if not q.dtype == k.dtype == v.dtype:
        raise ValueError(f"q, k, v must have one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"attention takes float16, bfloat16 or float32, not {q.dtype}")
    if not q.device == k.device == v.device:
        raise ValueError(f"q, k, v are on {q.device}, {k.device}, {v.device}: "
                         "move them to one device")
    head_dim = q.shape[-1]
    if head_dim not in (16, 32, 64, 128):
        raise ValueError(f"head_dim must be 16, 32, 64 or 128 (a tl.arange size), not {head_dim}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.stride(-1) != 1:
            raise ValueError(f"{name}'s last dimension must be contiguous: "
                             f"pass {name}.contiguous()")


def attention_problem(q: torch.Tensor, causal: bool) -> dict[str, object]:
    """What the best configuration depends on."""
    batch, heads, seq, head_dim = q.shape
    return {"batch": batch, "heads": heads, "seq": seq, "head_dim": head_dim,
            "dtype": str(q.dtype).removeprefix("torch."), "causal": causal}


def attention_prune(config, problem, resources) -> str | None:
    """Reject tiles that overflow shared memory (q, and num_stages copies of a k and a v
    block) or whose float32 accumulator and scores take more than 192 registers a thread;
    causal attention needs BLOCK_M to be a multiple of BLOCK_N."""
    d = problem["head_dim"]
    elem = 4 if problem["dtype"] == "float32" else 2
    bm, bn = config["BLOCK_M"], config["BLOCK_N"]
    shared = (bm * d + config["num_stages"] * 2 * bn * d) * elem
    if shared > resources.shared_bytes:
        return (f"needs {shared // 1024} KiB of shared memory, "
                f"the GPU offers {resources.shared_bytes // 1024} KiB")
    registers = (bm * d + bm * bn) // (32 * config["num_warps"])
    if registers > 192:
        return f"accumulator and scores take {registers} registers per thread (over 192)"
    if problem["causal"] and bm % bn:
        return "causal attention needs BLOCK_M to be a multiple of BLOCK_N"
    return None


_NAMES = ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")
ATTENTION_DEFAULT = dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)
ATTENTION_SPACE = SearchSpace(
    default=Config(**ATTENTION_DEFAULT),
    small=configs_from_rows(_NAMES, [(128, 128, 8, 3), (128, 64, 4, 3), (128, 32, 4, 4),
                                     (64, 64, 4, 3), (64, 32, 4, 4)]),
    grid={"BLOCK_M": (64, 128, 256), "BLOCK_N": (32, 64, 128), "num_warps": (4, 8),
          "num_stages": (2, 3, 4, 5)},
    prune=attention_prune, cap=100)


def launch_attention(q, k, v, o, causal: bool, config) -> None:
    """Run flash_attention_kernel once with ``config`` (BLOCK_M, BLOCK_N, num_warps,
    num_stages), writing o."""
    batch, heads, seq, head_dim = q.shape
    grid = (triton.cdiv(seq, config["BLOCK_M"]), batch * heads)
    flash_attention_kernel[grid](
        q, k, v, o, q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2),
        heads, seq, LOG2E / math.sqrt(head_dim), HEAD_DIM=head_dim, CAUSAL=causal, **config)


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    causal: bool = False) -> torch.Tensor:
    """Attention as three PyTorch operations, the (batch, heads, seq, seq) scores in memory:
    the baseline FlashAttention is measured against (softmax in float32 or wider)."""
    scores = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(q.shape[-1]))
    if causal:  # query i sits at key position i + seq_k - seq_q: the mask ends aligned
        seq_q, seq_k = q.shape[2], k.shape[2]
        keep = torch.ones(seq_q, seq_k, device=q.device, dtype=torch.bool).tril(seq_k - seq_q)
        scores = scores.masked_fill(~keep, float("-inf"))
    wide = torch.promote_types(scores.dtype, torch.float32)  # float64 stays float64
    return torch.softmax(scores.to(wide), dim=-1).to(q.dtype) @ v


def attention_by_head(q, k, v, causal=False, *rest):
    """The definition, in float64 (the grader passes float64 CPU copies of your inputs), one
    (batch, head) at a time so that only one head's seq x seq scores exist at once. Arguments
    after causal (your function's config, say) are ignored."""
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
    keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            scores = q[b, h] @ k[b, h].T / math.sqrt(q.shape[-1])
            if causal:
                scores = scores.masked_fill(~keep, -math.inf)
            out[b, h] = torch.softmax(scores, dim=-1) @ v[b, h]
    return out

@forbidden_in_graded_calls
def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    config=None, level: int = 1) -> torch.Tensor:
    """softmax(q k^T / sqrt(head_dim)) v, causal if asked, with the configuration the tuner
    picks for this problem (or ``config``); scores in float32, output in q's dtype."""
    check_attention_inputs(q, k, v)
    o = torch.empty_like(q)
    if config is None:
        config = autotune(flash_attention_kernel, attention_problem(q, causal), ATTENTION_SPACE,
                          lambda c: launch_attention(q, k, v, o, causal, c), level=level).config
    launch_attention(q, k, v, o, causal, config)
    return o


# a launch of a raw kernel inside a graded call raises too
forbidden_in_graded_calls(softmax_kernel)
forbidden_in_graded_calls(attention_blocks)
forbidden_in_graded_calls(flash_attention_kernel)
