"""EXPERIMENT (run 35, 2026-12-04; flash_backward_onepass.py keeps its "ws2" schedule): flash_backward_hopper's backward in one pass; see the
comment below. Loads beside the library module and uses its pieces."""
import math

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from tilegym_edu.reference.attention import LOG2E
from tilegym_edu.reference.flash_backward_hopper import (WG_KEYS, _alloc_ring, _issue_qdo,
                                                         _lse_descriptor, _query_range,
                                                         _store_tile)
from tilegym_edu.reference.flash_hopper import rows_descriptor


# ---------------------------------------------------------------------------------------------
# EXPERIMENT (run 35): dk, dv and dq in one pass over the key blocks, five matmuls a pair of
# blocks: each program adds its key block's share of dq (dS K) into a float32 dq accumulator
# in global memory by TMA reduce-add (cp.reduce.async.bulk.tensor), which Triton 3.6's Gluon
# compiler has (ttng.async_tma_reduce, GluonOpBuilder.create_async_tma_reduce) but does not
# name in its Python modules.

from triton._C.libtriton import ir as _ir  # noqa: E402
from triton.experimental.gluon.language._core import builtin as _builtin  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared  # noqa: E402


@_builtin
def _tma_reduce_add(tensor_desc, coord, src, _semantic=None):
    """global[the box at coord] += shared ``src`` (TMA bulk reduce-add); completion is tracked
    like a TMA store's (tma.store_wait)."""
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(_ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle,
                                              coord, src.handle)


@gluon.jit
def _rot_start(t, lo, n_blocks, rot, BLOCK_M: gl.constexpr):
    """The first query of stream index t when each program starts its walk over the query
    blocks rot blocks in (rot 0: _stream_row's order), so that key-block programs running
    together reduce-add into different dq rows."""
    return lo + ((t % n_blocks + rot) % n_blocks) * BLOCK_M


@gluon.jit
def _rot_row(t, q_row0, seq, lo, n_blocks, rot, BLOCK_M: gl.constexpr):
    """_stream_row with the rotation of _rot_start."""
    return q_row0 + (t // n_blocks) * seq + _rot_start(t, lo, n_blocks, rot, BLOCK_M)


@gluon.jit
def _rot_rotation(n0, n_blocks, BLOCK_N: gl.constexpr, ROTATE: gl.constexpr,
                  CAUSAL: gl.constexpr):
    """A program's rotation: its key block's index (modulo n_blocks) where ROTATE and not
    causal (causal walks keep the masked blocks first), else 0."""
    if ROTATE and not CAUSAL:
        rot = (n0 // BLOCK_N) % n_blocks
    else:
        rot = n0 * 0
    return rot


@gluon.jit
def _fused_produce(descs, k_desc, v_desc, ring, bars, k_smem, v_smem, kv_bar, empty, row0, n0,
                   lo, n_blocks, total, q_row0, seq, rot, BLOCK_M: gl.constexpr,
                   STAGES: gl.constexpr, CONSUMERS: gl.constexpr):
    """_dkdv_produce in the rotated order."""
    mbarrier.expect(kv_bar, CONSUMERS * (k_desc.block_type.nbytes + v_desc.block_type.nbytes))
    for w in gl.static_range(CONSUMERS):
        tma.async_copy_global_to_shared(k_desc, [row0 + n0 + w * WG_KEYS, 0], kv_bar,
                                        k_smem.index(w))
        tma.async_copy_global_to_shared(v_desc, [row0 + n0 + w * WG_KEYS, 0], kv_bar,
                                        v_smem.index(w))
    for i in range(total):
        slot = i % STAGES
        mbarrier.wait(empty.index(slot), ((i // STAGES) & 1) ^ 1)
        _issue_qdo(descs, ring, bars, _rot_row(i, q_row0, seq, lo, n_blocks, rot, BLOCK_M), slot)



#: the dq columns one reduce-add takes (a wgmma N of 64: its accumulator beside dk and dv)
DQ_COLUMNS = gl.constexpr(64)


@gluon.jit
def _fused_block(i, k_tile, v_tile, ring, bars, dk, dv, start_m, q_row, key_pos, zero_s, zero_q,
                 qk_scale, ds_smem, dq_smem, dq_desc, STAGES: gl.constexpr,
                 BLOCK_M: gl.constexpr, MASKED: gl.constexpr, s_layout: gl.constexpr,
                 a_layout: gl.constexpr):
    """_dkdv_block, and this block's dq share dS K (queries the rows: dS^T through shared
    memory, read transposed), DQ_COLUMNS columns at a time, each part reduce-added into the
    dq accumulator at row q_row from its own staging buffer dq_smem.index(part)."""
    q_smem, do_smem, lse_smem, delta_smem = ring
    q_bars, do_bars = bars
    dtype: gl.constexpr = q_smem.dtype
    HEAD_DIM: gl.constexpr = k_tile.shape[1]
    PARTS: gl.constexpr = HEAD_DIM // DQ_COLUMNS
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    slot = i % STAGES
    phase = (i // STAGES) & 1
    q_tile = q_smem.index(slot)
    do_tile = do_smem.index(slot)

    mbarrier.wait(q_bars.index(slot), phase)
    s = warpgroup_mma(k_tile, q_tile.permute((1, 0)), zero_s, use_acc=False, is_async=True)
    mbarrier.wait(do_bars.index(slot), phase)
    dp = warpgroup_mma(v_tile, do_tile.permute((1, 0)), zero_s, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(1, deps=(s,))
    lse = lse_smem.index(slot).load(col_layout)
    p = gl.exp2(s * qk_scale - gl.expand_dims(lse, 0))
    if MASKED:
        cols = start_m + gl.arange(0, BLOCK_M, layout=col_layout)
        p = gl.where(gl.expand_dims(cols, 0) >= gl.expand_dims(key_pos, 1), p, 0.0)
    p_op = gl.convert_layout(p.to(dtype), a_layout)
    dv = warpgroup_mma(p_op, do_tile, dv, is_async=True)
    dp = warpgroup_mma_wait(1, deps=(dp,))
    delta = delta_smem.index(slot).load(col_layout)
    ds = (p * (dp - gl.expand_dims(delta, 0))).to(dtype)
    ds_op = gl.convert_layout(ds, a_layout)
    dk = warpgroup_mma(ds_op, q_tile, dk, is_async=True)
    ds_smem.store(ds)
    fence_async_shared()
    for part in gl.static_range(PARTS):
        dq = warpgroup_mma(ds_smem.permute((1, 0)),
                           k_tile.slice(part * DQ_COLUMNS, DQ_COLUMNS, dim=1), zero_q,
                           use_acc=False, is_async=True)
        if part == 0:
            dv, dk, p_op, ds_op, dq = warpgroup_mma_wait(0, deps=(dv, dk, p_op, ds_op, dq))
        else:
            dq = warpgroup_mma_wait(0, deps=(dq,))
        tma.store_wait(PARTS - 1)  # this buffer's reduce-add of the last block has read it
        dq_smem.index(part).store(dq)
        fence_async_shared()
        _tma_reduce_add(dq_desc, [q_row, part * DQ_COLUMNS], dq_smem.index(part))
    return dk, dv


@gluon.jit
def _fused_loop(first, last, lo, n_blocks, rot, total, q_row0, seq, k_smem, v_smem, descs, ring,
                bars, dk, dv, key_pos, zero_s, zero_q, qk_scale, ds_smem, dq_smem, dq_desc,
                STAGES: gl.constexpr, BLOCK_M: gl.constexpr, MASKED: gl.constexpr,
                s_layout: gl.constexpr, a_layout: gl.constexpr):
    """_one_loop with _fused_block."""
    for i in range(first, last):
        dk, dv = _fused_block(i, k_smem, v_smem, ring, bars, dk, dv,
                              _rot_start(i, lo, n_blocks, rot, BLOCK_M),
                              _rot_row(i, q_row0, seq, lo, n_blocks, rot, BLOCK_M), key_pos,
                              zero_s, zero_q, qk_scale, ds_smem, dq_smem, dq_desc, STAGES,
                              BLOCK_M, MASKED, s_layout, a_layout)
        if i + STAGES < total:
            _issue_qdo(descs, ring, bars,
                       _rot_row(i + STAGES, q_row0, seq, lo, n_blocks, rot, BLOCK_M), i % STAGES)
    return dk, dv


@gluon.jit
def fused_one_kernel(q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc, dq_desc, dk_ptr,
                     dv_ptr, seq, group, qk_scale, sm_scale, HEAD_DIM: gl.constexpr,
                     BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, STAGES: gl.constexpr,
                     CAUSAL: gl.constexpr, ROTATE: gl.constexpr, num_warps: gl.constexpr):
    """dkdv_one_kernel plus dq: each block's dS K reduce-added into dq_desc's float32 rows
    (batch * heads * seq, HEAD_DIM) in boxes of BLOCK_M x DQ_COLUMNS (unscaled: times
    sm_scale after)."""
    gl.static_assert(BLOCK_N == WG_KEYS, "fused_one_kernel: one warpgroup of 64 keys")
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
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, DQ_COLUMNS, 16])
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M], dtype)

    k_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM], v_desc.layout)
    ds_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, BLOCK_M], ds_layout)
    dq_smem = gl.allocate_shared_memory(gl.float32, [HEAD_DIM // DQ_COLUMNS, BLOCK_M, DQ_COLUMNS],
                                        dq_desc.layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    descs = (q_desc, do_desc, lse_desc, delta_desc)
    ring, bars = _alloc_ring(q_desc, do_desc, lse_desc, delta_desc, STAGES)

    lo, n_masked, n_blocks = _query_range(n0, seq, BLOCK_N, BLOCK_M, CAUSAL)
    rot = _rot_rotation(n0, n_blocks, BLOCK_N, ROTATE, CAUSAL)
    total = group * n_blocks

    mbarrier.expect(kv_bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [row0 + n0, 0], kv_bar, k_smem)
    tma.async_copy_global_to_shared(v_desc, [row0 + n0, 0], kv_bar, v_smem)
    for i in gl.static_range(STAGES):
        if i < total:
            _issue_qdo(descs, ring, bars, _rot_row(i, q_row0, seq, lo, n_blocks, rot, BLOCK_M), i)

    key_pos = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, s_layout))
    dk = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, layout=acc_layout)
    dv = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, layout=acc_layout)
    zero_s = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, layout=s_layout)
    zero_q = gl.zeros([BLOCK_M, DQ_COLUMNS], gl.float32, layout=dq_layout)
    mbarrier.wait(kv_bar, 0)

    for g in range(group):
        base = g * n_blocks
        if CAUSAL:
            dk, dv = _fused_loop(base, base + n_masked, lo, n_blocks, rot, total, q_row0, seq,
                                 k_smem, v_smem, descs, ring, bars, dk, dv, key_pos, zero_s,
                                 zero_q, qk_scale, ds_smem, dq_smem, dq_desc, STAGES, BLOCK_M,
                                 True, s_layout, a_layout)
        dk, dv = _fused_loop(base + n_masked, base + n_blocks, lo, n_blocks, rot, total, q_row0, seq,
                             k_smem, v_smem, descs, ring, bars, dk, dv, key_pos, zero_s, zero_q,
                             qk_scale, ds_smem, dq_smem, dq_desc, STAGES, BLOCK_M, False,
                             s_layout, a_layout)

    tma.store_wait(0)
    mbarrier.invalidate(kv_bar)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars[0].index(i))
        mbarrier.invalidate(bars[1].index(i))
    head = row0 * HEAD_DIM
    _store_tile(dk, dk_ptr + head, n0, sm_scale, BLOCK_N, HEAD_DIM, num_warps)
    _store_tile(dv, dv_ptr + head, n0, 1.0, BLOCK_N, HEAD_DIM, num_warps)


@gluon.jit
def _fused_ws_loop(first, last, lo, n_blocks, rot, q_row0, seq, k_tile, v_tile, ring, bars, empty,
                   dk, dv, key_pos, zero_s, zero_q, qk_scale, ds_smem, dq_smem, dq_desc,
                   STAGES: gl.constexpr, BLOCK_M: gl.constexpr, MASKED: gl.constexpr,
                   s_layout: gl.constexpr, a_layout: gl.constexpr):
    """_ws_loop with _fused_block."""
    for i in range(first, last):
        dk, dv = _fused_block(i, k_tile, v_tile, ring, bars, dk, dv,
                              _rot_start(i, lo, n_blocks, rot, BLOCK_M),
                              _rot_row(i, q_row0, seq, lo, n_blocks, rot, BLOCK_M), key_pos,
                              zero_s, zero_q, qk_scale, ds_smem, dq_smem, dq_desc, STAGES,
                              BLOCK_M, MASKED, s_layout, a_layout)
        mbarrier.arrive(empty.index(i % STAGES), count=1)
    return dk, dv


@gluon.jit
def _fused_consume(shared, WG: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
                   STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    """_dkdv_consume with each block's dq share reduce-added (this warpgroup's 64 keys)."""
    (ring, bars, k_smem, v_smem, kv_bar, empty, dk_ptr, dv_ptr, row0, n0, lo, n_masked,
     n_blocks, rot, group, q_row0, seq, qk_scale, sm_scale, ds_smem, dq_smem, dq_smem_1,
     dq_desc) = shared
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_M, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, DQ_COLUMNS, 16])
    first_key = n0 + WG * WG_KEYS
    key_pos = first_key + gl.arange(0, WG_KEYS, layout=gl.SliceLayout(1, s_layout))
    k_tile = k_smem.index(WG)
    v_tile = v_smem.index(WG)
    my_ds = ds_smem.index(WG)
    if WG == 0:
        my_dq = dq_smem
    else:
        my_dq = dq_smem_1
    dk = gl.zeros([WG_KEYS, HEAD_DIM], gl.float32, layout=acc_layout)
    dv = gl.zeros([WG_KEYS, HEAD_DIM], gl.float32, layout=acc_layout)
    zero_s = gl.zeros([WG_KEYS, BLOCK_M], gl.float32, layout=s_layout)
    zero_q = gl.zeros([BLOCK_M, DQ_COLUMNS], gl.float32, layout=dq_layout)
    mbarrier.wait(kv_bar, 0)
    for g in range(group):
        base = g * n_blocks
        if CAUSAL:
            dk, dv = _fused_ws_loop(base, base + n_masked, lo, n_blocks, rot, q_row0, seq, k_tile,
                                    v_tile, ring, bars, empty, dk, dv, key_pos, zero_s, zero_q,
                                    qk_scale, my_ds, my_dq, dq_desc, STAGES, BLOCK_M, True,
                                    s_layout, a_layout)
        dk, dv = _fused_ws_loop(base + n_masked, base + n_blocks, lo, n_blocks, rot, q_row0, seq,
                                k_tile, v_tile, ring, bars, empty, dk, dv, key_pos, zero_s,
                                zero_q, qk_scale, my_ds, my_dq, dq_desc, STAGES, BLOCK_M, False,
                                s_layout, a_layout)
    tma.store_wait(0)
    head = row0 * HEAD_DIM
    _store_tile(dk, dk_ptr + head, first_key, sm_scale, WG_KEYS, HEAD_DIM, 4)
    _store_tile(dv, dv_ptr + head, first_key, 1.0, WG_KEYS, HEAD_DIM, 4)


@gluon.jit
def fused_ws_kernel(q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc, dq_desc, dk_ptr,
                    dv_ptr, seq, group, qk_scale, sm_scale, HEAD_DIM: gl.constexpr,
                    BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, STAGES: gl.constexpr,
                    CAUSAL: gl.constexpr, ROTATE: gl.constexpr,
                    CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    """dkdv_ws_kernel plus dq, each consumer reduce-adding its 64 keys' share of every block."""
    gl.static_assert(BLOCK_N == 2 * WG_KEYS, "fused_ws_kernel: two consumers of 64 keys")
    CONSUMERS: gl.constexpr = BLOCK_N // WG_KEYS
    dtype: gl.constexpr = q_desc.dtype
    n0 = gl.program_id(0) * BLOCK_N
    bkv = gl.program_id(1)
    row0 = bkv * seq
    q_row0 = bkv * group * seq
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([WG_KEYS, BLOCK_M], dtype)

    k_smem = gl.allocate_shared_memory(dtype, [CONSUMERS, WG_KEYS, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [CONSUMERS, WG_KEYS, HEAD_DIM], v_desc.layout)
    ds_smem = gl.allocate_shared_memory(dtype, [CONSUMERS, WG_KEYS, BLOCK_M], ds_layout)
    # a staging buffer per consumer (the second one its own allocation: a slice of one
    # rank-3 buffer whose layout is rank 2 crashes Triton 3.6's layout conversion)
    dq_smem = gl.allocate_shared_memory(gl.float32, [HEAD_DIM // DQ_COLUMNS, BLOCK_M, DQ_COLUMNS],
                                        dq_desc.layout)
    dq_smem_1 = gl.allocate_shared_memory(gl.float32,
                                          [HEAD_DIM // DQ_COLUMNS, BLOCK_M, DQ_COLUMNS],
                                          dq_desc.layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(empty.index(i), count=CONSUMERS)
    descs = (q_desc, do_desc, lse_desc, delta_desc)
    ring, bars = _alloc_ring(q_desc, do_desc, lse_desc, delta_desc, STAGES)

    lo, n_masked, n_blocks = _query_range(n0, seq, BLOCK_N, BLOCK_M, CAUSAL)
    rot = _rot_rotation(n0, n_blocks, BLOCK_N, ROTATE, CAUSAL)
    shared = (ring, bars, k_smem, v_smem, kv_bar, empty, dk_ptr, dv_ptr, row0, n0, lo, n_masked,
              n_blocks, rot, group, q_row0, seq, qk_scale, sm_scale, ds_smem, dq_smem, dq_smem_1,
              dq_desc)
    gl.warp_specialize([
        (_fused_consume, (shared, 0, HEAD_DIM, BLOCK_M, STAGES, CAUSAL)),
        (_fused_consume, (shared, 1, HEAD_DIM, BLOCK_M, STAGES, CAUSAL)),
        (_fused_produce, (descs, k_desc, v_desc, ring, bars, k_smem, v_smem, kv_bar, empty,
                          row0, n0, lo, n_blocks, group * n_blocks, q_row0, seq, rot, BLOCK_M,
                          STAGES, CONSUMERS)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


@gluon.jit
def _fused2_block(i, WG: gl.constexpr, k_smem, v_smem, ring, bars, dk, dv, start_m, q_row, key_pos,
                  zero_s, zero_q, qk_scale, ds_smem, ds_ready, ds_free, dq_smem, dq_desc,
                  STAGES: gl.constexpr, BLOCK_M: gl.constexpr, MASKED: gl.constexpr,
                  s_layout: gl.constexpr, a_layout: gl.constexpr):
    """_dkdv_block for consumer WG's 64 keys, and dq's share of all 128 keys, FlashAttention-3's
    split: both consumers put their dS^T in shared memory, then consumer WG multiplies dS (the
    128 keys) by K's columns WG * HEAD_DIM / 2 .. and reduce-adds that half of dq's row block."""
    q_smem, do_smem, lse_smem, delta_smem = ring
    q_bars, do_bars = bars
    dtype: gl.constexpr = q_smem.dtype
    HEAD_DIM: gl.constexpr = k_smem.shape[2]
    HALF: gl.constexpr = HEAD_DIM // 2
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    slot = i % STAGES
    phase = (i // STAGES) & 1
    q_tile = q_smem.index(slot)
    do_tile = do_smem.index(slot)
    k_tile = k_smem.index(WG)
    v_tile = v_smem.index(WG)

    mbarrier.wait(q_bars.index(slot), phase)
    s = warpgroup_mma(k_tile, q_tile.permute((1, 0)), zero_s, use_acc=False, is_async=True)
    mbarrier.wait(do_bars.index(slot), phase)
    dp = warpgroup_mma(v_tile, do_tile.permute((1, 0)), zero_s, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(1, deps=(s,))
    lse = lse_smem.index(slot).load(col_layout)
    p = gl.exp2(s * qk_scale - gl.expand_dims(lse, 0))
    if MASKED:
        cols = start_m + gl.arange(0, BLOCK_M, layout=col_layout)
        p = gl.where(gl.expand_dims(cols, 0) >= gl.expand_dims(key_pos, 1), p, 0.0)
    p_op = gl.convert_layout(p.to(dtype), a_layout)
    dv = warpgroup_mma(p_op, do_tile, dv, is_async=True)
    dp = warpgroup_mma_wait(1, deps=(dp,))
    delta = delta_smem.index(slot).load(col_layout)
    ds = (p * (dp - gl.expand_dims(delta, 0))).to(dtype)
    ds_op = gl.convert_layout(ds, a_layout)
    dk = warpgroup_mma(ds_op, q_tile, dk, is_async=True)
    mbarrier.wait(ds_free, (i & 1) ^ 1)  # both consumers' last dq matmuls read ds_smem
    ds_smem.index(WG).store(ds)
    fence_async_shared()
    mbarrier.arrive(ds_ready, count=1)
    # dv and dk done before dq's matmuls: P^T and dS^T leave the registers first
    dv, dk, p_op, ds_op = warpgroup_mma_wait(0, deps=(dv, dk, p_op, ds_op))
    mbarrier.wait(ds_ready, i & 1)  # the other consumer's dS^T is in too
    dq = warpgroup_mma(ds_smem.index(0).permute((1, 0)),
                       k_smem.index(0).slice(WG * HALF, HALF, dim=1), zero_q, use_acc=False,
                       is_async=True)
    dq = warpgroup_mma(ds_smem.index(1).permute((1, 0)),
                       k_smem.index(1).slice(WG * HALF, HALF, dim=1), dq, is_async=True)
    dq = warpgroup_mma_wait(0, deps=(dq,))
    mbarrier.arrive(ds_free, count=1)
    tma.store_wait(0)  # the last block's reduce-add has read dq_smem
    dq_smem.store(dq)
    fence_async_shared()
    _tma_reduce_add(dq_desc, [q_row, WG * HALF], dq_smem)
    return dk, dv


@gluon.jit
def _fused2_loop(first, last, WG: gl.constexpr, lo, n_blocks, rot, q_row0, seq, k_smem, v_smem, ring,
                 bars, empty, dk, dv, key_pos, zero_s, zero_q, qk_scale, ds_smem, ds_ready,
                 ds_free, dq_smem, dq_desc, STAGES: gl.constexpr, BLOCK_M: gl.constexpr,
                 MASKED: gl.constexpr, s_layout: gl.constexpr, a_layout: gl.constexpr):
    """_ws_loop with _fused2_block."""
    for i in range(first, last):
        dk, dv = _fused2_block(i, WG, k_smem, v_smem, ring, bars, dk, dv,
                               _rot_start(i, lo, n_blocks, rot, BLOCK_M),
                               _rot_row(i, q_row0, seq, lo, n_blocks, rot, BLOCK_M), key_pos,
                               zero_s, zero_q, qk_scale, ds_smem, ds_ready, ds_free, dq_smem,
                               dq_desc, STAGES, BLOCK_M, MASKED, s_layout, a_layout)
        mbarrier.arrive(empty.index(i % STAGES), count=1)
    return dk, dv


@gluon.jit
def _fused2_consume(shared, WG: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
                    STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    """_dkdv_consume with half of dq's columns of every block (all 128 keys) reduce-added."""
    (ring, bars, k_smem, v_smem, kv_bar, empty, dk_ptr, dv_ptr, row0, n0, lo, n_masked,
     n_blocks, rot, group, q_row0, seq, qk_scale, sm_scale, ds_smem, ds_ready, ds_free, dq_smem,
     dq_smem_1, dq_desc) = shared
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_M, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM // 2, 16])
    first_key = n0 + WG * WG_KEYS
    key_pos = first_key + gl.arange(0, WG_KEYS, layout=gl.SliceLayout(1, s_layout))
    if WG == 0:
        my_dq = dq_smem
    else:
        my_dq = dq_smem_1
    dk = gl.zeros([WG_KEYS, HEAD_DIM], gl.float32, layout=acc_layout)
    dv = gl.zeros([WG_KEYS, HEAD_DIM], gl.float32, layout=acc_layout)
    zero_s = gl.zeros([WG_KEYS, BLOCK_M], gl.float32, layout=s_layout)
    zero_q = gl.zeros([BLOCK_M, HEAD_DIM // 2], gl.float32, layout=dq_layout)
    mbarrier.wait(kv_bar, 0)
    for g in range(group):
        base = g * n_blocks
        if CAUSAL:
            dk, dv = _fused2_loop(base, base + n_masked, WG, lo, n_blocks, rot, q_row0, seq, k_smem,
                                  v_smem, ring, bars, empty, dk, dv, key_pos, zero_s, zero_q,
                                  qk_scale, ds_smem, ds_ready, ds_free, my_dq, dq_desc, STAGES,
                                  BLOCK_M, True, s_layout, a_layout)
        dk, dv = _fused2_loop(base + n_masked, base + n_blocks, WG, lo, n_blocks, rot, q_row0, seq,
                              k_smem, v_smem, ring, bars, empty, dk, dv, key_pos, zero_s, zero_q,
                              qk_scale, ds_smem, ds_ready, ds_free, my_dq, dq_desc, STAGES,
                              BLOCK_M, False, s_layout, a_layout)
    tma.store_wait(0)
    head = row0 * HEAD_DIM
    _store_tile(dk, dk_ptr + head, first_key, sm_scale, WG_KEYS, HEAD_DIM, 4)
    _store_tile(dv, dv_ptr + head, first_key, 1.0, WG_KEYS, HEAD_DIM, 4)


@gluon.jit
def fused_ws2_kernel(q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc, dq_desc, dk_ptr,
                     dv_ptr, seq, group, qk_scale, sm_scale, HEAD_DIM: gl.constexpr,
                     BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, STAGES: gl.constexpr,
                     CAUSAL: gl.constexpr, ROTATE: gl.constexpr,
                     CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    """fused_ws_kernel with dq's share of all 128 keys reduced once (each consumer half of the
    columns): dq_desc in boxes of BLOCK_M x HEAD_DIM / 2."""
    gl.static_assert(BLOCK_N == 2 * WG_KEYS, "fused_ws2_kernel: two consumers of 64 keys")
    CONSUMERS: gl.constexpr = BLOCK_N // WG_KEYS
    dtype: gl.constexpr = q_desc.dtype
    n0 = gl.program_id(0) * BLOCK_N
    bkv = gl.program_id(1)
    row0 = bkv * seq
    q_row0 = bkv * group * seq
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([WG_KEYS, BLOCK_M], dtype)

    k_smem = gl.allocate_shared_memory(dtype, [CONSUMERS, WG_KEYS, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [CONSUMERS, WG_KEYS, HEAD_DIM], v_desc.layout)
    ds_smem = gl.allocate_shared_memory(dtype, [CONSUMERS, WG_KEYS, BLOCK_M], ds_layout)
    dq_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_M, HEAD_DIM // 2], dq_desc.layout)
    dq_smem_1 = gl.allocate_shared_memory(gl.float32, [BLOCK_M, HEAD_DIM // 2], dq_desc.layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ds_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ds_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    mbarrier.init(ds_ready, count=CONSUMERS)
    mbarrier.init(ds_free, count=CONSUMERS)
    for i in gl.static_range(STAGES):
        mbarrier.init(empty.index(i), count=CONSUMERS)
    descs = (q_desc, do_desc, lse_desc, delta_desc)
    ring, bars = _alloc_ring(q_desc, do_desc, lse_desc, delta_desc, STAGES)

    lo, n_masked, n_blocks = _query_range(n0, seq, BLOCK_N, BLOCK_M, CAUSAL)
    rot = _rot_rotation(n0, n_blocks, BLOCK_N, ROTATE, CAUSAL)
    shared = (ring, bars, k_smem, v_smem, kv_bar, empty, dk_ptr, dv_ptr, row0, n0, lo, n_masked,
              n_blocks, rot, group, q_row0, seq, qk_scale, sm_scale, ds_smem, ds_ready, ds_free,
              dq_smem, dq_smem_1, dq_desc)
    gl.warp_specialize([
        (_fused2_consume, (shared, 0, HEAD_DIM, BLOCK_M, STAGES, CAUSAL)),
        (_fused2_consume, (shared, 1, HEAD_DIM, BLOCK_M, STAGES, CAUSAL)),
        (_fused_produce, (descs, k_desc, v_desc, ring, bars, k_smem, v_smem, kv_bar, empty,
                          row0, n0, lo, n_blocks, group * n_blocks, q_row0, seq, rot, BLOCK_M,
                          STAGES, CONSUMERS)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


FUSED_NAMES = ("SCHEDULE", "BLOCK_N", "BLOCK_M", "STAGES", "ROTATE")
FUSED_CONFIGS = (("one", 64, 64, 2, False), ("ws", 128, 64, 2, False), ("ws2", 128, 64, 2, False),
                 ("ws", 128, 64, 2, True), ("ws2", 128, 64, 2, True))


def launch_fused(q, k, v, lse, delta, do, dq_accum, dk, dv, causal: bool, config) -> None:
    """One pass: dk and dv into dk, dv; dS K reduce-added into dq_accum (float32, q's shape,
    zeroed first; dq = dq_accum * sm_scale after)."""
    schedule, block_n, block_m, stages, rotate = (config[n] for n in FUSED_NAMES)
    batch, heads, seq, head_dim = q.shape
    sm_scale = 1 / math.sqrt(head_dim)
    kv_rows = block_n if schedule == "one" else WG_KEYS.value
    dq_box = [block_m, head_dim // 2 if schedule == "ws2" else DQ_COLUMNS.value]
    dq_layout = gl.NVMMASharedLayout.get_default_for(dq_box, gl.float32)
    dq_desc = TensorDescriptor(dq_accum, [dq_accum.numel() // head_dim, head_dim], [head_dim, 1],
                               dq_box, dq_layout)
    args = (rows_descriptor(q, block_m), rows_descriptor(k, kv_rows), rows_descriptor(v, kv_rows),
            rows_descriptor(do, block_m), _lse_descriptor(lse, block_m),
            _lse_descriptor(delta, block_m), dq_desc, dk, dv, seq, heads // k.shape[1],
            sm_scale * LOG2E, sm_scale)
    grid = (seq // block_n, batch * k.shape[1])
    options = dict(HEAD_DIM=head_dim, BLOCK_N=block_n, BLOCK_M=block_m, STAGES=stages,
                   CAUSAL=causal, ROTATE=rotate, num_warps=4)
    if schedule == "one":
        fused_one_kernel[grid](*args, **options)
    elif schedule == "ws":
        fused_ws_kernel[grid](*args, CONSUMER_REGS=240, PRODUCER_REGS=24, **options)
    else:
        fused_ws2_kernel[grid](*args, CONSUMER_REGS=240, PRODUCER_REGS=24, **options)


import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _dq_convert_kernel(acc_ptr, dq_ptr, scale, n, BLOCK: tl.constexpr):
    """dq = acc * scale in dq's dtype, over n values."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    acc = tl.load(acc_ptr + offsets, mask=mask)
    tl.store(dq_ptr + offsets, (acc * scale).to(dq_ptr.dtype.element_ty), mask=mask)


def fused_backward(q, k, v, o, lse, do, causal: bool, config, delta=None):
    """(dq, dk, dv) in one pass over the key blocks: delta (unless given), a zeroed float32
    dq accumulator, the fused kernel of ``config`` (FUSED_NAMES), then dq converted."""
    from tilegym_edu.reference.flash_backward import backward_delta
    if delta is None:
        delta = backward_delta(o, do)
    acc = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    launch_fused(q, k, v, lse, delta, do, acc, dk, dv, causal, config)
    n = acc.numel()
    _dq_convert_kernel[(triton.cdiv(n, 4096),)](acc, dq, 1 / math.sqrt(q.shape[-1]), n,
                                                BLOCK=4096)
    return dq, dk, dv
