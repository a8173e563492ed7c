"""Matmul measurements for lessons 01-02 on a GPU: the reference naive and tiled Triton kernels
and cuBLAS at 1024³ and 4096³ in fp16 and fp32, grouped ordering on and off, a few tile
configurations, and the traffic counter run on GPU tensors. Prints a table; writes JSON with --out.

    python benchmarks/matmul.py --out matmul.json
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import torch

from tilegym_edu import bench
from tilegym_edu.reference.matmul import naive_matmul, tiled_matmul
from tilegym_edu.traffic import count_traffic

from record import finish, header, options

DTYPES = {"fp16": torch.float16, "fp32": torch.float32}
CONFIGS = {  # (block_m, block_n, block_k, num_warps)
    "128x128x64 w8": (128, 128, 64, 8),
    "128x128x32 w4": (128, 128, 32, 4),
    "128x256x64 w8": (128, 256, 64, 8),
    "64x128x64 w4": (64, 128, 64, 4),
}


def ladder(n: int, dtype: torch.dtype) -> dict[str, dict]:
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    ref = a.double() @ b.double()
    fns = {"naive": lambda: naive_matmul(a, b), "tiled": lambda: tiled_matmul(a, b),
           "tiled GROUP_M=1": lambda: tiled_matmul(a, b, group_m=1),
           "cuBLAS": lambda: a @ b}
    errors = {name: ((fn().double() - ref).norm() / ref.norm()).item() for name, fn in fns.items()}
    results = bench.compare(fns, flops=2 * n**3, bytes=3 * n * n * a.element_size(),
                            rep_ms=2000 if n > 2048 else 500)
    bench.print_table(results, baseline="cuBLAS")
    return {m.name: {"median_ms": m.median_ms, "tflops": m.tflops, "rel_error": errors[m.name],
                     "runs": m.runs} for m in results}


def configs(n: int = 4096) -> dict[str, float]:
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    fns = {name: (lambda c=c: tiled_matmul(a, b, c[0], c[1], c[2], num_warps=c[3]))
           for name, c in CONFIGS.items()}
    fns["cuBLAS"] = lambda: a @ b
    results = bench.compare(fns, flops=2 * n**3)
    bench.print_table(results, baseline="cuBLAS")
    return {m.name: m.tflops for m in results}


def main() -> None:
    args = options(__doc__).parse_args()
    record = {**header(), "ladder": {}}
    for n in (1024, 4096):
        for name, dtype in DTYPES.items():
            print(f"== {n}^3 {name}")
            record["ladder"][f"{n} {name}"] = ladder(n, dtype)
    print("== tile configurations, 4096^3 fp16")
    record["configs_4096_fp16"] = configs()
    a = torch.randn(37, 45, device="cuda", dtype=torch.float16)
    b = torch.randn(45, 29, device="cuda", dtype=torch.float16)
    naive, tiled = count_traffic(naive_matmul, a, b), count_traffic(tiled_matmul, a, b, 16, 16, 16)
    record["traffic_on_gpu_tensors"] = {"naive": naive.__dict__, "tiled 16x16x16": tiled.__dict__,
                                        "naive_expected_loaded": 2 * 37 * 29 * 45 * 2}
    finish(record, args.out, show=True)


if __name__ == "__main__":
    main()
