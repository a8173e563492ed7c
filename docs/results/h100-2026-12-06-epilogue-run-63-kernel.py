"""Experiment (issue 18, B16 H16 S1024 D128): flash_hopper's warp-specialised kernel with its
epilogue by TMA store. Each consumer writes o (64 rows) into its own shared-memory tile and
the copy engine stores it while the consumer goes on to its next tile (tma.store_wait before
the tile is written again). Otherwise the library's _ws_consume and hopper_flash_ws_kernel."""
import math

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma,
                                                               warpgroup_mma, warpgroup_mma_wait)

from tilegym_edu.reference import flash_hopper as fh
from tilegym_edu.reference.attention import LOG2E
from tilegym_edu.reference.flash_hopper import (CONSUMER_ROWS, _key_blocks, _program_tiles,
                                                _query_blocks, _softmax_step, _ws_load)


@gluon.jit
def _epi_consume(shared, WG: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                 HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                 PARTIAL: gl.constexpr, LSE_FIRST: gl.constexpr):
    (q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, v_ready, k_empty, v_empty, o_smem,
     o_desc, lse_ptr, H, seq_q, seq_k, order_ptr, starts_ptr, qk_scale) = shared
    CONSUMERS: gl.constexpr = BLOCK_M // CONSUMER_ROWS
    Q_BUFFERS: gl.constexpr = q_smem.shape[0] // CONSUMERS
    ROWS: gl.constexpr = CONSUMER_ROWS
    dtype: gl.constexpr = q_smem.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    zero_s = gl.zeros([ROWS, BLOCK_N], gl.float32, layout=s_layout)
    shift = seq_k - seq_q
    n_m = _query_blocks(seq_q, BLOCK_M, PARTIAL)
    first, end = _program_tiles(order_ptr, starts_ptr)
    out_tile = o_smem.index(WG)
    it = 0
    for t in range(first, end):
        count = t - first
        tile = gl.load(order_ptr + t)
        bh = tile // n_m
        start_m = tile % n_m
        qi = (count % Q_BUFFERS) * CONSUMERS + WG
        q_tile = q_smem.index(qi)
        start = start_m * BLOCK_M + WG * ROWS
        n_blocks = _key_blocks(start_m * BLOCK_M + shift, seq_k, BLOCK_M, BLOCK_N, CAUSAL,
                               PARTIAL)
        q_pos = start + shift + gl.arange(0, ROWS, layout=row_s)
        masked_from = (start + shift) // BLOCK_N
        m_i = gl.full([ROWS], -float("inf"), gl.float32, layout=row_s)
        l_i = gl.full([ROWS], 0.0, gl.float32, layout=row_s)
        acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, layout=o_layout)

        mbarrier.wait(q_ready.index(qi), (count // Q_BUFFERS) & 1)
        slot = it % STAGES
        mbarrier.wait(k_ready.index(slot), (it // STAGES) & 1)
        s = warpgroup_mma(q_tile, k_smem.index(slot).permute((1, 0)), zero_s, use_acc=False,
                          is_async=True)
        s = warpgroup_mma_wait(0, deps=(s,))
        mbarrier.arrive(k_empty.index(slot), count=1)
        if n_blocks == 1:
            mbarrier.arrive(q_empty.index(qi), count=1)
        p, m_i, l_i, alpha = _softmax_step(s, m_i, l_i, 0, masked_from, q_pos, qk_scale,
                                           BLOCK_N, CAUSAL, s_layout)
        p_op = gl.convert_layout(p.to(dtype), p_layout)

        for j in range(1, n_blocks):
            prev = (it + j - 1) % STAGES
            slot = (it + j) % STAGES
            mbarrier.wait(k_ready.index(slot), ((it + j) // STAGES) & 1)
            mbarrier.wait(v_ready.index(prev), ((it + j - 1) // STAGES) & 1)
            s = warpgroup_mma(q_tile, k_smem.index(slot).permute((1, 0)), zero_s, use_acc=False,
                              is_async=True)
            acc = warpgroup_mma(p_op, v_smem.index(prev), acc, is_async=True)
            s = warpgroup_mma_wait(1, deps=(s,))
            mbarrier.arrive(k_empty.index(slot), count=1)
            if j == n_blocks - 1:
                mbarrier.arrive(q_empty.index(qi), count=1)
            p, m_i, l_i, alpha = _softmax_step(s, m_i, l_i, j, masked_from, q_pos, qk_scale,
                                               BLOCK_N, CAUSAL, s_layout)
            acc, p_op = warpgroup_mma_wait(0, deps=(acc, p_op))
            mbarrier.arrive(v_empty.index(prev), count=1)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
            p_op = gl.convert_layout(p.to(dtype), p_layout)

        last = (it + n_blocks - 1) % STAGES
        mbarrier.wait(v_ready.index(last), ((it + n_blocks - 1) // STAGES) & 1)
        acc = warpgroup_mma(p_op, v_smem.index(last), acc, is_async=True)
        lse_rows = start + gl.arange(0, ROWS, layout=row_s)
        if LSE_FIRST:  # lse's store issued while the last product runs
            gl.store(lse_ptr + bh * seq_q + lse_rows, m_i + gl.log2(l_i))
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(v_empty.index(last), count=1)
        it += n_blocks

        out = acc / gl.expand_dims(gl.convert_layout(l_i, row_o), 1)
        tma.store_wait(0)  # the previous tile's copy has read out_tile
        out_tile.store(out.to(dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(o_desc, [bh * seq_q + start, 0], out_tile)
        if not LSE_FIRST:
            gl.store(lse_ptr + bh * seq_q + lse_rows, m_i + gl.log2(l_i))
    tma.store_wait(0)


@gluon.jit
def epi_ws_kernel(q_desc, k_desc, v_desc, o_desc, lse_ptr, H, GROUP, seq_q, seq_k, qk_scale,
                  order_ptr, starts_ptr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
                  BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                  PARTIAL: gl.constexpr, Q_BUFFERS: gl.constexpr, LSE_FIRST: gl.constexpr):
    CONSUMERS: gl.constexpr = BLOCK_M // CONSUMER_ROWS
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [Q_BUFFERS * CONSUMERS, CONSUMER_ROWS, HEAD_DIM],
                                       q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    o_smem = gl.allocate_shared_memory(dtype, [CONSUMERS, CONSUMER_ROWS, HEAD_DIM], o_desc.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [Q_BUFFERS * CONSUMERS, 1],
                                        mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [Q_BUFFERS * CONSUMERS, 1],
                                        mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(Q_BUFFERS * CONSUMERS):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(q_empty.index(i), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=CONSUMERS)
        mbarrier.init(v_empty.index(i), count=CONSUMERS)
    shared = (q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, v_ready, k_empty, v_empty, o_smem,
              o_desc, lse_ptr, H, seq_q, seq_k, order_ptr, starts_ptr, qk_scale)
    if CONSUMERS == 3:
        gl.warp_specialize([
            (_epi_consume, (shared, 0, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, PARTIAL,
                            LSE_FIRST)),
            (_epi_consume, (shared, 1, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, PARTIAL,
                            LSE_FIRST)),
            (_epi_consume, (shared, 2, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, PARTIAL,
                            LSE_FIRST)),
            (_ws_load, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready,
                        v_ready, k_empty, v_empty, H, GROUP, seq_q, seq_k, order_ptr, starts_ptr,
                        BLOCK_M, BLOCK_N, STAGES, CAUSAL, PARTIAL)),
        ], [4, 4, 1], [160, 160, 32])
    else:
        gl.warp_specialize([
            (_epi_consume, (shared, 0, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, PARTIAL,
                            LSE_FIRST)),
            (_epi_consume, (shared, 1, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, PARTIAL,
                            LSE_FIRST)),
            (_ws_load, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready,
                        v_ready, k_empty, v_empty, H, GROUP, seq_q, seq_k, order_ptr, starts_ptr,
                        BLOCK_M, BLOCK_N, STAGES, CAUSAL, PARTIAL)),
        ], [4, 1], [240, 24])


def launch_epi(q, k, v, o, lse, causal, config, lse_first=False, q_buffers=None, programs=None):
    """epi_ws_kernel with config (BLOCK_M, BLOCK_N, STAGES, 'persistent' | 'specialised');
    q, k, v, o contiguous, seq_q a multiple of BLOCK_M (no PARTIAL: a TMA store would write
    past a head's rows). programs: the persistent grid's size (default: the SM count)."""
    block_m, block_n, stages, schedule = config
    batch, heads, seq_q, head_dim = q.shape
    assert seq_q % block_m == 0
    n_m = seq_q // block_m
    n_tiles = n_m * batch * heads
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    grid = min(n_tiles, programs or sms) if schedule == "persistent" else n_tiles
    order, starts = fh.tile_schedule_on(q.device, batch * heads, n_m, seq_q, k.shape[2], block_m,
                                        block_n, causal, grid)
    if q_buffers is None:
        q_buffers = fh.q_buffers(grid < n_tiles, causal, block_m, block_n, stages, head_dim)
    rows = CONSUMER_ROWS.value
    epi_ws_kernel[(grid,)](
        fh.rows_descriptor(q, rows), fh.rows_descriptor(k, block_n), fh.rows_descriptor(v, block_n),
        fh.rows_descriptor(o, rows), lse, heads, heads // k.shape[1], seq_q, k.shape[2],
        LOG2E / math.sqrt(head_dim), order, starts, HEAD_DIM=head_dim, BLOCK_M=block_m,
        BLOCK_N=block_n, STAGES=stages, CAUSAL=causal, PARTIAL=False, Q_BUFFERS=q_buffers,
        LSE_FIRST=lse_first, num_warps=4)
