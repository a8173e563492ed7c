"""Convolution on the layer families users bring (issue 19's suite), fp16 channels_last, on a
GPU, each against cuDNN (channels_last) in one process: ResNet-50's 3x3 layers at batch 32 and
64, 1x1 layers, strided layers, odd kernel sizes (the layers with one group: lesson 05's
implicit GEMM, the persistent 1x1 kernel, split-K and the two Gluon kernels, each path's best
in shape_conv2d's race, and shape_conv2d itself, its winning path recorded); then stems,
grouped and depthwise layers, as benchmarks/conv_groups.py measures them. Every side a CUDA
graph, each side's best median of interleaved runs, L2 flushed. Prints tables; writes JSON with
--out and a chart of every row's best ratio to cuDNN with --plot.

    python benchmarks/conv_shapes.py --out conv-shapes.json --plot conv-shapes.png
    python benchmarks/conv_shapes.py --families 1x1 strided
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import math
from pathlib import Path

import torch
import torch.nn.functional as F

import conv_groups
from record import finish, header, options, write
from tilegym_edu import bench, tune
from tilegym_edu.reference import conv_persistent
from tilegym_edu.reference import convolution as conv

#: family -> (N, C, H, W, K, R, stride, padding) layers of one group, and issue 19's target
FAMILIES = {
    "ResNet-50 3x3": ([(n, c, s, s, c, 3, 1, 1) for n in (32, 64)
                       for c, s in ((64, 56), (128, 28), (256, 14), (512, 7))], 1.0),
    "1x1": ([(32, 64, 56, 56, 256, 1, 1, 0), (32, 256, 56, 56, 64, 1, 1, 0),
             (32, 1024, 14, 14, 256, 1, 1, 0), (32, 512, 7, 7, 2048, 1, 1, 0)], 0.9),
    "strided": ([(32, 128, 56, 56, 128, 3, 2, 1), (32, 128, 28, 28, 128, 3, 2, 1),
                 (32, 256, 56, 56, 512, 1, 2, 0)], 0.9),
    "odd kernels": ([(8, 96, 65, 67, 40, 5, 1, 2), (8, 37, 33, 31, 45, 3, 2, 1),
                     (16, 64, 56, 56, 64, 7, 1, 3)], 0.9),
}
#: issue 19's targets for the layers benchmarks/conv_groups.py measures, by kind
GROUP_TARGETS = {"stem": 0.8, "grouped": 0.8, "depthwise": 0.8}


def path_bests(result: tune.TuneResult) -> dict[str, tune.Config]:
    """The fastest timed configuration of each PATH in shape_conv2d's race."""
    bests: dict[str, tune.Trial] = {}
    for trial in result.trials:
        path = trial.config["PATH"]
        if trial.samples_ms and (path not in bests or trial.median_ms < bests[path].median_ms):
            bests[path] = trial
    return {path: trial.config for path, trial in bests.items()}


def measure(layer, target: float) -> dict:
    N, C, H, W, K, R, stride, padding = layer
    torch.manual_seed(0)
    x = conv_groups.channels_last(torch.randn(N, C, H, W, device="cuda", dtype=torch.float16))
    w = conv_groups.channels_last(torch.randn(K, C, R, R, device="cuda", dtype=torch.float16)
                                  / (C * R * R) ** 0.5)
    P, Q = conv.check_conv_inputs(x, w, stride, padding)
    y = conv.new_output(x, K, P, Q)
    result = conv_persistent.tune_shape_conv(x, w, y, stride, padding, 1, progress=True)
    print(result.table())
    names = {"lesson05": "lesson 05 tuned", "persistent": "persistent tuned",
             "split_k": "split-K tuned", "hopper": "Gluon tuned", "halo": "Gluon halo tuned"}
    fns = {"cuDNN channels_last": lambda: F.conv2d(x, w, stride=stride, padding=padding)}
    for path, config in path_bests(result).items():
        fns[names[path]] = lambda config=config: conv_persistent.run_conv_path(
            x, w, conv.new_output(x, K, P, Q), stride, padding, 1, config)
    fns["shape_conv2d"] = lambda: conv_persistent.run_conv_path(
        x, w, conv.new_output(x, K, P, Q), stride, padding, 1, result.config)
    expected = F.conv2d(x.float(), w.float(), stride=stride, padding=padding)
    errors = {n: ((fn().float() - expected).norm() / expected.norm()).item()
              for n, fn in fns.items()}
    results = bench.compare(fns, flops=conv.conv_flops(x, w, P, Q), rep_ms=500,
                            graph_below_ms=math.inf)
    title = f"N{N} C{C} {H}x{W} K{K} {R}x{R} stride {stride} pad {padding} float16"
    print(f"== {title} (shape_conv2d chose {result.config['PATH']})")
    bench.print_table(results, baseline="cuDNN channels_last")
    cudnn = next(m for m in results if m.name == "cuDNN channels_last")
    return {"layer": title, "shape": list(layer), "target": target,
            "path": result.config["PATH"], "config": dict(result.config),
            "search_s": result.seconds,
            "results": {m.name: {"median_ms": m.median_ms, "tflops": m.tflops,
                                 "vs_cudnn": cudnn.median_ms / m.median_ms,
                                 "rel_error": errors[m.name], "runs": m.runs,
                                 "cuda_graph": m.cuda_graph,
                                 "sm_clock_mhz": m.sm_clock_mhz} for m in results}}


def group_kind(layer) -> str:
    """stem, grouped or depthwise, for a layer of conv_groups.LAYERS."""
    _, _, C, _, _, _, groups, *_ = layer
    return "stem" if C <= 4 else "depthwise" if groups == C else "grouped"


def best_ratio(row: dict) -> float:
    """The fastest course kernel's speed over cuDNN's (channels_last) in a row."""
    results = row["results"]
    cudnn = results["cuDNN channels_last"]["median_ms"]
    ours = [r["median_ms"] for name, r in results.items() if not name.startswith("cuDNN")]
    return cudnn / min(ours)


def plot(record: dict, path: Path) -> None:
    """One bar per layer: the course's best speed as a fraction of cuDNN's, the target marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [(family, row) for family, rows in record["families"].items() for row in rows]
    fig, ax = plt.subplots(figsize=(max(9, 0.55 * len(rows)), 4.8))
    ratios = [best_ratio(row) for _, row in rows]
    colors = ["tab:green" if r >= row["target"] else "tab:red"
              for r, (_, row) in zip(ratios, rows)]
    ax.bar(range(len(rows)), ratios, color=colors)
    ax.scatter(range(len(rows)), [row["target"] for _, row in rows], marker="_", s=300,
               color="black", label="issue 19's target")
    ax.set_xticks(range(len(rows)), [f"{family}\n{row['layer'].split(' float16')[0]}"
                                     for family, row in rows], rotation=90, fontsize=6)
    ax.set_ylabel("best course kernel / cuDNN (fp16)")
    ax.set_title(f"Convolution by layer family on {record['gpu'].split(' (')[0]}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = options(__doc__)
    parser.add_argument("--plot", type=Path, metavar="PNG", help="write the chart there")
    choices = [*FAMILIES, *GROUP_TARGETS]
    parser.add_argument("--families", nargs="*", default=choices, choices=choices)
    args = parser.parse_args()
    record = {**header(), "cudnn": torch.backends.cudnn.version(), "families": {}}
    for family in args.families:
        if family in FAMILIES:
            layers, target = FAMILIES[family]
            for layer in layers:
                record["families"].setdefault(family, []).append(measure(layer, target))
                write(record, args.out)          # a run cut short keeps its rows
        else:
            for layer in conv_groups.LAYERS:
                if group_kind(layer) == family:
                    row = conv_groups.compare_layer(layer)
                    record["families"].setdefault(family, []).append(
                        {**row, "target": GROUP_TARGETS[family]})
                    write(record, args.out)
    if args.plot:
        plot(record, args.plot)
    finish(record, args.out)


if __name__ == "__main__":
    main()
