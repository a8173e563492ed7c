"""The Gluon implicit-GEMM convolution (reference/conv_hopper.py) against cuDNN and lesson 05's
kernel, on a GPU of compute capability 9.x: every configuration of HOPPER_CONV_CONFIGS on the
layers of benchmarks/conv_shapes.py's families it takes (ResNet-50's 3x3 layers at batch 32 and
64, 1x1 layers, strided layers, odd kernel sizes), fp16 channels_last, and in bfloat16. Each
configuration is checked against float32 PyTorch before it is timed; every side a CUDA graph,
each side's best median of interleaved runs, L2 flushed. Each side's time a call when called
eagerly, back to back (what the host's launch costs), is recorded beside it.

    python benchmarks/conv_hopper.py --out conv-hopper.json
    python benchmarks/conv_hopper.py --families "ResNet-50 3x3" --dtypes bfloat16
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import math
import time

import torch
import torch.nn.functional as F

from conv_groups import channels_last
from conv_shapes import FAMILIES
from record import finish, header, options, write
from tilegym_edu import bench
from tilegym_edu.reference import conv_hopper
from tilegym_edu.reference import convolution as conv


def eager_ms(fn, calls: int = 200) -> float:
    """Milliseconds a call when called back to back without a CUDA graph: the host's launch
    time where it exceeds the GPU's work."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3 / calls


def measure(layer, dtype: torch.dtype) -> dict:
    N, C, H, W, K, R, stride, padding = layer
    torch.manual_seed(0)
    x = channels_last(torch.randn(N, C, H, W, device="cuda", dtype=dtype))
    w = channels_last(torch.randn(K, C, R, R, device="cuda", dtype=dtype) / (C * R * R) ** 0.5)
    P, Q = conv.check_conv_inputs(x, w, stride, padding)
    refused = conv_hopper.hopper_conv_problem(x, w, stride)
    if refused:
        print(f"== N{N} C{C} {H}x{W} K{K} {R}x{R} stride {stride}: {refused}")
        return {"layer": list(layer), "refused": refused}
    fns = {"cuDNN channels_last": lambda: F.conv2d(x, w, stride=stride, padding=padding),
           "lesson 05 default": lambda: conv.conv2d(x, w, stride, padding)}
    checked = {}  # the Gluon kernels checked writing into NaNs: a fresh output can hold the
    # last kernel's right answer (the caching allocator hands the same memory back)
    for config in conv_hopper.HOPPER_CONV_CONFIGS:
        options = dict(zip(conv_hopper.HOPPER_CONV_NAMES, config))
        fns[f"gluon {config}"] = lambda options=options: conv_hopper.launch_hopper_conv2d(
            x, w, conv.new_output(x, K, P, Q), stride, padding, 1, options)
        checked[f"gluon {config}"] = lambda options=options: conv_hopper.launch_hopper_conv2d(
            x, w, conv.new_output(x, K, P, Q).fill_(math.nan), stride, padding, 1, options)
    expected = F.conv2d(x.float(), w.float(), stride=stride, padding=padding)
    errors = {n: ((checked.get(n, fn)().float() - expected).norm() / expected.norm()).item()
              for n, fn in fns.items()}
    wrong = [n for n, e in errors.items() if not e < 1e-2]
    for name in wrong:
        print(f"WRONG: {name} relative error {errors[name]:.2e}")
        del fns[name]
    results = bench.compare(fns, flops=conv.conv_flops(x, w, P, Q), rep_ms=200,
                            graph_below_ms=math.inf)
    eager = {m.name: eager_ms(fns[m.name]) for m in results}
    title = (f"N{N} C{C} {H}x{W} K{K} {R}x{R} stride {stride} pad {padding} "
             f"{str(dtype).removeprefix('torch.')}")
    print("==", title, "box", conv_hopper.box_shape(128, N, P, Q))
    bench.print_table(results, baseline="cuDNN channels_last")
    print("eager, ms a call (host and GPU, no graph):",
          {name: round(ms, 4) for name, ms in eager.items()})
    cudnn = next(m for m in results if m.name == "cuDNN channels_last")
    return {"layer": title, "shape": list(layer), "wrong": wrong,
            "results": {m.name: {"median_ms": m.median_ms, "tflops": m.tflops,
                                 "vs_cudnn": cudnn.median_ms / m.median_ms,
                                 "rel_error": errors[m.name], "runs": m.runs,
                                 "eager_ms_per_call": eager[m.name],
                                 "cuda_graph": m.cuda_graph,
                                 "sm_clock_mhz": m.sm_clock_mhz} for m in results}}


def main() -> None:
    parser = options(__doc__)
    parser.add_argument("--families", nargs="*", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--dtypes", nargs="*", default=["float16"],
                        choices=["float16", "bfloat16"])
    args = parser.parse_args()
    record = {**header(stamp=True), "cudnn": torch.backends.cudnn.version(),
              "configs": [list(c) for c in conv_hopper.HOPPER_CONV_CONFIGS], "rows": []}
    for dtype in args.dtypes:
        for family in args.families:
            for layer in FAMILIES[family][0]:
                record["rows"].append({"family": family,
                                       **measure(layer, getattr(torch, dtype))})
                write(record, args.out)
    finish(record, args.out)


if __name__ == "__main__":
    main()
