"""Lesson 05's measurements on a GPU: conv2d on ResNet-style layers, float16, in TFLOP/s
(2·N·K·P·Q·C·R·S): cuDNN on NCHW and on channels_last inputs, im2col + cuBLAS, the direct
kernel, and the implicit-GEMM reference with its default and its autotuned configuration;
plus the bytes of the unfolded (im2col) matrix against the input's. Prints tables; writes JSON
with --out. ``--level 2`` searches the full grid.

    python benchmarks/convolution.py --out convolution.json
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import torch
import torch.nn.functional as F

from tilegym_edu import bench, tune
from tilegym_edu.reference import convolution as conv

from record import finish, header, options

#: (N, C, H, W, K, R, stride, padding): the issue's three 3x3 layers first, then a 1x1, a
#: strided and a small odd layer
LAYERS = [(32, 64, 56, 56, 64, 3, 1, 1), (32, 256, 14, 14, 256, 3, 1, 1),
          (64, 128, 28, 28, 128, 3, 1, 1), (32, 64, 56, 56, 256, 1, 1, 0),
          (32, 128, 28, 28, 128, 3, 2, 1), (8, 37, 33, 31, 45, 3, 2, 1)]
#: the direct kernel is slow; it is timed on this many layers only (the first)
DIRECT_LAYERS = 1


def channels_last(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous(memory_format=torch.channels_last)


def compare_layer(layer, level: int, with_direct: bool) -> dict:
    N, C, H, W, K, R, stride, padding = layer
    torch.manual_seed(0)
    x = channels_last(torch.randn(N, C, H, W, device="cuda", dtype=torch.float16))
    w = channels_last(torch.randn(K, C, R, R, device="cuda", dtype=torch.float16)
                      / (C * R * R) ** 0.5)
    x_nchw, w_nchw = x.contiguous(), w.contiguous()
    P, Q = conv.check_conv_inputs(x, w, stride, padding)
    y = torch.empty((N, K, P, Q), device="cuda", dtype=x.dtype, memory_format=torch.channels_last)
    result = tune.autotune(conv.conv2d_kernel, conv.conv_problem(x, w, stride, padding, 1),
                           conv.CONV_SPACE,
                           lambda c: conv.launch_conv2d(x, w, y, stride, padding, 1, c),
                           level=level)
    print(result.table())
    fns = {"cuDNN channels_last": lambda: F.conv2d(x, w, stride=stride, padding=padding),
           "cuDNN NCHW": lambda: F.conv2d(x_nchw, w_nchw, stride=stride, padding=padding),
           "im2col + cuBLAS": lambda: conv.im2col_conv2d(x, w, stride, padding),
           "reference default": lambda: conv.conv2d(x, w, stride, padding),
           "reference autotuned": lambda: conv.conv2d(x, w, stride, padding, config=result.config)}
    if with_direct:
        fns["direct kernel"] = lambda: conv.direct_conv2d(x, w, stride, padding)
    expected = F.conv2d(x.float(), w.float(), stride=stride, padding=padding)
    errors = {name: ((fn().float() - expected).norm() / expected.norm()).item()
              for name, fn in fns.items()}
    flops = conv.conv_flops(x, w, P, Q)
    results = bench.compare(fns, flops=flops, rep_ms=1000)
    title = f"N{N} C{C} {H}x{W} K{K} {R}x{R} stride {stride} pad {padding} float16"
    print("==", title)
    bench.print_table(results, baseline="cuDNN channels_last")
    unfolded = conv.im2col(x, R, R, stride, padding)
    return {"layer": title, "tuned_config": dict(result.config), "search_s": result.seconds,
            "level": level, "flops": flops, "input_bytes": x.nbytes,
            "unfolded_bytes": unfolded.nbytes,
            "results": {m.name: {"median_ms": m.median_ms, "tflops": m.tflops,
                                 "rel_error": errors[m.name], "runs": m.runs,
                                 "sm_clock_mhz": m.sm_clock_mhz} for m in results}}


def main() -> None:
    parser = options(__doc__)
    parser.add_argument("--level", type=int, default=1)
    args = parser.parse_args()
    record = {**header(), "cudnn": torch.backends.cudnn.version(),
              "layers": [compare_layer(layer, args.level, i < DIRECT_LAYERS)
                         for i, layer in enumerate(LAYERS)]}
    finish(record, args.out)


if __name__ == "__main__":
    main()
