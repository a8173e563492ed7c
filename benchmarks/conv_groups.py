"""The convolution layers lesson 05's implicit GEMM serves badly, fp16 (or bf16) channels_last,
on a GPU: stems (3 input channels), grouped (ResNeXt) and depthwise (MobileNet) layers, each
against cuDNN in one process: cuDNN (F.conv2d) on channels_last and on NCHW inputs, lesson 05's
conv2d (where it runs: one group), and the course's kernel for the layer (reference/conv_stem.py
for a stem, with the packed implicit GEMM it replaced beside it; conv_groups.py's packed kernel
for grouped layers, the race of its tiles and rows kernels for depthwise ones) at its default
and tuned at level 1. TFLOP/s count 2·N·K·P·Q·(C / groups)·R·S; GB/s count x, w and y once
(what bounds a depthwise layer). Prints tables; writes JSON with --out. float16 unless --dtype
bfloat16.

    python benchmarks/conv_groups.py --out conv-groups.json
    python benchmarks/conv_groups.py --dtype bfloat16 --out conv-groups-bf16.json
"""
from __future__ import annotations

import math

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import torch
import torch.nn.functional as F

from tilegym_edu import bench, tune
from tilegym_edu.reference import conv_groups, conv_stem
from tilegym_edu.reference import convolution as conv

from record import finish, header, options, write

#: (name, N, C, H, W, K, groups, R, stride, padding)
LAYERS = [
    ("ResNet-50 stem", 32, 3, 224, 224, 64, 1, 7, 2, 3),
    ("ResNet-50 stem, batch 64", 64, 3, 224, 224, 64, 1, 7, 2, 3),
    ("ResNeXt-50 32x4d 3x3", 32, 128, 56, 56, 128, 32, 3, 1, 1),
    ("ResNeXt-50 32x4d 3x3, strided", 32, 256, 56, 56, 256, 32, 3, 2, 1),
    ("MobileNetV2 depthwise 112x112", 32, 96, 112, 112, 96, 96, 3, 2, 1),
    ("MobileNetV2 depthwise 56x56", 32, 144, 56, 56, 144, 144, 3, 1, 1),
    ("MobileNetV2 depthwise 14x14", 32, 384, 14, 14, 384, 384, 3, 1, 1),
    ("MobileNetV2 depthwise 7x7", 32, 960, 7, 7, 960, 960, 3, 1, 1),
]


def channels_last(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous(memory_format=torch.channels_last)


def packed(x: torch.Tensor, w: torch.Tensor, stride: int, padding: int, groups: int):
    """(kernel, space, launch(config)) of the packed implicit GEMM (lesson 05's Exercise 4)."""
    return (conv_groups.packed_conv2d_kernel, conv_groups.PACKED_SPACE,
            lambda c: conv_groups.packed_conv2d(x, w, stride, padding, 1, groups, c))


def ours(x: torch.Tensor, w: torch.Tensor, stride: int, padding: int, groups: int):
    """(kernel, space, launch(config)) of the course's kernel for this layer: depthwise (its
    space races the tiles and rows kernels, so the kernel the tuner keys on is both), the stem
    kernel (reference/conv_stem.py) for few channels, else the packed implicit GEMM."""
    if groups == x.shape[1] and w.shape[1] == 1:
        return (conv_groups.DEPTHWISE_KERNELS, conv_groups.DEPTHWISE_SPACE,
                lambda c: conv_groups.depthwise_conv2d(x, w, stride, padding, 1, c))
    if groups == 1 and x.shape[1] <= conv_stem.MAX_STEM_CHANNELS:
        return (conv_stem.stem_conv2d_kernel, conv_stem.STEM_SPACE,
                lambda c: conv_stem.launch_stem_conv2d(x, w, stride, padding, c))
    return packed(x, w, stride, padding, groups)


def compare_layer(layer, dtype: torch.dtype = torch.float16) -> dict:
    name, N, C, H, W, K, groups, R, stride, padding = layer
    torch.manual_seed(0)
    x = channels_last(torch.randn(N, C, H, W, device="cuda", dtype=dtype))
    w = channels_last(torch.randn(K, C // groups, R, R, device="cuda", dtype=dtype)
                      / (C // groups * R * R) ** 0.5)
    x_nchw, w_nchw = x.contiguous(), w.contiguous()
    kernel, space, launch = ours(x, w, stride, padding, groups)
    problem = {**conv.conv_problem(x, w, stride, padding, 1), "groups": groups}
    # raced at every size (min_ms=0): a 7x7 depthwise layer runs in ~10 µs, under the tuner's
    # TUNE_ABOVE_MS, and the question here is the best the course's kernels can do. Every
    # candidate is raced as a CUDA graph, as every side is timed below: on the H200's host a
    # depthwise launch takes 0.12-0.19 ms for 0.04-0.09 ms of GPU work, and timed as plain
    # launches the candidates rank by their Python (run 23 of 2026-12-04: winners 1.21-1.24x
    # the best; as graphs, run 24, the best in three races out of three on two layers)
    result = tune.autotune(kernel, problem, space, launch, level=1, min_ms=0,
                           race_as_graphs=True)
    print(result.table())
    fns = {"cuDNN channels_last": lambda: F.conv2d(x, w, stride=stride, padding=padding,
                                                   groups=groups),
           "cuDNN NCHW": lambda: F.conv2d(x_nchw, w_nchw, stride=stride, padding=padding,
                                          groups=groups),
           "reference default": lambda: launch(space.default),
           "reference tuned": lambda: launch(result.config)}
    if groups == 1:
        fns["lesson 05 conv2d, tuned"] = lambda: conv.conv2d(x, w, stride, padding, level=1)
    if kernel is conv_stem.stem_conv2d_kernel:          # the stem's kernel before conv_stem
        packed_kernel, packed_space, packed_launch = packed(x, w, stride, padding, groups)
        packed_config = tune.autotune(packed_kernel, problem, packed_space, packed_launch,
                                      race_as_graphs=True).config
        fns["packed tuned"] = lambda: packed_launch(packed_config)
    expected = F.conv2d(x.float(), w.float(), stride=stride, padding=padding, groups=groups)
    errors = {n: ((fn().float() - expected).norm() / expected.norm()).item()
              for n, fn in fns.items()}
    P, Q = expected.shape[2:]
    flops = 2 * N * K * P * Q * (C // groups) * R * R
    moved = x.nbytes + w.nbytes + expected.numel() * x.element_size()
    # every side replayed as a CUDA graph: a 7x7 layer runs in ~10 µs, under the host's time
    # to launch it through Python (~0.1 ms on the H200 host of 2026-12-02's run m)
    results = bench.compare(fns, flops=flops, bytes=moved, rep_ms=1000,
                            graph_below_ms=math.inf)
    title = (f"{name}: N{N} C{C} {H}x{W} K{K} groups {groups} {R}x{R} stride {stride} "
             f"pad {padding} {str(dtype).removeprefix('torch.')}")
    print("==", title)
    bench.print_table(results, baseline="cuDNN channels_last")
    return {"layer": title, "tuned_config": dict(result.config), "search_s": result.seconds,
            "flops": flops, "bytes": moved,
            "results": {m.name: {"median_ms": m.median_ms, "tflops": m.tflops, "gbs": m.gbs,
                                 "rel_error": errors[m.name], "runs": m.runs,
                                 "cuda_graph": m.cuda_graph,
                                 "sm_clock_mhz": m.sm_clock_mhz} for m in results}}


def main() -> None:
    parser = options(__doc__)
    parser.add_argument("--dtype", choices=("float16", "bfloat16"), default="float16")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    record = {**header(), "cudnn": torch.backends.cudnn.version(), "dtype": args.dtype,
              "layers": []}
    for layer in LAYERS:
        record["layers"].append(compare_layer(layer, dtype))
        write(record, args.out)          # a run cut short keeps its rows
    finish(record, args.out)


if __name__ == "__main__":
    main()
