"""What else was tried for lesson 05's implicit GEMM, and what it measured: the record behind
"what limits the reference" in docs/results/h200.md. Each variant is tuned over the same
configurations (level 1 of its own space) on the issue's three ResNet 3x3 layers (float16,
channels_last) and timed against cuDNN and the reference kernel in one run:

* "no channel mask": the reference kernel with the ``c < C`` masks compiled out when C is a
  multiple of BLOCK_K (fewer instructions per K step);
* "persistent": one program per SM walking over output tiles, the tile loop flattened into
  the K loop (what lifted lesson 03's K=512 matmul from 0.82x to 0.97x of cuBLAS);
* "TMA shifted window": for stride-1 "same" convolutions the input rows output pixels
  m0 .. m0+BLOCK_M-1 need at filter tap (r, s) are one contiguous block of x viewed as
  (N·H·W, C), so A's tile is one tensor-descriptor (TMA) load; rows that crossed an image
  edge are zeroed after the load.

    python benchmarks/convolution_variants.py --out convolution-variants.json
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from tilegym_edu import bench, device, tune
from tilegym_edu.reference import convolution as conv
from tilegym_edu.tiles import grouped_tile

from record import finish, header, options

LAYERS = [(32, 64, 56, 56, 64), (32, 256, 14, 14, 256), (64, 128, 28, 28, 128)]  # 3x3, pad 1


@triton.jit
def variant_kernel(x_ptr, w_ptr, y_ptr, N, H, W, C, K, P, Q,
                   R: tl.constexpr, S: tl.constexpr, STRIDE: tl.constexpr, PAD: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   GROUP_M: tl.constexpr, EVEN_C: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
                   FLATTEN: tl.constexpr):
    """The reference conv2d_kernel with two switches: EVEN_C drops the channel masks;
    NUM_PROGRAMS > 0 makes it persistent (programs step through tiles NUM_PROGRAMS apart,
    the tile loop flattened into the K loop when FLATTEN)."""
    M = N * P * Q
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(K, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    offs_k = tl.arange(0, BLOCK_K)
    c_blocks = tl.cdiv(C, BLOCK_K)
    if NUM_PROGRAMS > 0:
        start = tl.program_id(0)
        step = NUM_PROGRAMS
        end = num_tiles
    else:
        start = tl.program_id(0)
        step = 1
        end = start + 1
    for tile in tl.range(start, end, step, flatten=FLATTEN):
        pid_m, pid_n = grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M)
        offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
        offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % K
        n = offs_m // (P * Q)
        p = (offs_m // Q) % P
        q = offs_m % Q
        h0 = p * STRIDE - PAD
        w0 = q * STRIDE - PAD
        x_rows = x_ptr + ((n * H + h0) * W + w0) * C
        w_cols = w_ptr + offs_n * (R * S * C)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for i in range(0, R * S * c_blocks):
            rs = i // c_blocks
            c = (i % c_blocks) * BLOCK_K + offs_k
            r = rs // S
            s = rs % S
            h = h0 + r
            w = w0 + s
            row_ok = (h >= 0) & (h < H) & (w >= 0) & (w < W)
            if EVEN_C:
                a = tl.load(x_rows[:, None] + (r * W + s) * C + c[None, :],
                            mask=row_ok[:, None], other=0.0)
                b = tl.load(w_cols[None, :] + rs * C + c[:, None])
            else:
                a = tl.load(x_rows[:, None] + (r * W + s) * C + c[None, :],
                            mask=row_ok[:, None] & (c[None, :] < C), other=0.0)
                b = tl.load(w_cols[None, :] + rs * C + c[:, None], mask=c[:, None] < C,
                            other=0.0)
            acc = tl.dot(a, b, acc)
        offs_ym = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_yn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        tl.store(y_ptr + offs_ym[:, None] * K + offs_yn[None, :], acc.to(y_ptr.dtype.element_ty),
                 mask=(offs_ym[:, None] < M) & (offs_yn[None, :] < K))


def output_tiles(y, cfg) -> int:
    """How many BLOCK_M x BLOCK_N tiles cover the output: y (N, K, P, Q) seen as the implicit
    GEMM's (N·P·Q, K) matrix."""
    N, K, P, Q = y.shape
    return triton.cdiv(N * P * Q, cfg["BLOCK_M"]) * triton.cdiv(K, cfg["BLOCK_N"])


def launch_variant(x, w, y, stride, pad, cfg):
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    P, Q = y.shape[2], y.shape[3]
    cfg = dict(cfg)
    persistent, per_sm = cfg.pop("PERSISTENT"), cfg.pop("PER_SM")
    tiles = output_tiles(y, cfg)
    programs = min(tiles, device.info().sm_count * per_sm) if persistent else 0
    grid = (programs if persistent else tiles,)
    variant_kernel[grid](x, w, y, N, H, W, C, K, P, Q, R=R, S=S, STRIDE=stride, PAD=pad,
                         EVEN_C=C % cfg["BLOCK_K"] == 0, NUM_PROGRAMS=programs, **cfg)
    return y


@triton.jit
def conv_shift_kernel(x_desc, w_desc, y_ptr, N, H, W, C, K,
                      R: tl.constexpr, S: tl.constexpr, PAD: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr):
    """Stride-1 'same' convolution (P == H, Q == W): the input rows that output pixels
    m0..m0+BLOCK_M-1 need at (r, s) are rows m0 + (r-PAD)*W + (s-PAD) onward of x viewed as
    (N*H*W, C): one TMA tile. Rows that crossed an image edge are zeroed after the load."""
    pid = tl.program_id(0)
    M = N * H * W
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(K, BLOCK_N)
    pid_m, pid_n = grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    p = (offs_m // W) % H
    q = offs_m % W
    c_blocks = tl.cdiv(C, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for i in tl.range(0, R * S * c_blocks):
        rs = i // c_blocks
        c0 = (i % c_blocks) * BLOCK_K
        r = rs // S
        s = rs % S
        h = p + r - PAD
        w = q + s - PAD
        row_ok = (h >= 0) & (h < H) & (w >= 0) & (w < W)
        a = x_desc.load([pid_m * BLOCK_M + (r - PAD) * W + (s - PAD), c0])
        a = tl.where(row_ok[:, None], a, 0.0)
        b = w_desc.load([pid_n * BLOCK_N, rs * C + c0])
        acc = tl.dot(a, b.T, acc)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(y_ptr + offs_m[:, None] * K + offs_n[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < K))


def launch_shift(x, w, y, stride, pad, cfg):
    assert stride == 1 and y.shape[2:] == x.shape[2:]     # stride 1, "same": P == H, Q == W
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    x2 = x.permute(0, 2, 3, 1).reshape(N * H * W, C)
    w2 = w.permute(0, 2, 3, 1).reshape(K, R * S * C)
    assert x2.data_ptr() == x.data_ptr() and w2.data_ptr() == w.data_ptr()
    x_desc = TensorDescriptor.from_tensor(x2, [cfg["BLOCK_M"], cfg["BLOCK_K"]])
    w_desc = TensorDescriptor.from_tensor(w2, [cfg["BLOCK_N"], cfg["BLOCK_K"]])
    grid = (output_tiles(y, cfg),)
    conv_shift_kernel[grid](x_desc, w_desc, y, N, H, W, C, K, R=R, S=S, PAD=pad, **cfg)
    return y


def level1(extra: dict, options=({},)) -> tune.SearchSpace:
    """The reference's level-1 configurations, each with every combination in ``options``."""
    configs = [tune.Config(**dict(c), **extra, **o) for c in conv.CONV_SPACE.configs(1)
               for o in options]
    return tune.SearchSpace(default=configs[0], small=configs[1:])


VARIANTS = {
    "reference": (conv.conv2d_kernel, level1({}),
                  lambda x, w, y, cfg: conv.launch_conv2d(x, w, y, 1, 1, 1, cfg)),
    "no channel mask": (variant_kernel, level1(dict(PERSISTENT=False, FLATTEN=False, PER_SM=1)),
                        lambda x, w, y, cfg: launch_variant(x, w, y, 1, 1, cfg)),
    "persistent": (variant_kernel,
                   level1(dict(PERSISTENT=True), ({"FLATTEN": True, "PER_SM": 1},
                                                  {"FLATTEN": False, "PER_SM": 1},
                                                  {"FLATTEN": True, "PER_SM": 2})),
                   lambda x, w, y, cfg: launch_variant(x, w, y, 1, 1, cfg)),
    "TMA shifted window": (conv_shift_kernel, level1({}),
                           lambda x, w, y, cfg: launch_shift(x, w, y, 1, 1, cfg)),
}


def main() -> None:
    args = options(__doc__).parse_args()
    record = {**header(), "layers": {}}
    for N, C, H, W, K in LAYERS:
        torch.manual_seed(0)
        x = torch.randn(N, C, H, W, device="cuda", dtype=torch.float16).contiguous(
            memory_format=torch.channels_last)
        w = (torch.randn(K, C, 3, 3, device="cuda", dtype=torch.float16) / (9 * C) ** 0.5
             ).contiguous(memory_format=torch.channels_last)
        expected = F.conv2d(x.float(), w.float(), padding=1)
        y = torch.empty((N, K, H, W), device="cuda", dtype=x.dtype,
                        memory_format=torch.channels_last)
        fns = {"cuDNN channels_last": lambda: F.conv2d(x, w, padding=1)}
        entry = {}
        for name, (kernel, space, launch) in VARIANTS.items():
            problem = {**conv.conv_problem(x, w, 1, 1, 1), "variant": name}
            result = tune.autotune(kernel, problem, space, lambda c: launch(x, w, y, c),
                                   progress=False)
            y.fill_(float("nan"))
            launch(x, w, y, result.config)
            error = ((y.float() - expected).norm() / expected.norm()).item()
            fns[name] = lambda launch=launch, config=result.config: launch(x, w, y, config)
            entry[name] = {"config": dict(result.config), "rel_error": error}
        title = f"N{N} C{C} {H}x{W} K{K} 3x3 pad 1 float16"
        results = bench.compare(fns, flops=2 * N * K * H * W * C * 9, rep_ms=1000)
        print("==", title)
        bench.print_table(results, baseline="cuDNN channels_last")
        cudnn = next(m for m in results if m.name == "cuDNN channels_last")
        for m in results:
            entry.setdefault(m.name, {}).update(tflops=m.tflops,
                                                vs_cudnn=cudnn.median_ms / m.median_ms)
        record["layers"][title] = entry
    finish(record, args.out, clock_after=False)


if __name__ == "__main__":
    main()
