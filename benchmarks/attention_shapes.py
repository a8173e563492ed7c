"""The general FlashAttention (reference/flash.py, flash_backward.py, and on Hopper the Gluon
forward of flash_hopper.py and backward of flash_backward_hopper.py, which
flash_backward.attention_backward races against the Triton kernels) on the shapes models bring,
against every SDPA backend, on a GPU:
the forward ("reference": flash_hopper.attention_forward, the Gluon kernels where they take the
inputs, else flash.py; "flash.py": the Triton forward alone) on issue 18's rows (head sizes 64
and 128, causal and not, 1k to 16k tokens), bfloat16, head sizes 96 and 256, grouped-query
attention, a decode step over a KV cache and a chunk of prefill at the end of one; the backward
alone and forward + backward on the training shapes. TFLOP/s count the score pairs each query
sees (the causal mask aligned to the end), 4·d FLOPs a pair forward and 10·d backward (five
matmuls against two). Each side's configuration is tuned at level 1 first, as the lessons do;
each side's time is its best median of three interleaved runs (bench.compare_best), L2 flushed.
Prints tables; writes JSON with --out.

    python benchmarks/attention_shapes.py --out attention-shapes.json
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

from tilegym_edu import bench, device, tune
from tilegym_edu.reference import flash, flash_backward, flash_hopper

from record import finish, header, options, write

BACKENDS = {"SDPA flash": SDPBackend.FLASH_ATTENTION, "SDPA cuDNN": SDPBackend.CUDNN_ATTENTION,
            "SDPA efficient": SDPBackend.EFFICIENT_ATTENTION, "SDPA math": SDPBackend.MATH}

#: (batch, heads, kv_heads, seq_q, seq_k, head_dim, causal, dtype)
FORWARD = [(4, 32, 32, 4096, 4096, 128, False, "float16"),
           (4, 32, 32, 4096, 4096, 128, True, "float16"),
           (4, 32, 32, 4096, 4096, 64, False, "float16"),
           (1, 16, 16, 16384, 16384, 128, True, "float16"),
           (16, 16, 16, 1024, 1024, 128, False, "float16"),
           (8, 16, 16, 2048, 2048, 64, True, "float16"),
           (4, 32, 32, 4096, 4096, 128, True, "bfloat16"),
           (4, 32, 32, 4096, 4096, 96, True, "float16"),
           (4, 16, 16, 4096, 4096, 256, True, "float16"),
           (4, 32, 8, 4096, 4096, 128, True, "float16"),    # grouped-query
           (32, 32, 8, 1, 4096, 128, True, "float16"),      # one decode step
           (4, 32, 8, 512, 4096, 128, True, "float16")]     # a chunk of prefill
BACKWARD = [(4, 32, 32, 4096, 4096, 128, False, "float16"),
            (4, 32, 32, 4096, 4096, 128, True, "float16"),
            (8, 16, 16, 2048, 2048, 64, True, "float16"),
            (4, 32, 8, 4096, 4096, 128, True, "float16"),
            (4, 32, 32, 4096, 4096, 128, True, "bfloat16")]


def title(row) -> str:
    b, h, hkv, sq, sk, d, causal, dtype = row
    heads = f"H{h}" if h == hkv else f"H{h}/KV{hkv}"
    seq = f"S{sq}" if sq == sk else f"Q{sq} K{sk}"
    return f"B{b} {heads} {seq} D{d} {'causal' if causal else 'non-causal'} {dtype}"


def score_pairs(b, h, sq, sk, causal) -> int:
    """(query, key) pairs attention computes: every pair, or with the mask aligned to the end
    query i sees i + sk - sq + 1 keys."""
    if not causal:
        return b * h * sq * sk
    return b * h * (sq * (sk - sq) + sq * (sq + 1) // 2)


def tuned_forward(q, k, v, causal: bool) -> tune.TuneResult:
    """The reference forward's configuration for these inputs, tuned at level 1 as the lessons
    tune it (or found in the tuning cache)."""
    o, lse = torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)
    return tune.autotune(flash.flash_forward_kernel, flash.flash_problem(q, k, causal),
                         flash.FLASH_SPACE,
                         lambda c: flash.launch_flash_forward(q, k, v, o, lse, causal, c))


def inputs(row, grad: bool = False):
    b, h, hkv, sq, sk, d, causal, dtype = row
    dtype = getattr(torch, dtype)
    q = torch.randn(b, h, sq, d, device=device.DEVICE, dtype=dtype, requires_grad=grad)
    k, v = (torch.randn(b, hkv, sk, d, device=device.DEVICE, dtype=dtype, requires_grad=grad)
            for _ in range(2))
    return q, k, v


def sdpa(backend, q, k, v, causal):
    """SDPA with this backend, the causal mask aligned to the end like the reference's."""
    sq, sk = q.shape[2], k.shape[2]
    mask = causal_lower_right(sq, sk) if causal and sq != sk else None
    gqa = q.shape[1] != k.shape[1]

    def run():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                  is_causal=causal and sq == sk and sq > 1,
                                                  enable_gqa=gqa)
    return run


def usable(fns: dict, check) -> tuple[dict, dict, dict]:
    """(the functions that ran, their errors from check(output), why the others did not)."""
    errors, failed = {}, {}
    for name, fn in list(fns.items()):
        try:
            errors[name] = check(fn())
        except RuntimeError as e:  # a backend that does not support this problem
            failed[name] = str(e).splitlines()[0][:200]
            del fns[name]
    return fns, errors, failed


def relative(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref).norm() / ref.norm()).item()


def record_row(record, section, row, results, errors, failed, tuned):
    print("==", section, title(row))
    bench.print_table(results, baseline="reference")
    record.setdefault(section, {})[title(row)] = {
        "tuned_configs": tuned, "failed": failed,
        "results": {m.name: {"median_ms": m.median_ms, "p20_ms": m.p20_ms, "p80_ms": m.p80_ms,
                             "tflops": m.tflops, "rel_error": errors.get(m.name), "runs": m.runs,
                             "sm_clock_mhz": m.sm_clock_mhz} for m in results}}


def compare_forward(row, record):
    b, h, hkv, sq, sk, d, causal, _ = row
    q, k, v = inputs(row)
    result = tuned_forward(q, k, v, causal)
    fns = {"reference": lambda: flash_hopper.attention_forward(q, k, v, causal)[0],
           "flash.py": lambda: flash.flash_forward(q, k, v, causal, config=result.config)[0]}
    fns.update({name: sdpa(backend, q, k, v, causal) for name, backend in BACKENDS.items()})
    # checked against float32 PyTorch where its scores fit in memory (up to 2^32 of them)
    ref = (flash.attention_reference(q.float(), k.float(), v.float(), causal)
           if score_pairs(b, h, sq, sk, False) <= 2**32 else None)
    fns, errors, failed = usable(fns, lambda out: None if ref is None else relative(out, ref))
    ref = None  # free it before timing
    results = bench.compare_best(fns, flops=4 * d * score_pairs(b, h, sq, sk, causal), rep_ms=400)
    tuned = {"flash.py": dict(result.config)}
    if flash_hopper.hopper_fits(q, k, v):  # what attention_forward tuned at its first call
        o, lse = torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)
        tuned["reference (Gluon)"] = dict(flash_hopper.tuned_hopper_config(q, k, v, o, lse, causal))
        tuned["reference path"] = flash_hopper.tuned_forward_launch(q, k, v, o, lse, causal)[0]
    record_row(record, "forward", row, results, errors, failed, tuned)


def compare_backward(row, record):
    b, h, hkv, sq, sk, d, causal, _ = row
    q, k, v = inputs(row, grad=True)
    do = torch.randn_like(q)
    with torch.no_grad():
        o, lse = flash.flash_forward(q, k, v, causal)
    _, launchers = flash_backward.fastest_launchers(q, k, v, o, lse, do, causal)
    tuned = {name: dict(r.config) for name, r in flash_backward.tune_attention_backward(
        flash_backward.backward_problem(q, k, causal), launchers).items()}
    attends = {"reference": lambda: flash_backward.attention(q, k, v, causal)}
    attends.update({name: sdpa(backend, q, k, v, causal) for name, backend in BACKENDS.items()})
    # the reference's gradients, from the first call, are what every other side is checked
    # against (the float32 autograd of the scores does not fit on the GPU at these sizes)
    first = torch.autograd.grad(attends["reference"](), (q, k, v), do)

    def grad_error(out):
        return max(relative(a, r.float()) for a, r in zip(out, first))

    def backward_of(attend):
        """The backward alone: the forward runs once, at the first call."""
        out = []

        def run():
            out[:] = out or [attend()]
            return torch.autograd.grad(out[0], (q, k, v), do, retain_graph=True)
        return run

    pairs = score_pairs(b, h, sq, sk, causal)
    backward, errors, failed = usable({n: backward_of(f) for n, f in attends.items()
                                       if n != "SDPA math"}, grad_error)
    results = bench.compare_best(backward, flops=10 * d * pairs, rep_ms=400)
    record_row(record, "backward", row, results, errors, failed, tuned)
    both = {n: (lambda f=f: torch.autograd.grad(f(), (q, k, v), do))
            for n, f in attends.items() if n in backward}
    results = bench.compare_best(both, flops=14 * d * pairs, rep_ms=400)
    record_row(record, "forward+backward", row, results, errors, failed, tuned)


def measure(record: dict, out, only: str | None = None) -> None:
    """Every FORWARD and BACKWARD row (only one list if ``only`` is "forward" or "backward")
    into ``record``, written to ``out`` after each row: a run cut short keeps its rows."""
    rows = [(compare_forward, row) for row in FORWARD if only != "backward"]
    rows += [(compare_backward, row) for row in BACKWARD if only != "forward"]
    for compare, row in rows:
        compare(row, record)
        write(record, out)


def main() -> None:
    parser = options(__doc__)
    parser.add_argument("--only", choices=["forward", "backward"])
    args = parser.parse_args()
    record = header()
    measure(record, args.out, args.only)
    finish(record, args.out)


if __name__ == "__main__":
    main()
