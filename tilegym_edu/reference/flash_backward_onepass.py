"""FlashAttention backward for Hopper GPUs in one pass, in Gluon: dk, dv and dq from one walk
over the key blocks, which ``flash_backward.attention_backward`` races against its two passes
(flash_backward_hopper's dk/dv and dq kernels, or the Triton ones) where the inputs fit.

Why: the two passes recompute the scores, S = Q K^T and dP = dO V^T, once for dk/dv and again
for dq, seven matmuls per (key block, query block) pair where one pass needs five. The catch
is dq: each query block's dq sums a share from every key block, and in a walk over the key
blocks those shares come from different programs. Here each program adds its share, dS K, into
a float32 accumulator in global memory with a TMA reduce-add (``cp.reduce.async.bulk.tensor``:
the copy engine adds a shared-memory tile into global memory, atomically per element), and a
small kernel converts the accumulator into dq's dtype after. Triton 3.6's Gluon compiler has
that operation (``ttng.async_tma_reduce``) but its Python modules do not name it:
``_tma_reduce_add`` below is the four lines that do.

The kernel is dkdv_ws_kernel's shape (a producer warp streaming q, dO, lse and delta blocks
through a TMA ring; two consumer warpgroups of 64 keys each) with FlashAttention-3's split of
dq: both consumers put their dS^T tile in shared memory, then each multiplies all 128 keys' dS
by half of K's columns and reduce-adds that half of the query block's dq, so each dq element
is added once per 128 keys.

On an H200 (2026-12-04, runs 35 and 36, docs/results/h200.md), at B4 H32 S4096 D128 the one
pass with its delta, zeroing and conversion ran 0.92x cuDNN's backward where the two passes ran
0.86x (run 35). Raced against the two passes (run 36), it won at head size 128 without grouped
heads: 0.96x cuDNN, 0.95x causal, 0.93x causal in bfloat16; the two passes kept B8 H16 S2048
D64 causal (1.14x) and 32 query over 8 key/value heads causal (0.91x), where this kernel alone
took 3.52 ms against the two passes' 3.32 (run 35). Two other schedules ran and were dropped:
one warpgroup of 64 keys (9.4 ms against 5.1 at D128) and each consumer reducing its own 64
keys' share (5.3-5.5 ms non-causal: twice the reduce traffic; it won the grouped-query row
alone, 3.05 ms, but not against the two passes); starting each program's walk at its own key
block's query block did not help this one (5.14 against 5.08 ms).

Inputs as flash_backward_hopper.backward_fits takes them. The kernels do not run in Triton's
interpreter: their tests are in tests/gpu/.
"""
import math

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilegym_edu.grading import forbidden_in_graded_calls
from tilegym_edu.reference.attention import LOG2E
from tilegym_edu.reference.flash_backward_hopper import (WG_KEYS, _alloc_ring, _consume_keys,
                                                         _dkdv_issue, _dkdv_produce,
                                                         _lse_descriptor, _query_range,
                                                         _store_keys, backward_fits)
from tilegym_edu.reference.flash_hopper import rows_descriptor
from tilegym_edu.tune import Config, SearchSpace, configs_from_rows

try:  # Gluon's Hopper modules and the compiler's TMA reduction (Triton 3.6)
    from triton._C.libtriton import ir as _ir
    from triton.experimental.gluon.language._core import builtin as _builtin
    from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier,
                                                                   tma, warpgroup_mma,
                                                                   warpgroup_mma_wait)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    REDUCE_ADD = _ir.DESCRIPTOR_REDUCE_KIND.ADD
except (ImportError, AttributeError):  # pragma: no cover - another Triton: onepass_fits says no
    TensorDescriptor, REDUCE_ADD = None, None

    def _builtin(fn):
        return fn


@_builtin
def _tma_reduce_add(tensor_desc, coord, src, _semantic=None):
    """global[the box of tensor_desc at coord] += shared-memory tile ``src`` (float32), by the
    copy engine; completion is tracked as a TMA store's is (tma.store_wait)."""
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(REDUCE_ADD, tensor_desc.handle, coord, src.handle)


@gluon.jit
def _onepass_block(i, WG: gl.constexpr, k_smem, v_smem, ring, bars, dk, dv, start_m, head,
                   key_pos, zero_s, qk_scale, dq_parts, STAGES: gl.constexpr,
                   BLOCK_M: gl.constexpr, MASKED: gl.constexpr, s_layout: gl.constexpr,
                   a_layout: gl.constexpr):
    """The one pass's step for flash_backward_hopper._consume_keys: _dkdv_issue for consumer
    WG's 64 keys against the i-th streamed query block (queries start_m .. of the group's
    head ``head``), then dq's share of all 128 keys: once both consumers' dS^T are in ds_smem
    (ds_ready), dS (BLOCK_M x 128) times K's columns WG * HEAD_DIM / 2 .. into dq_smem,
    reduce-added at (q_row, WG * HEAD_DIM / 2). ds_free holds the next
    block's dS^T stores until both consumers' dq matmuls have read ds_smem. dq_parts =
    (q_row0, seq, zero_q, ds_smem, ds_ready, ds_free, dq_smem, dq_desc), as _onepass_consume
    makes it."""
    q_row0, seq, zero_q, ds_smem, ds_ready, ds_free, dq_smem, dq_desc = dq_parts
    q_row = q_row0 + head * seq + start_m  # the block's first row of dq_desc
    HALF: gl.constexpr = k_smem.shape[2] // 2
    dk, dv, p_op, ds_op, ds = _dkdv_issue(i, k_smem.index(WG), v_smem.index(WG), ring, bars, dk,
                                          dv, start_m, key_pos, zero_s, qk_scale, STAGES,
                                          BLOCK_M, MASKED, s_layout, a_layout)
    mbarrier.wait(ds_free, (i & 1) ^ 1)  # a new barrier passes phase 1
    ds_smem.index(WG).store(ds)
    fence_async_shared()
    mbarrier.arrive(ds_ready, count=1)
    # dV and dK finish first: P^T and dS^T leave the registers before dq's matmuls
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
def _onepass_consume(shared, dq_shared, WG: gl.constexpr, HEAD_DIM: gl.constexpr,
                     BLOCK_M: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    """Consumer warpgroup WG: keys n0 + WG * 64 .. + 63 against every streamed block, and half
    of dq's columns for all 128 keys; dk and dv stored at the end, once the last reduce-add
    has read its staging tile."""
    q_row0, seq, ds_smem, ds_ready, ds_free, dq_smem_0, dq_smem_1, dq_desc = dq_shared
    dq_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM // 2, 16])
    if WG == 0:
        dq_smem = dq_smem_0
    else:
        dq_smem = dq_smem_1
    zero_q = gl.zeros([BLOCK_M, HEAD_DIM // 2], gl.float32, layout=dq_layout)
    dk, dv, first_key = _consume_keys(
        shared, (q_row0, seq, zero_q, ds_smem, ds_ready, ds_free, dq_smem, dq_desc),
        _onepass_block, WG, HEAD_DIM, BLOCK_M, STAGES, CAUSAL)
    tma.store_wait(0)
    _store_keys(dk, dv, first_key, shared, HEAD_DIM)


@gluon.jit
def onepass_kernel(q_desc, k_desc, v_desc, do_desc, lse_desc, delta_desc, dq_desc, dk_ptr,
                   dv_ptr, seq, group, qk_scale, sm_scale, HEAD_DIM: gl.constexpr,
                   BLOCK_M: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                   CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    """dk, dv (stored) and dS K (reduce-added into dq_desc's float32 rows, (batch * heads * seq,
    HEAD_DIM) in boxes of BLOCK_M x HEAD_DIM / 2, not yet times sm_scale) for 128 keys a
    program: grid (seq // 128, batch * kv_heads). k_desc/v_desc in blocks of 64 rows, q, dO, lse,
    delta in blocks of BLOCK_M. Launched with num_warps=4 (consumer 0); warp_specialize adds
    the other consumer's 4 warps and the producer's 1."""
    CONSUMERS: gl.constexpr = 2
    dtype: gl.constexpr = q_desc.dtype
    n0 = gl.program_id(0) * (CONSUMERS * WG_KEYS)
    bkv = gl.program_id(1)
    row0 = bkv * seq
    q_row0 = bkv * group * seq
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([WG_KEYS, BLOCK_M], dtype)

    k_smem = gl.allocate_shared_memory(dtype, [CONSUMERS, WG_KEYS, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [CONSUMERS, WG_KEYS, HEAD_DIM], v_desc.layout)
    ds_smem = gl.allocate_shared_memory(dtype, [CONSUMERS, WG_KEYS, BLOCK_M], ds_layout)
    # a staging tile per consumer, each its own allocation (slicing one rank-3 buffer with a
    # rank-2 layout crashes Triton 3.6's layout conversion)
    dq_smem_0 = gl.allocate_shared_memory(gl.float32, [BLOCK_M, HEAD_DIM // 2], dq_desc.layout)
    dq_smem_1 = gl.allocate_shared_memory(gl.float32, [BLOCK_M, HEAD_DIM // 2], dq_desc.layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ds_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ds_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    mbarrier.init(ds_ready, count=CONSUMERS)
    mbarrier.init(ds_free, count=CONSUMERS)
    for i in gl.static_range(STAGES):
        mbarrier.init(empty.index(i), count=CONSUMERS)  # every consumer releases each slot
    descs = (q_desc, do_desc, lse_desc, delta_desc)
    ring, bars = _alloc_ring(q_desc, do_desc, lse_desc, delta_desc, STAGES)

    lo, n_masked, n_blocks = _query_range(n0, seq, CONSUMERS * WG_KEYS, BLOCK_M, CAUSAL)
    shared = (ring, bars, k_smem, v_smem, kv_bar, empty, dk_ptr, dv_ptr, row0, n0, lo, n_masked,
              n_blocks, group, qk_scale, sm_scale)
    dq_shared = (q_row0, seq, ds_smem, ds_ready, ds_free, dq_smem_0, dq_smem_1, dq_desc)
    # the partitions must be spelled out in the call: Gluon takes no function in a variable
    gl.warp_specialize([
        (_onepass_consume, (shared, dq_shared, 0, HEAD_DIM, BLOCK_M, STAGES, CAUSAL)),
        (_onepass_consume, (shared, dq_shared, 1, HEAD_DIM, BLOCK_M, STAGES, CAUSAL)),
        (_dkdv_produce, (descs, k_desc, v_desc, ring, bars, k_smem, v_smem, kv_bar, empty, row0,
                         n0, lo, n_blocks, group * n_blocks, q_row0, seq, BLOCK_M, STAGES,
                         CONSUMERS)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


@triton.jit
def dq_from_accumulator_kernel(acc_ptr, dq_ptr, scale, n, BLOCK: tl.constexpr):
    """dq = acc * scale in dq's dtype, n values of two contiguous tensors."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    acc = tl.load(acc_ptr + offsets, mask=mask)
    tl.store(dq_ptr + offsets, (acc * scale).to(dq_ptr.dtype.element_ty), mask=mask)


#: the one pass's configurations: (BLOCK_M, STAGES). Offline for sm_90a (Triton 3.6), at head
#: size 128 two stages take 193 KiB of shared memory and three 226 KiB (of 227), both with
#: 144-430 bytes of spills a thread; run 35 measured two stages
ONEPASS_NAMES = ("BLOCK_M", "STAGES")
ONEPASS_CONFIGS = ((64, 2), (64, 3))


def onepass_problem(config) -> str | None:
    """Why launch_onepass cannot run ``config`` (None: it can): a name of ONEPASS_NAMES
    missing, BLOCK_M other than 64 (the only block compiled and measured), or fewer than two
    or more than three stages (one leaves the ring nothing to overlap; four overflow shared
    memory at head size 128)."""
    missing = [name for name in ONEPASS_NAMES if name not in config]
    if missing:
        return f"the one pass's configuration needs {', '.join(missing)} ({dict(config)})"
    if config["BLOCK_M"] != 64:
        return f"the one pass takes BLOCK_M 64, not {config['BLOCK_M']}"
    if config["STAGES"] not in (2, 3):
        return f"the one pass takes STAGES 2 or 3, not {config['STAGES']}"
    return None


def onepass_prune(config: Config, problem, resources) -> str | None:
    """onepass_problem's reasons, as the tuner's prune (the same at every head size)."""
    return onepass_problem(config)


ONEPASS_SPACE = SearchSpace(default=Config(**dict(zip(ONEPASS_NAMES, ONEPASS_CONFIGS[0]))),
                            small=configs_from_rows(ONEPASS_NAMES, ONEPASS_CONFIGS[1:]),
                            grid={"BLOCK_M": (64,), "STAGES": (2, 3)},
                            prune=onepass_prune)


def onepass_fits(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lse: torch.Tensor,
                 do: torch.Tensor) -> bool:
    """Whether the one pass takes these inputs: backward_fits', with a Triton whose Gluon
    compiler has the TMA reduce-add this module names."""
    return REDUCE_ADD is not None and backward_fits(q, k, v, lse, do)


def launch_onepass(q, k, v, lse, delta, do, dq_accum, dq, dk, dv, causal: bool,
                   config) -> None:
    """The whole backward once, with ``config`` (ONEPASS_NAMES): dq_accum (float32, q's shape,
    contiguous) zeroed, onepass_kernel into dk, dv and dq_accum, then dq = dq_accum / sqrt(
    head_dim). Inputs as flash_backward_hopper.launch_dkdv takes them; dq of q's shape and
    dtype, contiguous."""
    if reason := onepass_problem(config):
        raise ValueError(reason)
    batch, heads, seq, head_dim = q.shape
    block_m, stages = config["BLOCK_M"], config["STAGES"]
    sm_scale = 1 / math.sqrt(head_dim)
    dq_box = [block_m, head_dim // 2]
    dq_desc = TensorDescriptor(dq_accum, [dq_accum.numel() // head_dim, head_dim], [head_dim, 1],
                               dq_box, gl.NVMMASharedLayout.get_default_for(dq_box, gl.float32))
    dq_accum.zero_()
    onepass_kernel[(seq // (2 * WG_KEYS.value), batch * k.shape[1])](
        rows_descriptor(q, block_m), rows_descriptor(k, WG_KEYS.value),
        rows_descriptor(v, WG_KEYS.value), rows_descriptor(do, block_m),
        _lse_descriptor(lse, block_m), _lse_descriptor(delta, block_m), dq_desc, dk, dv, seq,
        heads // k.shape[1], sm_scale * LOG2E, sm_scale,
        HEAD_DIM=head_dim, BLOCK_M=block_m, STAGES=stages, CAUSAL=causal, CONSUMER_REGS=240,
        PRODUCER_REGS=24, num_warps=4)
    n = dq_accum.numel()
    dq_from_accumulator_kernel[(triton.cdiv(n, 4096),)](dq_accum, dq, sm_scale, n, BLOCK=4096)


forbidden_in_graded_calls(onepass_kernel)
forbidden_in_graded_calls(dq_from_accumulator_kernel)
