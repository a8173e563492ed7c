"""Triton, cuTile and the vendor library, kernel by kernel, on a GPU (issue 20's comparison):
the fused silu(a) * b, the tiled and the persistent matmul, and the FlashAttention forward, each
timed interleaved in one process (bench.compare: medians, L2 flushed, CUDA events). For each
kernel it also records the first call's wall time (compilation included: cuTile's JIT and
tileiras, Triton's compiler), the lines of kernel code (the kernel function and the helpers it
calls, without docstrings, comments and blank lines) and what tuning each side got: Triton's
kernels are tuned at level 1 as the lessons do; cuTile's run at their default tiles and at a few
others listed in CUTILE_CONFIGS (the compiler picks threads and pipeline depth itself).

Needs cuda.tile and its toolchain (``make cutile``). float16 unless --dtype bfloat16. Prints tables;
writes JSON with --out.

    python benchmarks/cutile_compare.py --out cutile-compare.json
    python benchmarks/cutile_compare.py --dtype bfloat16 --out cutile-compare-bf16.json
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import importlib.metadata
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

from attention_shapes import relative, score_pairs, sdpa, tuned_forward
from record import finish, header, options, write
from tilegym_edu import bench
from tilegym_edu.includes import code_lines
from tilegym_edu.reference import cutile_kernels as ck
from tilegym_edu.reference import flash, llama_kernels, pipelined

CUTILE, REFERENCE = "tilegym_edu/reference/cutile_kernels.py", "tilegym_edu/reference"
#: (file, functions) whose code makes up each side's kernel (includes.code_lines counts it)
KERNEL_CODE = {
    "silu_mul": {"cuTile": (CUTILE, ("silu_mul_kernel",)),
                 "Triton": (f"{REFERENCE}/llama_kernels.py", ("swiglu_kernel",))},
    "matmul": {"cuTile": (CUTILE, ("matmul_kernel", "grouped_tile")),
               "Triton": (f"{REFERENCE}/pipelined.py", ("pipelined_matmul_kernel",))},
    "persistent matmul": {"cuTile": (CUTILE, ("persistent_matmul_kernel", "grouped_tile")),
                          "Triton": (f"{REFERENCE}/pipelined.py", ("persistent_matmul_kernel",))},
    "attention": {"cuTile": (CUTILE, ("flash_attention_kernel",)),
                  "Triton": (f"{REFERENCE}/flash.py", ("flash_forward_kernel", "flash_blocks"))},
}
#: tiles tried beside each cuTile default (a learner's first few guesses, not a search)
CUTILE_CONFIGS = {
    "matmul": [dict(TILE_M=128, TILE_N=256, TILE_K=64), dict(TILE_M=256, TILE_N=128, TILE_K=64),
               dict(TILE_M=128, TILE_N=128, TILE_K=32)],
    "persistent matmul": [dict(TILE_M=128, TILE_N=128, TILE_K=64, LATENCY=3),
                          dict(TILE_M=128, TILE_N=256, TILE_K=64, LATENCY=2),
                          dict(TILE_M=128, TILE_N=256, TILE_K=64, LATENCY=5)],
    "attention": [dict(TILE_M=64, TILE_N=64), dict(TILE_M=128, TILE_N=64),
                  dict(TILE_M=64, TILE_N=128)],
}


def first_call_s(fn) -> float:
    """Wall time of fn's first call, synchronized: compilation and the launch."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def measure(name: str, fns: dict, ref: torch.Tensor, flops=None, bytes=None,
            rep_ms: float = 500) -> dict:
    """First calls (in fns' order), errors against ``ref`` (float32), then the interleaved
    timing; a function that raises is recorded with its error instead."""
    first, errors, failed = {}, {}, {}
    for label, fn in list(fns.items()):
        try:
            first[label] = first_call_s(fn)
            errors[label] = relative(fn(), ref)
        except Exception as e:  # noqa: BLE001  (a configuration cuTile refuses: recorded)
            failed[label] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
            print(f"{name}: {label} failed: {failed[label]}")
            del fns[label]
    results = bench.compare(fns, flops=flops, bytes=bytes, rep_ms=rep_ms)
    print("==", name)
    bench.print_table(results, baseline=next(iter(fns)))
    return {"first_call_s": first, "failed": failed,
            "results": {m.name: {"median_ms": m.median_ms, "tflops": m.tflops, "gbs": m.gbs,
                                 "rel_error": errors[m.name], "runs": m.runs,
                                 "cuda_graph": m.cuda_graph, "sm_clock_mhz": m.sm_clock_mhz}
                        for m in results}}


def with_configs(kernel: str, run, default: dict) -> dict:
    """The cuTile side: its default tiles, then each of CUTILE_CONFIGS[kernel]."""
    fns = {f"cuTile {fmt(default)}": lambda: run(None)}
    for config in CUTILE_CONFIGS.get(kernel, []):
        fns[f"cuTile {fmt({**default, **config})}"] = lambda c=config: run(c)
    return fns


def name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def fmt(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items() if k.startswith(("TILE", "LAT")))


def silu_mul_row(rows: int, cols: int, dtype: torch.dtype) -> dict:
    a, b = (torch.randn(rows, cols, device="cuda", dtype=dtype) for _ in range(2))
    h = torch.cat([a, b], dim=1)  # the Triton kernel's (gate | up) layout: the same bytes
    ref = F.silu(a.float()) * b.float()
    fns = {"cuTile": lambda: ck.silu_mul(a, b),
           "Triton (capstone's swiglu)": lambda: llama_kernels.swiglu(h),
           "PyTorch eager": lambda: F.silu(a) * b}
    row = measure(f"silu(a) * b, {rows} x {cols} {name(dtype)}", fns, ref, bytes=3 * a.nbytes)
    return {"shape": [rows, cols], **row}


def matmul_row(kernel: str, n: int, dtype: torch.dtype) -> dict:
    a, b = (torch.randn(n, n, device="cuda", dtype=dtype) / n ** 0.25 for _ in range(2))
    ref = a.float() @ b.float()
    persistent = kernel == "persistent matmul"
    run = ck.persistent_matmul if persistent else ck.matmul
    default = ck.PERSISTENT_DEFAULT if persistent else ck.MATMUL_DEFAULT
    fns = with_configs(kernel, lambda c: run(a, b, c), default)
    tuned_start = time.perf_counter()
    pipelined.tuned_matmul(a, b, level=1, persistent=persistent)
    triton_tuning_s = time.perf_counter() - tuned_start
    fns["Triton, tuned at level 1"] = lambda: pipelined.tuned_matmul(a, b, 1, persistent)
    fns["cuBLAS"] = lambda: a @ b
    row = measure(f"{kernel} {n}^3 {name(dtype)}", fns, ref, flops=2 * n ** 3)
    return {"n": n, "triton_tuning_s": triton_tuning_s, **row}


def attention_row(batch: int, heads: int, seq: int, head_dim: int, causal: bool,
                  dtype: torch.dtype) -> dict:
    q, k, v = (torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=dtype)
               for _ in range(3))
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    fns = with_configs("attention", lambda c: ck.flash_attention(q, k, v, causal, c),
                       ck.ATTENTION_DEFAULT)
    tuned_start = time.perf_counter()
    result = tuned_forward(q, k, v, causal)
    triton_tuning_s = time.perf_counter() - tuned_start
    fns["Triton, tuned at level 1"] = lambda: flash.flash_forward(q, k, v, causal,
                                                                   config=result.config)[0]
    fns["cuDNN SDPA"] = sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v, causal)
    fns["FLASH SDPA"] = sdpa(SDPBackend.FLASH_ATTENTION, q, k, v, causal)
    pairs = score_pairs(batch, heads, seq, seq, causal)
    label = (f"attention B{batch} H{heads} S{seq} D{head_dim}{' causal' if causal else ''} "
             f"{name(dtype)}")
    row = measure(label, fns, ref, flops=4 * head_dim * pairs)
    return {"shape": [batch, heads, seq, head_dim], "causal": causal,
            "triton_tuning_s": triton_tuning_s, "triton_config": dict(result.config), **row}


def main() -> None:
    parser = options(__doc__)
    parser.add_argument("--dtype", choices=("float16", "bfloat16"), default="float16")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    record = {**header(), "cuda_tile": importlib.metadata.version("cuda-tile"),
              "tileiras": importlib.metadata.version("nvidia-cuda-tileiras"),
              "lines_of_kernel_code": {
                  kernel: {side: code_lines(where[0], *where[1]) for side, where in sides.items()}
                  for kernel, sides in KERNEL_CODE.items()}}
    print("lines of kernel code:", record["lines_of_kernel_code"])
    record["dtype"] = args.dtype
    rows = {"silu_mul": [lambda: silu_mul_row(16384, 8192, dtype)],
            "matmul": [lambda n=n: matmul_row("matmul", n, dtype) for n in (4096, 8192)],
            "persistent_matmul": [lambda n=n: matmul_row("persistent matmul", n, dtype)
                                  for n in (4096, 8192)],
            "attention": [lambda c=c: attention_row(4, 32, 4096, 128, c, dtype)
                          for c in (False, True)]
            + [lambda: attention_row(8, 16, 2048, 64, True, dtype)]}
    for section, makers in rows.items():
        for make in makers:
            record.setdefault(section, []).append(make())
            write(record, args.out)          # a run cut short keeps its rows
    finish(record, args.out)


if __name__ == "__main__":
    main()
