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

``--variants`` runs some of them only (the reference and cuDNN always run).

The experimental kernel takes what the measured shapes need only: q, k, v contiguous (batch,
heads, seq, head_dim) of one shape, head_dim a power of two, seq a multiple of 128, causal or
not. A variant that does not compile, or is wrong against float32 PyTorch, is recorded so.
Prints tables; writes JSON with --out.

    python benchmarks/attention_forward_ideas.py --out attention-ideas.json
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
#: LONGEST_FIRST)
VARIANTS = {"pointers": (False, 0, False, False), "fma": (True, 0, False, False),
            "tma host": (True, 1, False, False), "tma device": (True, 2, False, False),
            "ws": (True, 2, True, False), "fma, longest first": (True, 0, False, True),
            "tma host, longest first": (True, 1, False, True)}


@triton.jit
def ideas_blocks(acc, l_i, m_i, q, k_src, v_src, kv_row, stride_n, offs_n, offs_d, q_pos, lo,
                 hi, qk_scale, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, FMA: tl.constexpr,
                 TMA: tl.constexpr, WS: tl.constexpr):
    """Fold key blocks lo, lo + BLOCK_N, ... < hi into the running state (acc unnormalised
    output, l_i row sums, m_i row maxima in log2 units); MASKED blocks mask keys after the
    query. k_src/v_src are pointers (TMA == 0) or descriptors over (batch·heads·seq, head_dim),
    whose rows kv_row + j are this head's keys."""
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
            p = tl.math.exp2(qk * qk_scale - m_new[:, None])
        else:
            qk = qk * qk_scale
            m_new = tl.maximum(m_i, tl.max(qk, axis=1))
            p = tl.math.exp2(qk - m_new[:, None])
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
                         WS: tl.constexpr, LONGEST_FIRST: tl.constexpr):
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
                                 TMA, WS)
    if CAUSAL:
        acc, l_i, m_i = ideas_blocks(acc, l_i, m_i, q, k_src, v_src, kv_row, HEAD_DIM, offs_n,
                                     offs_d, offs_m, unmasked_end, end, qk_scale, BLOCK_N, True,
                                     FMA, TMA, WS)
    tl.store(o_ptr + q_rows, (acc / l_i[:, None]).to(o_ptr.dtype.element_ty))


def allocate_descriptor_memory(size: int, alignment: int, stream) -> torch.Tensor:
    """Global scratch for descriptors made in a kernel (triton.set_allocator)."""
    return torch.empty(size, device="cuda", dtype=torch.int8)


def launcher(q, k, v, causal: bool, variant: str, config):
    """A function of no arguments running the variant once with ``config``, and its output."""
    fma, tma, ws, longest_first = VARIANTS[variant]
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
                                   LONGEST_FIRST=longest_first, num_warps=warps,
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
    ``--causal-only`` (the causal ``shapes`` only) and --out; ``new_record()`` (the script's
    record.header() and what it adds) gets each shape's row from ``compare_shape(shape,
    variants)`` under "shapes", written as it comes, so a run cut short keeps its rows."""
    parser = options(doc)
    parser.add_argument("--variants", nargs="+", choices=list(variants), default=list(variants),
                        metavar="VARIANT", help="the variants to run (default: all)")
    parser.add_argument("--causal-only", action="store_true", help=causal_help)
    args = parser.parse_args()
    record = {**new_record(), "shapes": {}}
    for shape in shapes:
        if args.causal_only and not shape[-1]:
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
