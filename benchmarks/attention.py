"""Lesson 04's measurements on a GPU: the fused softmax against copy bandwidth and
torch.softmax; FlashAttention forward (reference, autotuned) against naive PyTorch attention and
every SDPA backend, causal and not, head_dim 64 and 128, in TFLOP/s (4·B·H·S²·D, halved when
causal); peak memory of naive and flash attention against sequence length. Prints tables;
writes JSON with --out. ``--level2`` searches the full grid for B4 H32 S4096 D128.

    python benchmarks/attention.py --out attention.json
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from tilegym_edu import bench, tune
from tilegym_edu.reference import attention

from record import finish, header, options

BACKENDS = {"SDPA flash": SDPBackend.FLASH_ATTENTION, "SDPA cuDNN": SDPBackend.CUDNN_ATTENTION,
            "SDPA efficient": SDPBackend.EFFICIENT_ATTENTION, "SDPA math": SDPBackend.MATH}


def sdpa(backend, q, k, v, causal):
    def run():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


def attention_flops(b, h, s, d, causal):
    return 4 * b * h * s * s * d / (2 if causal else 1)


def compare_attention(b, h, s, d, causal, level, record):
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
    o = torch.empty_like(q)
    result = tune.autotune(attention.flash_attention_kernel, attention.attention_problem(q, causal),
                           attention.ATTENTION_SPACE,
                           lambda c: attention.launch_attention(q, k, v, o, causal, c), level=level)
    print(result.table())
    fns = {"reference default": lambda: attention.flash_attention(q, k, v, causal,
                                                                   config=attention.ATTENTION_SPACE.default),
           "reference autotuned": lambda: attention.flash_attention(q, k, v, causal,
                                                                     config=result.config),
           "naive PyTorch": lambda: attention.naive_attention(q, k, v, causal)}
    for name, backend in BACKENDS.items():
        fns[name] = sdpa(backend, q, k, v, causal)
    ref = attention.naive_attention(q.float(), k.float(), v.float(), causal)
    errors, failed = {}, {}
    for name, fn in list(fns.items()):
        try:
            errors[name] = ((fn().float() - ref).norm() / ref.norm()).item()
        except RuntimeError as e:  # a backend that does not support this problem
            failed[name] = str(e).splitlines()[0][:200]
            del fns[name]
    results = bench.compare(fns, flops=attention_flops(b, h, s, d, causal), rep_ms=1500)
    title = f"B{b} H{h} S{s} D{d} {'causal' if causal else 'non-causal'} float16"
    print("==", title)
    bench.print_table(results, baseline="reference autotuned")
    record[title] = {"tuned_config": dict(result.config), "search_s": result.seconds,
                     "failed": failed, "level": level,
                     "results": {m.name: {"median_ms": m.median_ms, "tflops": m.tflops,
                                          "rel_error": errors[m.name], "runs": m.runs,
                                          "sm_clock_mhz": m.sm_clock_mhz} for m in results}}


def peak_memory(record):
    rows = {}
    for s in (1024, 2048, 4096, 8192, 16384):
        q, k, v = (torch.randn(1, 16, s, 128, device="cuda", dtype=torch.float16) for _ in range(3))
        row = {}
        for name, fn in (("naive PyTorch", lambda: attention.naive_attention(q, k, v, False)),
                         ("reference", lambda: attention.flash_attention(
                             q, k, v, config=attention.ATTENTION_SPACE.default))):
            fn()
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            out = fn()
            torch.cuda.synchronize()
            row[name] = {"extra_peak_bytes": torch.cuda.max_memory_allocated() - base,
                         "output_bytes": out.numel() * out.element_size()}
            del out
        rows[s] = row
        print(f"S={s}: naive extra peak "
              f"{row['naive PyTorch']['extra_peak_bytes'] / 2**20:.0f} MiB, "
              f"flash {row['reference']['extra_peak_bytes'] / 2**20:.0f} MiB")
    record["peak_memory_B1_H16_D128_fp16"] = rows


def softmax_bandwidth(record):
    out = {}
    for rows, cols in ((16384, 4096), (4096, 32768), (65536, 1000)):
        x = torch.randn(rows, cols, device="cuda", dtype=torch.float16)
        nbytes = 2 * x.nbytes
        fns = {"reference softmax": lambda: attention.softmax(x),
               "torch.softmax": lambda: torch.softmax(x, dim=-1),
               "copy": bench.device_copy(nbytes)}
        results = bench.compare(fns, bytes=nbytes)
        print(f"== softmax {rows}x{cols} float16")
        bench.print_table(results, baseline="copy")
        copy = next(m for m in results if m.name == "copy")
        out[f"{rows}x{cols}"] = {m.name: {"gbs": m.gbs, "vs_copy": m.gbs / copy.gbs}
                                 for m in results}
    record["softmax_fp16"] = out


def main() -> None:
    parser = options(__doc__)
    parser.add_argument("--level2", action="store_true")
    args = parser.parse_args()
    record = header()
    softmax_bandwidth(record)
    for d in (128, 64):
        for causal in (False, True):
            level = 2 if args.level2 and d == 128 and not causal else 1
            compare_attention(4, 32, 4096, d, causal, level, record)
    peak_memory(record)
    finish(record, args.out)


if __name__ == "__main__":
    main()
