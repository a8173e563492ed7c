"""FlashAttention backward (FlashAttention-2's scheme) and `attention`, the autograd function
that makes `loss.backward()` work through the kernels of `flash`.

With P = softmax(S), S = scale * q k^T, and dO the gradient of the output O = P v:

    dv = P^T dO        dP = dO v^T        dS = P * (dP - delta),  delta = rowsum(dO * O)
    dq = scale * dS k  dk = scale * dS^T q

Nothing of size seq x seq is stored: P is recomputed block by block from the forward's
log-sum-exp. Two kernels share the work without atomics (`flash_backward`, lesson 04's): one
program per key block accumulates dk and dv over every query (and, for grouped-query attention,
over every query head of its group), one program per query block accumulates dq over every key.
Both recompute the scores and dP: seven matmuls a pair of blocks. One pass
(`one_pass_backward`, FlashAttention-2's own way) takes five: the key-block programs also add
each pair's share of dq into a float32 buffer, by atomic adds or TMA bulk reductions.
`attention_backward` races the ways per shape. Shapes and dtypes as in `flash`; the
gradients have the shapes of q, k and v.
"""
import functools
import math

import torch
import triton
import triton.language as tl

from tilegym_edu import device
from tilegym_edu.grading import forbidden_in_graded_calls
from tilegym_edu.reference.attention import LOG2E
from tilegym_edu.reference import flash, flash_hopper
from tilegym_edu.reference.flash import flash_forward
from tilegym_edu.tune import (Config, KernelGroup, SearchSpace, TuneResult, autotune,
                              configs_from_rows, path_configs, path_prune, split_path)


@triton.jit
def flash_delta_kernel(o_ptr, do_ptr, delta_ptr, stride_ob, stride_oh, stride_os,
                       stride_db, stride_dh, stride_ds, H, seq_q,
                       HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr):
    """delta[b, h, i] = sum over d of o * do, in float32, for BLOCK_M queries: program
    (i, b * H + h)."""
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (rows[:, None] < seq_q) & (offs_d[None, :] < HEAD_DIM)
    o = tl.load(o_ptr + b * stride_ob + h * stride_oh + rows[:, None] * stride_os
                + offs_d[None, :], mask=mask, other=0.0).to(tl.float32)
    do = tl.load(do_ptr + b * stride_db + h * stride_dh + rows[:, None] * stride_ds
                 + offs_d[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(delta_ptr + bh * seq_q + rows, tl.sum(o * do, axis=1), mask=rows < seq_q)


@triton.jit
def flash_dkdv_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
                      stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
                      stride_vb, stride_vh, stride_vs, stride_gb, stride_gh, stride_gs,
                      stride_dkb, stride_dkh, stride_dks, stride_dvb, stride_dvh, stride_dvs,
                      H, GROUP, seq_q, seq_k, qk_scale, sm_scale,
                      HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """dk and dv of one BLOCK_N block of keys of one (batch, key/value head): program
    (j, b * (H // GROUP) + kv_head). Its k and v blocks stay on chip while the query blocks of
    the GROUP query heads that read them stream past (do has strides stride_g*); causal
    attention starts at the first query that can see the block."""
    start_n = tl.program_id(0)
    bkv = tl.program_id(1)
    kv_heads = H // GROUP
    b = bkv // kv_heads
    kv_head = bkv % kv_heads
    cols = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d[None, :] < HEAD_DIM
    kv_mask = (cols[:, None] < seq_k) & d_ok
    k = tl.load(k_ptr + b * stride_kb + kv_head * stride_kh + cols[:, None] * stride_ks
                + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(v_ptr + b * stride_vb + kv_head * stride_vh + cols[:, None] * stride_vs
                + offs_d[None, :], mask=kv_mask, other=0.0)
    dk = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    shift = seq_k - seq_q
    lo = 0
    if CAUSAL:
        lo = tl.maximum(start_n * BLOCK_N - shift, 0) // BLOCK_M * BLOCK_M
    for g in range(GROUP):
        h = kv_head * GROUP + g
        q_base = q_ptr + b * stride_qb + h * stride_qh
        do_base = do_ptr + b * stride_gb + h * stride_gh
        stats = (b * H + h) * seq_q
        for start_m in tl.range(lo, seq_q, BLOCK_M):
            rows = start_m + offs_m
            q_mask = (rows[:, None] < seq_q) & d_ok
            q = tl.load(q_base + rows[:, None] * stride_qs + offs_d[None, :], mask=q_mask,
                        other=0.0)
            lse = tl.load(lse_ptr + stats + rows, mask=rows < seq_q, other=0.0)
            p_t = tl.math.exp2(tl.dot(k, tl.trans(q)) * qk_scale - lse[None, :])
            valid = (rows[None, :] < seq_q) & (cols[:, None] < seq_k)
            if CAUSAL:
                valid = valid & (rows[None, :] + shift >= cols[:, None])
            p_t = tl.where(valid, p_t, 0.0)
            do = tl.load(do_base + rows[:, None] * stride_gs + offs_d[None, :], mask=q_mask,
                         other=0.0)
            dv = tl.dot(p_t.to(do.dtype), do, dv)
            delta = tl.load(delta_ptr + stats + rows, mask=rows < seq_q, other=0.0)
            ds_t = p_t * (tl.dot(v, tl.trans(do)) - delta[None, :])
            dk = tl.dot(ds_t.to(q.dtype), q, dk)
    dk_ptrs = dk_ptr + b * stride_dkb + kv_head * stride_dkh + cols[:, None] * stride_dks
    dv_ptrs = dv_ptr + b * stride_dvb + kv_head * stride_dvh + cols[:, None] * stride_dvs
    tl.store(dk_ptrs + offs_d[None, :], (dk * sm_scale).to(dk_ptr.dtype.element_ty),
             mask=kv_mask)
    tl.store(dv_ptrs + offs_d[None, :], dv.to(dv_ptr.dtype.element_ty), mask=kv_mask)


@triton.jit
def flash_dq_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr,
                    stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
                    stride_vb, stride_vh, stride_vs, stride_gb, stride_gh, stride_gs,
                    stride_dqb, stride_dqh, stride_dqs,
                    H, GROUP, seq_q, seq_k, qk_scale, sm_scale,
                    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """dq of one BLOCK_M block of queries of one (batch, query head): program
    (i, b * H + h). Its q and do blocks stay on chip while the key/value blocks of head
    h // GROUP stream past, up to the diagonal when causal."""
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d[None, :] < HEAD_DIM
    q_mask = (rows[:, None] < seq_q) & d_ok
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + rows[:, None] * stride_qs
                + offs_d[None, :], mask=q_mask, other=0.0)
    do = tl.load(do_ptr + b * stride_gb + h * stride_gh + rows[:, None] * stride_gs
                 + offs_d[None, :], mask=q_mask, other=0.0)
    lse = tl.load(lse_ptr + bh * seq_q + rows, mask=rows < seq_q, other=0.0)
    delta = tl.load(delta_ptr + bh * seq_q + rows, mask=rows < seq_q, other=0.0)
    k_base = k_ptr + b * stride_kb + (h // GROUP) * stride_kh
    v_base = v_ptr + b * stride_vb + (h // GROUP) * stride_vh
    shift = seq_k - seq_q
    end = seq_k
    if CAUSAL:
        end = tl.minimum((start_m + 1) * BLOCK_M + shift, seq_k)
    dq = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for start_n in tl.range(0, end, BLOCK_N):
        cols = start_n + offs_n
        kv_mask = (cols[:, None] < seq_k) & d_ok
        k = tl.load(k_base + cols[:, None] * stride_ks + offs_d[None, :], mask=kv_mask,
                    other=0.0)
        v = tl.load(v_base + cols[:, None] * stride_vs + offs_d[None, :], mask=kv_mask,
                    other=0.0)
        p = tl.math.exp2(tl.dot(q, tl.trans(k)) * qk_scale - lse[:, None])
        valid = (rows[:, None] < seq_q) & (cols[None, :] < seq_k)
        if CAUSAL:
            valid = valid & (rows[:, None] + shift >= cols[None, :])
        p = tl.where(valid, p, 0.0)
        ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq)
    tl.store(dq_ptr + b * stride_dqb + h * stride_dqh + rows[:, None] * stride_dqs
             + offs_d[None, :], (dq * sm_scale).to(dq_ptr.dtype.element_ty), mask=q_mask)


@triton.jit
def flash_one_pass_kernel(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, dk_ptr, dv_ptr,
                          stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
                          stride_vb, stride_vh, stride_vs, stride_gb, stride_gh, stride_gs,
                          stride_dkb, stride_dkh, stride_dks, stride_dvb, stride_dvh,
                          stride_dvs, H, GROUP, seq_q, seq_k, qk_scale, sm_scale,
                          HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                          DQ_DESCRIPTOR: tl.constexpr):
    """flash_dkdv_kernel (whose loop it repeats: the lesson's stays as Exercise 8 asks for it),
    also adding the key block's share of dq, sm_scale * dS k for each query block streaming
    past, into dq_ptr: a zeroed float32 (batch, H, seq_q, HEAD_DIM) contiguous tensor, by
    each thread's atomics, or with DQ_DESCRIPTOR a tensor descriptor over it as
    (batch * H, seq_q, HEAD_DIM) in blocks of (1, BLOCK_M, BLOCK_D), by one bulk reduction a
    block (TMA, Hopper and newer). Five matmuls a pair of blocks where flash_dkdv_kernel and
    flash_dq_kernel take seven."""
    start_n = tl.program_id(0)
    bkv = tl.program_id(1)
    kv_heads = H // GROUP
    b = bkv // kv_heads
    kv_head = bkv % kv_heads
    cols = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d[None, :] < HEAD_DIM
    kv_mask = (cols[:, None] < seq_k) & d_ok
    k = tl.load(k_ptr + b * stride_kb + kv_head * stride_kh + cols[:, None] * stride_ks
                + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(v_ptr + b * stride_vb + kv_head * stride_vh + cols[:, None] * stride_vs
                + offs_d[None, :], mask=kv_mask, other=0.0)
    dk = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    shift = seq_k - seq_q
    lo = 0
    if CAUSAL:
        lo = tl.maximum(start_n * BLOCK_N - shift, 0) // BLOCK_M * BLOCK_M
    for g in range(GROUP):
        h = kv_head * GROUP + g
        q_base = q_ptr + b * stride_qb + h * stride_qh
        do_base = do_ptr + b * stride_gb + h * stride_gh
        stats = (b * H + h) * seq_q
        for start_m in tl.range(lo, seq_q, BLOCK_M):
            rows = start_m + offs_m
            q_mask = (rows[:, None] < seq_q) & d_ok
            q = tl.load(q_base + rows[:, None] * stride_qs + offs_d[None, :], mask=q_mask,
                        other=0.0)
            do = tl.load(do_base + rows[:, None] * stride_gs + offs_d[None, :], mask=q_mask,
                         other=0.0)
            lse = tl.load(lse_ptr + stats + rows, mask=rows < seq_q, other=0.0)
            delta = tl.load(delta_ptr + stats + rows, mask=rows < seq_q, other=0.0)
            valid = (rows[None, :] < seq_q) & (cols[:, None] < seq_k)
            if CAUSAL:
                valid = valid & (rows[None, :] + shift >= cols[:, None])
            p_t = tl.where(valid, tl.math.exp2(tl.dot(k, tl.trans(q)) * qk_scale
                                               - lse[None, :]), 0.0)
            dv = tl.dot(p_t.to(do.dtype), do, dv)
            ds_t = (p_t * (tl.dot(v, tl.trans(do)) - delta[None, :])).to(q.dtype)
            dk = tl.dot(ds_t, q, dk)
            dq = tl.dot(tl.trans(ds_t), k) * sm_scale
            if DQ_DESCRIPTOR:
                dq_ptr.atomic_add([b * H + h, start_m, 0], dq.reshape(1, BLOCK_M, BLOCK_D))
            else:
                dq_rows = (b * H + h) * seq_q + rows
                tl.atomic_add(dq_ptr + dq_rows[:, None] * HEAD_DIM + offs_d[None, :], dq,
                              mask=q_mask, sem="relaxed")
    dk_ptrs = dk_ptr + b * stride_dkb + kv_head * stride_dkh + cols[:, None] * stride_dks
    dv_ptrs = dv_ptr + b * stride_dvb + kv_head * stride_dvh + cols[:, None] * stride_dvs
    tl.store(dk_ptrs + offs_d[None, :], (dk * sm_scale).to(dk_ptr.dtype.element_ty),
             mask=kv_mask)
    tl.store(dv_ptrs + offs_d[None, :], dv.to(dv_ptr.dtype.element_ty), mask=kv_mask)


def _backward_prune(resident: str, streamed: str, dq_share: bool = False):
    """A prune for a backward kernel whose ``resident`` block (two tiles: k and v, or q and
    do) stays on chip while num_stages copies of two ``streamed`` tiles pass: reject what
    overflows shared memory or takes over 192 registers a thread (two float32 accumulators
    and the scores, and with ``dq_share`` the streamed block's float32 share of dq)."""
    def prune(config, problem, resources) -> str | None:
        d = problem["head_dim"]
        elem = 4 if problem["dtype"] == "float32" else 2
        kept, passing = config[resident], config[streamed]
        shared = (2 * kept * d + config["num_stages"] * 2 * passing * d) * elem
        if shared > resources.shared_bytes:
            return (f"needs {shared // 1024} KiB of shared memory, "
                    f"the GPU offers {resources.shared_bytes // 1024} KiB")
        tiles = 2 * kept * d + 2 * kept * passing + (passing * d if dq_share else 0)
        registers = tiles // (32 * config["num_warps"])
        if registers > 192:
            return f"accumulators and scores take {registers} registers per thread (over 192)"
        return None
    return prune


_NAMES = ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")


def _space(default, small, resident, streamed) -> SearchSpace:
    return SearchSpace(
        default=configs_from_rows(_NAMES, [default])[0],
        small=configs_from_rows(_NAMES, small),
        grid={"BLOCK_M": (16, 32, 64, 128), "BLOCK_N": (32, 64, 128), "num_warps": (4, 8),
              "num_stages": (2, 3, 4, 5)},
        prune=_backward_prune(resident, streamed), cap=100)


#: dk/dv: a large key block stays, narrow query blocks stream past (the last two rows are
#: for head sizes over 128, where the others take too many registers)
DKDV_SPACE = _space((32, 128, 4, 3), [(32, 64, 4, 3), (64, 128, 8, 3), (16, 64, 4, 4),
                                      (32, 128, 8, 2), (64, 64, 4, 2), (32, 64, 8, 2),
                                      (16, 32, 4, 2)], "BLOCK_N", "BLOCK_M")
#: dq: a large query block stays, narrow key blocks stream past
DQ_SPACE = _space((128, 32, 4, 3), [(64, 32, 4, 3), (128, 64, 8, 3), (64, 64, 4, 2),
                                    (64, 16, 4, 4), (128, 32, 8, 2), (64, 32, 8, 2),
                                    (32, 16, 4, 2)], "BLOCK_M", "BLOCK_N")
_dkdv_with_dq_share = _backward_prune("BLOCK_N", "BLOCK_M", dq_share=True)


def _one_pass_prune(config, problem, resources) -> str | None:
    """dk/dv's prune with each pair's float32 share of dq counted, and DQ_DESCRIPTOR only
    where the problem's dq_descriptors says TMA can take dq."""
    if config["DQ_DESCRIPTOR"] and not problem.get("dq_descriptors", False):
        return "dq cannot be added through a tensor descriptor here (dq_descriptors_fit)"
    return _dkdv_with_dq_share(config, problem, resources)


#: one pass (flash_one_pass_kernel): as dk/dv, each pair of blocks also holding its float32
#: share of dq, added by atomics or (DQ_DESCRIPTOR) by TMA. Compiled for sm_90a by Triton 3.6
#: (2026-12-03, no GPU: registers and spills, not speed), causal fp16: the default takes 246
#: registers at head size 128 and 188 at 64, nothing spilled (by TMA 244 and 170); 64 x 64
#: on 8 warps spills 8 bytes at 128 (by TMA nothing), 64 x 128 by TMA 56; the 4-warp rows
#: spill 24-104 bytes at 128; (16, 64, 8, 2) and (16, 32, 4, 2) are for head sizes over 128
#: (at 256: 8-16 bytes). The prune's shared-memory sum leaves out the TMA staging tile: a
#: configuration that overflows fails to compile, and the tuner records it as failed
ONE_PASS_SPACE = SearchSpace(
    default=Config(BLOCK_M=32, BLOCK_N=128, num_warps=8, num_stages=2, DQ_DESCRIPTOR=False),
    small=configs_from_rows((*_NAMES, "DQ_DESCRIPTOR"), [
        (64, 64, 8, 2, False), (32, 128, 8, 3, False), (32, 64, 4, 2, False),
        (16, 64, 4, 3, False), (64, 64, 8, 3, False), (16, 64, 8, 2, False),
        (16, 32, 4, 2, False), (32, 128, 8, 2, True), (64, 64, 8, 2, True),
        (64, 128, 8, 2, True), (16, 64, 8, 2, True)]),
    grid={**DKDV_SPACE.grid, "DQ_DESCRIPTOR": (False, True)},
    prune=_one_pass_prune, cap=100)


def head_strides(*tensors: torch.Tensor) -> list[int]:
    """Batch, head and sequence strides of each 4-D tensor, in order."""
    return [s for t in tensors for s in t.stride()[:3]]


def backward_problem(q: torch.Tensor, k: torch.Tensor, causal: bool) -> dict[str, object]:
    """What the best backward configurations depend on."""
    batch, heads, seq_q, head_dim = q.shape
    return {"batch": batch, "heads": heads, "kv_heads": k.shape[1], "seq_q": seq_q,
            "seq_k": k.shape[2], "head_dim": max(16, triton.next_power_of_2(head_dim)),
            "dtype": str(q.dtype).removeprefix("torch."), "causal": causal}


def backward_launchers(q, k, v, o, lse, do, causal: bool):
    """((dq, dk, dv), launchers) for the backward of o = flash_forward(q, k, v, causal) with
    log-sum-exp lse and output gradient do (any strides, last dimension contiguous): delta
    computed, the gradients allocated, and for "dkdv" and "dq" a (kernel, search space,
    launch(config)) triple whose launch fills its gradients."""
    if do.stride(-1) != 1:
        do = do.contiguous()
    batch, heads, seq_q, head_dim = q.shape
    seq_k, group = k.shape[2], heads // k.shape[1]
    block_d = max(16, triton.next_power_of_2(head_dim))
    delta = torch.empty_like(lse)
    flash_delta_kernel[(triton.cdiv(seq_q, 64), batch * heads)](
        o, do, delta, *head_strides(o, do), heads, seq_q, HEAD_DIM=head_dim, BLOCK_D=block_d,
        BLOCK_M=64)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    sm_scale = 1 / math.sqrt(head_dim)
    shared = (heads, group, seq_q, seq_k, sm_scale * LOG2E, sm_scale)
    constants = dict(HEAD_DIM=head_dim, BLOCK_D=block_d, CAUSAL=causal)

    def launch_dkdv(config):
        grid = (triton.cdiv(seq_k, config["BLOCK_N"]), batch * k.shape[1])
        flash_dkdv_kernel[grid](q, k, v, do, lse, delta, dk, dv,
                                *head_strides(q, k, v, do, dk, dv), *shared, **constants, **config)

    def launch_dq(config):
        grid = (triton.cdiv(seq_q, config["BLOCK_M"]), batch * heads)
        flash_dq_kernel[grid](q, k, v, do, lse, delta, dq, *head_strides(q, k, v, do, dq),
                              *shared, **constants, **config)

    return (dq, dk, dv), {"dkdv": (flash_dkdv_kernel, DKDV_SPACE, launch_dkdv),
                          "dq": (flash_dq_kernel, DQ_SPACE, launch_dq)}


def tune_backward(problem, launchers, level: int = 1) -> dict[str, TuneResult]:
    """The tuner's result for each backward kernel of ``launchers`` (backward_launchers')."""
    return {name: autotune(kernel, problem, space, launch, level=level)
            for name, (kernel, space, launch) in launchers.items()}


@forbidden_in_graded_calls
def flash_backward(q, k, v, o, lse, do, causal: bool = False, configs=None,
                   level: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) for the attention o = flash_forward(q, k, v, causal) whose log-sum-exp is
    lse, given do (o's shape, any strides with the last dimension contiguous). ``configs``
    {"dkdv": ..., "dq": ...} fixes the launch configurations, else the tuner picks them."""
    grads, launchers = backward_launchers(q, k, v, o, lse, do, causal)
    if configs is None:
        configs = {name: result.config for name, result in
                   tune_backward(backward_problem(q, k, causal), launchers, level).items()}
    for name, (_, _, launch) in launchers.items():
        launch(configs[name])
    return grads


def dq_descriptors_fit(q: torch.Tensor) -> bool:
    """Whether one pass can add dq through a tensor descriptor (a TMA bulk reduction) for
    queries shaped as ``q``: a GPU of compute capability 9.0 or newer (Triton's interpreter
    has no reductions through descriptors), Triton 3.4 or newer, and dq's rows (head_dim
    float32) on 16-byte boundaries."""
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
    except ImportError:
        return False
    return (device.ON_GPU and q.is_cuda and q.shape[-1] % 4 == 0
            and torch.cuda.get_device_capability(q.device) >= (9, 0))


def one_pass_backward(q, k, v, o, lse, do, causal: bool, config) -> tuple[torch.Tensor, ...]:
    """(dq, dk, dv) as flash_backward's, by the delta kernel and one launch of
    flash_one_pass_kernel (``config``: BLOCK_M, BLOCK_N, num_warps, num_stages, and
    DQ_DESCRIPTOR, False where absent): dq is summed in float32, in an order that varies from
    run to run, then cast to q's dtype."""
    if do.stride(-1) != 1:
        do = do.contiguous()
    batch, heads, seq_q, head_dim = q.shape
    options = dict(config)
    by_descriptor = options.pop("DQ_DESCRIPTOR", False)
    if by_descriptor and not dq_descriptors_fit(q):
        raise ValueError("DQ_DESCRIPTOR=True adds dq by TMA, which needs a GPU of compute "
                         "capability 9.0 or newer, Triton 3.4 or newer and a head_dim "
                         f"divisible by 4 (here {head_dim}): set DQ_DESCRIPTOR=False")
    columns = flash.block_d(head_dim)
    delta = torch.empty_like(lse)
    flash_delta_kernel[(triton.cdiv(seq_q, 64), batch * heads)](
        o, do, delta, *head_strides(o, do), heads, seq_q, HEAD_DIM=head_dim, BLOCK_D=columns,
        BLOCK_M=64)
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    dq_sum = dq
    if by_descriptor:
        from triton.tools.tensor_descriptor import TensorDescriptor
        dq_sum = TensorDescriptor(dq, [batch * heads, seq_q, head_dim],
                                  [seq_q * head_dim, head_dim, 1],
                                  [1, options["BLOCK_M"], columns])
    sm_scale = 1 / math.sqrt(head_dim)
    grid = (triton.cdiv(k.shape[2], options["BLOCK_N"]), batch * k.shape[1])
    flash_one_pass_kernel[grid](
        q, k, v, do, lse, delta, dq_sum, dk, dv, *head_strides(q, k, v, do, dk, dv), heads,
        heads // k.shape[1], seq_q, k.shape[2], sm_scale * LOG2E, sm_scale, HEAD_DIM=head_dim,
        BLOCK_D=columns, CAUSAL=causal, DQ_DESCRIPTOR=by_descriptor, **options)
    return dq.to(q.dtype), dk, dv


#: the backward's ways: "two_kernels" (flash_backward: dk/dv and dq by kernels of their own,
#: each tuned on its own space) or "one_pass" (one_pass_backward, with ONE_PASS_SPACE's options)
BACKWARD_PATHS = {"two_kernels": SearchSpace(default=Config()), "one_pass": ONE_PASS_SPACE}
#: both paths in one space: the tuner races them per shape (race_problem) and caches the
#: winner's PATH
BACKWARD_SPACE = SearchSpace(
    default=Config(PATH="two_kernels"),
    small=path_configs(BACKWARD_PATHS),
    grid={"PATH": ("one_pass",), **ONE_PASS_SPACE.grid},
    prune=functools.partial(path_prune, BACKWARD_PATHS), cap=100)
BACKWARD_KERNELS = KernelGroup("attention_backward", (flash_delta_kernel, flash_dkdv_kernel,
                                                      flash_dq_kernel, flash_one_pass_kernel))


def backward_on_path(q, k, v, o, lse, do, causal: bool, config,
                     level: int = 1) -> tuple[torch.Tensor, ...]:
    """(dq, dk, dv) by the path config["PATH"] names (BACKWARD_PATHS), with the rest of
    ``config`` as its options; "two_kernels" tunes its kernels at ``level``."""
    path, options = split_path(config)
    if path == "one_pass":
        return one_pass_backward(q, k, v, o, lse, do, causal, options)
    return flash_backward(q, k, v, o, lse, do, causal, level=level)


def race_problem(q: torch.Tensor, k: torch.Tensor, causal: bool) -> dict[str, object]:
    """What the race of the backward's ways depends on: backward_problem's keys and whether
    dq can go by tensor descriptors (dq_descriptors_fit)."""
    return {**backward_problem(q, k, causal), "dq_descriptors": dq_descriptors_fit(q)}


def backward_race(q, k, v, o, lse, do, causal: bool, level: int = 1) -> TuneResult:
    """The tuner's race of the backward's ways (BACKWARD_SPACE) on these inputs, run once per
    shape and GPU, then cached: its config's PATH names the winner."""
    return autotune(BACKWARD_KERNELS, race_problem(q, k, causal), BACKWARD_SPACE,
                    lambda config: backward_on_path(q, k, v, o, lse, do, causal, config, level),
                    level=level)


@forbidden_in_graded_calls
def attention_backward(q, k, v, o, lse, do, causal: bool = False, configs=None,
                       level: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) as flash_backward's, on the faster of its two ways for this shape and GPU
    (backward_race: the two kernels, each tuned first, against one pass). ``configs`` fixes
    the way instead: {"dkdv": ..., "dq": ...} runs flash_backward with them, {"one_pass": ...}
    one_pass_backward."""
    if configs is None:
        race = backward_race(q, k, v, o, lse, do, causal, level)
        return backward_on_path(q, k, v, o, lse, do, causal, race.config, level)
    if "one_pass" in configs:
        return one_pass_backward(q, k, v, o, lse, do, causal, configs["one_pass"])
    return flash_backward(q, k, v, o, lse, do, causal, configs)


class FlashAttention(torch.autograd.Function):
    """o = attention(q, k, v, causal) with the backward pass of this module."""

    @staticmethod
    def forward(ctx, q, k, v, causal, forward_config, backward_configs):
        if forward_config is None:  # the fastest forward: on Hopper, the Gluon kernels
            o, lse = flash_hopper.attention_forward(q, k, v, causal)
        else:
            o, lse = flash_forward(q, k, v, causal, config=forward_config)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.backward_configs = causal, backward_configs
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = attention_backward(q, k, v, o, lse, do, ctx.causal, ctx.backward_configs)
        return dq, dk, dv, None, None, None


@forbidden_in_graded_calls
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              forward_config=None, backward_configs=None) -> torch.Tensor:
    """softmax(q k^T / sqrt(head_dim)) v on the FlashAttention kernels, differentiable:
    ``loss.backward()`` fills q.grad, k.grad and v.grad. Shapes as `flash` says (grouped
    heads, fewer queries than keys, any head size up to 256); configurations tuned unless
    given (``backward_configs`` as `attention_backward` takes them). Inputs are checked by
    flash_forward, with the same errors."""
    return FlashAttention.apply(q, k, v, causal, forward_config, backward_configs)


forbidden_in_graded_calls(flash_delta_kernel)
forbidden_in_graded_calls(flash_dkdv_kernel)
forbidden_in_graded_calls(flash_dq_kernel)
forbidden_in_graded_calls(flash_one_pass_kernel)
