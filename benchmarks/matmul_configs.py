"""Search the configurations of lesson 03's two reference kernels on a GPU, against cuBLAS,
timed interleaved in one process: the pipelined tiled kernel (num_stages 1 to 5) and the
persistent tensor-descriptor kernel. Records, per configuration, the compiler's shared memory,
registers and spills, the instructions that show pipelining in the PTX, and TFLOP/s at 4096³,
8192x8192x512 and 8192³ (float16). Prints tables; writes JSON with --out.

    python benchmarks/matmul_configs.py --out configs.json
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import json
import re

import torch

from tilegym_edu import bench
from tilegym_edu.reference import pipelined

from record import finish, header, options

SHAPES = [(4096, 4096, 4096), (8192, 8192, 512), (8192, 8192, 8192)]
PIPELINED = [  # BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages
    (128, 128, 64, 8, 1), (128, 128, 64, 8, 2), (128, 128, 64, 8, 3), (128, 128, 64, 8, 4),
    (128, 128, 32, 4, 1), (128, 128, 32, 4, 3), (128, 128, 32, 4, 5),
    (128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (256, 128, 64, 8, 3), (128, 256, 32, 8, 5),
    (64, 256, 32, 4, 4), (128, 64, 64, 4, 4),
]
PERSISTENT = [  # BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, EPILOGUE_SPLIT, FLATTEN
    (128, 256, 64, 8, 3, 1, 0), (128, 256, 64, 8, 3, 2, 0), (128, 256, 64, 8, 3, 2, 1),
    (128, 256, 64, 8, 4, 2, 0), (128, 256, 64, 8, 4, 2, 1), (128, 256, 64, 8, 4, 1, 0),
    (256, 128, 64, 8, 3, 2, 1), (128, 128, 64, 8, 4, 1, 0), (128, 128, 64, 8, 4, 1, 1),
    (128, 128, 64, 4, 4, 1, 0), (128, 256, 32, 8, 6, 2, 1),
]
PTX_MARKERS = {"cp.async (Ampere-style async copy)": r"cp\.async\.c[ag]",
               "cp.async.bulk.tensor (TMA)": r"cp\.async\.bulk\.tensor",
               "wgmma (Hopper warpgroup MMA)": r"wgmma\.mma_async",
               "mma.sync (Ampere MMA)": r"mma\.sync",
               "mbarrier waits": r"mbarrier\.try_wait"}


def pipelined_config(c):
    return dict(BLOCK_M=c[0], BLOCK_N=c[1], BLOCK_K=c[2], GROUP_M=8, num_warps=c[3],
                num_stages=c[4])


def persistent_config(c):
    return dict(BLOCK_M=c[0], BLOCK_N=c[1], BLOCK_K=c[2], GROUP_M=8, num_warps=c[3],
                num_stages=c[4], EPILOGUE_SPLIT=c[5], FLATTEN=bool(c[6]))


def compiled_kernels(kernel) -> list:
    """Every compiled binary in a JITFunction's cache (the cache's layout varies by version)."""
    found = []
    for cache in kernel.device_caches.values():
        for part in cache:
            if isinstance(part, dict):
                found += [k for k in part.values() if hasattr(k, "metadata")]
    return found


def compiled_facts(kernel, fn) -> dict:
    """Run fn once; read the compiled kernel's resources and PTX markers from the kernel cache."""
    before = {id(k) for k in compiled_kernels(kernel)}
    fn()
    torch.cuda.synchronize()
    new = [k for k in compiled_kernels(kernel) if id(k) not in before]
    if not new:
        return {}
    k = new[-1]
    ptx = k.asm.get("ptx", "")
    return {"shared_bytes": k.metadata.shared, "registers": k.n_regs, "spills": k.n_spills,
            "ptx": {name: len(re.findall(p, ptx)) for name, p in PTX_MARKERS.items()}}


def main() -> None:
    args = options(__doc__).parse_args()
    record = {**header(), "configs": {}, "shapes": {}}
    a = torch.randn(512, 512, device="cuda", dtype=torch.float16)
    b = torch.randn(512, 512, device="cuda", dtype=torch.float16)
    ref = a.double() @ b.double()
    candidates = {}
    for c in PIPELINED:
        name = "pipelined %dx%dx%d w%d s%d" % c
        candidates[name] = (pipelined.pipelined_matmul, pipelined_config(c),
                            pipelined.pipelined_matmul_kernel)
    for c in PERSISTENT:
        name = "persistent %dx%dx%d w%d s%d split%d flatten%d" % c
        candidates[name] = (pipelined.persistent_matmul, persistent_config(c),
                            pipelined.persistent_matmul_kernel)
    working = {}
    for name, (fn, cfg, kernel) in candidates.items():
        try:
            facts = compiled_facts(kernel, lambda: fn(a, b, cfg))
            out = fn(a, b, cfg)
            error = ((out.double() - ref).norm() / ref.norm()).item()
            facts.update(rel_error_512=error, config=cfg)
            working[name] = (fn, cfg)
        except Exception as e:  # noqa: BLE001  (record why a configuration cannot run)
            facts = {"config": cfg, "failed": f"{type(e).__name__}: {str(e)[:300]}"}
        record["configs"][name] = facts
        print(name, json.dumps({k: v for k, v in facts.items() if k != "config"}), flush=True)
    for M, N, K in SHAPES:
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        b = torch.randn(K, N, device="cuda", dtype=torch.float16)
        fns = {name: (lambda fn=fn, cfg=cfg: fn(a, b, cfg)) for name, (fn, cfg) in working.items()}
        fns["cuBLAS"] = lambda: a @ b
        print(f"== {M}x{N}x{K} float16", flush=True)
        results = bench.compare(fns, flops=2 * M * N * K, rep_ms=1500)
        bench.print_table(results, baseline="cuBLAS")
        cublas = next(m for m in results if m.name == "cuBLAS")
        record["shapes"][f"{M}x{N}x{K}"] = {
            m.name: {"tflops": m.tflops, "median_ms": m.median_ms,
                     "vs_cublas": cublas.median_ms / m.median_ms,
                     "runs": m.runs, "sm_clock_mhz": m.sm_clock_mhz} for m in results}
    finish(record, args.out, clock_after=False, show=True)


if __name__ == "__main__":
    main()
