"""Matmul on the shape families users bring (issue 19's suite), fp16, on a GPU: square,
large-K (a small output), small-K, unaligned rows (no tensor descriptors), tall-skinny and the
capstone's decoding steps (a few rows: GB/s is what counts there), each against cuBLAS in one
process: lesson 03's pipelined kernel tuned, its persistent kernel tuned (on the inputs where
descriptors can read them, else on copies padded to 16-byte rows), split-K tuned, and
shape_matmul (the tuner racing them all, its winning path recorded). Each side's best median of
interleaved runs, L2 flushed, every side replayed as a CUDA graph (the GPU's work alone).
Prints a table; writes JSON with --out and a chart of each family's ratios to cuBLAS with
--plot.

    python benchmarks/matmul_shapes.py --out matmul-shapes.json --plot matmul-shapes.png
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import math
from pathlib import Path

import torch

from tilegym_edu import bench, device, tune
from tilegym_edu.reference import pipelined, split_k

from record import finish, header, options, write

#: family -> (M, N, K) shapes
FAMILIES = {
    "square": [(4096, 4096, 4096), (8192, 8192, 8192)],
    "large-K": [(256, 256, 524288), (1024, 1024, 65536)],
    "small-K": [(32768, 32768, 64), (8192, 8192, 128)],
    "unaligned": [(8205, 5921, 2949), (4095, 4097, 4099)],
    "tall-skinny": [(65536, 128, 4096), (128, 65536, 4096)],
    # lesson 06's decoding steps: one or 16 tokens through the capstone's weights (2048 wide,
    # attention 3072 = q + k + v, the MLP's 2 x 5632, the 32000-token vocabulary); a few rows
    # against megabytes of weights, so GB/s is what counts
    "decode": [(1, 3072, 2048), (1, 11264, 2048), (1, 2048, 5632), (1, 32000, 2048),
               (16, 11264, 2048), (16, 2048, 5632)],
}


def candidates(a: torch.Tensor, b: torch.Tensor) -> tuple[dict, dict]:
    """({name: fn}, {name: what the tuner chose}) for one shape: every path that can run it."""
    problem = pipelined.matmul_problem(a, b)
    chosen, fns = {}, {"cuBLAS": lambda: a @ b}
    runs = {"pipelined": (pipelined.pipelined_matmul_kernel, pipelined.PIPELINED_SPACE,
                          lambda c: pipelined.pipelined_matmul.__wrapped__(a, b, c)),
            "split-K": (split_k.split_k_matmul_kernel, split_k.SPLIT_K_SPACE,
                        lambda c: split_k.split_k_matmul.__wrapped__(a, b, c))}
    if not split_k.shape_problem(a, b)["tma"]:
        runs["persistent"] = (pipelined.persistent_matmul_kernel, pipelined.PERSISTENT_SPACE,
                              lambda c: pipelined.persistent_matmul.__wrapped__(a, b, c))
    else:       # the same kernel on copies padded to 16-byte rows, copies timed too
        runs["padded persistent"] = (
            split_k.padded_persistent_matmul, pipelined.PERSISTENT_SPACE,
            lambda c: split_k.padded_persistent_matmul.__wrapped__(a, b, c))
    for name, (kernel, space, run) in runs.items():
        kept, _ = space.candidates(1, problem, tune.Resources.of_gpu())
        if not kept:                              # e.g. split-K when K is too short to split
            continue
        result = tune.autotune(kernel, problem, space, run)
        chosen[name] = dict(result.config)
        fns[name] = lambda run=run, config=result.config: run(config)
    winner = split_k.tune_shape_matmul(a, b)              # shape_matmul's own race
    chosen["shape_matmul"] = dict(winner.config)
    fns["shape_matmul"] = lambda: split_k.run_path(a, b, winner.config)
    return fns, chosen


def relative_error(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> float:
    """Against a @ b in float32 (cuBLAS, float32 inputs): a float64 product of these sizes
    would take minutes."""
    ref = a.float() @ b.float()
    return ((out.float() - ref).norm() / ref.norm()).item()


def measure(M: int, N: int, K: int) -> dict:
    torch.manual_seed(0)
    a = torch.randn(M, K, device=device.DEVICE, dtype=torch.float16)
    b = torch.randn(K, N, device=device.DEVICE, dtype=torch.float16)
    fns, chosen = candidates(a, b)
    errors = {name: relative_error(fn(), a, b) for name, fn in fns.items()}
    # every side replayed as a CUDA graph: the GPU's work alone (a 50 µs kernel behind a Python
    # wrapper is otherwise timed with the host's launch in it, as 8192 x 8192 x 128 was on
    # 2026-12-04 at 0.40x cuBLAS)
    results = bench.compare(fns, flops=2 * M * N * K, bytes=2 * (M * K + K * N + M * N),
                            rep_ms=1000, graph_below_ms=math.inf)
    print(f"== {M} x {N} x {K} float16 (shape_matmul chose {chosen['shape_matmul']['PATH']})")
    bench.print_table(results, baseline="cuBLAS")
    cublas = next(m for m in results if m.name == "cuBLAS")
    return {"shape": [M, N, K], "configs": chosen, "errors": errors,
            "results": {m.name: {"median_ms": m.median_ms, "tflops": m.tflops, "gbs": m.gbs,
                                 "vs_cublas": cublas.median_ms / m.median_ms, "runs": m.runs,
                                 "cuda_graph": m.cuda_graph,
                                 "sm_clock_mhz": m.sm_clock_mhz} for m in results}}


def plot(record: dict, path: Path) -> None:
    """One group of bars per shape: each side's speed as a fraction of cuBLAS's."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [(family, row) for family, shapes in record["families"].items() for row in shapes]
    names = ["pipelined", "persistent", "padded persistent", "split-K", "shape_matmul"]
    fig, ax = plt.subplots(figsize=(max(8, 1.3 * len(rows)), 4.5))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        ax.bar([x + i * width for x in range(len(rows))],
               [row["results"].get(name, {}).get("vs_cublas", 0) for _, row in rows],
               width, label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(rows))],
                  [f"{family}\n{'x'.join(map(str, row['shape']))}" for family, row in rows],
                  fontsize=7)
    ax.set_ylabel("speed / cuBLAS's (fp16)")
    ax.set_title(f"Matmul by shape family on {record['gpu'].split(' (')[0]}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = options(__doc__)
    parser.add_argument("--plot", type=Path, metavar="PNG", help="write the chart there")
    parser.add_argument("--families", nargs="*", default=list(FAMILIES), choices=list(FAMILIES))
    args = parser.parse_args()
    record = {**header(), "families": {}}
    for family in args.families:
        for M, N, K in FAMILIES[family]:
            record["families"].setdefault(family, []).append(measure(M, N, K))
            write(record, args.out)          # a run cut short keeps its rows
    if args.plot:
        plot(record, args.plot)
    finish(record, args.out)


if __name__ == "__main__":
    main()
