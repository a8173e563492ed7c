"""Lesson 03's measurements on a GPU: the ladder naive -> tiled -> pipelined (num_stages 1 and
3) -> autotuned -> persistent -> cuBLAS at 4096³ and 8192x8192x512 (float16), and what the
autotuner costs: seconds per search at each level, and a cache hit. Prints tables; writes JSON
with --out. ``--level2`` adds a level-2 search of the pipelined kernel (minutes: it compiles
about a hundred configurations).

    python benchmarks/pipelining.py --out pipelining.json
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import time

import torch

from tilegym_edu import bench, tune
from tilegym_edu.reference import pipelined
from tilegym_edu.reference.matmul import naive_matmul, tiled_matmul

from record import finish, header, options

SHAPES = [(4096, 4096, 4096), (8192, 8192, 512)]


def tuned(kernel, space, run, a, b, level):
    """Tune (timed, from an empty cache) then time a cache hit; the config and the trials."""
    problem = pipelined.matmul_problem(a, b)
    launch = lambda config: run.__wrapped__(a, b, config)  # noqa: E731
    start = time.perf_counter()
    result = tune.autotune(kernel, problem, space, launch, level=level, cache=False)
    search_s = time.perf_counter() - start
    start = time.perf_counter()
    again = tune.autotune(kernel, problem, space, launch, level=level)
    hit_ms = (time.perf_counter() - start) * 1e3
    assert again.from_cache and again.config == result.config
    print(result.table())
    return result, {"level": level, "search_s": search_s, "cache_hit_ms": hit_ms,
                    "config": dict(result.config), "sm_clock_mhz": list(result.sm_clock_mhz),
                    "trials": [{"config": str(t.config), "status": t.status,
                                "median_ms": t.median_ms, "samples": len(t.samples_ms)}
                               for t in result.trials]}


def ladder(M: int, N: int, K: int, record: dict) -> None:
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    ref = a.double() @ b.double()
    pipe, pipe_record = tuned(pipelined.pipelined_matmul_kernel, pipelined.PIPELINED_SPACE,
                              pipelined.pipelined_matmul, a, b, level=1)
    pers, pers_record = tuned(pipelined.persistent_matmul_kernel, pipelined.PERSISTENT_SPACE,
                              pipelined.persistent_matmul, a, b, level=1)
    default = dict(pipelined.PIPELINED_DEFAULT)
    fns = {
        "tiled (lesson 02)": lambda: tiled_matmul(a, b),
        "pipelined default, num_stages=1":
            lambda: pipelined.pipelined_matmul(a, b, {**default, "num_stages": 1}),
        "pipelined default (num_stages=3)": lambda: pipelined.pipelined_matmul(a, b),
        "autotuned, num_stages=1":
            lambda: pipelined.pipelined_matmul(a, b, pipe.config.replace(num_stages=1)),
        "autotuned": lambda: pipelined.pipelined_matmul(a, b, pipe.config),
        "persistent default": lambda: pipelined.persistent_matmul(a, b),
        "persistent autotuned": lambda: pipelined.persistent_matmul(a, b, pers.config),
        "cuBLAS": lambda: a @ b,
    }
    if (M, N, K) == (4096, 4096, 4096):
        fns = {"naive (lesson 01)": lambda: naive_matmul(a, b), **fns}
    errors = {name: ((fn().double() - ref).norm() / ref.norm()).item() for name, fn in fns.items()}
    results = bench.compare(fns, flops=2 * M * N * K, bytes=(M * K + K * N + M * N) * 2,
                            rep_ms=3000)
    print(f"== {M}x{N}x{K} float16")
    bench.print_table(results, baseline="cuBLAS")
    cublas = next(m for m in results if m.name == "cuBLAS")
    record[f"{M}x{N}x{K}"] = {
        "tuning": {"pipelined": pipe_record, "persistent": pers_record},
        "ladder": {m.name: {"median_ms": m.median_ms, "p20_ms": m.p20_ms, "p80_ms": m.p80_ms,
                            "tflops": m.tflops, "vs_cublas": cublas.median_ms / m.median_ms,
                            "rel_error": errors[m.name], "runs": m.runs,
                            "sm_clock_mhz": m.sm_clock_mhz} for m in results}}


def main() -> None:
    parser = options(__doc__)
    parser.add_argument("--level2", action="store_true")
    args = parser.parse_args()
    record = header(clock_before=True)
    for shape in SHAPES:
        ladder(*shape, record)
    if args.level2:
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
        b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
        _, record["level2_pipelined_4096"] = tuned(
            pipelined.pipelined_matmul_kernel, pipelined.PIPELINED_SPACE,
            pipelined.pipelined_matmul, a, b, level=2)
    finish(record, args.out)


if __name__ == "__main__":
    main()
