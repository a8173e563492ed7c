"""FlashAttention backward for Hopper GPUs in Gluon: the dk/dv and dq kernels that
``flash_backward.attention_backward`` (the autograd function's backward) races against the
Triton kernels of ``flash_backward`` where they take the inputs.

Same math as flash_backward.py's kernels (FlashAttention-2's two passes, the scores recomputed
from the forward's log-sum-exp), with what Triton's compiler does not do for them: q, dO (for
dk/dv) or k, v (for dq) stream through a ring of TMA buffers with an mbarrier each, the two
score-sized matmuls (S and dP) are issued together and the exp2 runs while dP is on the tensor
cores, and in dk/dv the keys are the MMA's M dimension (S^T = K Q^T), so P^T and dS^T feed the
next wgmma from registers with nothing transposed. Two dk/dv schedules (DKDV_CONFIGS): ``one``,
one warpgroup of 64 keys issuing its own copies (dkdv_one_kernel), and ``ws``,
FlashAttention-3's shape: a producer warp and two consumer warpgroups of 64 keys sharing each
q/dO block (dkdv_ws_kernel). dq (dq_kernel) is the forward's loop with dP added and no online
softmax; causal grids run the longest query blocks first.

On an H200 (2026-12-04, docs/results/h200.md), the backward with these kernels in its race
ran 0.86x cuDNN's at B4 H32 S4096 D128, 0.91x causal (in bfloat16 too), 0.91x with 32 query
heads over 8 key/value heads causal and 1.15x at B8 H16 S2048 D64 causal (run 34), where the
Triton kernels alone had run 0.80x, 0.81x, 0.81x and 0.93x (runs c and 31). Alone, dk/dv ran
1.12x the Triton kernel and dq 1.07-1.33x (runs 26 and 29); a dq that issues the next key
block's S and dP behind this block's dS K ran 0.73-0.90x this one and was dropped (run 33).
attention_backward also races the two passes against flash_backward_onepass, which computes
dk, dv and dq in one pass with these kernels' pieces; with it the backward ran 0.96x, 0.95x,
0.93x (bfloat16), 0.91x and 1.14x on those rows (run 36), the two passes keeping the last two.

Inputs as hopper_fits takes them for the forward (compute capability 9.x, Triton 3.6, head_dim
64 or 128, float16 or bfloat16, contiguous, sequence lengths multiples of 128), and further one
sequence length for q and k, k/v heads that divide q's (each dk/dv program streams the query
blocks of every head of its group, so dk and dv are summed in registers, with no atomics), and
contiguous float32 lse and delta (backward_fits). They do not run in Triton's interpreter:
their tests are in tests/gpu/.
"""
import math
from collections.abc import Mapping

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilegym_edu.grading import forbidden_in_graded_calls
from tilegym_edu.reference.attention import LOG2E
from tilegym_edu.reference.flash_hopper import hopper_fits, rows_descriptor
from tilegym_edu.tune import Config, SearchSpace, configs_from_rows

try:  # Gluon's Hopper modules (Triton 3.5 and newer)
    from triton.experimental.gluon.language.nvidia.hopper import (mbarrier, tma, warpgroup_mma,
                                                                   warpgroup_mma_wait)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
except ImportError:  # pragma: no cover - older Triton: hopper_fits says no
    TensorDescriptor = None


# ---------------------------------------------------------------------------------------------
# dk and dv

#: the key rows one consumer warpgroup owns (one wgmma's M for four warps)
WG_KEYS = gl.constexpr(64)


# ---------------------------------------------------------------------------------------------
# pieces both kernels share


@gluon.jit
def _issue_qdo(descs, ring, bars, row, slot):
    """Start the TMA copies of the q, dO, lse and delta blocks at ``row`` (a row of the
    (batch * heads * seq) rows) into ring slot ``slot``: q and lse on q's barrier, dO and delta
    on dO's. descs = (q, do, lse, delta) descriptors, ring = their shared-memory rings,
    bars = (q_bars, do_bars)."""
    q_desc, do_desc, lse_desc, delta_desc = descs
    q_smem, do_smem, lse_smem, delta_smem = ring
    q_bars, do_bars = bars
    mbarrier.expect(q_bars.index(slot), q_desc.block_type.nbytes + lse_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [row, 0], q_bars.index(slot), q_smem.index(slot))
    tma.async_copy_global_to_shared(lse_desc, [row], q_bars.index(slot), lse_smem.index(slot))
    mbarrier.expect(do_bars.index(slot), do_desc.block_type.nbytes + delta_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(do_desc, [row, 0], do_bars.index(slot), do_smem.index(slot))
    tma.async_copy_global_to_shared(delta_desc, [row], do_bars.index(slot),
                                    delta_smem.index(slot))


@gluon.jit
def _dkdv_issue(i, k_tile, v_tile, ring, bars, dk, dv, start_m, key_pos, zero_s, qk_scale,
                STAGES: gl.constexpr, BLOCK_M: gl.constexpr, MASKED: gl.constexpr,
                s_layout: gl.constexpr, a_layout: gl.constexpr):
    """The i-th streamed query block (queries start_m ..): its q, dO, lse, delta in ring slot
    i % STAGES; issues its shares of dv and dk (float32, the wgmma accumulator layout) and
    returns (dk, dv, p_op, ds_op, ds) with those two wgmmas still running: wait on them, with
    p_op and ds_op (their register operands), before the slot is reused. ds is dS^T in the
    inputs' dtype, in s_layout. key_pos: the positions of this warpgroup's (or program's) key
    rows, in the rows' slice of s_layout; zero_s: zeros in S^T's shape and layout. MASKED:
    zero P^T where query < key (the blocks crossing the causal diagonal)."""
    q_smem, do_smem, lse_smem, delta_smem = ring
    q_bars, do_bars = bars
    dtype: gl.constexpr = q_smem.dtype
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    slot = i % STAGES
    phase = (i // STAGES) & 1
    q_tile = q_smem.index(slot)
    do_tile = do_smem.index(slot)

    mbarrier.wait(q_bars.index(slot), phase)
    s = warpgroup_mma(k_tile, q_tile.permute((1, 0)), zero_s, use_acc=False, is_async=True)
    mbarrier.wait(do_bars.index(slot), phase)
    dp = warpgroup_mma(v_tile, do_tile.permute((1, 0)), zero_s, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(1, deps=(s,))  # S^T in; dP^T still on the tensor cores
    lse = lse_smem.index(slot).load(col_layout)
    p = gl.exp2(s * qk_scale - gl.expand_dims(lse, 0))
    if MASKED:
        cols = start_m + gl.arange(0, BLOCK_M, layout=col_layout)
        p = gl.where(gl.expand_dims(cols, 0) >= gl.expand_dims(key_pos, 1), p, 0.0)
    p_op = gl.convert_layout(p.to(dtype), a_layout)
    dv = warpgroup_mma(p_op, do_tile, dv, is_async=True)
    dp = warpgroup_mma_wait(1, deps=(dp,))  # dP^T in; dV still running
    delta = delta_smem.index(slot).load(col_layout)
    ds = (p * (dp - gl.expand_dims(delta, 0))).to(dtype)
    ds_op = gl.convert_layout(ds, a_layout)
    dk = warpgroup_mma(ds_op, q_tile, dk, is_async=True)
    return dk, dv, p_op, ds_op, ds


@gluon.jit
def _dkdv_block(i, k_tile, v_tile, ring, bars, dk, dv, start_m, key_pos, zero_s, qk_scale,
                STAGES: gl.constexpr, BLOCK_M: gl.constexpr, MASKED: gl.constexpr,
                s_layout: gl.constexpr, a_layout: gl.constexpr):
    """_dkdv_issue's shares of dk and dv, returned once every wgmma reading the slot has
    finished (the slot is free then)."""
    dk, dv, p_op, ds_op, ds = _dkdv_issue(i, k_tile, v_tile, ring, bars, dk, dv, start_m,
                                          key_pos, zero_s, qk_scale, STAGES, BLOCK_M, MASKED,
                                          s_layout, a_layout)
    dv, dk, p_op, ds_op = warpgroup_mma_wait(0, deps=(dv, dk, p_op, ds_op))
    return dk, dv


@gluon.jit
def _query_range(n0, seq, BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, CAUSAL: gl.constexpr):
    """(lo, n_masked, n_blocks) for the keys n0 .. n0 + BLOCK_N - 1: the first query block
    that sees them, how many blocks from there cross the diagonal (0 unless causal), and how
    many blocks stream past in all."""
    if CAUSAL:
        lo = n0 // BLOCK_M * BLOCK_M
        n_blocks = (seq - lo) // BLOCK_M
        n_masked = gl.minimum(gl.cdiv(n0 + BLOCK_N - lo, BLOCK_M), n_blocks)
    else:
        lo = n0 * 0
        n_blocks = seq // BLOCK_M
        n_masked = n0 * 0
    return lo, n_masked, n_blocks


@gluon.jit
def _stream_row(t, q_row0, seq, lo, n_blocks, BLOCK_M: gl.constexpr):
    """The first q row of stream index t: the query block t % n_blocks (from lo) of the group's
    head t // n_blocks, whose rows start at q_row0 + (t // n_blocks) * seq."""
    return q_row0 + (t // n_blocks) * seq + lo + (t % n_blocks) * BLOCK_M


@gluon.jit
def _alloc_ring(q_desc, do_desc, lse_desc, delta_desc, STAGES: gl.constexpr):
    """(ring, bars): the shared-memory rings of q, dO, lse and delta blocks, and a q and a dO
    mbarrier per slot, initialised."""
    ring = (gl.allocate_shared_memory(q_desc.dtype, [STAGES] + q_desc.block_type.shape,
                                      q_desc.layout),
            gl.allocate_shared_memory(do_desc.dtype, [STAGES] + do_desc.block_type.shape,
                                      do_desc.layout),
            gl.allocate_shared_memory(gl.float32, [STAGES] + lse_desc.block_type.shape,
                                      lse_desc.layout),
            gl.allocate_shared_memory(gl.float32, [STAGES] + delta_desc.block_type.shape,
                                      delta_desc.layout))
    q_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    do_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(q_bars.index(i), count=1)
        mbarrier.init(do_bars.index(i), count=1)
    return ring, (q_bars, do_bars)


@gluon.jit
def _store_tile(acc, ptr_head, first_row, scale, ROWS: gl.constexpr, HEAD_DIM: gl.constexpr,
                WARPS: gl.constexpr):
    """acc * scale (ROWS x HEAD_DIM float32) in ptr_head's dtype at rows first_row.. of one
    contiguous (seq, HEAD_DIM) head, by 16-byte stores."""
    out_layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // HEAD_DIM, HEAD_DIM // 8],
                                                [WARPS, 1], [1, 0])
    out = gl.convert_layout((acc * scale).to(ptr_head.dtype.element_ty), out_layout)
    rows = first_row + gl.arange(0, ROWS, layout=gl.SliceLayout(1, out_layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, out_layout))
    gl.store(ptr_head + gl.expand_dims(rows, 1) * HEAD_DIM + gl.expand_dims(cols, 0), out)


# ---------------------------------------------------------------------------------------------
# "one": no warp specialisation


@gluon.jit
def _one_loop(first, last, lo, n_blocks, total, q_row0, seq, k_smem, v_smem, descs, ring, bars,
              dk, dv, key_pos, zero_s, qk_scale, STAGES: gl.constexpr, BLOCK_M: gl.constexpr,
              MASKED: gl.constexpr, s_layout: gl.constexpr, a_layout: gl.constexpr):
    """Stream indices first .. last - 1 of dkdv_one_kernel's stream (total of them: n_blocks
    query blocks of each head of the group), each slot refilled with the block STAGES later
    once its matmuls are done."""
    for i in range(first, last):
        start_m = lo + (i % n_blocks) * BLOCK_M
        dk, dv = _dkdv_block(i, k_smem, v_smem, ring, bars, dk, dv, start_m, key_pos, zero_s,
                             qk_scale, STAGES, BLOCK_M, MASKED, s_layout, a_layout)
        if i + STAGES < total:
            _issue_qdo(descs, ring, bars,
                       _stream_row(i + STAGES, q_row0, seq, lo, n_blocks, BLOCK_M), i % STAGES)
    return dk, dv


@gluon.jit
def dkdv_one_kernel(q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc, dk_ptr, dv_ptr,
                    seq, group, qk_scale, sm_scale, HEAD_DIM: gl.constexpr,
                    BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, STAGES: gl.constexpr,
                    CAUSAL: gl.constexpr, num_warps: gl.constexpr):
    """dk and dv of keys pid(0) * BLOCK_N .. of key/value head pid(1) (= b * KVH + kvh), over
    the queries of its ``group`` query heads (b * H + kvh * group + g). q_desc/do_desc are
    over the (batch * heads * seq, HEAD_DIM) rows in blocks of BLOCK_M, lse_desc/delta_desc
    over the (batch * heads * seq) float32 values in blocks of BLOCK_M, k_desc/v_desc in
    blocks of BLOCK_N rows: one warpgroup (num_warps 4) of BLOCK_N = 64 keys."""
    gl.static_assert(BLOCK_N == WG_KEYS, "dkdv_one_kernel: one warpgroup of 64 keys")
    dtype: gl.constexpr = q_desc.dtype
    n0 = gl.program_id(0) * BLOCK_N
    bkv = gl.program_id(1)
    row0 = bkv * seq
    q_row0 = bkv * group * seq

    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_M, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, HEAD_DIM, 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)

    k_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM], v_desc.layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    descs = (q_desc, do_desc, lse_desc, delta_desc)
    ring, bars = _alloc_ring(q_desc, do_desc, lse_desc, delta_desc, STAGES)

    lo, n_masked, n_blocks = _query_range(n0, seq, BLOCK_N, BLOCK_M, CAUSAL)
    total = group * n_blocks

    mbarrier.expect(kv_bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [row0 + n0, 0], kv_bar, k_smem)
    tma.async_copy_global_to_shared(v_desc, [row0 + n0, 0], kv_bar, v_smem)
    for i in gl.static_range(STAGES):
        if i < total:
            _issue_qdo(descs, ring, bars, _stream_row(i, q_row0, seq, lo, n_blocks, BLOCK_M), i)

    key_pos = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, s_layout))
    dk = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, layout=acc_layout)
    dv = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, layout=acc_layout)
    zero_s = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, layout=s_layout)
    mbarrier.wait(kv_bar, 0)

    # the blocks crossing the diagonal in one loop, the rest in another (a branch in one
    # loop's body would keep both paths' registers live, as flash_hopper found)
    for g in range(group):
        base = g * n_blocks
        if CAUSAL:
            dk, dv = _one_loop(base, base + n_masked, lo, n_blocks, total, q_row0, seq, k_smem,
                               v_smem, descs, ring, bars, dk, dv, key_pos, zero_s, qk_scale,
                               STAGES, BLOCK_M, True, s_layout, a_layout)
        dk, dv = _one_loop(base + n_masked, base + n_blocks, lo, n_blocks, total, q_row0, seq,
                           k_smem, v_smem, descs, ring, bars, dk, dv, key_pos, zero_s, qk_scale,
                           STAGES, BLOCK_M, False, s_layout, a_layout)

    mbarrier.invalidate(kv_bar)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars[0].index(i))
        mbarrier.invalidate(bars[1].index(i))

    head = row0 * HEAD_DIM
    _store_tile(dk, dk_ptr + head, n0, sm_scale, BLOCK_N, HEAD_DIM, num_warps)
    _store_tile(dv, dv_ptr + head, n0, 1.0, BLOCK_N, HEAD_DIM, num_warps)


# ---------------------------------------------------------------------------------------------
# "ws": a producer warp and two consumer warpgroups of 64 keys


@gluon.jit
def _dkdv_produce(descs, k_desc, v_desc, ring, bars, k_smem, v_smem, kv_bar, empty, row0, n0, lo,
                n_blocks, total, q_row0, seq, BLOCK_M: gl.constexpr, STAGES: gl.constexpr,
                CONSUMERS: gl.constexpr):
    """The producer warp: each consumer's k and v tiles (one barrier for all), then the q/dO
    blocks into the ring, each slot once every consumer has released it."""
    mbarrier.expect(kv_bar, CONSUMERS * (k_desc.block_type.nbytes + v_desc.block_type.nbytes))
    for w in gl.static_range(CONSUMERS):
        tma.async_copy_global_to_shared(k_desc, [row0 + n0 + w * WG_KEYS, 0], kv_bar,
                                        k_smem.index(w))
        tma.async_copy_global_to_shared(v_desc, [row0 + n0 + w * WG_KEYS, 0], kv_bar,
                                        v_smem.index(w))
    for i in range(total):
        slot = i % STAGES
        mbarrier.wait(empty.index(slot), ((i // STAGES) & 1) ^ 1)  # a new barrier passes phase 1
        _issue_qdo(descs, ring, bars, _stream_row(i, q_row0, seq, lo, n_blocks, BLOCK_M), slot)


@gluon.jit
def _ws_block(i, WG: gl.constexpr, k_smem, v_smem, ring, bars, dk, dv, start_m, head, key_pos,
              zero_s, qk_scale, dq_parts, STAGES: gl.constexpr, BLOCK_M: gl.constexpr,
              MASKED: gl.constexpr, s_layout: gl.constexpr, a_layout: gl.constexpr):
    """dkdv_ws_kernel's step for _consume_keys: _dkdv_block with consumer WG's k and v tiles
    (it needs neither the group's head nor dq_parts)."""
    return _dkdv_block(i, k_smem.index(WG), v_smem.index(WG), ring, bars, dk, dv, start_m,
                       key_pos, zero_s, qk_scale, STAGES, BLOCK_M, MASKED, s_layout, a_layout)


@gluon.jit
def _ws_loop(first, last, WG: gl.constexpr, lo, n_blocks, k_smem, v_smem, ring, bars, empty, dk,
             dv, key_pos, zero_s, qk_scale, dq_parts, block, STAGES: gl.constexpr,
             BLOCK_M: gl.constexpr, MASKED: gl.constexpr, s_layout: gl.constexpr,
             a_layout: gl.constexpr):
    """A consumer's stream indices first .. last - 1 (the query block i % n_blocks from lo of
    the group's head i // n_blocks), each through ``block`` and its ring slot released once
    the block's matmuls are done."""
    for i in range(first, last):
        dk, dv = block(i, WG, k_smem, v_smem, ring, bars, dk, dv, lo + (i % n_blocks) * BLOCK_M,
                       i // n_blocks, key_pos, zero_s, qk_scale, dq_parts, STAGES, BLOCK_M,
                       MASKED, s_layout, a_layout)
        mbarrier.arrive(empty.index(i % STAGES), count=1)
    return dk, dv


@gluon.jit
def _consume_keys(shared, dq_parts, block, WG: gl.constexpr, HEAD_DIM: gl.constexpr,
                  BLOCK_M: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    """Consumer warpgroup WG of a warp-specialised dk/dv kernel: keys n0 + WG * 64 .. + 63
    against every streamed query block, each by ``block`` (_ws_block here, the one pass's
    _onepass_block, which also takes dq_parts); returns (dk, dv), float32, not yet stored, and
    the first key's position."""
    (ring, bars, k_smem, v_smem, kv_bar, empty, dk_ptr, dv_ptr, row0, n0, lo, n_masked,
     n_blocks, group, qk_scale, sm_scale) = shared
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_M, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    first_key = n0 + WG * WG_KEYS
    key_pos = first_key + gl.arange(0, WG_KEYS, layout=gl.SliceLayout(1, s_layout))
    dk = gl.zeros([WG_KEYS, HEAD_DIM], gl.float32, layout=acc_layout)
    dv = gl.zeros([WG_KEYS, HEAD_DIM], gl.float32, layout=acc_layout)
    zero_s = gl.zeros([WG_KEYS, BLOCK_M], gl.float32, layout=s_layout)
    mbarrier.wait(kv_bar, 0)
    for g in range(group):
        base = g * n_blocks
        if CAUSAL:
            dk, dv = _ws_loop(base, base + n_masked, WG, lo, n_blocks, k_smem, v_smem, ring, bars,
                              empty, dk, dv, key_pos, zero_s, qk_scale, dq_parts, block, STAGES,
                              BLOCK_M, True, s_layout, a_layout)
        dk, dv = _ws_loop(base + n_masked, base + n_blocks, WG, lo, n_blocks, k_smem, v_smem,
                          ring, bars, empty, dk, dv, key_pos, zero_s, qk_scale, dq_parts, block,
                          STAGES, BLOCK_M, False, s_layout, a_layout)
    return dk, dv, first_key


@gluon.jit
def _store_keys(dk, dv, first_key, shared, HEAD_DIM: gl.constexpr):
    """A consumer's dk (times sm_scale) and dv, keys first_key .. + 63, into dk_ptr and dv_ptr
    (shared as _consume_keys takes it)."""
    (ring, bars, k_smem, v_smem, kv_bar, empty, dk_ptr, dv_ptr, row0, n0, lo, n_masked,
     n_blocks, group, qk_scale, sm_scale) = shared
    head = row0 * HEAD_DIM
    _store_tile(dk, dk_ptr + head, first_key, sm_scale, WG_KEYS, HEAD_DIM, 4)
    _store_tile(dv, dv_ptr + head, first_key, 1.0, WG_KEYS, HEAD_DIM, 4)


@gluon.jit
def _dkdv_consume(shared, WG: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
                  STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    """Consumer warpgroup WG: keys n0 + WG * 64 .. + 63 against every streamed block."""
    dk, dv, first_key = _consume_keys(shared, (), _ws_block, WG, HEAD_DIM, BLOCK_M, STAGES,
                                      CAUSAL)
    _store_keys(dk, dv, first_key, shared, HEAD_DIM)


@gluon.jit
def dkdv_ws_kernel(q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc, dk_ptr, dv_ptr,
                   seq, group, qk_scale, sm_scale, HEAD_DIM: gl.constexpr,
                   BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, STAGES: gl.constexpr,
                   CAUSAL: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                   PRODUCER_REGS: gl.constexpr):
    """dkdv_one_kernel's work warp-specialised: BLOCK_N // 64 consumer warpgroups (two) of 64
    keys each share the q/dO ring a producer warp fills. k_desc/v_desc in blocks of 64 rows.
    Launched with num_warps=4 (consumer 0, the default partition); the other consumer's 4 warps
    and the producer's 1 are added by warp_specialize."""
    gl.static_assert(BLOCK_N == 2 * WG_KEYS, "dkdv_ws_kernel: two consumers of 64 keys")
    CONSUMERS: gl.constexpr = BLOCK_N // WG_KEYS
    dtype: gl.constexpr = q_desc.dtype
    n0 = gl.program_id(0) * BLOCK_N
    bkv = gl.program_id(1)
    row0 = bkv * seq
    q_row0 = bkv * group * seq

    k_smem = gl.allocate_shared_memory(dtype, [CONSUMERS, WG_KEYS, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [CONSUMERS, WG_KEYS, HEAD_DIM], v_desc.layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(empty.index(i), count=CONSUMERS)  # every consumer releases each slot
    descs = (q_desc, do_desc, lse_desc, delta_desc)
    ring, bars = _alloc_ring(q_desc, do_desc, lse_desc, delta_desc, STAGES)

    lo, n_masked, n_blocks = _query_range(n0, seq, BLOCK_N, BLOCK_M, CAUSAL)
    shared = (ring, bars, k_smem, v_smem, kv_bar, empty, dk_ptr, dv_ptr, row0, n0, lo, n_masked,
              n_blocks, group, qk_scale, sm_scale)
    # the partitions must be spelled out in the call: Gluon takes no function in a variable
    gl.warp_specialize([
        (_dkdv_consume, (shared, 0, HEAD_DIM, BLOCK_M, STAGES, CAUSAL)),
        (_dkdv_consume, (shared, 1, HEAD_DIM, BLOCK_M, STAGES, CAUSAL)),
        (_dkdv_produce, (descs, k_desc, v_desc, ring, bars, k_smem, v_smem, kv_bar, empty, row0,
                       n0, lo, n_blocks, group * n_blocks, q_row0, seq, BLOCK_M, STAGES,
                       CONSUMERS)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


# ---------------------------------------------------------------------------------------------
# dq: one program per query block, k and v streaming past

@gluon.jit
def _issue_kv_block(k_desc, v_desc, k_ring, v_ring, k_bars, v_bars, row, slot):
    """Start the TMA copies of the k and v blocks at ``row`` into ring slot ``slot``, each on its
    own barrier. flash_hopper._issue_kv does the same from a block index; calling it here changed
    dq_kernel's PTX (order, registers) in 30 of 72 configurations offline, unmeasured on a GPU."""
    mbarrier.expect(k_bars.index(slot), k_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [row, 0], k_bars.index(slot), k_ring.index(slot))
    mbarrier.expect(v_bars.index(slot), v_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(v_desc, [row, 0], v_bars.index(slot), v_ring.index(slot))


@gluon.jit
def _dq_loop(first, last, n_blocks, kv_row0, q_tile, do_tile, k_desc, v_desc, k_ring, v_ring,
             k_bars, v_bars, dq, lse, delta, query_pos, zero_s, qk_scale,
             STAGES: gl.constexpr, BLOCK_N: gl.constexpr, MASKED: gl.constexpr,
             s_layout: gl.constexpr, a_layout: gl.constexpr):
    """Key blocks first .. last - 1: adds each one's dS K to dq; each slot refilled with the
    block STAGES later once the matmuls reading it are done."""
    dtype: gl.constexpr = q_tile.dtype
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    for i in range(first, last):
        slot = i % STAGES
        phase = (i // STAGES) & 1
        k_tile = k_ring.index(slot)
        v_tile = v_ring.index(slot)
        mbarrier.wait(k_bars.index(slot), phase)
        s = warpgroup_mma(q_tile, k_tile.permute((1, 0)), zero_s, use_acc=False, is_async=True)
        mbarrier.wait(v_bars.index(slot), phase)
        dp = warpgroup_mma(do_tile, v_tile.permute((1, 0)), zero_s, use_acc=False,
                           is_async=True)
        s = warpgroup_mma_wait(1, deps=(s,))
        p = gl.exp2(s * qk_scale - gl.expand_dims(lse, 1))
        if MASKED:
            keys = i * BLOCK_N + gl.arange(0, BLOCK_N, layout=col_layout)
            p = gl.where(gl.expand_dims(query_pos, 1) >= gl.expand_dims(keys, 0), p, 0.0)
        dp = warpgroup_mma_wait(0, deps=(dp,))
        ds = p * (dp - gl.expand_dims(delta, 1))
        ds_op = gl.convert_layout(ds.to(dtype), a_layout)
        dq = warpgroup_mma(ds_op, k_tile, dq, is_async=True)
        dq, ds_op = warpgroup_mma_wait(0, deps=(dq, ds_op))
        if i + STAGES < n_blocks:
            _issue_kv_block(k_desc, v_desc, k_ring, v_ring, k_bars, v_bars,
                      kv_row0 + (i + STAGES) * BLOCK_N, slot)
    return dq


@gluon.jit
def dq_kernel(q_desc, k_desc, v_desc, do_desc, lse_ptr, delta_ptr, dq_ptr, seq, group, qk_scale,
              sm_scale, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
              STAGES: gl.constexpr, CAUSAL: gl.constexpr, num_warps: gl.constexpr):
    """dq of queries m0 .. m0 + BLOCK_M - 1 of head pid(1) (= b * H + h), whose keys and values
    are those of head (b * H + h) // group (= b * KVH + h // group); causal grids run the
    last query blocks first. q_desc/do_desc: the (batch * heads * seq, HEAD_DIM) rows in blocks
    of BLOCK_M; k_desc/v_desc in blocks of BLOCK_N; lse, delta float32 (batch * heads * seq)."""
    dtype: gl.constexpr = q_desc.dtype
    if CAUSAL:
        m0 = (gl.num_programs(0) - 1 - gl.program_id(0)) * BLOCK_M
    else:
        m0 = gl.program_id(0) * BLOCK_M
    bh = gl.program_id(1)
    row0 = bh * seq
    kv_row0 = bh // group * seq

    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, HEAD_DIM, 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)

    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM], q_desc.layout)
    do_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM], do_desc.layout)
    k_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_ring = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    qdo_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(qdo_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_bars.index(i), count=1)
        mbarrier.init(v_bars.index(i), count=1)

    if CAUSAL:
        n_blocks = gl.cdiv(m0 + BLOCK_M, BLOCK_N)
        n_full = m0 // BLOCK_N
    else:
        n_blocks = seq // BLOCK_N
        n_full = n_blocks

    mbarrier.expect(qdo_bar, q_desc.block_type.nbytes + do_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [row0 + m0, 0], qdo_bar, q_smem)
    tma.async_copy_global_to_shared(do_desc, [row0 + m0, 0], qdo_bar, do_smem)
    for i in gl.static_range(STAGES):
        if i < n_blocks:
            _issue_kv_block(k_desc, v_desc, k_ring, v_ring, k_bars, v_bars,
                            kv_row0 + i * BLOCK_N, i)

    query_pos = m0 + gl.arange(0, BLOCK_M, layout=row_layout)
    lse = gl.load(lse_ptr + row0 + query_pos)
    delta = gl.load(delta_ptr + row0 + query_pos)
    dq = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, layout=acc_layout)
    zero_s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)
    mbarrier.wait(qdo_bar, 0)

    dq = _dq_loop(0, n_full, n_blocks, kv_row0, q_smem, do_smem, k_desc, v_desc, k_ring, v_ring,
                  k_bars, v_bars, dq, lse, delta, query_pos, zero_s, qk_scale, STAGES, BLOCK_N,
                  False, s_layout, a_layout)
    if CAUSAL:
        dq = _dq_loop(n_full, n_blocks, n_blocks, kv_row0, q_smem, do_smem, k_desc, v_desc, k_ring,
                      v_ring, k_bars, v_bars, dq, lse, delta, query_pos, zero_s, qk_scale,
                      STAGES, BLOCK_N, True, s_layout, a_layout)

    mbarrier.invalidate(qdo_bar)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(k_bars.index(i))
        mbarrier.invalidate(v_bars.index(i))
    _store_tile(dq, dq_ptr + row0 * HEAD_DIM, m0, sm_scale, BLOCK_M, HEAD_DIM, num_warps)


# ---------------------------------------------------------------------------------------------
# host side

#: dk/dv configurations the tuner races: (SCHEDULE, BLOCK_N, BLOCK_M, STAGES); num_warps is 4
#: for both schedules ("ws": the default partition's four, warp_specialize adds the second
#: consumer's four and the producer warp). "one" takes 64 keys, "ws" 128 (two consumers of
#: 64). On the H200 the winner depends on the shape, "one" 64 x 64 and "ws" 128 x 64 within
#: 1-2% of each other at head size 128 (runs 28-30); "one" with 128 keys on eight warps and 3
#: stages of 64 x 64 lost everywhere (0.80-0.95x the Triton kernel) and are left out
DKDV_NAMES = ("SCHEDULE", "BLOCK_N", "BLOCK_M", "STAGES")
DKDV_CONFIGS = (("one", 64, 64, 2), ("ws", 128, 64, 2), ("ws", 128, 64, 3), ("one", 64, 128, 2),
                ("ws", 128, 128, 2))

#: dq configurations: (BLOCK_M, BLOCK_N, STAGES, num_warps); 64 x 64 on one warpgroup won
#: every shape of run 29
DQ_NAMES = ("BLOCK_M", "BLOCK_N", "STAGES", "num_warps")
DQ_CONFIGS = ((64, 64, 2, 4), (64, 64, 3, 4), (128, 64, 2, 8), (128, 64, 3, 8), (64, 128, 2, 4),
              (128, 128, 2, 8))


#: the keys each dk/dv schedule takes a program
SCHEDULE_KEYS = {"one": 64, "ws": 128}


def dkdv_problem(config: Mapping[str, object]) -> str | None:
    """Why the dk/dv kernels cannot run ``config`` at all (None: they can): an unknown
    SCHEDULE, or BLOCK_N other than its SCHEDULE_KEYS."""
    keys = SCHEDULE_KEYS.get(config["SCHEDULE"])
    if keys is None:
        return f"SCHEDULE must be one of {sorted(SCHEDULE_KEYS)}, not {config['SCHEDULE']!r}"
    if config["BLOCK_N"] != keys:
        return f"SCHEDULE {config['SCHEDULE']!r} takes BLOCK_N {keys}, not {config['BLOCK_N']}"
    return None


def dkdv_prune(config: Config, problem: Mapping[str, object], resources) -> str | None:
    """dkdv_problem's reasons; and at head size 128 a block of 128 queries overflows: S^T and
    dP^T of 64 x 128 beside two 64 x 128 accumulators take more registers than a warpgroup
    has."""
    if reason := dkdv_problem(config):
        return reason
    if problem["head_dim"] > 64 and config["BLOCK_M"] > 64:
        return "128 queries a block at head size 128 overflow a warpgroup's registers"
    return None


def dq_prune(config: Config, problem: Mapping[str, object], resources) -> str | None:
    """At head size 128, 128 keys a block spill (ptxas: 255 registers and 8 bytes of spills a
    thread, offline for sm_90a)."""
    if problem["head_dim"] > 64 and config["BLOCK_N"] > 64:
        return "128 keys a block at head size 128 spill registers"
    return None


DKDV_SPACE = SearchSpace(default=Config(**dict(zip(DKDV_NAMES, DKDV_CONFIGS[0]))),
                         small=configs_from_rows(DKDV_NAMES, DKDV_CONFIGS[1:]), prune=dkdv_prune)
DQ_SPACE = SearchSpace(default=Config(**dict(zip(DQ_NAMES, DQ_CONFIGS[0]))),
                       small=configs_from_rows(DQ_NAMES, DQ_CONFIGS[1:]), prune=dq_prune)


def backward_fits(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lse: torch.Tensor,
                  do: torch.Tensor) -> bool:
    """Whether these kernels take the backward of these inputs: what hopper_fits takes for the
    forward, with q and k of one sequence length, k and v of one shape whose heads divide q's
    (grouped- and multi-query attention: each dk/dv program streams every query head of its
    group), lse a contiguous float32 (batch, heads, seq), do of q's shape and dtype (any
    strides: it is copied), and fewer than 2**31 elements a tensor (32-bit offsets)."""
    return (hopper_fits(q, k, v) and k.shape == v.shape and q.shape[0] == k.shape[0]
            and q.shape[2:] == k.shape[2:] and q.shape[1] % k.shape[1] == 0
            and lse.dtype == torch.float32 and lse.is_contiguous() and lse.shape == q.shape[:3]
            and do.shape == q.shape and do.dtype == q.dtype and q.numel() < 2**31)


def _lse_descriptor(t: torch.Tensor, block: int):
    """t (batch, heads, seq) float32, contiguous, as a 1-D TMA descriptor over its values,
    blocks of ``block``."""
    layout = gl.NVMMASharedLayout.get_default_for([block], gl.float32)
    return TensorDescriptor(t, [t.numel()], [1], [block], layout)


def launch_dkdv(q, k, v, lse, delta, do, dk, dv, causal: bool, config) -> None:
    """Run the dk/dv kernel of ``config`` (DKDV_NAMES) once into dk and dv: q and do contiguous
    (batch, heads, seq, head_dim), k, v, dk, dv contiguous (batch, kv_heads, seq, head_dim) with
    kv_heads dividing heads, lse and delta float32 (batch, heads, seq) contiguous."""
    if reason := dkdv_problem(config):
        raise ValueError(f"dk/dv configuration {dict(config)}: {reason}")
    schedule, block_n, block_m, stages = (config[n] for n in DKDV_NAMES)
    batch, heads, seq, head_dim = q.shape
    sm_scale = 1 / math.sqrt(head_dim)
    kv_rows = block_n if schedule == "one" else WG_KEYS.value
    args = (rows_descriptor(q, block_m), rows_descriptor(k, kv_rows), rows_descriptor(v, kv_rows),
            rows_descriptor(do, block_m), _lse_descriptor(lse, block_m),
            _lse_descriptor(delta, block_m), dk, dv, seq, heads // k.shape[1], sm_scale * LOG2E,
            sm_scale)
    grid = (seq // block_n, batch * k.shape[1])
    options = dict(HEAD_DIM=head_dim, BLOCK_N=block_n, BLOCK_M=block_m, STAGES=stages,
                   CAUSAL=causal, num_warps=4)
    if schedule == "one":
        dkdv_one_kernel[grid](*args, **options)
    else:
        dkdv_ws_kernel[grid](*args, CONSUMER_REGS=240, PRODUCER_REGS=24, **options)


def launch_dq(q, k, v, lse, delta, do, dq, causal: bool, config) -> None:
    """Run dq_kernel once with ``config`` (DQ_NAMES) into dq; inputs as launch_dkdv's."""
    batch, heads, seq, head_dim = q.shape
    block_m, block_n = config["BLOCK_M"], config["BLOCK_N"]
    sm_scale = 1 / math.sqrt(head_dim)
    dq_kernel[(seq // block_m, batch * heads)](
        rows_descriptor(q, block_m), rows_descriptor(k, block_n), rows_descriptor(v, block_n),
        rows_descriptor(do, block_m), lse, delta, dq, seq, heads // k.shape[1], sm_scale * LOG2E,
        sm_scale,
        HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, STAGES=config["STAGES"],
        CAUSAL=causal, num_warps=config["num_warps"])


forbidden_in_graded_calls(dkdv_one_kernel)
forbidden_in_graded_calls(dkdv_ws_kernel)
forbidden_in_graded_calls(dq_kernel)
