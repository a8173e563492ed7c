"""Kernels of lesson 05: 2-D convolution, direct and as an implicit GEMM, on NHWC data.

Shapes (PyTorch's names, cross-correlation as F.conv2d computes it, no groups, no bias):

* ``x``: (N, C, H, W) input in channels_last memory, so its elements lie in N, H, W, C order
  and element (n, c, h, w) sits at ``((n * H + h) * W + w) * C + c``;
* ``w``: (K, C, R, S) filters in channels_last memory (K, R, S, C order);
* ``y``: (N, K, P, Q) output in channels_last memory, with
  ``P = (H + 2 * pad_h - dil_h * (R - 1) - 1) // stride_h + 1`` and likewise Q.

As a matrix product (the *GEMM view*): y is the (N·P·Q, K) matrix ``A @ B``, where row
m = (n, p, q) of A holds the R·S·C input elements output pixel m sees, in (r, s, c) order (the
*im2col* matrix), and B is (R·S·C, K), column k holding filter k in the same order. The implicit
GEMM kernel computes that product without ever writing A: it gathers A's tiles from x as it goes.
float16 or float32 in, float32 accumulation, output in the input's dtype.
"""
from typing import Mapping, Sequence

import torch
import triton
import triton.language as tl

from tilegym_edu.grading import forbidden_in_graded_calls
from tilegym_edu.reference.pipelined import matmul_prune
from tilegym_edu.tiles import grouped_tile
from tilegym_edu.tune import TILE_NAMES, Config, SearchSpace, autotune, configs_from_rows

Pair = int | Sequence[int]


def pair(value: Pair, name: str) -> tuple[int, int]:
    """(height, width) from an int or a pair of ints, as F.conv2d takes stride and padding."""
    values = (value, value) if isinstance(value, int) else tuple(value)
    if len(values) != 2 or not all(isinstance(v, int) for v in values):
        raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}")
    return values


def geometry(stride: Pair, padding: Pair, dilation: Pair
             ) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """((stride_h, stride_w), (pad_h, pad_w), (dil_h, dil_w)) from ints or pairs."""
    return pair(stride, "stride"), pair(padding, "padding"), pair(dilation, "dilation")


def output_size(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    """Output length along one axis: positions where the (dilated) kernel fits in the padded
    input, taking every stride-th one."""
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def check_conv_inputs(x: torch.Tensor, w: torch.Tensor, stride: Pair = 1, padding: Pair = 0,
                      dilation: Pair = 1, groups: int = 1) -> tuple[int, int]:
    """Raise ValueError with what to do unless x and w can go to the NHWC kernels (with
    ``groups`` groups, w is (K, C // groups, R, S), as for F.conv2d); return the output size
    (P, Q)."""
    if x.dim() != 4 or w.dim() != 4:
        raise ValueError(f"x must be (N, C, H, W) and w (K, C, R, S); got shapes "
                         f"{tuple(x.shape)} and {tuple(w.shape)}")
    if not isinstance(groups, int) or groups < 1:
        raise ValueError(f"groups must be a positive int, got {groups!r}")
    if x.shape[1] % groups or w.shape[0] % groups:
        raise ValueError(f"groups={groups} must divide both the {x.shape[1]} input channels "
                         f"and the {w.shape[0]} output channels")
    if x.shape[1] != w.shape[1] * groups:
        wanted = "(K, C, R, S): out channels first" if groups == 1 else (
            f"(K, C // groups, R, S) = (K, {x.shape[1] // groups}, R, S) with groups={groups}")
        raise ValueError(f"x has {x.shape[1]} channels but w is {tuple(w.shape)}: w must be "
                         f"{wanted}")
    if x.dtype != w.dtype or x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"x and w must share one dtype of float16, bfloat16, float32; got "
                         f"{x.dtype} and {w.dtype}")
    if x.device != w.device:
        raise ValueError(f"x is on {x.device} and w on {w.device}: move both to one device")
    for name, t in (("x", x), ("w", w)):
        if not t.is_contiguous(memory_format=torch.channels_last):
            raise ValueError(f"{name} is not in channels_last (NHWC) memory: the kernel indexes "
                             f"it as N, H, W, C; call {name}.to(memory_format="
                             f"torch.channels_last) once, outside the timed code")
    (sh, sw), (ph, pw), (dh, dw) = geometry(stride, padding, dilation)
    if min(sh, sw, dh, dw) < 1 or min(ph, pw) < 0:
        raise ValueError(f"stride and dilation must be >= 1 and padding >= 0; got stride "
                         f"{(sh, sw)}, padding {(ph, pw)}, dilation {(dh, dw)}")
    P = output_size(x.shape[2], w.shape[2], sh, ph, dh)
    Q = output_size(x.shape[3], w.shape[3], sw, pw, dw)
    if P < 1 or Q < 1:
        raise ValueError(f"the {w.shape[2]}x{w.shape[3]} kernel does not fit the "
                         f"{x.shape[2]}x{x.shape[3]} input with padding {(ph, pw)} and dilation "
                         f"{(dh, dw)}: the output would be {P}x{Q}")
    return P, Q


def new_output(x: torch.Tensor, K: int, P: int, Q: int) -> torch.Tensor:
    """A new y (N, K, P, Q) for input x, in x's dtype and on its device, channels_last: what
    every kernel here writes."""
    return torch.empty((x.shape[0], K, P, Q), device=x.device, dtype=x.dtype,
                       memory_format=torch.channels_last)


def im2col(x: torch.Tensor, R: int, S: int, stride: Pair = 1, padding: Pair = 0,
           dilation: Pair = 1) -> torch.Tensor:
    """The (N·P·Q, R·S·C) im2col matrix of an NHWC x, rows in (n, p, q) order, columns in
    (r, s, c) order; padding reads as zeros. Built with PyTorch (pad, then a strided view of
    every window, then one copy): the memory it costs is the point."""
    (sh, sw), (ph, pw), (dh, dw) = geometry(stride, padding, dilation)
    N, C, H, W = x.shape
    P, Q = output_size(H, R, sh, ph, dh), output_size(W, S, sw, pw, dw)
    padded = torch.nn.functional.pad(x.permute(0, 2, 3, 1), (0, 0, pw, pw, ph, ph))
    sn, shh, sww, sc = padded.stride()
    windows = padded.as_strided((N, P, Q, R, S, C),
                                (sn, sh * shh, sw * sww, dh * shh, dw * sww, sc))
    return windows.reshape(N * P * Q, R * S * C)


def filters_as_matrix(w: torch.Tensor) -> torch.Tensor:
    """w (K, C, R, S) as the (K, R·S·C) matrix whose row k is filter k in (r, s, c) order; a
    view, no copy, when w is channels_last."""
    K, C, R, S = w.shape
    return w.permute(0, 2, 3, 1).reshape(K, R * S * C)


def im2col_conv2d(x: torch.Tensor, w: torch.Tensor, stride: Pair = 1, padding: Pair = 0,
                  dilation: Pair = 1) -> torch.Tensor:
    """Convolution as im2col + one cuBLAS matmul: y (N, K, P, Q), channels_last."""
    P, Q = check_conv_inputs(x, w, stride, padding, dilation)
    N, K = x.shape[0], w.shape[0]
    a = im2col(x, w.shape[2], w.shape[3], stride, padding, dilation)
    y = a @ filters_as_matrix(w).t()
    return y.view(N, P, Q, K).permute(0, 3, 1, 2)


@triton.jit
def direct_conv2d_kernel(x_ptr, w_ptr, y_ptr, N, H, W, C, K, P, Q,
                         R: tl.constexpr, S: tl.constexpr,
                         STRIDE_H: tl.constexpr, STRIDE_W: tl.constexpr,
                         PAD_H: tl.constexpr, PAD_W: tl.constexpr,
                         DIL_H: tl.constexpr, DIL_W: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The loop nest as written: each program owns BLOCK_M output pixels x BLOCK_N output
    channels and adds one input value times one filter value per (r, s, c) step, on the CUDA
    cores (an outer product per step, no tl.dot). x, w, y as in the module docstring."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = offs_m < N * P * Q
    n_ok = offs_n < K
    n = offs_m // (P * Q)
    p = (offs_m // Q) % P
    q = offs_m % Q
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for r in range(R):
        for s in range(S):
            h = p * STRIDE_H - PAD_H + r * DIL_H
            w = q * STRIDE_W - PAD_W + s * DIL_W
            row_ok = m_ok & (h >= 0) & (h < H) & (w >= 0) & (w < W)
            for c in range(C):
                xv = tl.load(x_ptr + ((n * H + h) * W + w) * C + c, mask=row_ok, other=0.0)
                wv = tl.load(w_ptr + ((offs_n * R + r) * S + s) * C + c, mask=n_ok, other=0.0)
                acc += xv.to(tl.float32)[:, None] * wv.to(tl.float32)[None, :]
    tl.store(y_ptr + offs_m[:, None] * K + offs_n[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=m_ok[:, None] & n_ok[None, :])


#: the direct kernel's block sizes: BLOCK_M output pixels x BLOCK_N output channels a program
DIRECT_DEFAULT = dict(BLOCK_M=64, BLOCK_N=32)


@forbidden_in_graded_calls
def direct_conv2d(x: torch.Tensor, w: torch.Tensor, stride: Pair = 1, padding: Pair = 0,
                  dilation: Pair = 1, config: Mapping[str, int] | None = None) -> torch.Tensor:
    """y = F.conv2d(x, w, ...) with the direct kernel; x, w channels_last, y channels_last.
    ``config`` overrides DIRECT_DEFAULT's block sizes."""
    options = {**DIRECT_DEFAULT, **(config or {})}
    P, Q = check_conv_inputs(x, w, stride, padding, dilation)
    (sh, sw), (ph, pw), (dh, dw) = geometry(stride, padding, dilation)
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    y = new_output(x, K, P, Q)
    grid = (triton.cdiv(N * P * Q, options["BLOCK_M"]), triton.cdiv(K, options["BLOCK_N"]))
    direct_conv2d_kernel[grid](x, w, y, N, H, W, C, K, P, Q, R=R, S=S, STRIDE_H=sh,
                               STRIDE_W=sw, PAD_H=ph, PAD_W=pw, DIL_H=dh, DIL_W=dw, **options)
    return y


@triton.jit(do_not_specialize=["N", "H", "W", "P", "Q", "R", "STRIDE_H", "STRIDE_W",
                               "PAD_H", "PAD_W", "DIL_H", "DIL_W"])
def conv2d_kernel(x_ptr, w_ptr, y_ptr, N, H, W, C, K, P, Q, R, S: tl.constexpr,
                  STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H, DIL_W,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr):
    """Implicit GEMM: one BLOCK_M x BLOCK_N tile of y = A @ B per program (output pixels x
    output channels), grouped ordering as in lesson 02. The K loop is one flat tl.range over
    (r, s, channel block), so the compiler pipelines all R·S·ceil(C / BLOCK_K) steps, however
    few channels there are. Each step gathers a BLOCK_M x BLOCK_K tile of A straight from x:
    row m reads BLOCK_K consecutive channels of input pixel (h, w), or zeros where (h, w) is
    in the padding; and loads the matching BLOCK_K x BLOCK_N tile of B from w.
    Which input pixel each output row starts from (h0, w0) is worked out once, before the loop.
    Rows and columns past the edge wrap around (% M, % K) rather than being masked; their
    results are never stored. The layer's sizes and geometry are plain arguments that Triton
    does not specialize on (do_not_specialize), so one compiled kernel per dtype, filter width,
    channel alignment and block configuration serves every layer. C and K keep their
    specialization (a multiple of 16 lets loads and stores use 16-byte vectors), and the filter
    width S stays a constexpr: every step divides by it, and a division by a constant compiles
    to a multiply and a shift."""
    pid = tl.program_id(0)
    M = N * P * Q
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(K, BLOCK_N)
    pid_m, pid_n = grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M)

    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % K
    offs_k = tl.arange(0, BLOCK_K)
    n = offs_m // (P * Q)
    p = (offs_m // Q) % P
    q = offs_m % Q
    h0 = p * STRIDE_H - PAD_H
    w0 = q * STRIDE_W - PAD_W
    x_rows = x_ptr + ((n * H + h0) * W + w0) * C        # pixel (h0, w0), channel 0, per row
    w_cols = w_ptr + offs_n * (R * S * C)                # filter k, (r, s, c) = 0, per column
    c_blocks = tl.cdiv(C, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for i in tl.range(0, R * S * c_blocks):
        rs = i // c_blocks
        r = rs // S
        s = rs % S
        c = (i % c_blocks) * BLOCK_K + offs_k
        h = h0 + r * DIL_H
        w = w0 + s * DIL_W
        row_ok = (h >= 0) & (h < H) & (w >= 0) & (w < W)
        a = tl.load(x_rows[:, None] + (r * DIL_H * W + s * DIL_W) * C + c[None, :],
                    mask=row_ok[:, None] & (c[None, :] < C), other=0.0)
        b = tl.load(w_cols[None, :] + rs * C + c[:, None], mask=c[:, None] < C, other=0.0)
        acc = tl.dot(a, b, acc)
    offs_ym = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_yn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    y_mask = (offs_ym[:, None] < M) & (offs_yn[None, :] < K)
    tl.store(y_ptr + offs_ym[:, None] * K + offs_yn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=y_mask)


#: the hand-written configuration (CONV_SPACE's level 0): the winner on N32 C64 56x56 K64 3x3
CONV_DEFAULT = dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=3)


#: the implicit-GEMM kernel's search space; level 1 holds the configurations that won or came
#: close on the H200's ResNet layers (benchmarks/convolution.py) plus small tiles for few
#: channels and GPUs with less shared memory
CONV_SPACE = SearchSpace(
    default=Config(**CONV_DEFAULT),
    small=configs_from_rows(TILE_NAMES, [
        (128, 64, 64, 8, 4, 2), (128, 128, 128, 8, 8, 3), (128, 128, 64, 8, 8, 4),
        (128, 128, 64, 8, 8, 3), (64, 64, 64, 8, 4, 4), (64, 128, 64, 8, 4, 4),
        (128, 128, 64, 8, 4, 3), (64, 128, 64, 8, 8, 3), (128, 64, 64, 8, 4, 4),
        (256, 64, 32, 8, 8, 4), (256, 128, 64, 8, 8, 3), (64, 64, 32, 8, 4, 3)]),
    grid={"BLOCK_M": (64, 128, 256), "BLOCK_N": (64, 128, 256), "BLOCK_K": (32, 64, 128),
          "GROUP_M": (8,), "num_warps": (4, 8), "num_stages": (2, 3, 4, 5)},
    prune=matmul_prune, cap=80)


def conv_problem(x: torch.Tensor, w: torch.Tensor, stride: Pair, padding: Pair,
                 dilation: Pair) -> dict[str, object]:
    """What the best configuration depends on: shapes, stride, padding, dilation, dtype."""
    return {"N": x.shape[0], "C": x.shape[1], "H": x.shape[2], "W": x.shape[3],
            "K": w.shape[0], "R": w.shape[2], "S": w.shape[3],
            "stride": pair(stride, "stride"), "padding": pair(padding, "padding"),
            "dilation": pair(dilation, "dilation"), "dtype": str(x.dtype).removeprefix("torch.")}


def launch_conv2d(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, stride: Pair,
                  padding: Pair, dilation: Pair, config) -> torch.Tensor:
    """Run conv2d_kernel with ``config`` into the preallocated channels_last y; return y."""
    (sh, sw), (ph, pw), (dh, dw) = geometry(stride, padding, dilation)
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    P, Q = y.shape[2], y.shape[3]
    grid = (triton.cdiv(N * P * Q, config["BLOCK_M"]) * triton.cdiv(K, config["BLOCK_N"]),)
    conv2d_kernel[grid](x, w, y, N, H, W, C, K, P, Q, R, S, sh, sw, ph, pw, dh, dw, **config)
    return y


@forbidden_in_graded_calls
def conv2d(x: torch.Tensor, w: torch.Tensor, stride: Pair = 1, padding: Pair = 0,
           dilation: Pair = 1, config=None, level: int | None = None) -> torch.Tensor:
    """y = F.conv2d(x, w, stride=stride, padding=padding, dilation=dilation) with the
    implicit-GEMM kernel; x and w channels_last (check_conv_inputs says so otherwise), y
    (N, K, P, Q) channels_last. ``config`` picks the launch configuration (default
    CONV_DEFAULT); ``level`` tunes it for this problem instead (tilegym_edu.tune, cached)."""
    P, Q = check_conv_inputs(x, w, stride, padding, dilation)
    y = new_output(x, w.shape[0], P, Q)
    if level is not None:
        config = autotune(conv2d_kernel, conv_problem(x, w, stride, padding, dilation),
                          CONV_SPACE, lambda c: launch_conv2d(x, w, y, stride, padding,
                                                              dilation, c),
                          level=level, progress=False).config
    return launch_conv2d(x, w, y, stride, padding, dilation, config or CONV_DEFAULT)


def conv_flops(x: torch.Tensor, w: torch.Tensor, P: int, Q: int) -> int:
    """Multiply-adds times two: 2·N·K·P·Q·C·R·S."""
    N, C = x.shape[:2]
    K, _, R, S = w.shape
    return 2 * N * K * P * Q * C * R * S


# a launch of a raw kernel inside a graded call raises too
forbidden_in_graded_calls(direct_conv2d_kernel)
forbidden_in_graded_calls(conv2d_kernel)
