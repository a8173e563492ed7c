"""FlashAttention over a KV cache with the keys split across programs (flash decoding): a
decoding step's few queries get the whole GPU.

Why: `flash.flash_forward` runs one program per block of query rows and (batch, key/value
head), each walking every key. A decoding step of the capstone at batch 1 has one query per
sequence and 4 key/value heads: 4 programs on 132 SMs, each reading 2040 keys alone. On the
H200 that step's attention took 0.188 ms of GPU time over 8 layers, against 0.058 for PyTorch's
SDPA (docs/results/h200.md, 2026-12-02). Here program (row block, batch x key/value head, split)
takes only the keys of its split, one of SPLITS ranges of KEYS_PER_SPLIT, and writes its rows'
output, normalised by its own sum, and their log-sum-exp to scratch memory. The last program of
a row block to finish (an arrival counter, as in `skinny`) merges the SPLITS partial results,
split 0 first: with m the largest log-sum-exp, o = sum_s 2^(lse_s - m) o_s / sum_s 2^(lse_s - m)
and lse = m + log2(sum_s 2^(lse_s - m)), the same rescaling the online softmax does between key
blocks. One launch; the merge reads SPLITS x BLOCK_M x head_dim floats per row block. On the
H200, tuned, the capstone's step spent 0.087 ms in it at batch 1 after 2040 cached tokens
(0.188 with flash_forward; SDPA 0.062) and 0.201 at batch 16 (0.226; SDPA 0.191)
(docs/results/h200-2026-12-02-decode.md).

Shapes and masks as in `flash` (q (batch, heads, seq_q, head_dim), k and v (batch, kv_heads,
seq_k, head_dim), grouped-query heads, the causal mask aligned to the end); any seq_q, so a
prefill through the cache takes this path too (the tuner then picks one split). Returns (o,
lse) as flash.flash_forward does.
"""
import math

import torch
import triton
import triton.language as tl

from tilegym_edu.grading import forbidden_in_graded_calls
from tilegym_edu.reference.attention import LOG2E
from tilegym_edu.reference.counters import arrival_counters
from tilegym_edu.reference.flash import (block_d, check_flash_inputs, flash_blocks, flash_prune,
                                         key_bounds, query_block, store_rows)
from tilegym_edu.tune import Config, SearchSpace, TuneResult, autotune, configs_from_rows


@triton.jit
def flash_decode_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, part_o_ptr, part_lse_ptr,
                        count_ptr, stride_qb, stride_qh, stride_qs, stride_kb, stride_kh,
                        stride_ks, stride_vb, stride_vh, stride_vs, stride_ob, stride_oh,
                        stride_os, H, GROUP, seq_q, seq_k, qk_scale, KEYS_PER_SPLIT,
                        HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, SPLITS: tl.constexpr, CAUSAL: tl.constexpr):
    """o and lse (as flash_forward_kernel writes them) for BLOCK_M rows of one (batch,
    key/value head), program (row block, b * kv_heads + kv_head, split): the split's keys
    [split * KEYS_PER_SPLIT, + KEYS_PER_SPLIT) (a multiple of BLOCK_N) folded as flash_blocks
    does, the result written to part_o (SPLITS, blocks, BLOCK_M, BLOCK_D) and part_lse (SPLITS,
    blocks, BLOCK_M) float32, blocks = row blocks x batch x kv_heads; then the last of the
    block's SPLITS programs to count itself in count_ptr[block] merges them."""
    start_m = tl.program_id(0)
    bkv = tl.program_id(1)
    split = tl.program_id(2)
    q, b, kv_head, query, head, offs_d, row_ok, io_mask = query_block(
        q_ptr, start_m, bkv, H, GROUP, seq_q, stride_qb, stride_qh, stride_qs, HEAD_DIM, BLOCK_D,
        BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    shift = seq_k - seq_q
    k_src = k_ptr + b * stride_kb + kv_head * stride_kh
    v_src = v_ptr + b * stride_vb + kv_head * stride_vh
    end, unmasked_end = key_bounds(start_m, shift, seq_q, seq_k, GROUP, BLOCK_M, BLOCK_N, CAUSAL)
    lo = split * KEYS_PER_SPLIT
    hi = tl.minimum(lo + KEYS_PER_SPLIT, end)
    mid = tl.maximum(tl.minimum(hi, unmasked_end), lo)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    m_i = tl.full((BLOCK_M,), -float("inf"), dtype=tl.float32)
    acc, l_i, m_i = flash_blocks(acc, l_i, m_i, q, k_src, v_src, 0, stride_ks, stride_vs,
                                 query + shift, offs_n, offs_d, lo, mid, seq_k, qk_scale,
                                 HEAD_DIM, BLOCK_N, False, CAUSAL, False)
    acc, l_i, m_i = flash_blocks(acc, l_i, m_i, q, k_src, v_src, 0, stride_ks, stride_vs,
                                 query + shift, offs_n, offs_d, mid, hi, seq_k, qk_scale,
                                 HEAD_DIM, BLOCK_N, True, CAUSAL, False)
    # rows this split gave keys to (split 0 gives every row); a causal row that sees none of
    # the split's keys has l_i = 0 or NaN (every score -inf: exp2(-inf - -inf)), and must add
    # nothing to the merge
    seen = l_i > 0
    if SPLITS == 1:
        store_rows(o_ptr, lse_ptr, acc, l_i, m_i, b, head, query, H, seq_q, stride_ob,
                   stride_oh, stride_os, offs_d, row_ok, io_mask)
    else:
        block = bkv * tl.num_programs(0) + start_m
        blocks = tl.num_programs(0) * tl.num_programs(1)
        slot = (split * blocks + block) * BLOCK_M + tl.arange(0, BLOCK_M)
        tl.store(part_o_ptr + slot[:, None] * BLOCK_D + offs_d[None, :],
                 tl.where(seen[:, None], acc / l_i[:, None], 0.0))
        tl.store(part_lse_ptr + slot, tl.where(seen, m_i + tl.math.log2(l_i), -float("inf")))
        tl.debug_barrier()                   # every thread's partial stored before the count
        arrived = tl.atomic_add(count_ptr + block, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLITS - 1:            # the last of this block's programs: merge
            first_slot = block * BLOCK_M + tl.arange(0, BLOCK_M)
            m = tl.load(part_lse_ptr + first_slot, cache_modifier=".cg")
            total = tl.load(part_o_ptr + first_slot[:, None] * BLOCK_D + offs_d[None, :],
                            cache_modifier=".cg")
            weight = tl.full((BLOCK_M,), 1.0, dtype=tl.float32)
            for s in range(1, SPLITS):
                s_slot = (s * blocks + block) * BLOCK_M + tl.arange(0, BLOCK_M)
                lse_s = tl.load(part_lse_ptr + s_slot, cache_modifier=".cg")
                o_s = tl.load(part_o_ptr + s_slot[:, None] * BLOCK_D + offs_d[None, :],
                              cache_modifier=".cg")
                m_new = tl.maximum(m, lse_s)
                alpha = tl.math.exp2(m - m_new)
                beta = tl.math.exp2(lse_s - m_new)
                total = total * alpha[:, None] + o_s * beta[:, None]
                weight = weight * alpha + beta
                m = m_new
            store_rows(o_ptr, lse_ptr, total, weight, m, b, head, query, H, seq_q, stride_ob,
                       stride_oh, stride_os, offs_d, row_ok, io_mask)
            tl.atomic_xchg(count_ptr + block, 0, sem="relaxed", scope="gpu")


#: the hand-written configuration: blocks of 16 rows (a decoding step's 4 query heads per
#: key/value head fill 4 of them per query), keys in 8 ranges
DECODE_DEFAULT = dict(BLOCK_M=16, BLOCK_N=64, SPLITS=8, num_warps=4, num_stages=3)
_NAMES = ("BLOCK_M", "BLOCK_N", "SPLITS", "num_warps", "num_stages")


def decode_prune(config, problem, resources) -> str | None:
    """flash's limits of shared memory and registers, and no split without a key block."""
    if config["SPLITS"] > 1 and config["SPLITS"] * config["BLOCK_N"] > problem["seq_k"]:
        return (f"{problem['seq_k']} keys in {config['SPLITS']} ranges of whole "
                f"{config['BLOCK_N']}-key blocks leave some ranges empty")
    return flash_prune(config, problem, resources)


#: level 1: 1 to 32 key ranges, so that 4 (batch 1) to 64 (batch 16) row blocks fill the GPU
DECODE_SPACE = SearchSpace(
    default=Config(**DECODE_DEFAULT),
    small=configs_from_rows(_NAMES, [
        (16, 64, 1, 4, 3), (16, 64, 2, 4, 3), (16, 64, 4, 4, 3), (16, 64, 16, 4, 3),
        (16, 64, 32, 4, 3), (16, 128, 4, 4, 3), (16, 128, 8, 4, 3), (16, 128, 16, 4, 3),
        (32, 64, 8, 4, 3), (64, 64, 1, 4, 3), (64, 64, 4, 4, 3), (128, 64, 1, 8, 3)]),
    grid={"BLOCK_M": (16, 32, 64, 128), "BLOCK_N": (32, 64, 128),
          "SPLITS": (1, 2, 4, 8, 16, 32), "num_warps": (4, 8), "num_stages": (2, 3)},
    prune=decode_prune, cap=80)


def decode_problem(q: torch.Tensor, k: torch.Tensor, causal: bool) -> dict[str, object]:
    """What the best configuration depends on: head size, dtype, group size, batch x kv heads
    and the lengths, rounded up to powers of two (a decoding loop's key length grows by one a
    token: tuning each length apart would tune every step)."""
    batch, heads, seq_q, head_dim = q.shape
    return {"batch_kv_heads": batch * k.shape[1], "group": heads // k.shape[1],
            "seq_q": triton.next_power_of_2(seq_q), "seq_k": triton.next_power_of_2(k.shape[2]),
            "head_dim": triton.next_power_of_2(head_dim), "causal": causal,
            "dtype": str(q.dtype).removeprefix("torch.")}


def launch_flash_decode(q, k, v, o, lse, causal: bool, config) -> None:
    """Run flash_decode_kernel once with ``config`` (BLOCK_M, BLOCK_N, SPLITS, num_warps,
    num_stages) into o (q's shape) and lse (batch, heads, seq_q) float32. SPLITS is how many
    key ranges at most: fewer where the keys are fewer than SPLITS blocks."""
    batch, heads, seq_q, head_dim = q.shape
    seq_k = k.shape[2]
    options = dict(config)
    bm, bn, bd = options["BLOCK_M"], options["BLOCK_N"], block_d(head_dim)
    per_split = triton.cdiv(triton.cdiv(seq_k, options["SPLITS"]), bn) * bn
    splits = triton.cdiv(seq_k, per_split)
    options["SPLITS"] = splits
    grid = (triton.cdiv(seq_q * (heads // k.shape[1]), bm), batch * k.shape[1], splits)
    blocks = grid[0] * grid[1]
    if splits > 1:
        part_o = torch.empty((splits, blocks, bm, bd), device=q.device, dtype=torch.float32)
        part_lse = torch.empty((splits, blocks, bm), device=q.device, dtype=torch.float32)
    else:
        part_o = part_lse = lse
    flash_decode_kernel[grid](
        q, k, v, o, lse, part_o, part_lse, arrival_counters(q.device, blocks), q.stride(0),
        q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2), v.stride(0),
        v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2), heads,
        heads // k.shape[1], seq_q, seq_k, LOG2E / math.sqrt(head_dim), per_split,
        HEAD_DIM=head_dim, BLOCK_D=bd, CAUSAL=causal, **options)


#: at most this many queries a sequence make a decoding step (one token, or a few drafted
#: ones), whose race is timed as CUDA graphs: each candidate's graph keeps its scratch memory,
#: SPLITS x row blocks x BLOCK_M x head_dim floats, a few MB here, where the capstone's prefill
#: through the cache (2040 queries of 16 sequences, 32640 row blocks of 16) would keep 4.3 GB a
#: candidate at 16 key ranges and 8.6 GB at 32
DECODE_QUERIES = 16


def tune_flash_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                      lse: torch.Tensor, causal: bool, level: int = 1) -> TuneResult:
    """The tuner's race of DECODE_SPACE for these inputs, launching into o and lse (once per
    decode_problem, then cached). Raced even when fast; a decoding step's (at most
    DECODE_QUERIES queries a sequence) as CUDA graphs: its attention takes microseconds a layer,
    less than its launch in Python. On the H200 of run 37 (2026-12-04) the pick after 2040
    cached tokens took 28 µs a call where run y's had taken 11, probably from a race timed as
    plain launches (inferred from the log, docs/results/h200.md); raced as graphs, run 38's
    (2026-12-05) took about 11 µs again."""
    return autotune(flash_decode_kernel, decode_problem(q, k, causal), DECODE_SPACE,
                    lambda c: launch_flash_decode(q, k, v, o, lse, causal, c),
                    level=level, min_ms=0, race_as_graphs=q.shape[2] <= DECODE_QUERIES)


@forbidden_in_graded_calls
def flash_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                 config=None, level: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) as flash.flash_forward returns them, the keys split across programs, with the
    configuration :func:`tune_flash_decode` picks for this shape, or ``config``."""
    check_flash_inputs(q, k, v, causal)
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
    if config is None:
        config = tune_flash_decode(q, k, v, o, lse, causal, level).config
    launch_flash_decode(q, k, v, o, lse, causal, config)
    return o, lse


forbidden_in_graded_calls(flash_decode_kernel)
