"""What the FlashAttention backward's ideas cost or gain on a GPU, one at a time (issue 18's
backward at 0.9x cuDNN). Two experimental kernels, ``ideas_dkdv_kernel`` and
``ideas_dq_kernel``, switch the ideas on with constexprs; each variant runs on a few
configurations, and its best is timed interleaved with the course's backward
(reference/flash_backward.py's two kernels, tuned at level 1) and cuDNN's SDPA backward.

* ``two kernels, pointers``: the reference's scheme (a dk/dv kernel streaming the query blocks
  past a key block, a dq kernel streaming the key blocks past a query block: seven matmuls a
  pair of blocks), without its masks at the sequence's end and its grouped heads;
* ``two kernels, TMA streams``: the same, the streamed tiles (q and dO; k and v) read through
  tensor descriptors made on the host (TMA copies), as the forward's k and v gained 9-12% at
  head size 128;
* ``two kernels, TMA streams, dq longest first``: the same, the dq kernel taking each head's
  query blocks last to first, so that under the causal mask its programs with the most key
  blocks start first and the last wave holds short ones (the dk/dv kernel's causal order is
  longest first already). On the H200 (2026-12-04, run d) it gained nothing: 3.625 against
  3.636 ms at B4 H32 S4096 D128 causal, 0.5848 against 0.5849 at B8 H16 S2048 D64 causal;
* ``dk/dv alone``: the dk/dv kernel on one pass's tiles, without dq: what the four matmuls
  of one pass cost before dq is added;
* ``one pass, dq in registers``: a diagnostic, **its dq wrong**: the fifth matmul (dS k) is
  computed for every pair of blocks and summed in registers, stored once: one pass's cost
  without the atomics;
* ``one pass, atomics``: FlashAttention-2's one pass, each pair's share of dq added to a
  float32 dq by relaxed atomics.

The difference of the last three says what the fifth matmul and the atomics cost. On the H200
(2026-12-04, docs/results/h200.md) the TMA streams took 1-11% off each kernel and went into the
reference (6-9% off its backward); one pass lost to the two kernels on every shape, so the
reference has none. The
experimental kernels take what the measured shapes need only: q, k, v, dO contiguous (batch,
heads, seq, head_dim) of one shape, head_dim a power of two, seq a multiple of 128. A variant
that does not compile, or is wrong against the reference's gradients, is recorded so. The
variants take delta (rowsum(dO o)) computed beforehand; the reference's time includes its delta
kernel. ``--variants`` runs some of them only (the reference and cuDNN always run),
``--causal-only`` the causal shapes only. Prints tables; writes JSON with --out.

    python benchmarks/attention_backward_ideas.py --out attention-backward-ideas.json
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import math

import torch
import triton
import triton.language as tl
from torch.nn.attention import SDPBackend
from triton.tools.tensor_descriptor import TensorDescriptor

from attention_forward_ideas import fastest, ideas_main
from attention_shapes import relative, score_pairs, sdpa
from record import header
from tilegym_edu import bench, device
from tilegym_edu.reference import flash, flash_backward
from tilegym_edu.reference.attention import LOG2E

#: (batch, heads, seq, head_dim, causal): issue 18's backward rows the kernels take
SHAPES = [(4, 32, 4096, 128, False), (4, 32, 4096, 128, True), (8, 16, 2048, 64, True)]
#: (BLOCK_M, BLOCK_N, num_warps, num_stages): the first of each is what the tuner picked for
#: the reference on the H200 (2026-12-04), the one-pass rows the race's fastest
DKDV_CONFIGS = [(64, 64, 4, 2), (32, 128, 8, 3), (64, 128, 8, 2)]
DQ_CONFIGS = [(128, 64, 8, 3), (128, 32, 4, 3), (64, 64, 4, 2)]
ONE_PASS_CONFIGS = [(32, 128, 8, 3), (64, 128, 8, 2)]
#: the largest relative error of a variant's gradients against the reference's (fp16 sums in
#: another order)
TOLERANCE = 1e-2
#: dq: 0 not computed, 1 added by atomics, 2 summed in registers (a diagnostic: wrong)
NO_DQ, DQ_ATOMICS, DQ_IN_REGISTERS = 0, 1, 2


@triton.jit
def ideas_dkdv_kernel(q_src, k_ptr, v_ptr, do_src, lse_ptr, delta_ptr, dq_ptr, dk_ptr, dv_ptr,
                      seq, qk_scale, sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, TMA: tl.constexpr,
                      DQ: tl.constexpr):
    """dk and dv of one key block of one (batch, head), program (j, b * heads + h), the query
    blocks streaming past; q_src and do_src are pointers or (TMA) descriptors over the
    (batch * heads * seq, HEAD_DIM) rows. DQ as the module's constants say; dq_ptr is float32."""
    start_n = tl.program_id(0)
    bh = tl.program_id(1)
    base = bh * seq * HEAD_DIM
    cols = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    k = tl.load(k_ptr + base + cols[:, None] * HEAD_DIM + offs_d[None, :])
    v = tl.load(v_ptr + base + cols[:, None] * HEAD_DIM + offs_d[None, :])
    dk = tl.zeros((BLOCK_N, HEAD_DIM), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, HEAD_DIM), dtype=tl.float32)
    dq_sum = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    lo = 0
    if CAUSAL:
        lo = start_n * BLOCK_N // BLOCK_M * BLOCK_M
    for start_m in tl.range(lo, seq, BLOCK_M):
        rows = start_m + offs_m
        if TMA:
            q = q_src.load([bh * seq + start_m, 0])
            do = do_src.load([bh * seq + start_m, 0])
        else:
            q = tl.load(q_src + base + rows[:, None] * HEAD_DIM + offs_d[None, :])
            do = tl.load(do_src + base + rows[:, None] * HEAD_DIM + offs_d[None, :])
        lse = tl.load(lse_ptr + bh * seq + rows)
        delta = tl.load(delta_ptr + bh * seq + rows)
        p_t = tl.math.exp2(tl.dot(k, tl.trans(q)) * qk_scale - lse[None, :])
        if CAUSAL:
            p_t = tl.where(rows[None, :] >= cols[:, None], p_t, 0.0)
        dv = tl.dot(p_t.to(do.dtype), do, dv)
        ds_t = (p_t * (tl.dot(v, tl.trans(do)) - delta[None, :])).to(q.dtype)
        dk = tl.dot(ds_t, q, dk)
        if DQ == 1:
            dq = tl.dot(tl.trans(ds_t), k) * sm_scale
            tl.atomic_add(dq_ptr + base + rows[:, None] * HEAD_DIM + offs_d[None, :], dq,
                          sem="relaxed")
        elif DQ == 2:
            dq_sum = tl.dot(tl.trans(ds_t), k, dq_sum)
    if DQ == 2:
        rows = lo + offs_m
        tl.store(dq_ptr + base + rows[:, None] * HEAD_DIM + offs_d[None, :], dq_sum)
    out = base + cols[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(dk_ptr + out, (dk * sm_scale).to(dk_ptr.dtype.element_ty))
    tl.store(dv_ptr + out, dv.to(dv_ptr.dtype.element_ty))


@triton.jit
def ideas_dq_kernel(q_ptr, k_src, v_src, do_ptr, lse_ptr, delta_ptr, dq_ptr, seq, qk_scale,
                    sm_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, TMA: tl.constexpr,
                    LONGEST_FIRST: tl.constexpr):
    """dq of one query block of one (batch, head), program (i, b * heads + h): query block i,
    or with LONGEST_FIRST the i-th from the end; the key blocks stream past. k_src and v_src
    are pointers or (TMA) descriptors over the (batch * heads * seq, HEAD_DIM) rows."""
    start_m = tl.program_id(0)
    if LONGEST_FIRST:
        start_m = tl.num_programs(0) - 1 - start_m
    bh = tl.program_id(1)
    base = bh * seq * HEAD_DIM
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + base + rows[:, None] * HEAD_DIM + offs_d[None, :])
    do = tl.load(do_ptr + base + rows[:, None] * HEAD_DIM + offs_d[None, :])
    lse = tl.load(lse_ptr + bh * seq + rows)
    delta = tl.load(delta_ptr + bh * seq + rows)
    dq = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    hi = seq
    if CAUSAL:
        hi = (start_m + 1) * BLOCK_M
    for start_n in tl.range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        if TMA:
            k = k_src.load([bh * seq + start_n, 0])
            v = v_src.load([bh * seq + start_n, 0])
        else:
            k = tl.load(k_src + base + cols[:, None] * HEAD_DIM + offs_d[None, :])
            v = tl.load(v_src + base + cols[:, None] * HEAD_DIM + offs_d[None, :])
        p = tl.math.exp2(tl.dot(q, tl.trans(k)) * qk_scale - lse[:, None])
        if CAUSAL:
            p = tl.where(rows[:, None] >= cols[None, :], p, 0.0)
        ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq)
    tl.store(dq_ptr + base + rows[:, None] * HEAD_DIM + offs_d[None, :],
             (dq * sm_scale).to(dq_ptr.dtype.element_ty))


class Problem:
    """One shape's inputs, the forward's o and lse, delta, and the reference's gradients."""

    def __init__(self, batch, heads, seq, d, causal):
        self.q, self.k, self.v, self.do = (
            torch.randn(batch, heads, seq, d, device=device.DEVICE, dtype=torch.float16)
            for _ in range(4))
        self.causal, self.seq, self.d = causal, seq, d
        self.o, self.lse = flash.flash_forward(self.q, self.k, self.v, causal)
        _, launchers = flash_backward.backward_launchers(self.q, self.k, self.v, self.o,
                                                         self.lse, self.do, causal)
        self.tuned = {name: result.config for name, result in flash_backward.tune_backward(
            flash_backward.backward_problem(self.q, self.k, causal), launchers).items()}
        self.grads = flash_backward.flash_backward(self.q, self.k, self.v, self.o, self.lse,
                                                   self.do, causal, self.tuned)
        self.delta = (self.o.float() * self.do.float()).sum(-1)
        self.scales = (LOG2E / math.sqrt(d), 1 / math.sqrt(d))

    def rows(self, t: torch.Tensor, block: int, tma: bool):
        """t as its (batch * heads * seq, d) rows: a descriptor in blocks of ``block`` rows,
        or the tensor for pointer loads."""
        return TensorDescriptor.from_tensor(t.view(-1, self.d), [block, self.d]) if tma else t

    def dkdv(self, config, tma: bool, dq_mode: int):
        """A function of no arguments running ideas_dkdv_kernel once; it returns (dq, dk, dv),
        dq None without dq_mode (and wrong with DQ_IN_REGISTERS)."""
        bm, bn, warps, stages = config
        q_src, do_src = (self.rows(t, bm, tma) for t in (self.q, self.do))
        dk, dv = torch.empty_like(self.k), torch.empty_like(self.v)
        dq = torch.zeros(self.q.shape, device=device.DEVICE, dtype=torch.float32)
        grid = (self.seq // bn, self.q.shape[0] * self.q.shape[1])

        def run():
            if dq_mode == DQ_ATOMICS:
                dq.zero_()
            ideas_dkdv_kernel[grid](q_src, self.k, self.v, do_src, self.lse, self.delta, dq,
                                    dk, dv, self.seq, *self.scales, HEAD_DIM=self.d,
                                    BLOCK_M=bm, BLOCK_N=bn, CAUSAL=self.causal, TMA=tma,
                                    DQ=dq_mode, num_warps=warps, num_stages=stages)
            return (dq if dq_mode else None), dk, dv
        return run

    def dq(self, config, tma: bool, longest_first: bool = False):
        """A function of no arguments running ideas_dq_kernel once; it returns dq."""
        bm, bn, warps, stages = config
        k_src, v_src = (self.rows(t, bn, tma) for t in (self.k, self.v))
        dq = torch.empty_like(self.q)
        grid = (self.seq // bm, self.q.shape[0] * self.q.shape[1])

        def run():
            ideas_dq_kernel[grid](self.q, k_src, v_src, self.do, self.lse, self.delta, dq,
                                  self.seq, *self.scales, HEAD_DIM=self.d, BLOCK_M=bm,
                                  BLOCK_N=bn, CAUSAL=self.causal, TMA=tma,
                                  LONGEST_FIRST=longest_first, num_warps=warps,
                                  num_stages=stages)
            return dq
        return run

    def error(self, grads) -> float:
        """The largest relative error of the gradients given (None: not computed)."""
        return max(relative(g, r.float()) for g, r in zip(grads, self.grads) if g is not None)


def two_kernels(p: Problem, tma: bool, longest_first: bool = False) -> tuple[dict, object]:
    """(each kernel's fastest configuration, a function running both, or None if either had
    none that ran right)."""
    dkdv = fastest(lambda c: p.dkdv(c, tma, NO_DQ), DKDV_CONFIGS, p.error, TOLERANCE)
    dq = fastest(lambda c: p.dq(c, tma, longest_first), DQ_CONFIGS,
                 lambda g: p.error((g, None, None)), TOLERANCE)
    runs = [found["run"] for found in (dkdv, dq) if "run" in found]
    return {"dkdv": dkdv, "dq": dq}, ((lambda: [run() for run in runs])
                                      if len(runs) == 2 else None)


def variant_runs(p: Problem) -> dict:
    """{variant name: a function of no arguments returning (found, its run or None)} for every
    idea, in the module's order."""
    out = {}
    for tma in (False, True):
        way = "TMA streams" if tma else "pointers"
        out[f"two kernels, {way}"] = lambda tma=tma: two_kernels(p, tma)
        for name, mode, check in (
                ("dk/dv alone", NO_DQ, lambda g: p.error(g)),
                ("one pass, dq in registers (dq wrong)", DQ_IN_REGISTERS,
                 lambda g: p.error((None, *g[1:]))),
                ("one pass, atomics", DQ_ATOMICS, lambda g: p.error(g))):
            def one_pass(mode=mode, check=check, tma=tma):
                found = fastest(lambda c: p.dkdv(c, tma, mode), ONE_PASS_CONFIGS, check,
                                TOLERANCE)
                return found, found.get("run")
            out[f"{name}, {way}"] = one_pass
    out["two kernels, TMA streams, dq longest first"] = lambda: two_kernels(p, True,
                                                                            longest_first=True)
    return out


#: every variant's name, for --variants
VARIANTS = list(variant_runs(None))


def compare_shape(shape, variants=tuple(VARIANTS)) -> tuple[str, dict]:
    batch, heads, seq, d, causal = shape
    name = f"B{batch} H{heads} S{seq} D{d}{' causal' if causal else ''} float16"
    print("==", name)
    p = Problem(batch, heads, seq, d, causal)
    row: dict = {"reference_configs": {k: dict(c) for k, c in p.tuned.items()}, "variants": {}}
    fns = {"reference (two kernels)": lambda: flash_backward.flash_backward(
        p.q, p.k, p.v, p.o, p.lse, p.do, causal, p.tuned)}
    runs = variant_runs(p)
    for variant in variants:
        found, run = runs[variant]()
        found.pop("run", None)
        for part in ("dkdv", "dq"):
            if part in found:
                found[part].pop("run", None)
        row["variants"][variant] = found
        if run is not None:
            fns[variant] = run
    q, k, v = (t.detach().requires_grad_() for t in (p.q, p.k, p.v))
    out = sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v, causal)()
    fns["cuDNN SDPA"] = lambda: torch.autograd.grad(out, (q, k, v), p.do, retain_graph=True)
    results = bench.compare(fns, flops=10 * d * score_pairs(batch, heads, seq, seq, causal),
                            rep_ms=400)
    bench.print_table(results, baseline="cuDNN SDPA")
    row["results"] = {m.name: {"median_ms": m.median_ms, "tflops": m.tflops, "runs": m.runs,
                               "sm_clock_mhz": m.sm_clock_mhz} for m in results}
    return name, row


def main() -> None:
    ideas_main(__doc__, SHAPES, VARIANTS, compare_shape,
               lambda: {**header(), "cudnn": torch.backends.cudnn.version(),
                        "configs": {"dkdv": DKDV_CONFIGS, "dq": DQ_CONFIGS,
                                    "one_pass": ONE_PASS_CONFIGS}},
               "only the causal shapes (where the order of query blocks matters)")


if __name__ == "__main__":
    main()
