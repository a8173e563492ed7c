# Run 44 of 2026-12-05 (H200), the kernel as it ran at commit 5a38c5d, from .gpu/overlap/: an experiment,
# not part of the package. Its result: docs/results/h200-2026-12-05-overlap-run-44.json, docs/results/h200.md.
"""EXPERIMENT (issue 18, B8 H16 S2048 D64 causal): hopper_flash_ws_kernel made persistent the way
FlashAttention-3 is, in three changes at once:

1. a balanced static schedule: the host assigns tiles to the programs (one an SM) longest first
   to the least-loaded program (LPT), each program then taking its tiles in head order (so the
   heads in flight stay few and their keys stay in L2); the kernel reads its list from a table.
   The library's persistent grid strides tiles (tile p, p + grid, ...): on 2048 causal tiles of
   1-16 key blocks over 132 programs that gives programs 112-160 blocks (mean 136).
2. q double-buffered per consumer, so the producer loads the next tile's q during this one.
3. the next tile's first scores (q K^T) issued before this tile's last P V is waited on, so the
   tensor cores work through the epilogue (normalise, store) instead of idling.

Not measured yet. Shapes as flash_hopper's ws kernel (seq lengths multiples of 128, head 64/128).
"""
import heapq
import math

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (mbarrier, tma, warpgroup_mma,
                                                               warpgroup_mma_wait)

from tilegym_edu.reference.flash_hopper import (CONSUMER_ROWS, LOG2E, _key_blocks, _query_blocks,
                                                _softmax_step, _store_rows, rows_descriptor)


@gluon.jit
def _ov_load(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, v_ready,
             k_empty, v_empty, sched_ptr, counts_ptr, width, H, GROUP, seq_q, seq_k,
             BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
             CAUSAL: gl.constexpr, PARTIAL: gl.constexpr):
    """The producer warp: for each tile of this program's list, every consumer's q block into
    buffer t % 2 (once that buffer's tile before last is done with it), then the tile's
    key/value blocks into the ring."""
    CONSUMERS: gl.constexpr = BLOCK_M // CONSUMER_ROWS
    n_m = _query_blocks(seq_q, BLOCK_M, PARTIAL)
    pid = gl.program_id(0)
    n = gl.load(counts_ptr + pid)
    it = 0
    for t in range(n):
        tile = gl.load(sched_ptr + pid * width + t)
        bh = tile // n_m
        start_m = tile % n_m
        b = bh // H
        kv_row = (b * (H // GROUP) + (bh % H) // GROUP) * seq_k
        for w in gl.static_range(CONSUMERS):
            qi = (t % 2) * CONSUMERS + w
            mbarrier.wait(q_empty.index(qi), ((t // 2) & 1) ^ 1)
            mbarrier.expect(q_ready.index(qi), q_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(
                q_desc, [bh * seq_q + start_m * BLOCK_M + w * CONSUMER_ROWS, 0],
                q_ready.index(qi), q_smem.index(qi))
        n_blocks = _key_blocks(start_m * BLOCK_M + seq_k - seq_q, seq_k, BLOCK_M, BLOCK_N, CAUSAL,
                               PARTIAL)
        for j in range(n_blocks):
            slot = it % STAGES
            phase = (it // STAGES) & 1
            mbarrier.wait(k_empty.index(slot), phase ^ 1)
            mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [kv_row + j * BLOCK_N, 0],
                                            k_ready.index(slot), k_smem.index(slot))
            mbarrier.wait(v_empty.index(slot), phase ^ 1)
            mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(v_desc, [kv_row + j * BLOCK_N, 0],
                                            v_ready.index(slot), v_smem.index(slot))
            it += 1


@gluon.jit
def _ov_tile(shared, t, s_next, it, WG: gl.constexpr, BLOCK_M: gl.constexpr,
             BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr,
             CAUSAL: gl.constexpr, PARTIAL: gl.constexpr):
    """Tile t of this program's list up to its last P V, issued and not waited on: (pv, l_i,
    m_i, last ring slot, output row pointer base, first row). ``s_next``: its first scores,
    in flight; ``it``: the key/value blocks this program consumed before it."""
    (q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, v_ready, k_empty, v_empty, o_ptr, lse_ptr,
     stride_ob, stride_oh, stride_os, H, seq_q, seq_k, sched_ptr, counts_ptr, width,
     qk_scale) = shared
    CONSUMERS: gl.constexpr = BLOCK_M // CONSUMER_ROWS
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
    tile = gl.load(sched_ptr + gl.program_id(0) * width + t)
    bh = tile // n_m
    start_m = tile % n_m
    qi = (t % 2) * CONSUMERS + WG
    q_tile = q_smem.index(qi)
    start = start_m * BLOCK_M + WG * ROWS
    n_blocks = _key_blocks(start_m * BLOCK_M + shift, seq_k, BLOCK_M, BLOCK_N, CAUSAL, PARTIAL)
    q_pos = start + shift + gl.arange(0, ROWS, layout=row_s)
    masked_from = (start + shift) // BLOCK_N
    m_i = gl.full([ROWS], -float("inf"), gl.float32, layout=row_s)
    l_i = gl.full([ROWS], 0.0, gl.float32, layout=row_s)
    acc = gl.zeros([ROWS, HEAD_DIM], gl.float32, layout=o_layout)

    s = warpgroup_mma_wait(0, deps=(s_next,))
    mbarrier.arrive(k_empty.index(it % STAGES), count=1)
    if n_blocks == 1:
        mbarrier.arrive(q_empty.index(qi), count=1)
    p, m_i, l_i, alpha = _softmax_step(s, m_i, l_i, 0, masked_from, q_pos, seq_k, qk_scale,
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
        p, m_i, l_i, alpha = _softmax_step(s, m_i, l_i, j, masked_from, q_pos, seq_k, qk_scale,
                                           BLOCK_N, CAUSAL, s_layout)
        acc, p_op = warpgroup_mma_wait(0, deps=(acc, p_op))
        mbarrier.arrive(v_empty.index(prev), count=1)
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
        p_op = gl.convert_layout(p.to(dtype), p_layout)
    last = (it + n_blocks - 1) % STAGES
    mbarrier.wait(v_ready.index(last), ((it + n_blocks - 1) // STAGES) & 1)
    pv = warpgroup_mma(p_op, v_smem.index(last), acc, is_async=True)
    return pv, l_i, m_i, last, it + n_blocks, bh, start


@gluon.jit
def _ov_store(shared, acc, l_i, m_i, last, bh, start, BLOCK_N: gl.constexpr,
              HEAD_DIM: gl.constexpr):
    """Release ring slot ``last`` and store the tile's rows (acc complete)."""
    (q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, v_ready, k_empty, v_empty, o_ptr, lse_ptr,
     stride_ob, stride_oh, stride_os, H, seq_q, seq_k, sched_ptr, counts_ptr, width,
     qk_scale) = shared
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    mbarrier.arrive(v_empty.index(last), count=1)
    _store_rows(acc, l_i, m_i, o_ptr + (bh // H) * stride_ob + (bh % H) * stride_oh,
                lse_ptr + bh * seq_q, start, seq_q, stride_os, CONSUMER_ROWS, HEAD_DIM, 4,
                o_layout, s_layout)


@gluon.jit
def _ov_consume(shared, WG: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                PARTIAL: gl.constexpr, OVERLAP: gl.constexpr):
    """One consumer warpgroup over this program's tiles: the ws kernel's key loop, each tile's
    first scores issued by the tile before, ahead of its epilogue (the last tile peeled)."""
    (q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, v_ready, k_empty, v_empty, o_ptr, lse_ptr,
     stride_ob, stride_oh, stride_os, H, seq_q, seq_k, sched_ptr, counts_ptr, width,
     qk_scale) = shared
    CONSUMERS: gl.constexpr = BLOCK_M // CONSUMER_ROWS
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    zero_s = gl.zeros([CONSUMER_ROWS, BLOCK_N], gl.float32, layout=s_layout)
    n = gl.load(counts_ptr + gl.program_id(0))
    if OVERLAP:
        # the first tile's first scores (every program has a tile: the grid is at most the tiles)
        mbarrier.wait(q_ready.index(WG), 0)
        mbarrier.wait(k_ready.index(0), 0)
        s_next = warpgroup_mma(q_smem.index(WG), k_smem.index(0).permute((1, 0)), zero_s,
                               use_acc=False, is_async=True)
        it = 0
        for t in range(n - 1):
            pv, l_i, m_i, last, it, bh, start = _ov_tile(shared, t, s_next, it, WG, BLOCK_M,
                                                         BLOCK_N, HEAD_DIM, STAGES, CAUSAL,
                                                         PARTIAL)
            nq = ((t + 1) % 2) * CONSUMERS + WG
            mbarrier.wait(q_ready.index(nq), ((t + 1) // 2) & 1)
            mbarrier.wait(k_ready.index(it % STAGES), (it // STAGES) & 1)
            s_next = warpgroup_mma(q_smem.index(nq), k_smem.index(it % STAGES).permute((1, 0)),
                                   zero_s, use_acc=False, is_async=True)
            acc = warpgroup_mma_wait(1, deps=(pv,))
            _ov_store(shared, acc, l_i, m_i, last, bh, start, BLOCK_N, HEAD_DIM)
        pv, l_i, m_i, last, it, bh, start = _ov_tile(shared, n - 1, s_next, it, WG, BLOCK_M,
                                                     BLOCK_N, HEAD_DIM, STAGES, CAUSAL, PARTIAL)
        acc = warpgroup_mma_wait(0, deps=(pv,))
        _ov_store(shared, acc, l_i, m_i, last, bh, start, BLOCK_N, HEAD_DIM)
    else:  # each tile's first scores issued by itself (fewer registers live: three consumers)
        it = 0
        for t in range(n):
            qi = (t % 2) * CONSUMERS + WG
            mbarrier.wait(q_ready.index(qi), (t // 2) & 1)
            mbarrier.wait(k_ready.index(it % STAGES), (it // STAGES) & 1)
            s_first = warpgroup_mma(q_smem.index(qi), k_smem.index(it % STAGES).permute((1, 0)),
                                    zero_s, use_acc=False, is_async=True)
            pv, l_i, m_i, last, it, bh, start = _ov_tile(shared, t, s_first, it, WG, BLOCK_M,
                                                         BLOCK_N, HEAD_DIM, STAGES, CAUSAL,
                                                         PARTIAL)
            acc = warpgroup_mma_wait(0, deps=(pv,))
            _ov_store(shared, acc, l_i, m_i, last, bh, start, BLOCK_N, HEAD_DIM)


@gluon.jit
def hopper_flash_ov_kernel(q_desc, k_desc, v_desc, o_ptr, lse_ptr,
                           stride_ob, stride_oh, stride_os,
                           H, GROUP, seq_q, seq_k, qk_scale, sched_ptr, counts_ptr, width,
                           HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                           STAGES: gl.constexpr, CAUSAL: gl.constexpr, PARTIAL: gl.constexpr,
                           OVERLAP: gl.constexpr):
    """hopper_flash_ws_kernel, persistent on a host-made schedule (sched_ptr: a (grid, width)
    int32 table of tile numbers bh * n_m + start_m, counts_ptr: each program's count)."""
    CONSUMERS: gl.constexpr = BLOCK_M // CONSUMER_ROWS
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [2 * CONSUMERS, CONSUMER_ROWS, HEAD_DIM],
                                       q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [2 * CONSUMERS, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [2 * CONSUMERS, 1], mbarrier.MBarrierLayout())
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2 * CONSUMERS):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(q_empty.index(i), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=CONSUMERS)
        mbarrier.init(v_empty.index(i), count=CONSUMERS)
    shared = (q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, v_ready, k_empty, v_empty, o_ptr,
              lse_ptr, stride_ob, stride_oh, stride_os, H, seq_q, seq_k, sched_ptr, counts_ptr,
              width, qk_scale)
    if CONSUMERS == 3:
        gl.warp_specialize([
            (_ov_consume, (shared, 0, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, PARTIAL, OVERLAP)),
            (_ov_consume, (shared, 1, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, PARTIAL, OVERLAP)),
            (_ov_consume, (shared, 2, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, PARTIAL, OVERLAP)),
            (_ov_load, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready,
                        v_ready, k_empty, v_empty, sched_ptr, counts_ptr, width, H, GROUP, seq_q,
                        seq_k, BLOCK_M, BLOCK_N, STAGES, CAUSAL, PARTIAL)),
        ], [4, 4, 1], [160, 160, 32])
    else:
        gl.warp_specialize([
            (_ov_consume, (shared, 0, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, PARTIAL, OVERLAP)),
            (_ov_consume, (shared, 1, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, PARTIAL, OVERLAP)),
            (_ov_load, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready,
                        v_ready, k_empty, v_empty, sched_ptr, counts_ptr, width, H, GROUP, seq_q,
                        seq_k, BLOCK_M, BLOCK_N, STAGES, CAUSAL, PARTIAL)),
        ], [4, 1], [240, 24])


def tile_blocks(n_m: int, seq_q: int, seq_k: int, block_m: int, block_n: int, causal: bool):
    """Key blocks each query block start_m = 0 .. n_m - 1 sees (as _key_blocks computes)."""
    if not causal:
        return [seq_k // block_n] * n_m
    shift = seq_k - seq_q
    return [min(math.ceil((m * block_m + shift + block_m) / block_n), seq_k // block_n)
            for m in range(n_m)]


def balanced_schedule(n_bh: int, blocks: list[int], grid: int, per_tile: float = 1.0):
    """(table (grid, width) int32, counts (grid,) int32) on the CPU: tiles bh * n_m + m
    assigned longest first to the least-loaded program (work = key blocks + per_tile), each
    program's list then in tile order."""
    n_m = len(blocks)
    tiles = sorted(range(n_bh * n_m), key=lambda t: (-blocks[t % n_m], t))
    heap = [(0.0, p) for p in range(grid)]
    lists = [[] for _ in range(grid)]
    for t in tiles:
        load, p = heapq.heappop(heap)
        lists[p].append(t)
        heapq.heappush(heap, (load + blocks[t % n_m] + per_tile, p))
    width = max(len(x) for x in lists)
    table = torch.full((grid, width), -1, dtype=torch.int32)
    for p, x in enumerate(lists):
        table[p, :len(x)] = torch.tensor(sorted(x), dtype=torch.int32)
    return table, torch.tensor([len(x) for x in lists], dtype=torch.int32)


_SCHEDULES = {}


def launch_overlap(q, k, v, o, lse, causal: bool, config) -> None:
    """hopper_flash_ov_kernel once with config (BLOCK_M, BLOCK_N, STAGES, OVERLAP)."""
    block_m, block_n, stages, overlap = config
    batch, heads, seq_q, head_dim = q.shape
    n_m = triton.cdiv(seq_q, block_m)
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    grid = min(sms, n_m * batch * heads)
    key = (batch * heads, n_m, seq_q, k.shape[2], block_m, block_n, causal, grid, q.device)
    if key not in _SCHEDULES:
        blocks = tile_blocks(n_m, seq_q, k.shape[2], block_m, block_n, causal)
        table, counts = balanced_schedule(batch * heads, blocks, grid)
        _SCHEDULES[key] = (table.to(q.device), counts.to(q.device))
    table, counts = _SCHEDULES[key]
    hopper_flash_ov_kernel[(grid,)](
        rows_descriptor(q, CONSUMER_ROWS.value), rows_descriptor(k, block_n),
        rows_descriptor(v, block_n), o, lse, o.stride(0), o.stride(1), o.stride(2), heads,
        heads // k.shape[1], seq_q, k.shape[2], LOG2E / math.sqrt(head_dim), table, counts,
        table.shape[1], HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, STAGES=stages,
        CAUSAL=causal, PARTIAL=seq_q % block_m != 0, OVERLAP=overlap, num_warps=4)
