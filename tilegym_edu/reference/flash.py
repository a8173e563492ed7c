"""FlashAttention forward for the shapes models bring: any head size up to 256, grouped-query
and multi-query attention, and queries shorter than the keys (decoding with a KV cache,
chunked prefill). Lesson 04's `attention.flash_attention` is the readable version; this one
adds those shapes and saves what the backward pass (`flash_backward`) needs.

Shapes: ``q`` (batch, heads, seq_q, head_dim); ``k`` and ``v`` (batch, kv_heads, seq_k,
head_dim) with ``heads`` a multiple of ``kv_heads`` (query head h reads key/value head
h // (heads // kv_heads): no copies of k and v); ``seq_q <= seq_k`` when causal, the causal
mask aligned to the end (query i sees keys j <= i + seq_k - seq_q, as in decoding). Last
dimension contiguous, any other strides; float16, bfloat16 or float32. The log-sum-exp of each
query's scores, (batch, heads, seq_q) float32 in log2 units, is what the backward pass
recomputes the probabilities from.
"""
import math

import torch
import triton
import triton.language as tl

from tilegym_edu import device
from tilegym_edu.grading import forbidden_in_graded_calls
from tilegym_edu.reference.attention import (ATTENTION_SPACE, LOG2E, attention_problem,
                                             attention_prune, naive_attention)
from tilegym_edu.tiles import next_power_of_2
from tilegym_edu.tune import Config, SearchSpace, autotune

try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # Triton before 3.4: k and v go in by pointers
    TensorDescriptor = None

#: the largest head size the kernels take (a q block of 256 x 256 fp16 fills the registers)
MAX_HEAD_DIM = 256


def flash_prune(config, problem, resources) -> str | None:
    """Lesson 04's limits of shared memory and registers, without its causal rule: this
    kernel masks every key block that crosses a diagonal, whatever BLOCK_M and BLOCK_N."""
    return attention_prune(config, {**problem, "causal": False}, resources)


#: lesson 04's space, with blocks of 16 and 32 rows for decoding (a few rows a program) and
#: BLOCK_M of 16 and 32 in the full grid
FLASH_SPACE = SearchSpace(
    default=ATTENTION_SPACE.default,
    small=[*ATTENTION_SPACE.small, Config(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=3),
           Config(BLOCK_M=16, BLOCK_N=128, num_warps=4, num_stages=3),
           Config(BLOCK_M=32, BLOCK_N=64, num_warps=4, num_stages=3)],
    grid={**ATTENTION_SPACE.grid, "BLOCK_M": (16, 32, 64, 128, 256)},
    prune=flash_prune, cap=ATTENTION_SPACE.cap)


def flash_order_prune(config, problem, resources) -> str | None:
    """flash_prune, and a longest-first order only where blocks differ in work (causal)."""
    if config.get("LONGEST_FIRST") and not problem["causal"]:
        return "longest first orders causal blocks, which differ in work; these do not"
    return flash_prune(config, problem, resources)


#: FLASH_SPACE, and its three fastest rows again with the programs longest first
#: (flash_forward_kernel), for the tuner to race where the reference runs flash.py's kernel. On the
#: H200 (2026-12-04, docs/results/h200.md) longest first took the capstone's calls (16 heads
#: of one causal 2048-token sequence, 256 to 512 programs) from 63.7 to 46.5 µs, 0.89x to
#: 1.22x cuDNN, and made B4 H32 S4096 D128 causal slower (1399 against 1308 µs: a head's
#: blocks no longer run together, so its keys leave L2 between them). Learners' kernels take
#: FLASH_SPACE, which sets no LONGEST_FIRST.
FLASH_ORDER_SPACE = SearchSpace(
    default=FLASH_SPACE.default,
    small=[*FLASH_SPACE.small, *(Config(**c, LONGEST_FIRST=True) for c in (
        Config(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3), FLASH_SPACE.default,
        Config(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3)))],
    grid=FLASH_SPACE.grid, prune=flash_order_prune, cap=FLASH_SPACE.cap)


@triton.jit
def flash_blocks(acc, l_i, m_i, q, k_src, v_src, kv_row, stride_kn, stride_vn, q_pos, offs_n,
                 offs_d, lo, hi, seq_k, qk_scale, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
                 MASKED: tl.constexpr, CAUSAL: tl.constexpr, KV_DESCRIPTORS: tl.constexpr):
    """Fold key/value blocks lo, lo + BLOCK_N, ... < hi into one query block's running state
    (acc (BLOCK_M, BLOCK_D) unnormalised output, l_i running sum, m_i running maximum in log2
    units). ``q_pos`` (BLOCK_M,) are the queries' positions among the keys. k_src and v_src
    are this head's k and v as pointers, or (KV_DESCRIPTORS) tensor descriptors over every
    head's rows, this head's keys from row ``kv_row`` on. Head columns past HEAD_DIM read as
    zeros; MASKED blocks also mask keys past seq_k and, if CAUSAL, keys after the query. The
    scale is folded into the exponent, exp2(s * qk_scale - m): one multiply-add an element,
    the row maximum taken on the unscaled scores (qk_scale is positive)."""
    d_ok = offs_d[None, :] < HEAD_DIM
    for start_n in tl.range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        kv_ok = d_ok
        if MASKED:
            kv_ok = kv_ok & (cols[:, None] < seq_k)
        if KV_DESCRIPTORS:
            k = k_src.load([kv_row + start_n, 0])
        else:
            k = tl.load(k_src + cols[:, None] * stride_kn + offs_d[None, :], mask=kv_ok,
                        other=0.0)
        qk = tl.dot(q, tl.trans(k))
        if MASKED:
            valid = cols[None, :] < seq_k
            if CAUSAL:
                valid = valid & (q_pos[:, None] >= cols[None, :])
            qk = tl.where(valid, qk, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(qk, axis=1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if KV_DESCRIPTORS:
            v = v_src.load([kv_row + start_n, 0])
            if MASKED:  # rows past seq_k are the next head's: zero them, whatever they hold
                v = tl.where(kv_ok, v, 0.0)
        else:
            v = tl.load(v_src + cols[:, None] * stride_vn + offs_d[None, :], mask=kv_ok,
                        other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def query_block(q_ptr, start_m, bkv, H, GROUP, seq_q, stride_qb, stride_qh, stride_qs,
                HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr):
    """Query block start_m of (batch, key/value head) bkv = b * (H // GROUP) + kv_head. Its
    BLOCK_M rows are the (query, head) pairs of the GROUP query heads that share the key/value
    head, query-major: row r is query r // GROUP of head kv_head * GROUP + r % GROUP. Returns
    (q, b, kv_head, query, head, offs_d, row_ok, io_mask): q (BLOCK_M, BLOCK_D) loaded, zeros
    in rows past seq_q * GROUP and columns past HEAD_DIM; query and head (BLOCK_M,) each
    row's; offs_d the head columns; row_ok and io_mask the rows and elements that exist."""
    kv_heads = H // GROUP
    b = bkv // kv_heads
    kv_head = bkv % kv_heads
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    query = rows // GROUP
    head = kv_head * GROUP + rows % GROUP
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = rows < seq_q * GROUP
    io_mask = row_ok[:, None] & (offs_d[None, :] < HEAD_DIM)
    q = tl.load(q_ptr + b * stride_qb + head[:, None] * stride_qh + query[:, None] * stride_qs
                + offs_d[None, :], mask=io_mask, other=0.0)
    return q, b, kv_head, query, head, offs_d, row_ok, io_mask


@triton.jit
def key_bounds(start_m, shift, seq_q, seq_k, GROUP, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """(end, unmasked_end) for query block start_m (query_block's rows; query i at key
    position i + shift): it sees keys [0, end), and the key blocks from unmasked_end on need a
    mask (past the last whole block of keys, or, if CAUSAL, from the block holding the first
    query's diagonal)."""
    if CAUSAL:
        first = start_m * BLOCK_M // GROUP + shift  # the block's first and last positions
        last = tl.minimum(((start_m + 1) * BLOCK_M - 1) // GROUP, seq_q - 1) + shift
        end = tl.minimum(last + 1, seq_k)
        unmasked_end = tl.minimum(first // BLOCK_N * BLOCK_N, seq_k // BLOCK_N * BLOCK_N)
    else:
        end = seq_k
        unmasked_end = seq_k // BLOCK_N * BLOCK_N
    return end, unmasked_end


@triton.jit
def store_rows(o_ptr, lse_ptr, acc, l_i, m_i, b, head, query, H, seq_q, stride_ob, stride_oh,
               stride_os, offs_d, row_ok, io_mask):
    """Finish query_block's rows from their running state (flash_blocks'): o = acc / l_i in
    o's dtype (acc (BLOCK_M, BLOCK_D) float32, unnormalised) and lse = m_i + log2(l_i) (the
    running maximum and sum, in log2 units) into lse (batch, H, seq_q); the elements that
    exist."""
    out = acc / l_i[:, None]
    tl.store(o_ptr + b * stride_ob + head[:, None] * stride_oh + query[:, None] * stride_os
             + offs_d[None, :], out.to(o_ptr.dtype.element_ty), mask=io_mask)
    tl.store(lse_ptr + (b * H + head) * seq_q + query, m_i + tl.math.log2(l_i), mask=row_ok)


@triton.jit
def flash_forward_kernel(q_ptr, k_src, v_src, o_ptr, lse_ptr,
                         stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
                         stride_vb, stride_vh, stride_vs, stride_ob, stride_oh, stride_os,
                         H, GROUP, seq_q, seq_k, qk_scale,
                         HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                         KV_DESCRIPTORS: tl.constexpr, LONGEST_FIRST: tl.constexpr = False):
    """o and lse for BLOCK_M rows of one (batch, key/value head): query block i of
    b * (H // GROUP) + kv_head, a 1-D grid. The rows are query_block's, the (query, head)
    pairs of the GROUP query heads that share the key/value head, so each key/value block
    loaded serves the whole group (a decode step's GROUP queries fill one block). BLOCK_D is
    HEAD_DIM rounded up to a power of two. Query i sits at position i + seq_k - seq_q among
    the keys; causal attention stops at the block's last diagonal and masks only the key
    blocks that cross the diagonal. lse
    (batch, H, seq_q) is m + log2(l), in log2 units. k_src and v_src are k and v, or
    (KV_DESCRIPTORS) tensor descriptors over their (batch * kv_heads * seq_k, head_dim) rows
    (kv_descriptors makes them). LONGEST_FIRST (a configuration may set it) launches the
    programs longest first: causal blocks see more keys the later they sit, and on a grid of a
    few waves grid order leaves the last heads' long blocks running alone at the end."""
    n_m = tl.cdiv(seq_q * GROUP, BLOCK_M)
    if LONGEST_FIRST:  # every head's last query block, then every head's second last, ...
        n_bkv = tl.num_programs(0) // n_m
        start_m = n_m - 1 - tl.program_id(0) // n_bkv
        bkv = tl.program_id(0) % n_bkv
    else:  # a head's query blocks one after another: its keys stay in L2 while they run
        start_m = tl.program_id(0) % n_m
        bkv = tl.program_id(0) // n_m
    q, b, kv_head, query, head, offs_d, row_ok, io_mask = query_block(
        q_ptr, start_m, bkv, H, GROUP, seq_q, stride_qb, stride_qh, stride_qs, HEAD_DIM, BLOCK_D,
        BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    shift = seq_k - seq_q
    if not KV_DESCRIPTORS:
        k_src += b * stride_kb + kv_head * stride_kh
        v_src += b * stride_vb + kv_head * stride_vh
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    m_i = tl.full((BLOCK_M,), -float("inf"), dtype=tl.float32)
    end, unmasked_end = key_bounds(start_m, shift, seq_q, seq_k, GROUP, BLOCK_M, BLOCK_N, CAUSAL)
    acc, l_i, m_i = flash_blocks(acc, l_i, m_i, q, k_src, v_src, bkv * seq_k, stride_ks,
                                 stride_vs, query + shift, offs_n, offs_d, 0, unmasked_end,
                                 seq_k, qk_scale, HEAD_DIM, BLOCK_N, False, CAUSAL,
                                 KV_DESCRIPTORS)
    acc, l_i, m_i = flash_blocks(acc, l_i, m_i, q, k_src, v_src, bkv * seq_k, stride_ks,
                                 stride_vs, query + shift, offs_n, offs_d, unmasked_end, end,
                                 seq_k, qk_scale, HEAD_DIM, BLOCK_N, True, CAUSAL,
                                 KV_DESCRIPTORS)
    store_rows(o_ptr, lse_ptr, acc, l_i, m_i, b, head, query, H, seq_q, stride_ob, stride_oh,
               stride_os, offs_d, row_ok, io_mask)


def check_flash_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       causal: bool) -> None:
    """Raise ValueError, saying what to change, unless q, k, v can go to the kernels."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name} must be (batch, heads, seq, head_dim), got shape "
                             f"{tuple(t.shape)}")
        if t.stride(-1) != 1:
            raise ValueError(f"{name}'s last dimension must be contiguous: "
                             f"pass {name}.contiguous()")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have one shape; got {tuple(k.shape)}, {tuple(v.shape)}")
    (batch, heads, seq_q, head_dim), (kv_batch, kv_heads, seq_k, kv_dim) = q.shape, k.shape
    if kv_batch != batch or kv_dim != head_dim:
        raise ValueError(f"k and v must have q's batch and head_dim: q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}")
    if heads % kv_heads:
        raise ValueError(f"q's {heads} heads must be a multiple of k and v's {kv_heads} "
                         "(each group of query heads shares one key/value head)")
    if causal and seq_q > seq_k:
        raise ValueError(f"causal attention with more queries ({seq_q}) than keys ({seq_k}) "
                         "leaves the first queries no key to see: the mask is aligned to the "
                         "end, so pass at least as many keys as queries")
    if not q.dtype == k.dtype == v.dtype:
        raise ValueError(f"q, k, v must have one dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"attention takes float16, bfloat16 or float32, not {q.dtype}")
    if not q.device == k.device == v.device:
        raise ValueError(f"q, k, v are on {q.device}, {k.device}, {v.device}: "
                         "move them to one device")
    if not 1 <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"head_dim must be 1 to {MAX_HEAD_DIM}, not {head_dim}")
    if min(seq_q, seq_k, batch, heads) == 0:
        raise ValueError(f"empty attention: q {tuple(q.shape)}, k {tuple(k.shape)}")


def descriptors_fit(t: torch.Tensor) -> bool:
    """Whether tensor descriptors (TMA) can read ``t`` (batch, heads, seq, head_dim) as one
    (batch * heads * seq, head_dim) matrix: its rows follow one another at one stride, head
    after head and batch after batch (true of a contiguous tensor, false of a view of the
    first rows of a longer KV cache), on 16-byte boundaries; and the GPU has TMA (compute
    capability 9.0 or newer) or this is interpreter mode, where they run on the CPU."""
    batch, heads, seq, _ = t.shape
    stride_batch, stride_head, row, _ = t.stride()
    if row * t.element_size() % 16 or t.data_ptr() % 16:
        return False
    if device.ON_GPU and not device.has_tma(t.device):
        return False
    return ((heads == 1 or stride_head == seq * row)
            and (batch == 1 or stride_batch == heads * seq * row))


def kv_descriptors(k: torch.Tensor, v: torch.Tensor, block_n: int, block_d: int):
    """(k, v) as tensor descriptors over their (batch * kv_heads * seq_k, head_dim) rows, in
    blocks of (block_n, block_d) (the columns past head_dim read as zeros); None unless both
    fit (descriptors_fit) and this Triton has them (3.4 and newer)."""
    if TensorDescriptor is None or not (descriptors_fit(k) and descriptors_fit(v)):
        return None
    return tuple(TensorDescriptor(t, [t.shape[0] * t.shape[1] * t.shape[2], t.shape[3]],
                                  [t.stride(2), 1], [block_n, block_d]) for t in (k, v))


#: k and v go in by tensor descriptors from this head block (BLOCK_D) on: on the H200 they made
#: the tuned forward 1-5% faster at blocks of 128 and 256 (head sizes 96, 128, 256) and 3-4%
#: slower at 64, where pointers with the folded scale reached 0.95-0.97x cuDNN
#: (docs/results/h200.md, 2026-12-02)
DESCRIPTORS_FROM_BLOCK_D = 128


def block_d(head_dim: int) -> int:
    """The head columns a kernel block holds: head_dim rounded up to a power of two, >= 16."""
    return max(16, next_power_of_2(head_dim))


def flash_problem(q: torch.Tensor, k: torch.Tensor, causal: bool) -> dict[str, object]:
    """What the best forward configuration depends on: lesson 04's problem with the head size
    rounded up to the block the kernel uses, the key length, the group size and whether k and
    v go in by tensor descriptors (the two paths tune apart)."""
    problem = attention_problem(q, causal)
    problem.update(head_dim=next_power_of_2(q.shape[-1]), seq_k=k.shape[2],
                   group=q.shape[1] // k.shape[1],
                   kv_descriptors=(block_d(q.shape[-1]) >= DESCRIPTORS_FROM_BLOCK_D
                                   and descriptors_fit(k)))
    return problem


def launch_flash_forward(q, k, v, o, lse, causal: bool, config) -> None:
    """Run flash_forward_kernel once with ``config`` (BLOCK_M, BLOCK_N, num_warps,
    num_stages, and LONGEST_FIRST where it sets it), writing o (q's shape) and lse (batch,
    heads, seq_q) float32; k and v go in by tensor descriptors where kv_descriptors can make
    them and the head's block holds at least DESCRIPTORS_FROM_BLOCK_D columns."""
    batch, heads, seq_q, head_dim = q.shape
    grid = (triton.cdiv(seq_q * (heads // k.shape[1]), config["BLOCK_M"]) * batch * k.shape[1],)
    descriptors = (kv_descriptors(k, v, config["BLOCK_N"], block_d(head_dim))
                   if block_d(head_dim) >= DESCRIPTORS_FROM_BLOCK_D else None)
    k_src, v_src = descriptors or (k, v)
    flash_forward_kernel[grid](
        q, k_src, v_src, o, lse, q.stride(0), q.stride(1), q.stride(2), k.stride(0),
        k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2), o.stride(0),
        o.stride(1), o.stride(2), heads, heads // k.shape[1], seq_q, k.shape[2],
        LOG2E / math.sqrt(head_dim), HEAD_DIM=head_dim, BLOCK_D=block_d(head_dim),
        CAUSAL=causal, KV_DESCRIPTORS=descriptors is not None, **config)


@forbidden_in_graded_calls
def flash_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                  config=None, level: int = 1,
                  space: SearchSpace = FLASH_SPACE) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse): o = softmax(q k^T / sqrt(head_dim)) v in q's shape and dtype, lse (batch,
    heads, seq_q) float32 in log2 units, with the configuration the tuner picks from ``space``
    (FLASH_ORDER_SPACE also races longest-first orders) or ``config``. Shapes as the module
    says."""
    check_flash_inputs(q, k, v, causal)
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
    if config is None:
        config = autotune(flash_forward_kernel, flash_problem(q, k, causal), space,
                          lambda c: launch_flash_forward(q, k, v, o, lse, causal, c),
                          level=level).config
    launch_flash_forward(q, k, v, o, lse, causal, config)
    return o, lse


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        causal: bool = False) -> torch.Tensor:
    """The same attention in PyTorch, the scores in memory: lesson 04's naive_attention with
    each key/value head repeated for its group. What the kernels are checked against, in
    float64."""
    group = q.shape[1] // k.shape[1]
    return naive_attention(q, k.repeat_interleave(group, dim=1),
                           v.repeat_interleave(group, dim=1), causal)


forbidden_in_graded_calls(flash_blocks)
forbidden_in_graded_calls(query_block)
forbidden_in_graded_calls(key_bounds)
forbidden_in_graded_calls(store_rows)
forbidden_in_graded_calls(flash_forward_kernel)
