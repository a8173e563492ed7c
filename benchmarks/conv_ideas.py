"""Ideas for the convolution layers still below issue 19's bar on the H200, measured against
cuDNN and the course's kernel for the layer (tuned at level 1), fp16 channels_last, every side a
CUDA graph:

* ``depthwise, channels fastest``: the depthwise kernel of reference/conv_groups.py with a 1-D
  grid whose program ids take the channel blocks of one block of pixels first, then the next
  pixels. The 2-D grid runs every block of pixels for channels 0-15 before any for channels
  16-31, so at C = 144 each of the 9 passes over the input reads 32 bytes of every 288-byte
  pixel row; in this order the programs that run together read whole rows.

Ideas measured here before and dropped or kept (records in docs/results/):

* ``stem rows`` (run u of 2026-12-02): the stem's input padded in space and to 4 channels,
  1.06-1.08x cuDNN; it became reference/conv_stem.py.
* ``flat depthwise`` (run u): one flat run of N·P·Q·C elements a program; slower than the 2-D
  kernel on every layer (0.37-0.81x cuDNN against 0.68-1.06x) and dropped.
* ``box`` (run w, h200-2026-12-02-conv-box.json): lesson 05's implicit GEMM with each tap's input
  tile one TMA box of x, a 5-D descriptor over the (N, H / sh, sh, W / sw, sw·C) view with the
  tile BOX_N images x BOX_P x BOX_Q pixels, the padding the hardware's zero fill, persistent
  like the 1x1 kernel, raced in shape_conv2d. Right everywhere (2.1e-4 in fp16), slower than
  lesson 05's kernel on every one-group layer of the suite: 0.43-0.73x cuDNN on ResNet-50's 3x3
  layers (lesson 05: 0.60-0.95), 0.65-0.87 on 1x1, 0.57-0.84 strided, 0.45-0.68 on odd kernels.
  Its Triton IR says why: the 5-D tile, reshaped to (BLOCK_M, BLOCK_K) for tl.dot, goes from
  shared memory into registers and through two layout conversions before each wgmma, which then
  takes A from registers in two halves of K with a wait between; a 2-D tile would feed the
  tensor cores straight from shared memory. Dropped.

Each variant runs on the depthwise search space's level-1 configurations; its best is timed. A
variant that is wrong against float32 PyTorch is recorded so. Prints tables; writes JSON with
--out.

    python benchmarks/conv_ideas.py --out conv-ideas.json
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from conv_groups import LAYERS, channels_last, ours
from record import finish, header, options, write
from tilegym_edu import bench, tune
from tilegym_edu.reference.conv_groups import DEPTHWISE_TILES_SPACE
from tilegym_edu.reference import convolution as conv


@triton.jit
def channels_first_depthwise_kernel(x_ptr, w_ptr, y_ptr, N, H, W, C, K, P, Q, R,
                                    S: tl.constexpr, MULT: tl.constexpr, STRIDE_H, STRIDE_W,
                                    PAD_H, PAD_W, DIL_H, DIL_W, BLOCK_M: tl.constexpr,
                                    BLOCK_C: tl.constexpr):
    """conv_groups.depthwise_conv2d_kernel on a 1-D grid: program pid takes channel block
    pid % cdiv(K, BLOCK_C) of pixel block pid // cdiv(K, BLOCK_C)."""
    c_blocks = tl.cdiv(K, BLOCK_C)
    pid = tl.program_id(0)
    M = N * P * Q
    offs_m = (pid // c_blocks) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = (pid % c_blocks) * BLOCK_C + tl.arange(0, BLOCK_C)
    m_ok, k_ok = offs_m < M, offs_k < K
    n = offs_m // (P * Q)
    h0 = ((offs_m // Q) % P) * STRIDE_H - PAD_H
    w0 = (offs_m % Q) * STRIDE_W - PAD_W
    x_rows = x_ptr + n * (H * W * C)
    c = offs_k // MULT
    acc = tl.zeros((BLOCK_M, BLOCK_C), dtype=tl.float32)
    for tap in tl.range(0, R * S):
        h = h0 + (tap // S) * DIL_H
        w = w0 + (tap % S) * DIL_W
        ok = m_ok & (h >= 0) & (h < H) & (w >= 0) & (w < W)
        a = tl.load(x_rows[:, None] + (h * W + w)[:, None] * C + c[None, :],
                    mask=ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(w_ptr + offs_k * (R * S) + tap, mask=k_ok, other=0.0)
        acc += a.to(tl.float32) * b.to(tl.float32)[None, :]
    tl.store(y_ptr + offs_m[:, None] * K + offs_k[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=m_ok[:, None] & k_ok[None, :])


def channels_first_depthwise(x, w, stride, padding, config):
    """y = depthwise conv2d(x, w) on channels_first_depthwise_kernel with ``config``."""
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    P, Q = conv.check_conv_inputs(x, w, stride, padding, 1, C)
    y = conv.new_output(x, K, P, Q)
    grid = (triton.cdiv(N * P * Q, config["BLOCK_M"]) * triton.cdiv(K, config["BLOCK_C"]),)
    channels_first_depthwise_kernel[grid](x, w, y, N, H, W, C, K, P, Q, R, S, K // C, stride,
                                          stride, padding, padding, 1, 1, **config)
    return y


DEPTHWISE_CONFIGS = DEPTHWISE_TILES_SPACE.configs(1)


def best_of(run, configs, expected) -> tuple[dict, dict]:
    """The fastest correct configuration of run(config), and every configuration's outcome."""
    outcomes, best = {}, None
    for config in configs:
        label = ",".join(f"{k}={v}" for k, v in config.items())
        try:
            error = ((run(config).float() - expected).norm() / expected.norm()).item()
        except Exception as exc:                     # noqa: BLE001 (recorded, not hidden)
            outcomes[label] = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
            continue
        if not error < 1e-2:
            outcomes[label] = f"wrong: relative error {error:.2e}"
            continue
        (m,) = bench.compare({"x": lambda: run(config)}, rep_ms=300, graph_below_ms=math.inf)
        outcomes[label] = {"median_ms": m.median_ms, "rel_error": error}
        if best is None or m.median_ms < best[1]:
            best = (config, m.median_ms)
    return (best[0] if best else None), outcomes


def compare_layer(layer) -> dict:
    name, N, C, H, W, K, groups, R, stride, padding = layer
    torch.manual_seed(0)
    x = channels_last(torch.randn(N, C, H, W, device="cuda", dtype=torch.float16))
    w = channels_last(torch.randn(K, C // groups, R, R, device="cuda", dtype=torch.float16)
                      / (C // groups * R * R) ** 0.5)
    kernel, space, launch = ours(x, w, stride, padding, groups)
    problem = {**conv.conv_problem(x, w, stride, padding, 1), "groups": groups}
    tuned = tune.autotune(kernel, problem, space, launch, level=1)
    expected = F.conv2d(x.float(), w.float(), stride=stride, padding=padding, groups=groups)
    idea, run, configs = "depthwise, channels fastest", channels_first_depthwise, \
        DEPTHWISE_CONFIGS
    best, outcomes = best_of(lambda c: run(x, w, stride, padding, c), configs, expected)
    fns = {"cuDNN channels_last": lambda: F.conv2d(x, w, stride=stride, padding=padding,
                                                   groups=groups),
           "reference tuned": lambda: launch(tuned.config)}
    if best is not None:
        fns[idea] = lambda: run(x, w, stride, padding, best)
    P, Q = expected.shape[2:]
    flops = 2 * N * K * P * Q * (C // groups) * R * R
    moved = x.nbytes + w.nbytes + expected.numel() * x.element_size()
    results = bench.compare(fns, flops=flops, bytes=moved, rep_ms=1000,
                            graph_below_ms=math.inf)
    title = f"{name}: N{N} C{C} {H}x{W} K{K} groups {groups} {R}x{R} stride {stride}"
    print("==", title)
    bench.print_table(results, baseline="cuDNN channels_last")
    return {"layer": title, "tuned_config": dict(tuned.config), "idea": idea,
            "idea_config": dict(best) if best else None, "idea_outcomes": outcomes,
            "results": {m.name: {"median_ms": m.median_ms, "tflops": m.tflops, "gbs": m.gbs,
                                 "runs": m.runs, "cuda_graph": m.cuda_graph,
                                 "sm_clock_mhz": m.sm_clock_mhz} for m in results}}


#: the depthwise layers of benchmarks/conv_groups.py
IDEA_LAYERS = [layer for layer in LAYERS if layer[6] == layer[2]]


def main() -> None:
    args = options(__doc__).parse_args()
    record = {**header(), "cudnn": torch.backends.cudnn.version(), "layers": []}
    for layer in IDEA_LAYERS:
        record["layers"].append(compare_layer(layer))
        write(record, args.out)
    finish(record, args.out)


if __name__ == "__main__":
    main()
