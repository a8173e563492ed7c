"""FlashAttention backward (FlashAttention-2's scheme) and `attention`, the autograd function
that makes `loss.backward()` work through the kernels of `flash`.

With P = softmax(S), S = scale * q k^T, and dO the gradient of the output O = P v:

    dv = P^T dO        dP = dO v^T        dS = P * (dP - delta),  delta = rowsum(dO * O)
    dq = scale * dS k  dk = scale * dS^T q

Nothing of size seq x seq is stored: P is recomputed block by block from the forward's
log-sum-exp. Two kernels share the work without atomics: one program per key block
accumulates dk and dv over every query (and, for grouped-query attention, over every query
head of its group), one program per query block accumulates dq over every key. The blocks
each program streams past go by tensor descriptors (TMA) where the sequence is a whole number
of them. Shapes and dtypes as in `flash`; the gradients have the shapes of q, k and v.

FlashAttention-2's one pass (the key-block programs also add their share of dq into a float32
buffer by atomics: five matmuls a pair of blocks where these kernels take seven) ran slower
in Triton on the H200, 0.58-0.78x these kernels' speed, whether dq went by atomics or TMA
reductions; `benchmarks/attention_backward_ideas.py` measures why. Written in Gluon, with
FlashAttention-3's schedule (flash_backward_onepass), it won at head size 128 without grouped
heads, causal and not (run 36): `attention_backward` races it against the two passes.
"""
import math
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from tilegym_edu.grading import forbidden_in_graded_calls
from tilegym_edu.reference.attention import LOG2E
from tilegym_edu.reference import flash_backward_hopper, flash_backward_onepass, flash_hopper
from tilegym_edu.reference.flash import block_d, descriptors_fit, flash_forward, kv_descriptors
from tilegym_edu.tune import (Config, KernelGroup, SearchSpace, TuneResult, autotune,
                              configs_from_rows, path_space, split_path)


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
def flash_dkdv_kernel(q_src, k_ptr, v_ptr, do_src, lse_ptr, delta_ptr, dk_ptr, dv_ptr,
                      stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
                      stride_vb, stride_vh, stride_vs, stride_gb, stride_gh, stride_gs,
                      stride_dkb, stride_dkh, stride_dks, stride_dvb, stride_dvh, stride_dvs,
                      H, GROUP, seq_q, seq_k, qk_scale, sm_scale,
                      HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                      STREAM_DESCRIPTORS: tl.constexpr):
    """dk and dv of one BLOCK_N block of keys of one (batch, key/value head): program
    (j, b * (H // GROUP) + kv_head). Its k and v blocks stay on chip while the query blocks of
    the GROUP query heads that read them stream past (do has strides stride_g*); causal
    attention starts at the first query that can see the block. q_src and do_src are q and do,
    or (STREAM_DESCRIPTORS) tensor descriptors over their (batch * H * seq_q, HEAD_DIM) rows
    (stream_descriptors makes them), seq_q then a multiple of BLOCK_M: every streamed block
    is whole, and only the causal mask is left."""
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
        stats = (b * H + h) * seq_q
        for start_m in tl.range(lo, seq_q, BLOCK_M):
            rows = start_m + offs_m
            if STREAM_DESCRIPTORS:
                q = q_src.load([stats + start_m, 0])
                do = do_src.load([stats + start_m, 0])
                lse = tl.load(lse_ptr + stats + rows)
                delta = tl.load(delta_ptr + stats + rows)
            else:
                q_mask = (rows[:, None] < seq_q) & d_ok
                q = tl.load(q_src + b * stride_qb + h * stride_qh + rows[:, None] * stride_qs
                            + offs_d[None, :], mask=q_mask, other=0.0)
                do = tl.load(do_src + b * stride_gb + h * stride_gh + rows[:, None] * stride_gs
                             + offs_d[None, :], mask=q_mask, other=0.0)
                lse = tl.load(lse_ptr + stats + rows, mask=rows < seq_q, other=0.0)
                delta = tl.load(delta_ptr + stats + rows, mask=rows < seq_q, other=0.0)
            p_t = tl.math.exp2(tl.dot(k, tl.trans(q)) * qk_scale - lse[None, :])
            if not STREAM_DESCRIPTORS:
                p_t = tl.where((rows[None, :] < seq_q) & (cols[:, None] < seq_k), p_t, 0.0)
            if CAUSAL:
                p_t = tl.where(rows[None, :] + shift >= cols[:, None], p_t, 0.0)
            dv = tl.dot(p_t.to(do.dtype), do, dv)
            ds_t = p_t * (tl.dot(v, tl.trans(do)) - delta[None, :])
            dk = tl.dot(ds_t.to(q.dtype), q, dk)
    dk_ptrs = dk_ptr + b * stride_dkb + kv_head * stride_dkh + cols[:, None] * stride_dks
    dv_ptrs = dv_ptr + b * stride_dvb + kv_head * stride_dvh + cols[:, None] * stride_dvs
    tl.store(dk_ptrs + offs_d[None, :], (dk * sm_scale).to(dk_ptr.dtype.element_ty),
             mask=kv_mask)
    tl.store(dv_ptrs + offs_d[None, :], dv.to(dv_ptr.dtype.element_ty), mask=kv_mask)


@triton.jit
def flash_dq_kernel(q_ptr, k_src, v_src, do_ptr, lse_ptr, delta_ptr, dq_ptr,
                    stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
                    stride_vb, stride_vh, stride_vs, stride_gb, stride_gh, stride_gs,
                    stride_dqb, stride_dqh, stride_dqs,
                    H, GROUP, seq_q, seq_k, qk_scale, sm_scale,
                    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                    STREAM_DESCRIPTORS: tl.constexpr):
    """dq of one BLOCK_M block of queries of one (batch, query head): program
    (i, b * H + h). Its q and do blocks stay on chip while the key/value blocks of head
    h // GROUP stream past, up to the diagonal when causal. k_src and v_src are k and v, or
    (STREAM_DESCRIPTORS) tensor descriptors over their (batch * kv_heads * seq_k, HEAD_DIM)
    rows, seq_k then a multiple of BLOCK_N: every streamed block is whole."""
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
    kv_row = (b * (H // GROUP) + h // GROUP) * seq_k  # the head's first row (descriptors)
    shift = seq_k - seq_q
    end = seq_k
    if CAUSAL:
        end = tl.minimum((start_m + 1) * BLOCK_M + shift, seq_k)
    dq = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    for start_n in tl.range(0, end, BLOCK_N):
        cols = start_n + offs_n
        if STREAM_DESCRIPTORS:
            k = k_src.load([kv_row + start_n, 0])
            v = v_src.load([kv_row + start_n, 0])
        else:
            kv_mask = (cols[:, None] < seq_k) & d_ok
            k = tl.load(k_src + b * stride_kb + (h // GROUP) * stride_kh
                        + cols[:, None] * stride_ks + offs_d[None, :], mask=kv_mask, other=0.0)
            v = tl.load(v_src + b * stride_vb + (h // GROUP) * stride_vh
                        + cols[:, None] * stride_vs + offs_d[None, :], mask=kv_mask, other=0.0)
        p = tl.math.exp2(tl.dot(q, tl.trans(k)) * qk_scale - lse[:, None])
        if not STREAM_DESCRIPTORS:
            p = tl.where((rows[:, None] < seq_q) & (cols[None, :] < seq_k), p, 0.0)
        if CAUSAL:
            p = tl.where(rows[:, None] + shift >= cols[None, :], p, 0.0)
        ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq)
    tl.store(dq_ptr + b * stride_dqb + h * stride_dqh + rows[:, None] * stride_dqs
             + offs_d[None, :], (dq * sm_scale).to(dq_ptr.dtype.element_ty), mask=q_mask)


def _backward_prune(resident: str, streamed: str):
    """A prune for a backward kernel whose ``resident`` block (two tiles: k and v, or q and
    do) stays on chip while num_stages copies of two ``streamed`` tiles pass: reject what
    overflows shared memory or takes over 192 registers a thread (two float32 accumulators
    and the scores)."""
    def prune(config, problem, resources) -> str | None:
        d = problem["head_dim"]
        elem = 4 if problem["dtype"] == "float32" else 2
        kept, passing = config[resident], config[streamed]
        shared = (2 * kept * d + config["num_stages"] * 2 * passing * d) * elem
        if shared > resources.shared_bytes:
            return (f"needs {shared // 1024} KiB of shared memory, "
                    f"the GPU offers {resources.shared_bytes // 1024} KiB")
        registers = (2 * kept * d + 2 * kept * passing) // (32 * config["num_warps"])
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


def head_strides(*tensors: torch.Tensor) -> list[int]:
    """Batch, head and sequence strides of each 4-D tensor, in order."""
    return [s for t in tensors for s in t.stride()[:3]]


def backward_problem(q: torch.Tensor, k: torch.Tensor, causal: bool) -> dict[str, object]:
    """What the best backward configurations depend on: the shapes, and whether each kernel's
    streamed blocks can go by tensor descriptors (q's rows for dk/dv, k's for dq: the two ways
    tune apart; v is taken to have k's layout)."""
    batch, heads, seq_q, head_dim = q.shape
    return {"batch": batch, "heads": heads, "kv_heads": k.shape[1], "seq_q": seq_q,
            "seq_k": k.shape[2], "head_dim": block_d(head_dim),
            "dtype": str(q.dtype).removeprefix("torch."), "causal": causal,
            "q_descriptors": descriptors_fit(q), "kv_descriptors": descriptors_fit(k)}


def stream_descriptors(a: torch.Tensor, b: torch.Tensor, block: int, columns: int):
    """(a, b) as tensor descriptors over their (batch * heads * seq, head_dim) rows, in blocks
    of (block, columns): the tiles a backward kernel streams past its resident block, read by
    TMA copies (on the H200 the backward took 6-9% less time so, docs/results/h200.md,
    2026-12-04). None unless both fit (descriptors_fit), this Triton has descriptors
    (3.4 and newer), and ``block`` divides the sequence: a block never runs into the next
    head's rows, so the kernels mask nothing but the causal diagonal."""
    if a.shape[2] % block:
        return None
    return kv_descriptors(a, b, block, columns)


def backward_launchers(q, k, v, o, lse, do, causal: bool):
    """((dq, dk, dv), launchers) for the backward of o = flash_forward(q, k, v, causal) with
    log-sum-exp lse and output gradient do (any strides, last dimension contiguous): delta
    computed, the gradients allocated, and for "dkdv" and "dq" a (kernel, search space,
    launch(config)) triple whose launch fills its gradients. The streamed blocks go by tensor
    descriptors where stream_descriptors can make them (do is copied to q's layout first
    where q's would stream so and do's would not)."""
    streams_q = descriptors_fit(q) and q.shape[2] % min(DKDV_SPACE.grid["BLOCK_M"]) == 0
    if do.stride(-1) != 1 or (streams_q and not descriptors_fit(do)):
        do = do.contiguous()
    batch, heads, seq_q, head_dim = q.shape
    seq_k, group = k.shape[2], heads // k.shape[1]
    columns = block_d(head_dim)
    delta = torch.empty_like(lse)
    flash_delta_kernel[(triton.cdiv(seq_q, 64), batch * heads)](
        o, do, delta, *head_strides(o, do), heads, seq_q, HEAD_DIM=head_dim, BLOCK_D=columns,
        BLOCK_M=64)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    sm_scale = 1 / math.sqrt(head_dim)
    shared = (heads, group, seq_q, seq_k, sm_scale * LOG2E, sm_scale)
    constants = dict(HEAD_DIM=head_dim, BLOCK_D=columns, CAUSAL=causal)

    def launch_dkdv(config):
        grid = (triton.cdiv(seq_k, config["BLOCK_N"]), batch * k.shape[1])
        streams = stream_descriptors(q, do, config["BLOCK_M"], columns)
        q_src, do_src = streams or (q, do)
        flash_dkdv_kernel[grid](q_src, k, v, do_src, lse, delta, dk, dv,
                                *head_strides(q, k, v, do, dk, dv), *shared, **constants,
                                STREAM_DESCRIPTORS=streams is not None, **config)

    def launch_dq(config):
        grid = (triton.cdiv(seq_q, config["BLOCK_M"]), batch * heads)
        streams = stream_descriptors(k, v, config["BLOCK_N"], columns)
        k_src, v_src = streams or (k, v)
        flash_dq_kernel[grid](q, k_src, v_src, do, lse, delta, dq,
                              *head_strides(q, k, v, do, dq), *shared, **constants,
                              STREAM_DESCRIPTORS=streams is not None, **config)

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


class Race(NamedTuple):
    """Several kernels ("paths") raced as one: their KernelGroup, one search space whose
    configurations name their PATH (each path's own space checks the rest), and the path a
    configuration without PATH runs. Made once, at import: the tuner's in-memory lookup keys
    on the objects' identity."""

    kernels: KernelGroup
    space: SearchSpace
    without_path: str


def _race(name: str, paths: dict[str, tuple], without_path: str) -> Race:
    """The Race of ``paths`` ({path: (kernel or KernelGroup, space)}): level 0 is the first
    path's default, level 1 every path's level-1 configurations, level 2 adds the last path's
    grid."""
    kernels = [k for kernel, _ in paths.values() for k in getattr(kernel, "kernels", (kernel,))]
    space = path_space({path: space for path, (_, space) in paths.items()}, list(paths)[-1])
    return Race(KernelGroup(name, kernels), space, without_path)


def _racing(race: Race, launches: dict) -> tuple:
    """(kernels, search space, launch(config)) of ``race``, launch running the path the
    configuration names (``launches``: {path: launch(options)}); an unknown PATH is refused,
    saying which there are."""
    def launch(config):
        path, options = split_path({"PATH": race.without_path, **config})
        if path not in launches:
            raise ValueError(f"PATH {path!r} ({dict(config)}): {race.kernels.__name__} races "
                             f"{', '.join(map(repr, launches))}")
        launches[path](Config(**options))
    return race.kernels, race.space, launch


def backward_delta(o: torch.Tensor, do: torch.Tensor) -> torch.Tensor:
    """delta = rowsum(do * o) in float32, (batch, heads, seq_q), by flash_delta_kernel."""
    batch, heads, seq_q, head_dim = o.shape
    delta = o.new_empty(o.shape[:3], dtype=torch.float32)
    flash_delta_kernel[(triton.cdiv(seq_q, 64), batch * heads)](
        o, do, delta, *head_strides(o, do), heads, seq_q, HEAD_DIM=head_dim,
        BLOCK_D=block_d(head_dim), BLOCK_M=64)
    return delta


def _triton_copying_into(grads, build) -> dict[str, tuple]:
    """The Triton kernels' (kernel, search space, launch(config)) triples for a race beside the
    Gluon kernels: ``build()`` (backward_launchers on the inputs: its own delta launch and
    gradient tensors) runs at the first launch, so a backward the Gluon kernels win computes
    delta once, and each launch copies the gradients it made into ``grads`` (dq, dk, dv), the
    tensors the Gluon kernels fill. Those copies are part of what the race times for the
    Triton path, and a backward that runs it launches delta twice."""
    built = []

    def launch(name, config):
        if not built:
            built.append(build())
        made, launchers = built[0]
        launchers[name][2](config)
        for i in ((0,) if name == "dq" else (1, 2)):
            grads[i].copy_(made[i])
    return {name: (kernel, space, lambda config, name=name: launch(name, config))
            for name, kernel, space in (("dkdv", flash_dkdv_kernel, DKDV_SPACE),
                                        ("dq", flash_dq_kernel, DQ_SPACE))}


#: dk/dv and dq each: the Gluon kernels against the Triton one (a configuration without PATH,
#: the Triton kernel's own, runs it)
DKDV_RACE = _race("flash_dkdv_paths", {
    "gluon": (KernelGroup("gluon_dkdv", (flash_backward_hopper.dkdv_one_kernel,
                                         flash_backward_hopper.dkdv_ws_kernel)),
              flash_backward_hopper.DKDV_SPACE),
    "triton": (flash_dkdv_kernel, DKDV_SPACE)}, without_path="triton")
DQ_RACE = _race("flash_dq_paths", {"gluon": (flash_backward_hopper.dq_kernel,
                                             flash_backward_hopper.DQ_SPACE),
                                   "triton": (flash_dq_kernel, DQ_SPACE)}, without_path="triton")
ONEPASS_KERNELS = KernelGroup("flash_onepass", (flash_backward_onepass.onepass_kernel,
                                                flash_backward_onepass.dq_from_accumulator_kernel))
#: the two passes (dk/dv and dq as their races picked) against the one pass; level 0 and a
#: configuration without PATH are the two passes
PASSES_RACE = _race("flash_backward_passes", {
    "two": (KernelGroup("flash_two_passes", DKDV_RACE.kernels.kernels + DQ_RACE.kernels.kernels),
            SearchSpace(default=Config())),
    "onepass": (ONEPASS_KERNELS, flash_backward_onepass.ONEPASS_SPACE)}, without_path="two")


def _onepass_into(grads, q, k, v, lse, delta, do, causal: bool):
    """launch(config) of flash_backward_onepass filling ``grads`` (dq, dk, dv), its float32
    dq accumulator allocated at the first launch."""
    accumulator = []

    def launch(config):
        if not accumulator:
            accumulator.append(torch.empty(q.shape, dtype=torch.float32, device=q.device))
        flash_backward_onepass.launch_onepass(q, k, v, lse, delta, do, accumulator[0], *grads,
                                              causal, config)
    return launch


def fastest_launchers(q, k, v, o, lse, do, causal: bool):
    """((dq, dk, dv), launchers) as backward_launchers returns them, each kernel's triple racing,
    where flash_backward_hopper.backward_fits takes the inputs, its Gluon kernel ("gluon")
    against the Triton one ("triton"): configurations name their PATH. There the gradients are
    the Gluon kernels' tensors, and the Triton kernels are set up at their first launch and copy
    into them (_triton_copying_into), so a backward the Gluon kernels win runs one delta
    launch; and where flash_backward_onepass.onepass_fits takes them too, launchers has a
    third triple, "onepass", the whole backward in one pass into the same tensors (passes_race
    races it against the two passes together). Elsewhere backward_launchers' own, with Triton
    triples that take a configuration with PATH "triton" too and refuse one with "gluon",
    saying why."""
    G = flash_backward_hopper
    if not G.backward_fits(q, k, v, lse, do):
        grads, launchers = backward_launchers(q, k, v, o, lse, do, causal)

        def refusing(kernel, space, launch):
            def run(config):
                path, options = split_path({"PATH": "triton", **config})
                if path != "triton":
                    raise ValueError(f"a configuration of the {path} path ({dict(config)}): "
                                     "these inputs do not fit the Gluon kernels "
                                     "(flash_backward_hopper.backward_fits); pass the Triton "
                                     "kernels' configuration, or none to tune")
                launch(Config(**options))
            return kernel, space, run
        return grads, {name: refusing(*triple) for name, triple in launchers.items()}
    do = do.contiguous()
    delta = backward_delta(o, do)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    triton_paths = _triton_copying_into(
        (dq, dk, dv), lambda: backward_launchers(q, k, v, o, lse, do, causal))
    gluon_launches = {
        "dkdv": lambda c: G.launch_dkdv(q, k, v, lse, delta, do, dk, dv, causal, c),
        "dq": lambda c: G.launch_dq(q, k, v, lse, delta, do, dq, causal, c)}
    launchers = {name: _racing(race, {"gluon": gluon_launches[name],
                                      "triton": triton_paths[name][2]})
                 for name, race in (("dkdv", DKDV_RACE), ("dq", DQ_RACE))}
    if flash_backward_onepass.onepass_fits(q, k, v, lse, do):
        launchers["onepass"] = (ONEPASS_KERNELS, flash_backward_onepass.ONEPASS_SPACE,
                                _onepass_into((dq, dk, dv), q, k, v, lse, delta, do, causal))
    return (dq, dk, dv), launchers


def _two_passes(launchers, configs) -> None:
    """launchers' dk/dv and dq kernels, each with its configuration in ``configs``."""
    missing = [name for name in ("dkdv", "dq") if name not in configs]
    if missing:
        raise ValueError(f"the two passes need a configuration for {' and '.join(missing)} "
                         f"(configs has {sorted(configs)}): give them, or configs=None to tune")
    for name in ("dkdv", "dq"):
        launchers[name][2](configs[name])


def passes_race(launchers, configs) -> tuple:
    """(kernels, search space, launch(config)) of PASSES_RACE on fastest_launchers' triples:
    "onepass" runs the one pass (configurations of flash_backward_onepass.ONEPASS_SPACE; on
    inputs it does not fit, a configuration of it is refused, saying why), "two" the dk/dv and
    dq triples with configs["dkdv"] and configs["dq"], read at each launch."""
    def one_pass(config):
        if "onepass" not in launchers:
            raise ValueError(f"a configuration of the one pass ({dict(config)}): these inputs "
                             "do not fit it (flash_backward_onepass.onepass_fits); leave out "
                             "\"passes\" to run the two passes")
        launchers["onepass"][2](config)
    return _racing(PASSES_RACE, {"two": lambda _: _two_passes(launchers, configs),
                                 "onepass": one_pass})


def tune_attention_backward(problem, launchers, level: int = 1) -> dict[str, TuneResult]:
    """The tuner's result for dk/dv and dq (tune_backward's) and, where launchers has the one
    pass and ``level`` is above 0, for "passes": passes_race with the configurations the two
    passes were tuned to (which its problem names, so that a new pick for either races
    again)."""
    results = tune_backward(problem, {n: launchers[n] for n in ("dkdv", "dq")}, level)
    if "onepass" in launchers and level > 0:
        chosen = {name: result.config for name, result in results.items()}
        kernels, space, launch = passes_race(launchers, chosen)
        two = "; ".join(f"{name} {dict(config)}" for name, config in chosen.items())
        results["passes"] = autotune(kernels, {**problem, "two passes": two}, space, launch,
                                     level=level)
    return results


@forbidden_in_graded_calls
def attention_backward(q, k, v, o, lse, do, causal: bool = False, configs=None,
                       level: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The course's fastest backward: flash_backward's (dq, dk, dv), where the Gluon kernels
    take the inputs each kernel raced against them and the two passes against the one pass
    (fastest_launchers, passes_race). ``configs`` {"dkdv": ..., "dq": ...} as
    fastest_launchers' spaces take them (a Triton configuration without PATH runs the Triton
    kernel) runs the two passes; a "passes" entry as PASSES_RACE's space takes it ({"PATH":
    "onepass", "BLOCK_M": ..., "STAGES": ...}, or {"PATH": "two"}: the two passes) picks
    between them. Without ``configs``, everything tuned at ``level``."""
    grads, launchers = fastest_launchers(q, k, v, o, lse, do, causal)
    if configs is None:
        configs = {name: result.config for name, result in tune_attention_backward(
            backward_problem(q, k, causal), launchers, level).items()}
    passes_race(launchers, configs)[2](configs.get("passes", {}))
    return grads


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
    given (``backward_configs`` as `attention_backward` takes them: on Hopper the Gluon
    backward races the Triton kernels, as flash_hopper's forward does). Inputs are checked by
    flash_forward, with the same errors."""
    return FlashAttention.apply(q, k, v, causal, forward_config, backward_configs)


forbidden_in_graded_calls(flash_delta_kernel)
forbidden_in_graded_calls(flash_dkdv_kernel)
forbidden_in_graded_calls(flash_dq_kernel)
