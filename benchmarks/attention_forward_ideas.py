"""What each Hopper idea gains the FlashAttention forward, measured one at a time on a GPU
(issue 18: "record what each idea gained"). One experimental kernel, ``ideas_forward_kernel``,
turns the ideas on with constexpr switches; each variant runs on the same few configurations,
its best is timed interleaved with the course's reference forward (reference/flash.py, tuned at
level 1) and cuDNN's SDPA. Variants, each adding to the one before:

* ``pointers``: the reference's loop (pointer loads, scores scaled, then the row maximum
  subtracted), without its group packing and masks at the sequence's end;
* ``fma``: the scale folded into the exponent, ``exp2(s * scale - m)`` (one FMA an element,
  the row maximum taken on the unscaled scores), as Triton's tutorial 06 does;
* ``tma host``: k and v blocks through tensor descriptors made on the host (TMA copies);
* ``tma device``: the same descriptors made in the kernel (``tl.make_tensor_descriptor``);
* ``ws``: the key loop warp-specialised (``tl.range(..., warp_specialize=True)``: producer
  warps issue the copies, consumer warps compute), on the device descriptors;
* ``fma, longest first`` and ``tma host, longest first``: ``fma`` and ``tma host`` with the
  query blocks of each head taken last to first, so that under the causal mask the programs
  with the most key blocks start first and the last wave holds the short ones (nothing changes
  without the mask). On the H200 (2026-12-04, run d) neither gained: at B4 H32 S4096 D128
  causal 1.407 against 1.398 ms (fma) and 1.251 against 1.255 (tma host), at B8 H16 S2048
  D64 causal 0.2065 against 0.2067 and 0.2089 against 0.2103, inside the runs' spread.
* ``poly exp2 1/2`` and ``poly exp2 1/4``, and the same on ``tma host``: ``fma`` with half, or
  a quarter, of each score tile's exponentials computed on the FMA units by a polynomial
  (``exp2_poly``, FlashAttention-4's trick) instead of the MUFU's ex2, which at head size 64
  is a co-bottleneck with the tensor cores. The odd columns take the polynomial (for a
  quarter, those of the right half): a thread's own registers in the wgmma accumulator,
  nothing moves between threads. Compiled offline for sm_90a (Triton 3.6, 128x64 tiles, 4
  warps, causal), a key block takes a thread 36 ex2 against ``fma``'s 68, and 504 other
  floating-point instructions (FFMA, FADD, FMNMX, FMUL) against 280; neither spills.
  Not a variant: ``ex2.approx.f16x2`` (two exponentials a PTX instruction, in float16) looked
  like half the MUFU's work, but ptxas for sm_90a turns it into two MUFU.EX2 (offline, Triton
  3.6: 68 a key block as in ``fma``, with more instructions in all).

``--variants`` runs some of them only (the reference and cuDNN always run); ``--shapes`` some
of the shapes, by index into SHAPES (4: B8 H16 S2048 D64 causal).

The experimental kernel takes what the measured shapes need only: q, k, v contiguous (batch,
heads, seq, head_dim) of one shape, head_dim a power of two, seq a multiple of 128, causal or
not. A variant that does not compile, or is wrong against float32 PyTorch, is recorded so.
Prints tables; writes JSON with --out.

    python benchmarks/attention_forward_ideas.py --out attention-ideas.json
    python benchmarks/attention_forward_ideas.py --shapes 4 --variants fma "poly exp2 1/2"
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import math
import time

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.nn.attention import SDPBackend
from triton.tools.tensor_descriptor import TensorDescriptor

from attention_shapes import relative, score_pairs, sdpa, tuned_forward
from record import finish, header, options, write
from tilegym_edu import bench
from tilegym_edu.reference import flash
from tilegym_edu.reference.attention import LOG2E

#: (batch, heads, seq, head_dim, causal): issue 18's rows that the kernel takes
SHAPES = [(4, 32, 4096, 128, False), (4, 32, 4096, 128, True), (4, 32, 4096, 64, False),
          (16, 16, 1024, 128, False), (8, 16, 2048, 64, True)]
#: (BLOCK_M, BLOCK_N, num_warps, num_stages) each variant runs
CONFIGS = [(128, 128, 8, 3), (128, 64, 4, 3), (64, 128, 4, 3), (128, 128, 8, 4), (64, 64, 4, 3)]
#: variant -> (FMA, TMA: 0 pointers, 1 host descriptors, 2 device descriptors, WS,
#: LONGEST_FIRST, POLY: 0 every exponential on the MUFU, 2 half of them by exp2_poly, 4 a
#: quarter)
VARIANTS = {"pointers": (False, 0, False, False, 0), "fma": (True, 0, False, False, 0),
            "tma host": (True, 1, False, False, 0), "tma device": (True, 2, False, False, 0),
            "ws": (True, 2, True, False, 0), "fma, longest first": (True, 0, False, True, 0),
            "tma host, longest first": (True, 1, False, True, 0),
            "poly exp2 1/2": (True, 0, False, False, 2),
            "poly exp2 1/4": (True, 0, False, False, 4),
            "tma host, poly exp2 1/2": (True, 1, False, False, 2),
            "tma host, poly exp2 1/4": (True, 1, False, False, 4)}

#: 2^f for f in [-0.5, 0.5]: p(f) = P0 + P1 f + P2 f^2 + P3 f^3, the minimax polynomial of
#: degree 3 in relative error (Remez exchange in float64), rounded to float32
EXP2_POLY = (0.9999280571937561, 0.6932609677314758, 0.2426111251115799, 0.0551716685295105)
EXP2_P0, EXP2_P1, EXP2_P2, EXP2_P3 = (tl.constexpr(c) for c in EXP2_POLY)


@triton.jit
def exp2_poly(x):
    """2^x for x <= 0 on the FMA units, without the MUFU's ex2 (FlashAttention-4's trick):
    2^x = 2^j · p(f), j = round(x), f = x - j in [-0.5, 0.5], p of EXP2_POLY by Horner (three
    FMAs), j added to p's exponent bits. Rounding without a conversion: t = x + 1.5 · 2^23
    holds j in its low mantissa bits, so t's bits shifted left by 23 are j << 23 (the high bits
    fall off; the shift and add compile to one LEA), and t - 1.5 · 2^23 is j as a float. x is
    clamped to -126 first: p(0) is just under 1 (exponent field 126), and j = -127 would take
    that field below zero, into the sign bit (a NaN). So x below -126, -inf included, gives
    about 1.2e-38 (2^-126), not 0; fp16 P rounds it to 0.
    Relative error against float64 2^x, measured on the CPU: p alone (float32 coefficients,
    float64 arithmetic) 7.48e-5 at most on 2,000,001 points of [-0.5, 0.5]; this function
    (float32, Triton's interpreter) 7.48e-5 at most on 2^20 points of [-125.5, 0], and 1.44e-4
    at x = -126, whose result is a subnormal pattern 1.7e-42 off. fp16's own rounding of P is
    up to 4.9e-4."""
    x = tl.maximum(x, -126.0)
    t = x + 12582912.0
    f = x - (t - 12582912.0)
    p = tl.fma(tl.fma(tl.fma(f, EXP2_P3, EXP2_P2), f, EXP2_P1), f, EXP2_P0)
    bits = p.to(tl.int32, bitcast=True) + (t.to(tl.int32, bitcast=True) << 23)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def exp2_columns(x, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, POLY: tl.constexpr):
    """exp2 of a (BLOCK_M, BLOCK_N) score tile, x <= 0: POLY 0 all by the MUFU (tl.math.exp2),
    2 the odd columns by exp2_poly, 4 the odd columns of the right half by exp2_poly.
    Why these columns: in Hopper's wgmma accumulator a thread holds columns 2t and 2t + 1 (t
    its lane within a quad) of every group of 8, the groups in further registers. The split
    into even and odd columns (the last dimension of (BLOCK_M, BLOCK_N // 2, 2)) and into left
    and right halves (the top bit of the group) part a thread's own registers, so tl.split and
    tl.join move nothing between threads; offline, the split variants compile to no more
    shared-memory stores or shuffles than ``fma``. Columns 1 and 3 of each four would part
    threads instead. Odd columns rather than halves for POLY 2: one reshape and split, no
    permute, and each thread's ex2 and polynomials interleave in every group of 8."""
    if POLY == 0:
        p = tl.math.exp2(x)
    else:
        even, odd = tl.split(tl.reshape(x, (BLOCK_M, BLOCK_N // 2, 2)))
        if POLY == 2:
            odd = exp2_poly(odd)
        else:
            left, right = tl.split(tl.permute(tl.reshape(odd, (BLOCK_M, 2, BLOCK_N // 4)),
                                              (0, 2, 1)))
            odd = tl.reshape(tl.permute(tl.join(tl.math.exp2(left), exp2_poly(right)),
                                        (0, 2, 1)), (BLOCK_M, BLOCK_N // 2))
        p = tl.reshape(tl.join(tl.math.exp2(even), odd), (BLOCK_M, BLOCK_N))
    return p


@triton.jit
def ideas_blocks(acc, l_i, m_i, q, k_src, v_src, kv_row, stride_n, offs_n, offs_d, q_pos, lo,
                 hi, qk_scale, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, FMA: tl.constexpr,
                 TMA: tl.constexpr, WS: tl.constexpr, POLY: tl.constexpr):
    """Fold key blocks lo, lo + BLOCK_N, ... < hi into the running state (acc unnormalised
    output, l_i row sums, m_i row maxima in log2 units); MASKED blocks mask keys after the
    query. k_src/v_src are pointers (TMA == 0) or descriptors over (batch·heads·seq, head_dim),
    whose rows kv_row + j are this head's keys. POLY: exp2_columns's."""
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WS):
        if TMA == 0:
            rows = (kv_row + start_n + offs_n)[:, None] * stride_n + offs_d[None, :]
            k = tl.load(k_src + rows)
        else:
            k = k_src.load([kv_row + start_n, 0])
        qk = tl.dot(q, tl.trans(k))
        if MASKED:
            qk = tl.where(q_pos[:, None] >= (start_n + offs_n)[None, :], qk, -float("inf"))
        if FMA:
            m_new = tl.maximum(m_i, tl.max(qk, axis=1) * qk_scale)
            x = qk * qk_scale - m_new[:, None]
        else:
            qk = qk * qk_scale
            m_new = tl.maximum(m_i, tl.max(qk, axis=1))
            x = qk - m_new[:, None]
        p = exp2_columns(x, q.shape[0], BLOCK_N, POLY)
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if TMA == 0:
            v = tl.load(v_src + rows)
        else:
            v = v_src.load([kv_row + start_n, 0])
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def ideas_forward_kernel(q_ptr, k_src, v_src, o_ptr, seq, qk_scale, total_rows,
                         HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         CAUSAL: tl.constexpr, FMA: tl.constexpr, TMA: tl.constexpr,
                         WS: tl.constexpr, LONGEST_FIRST: tl.constexpr, POLY: tl.constexpr):
    """o for BLOCK_M queries of one (batch, head): program (i, batch·heads + head), query
    block i, or with LONGEST_FIRST the i-th from the end."""
    start_m = tl.program_id(0)
    if LONGEST_FIRST:
        start_m = tl.num_programs(0) - 1 - start_m
    bh = tl.program_id(1)
    kv_row = bh * seq
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    if TMA == 2:
        k_src = tl.make_tensor_descriptor(k_src, shape=[total_rows, HEAD_DIM],
                                          strides=[HEAD_DIM, 1], block_shape=[BLOCK_N, HEAD_DIM])
        v_src = tl.make_tensor_descriptor(v_src, shape=[total_rows, HEAD_DIM],
                                          strides=[HEAD_DIM, 1], block_shape=[BLOCK_N, HEAD_DIM])
    q_rows = (kv_row + offs_m)[:, None] * HEAD_DIM + offs_d[None, :]
    q = tl.load(q_ptr + q_rows)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    m_i = tl.full((BLOCK_M,), -float("inf"), dtype=tl.float32)
    if CAUSAL:
        unmasked_end = start_m * BLOCK_M // BLOCK_N * BLOCK_N
        end = (start_m + 1) * BLOCK_M
    else:
        unmasked_end = seq
        end = seq
    acc, l_i, m_i = ideas_blocks(acc, l_i, m_i, q, k_src, v_src, kv_row, HEAD_DIM, offs_n,
                                 offs_d, offs_m, 0, unmasked_end, qk_scale, BLOCK_N, False, FMA,
                                 TMA, WS, POLY)
    if CAUSAL:
        acc, l_i, m_i = ideas_blocks(acc, l_i, m_i, q, k_src, v_src, kv_row, HEAD_DIM, offs_n,
                                     offs_d, offs_m, unmasked_end, end, qk_scale, BLOCK_N, True,
                                     FMA, TMA, WS, POLY)
    tl.store(o_ptr + q_rows, (acc / l_i[:, None]).to(o_ptr.dtype.element_ty))


def allocate_descriptor_memory(size: int, alignment: int, stream) -> torch.Tensor:
    """Global scratch for descriptors made in a kernel (triton.set_allocator)."""
    return torch.empty(size, device="cuda", dtype=torch.int8)


def launcher(q, k, v, causal: bool, variant: str, config):
    """A function of no arguments running the variant once with ``config``, and its output."""
    fma, tma, ws, longest_first, poly = VARIANTS[variant]
    bm, bn, warps, stages = config
    batch, heads, seq, d = q.shape
    o = torch.empty_like(q)
    k2, v2 = k.view(-1, d), v.view(-1, d)
    if tma == 1:
        k_src, v_src = (TensorDescriptor.from_tensor(t, [bn, d]) for t in (k2, v2))
    else:
        k_src, v_src = k2, v2
    grid = (seq // bm, batch * heads)

    def run():
        ideas_forward_kernel[grid](q, k_src, v_src, o, seq, LOG2E / math.sqrt(d),
                                   batch * heads * seq, HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn,
                                   CAUSAL=causal, FMA=fma, TMA=tma, WS=ws,
                                   LONGEST_FIRST=longest_first, POLY=poly, num_warps=warps,
                                   num_stages=stages)
        return o
    return run


def label(config) -> str:
    """A configuration (BLOCK_M, BLOCK_N, num_warps, num_stages) as "128x64/4w/3s"."""
    return "x".join(map(str, config[:2])) + f"/{config[2]}w/{config[3]}s"


def fastest(make, configs, check, tolerance: float) -> dict:
    """Each config's run (``make(config)``: a function of no arguments) compiled, checked
    (``check(its output)``: the relative error, right under ``tolerance``) and timed briefly:
    {"configs": what each did, "best": the fastest right one's label, "run": its function};
    without "best" and "run" if none ran right. Shared by attention_backward_ideas.py."""
    fns, tried = {}, {}
    for config in configs:
        name = label(config)
        start = time.perf_counter()
        try:
            run = make(config)
            error = check(run())
        except Exception as e:  # noqa: BLE001  (a variant the compiler refuses: recorded)
            tried[name] = {"failed": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
            print(f"  {name}: {tried[name]['failed']}")
            continue
        tried[name] = {"rel_error": error, "compile_s": time.perf_counter() - start}
        if error < tolerance:
            fns[name] = run
        else:
            print(f"  {name}: wrong, relative error {error:.2e}")
    if not fns:
        return {"configs": tried}
    for m in bench.compare(fns, rep_ms=60, max_runs=40):
        tried[m.name]["median_ms"] = m.median_ms
    best = min((c for c in tried if "median_ms" in tried[c]), key=lambda c: tried[c]["median_ms"])
    return {"configs": tried, "best": best, "run": fns[best]}


def best_config(q, k, v, causal, variant, ref) -> dict:
    """The variant's fastest configuration of CONFIGS that is right against ``ref``."""
    print(f"  {variant}:")
    return fastest(lambda config: launcher(q, k, v, causal, variant, config), CONFIGS,
                   lambda out: relative(out, ref), 2e-3)


def compare_shape(shape, variants=tuple(VARIANTS)) -> tuple[str, dict]:
    batch, heads, seq, d, causal = shape
    q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.float16)
               for _ in range(3))
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    name = f"B{batch} H{heads} S{seq} D{d}{' causal' if causal else ''} float16"
    print("==", name)
    row: dict = {"variants": {}}
    fns = {}
    tuned = tuned_forward(q, k, v, causal)
    row["reference_config"] = dict(tuned.config)
    fns["reference (flash.py)"] = lambda: flash.flash_forward(q, k, v, causal,
                                                              config=tuned.config)[0]
    for variant in variants:
        found = best_config(q, k, v, causal, variant, ref)
        run = found.pop("run", None)
        row["variants"][variant] = found
        if run is not None:
            fns[f"{variant} {found['best']}"] = run
    fns["cuDNN SDPA"] = sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v, causal)
    pairs = score_pairs(batch, heads, seq, seq, causal)
    results = bench.compare(fns, flops=4 * d * pairs, rep_ms=400)
    bench.print_table(results, baseline="cuDNN SDPA")
    row["results"] = {m.name: {"median_ms": m.median_ms, "tflops": m.tflops, "runs": m.runs,
                               "sm_clock_mhz": m.sm_clock_mhz} for m in results}
    return name, row


def ideas_main(doc: str, shapes, variants, compare_shape, new_record, causal_help: str
               ) -> None:
    """The command line of an ideas benchmark: ``--variants`` (some of ``variants``),
    ``--shapes`` (some of ``shapes``, by index), ``--causal-only`` (the causal ``shapes`` only)
    and --out; ``new_record()`` (the script's record.header() and what it adds) gets each
    shape's row from ``compare_shape(shape, variants)`` under "shapes", written as it comes,
    so a run cut short keeps its rows."""
    parser = options(doc)
    parser.add_argument("--variants", nargs="+", choices=list(variants), default=list(variants),
                        metavar="VARIANT", help="the variants to run (default: all)")
    parser.add_argument("--shapes", nargs="+", type=int, choices=range(len(shapes)),
                        metavar="INDEX", help="the shapes to run, by index (default: all): " +
                        "; ".join(f"{i} {shape}" for i, shape in enumerate(shapes)))
    parser.add_argument("--causal-only", action="store_true", help=causal_help)
    args = parser.parse_args()
    record = {**new_record(), "shapes": {}}
    for index, shape in enumerate(shapes):
        if (args.causal_only and not shape[-1]) or (args.shapes and index not in args.shapes):
            continue
        name, row = compare_shape(shape, args.variants)
        record["shapes"][name] = row
        write(record, args.out)
    finish(record, args.out)


def main() -> None:
    triton.set_allocator(allocate_descriptor_memory)
    ideas_main(__doc__, SHAPES, VARIANTS, compare_shape,
               lambda: {**header(), "cudnn": torch.backends.cudnn.version(), "configs": CONFIGS},
               "only the causal shapes (where longest first can matter)")


if __name__ == "__main__":
    main()
