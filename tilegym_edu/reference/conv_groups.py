"""Convolution for the layers lesson 05's implicit GEMM serves badly: few input channels (a
network's stem), grouped convolution (``groups=``, ResNeXt) and depthwise convolution
(MobileNet), on NHWC data as in `convolution` (same names: x (N, C, H, W) and w (K, C // G, R,
S) channels_last, y (N, K, P, Q) channels_last; cross-correlation, no bias).

Why a different kernel for few channels: lesson 05's kernel reduces over (r, s, channel block),
BLOCK_K channels a step. A stem layer has C = 3: each step of 16 or more channels does 3 of
useful work, and a 7x7 filter takes 49 steps. Here the reduction index runs over the packed
(r, s, c) instead, R·S·C of them (147 for the stem) cut into BLOCK_K steps, each gathering the
input elements its indices name. Within one filter row r, the S·C elements (s, c) of a pixel
row are adjacent in NHWC memory (with dilation 1), so the gathers are mostly contiguous.

Why groups need it too: with ``groups`` = G, output channel k reads only the C / G input
channels of its group g = k // (K / G). The packed kernel runs one GEMM per block of groups
(program_id 1 is the block), reducing over R·S·(C / G) per group. A group of ResNeXt's 4
channels is too narrow for a tile on its own, so a block packs several adjacent groups into one
block-diagonal GEMM (groups_per_block): the zeros off the diagonal are wasted multiplies, but
the layer is memory-bound and its tiles are then full.

Depthwise (C / G = 1: every output channel reads one input channel) is not a matrix product:
y[n, k, p, q] = Σ_{r,s} x[n, k // M, h, w] · w[k, 0, r, s], with M = K / C output channels per
input channel. No tensor cores, few FLOPs per byte: on the roofline it sits with the
memory-bound kernels of lesson 06, not with the matmuls. Two kernels, raced per layer by the
tuner (DEPTHWISE_SPACE; a configuration's PATH names its kernel):

* "tiles", depthwise_conv2d_kernel (lesson 05's Exercise 3): each program takes BLOCK_M output
  pixels x BLOCK_C channels, adjacent in NHWC memory, and adds R·S products of loaded tiles.
  Every input pixel is then loaded by up to R·S taps of up to R programs (the output rows above
  and below belong to others), so the SMs read the input from L2 several times over, and its
  loop over taps, as compiled (Triton 3.6, sm_90), waits for one tap's loads before it issues
  the next tap's.
* "rows", depthwise_rows_kernel (row streaming). Why: with stride 1, consecutive output rows
  share R - 1 of their R input rows. A program that computes a run of ROWS consecutive output
  rows (of one strip of columns and block of channels) can load each input row it needs once,
  ROWS + R - 1 rows for ROWS output rows, and add it to every output row that reads it. How: it
  walks the input rows top to bottom with one float32 accumulator per output row of the run
  (with stride 1, R of them live at a time), stores an output row as soon as its last input row
  is added, and loads PREFETCH rows ahead of the one it adds, so several rows' loads are in
  flight. The vertical stride and dilation are compile-time constants, so which output rows an
  input row feeds is worked out by the compiler, for any of them (with stride 2 a run reads
  2·ROWS + R - 2 input rows, each feeding one or two output rows). What it costs: the R·S
  filter taps of its channels stay in registers, so fewer programs share an SM, and filters of
  more than MAX_ROWS_TAPS taps are left to "tiles". Whether fewer loads pay for fewer programs
  per SM is for the race to find, layer by layer. On an H200 (docs/results/h200.md, run r of
  2026-12-03) it picked "rows" on three of MobileNetV2's four depthwise layers: 56² at 0.87x
  cuDNN's speed (0.68x with "tiles" alone), 7² at 1.12x, 112² with stride 2 at 0.97x; and
  "tiles" at 14² (1.09x).
"""
from typing import Mapping

import torch
import triton
import triton.language as tl

from tilegym_edu.grading import forbidden_in_graded_calls
from tilegym_edu.reference.convolution import (Pair, check_conv_inputs, geometry, new_output,
                                               output_size)
from tilegym_edu.reference.pipelined import matmul_prune
from tilegym_edu.tiles import grouped_tile
from tilegym_edu.tune import (TILE_NAMES, Config, KernelGroup, SearchSpace, configs_from_rows,
                              path_space, split_path)


@triton.jit(do_not_specialize=["N", "H", "W", "P", "Q", "R", "STRIDE_H", "STRIDE_W",
                               "PAD_H", "PAD_W", "DIL_H", "DIL_W"])
def packed_conv2d_kernel(x_ptr, w_ptr, y_ptr, N, H, W, C, K, P, Q, R, S: tl.constexpr,
                         CG: tl.constexpr, KG, GS: tl.constexpr, STRIDE_H, STRIDE_W, PAD_H,
                         PAD_W, DIL_H, DIL_W, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """Implicit GEMM of the GS adjacent groups of block g = program_id(1) (CG input and KG
    output channels per group): one BLOCK_M x BLOCK_N tile of y's (N·P·Q, GS·KG) block per
    program_id(0), in grouped order. The reduction runs over the packed index
    t = (r·S + s)·(GS·CG) + c, R·S·GS·CG of them, BLOCK_K a step: index t gathers input channel
    g·GS·CG + c of pixel (h0 + r·DIL_H, w0 + s·DIL_W), or zero in the padding. Output channel j
    of the block belongs to group j // KG and reads only that group's CG channels: its filter
    element (r, s, c % CG) where c // CG is its group, zero elsewhere (a block-diagonal filter
    tile, gathered from w's channels_last rows, which are (r, s, c) in that order). With GS = 1
    this is one GEMM per group. CG, GS and S are constexprs, so t's division into (r, s, c)
    compiles to multiplies and shifts."""
    pid = tl.program_id(0)
    g = tl.program_id(1)
    M = N * P * Q
    CB: tl.constexpr = GS * CG                          # input channels of one block
    KB = GS * KG                                        # output channels of one block
    pid_m, pid_n = grouped_tile(pid, tl.cdiv(M, BLOCK_M), tl.cdiv(KB, BLOCK_N), GROUP_M)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % KB
    offs_k = tl.arange(0, BLOCK_K)
    n = offs_m // (P * Q)
    h0 = ((offs_m // Q) % P) * STRIDE_H - PAD_H
    w0 = (offs_m % Q) * STRIDE_W - PAD_W
    taps = R * S * CB
    w_cols = w_ptr + (g * KB + offs_n) * (R * S * CG)   # filter k's (r, s, c) = 0, per column
    group_of_column = offs_n // KG
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in tl.range(0, tl.cdiv(taps, BLOCK_K)):
        t = step * BLOCK_K + offs_k
        rs = t // CB
        c = t % CB
        h = h0[:, None] + (rs // S)[None, :] * DIL_H
        w = w0[:, None] + (rs % S)[None, :] * DIL_W
        ok = (t < taps)[None, :] & (h >= 0) & (h < H) & (w >= 0) & (w < W)
        a = tl.load(x_ptr + ((n[:, None] * H + h) * W + w) * C + g * CB + c[None, :],
                    mask=ok, other=0.0)
        own = (t < taps)[:, None] & ((c // CG)[:, None] == group_of_column[None, :])
        b = tl.load(w_cols[None, :] + (rs * CG + c % CG)[:, None], mask=own, other=0.0)
        acc = tl.dot(a, b, acc)
    offs_ym = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_yn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    y_mask = (offs_ym[:, None] < M) & (offs_yn[None, :] < KB)
    tl.store(y_ptr + offs_ym[:, None] * K + g * KB + offs_yn[None, :],
             acc.to(y_ptr.dtype.element_ty), mask=y_mask)


@triton.jit(do_not_specialize=["N", "H", "W", "P", "Q", "R", "STRIDE_H", "STRIDE_W",
                               "PAD_H", "PAD_W", "DIL_H", "DIL_W"])
def depthwise_conv2d_kernel(x_ptr, w_ptr, y_ptr, N, H, W, C, K, P, Q, R, S: tl.constexpr,
                            MULT: tl.constexpr, STRIDE_H, STRIDE_W, PAD_H, PAD_W, DIL_H,
                            DIL_W, BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr):
    """Depthwise: output channel k reads input channel k // MULT alone. One program per
    BLOCK_M output pixels (program_id 0) x BLOCK_C output channels (program_id 1): for each
    of the R·S taps, a (BLOCK_M, BLOCK_C) tile of x (channels adjacent in NHWC memory) times
    that tap's BLOCK_C weights, added in float32; y stored once."""
    M = N * P * Q
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
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


@triton.jit
def load_input_row(x_image, h, w0, q_ok, c, k_ok, H, W, C, S: tl.constexpr, DIL_W):
    """The S tiles of input row h that a strip of output columns reads, one per filter column s:
    x[h, w0 + s·DIL_W, c] for the strip's first input columns w0 (BLOCK_W,) and input channels c
    (BLOCK_C,), each (BLOCK_W, BLOCK_C) in x's dtype, zero outside the image."""
    tiles = ()
    for s in tl.static_range(S):
        w = w0 + s * DIL_W
        pixel = h * W + w                   # inside the image: 0 <= w < W, and so 0 <= h < H
        ok = q_ok & (w >= 0) & (w < W) & (pixel >= 0) & (pixel < H * W)
        tiles = tiles + (tl.load(x_image + pixel[:, None] * C + c[None, :],
                                 mask=ok[:, None] & k_ok[None, :], other=0.0),)
    return tiles


@triton.jit(do_not_specialize=["N", "H", "W", "P", "Q", "STRIDE_W", "PAD_H", "PAD_W",
                               "DIL_W"])
def depthwise_rows_kernel(x_ptr, w_ptr, y_ptr, N, H, W, C, K, P, Q, R: tl.constexpr,
                          S: tl.constexpr, MULT: tl.constexpr, STRIDE_H: tl.constexpr,
                          STRIDE_W, PAD_H, PAD_W, DIL_H: tl.constexpr, DIL_W,
                          ROWS: tl.constexpr, BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr,
                          PREFETCH: tl.constexpr):
    """Depthwise by row streaming, for the same tensors as depthwise_conv2d_kernel. One program
    per image n, run of ROWS output rows p0 .. p0 + ROWS - 1, strip of BLOCK_W output columns
    and block of BLOCK_C output channels (one program id, channel blocks fastest, then strips,
    runs, images). It walks the IN_ROWS = (ROWS - 1)·STRIDE_H + (R - 1)·DIL_H + 1 input rows
    from the run's first, h0, top to bottom, each loaded once (load_input_row: S column shifts
    of a (BLOCK_W, BLOCK_C) tile, which overlap, so all but the first come from L1), and adds
    each tile times its filter tap to the float32 accumulator of every output row that reads
    it; output row i is stored once its last input row, i·STRIDE_H + (R - 1)·DIL_H, is added.
    Row j + PREFETCH is loaded before row j is added, so PREFETCH + 1 rows' loads are in flight
    while the program computes. The loops are unrolled (R, S, STRIDE_H, DIL_H, ROWS and
    PREFETCH are constexprs): which output rows an input row feeds, through which filter rows,
    is decided at compile time, and a row that none reads (between the strided rows of a 1x1
    filter) is loaded for nothing and compiled away. The R·S filter taps of the channel block
    are loaded once, into registers."""
    pid = tl.program_id(0)
    channel_blocks = tl.cdiv(K, BLOCK_C)
    strips = tl.cdiv(Q, BLOCK_W)
    runs = tl.cdiv(P, ROWS)
    offs_k = (pid % channel_blocks) * BLOCK_C + tl.arange(0, BLOCK_C)
    offs_q = (pid // channel_blocks % strips) * BLOCK_W + tl.arange(0, BLOCK_W)
    p0 = (pid // (channel_blocks * strips) % runs) * ROWS
    n = pid // (channel_blocks * strips * runs)
    k_ok, q_ok = offs_k < K, offs_q < Q
    c = offs_k // MULT
    x_image = x_ptr + n * (H * W * C)
    h0 = p0 * STRIDE_H - PAD_H                          # the run's first input row
    w0 = offs_q * STRIDE_W - PAD_W                      # each output column's first input column
    IN_ROWS: tl.constexpr = (ROWS - 1) * STRIDE_H + (R - 1) * DIL_H + 1
    taps = ()
    for tap in tl.static_range(R * S):
        taps = taps + (tl.load(w_ptr + offs_k * (R * S) + tap, mask=k_ok,
                               other=0.0).to(tl.float32),)
    accs = (tl.zeros((BLOCK_W, BLOCK_C), dtype=tl.float32),) * ROWS
    loaded = ()                     # the tiles of the input rows loaded and not yet added, S a row
    for j in tl.static_range(PREFETCH):
        loaded = loaded + load_input_row(x_image, h0 + j, w0, q_ok, c, k_ok, H, W, C, S, DIL_W)
    for j in tl.static_range(IN_ROWS):
        if j + PREFETCH < IN_ROWS:
            loaded = loaded + load_input_row(x_image, h0 + j + PREFETCH, w0, q_ok, c, k_ok, H, W,
                                             C, S, DIL_W)
        for s in tl.static_range(S):
            a = loaded[s].to(tl.float32)
            for i in tl.static_range(ROWS):     # output row i reads row j = i·STRIDE_H + r·DIL_H
                if j >= i * STRIDE_H and (j - i * STRIDE_H) % DIL_H == 0 and \
                        (j - i * STRIDE_H) // DIL_H < R:        # through its filter row r
                    weight = taps[(j - i * STRIDE_H) // DIL_H * S + s]
                    accs = accs[:i] + (accs[i] + a * weight[None, :],) + accs[i + 1:]
        loaded = loaded[S:]
        # output row i = (j - (R - 1)·DIL_H) / STRIDE_H has had its last input row, j: store it
        if j >= (R - 1) * DIL_H and (j - (R - 1) * DIL_H) % STRIDE_H == 0:
            out = (n * P + p0 + (j - (R - 1) * DIL_H) // STRIDE_H) * Q + offs_q
            inside = q_ok & (out < (n + 1) * P * Q)     # in image n's output: p0 + i < P
            tl.store(y_ptr + out[:, None] * K + offs_k[None, :],
                     accs[(j - (R - 1) * DIL_H) // STRIDE_H].to(y_ptr.dtype.element_ty),
                     mask=inside[:, None] & k_ok[None, :])


def groups_per_block(groups: int, CG: int, KG: int, width: int) -> int:
    """How many adjacent groups (of CG input and KG output channels) one program of
    packed_conv2d_kernel takes: the largest power of two that divides ``groups`` and keeps the
    block within ``width`` channels on either side; 1 when one group already fills it. Narrow
    groups (ResNeXt's 4 channels) then share a tile: a 4-column GEMM would leave most of a tensor
    core's 16 or more columns idle, a block-diagonal one of 8 groups fills 32 (and computes
    zeros in the rest, which a memory-bound layer can afford)."""
    block = 1
    while groups % (2 * block) == 0 and 2 * block * max(CG, KG) <= width:
        block *= 2
    return block


#: level 0 of PACKED_SPACE: small output-channel tiles (a stem has 64, a group often fewer);
#: GROUP_WIDTH is the most channels a block of narrow groups spans (groups_per_block; 1 keeps
#: one GEMM per group, whose 64 x 32 tiles were the fastest on ResNeXt's strided layer before
#: blocks existed)
PACKED_DEFAULT = dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, GROUP_WIDTH=32,
                      num_warps=4, num_stages=3)
_PACKED_NAMES = TILE_NAMES + ("GROUP_WIDTH",)
PACKED_SPACE = SearchSpace(
    default=Config(**PACKED_DEFAULT),
    small=configs_from_rows(_PACKED_NAMES, [
        (128, 64, 64, 8, 4, 3, 64), (256, 64, 32, 8, 8, 3, 64), (64, 64, 32, 8, 4, 4, 64),
        (128, 32, 32, 8, 4, 3, 32), (64, 32, 16, 8, 4, 3, 32), (128, 128, 32, 8, 8, 3, 128),
        (64, 16, 16, 8, 4, 3, 16), (128, 32, 64, 8, 4, 3, 32), (256, 32, 32, 8, 8, 3, 32),
        (128, 64, 64, 8, 4, 4, 64), (64, 32, 16, 8, 4, 3, 1)]),
    grid={"BLOCK_M": (64, 128, 256), "BLOCK_N": (16, 32, 64, 128), "BLOCK_K": (16, 32, 64),
          "GROUP_M": (8,), "GROUP_WIDTH": (16, 32, 64), "num_warps": (4, 8),
          "num_stages": (2, 3, 4)},
    prune=matmul_prune, cap=60)

#: level 0 of DEPTHWISE_SPACE (PATH "tiles"): 64 pixels x 64 channels (128 bytes of fp16 per
#: pixel row)
DEPTHWISE_DEFAULT = dict(BLOCK_M=64, BLOCK_C=64, num_warps=4, num_stages=2)
_DEPTHWISE_NAMES = ("BLOCK_M", "BLOCK_C", "num_warps", "num_stages")
#: depthwise_conv2d_kernel's configurations
DEPTHWISE_TILES_SPACE = SearchSpace(
    default=Config(**DEPTHWISE_DEFAULT),
    small=configs_from_rows(_DEPTHWISE_NAMES, [
        (32, 64, 4, 2), (128, 64, 8, 2), (64, 128, 8, 2), (32, 128, 4, 2), (128, 32, 4, 2),
        (16, 256, 8, 2), (256, 32, 8, 2), (128, 16, 4, 2), (256, 16, 8, 2)]),
    grid={"BLOCK_M": (16, 32, 64, 128, 256), "BLOCK_C": (16, 32, 64, 128, 256),
          "num_warps": (4, 8),
          "num_stages": (1, 2, 3)},
    cap=40)


#: the most filter taps (R·S) depthwise_rows_kernel takes: it keeps every tap of its channel
#: block in registers, 8 float32 a tap for a thread's 16-byte vector of 8 fp16 channels. With a
#: 3x3 filter ptxas (Triton 3.6, sm_90) gives DEPTHWISE_ROWS_SPACE's configurations 132 to 231
#: registers a thread on MobileNetV2's layers, none spilling; 5x3 and 5x5 filters spill
MAX_ROWS_TAPS = 9


def depthwise_rows_prune(config, problem, resources) -> str | None:
    """Why depthwise_rows_kernel should not run ``problem`` (conv_problem's dict) with
    ``config``, or None. A run of ROWS output rows or a strip of BLOCK_W columns twice the
    output's height P or width Q or more leaves over half of every program idle, and a smaller
    run or strip of the space covers the layer. A filter of more than MAX_ROWS_TAPS taps would
    spill its taps to local memory: depthwise_conv2d_kernel takes it."""
    (sh, sw), (ph, pw), (dh, dw) = problem["stride"], problem["padding"], problem["dilation"]
    P = output_size(problem["H"], problem["R"], sh, ph, dh)
    Q = output_size(problem["W"], problem["S"], sw, pw, dw)
    if config["ROWS"] >= 2 * P:
        return f"a run of {config['ROWS']} rows is twice the output's {P} or more"
    if config["BLOCK_W"] >= 2 * Q:
        return f"a strip of {config['BLOCK_W']} columns is twice the output's {Q} or more"
    taps = problem["R"] * problem["S"]
    if taps > MAX_ROWS_TAPS:
        return (f"a {problem['R']}x{problem['S']} filter has {taps} taps, over the "
                f"{MAX_ROWS_TAPS} the rows kernel keeps in registers without spilling")
    return None


#: the rows kernel's hand-written configuration (its space's level 0): a strip of 64 columns
#: (a 56-wide output row in one), 16 channels (two threads' 16-byte vectors a pixel), runs of
#: 8 rows, one input row loaded ahead; ptxas gives it 136 registers a thread on sm_90
DEPTHWISE_ROWS_DEFAULT = dict(BLOCK_W=64, BLOCK_C=16, ROWS=8, PREFETCH=1, num_warps=4)
_ROWS_NAMES = ("BLOCK_W", "BLOCK_C", "ROWS", "PREFETCH", "num_warps")
#: depthwise_rows_kernel's configurations. Its loops are unrolled, so num_stages has nothing to
#: pipeline; PREFETCH sets how many rows' loads are in flight. Registers (the filter taps take
#: 72 of them) allow 8 to 14 warps an SM, so the list varies what a warp holds: one pixel's 8
#: channels a thread (4 warps for 64 x 16) or two (2 warps), and how far ahead it loads. It
#: covers MobileNetV2's widths: strips of 64 and 32 columns for 56 (with 16 and 32 channels,
#: as C = 144 and 96 divide), 16 for 14, 8 for 7, with 64 and 128 channels for C = 384, 960;
#: runs of 7 or 14 rows divide outputs of 7, 14 and 56 rows. The 14x14 and 7x7 layers fill
#: the SMs once at most with those (256 to 768 programs), hence runs of 4 rows of 32 channels
DEPTHWISE_ROWS_SPACE = SearchSpace(
    default=Config(**DEPTHWISE_ROWS_DEFAULT),
    small=configs_from_rows(_ROWS_NAMES, [
        (64, 16, 14, 1, 4), (64, 16, 8, 0, 4), (64, 16, 8, 2, 4), (64, 16, 8, 1, 2),
        (32, 16, 8, 1, 2), (32, 32, 8, 1, 4), (64, 32, 8, 1, 4), (32, 32, 4, 2, 4),
        (16, 64, 7, 1, 4), (16, 32, 7, 1, 2), (16, 64, 14, 1, 4), (16, 32, 4, 1, 2),
        (8, 64, 7, 1, 2), (8, 128, 7, 1, 4), (8, 32, 4, 1, 1)]),
    prune=depthwise_rows_prune)


def launch_depthwise_tiles(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, stride: Pair,
                           padding: Pair, dilation: Pair, config) -> torch.Tensor:
    """Run depthwise_conv2d_kernel with ``config`` (every launch option) into the
    preallocated channels_last y (N, K, P, Q); return y."""
    (sh, sw), (ph, pw), (dh, dw) = geometry(stride, padding, dilation)
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    P, Q = y.shape[2:]
    grid = (triton.cdiv(N * P * Q, config["BLOCK_M"]), triton.cdiv(K, config["BLOCK_C"]))
    depthwise_conv2d_kernel[grid](x, w, y, N, H, W, C, K, P, Q, R, S, K // C, sh, sw, ph, pw,
                                  dh, dw, **config)
    return y


def launch_depthwise_rows(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, stride: Pair,
                          padding: Pair, dilation: Pair, config) -> torch.Tensor:
    """Run depthwise_rows_kernel with ``config`` (every launch option) into the preallocated
    channels_last y (N, K, P, Q), one program per image, run of ROWS rows, strip of BLOCK_W
    columns and block of BLOCK_C channels; return y."""
    (sh, sw), (ph, pw), (dh, dw) = geometry(stride, padding, dilation)
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    P, Q = y.shape[2:]
    grid = (N * triton.cdiv(P, config["ROWS"]) * triton.cdiv(Q, config["BLOCK_W"])
            * triton.cdiv(K, config["BLOCK_C"]),)
    depthwise_rows_kernel[grid](x, w, y, N, H, W, C, K, P, Q, R, S, K // C, sh, sw, ph, pw,
                                dh, dw, **config)
    return y


#: the depthwise kernels, each with its search space; a configuration of DEPTHWISE_SPACE names
#: its kernel in PATH
DEPTHWISE_PATHS = {"tiles": DEPTHWISE_TILES_SPACE, "rows": DEPTHWISE_ROWS_SPACE}
#: how each path runs: launch(x, w, y, stride, padding, dilation, options) -> y
DEPTHWISE_LAUNCHES = {"tiles": launch_depthwise_tiles, "rows": launch_depthwise_rows}


#: both depthwise kernels in one space, raced per layer: level 0 (and the interpreter) runs the
#: tiles kernel's default, level 1 adds every path's level 1, level 2 the tiles kernel's grid
#: (capped to as many of it as before the rows kernel came)
DEPTHWISE_SPACE = path_space(DEPTHWISE_PATHS, "tiles")

#: what the tuner keys DEPTHWISE_SPACE's results on: the source of both kernels
DEPTHWISE_KERNELS = KernelGroup("depthwise_conv2d", (depthwise_conv2d_kernel,
                                                     depthwise_rows_kernel))


@forbidden_in_graded_calls
def packed_conv2d(x: torch.Tensor, w: torch.Tensor, stride: Pair = 1, padding: Pair = 0,
                  dilation: Pair = 1, groups: int = 1,
                  config: Mapping[str, int] | None = None) -> torch.Tensor:
    """F.conv2d(x, w, stride=..., padding=..., dilation=..., groups=groups) with the packed
    implicit GEMM, one per block of groups_per_block groups; ``config`` overrides
    PACKED_DEFAULT."""
    P, Q = check_conv_inputs(x, w, stride, padding, dilation, groups)
    (sh, sw), (ph, pw), (dh, dw) = geometry(stride, padding, dilation)
    N, C, H, W = x.shape
    K, CG, R, S = w.shape
    options = {**PACKED_DEFAULT, **(config or {})}
    y = new_output(x, K, P, Q)
    KG = K // groups
    GS = groups_per_block(groups, CG, KG, options.pop("GROUP_WIDTH"))
    grid = (triton.cdiv(N * P * Q, options["BLOCK_M"]) * triton.cdiv(GS * KG, options["BLOCK_N"]),
            groups // GS)
    packed_conv2d_kernel[grid](x, w, y, N, H, W, C, K, P, Q, R, S, CG, KG, GS, sh, sw, ph, pw,
                               dh, dw, **options)
    return y


@forbidden_in_graded_calls
def depthwise_conv2d(x: torch.Tensor, w: torch.Tensor, stride: Pair = 1, padding: Pair = 0,
                     dilation: Pair = 1, config: Mapping[str, int] | None = None) -> torch.Tensor:
    """F.conv2d(x, w, ..., groups=C) for x (N, C, H, W) and w (K, 1, R, S), K a multiple of C
    (K / C output channels per input channel). ``config``'s PATH picks the kernel: "tiles"
    (depthwise_conv2d_kernel, also without a PATH) or "rows" (depthwise_rows_kernel); its other
    values override that path's default (DEPTHWISE_DEFAULT or DEPTHWISE_ROWS_DEFAULT)."""
    if x.dim() == 4 and w.dim() == 4 and w.shape[1] != 1:
        raise ValueError(f"depthwise filters read one channel each: w must be (K, 1, R, S), "
                         f"got {tuple(w.shape)}; use packed_conv2d for C // groups > 1")
    path, options = split_path({"PATH": "tiles", **(config or {})})
    if path not in DEPTHWISE_PATHS:
        raise ValueError(f"PATH must be one of {sorted(DEPTHWISE_PATHS)}, got {path!r}")
    C = x.shape[1] if x.dim() == 4 else 0
    P, Q = check_conv_inputs(x, w, stride, padding, dilation, C)
    y = new_output(x, w.shape[0], P, Q)
    return DEPTHWISE_LAUNCHES[path](x, w, y, stride, padding, dilation,
                                    {**DEPTHWISE_PATHS[path].default, **options})


@forbidden_in_graded_calls
def grouped_conv2d(x: torch.Tensor, w: torch.Tensor, stride: Pair = 1, padding: Pair = 0,
                   dilation: Pair = 1, groups: int = 1) -> torch.Tensor:
    """F.conv2d with ``groups``, on the kernel that fits: depthwise when every group has one
    input channel, else the packed implicit GEMM (each at its default configuration)."""
    if x.dim() == 4 and groups == x.shape[1] and w.dim() == 4 and w.shape[1] == 1:
        return depthwise_conv2d(x, w, stride, padding, dilation)
    return packed_conv2d(x, w, stride, padding, dilation, groups)


forbidden_in_graded_calls(packed_conv2d_kernel)
forbidden_in_graded_calls(depthwise_conv2d_kernel)
forbidden_in_graded_calls(depthwise_rows_kernel)
