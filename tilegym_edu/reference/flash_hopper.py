"""FlashAttention forward for Hopper GPUs, written in Gluon (Triton's lower-level language,
``triton.experimental.gluon``), where the program says what Triton's compiler decides for a
``@triton.jit`` kernel: which shared-memory buffer each TMA copy lands in, when each
tensor-core matmul (``wgmma``) is issued and when the program waits for it.

What that buys is the overlap FlashAttention-3 is built on. In ``flash.py`` a program computes
a block's scores, then its softmax, then multiplies the probabilities by v, one after the
other, so the tensor cores sit idle during the softmax. Here the loop is software-pipelined by
hand: the scores of key block j are issued (asynchronously) together with the product of block
j-1's probabilities and values, and block j's softmax runs while that product is still on the
tensor cores. K and v blocks arrive by TMA in a ring of ``STAGES`` shared-memory buffers, each
with an mbarrier that says when its bytes have landed. Four schedules (HOPPER_CONFIGS):

* ``one``: one warpgroup computes a program's rows and issues its own copies
  (hopper_flash_kernel);
* ``specialised``: warp-specialised (hopper_flash_ws_kernel): a producer warp issues every
  copy, BLOCK_M // 64 consumer warpgroups of 64 rows (two, or three at head size 64) share
  each key/value block;
* ``persistent``: the same, one program per SM taking tile after tile, a share of the tiles
  the host balances (tile_schedule: causal tiles are unequal, and handed out in turn they
  left the slowest program 1.19x the mean work at B8 H16 S2048) and deals a group of heads at
  a time, so the keys and values the programs read together stay in L2 (heads_in_half_l2); on
  a causal grid the next tile's q loaded while this one computes;
* ``persistent_q_once``: the same with one q buffer on a causal grid too, which leaves room
  for o to leave by TMA at head size 128 (o_by_tma), where two q buffers do not.

On an H200 (2026-12-05, run 49 in docs/results/h200.md) the tuned forward ran at 0.98-1.10x
cuDNN on issue 18's six rows. On an H100 (2026-12-06, run 71, one process, each side's best
median of three interleaved rounds) it ran at 1.015-1.110x on all six and in bfloat16: 1.091x
at head size 128 causal (1.088x in bfloat16; persistent_q_once in head groups, where one tile
a program had tied cuDNN at 0.999x and 0.996x in run 66), 1.110x at 16k causal, 1.037x at head
size 64 (three consumer warpgroups), 1.025x at B8 H16 S2048 D64 causal, 1.015x and 1.028x on
the non-causal rows at head size 128 (o by TMA), 1.107x with grouped-query heads. Dealing the
heads in groups did it: at B4 H32 S4096 D128 causal every tile dealt at once left the programs
on 36-40 heads at a time (80 MiB of keys and values against a 50 MiB L2), and the persistent
grid ran 1.048x cuDNN where in groups of 12 heads it ran 1.123x (run 70, at the power limit's
1530 MHz).

Shapes as ``flash.py``'s: q (batch, heads, seq_q, head_dim), k and v (batch, kv_heads, seq_k,
head_dim), heads a multiple of kv_heads, the causal mask aligned to the end; o in q's shape, lse
(batch, heads, seq_q) float32 in log2 units. These kernels take head_dim 64 or 128, float16 or
bfloat16, sequence lengths multiples of 128 and contiguous tensors, on compute capability 9.x
(``hopper_fits``); where they fit, ``attention_forward`` runs the faster of them and
``flash.flash_forward``, elsewhere flash.py. They do not run in Triton's interpreter: their tests
are in tests/gpu/.
"""
import functools
import math
from collections.abc import Callable, Mapping

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilegym_edu.grading import forbidden_in_graded_calls
from tilegym_edu.reference import tile_schedule
from tilegym_edu.reference.attention import LOG2E
from tilegym_edu.reference.flash import (FLASH_ORDER_SPACE, check_flash_inputs, flash_forward,
                                         flash_forward_kernel, flash_problem, launch_flash_forward)
from tilegym_edu.tune import Config, KernelGroup, SearchSpace, autotune, configs_from_rows

try:  # Gluon's Hopper modules (Triton 3.5 and newer)
    from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier,
                                                                   tma, warpgroup_mma,
                                                                   warpgroup_mma_wait)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
except ImportError:  # pragma: no cover - older Triton: hopper_fits says no
    TensorDescriptor = None

#: the Triton versions (major.minor) these kernels were measured with on an H200: Gluon is
#: experimental and its API changes between releases (Triton 3.9 has no
#: tma.async_copy_global_to_shared: it is async_load there), so hopper_fits says no on any other
#: and attention_forward runs flash.py; add a version here once tests/gpu/ pass with it
MEASURED_TRITON = ("3.6",)

#: the head sizes the kernel takes (one wgmma instruction's N is the head size)
HOPPER_HEAD_DIMS = (64, 128)

#: the query rows each consumer warpgroup of hopper_flash_ws_kernel computes (one wgmma's M for
#: four warps)
CONSUMER_ROWS = gl.constexpr(64)


@gluon.jit
def _issue_kv(k_desc, v_desc, k_smem, v_smem, k_bars, v_bars, kv_row, block, STAGES: gl.constexpr,
              BLOCK_N: gl.constexpr):
    """Start the TMA copies of key/value block ``block`` into its ring slot block % STAGES."""
    slot = block % STAGES
    mbarrier.expect(k_bars.index(slot), k_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(k_desc, [kv_row + block * BLOCK_N, 0], k_bars.index(slot),
                                    k_smem.index(slot))
    mbarrier.expect(v_bars.index(slot), v_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(v_desc, [kv_row + block * BLOCK_N, 0], v_bars.index(slot),
                                    v_smem.index(slot))


#: the causal mask's scale: a masked block's query-key distances (a few hundred) times this
#: stay far inside float32, and a key one past its query lands 1e30 below any score
MASK_BIG = gl.constexpr(1.0e30)


@gluon.jit
def _softmax_block(s, m_i, l_i, start_n, q_pos, qk_scale, MASKED: gl.constexpr,
                   CAUSAL: gl.constexpr, s_layout: gl.constexpr):
    """One key block's online-softmax step on its scores ``s`` (BLOCK_M, BLOCK_N) float32:
    (p, m_new, l_new, alpha), p the unnormalised probabilities exp2(s * qk_scale - m_new),
    alpha = exp2(m_i - m_new) the factor the running output must be scaled by. MASKED blocks
    (causal only) mask the keys after each query (positions ``q_pos``)."""
    if MASKED:  # causal only: seq_k is a whole number of key blocks (hopper_fits)
        # min(s, BIG * (query - key) + BIG / 2): s where the key is at or before the query, at
        # most -BIG / 2 after it (exp2 of that is 0): two float instructions an element, where
        # gl.where on a comparison made Triton 3.6 pack and unpack the predicate (8 or more)
        cols = gl.arange(0, s.shape[1], layout=gl.SliceLayout(0, s_layout)).to(gl.float32)
        rows = (q_pos - start_n).to(gl.float32) * MASK_BIG + 0.5 * MASK_BIG
        s = gl.minimum(s, gl.expand_dims(rows, 1) - gl.expand_dims(cols * MASK_BIG, 0),
                       propagate_nan=tl.PropagateNan.ALL)  # a NaN score stays NaN
    m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
    alpha = gl.exp2(m_i - m_new)
    l_new = l_i * alpha + gl.sum(p, axis=1)
    return p, m_new, l_new, alpha


@gluon.jit
def _softmax_step(s, m_i, l_i, j, masked_from, q_pos, qk_scale, BLOCK_N: gl.constexpr,
                  CAUSAL: gl.constexpr, s_layout: gl.constexpr):
    """_softmax_block for key block ``j``, masked if causal and j >= masked_from (the blocks
    that cross the diagonal); only those pay for the mask."""
    if CAUSAL:
        if j >= masked_from:
            p, m_i, l_i, alpha = _softmax_block(s, m_i, l_i, j * BLOCK_N, q_pos, qk_scale,
                                                True, CAUSAL, s_layout)
        else:
            p, m_i, l_i, alpha = _softmax_block(s, m_i, l_i, j * BLOCK_N, q_pos, qk_scale,
                                                False, CAUSAL, s_layout)
    else:
        p, m_i, l_i, alpha = _softmax_block(s, m_i, l_i, j * BLOCK_N, q_pos, qk_scale,
                                            False, CAUSAL, s_layout)
    return p, m_i, l_i, alpha


@gluon.jit
def _store_rows(acc, l_i, m_i, o_head, lse_head, start, seq_q, stride_os, ROWS: gl.constexpr,
                HEAD_DIM: gl.constexpr, WARPS: gl.constexpr, o_layout: gl.constexpr,
                s_layout: gl.constexpr):
    """The epilogue of ROWS query rows of one (batch, head) from ``start`` on: o = acc / l_i
    in o's dtype from o_head (that head's o, rows stride_os apart), lse = m_i + log2(l_i) from
    lse_head; rows past seq_q are not stored."""
    out_layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 * 8 // HEAD_DIM, HEAD_DIM // 8],
                                                [WARPS, 1], [1, 0])
    out = acc / gl.expand_dims(gl.convert_layout(l_i, gl.SliceLayout(1, o_layout)), 1)
    out = gl.convert_layout(out.to(o_head.dtype.element_ty), out_layout)
    rows = start + gl.arange(0, ROWS, layout=gl.SliceLayout(1, out_layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, out_layout))
    gl.store(o_head + gl.expand_dims(rows, 1) * stride_os + gl.expand_dims(cols, 0), out,
             mask=gl.expand_dims(rows < seq_q, 1))
    lse_rows = start + gl.arange(0, ROWS, layout=gl.SliceLayout(1, s_layout))
    gl.store(lse_head + lse_rows, m_i + gl.log2(l_i), mask=lse_rows < seq_q)


@gluon.jit
def _store_rows_by_tma(acc, l_i, m_i, o_tile, o_desc, o_row, lse_rows_ptr,
                       o_layout: gl.constexpr, s_layout: gl.constexpr):
    """The epilogue of one consumer's rows through the copy engine: o = acc / l_i written
    into the consumer's shared-memory tile ``o_tile`` and copied by TMA to o's rows from
    ``o_row`` on (o as one matrix of rows, o_desc), the copy left running while the consumer
    goes on to its next tile; lse = m_i + log2(l_i) stored from lse_rows_ptr. Every row is
    stored (no mask: the caller's rows are all inside the head)."""
    out = acc / gl.expand_dims(gl.convert_layout(l_i, gl.SliceLayout(1, o_layout)), 1)
    tma.store_wait(0)  # the previous tile's copy has finished reading o_tile
    o_tile.store(out.to(o_tile.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(o_desc, [o_row, 0], o_tile)
    lse_rows = gl.arange(0, o_tile.shape[0], layout=gl.SliceLayout(1, s_layout))
    gl.store(lse_rows_ptr + lse_rows, m_i + gl.log2(l_i))


@gluon.jit
def _unmasked_end(masked_from, n_blocks, CAUSAL: gl.constexpr):
    """Where a query block's unmasked key blocks end: at the first block crossing its
    diagonal if causal, else after the last block."""
    if CAUSAL:
        return gl.minimum(masked_from, n_blocks)
    else:
        return n_blocks


@gluon.jit
def _query_blocks(seq_q, BLOCK_M: gl.constexpr, PARTIAL: gl.constexpr):
    """How many blocks of BLOCK_M queries a head has; PARTIAL: seq_q is not a multiple of
    BLOCK_M (tiles of 192 queries), the last block runs past the head."""
    if PARTIAL:
        return gl.cdiv(seq_q, BLOCK_M)
    else:
        return seq_q // BLOCK_M


@gluon.jit
def _key_blocks(first_pos, seq_k, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                CAUSAL: gl.constexpr, PARTIAL: gl.constexpr):
    """How many key blocks a query block whose first query sits at ``first_pos`` sees: up to
    its last query's diagonal if causal (at most all of them where a PARTIAL block reaches
    past seq_q), else all of them."""
    if CAUSAL:
        if PARTIAL:
            return gl.minimum(gl.cdiv(first_pos + BLOCK_M, BLOCK_N), seq_k // BLOCK_N)
        else:
            return gl.cdiv(first_pos + BLOCK_M, BLOCK_N)
    else:
        return seq_k // BLOCK_N


@gluon.jit
def _one_step(j, q_smem, k_smem, v_smem, k_bars, v_bars, k_desc, v_desc, kv_row, n_blocks, acc,
              p_op, m_i, l_i, zero_s, q_pos, qk_scale, STAGES: gl.constexpr,
              BLOCK_N: gl.constexpr, MASKED: gl.constexpr, CAUSAL: gl.constexpr,
              s_layout: gl.constexpr, o_layout: gl.constexpr, p_layout: gl.constexpr):
    """Key block j (>= 1) of hopper_flash_kernel's loop: block j's scores and block j-1's P·V
    (p_op) issued together, block j's softmax while P·V runs, then block j-1's ring slot
    refilled. Returns (acc, p_op, m_i, l_i) for block j + 1. MASKED blocks pay for the mask."""
    slot = j % STAGES
    prev = (j - 1) % STAGES
    mbarrier.wait(k_bars.index(slot), (j // STAGES) & 1)
    s = warpgroup_mma(q_smem, k_smem.index(slot).permute((1, 0)), zero_s, use_acc=False,
                      is_async=True)
    mbarrier.wait(v_bars.index(prev), ((j - 1) // STAGES) & 1)
    acc = warpgroup_mma(p_op, v_smem.index(prev), acc, is_async=True)
    s = warpgroup_mma_wait(1, deps=(s,))  # block j's scores; block j-1's product runs on
    p, m_i, l_i, alpha = _softmax_block(s, m_i, l_i, j * BLOCK_N, q_pos, qk_scale, MASKED,
                                        CAUSAL, s_layout)
    acc, p_op = warpgroup_mma_wait(0, deps=(acc, p_op))
    acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
    if j - 1 + STAGES < n_blocks:  # block j-1's slot is free: fill it with a later block
        _issue_kv(k_desc, v_desc, k_smem, v_smem, k_bars, v_bars, kv_row, j - 1 + STAGES, STAGES,
                  BLOCK_N)
    p_op = gl.convert_layout(p.to(q_smem.dtype), p_layout)
    return acc, p_op, m_i, l_i


@gluon.jit
def hopper_flash_kernel(q_desc, k_desc, v_desc, o_ptr, lse_ptr,
                        stride_ob, stride_oh, stride_os,
                        H, GROUP, seq_q, seq_k, qk_scale, order_ptr,
                        HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                        STAGES: gl.constexpr, CAUSAL: gl.constexpr, num_warps: gl.constexpr):
    """o and lse for BLOCK_M queries of one (batch, head). q, k, v
    come as tensor descriptors over their (batch * heads * seq, head_dim) rows; query head h
    reads key/value head h // GROUP; seq_q and seq_k are multiples of BLOCK_M and BLOCK_N (a
    block never reaches into the next head's rows). The key loop runs software-pipelined:
    scores of block j and the product of block j-1 on the tensor cores while block j's softmax
    runs. Program i computes tile order[i] (tile bh * n_m + m: query block m of the n_m =
    seq_q // BLOCK_M of (batch, head) bh), a grid of one program a tile in
    tile_schedule.one_tile_a_program's order."""
    n_m = seq_q // BLOCK_M
    tile = gl.load(order_ptr + gl.program_id(0))
    bh = tile // n_m
    start_m = tile % n_m
    b = bh // H
    head = bh % H
    kv_row = (b * (H // GROUP) + head // GROUP) * seq_k
    q_row = bh * seq_q + start_m * BLOCK_M
    shift = seq_k - seq_q
    dtype: gl.constexpr = q_desc.dtype

    # one warpgroup's wgmma tiles: the scores (BLOCK_M, BLOCK_N) and the output (BLOCK_M,
    # HEAD_DIM); the probabilities go into the second matmul from registers
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                       instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)

    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_bars.index(i), count=1)
        mbarrier.init(v_bars.index(i), count=1)

    # the key blocks this query block sees: up to its last query's diagonal if causal, the
    # blocks from `masked_from` on crossing the diagonal
    first_pos = start_m * BLOCK_M + shift
    n_blocks = _key_blocks(first_pos, seq_k, BLOCK_M, BLOCK_N, CAUSAL, False)
    masked_from = first_pos // BLOCK_N

    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_bar, q_smem)
    for i in gl.static_range(STAGES):
        if i < n_blocks:
            _issue_kv(k_desc, v_desc, k_smem, v_smem, k_bars, v_bars, kv_row, i, STAGES, BLOCK_N)

    q_pos = first_pos + gl.arange(0, BLOCK_M, layout=row_s)
    m_i = gl.full([BLOCK_M], -float("inf"), gl.float32, layout=row_s)
    l_i = gl.full([BLOCK_M], 0.0, gl.float32, layout=row_s)
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, layout=o_layout)
    zero_s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)

    # block 0: its scores and softmax, nothing to overlap with yet
    mbarrier.wait(q_bar, 0)
    mbarrier.wait(k_bars.index(0), 0)
    s = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), zero_s, use_acc=False,
                      is_async=True)
    s = warpgroup_mma_wait(0, deps=(s,))
    p, m_i, l_i, alpha = _softmax_step(s, m_i, l_i, 0, masked_from, q_pos, qk_scale,
                                       BLOCK_N, CAUSAL, s_layout)
    p_op = gl.convert_layout(p.to(dtype), p_layout)

    # the blocks left of the diagonal in one loop, those crossing it in another: a branch in
    # one loop's body would keep both paths' registers live (254 a thread at head size 64
    # causal against 155 without the mask, ptxas says)
    unmasked_end = _unmasked_end(masked_from, n_blocks, CAUSAL)
    for j in range(1, unmasked_end):
        acc, p_op, m_i, l_i = _one_step(j, q_smem, k_smem, v_smem, k_bars, v_bars, k_desc, v_desc,
                                        kv_row, n_blocks, acc, p_op, m_i, l_i, zero_s, q_pos,
                                        qk_scale, STAGES, BLOCK_N, False, CAUSAL, s_layout,
                                        o_layout, p_layout)
    if CAUSAL:
        for j in range(gl.maximum(unmasked_end, 1), n_blocks):
            acc, p_op, m_i, l_i = _one_step(j, q_smem, k_smem, v_smem, k_bars, v_bars, k_desc,
                                            v_desc, kv_row, n_blocks, acc, p_op, m_i, l_i, zero_s,
                                            q_pos, qk_scale, STAGES, BLOCK_N, True, CAUSAL,
                                            s_layout, o_layout, p_layout)

    last = (n_blocks - 1) % STAGES
    mbarrier.wait(v_bars.index(last), ((n_blocks - 1) // STAGES) & 1)
    acc = warpgroup_mma(p_op, v_smem.index(last), acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=(acc,))

    mbarrier.invalidate(q_bar)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(k_bars.index(i))
        mbarrier.invalidate(v_bars.index(i))

    _store_rows(acc, l_i, m_i, o_ptr + b * stride_ob + head * stride_oh, lse_ptr + bh * seq_q,
                start_m * BLOCK_M, seq_q, stride_os, BLOCK_M, HEAD_DIM, num_warps, o_layout,
                s_layout)


@gluon.jit
def _program_tiles(order_ptr, starts_ptr):
    """(first, end): where this program's tiles begin and end in the schedule's ``order``
    (tile_schedule's (order, starts))."""
    first = gl.load(starts_ptr + gl.program_id(0))
    return first, gl.load(starts_ptr + gl.program_id(0) + 1)


@gluon.jit
def _ws_load(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, v_ready,
             k_empty, v_empty, H, GROUP, seq_q, seq_k, order_ptr, starts_ptr,
             BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
             CAUSAL: gl.constexpr, PARTIAL: gl.constexpr):
    """The producer warp: for each of the program's tiles, every consumer's q block into q
    buffer ``count % Q_BUFFERS`` (once the tile Q_BUFFERS before is done with it: with two,
    the next tile's q arrives while this one computes), then the tile's key/value blocks into
    the ring, each slot once every consumer has released it (k_empty, v_empty). ``it`` counts
    the key/value blocks this program has loaded, so the ring's slots and phases run on
    across tiles."""
    CONSUMERS: gl.constexpr = BLOCK_M // CONSUMER_ROWS
    Q_BUFFERS: gl.constexpr = q_smem.shape[0] // CONSUMERS
    n_m = _query_blocks(seq_q, BLOCK_M, PARTIAL)
    first, end = _program_tiles(order_ptr, starts_ptr)
    it = 0
    for t in range(first, end):
        count = t - first
        tile = gl.load(order_ptr + t)
        bh = tile // n_m
        start_m = tile % n_m
        b = bh // H
        kv_row = (b * (H // GROUP) + (bh % H) // GROUP) * seq_k
        for w in gl.static_range(CONSUMERS):
            qi = (count % Q_BUFFERS) * CONSUMERS + w
            mbarrier.wait(q_empty.index(qi), ((count // Q_BUFFERS) & 1) ^ 1)  # a new one passes 1
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
def _ws_consume(shared, WG: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                HEAD_DIM: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                PARTIAL: gl.constexpr, O_BY_TMA: gl.constexpr):
    """One consumer warpgroup: for each of the program's tiles, its CONSUMER_ROWS rows (rows
    WG * CONSUMER_ROWS on), the key loop software-pipelined as in hopper_flash_kernel, each
    ring slot released to the producer as soon as its matmul has finished reading it, and q's
    buffer once the last scores are in. Rows past seq_q (a head's last tile of 192 rows) are
    computed on whatever q rows the copy brought and not stored. O_BY_TMA: the output leaves
    by TMA from the consumer's tile of o_smem (_store_rows_by_tma), else by plain stores.
    ``shared``: what every consumer takes alike (hopper_flash_ws_kernel's tuple)."""
    (q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, v_ready, k_empty, v_empty, o_ptr, lse_ptr,
     stride_ob, stride_oh, stride_os, H, seq_q, seq_k, order_ptr, starts_ptr, qk_scale, o_smem,
     o_desc) = shared
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
            if j == n_blocks - 1:  # the last scores are in: q's buffer can take a later tile's
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
        acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(v_empty.index(last), count=1)
        it += n_blocks

        if O_BY_TMA:
            _store_rows_by_tma(acc, l_i, m_i, o_smem.index(WG), o_desc, bh * seq_q + start,
                               lse_ptr + bh * seq_q + start, o_layout, s_layout)
        else:
            _store_rows(acc, l_i, m_i, o_ptr + (bh // H) * stride_ob + (bh % H) * stride_oh,
                        lse_ptr + bh * seq_q, start, seq_q, stride_os, ROWS, HEAD_DIM, 4,
                        o_layout, s_layout)
    if O_BY_TMA:
        tma.store_wait(0)


@gluon.jit
def hopper_flash_ws_kernel(q_desc, k_desc, v_desc, o_ptr, o_desc, lse_ptr,
                           stride_ob, stride_oh, stride_os,
                           H, GROUP, seq_q, seq_k, qk_scale, order_ptr, starts_ptr,
                           HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                           STAGES: gl.constexpr, CAUSAL: gl.constexpr, PARTIAL: gl.constexpr,
                           Q_BUFFERS: gl.constexpr):
    """hopper_flash_kernel's work split among warps as FlashAttention-3 splits it: a producer
    warp issues every TMA copy, and BLOCK_M // CONSUMER_ROWS consumer warpgroups (two or three)
    of CONSUMER_ROWS rows each share the key/value ring, so a block of keys crosses from L2
    once for BLOCK_M queries while each warpgroup's softmax can run beside the others' matmuls.
    The tiles (tile bh * n_m + m: query block m of the n_m = cdiv(seq_q, BLOCK_M) of (batch,
    head) bh) come from a host-made schedule (tile_schedule): program p takes order[
    starts[p]:starts[p + 1]], one tile a program, or (persistent, one program per SM) a
    balanced share of them, whose next q the producer loads while this tile computes where
    there are Q_BUFFERS = 2 q buffers (q_buffers: causal persistent grids). PARTIAL: seq_q is
    not a multiple of BLOCK_M (each head's last tile runs past it). o_desc: o's rows as a TMA
    descriptor in blocks of CONSUMER_ROWS rows, through which each consumer's output leaves
    the SM from a shared-memory tile of its own while it computes its next tile (o_by_tma:
    where that tile fits), or None (plain stores through o_ptr). Other arguments as
    hopper_flash_kernel's, q's descriptor in blocks of CONSUMER_ROWS rows; launched with
    num_warps=4 (the first consumer) plus the other consumers' 4 warps each and the producer's
    1. Two consumers run with 240 registers a thread each, three with 160 (the 64K of an SM
    shared among 16 warps)."""
    CONSUMERS: gl.constexpr = BLOCK_M // CONSUMER_ROWS
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [Q_BUFFERS * CONSUMERS, CONSUMER_ROWS, HEAD_DIM],
                                       q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    O_BY_TMA: gl.constexpr = o_desc is not None
    if O_BY_TMA:
        o_smem = gl.allocate_shared_memory(dtype, [CONSUMERS, CONSUMER_ROWS, HEAD_DIM],
                                           o_desc.layout)
        o_rows = o_desc
    else:  # stand-ins the consumers never touch (Gluon's tuples cannot hold None)
        o_smem = q_smem
        o_rows = q_desc
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
        mbarrier.init(k_empty.index(i), count=CONSUMERS)  # every consumer releases each slot
        mbarrier.init(v_empty.index(i), count=CONSUMERS)
    shared = (q_smem, k_smem, v_smem, q_ready, q_empty, k_ready, v_ready, k_empty, v_empty, o_ptr,
              lse_ptr, stride_ob, stride_oh, stride_os, H, seq_q, seq_k, order_ptr, starts_ptr,
              qk_scale, o_smem, o_rows)
    # the partitions must be spelled out in the call: Gluon takes no function in a variable
    if CONSUMERS == 3:
        gl.warp_specialize([
            (_ws_consume, (shared, 0, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, PARTIAL,
                           O_BY_TMA)),
            (_ws_consume, (shared, 1, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, PARTIAL,
                           O_BY_TMA)),
            (_ws_consume, (shared, 2, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, PARTIAL,
                           O_BY_TMA)),
            (_ws_load, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready,
                        v_ready, k_empty, v_empty, H, GROUP, seq_q, seq_k, order_ptr, starts_ptr,
                        BLOCK_M, BLOCK_N, STAGES, CAUSAL, PARTIAL)),
        ], [4, 4, 1], [160, 160, 32])
    else:
        gl.warp_specialize([
            (_ws_consume, (shared, 0, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, PARTIAL,
                           O_BY_TMA)),
            (_ws_consume, (shared, 1, BLOCK_M, BLOCK_N, HEAD_DIM, STAGES, CAUSAL, PARTIAL,
                           O_BY_TMA)),
            (_ws_load, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_ready, q_empty, k_ready,
                        v_ready, k_empty, v_empty, H, GROUP, seq_q, seq_k, order_ptr, starts_ptr,
                        BLOCK_M, BLOCK_N, STAGES, CAUSAL, PARTIAL)),
        ], [4, 1], [240, 24])


#: seq_q and seq_k must be multiples of this (a key/value block never reaches into the next
#: head's rows; a block of queries may, in hopper_flash_ws_kernel, whose rows past seq_q are
#: not stored)
HOPPER_SEQ_MULTIPLE = 128


def hopper_fits(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether hopper_flash_forward takes these (already checked) inputs: a CUDA GPU of compute
    capability 9.x, a Triton of MEASURED_TRITON, head_dim 64 or 128, float16 or bfloat16,
    sequence lengths multiples of HOPPER_SEQ_MULTIPLE, and q, k, v contiguous (each one matrix
    of rows for the tensor descriptors)."""
    return (TensorDescriptor is not None and q.is_cuda
            and ".".join(triton.__version__.split(".")[:2]) in MEASURED_TRITON
            and q.shape[2] % HOPPER_SEQ_MULTIPLE == 0 and k.shape[2] % HOPPER_SEQ_MULTIPLE == 0
            and torch.cuda.get_device_capability(q.device)[0] == 9
            and q.shape[-1] in HOPPER_HEAD_DIMS
            and q.dtype in (torch.float16, torch.bfloat16)
            and all(t.is_contiguous() for t in (q, k, v)))


#: configurations the tuner races: (BLOCK_M, BLOCK_N, STAGES, SCHEDULE). SCHEDULE "one": one
#: warpgroup computes a program's BLOCK_M rows (hopper_flash_kernel); "specialised": BLOCK_M //
#: 64 consumer warpgroups of 64 rows each and a producer warp (hopper_flash_ws_kernel), a
#: program a tile; "persistent": the same, one program per SM taking a balanced share of the
#: tiles (tile_schedule.balanced, in head groups) one after another; "persistent_q_once": the
#: same with one q buffer (q_buffers), raced only where that is what lets o leave by TMA
#: (hopper_prune). 128 x 128 blocks on one warpgroup are left out: their scores and output
#: overflow its registers (ptxas spills 0.4-2.2 KB a thread); three consumers (BLOCK_M 192) run
#: at head size 64 only
HOPPER_CONFIGS = ((128, 128, 2, "specialised"), (128, 128, 2, "persistent"),
                  (128, 128, 2, "persistent_q_once"),
                  (64, 128, 2, "one"), (64, 64, 3, "one"), (64, 64, 2, "one"), (64, 64, 4, "one"),
                  (128, 64, 3, "specialised"), (192, 128, 2, "specialised"),
                  (192, 128, 2, "persistent"))

#: the schedules whose grid is one program per SM
PERSISTENT_SCHEDULES = ("persistent", "persistent_q_once")


def hopper_prune(config: Config, problem: Mapping[str, object], resources) -> str | None:
    """Why the tuner skips ``config`` for ``problem`` (None: it races). Three consumer
    warpgroups share an SM's registers 160-168 a thread each: at head size 128 a warpgroup's
    64 x 128 output and scores need more (ptxas spills). "persistent_q_once" runs as
    "persistent" does except on a causal grid where two q buffers leave o's tiles no room."""
    block_m, block_n, stages = config["BLOCK_M"], config["BLOCK_N"], config["STAGES"]
    head_dim = problem["head_dim"]
    if block_m // CONSUMER_ROWS == 3 and head_dim > 64:
        return "three consumer warpgroups take head size 64 only: at 128 their registers spill"
    if config["SCHEDULE"] == "persistent_q_once":
        persistent = q_buffers(True, problem["causal"], block_m, block_n, stages, head_dim)
        if persistent == 1 or o_tiles_fit(persistent, block_m, block_n, stages, head_dim):
            return ("one q buffer differs from the persistent schedule only on a causal grid "
                    "where two q buffers leave o's tiles no room")
        if not o_tiles_fit(1, block_m, block_n, stages, head_dim):
            return "o's tiles do not fit beside one q buffer either"
    return None


#: the same as the tuner's search space: the first is the default (what a correctness check
#: runs), level 1 races them all
HOPPER_SPACE = SearchSpace(
    default=Config(**dict(zip(("BLOCK_M", "BLOCK_N", "STAGES", "SCHEDULE"), HOPPER_CONFIGS[0]))),
    small=configs_from_rows(("BLOCK_M", "BLOCK_N", "STAGES", "SCHEDULE"), HOPPER_CONFIGS[1:]),
    prune=hopper_prune)

#: the shared memory (bytes) q's and the ring's buffers may take for the warp-specialised
#: kernel to double-buffer q; the compiler adds its scratch (17-20 KB at 128 x 128, ptxas
#: says) and an H200 SM has 227 KB for one program
Q_AND_RING_BYTES = 200 * 1024


def shared_bytes(q_buffer_count: int, block_m: int, block_n: int, stages: int, head_dim: int,
                 o_tiles: bool = False) -> int:
    """The shared memory (bytes, 2-byte elements) hopper_flash_ws_kernel's buffers take:
    ``q_buffer_count`` q tiles of BLOCK_M rows, the ring of STAGES k and v blocks of BLOCK_N
    rows, and with ``o_tiles`` the consumers' staging tiles of o (BLOCK_M rows in all)."""
    rows = q_buffer_count * block_m + 2 * stages * block_n + (block_m if o_tiles else 0)
    return 2 * rows * head_dim


def q_buffers(persistent: bool, causal: bool, block_m: int, block_n: int, stages: int,
              head_dim: int) -> int:
    """How many q buffers hopper_flash_ws_kernel gets: two on a causal persistent grid (the
    next tile's q loads during this one) where they fit beside the ring (not 192 x 128 at head
    size 128), else one: a program with one tile has no next q, and without a mask the second
    buffer cost more than it hid (H100, 2026-12-05, run 54: one buffer 1.7% faster at B4 H32
    S4096 D128 and 1.0% at B16 H16 S1024 D128, 4.9% at B4 H32 S4096 D64 192 x 128; causal, at
    B8 H16 S2048 D64, two were 5-11% faster)."""
    two = shared_bytes(2, block_m, block_n, stages, head_dim)
    return 2 if persistent and causal and two <= Q_AND_RING_BYTES else 1


def o_tiles_fit(q_buffer_count: int, block_m: int, block_n: int, stages: int,
                head_dim: int) -> bool:
    """Whether two consumers' tiles of o (64 x head_dim each, 2-byte elements) fit beside q's
    ``q_buffer_count`` buffers and the ring in Q_AND_RING_BYTES."""
    return shared_bytes(q_buffer_count, block_m, block_n, stages, head_dim,
                        o_tiles=True) <= Q_AND_RING_BYTES


def o_by_tma(o: torch.Tensor, q_buffer_count: int, block_m: int, block_n: int, stages: int) -> bool:
    """Whether hopper_flash_ws_kernel's consumers store o by TMA from a shared-memory tile
    each (the store then runs while the consumer computes its next tile): with two consumers
    (BLOCK_M 128, so no tile runs past seq_q), o contiguous, and the tiles fitting beside q's
    ``q_buffer_count`` buffers and the ring (o_tiles_fit). On an H100 (2026-12-06) it
    took B16 H16 S1024 D128 from 1.00x to 1.04x cuDNN and B4 H32 S4096 D128 from 1.02x to 1.03x
    as an experiment (run 63; 128 x 128 persistent, one q buffer), and 1.029x and 1.013x as
    this library's tuned forward (run 66); two q buffers at head size 128 leave no room for
    it."""
    return (block_m == 2 * CONSUMER_ROWS.value and o.is_contiguous()
            and o_tiles_fit(q_buffer_count, block_m, block_n, stages, o.shape[-1]))


def heads_in_half_l2(k: torch.Tensor, heads: int) -> int:
    """How many query heads' keys and values fit in half the GPU's L2 cache: k and v
    (batch, kv_heads, seq_k, head_dim) hold seq_k rows a head each, shared by the heads //
    kv_heads query heads of a group. What a persistent grid's head group may hold
    (tile_schedule.balanced): the other half is for q, o and the next group's first blocks."""
    l2_bytes = torch.cuda.get_device_properties(k.device).L2_cache_size
    per_query_head = 2 * k.shape[2] * k.shape[3] * k.element_size() * k.shape[1] / heads
    return max(1, int(l2_bytes / 2 // per_query_head))


#: what decides how fast a configuration runs: both kernels, the host's schedules (what each
#: program of a persistent grid takes), how many q buffers a program gets and how o leaves it
HOPPER_SOURCES = (hopper_flash_kernel, hopper_flash_ws_kernel, tile_schedule.one_tile_a_program,
                  tile_schedule.head_groups, tile_schedule.balanced, heads_in_half_l2,
                  shared_bytes, q_buffers, o_tiles_fit, o_by_tma)

#: what the tuner keys its results on: the source of HOPPER_SOURCES
HOPPER_KERNELS = KernelGroup("hopper_flash_forward", HOPPER_SOURCES)


def rows_descriptor(t: torch.Tensor, rows: int):
    """t (batch, heads, seq, head_dim) as a TMA descriptor over its rows, blocks of ``rows``."""
    block = [rows, t.shape[-1]]
    layout = gl.NVMMASharedLayout.get_default_for(block, getattr(gl, str(t.dtype).split(".")[1]))
    return TensorDescriptor(t, [t.numel() // t.shape[-1], t.shape[-1]], [t.shape[-1], 1], block,
                            layout)


def launch_hopper_flash(q, k, v, o, lse, causal: bool, config) -> None:
    """Run hopper_flash_kernel (or, warp-specialised, hopper_flash_ws_kernel) once with
    ``config``: a tuple (BLOCK_M, BLOCK_N, STAGES, SCHEDULE) or a mapping of those names."""
    if isinstance(config, Mapping):
        config = tuple(config[name] for name in ("BLOCK_M", "BLOCK_N", "STAGES", "SCHEDULE"))
    block_m, block_n, stages, schedule = config
    batch, heads, seq_q, head_dim = q.shape
    n_m = triton.cdiv(seq_q, block_m)
    n_tiles = n_m * batch * heads
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    args = (lse, o.stride(0), o.stride(1), o.stride(2), heads, heads // k.shape[1], seq_q,
            k.shape[2], LOG2E / math.sqrt(head_dim))
    options = dict(HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, STAGES=stages,
                   CAUSAL=causal, num_warps=4)
    descriptors = (rows_descriptor(k, block_n), rows_descriptor(v, block_n))
    programs = min(n_tiles, sms) if schedule in PERSISTENT_SCHEDULES else n_tiles
    order, starts = tile_schedule_on(q.device, batch * heads, n_m, seq_q, k.shape[2], block_m,
                                     block_n, causal, programs, heads_in_half_l2(k, heads))
    if schedule == "one":
        hopper_flash_kernel[(n_tiles,)](rows_descriptor(q, block_m), *descriptors, o, *args,
                                        order, **options)
        return
    rows = CONSUMER_ROWS.value
    q_buffer_count = (1 if schedule == "persistent_q_once" else
                      q_buffers(programs < n_tiles, causal, block_m, block_n, stages, head_dim))
    o_desc = (rows_descriptor(o, rows) if o_by_tma(o, q_buffer_count, block_m, block_n, stages)
              else None)
    hopper_flash_ws_kernel[(programs,)](rows_descriptor(q, rows), *descriptors, o, o_desc, *args,
                                        order, starts, PARTIAL=seq_q % block_m != 0,
                                        Q_BUFFERS=q_buffer_count, **options)


@functools.cache
def tile_schedule_on(device, n_bh: int, n_m: int, seq_q: int, seq_k: int, block_m: int,
                     block_n: int, causal: bool, programs: int, most_heads: int):
    """The kernels' schedule (order, starts) on ``device``: one tile a program when
    there are as many programs as tiles, else tile_schedule.balanced (head groups of at most
    ``most_heads``, heads_in_half_l2). Made once per problem and
    kept for the life of the process: a launch captured in a CUDA graph reads these tensors at
    every replay, and the first launch (never inside a capture) is the one that makes them."""
    blocks = tile_schedule.key_blocks(n_m, seq_q, seq_k, block_m, block_n, causal)
    if programs == n_bh * n_m:
        order, starts = tile_schedule.one_tile_a_program(n_bh, blocks, causal)
    else:
        order, starts = tile_schedule.balanced(n_bh, blocks, programs, most_heads=most_heads)
    return order.to(device), starts.to(device)


def tuned_hopper_config(q, k, v, o, lse, causal: bool, level: int = 1) -> Config:
    """The configuration of HOPPER_SPACE the tuner picks for these inputs (raced once per
    problem, launching into o and lse, then cached)."""
    return autotune(HOPPER_KERNELS, flash_problem(q, k, causal), HOPPER_SPACE,
                    lambda c: launch_hopper_flash(q, k, v, o, lse, causal, c), level=level).config


@forbidden_in_graded_calls
def hopper_flash_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                         level: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, lse) as flash.flash_forward returns them, on the Gluon kernels, with the
    configuration the tuner picks per problem; only for inputs hopper_fits takes."""
    check_flash_inputs(q, k, v, causal)
    if not hopper_fits(q, k, v):
        raise ValueError("hopper_flash_forward takes contiguous float16/bfloat16 q, k, v with "
                         f"head_dim in {HOPPER_HEAD_DIMS} and lengths multiples of "
                         f"{HOPPER_SEQ_MULTIPLE}, on a Hopper GPU: use flash.flash_forward "
                         "(or attention_forward, which picks) for the others")
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
    config = tuned_hopper_config(q, k, v, o, lse, causal, level)
    launch_hopper_flash(q, k, v, o, lse, causal, config)
    return o, lse


#: where the Gluon kernels take the inputs, attention_forward races them (tuned) against
#: flash.py's Triton kernel (tuned): at head size 64 causal flash.py was the faster (0.94x
#: against 0.90x cuDNN at B8 H16 S2048, 0.98x against 0.94x at B4 H32 S4096, run f)
FORWARD_PATHS = SearchSpace(default=Config(PATH="gluon"), small=(Config(PATH="flash.py"),))

#: what the race between the two is keyed on: the source of every kernel in it and the schedules
FORWARD_KERNELS = KernelGroup("attention_forward", (*HOPPER_SOURCES, flash_forward_kernel))


def tuned_forward_launch(q, k, v, o, lse, causal: bool) -> tuple[str, Callable[[], None]]:
    """(path, launch) for inputs hopper_fits takes: the faster of the tuned Gluon kernels
    ("gluon") and flash.py tuned over FLASH_ORDER_SPACE ("flash.py"), raced once per problem
    and then cached, and a launch of it that writes o and lse."""
    problem = flash_problem(q, k, causal)
    gluon_config = tuned_hopper_config(q, k, v, o, lse, causal)
    triton_config = autotune(flash_forward_kernel, problem, FLASH_ORDER_SPACE,
                             lambda c: launch_flash_forward(q, k, v, o, lse, causal, c)).config
    launches = {"gluon": lambda: launch_hopper_flash(q, k, v, o, lse, causal, gluon_config),
                "flash.py": lambda: launch_flash_forward(q, k, v, o, lse, causal, triton_config)}
    path = autotune(FORWARD_KERNELS, problem, FORWARD_PATHS,
                    lambda c: launches[c["PATH"]]()).config["PATH"]
    return path, launches[path]


@forbidden_in_graded_calls
def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                      causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The course's fastest forward for these inputs: where hopper_fits takes them, the faster
    of the Gluon kernels and flash.py (tuned_forward_launch); flash.flash_forward (any head
    size up to 256, any strides, any GPU or the interpreter) everywhere else. flash.py is
    tuned over FLASH_ORDER_SPACE (its programs also longest first). Returns (o, lse) as
    flash.flash_forward does."""
    check_flash_inputs(q, k, v, causal)
    if not hopper_fits(q, k, v):
        return flash_forward(q, k, v, causal, space=FLASH_ORDER_SPACE)
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:3], device=q.device, dtype=torch.float32)
    tuned_forward_launch(q, k, v, o, lse, causal)[1]()
    return o, lse


forbidden_in_graded_calls(hopper_flash_kernel)
forbidden_in_graded_calls(hopper_flash_ws_kernel)
