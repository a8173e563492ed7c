"""Convolutions as an implicit GEMM for Hopper GPUs, written in Gluon, each filter tap's input
tile one TMA box that the tensor cores read where it landed.

Why: lesson 05's kernel gathers each tap's BLOCK_M x BLOCK_K input tile with pointer loads, one
masked 16-byte load per row, and reached 0.59-0.95x cuDNN on ResNet-50's 3x3 layers on an H200.
A box of x, (BOX_N images, BOX_H rows, BOX_W columns, BLOCK_K channels), is a rectangle of the
(N, H, W, C) tensor, so one TMA copy brings it, and the hardware fills what lies in the padding
(negative or past-the-edge coordinates) with zeros: no masks. For filter tap (r, s) the box of
output pixels (n0.., p0.., q0..) reads input box (n0.., p0 + r - pad_h.., q0 + s - pad_w..). In
shared memory the box is BOX_N·BOX_H·BOX_W rows of BLOCK_K channels, which is exactly the
(BLOCK_M, BLOCK_K) operand a wgmma takes: the kernel reshapes the buffer's descriptor, not the
data. (benchmarks/conv_ideas.py's "box" idea did the same in plain Triton, whose reshape of the
loaded tile went through registers before each matmul and lost to lesson 05's kernel.) A
strided layer reads x as (N, H / stride_h, stride_h, W / stride_w, stride_w·C): in that view the
pixels one tap reads for a box of output pixels are again a box.

The price is the box's shape: a tile of output pixels is a rectangle of whole boxes, so a layer
whose P or Q is not a multiple of BOX_H or BOX_W computes rows it never stores (the TMA store
drops them). ``box_shape`` picks, for a BLOCK_M, the box with the least such waste; a 1x1 layer
of stride 1 takes its pixels as one row instead (``pixels_in_one_row``). And the
launch: building three tensor descriptors in Python takes about 0.1 ms of the host's time, longer
than a ResNet-50 layer takes on the GPU, so the kernel pays where it runs in a CUDA graph.

Shapes and names as in ``convolution``: x (N, C, H, W) and w (K, C, R, S) channels_last, y
(N, K, P, Q) channels_last; float16 or bfloat16; any stride, padding and dilation, no groups;
C and K multiples of 8 (16-byte rows for TMA), H and W multiples of the stride.
``hopper_conv_problem`` says why a layer or GPU cannot take it. Gluon kernels do not run in
Triton's interpreter: the tests are in tests/gpu/.
"""
from __future__ import annotations

import functools

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilegym_edu.grading import forbidden_in_graded_calls
from tilegym_edu.reference.convolution import Pair, geometry
from tilegym_edu.reference.split_k import REDUCE_BLOCK, split_k_reduce_kernel
from tilegym_edu.tiles import cdiv
from tilegym_edu.tune import Config, SearchSpace, configs_from_rows

try:  # Gluon's Hopper modules (Triton 3.5 and newer)
    from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier,
                                                                   tma, warpgroup_mma,
                                                                   warpgroup_mma_wait)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
except ImportError:  # pragma: no cover - older Triton: hopper_conv_problem says no
    TensorDescriptor = None

#: the Triton versions (major.minor) this kernel was measured with on an H200 (Gluon's API
#: changes between releases, as flash_hopper.MEASURED_TRITON says)
MEASURED_TRITON = ("3.6",)


@gluon.jit
def _tap_origin(offset, pad, stride):
    """Where filter offset ``offset`` (r·dilation, >= 0) of output pixel 0 reads along one axis
    of the (pixels / stride, stride) view of the input: (floor((offset - pad) / stride), the
    phase within the stride). Integer division truncates, so the dividend is kept >= 0."""
    d = (offset + (stride - 1) * pad) // stride - pad
    return d, offset - pad - d * stride


@gluon.jit
def _issue_step(x_desc, w_desc, a_smem, b_smem, bars, j, first, n0, p0, q0, k0, C, geometry,
                S: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr,
                BOX_N: gl.constexpr, BOX_H: gl.constexpr, BOX_W: gl.constexpr):
    """Start the TMA copies of the program's j-th reduction step (step first + j of the flat
    (r, s, channel block) loop) into ring slot j % STAGES: the input box of tap (r, s) and
    channel block c0, and the matching (BLOCK_N, BLOCK_K) block of the (K, R·S·C) filter
    matrix. ``geometry`` is (pad_h, pad_w, dil_h, dil_w, stride_h, stride_w)."""
    pad_h, pad_w, dil_h, dil_w, stride_h, stride_w = geometry
    step = first + j
    c_blocks = gl.cdiv(C, BLOCK_K)
    rs = step // c_blocks
    c0 = (step % c_blocks) * BLOCK_K
    dh, phase_h = _tap_origin((rs // S) * dil_h, pad_h, stride_h)
    dw, phase_w = _tap_origin((rs % S) * dil_w, pad_w, stride_w)
    slot = j % STAGES
    bar = bars.index(slot)
    mbarrier.expect(bar, x_desc.block_type.nbytes + w_desc.block_type.nbytes)
    box = a_smem.index(slot)._reinterpret(x_desc.dtype, [BOX_N, BOX_H, 1, BOX_W, BLOCK_K],
                                          x_desc.layout)
    tma.async_copy_global_to_shared(
        x_desc, [n0, p0 + dh, phase_h, q0 + dw, phase_w * C + c0], bar, box)
    tma.async_copy_global_to_shared(w_desc, [k0, rs * C + c0], bar, b_smem.index(slot))


@gluon.jit
def program_tile(D0, D1, D2, K, TAPS_A, TAPS_B, C, B0: gl.constexpr, B1: gl.constexpr,
                 B2: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                 SPLIT_K: gl.constexpr):
    """The Gluon convolutions' program-to-work map, for an output seen as (D0, D1, D2, K) in
    boxes of (B0, B1, B2) pixels x BLOCK_N channels and a reduction of TAPS_A·TAPS_B filter taps
    x the blocks of BLOCK_K of C channels in SPLIT_K ranges: (split, o0, o1, o2, k0, first,
    count), this program's range, its box's first pixel, its first output channel, and the steps
    first .. first + count - 1 it adds. The programs of one box are consecutive (channel blocks
    fastest), so those running at once share its input in L2."""
    n_blocks = gl.cdiv(K, BLOCK_N)
    boxes2 = gl.cdiv(D2, B2)
    boxes1 = gl.cdiv(D1, B1)
    tiles = gl.cdiv(D0, B0) * boxes1 * boxes2 * n_blocks
    pid = gl.program_id(0)
    split = pid // tiles
    k0 = (pid % n_blocks) * BLOCK_N
    box = (pid % tiles) // n_blocks
    o2 = (box % boxes2) * B2
    o1 = ((box // boxes2) % boxes1) * B1
    o0 = (box // (boxes2 * boxes1)) * B0
    steps = TAPS_A * TAPS_B * gl.cdiv(C, BLOCK_K)
    per_split = gl.cdiv(steps, SPLIT_K)
    first = split * per_split
    count = gl.minimum(first + per_split, steps) - first
    return split, o0, o1, o2, k0, first, count


@gluon.jit
def store_box(acc, y_desc, split, o0, o1, o2, k0, B0: gl.constexpr, B1: gl.constexpr,
              B2: gl.constexpr, BLOCK_N: gl.constexpr):
    """The Gluon convolutions' epilogue: the (B0·B1·B2, BLOCK_N) float32 tile ``acc`` through
    shared memory into one TMA store of the (1, B0, B1, B2, BLOCK_N) box of y_desc at (split,
    o0, o1, o2, k0), in y_desc's dtype; rows of pixels past the output's edges fall outside y
    and the hardware drops them."""
    BLOCK_M: gl.constexpr = B0 * B1 * B2
    out_dtype: gl.constexpr = y_desc.dtype
    out_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_N], out_dtype)
    out_smem = gl.allocate_shared_memory(out_dtype, [BLOCK_M, BLOCK_N], out_layout)
    store_box_through(acc, out_smem, y_desc, split, o0, o1, o2, k0, B0, B1, B2, BLOCK_N)


@gluon.jit
def store_box_through(acc, out_smem, y_desc, split, o0, o1, o2, k0, B0: gl.constexpr,
                      B1: gl.constexpr, B2: gl.constexpr, BLOCK_N: gl.constexpr):
    """store_box through out_smem, a (B0·B1·B2, BLOCK_N) buffer of y_desc's dtype that the
    caller allocated (conv_halo's specialised kernel, before its partitions fork)."""
    out_dtype: gl.constexpr = y_desc.dtype
    out_smem.store(acc.to(out_dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(
        y_desc, [split, o0, o1, o2, k0],
        out_smem._reinterpret(out_dtype, [1, B0, B1, B2, BLOCK_N], y_desc.layout))
    tma.store_wait(0)


@gluon.jit
def hopper_conv_kernel(x_desc, w_desc, y_desc, N, P, Q, C, K, PAD_H, PAD_W, DIL_H, DIL_W,
                       STRIDE_H, STRIDE_W, R, S: gl.constexpr, BOX_N: gl.constexpr,
                       BOX_H: gl.constexpr, BOX_W: gl.constexpr, BLOCK_N: gl.constexpr,
                       BLOCK_K: gl.constexpr, STAGES: gl.constexpr, SPLIT_K: gl.constexpr,
                       num_warps: gl.constexpr):
    """One (BOX_N·BOX_H·BOX_W) x BLOCK_N tile of y a program: output pixels of a box of BOX_N
    images x BOX_H rows x BOX_W columns, BLOCK_N output channels, over one of SPLIT_K ranges
    of the reduction. x_desc is a 5-D descriptor over x viewed as (N, H / STRIDE_H, STRIDE_H,
    W / STRIDE_W, STRIDE_W·C), in boxes (BOX_N, BOX_H, 1, BOX_W, BLOCK_K): a box of that view
    holds, for each output pixel of a box, the input pixel one filter tap reads, strided or
    not; w_desc a 2-D one over the (K, R·S·C) filter matrix in (BLOCK_N, BLOCK_K)
    blocks; y_desc a 5-D one over (SPLIT_K, N, P, Q, K) in (1, BOX_N, BOX_H, BOX_W, BLOCK_N)
    boxes: y itself when SPLIT_K is 1, else float32 partial sums, one (N, P, Q, K) each. The
    reduction runs over (r, s, channel block) in a ring of STAGES buffers: step i's wgmma runs
    while the copies of steps i + 1 .. i + STAGES - 1 are in flight (program_tile says which
    tile and range a program takes)."""
    BLOCK_M: gl.constexpr = BOX_N * BOX_H * BOX_W
    dtype: gl.constexpr = x_desc.dtype
    split, n0, p0, q0, k0, first, count = program_tile(N, P, Q, K, R, S, C, BOX_N, BOX_H, BOX_W,
                                                       BLOCK_N, BLOCK_K, SPLIT_K)

    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_N, 16])
    tile_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_K], dtype)
    a_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], tile_layout)
    b_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, BLOCK_K], w_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=1)

    geometry = (PAD_H, PAD_W, DIL_H, DIL_W, STRIDE_H, STRIDE_W)
    for i in gl.static_range(STAGES - 1):
        if i < count:
            _issue_step(x_desc, w_desc, a_smem, b_smem, bars, i, first, n0, p0, q0, k0, C,
                        geometry, S, BLOCK_K, STAGES, BOX_N, BOX_H, BOX_W)
    acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=acc_layout)
    for i in range(count):
        slot = i % STAGES
        mbarrier.wait(bars.index(slot), (i // STAGES) & 1)
        acc = warpgroup_mma(a_smem.index(slot), b_smem.index(slot).permute((1, 0)), acc,
                            is_async=True)
        # one wgmma left in flight: step i - 1's is done, so its slot can take step
        # i + STAGES - 1
        acc = warpgroup_mma_wait(1, deps=(acc,))
        if i + STAGES - 1 < count:
            _issue_step(x_desc, w_desc, a_smem, b_smem, bars, i + STAGES - 1, first, n0, p0, q0,
                        k0, C, geometry, S, BLOCK_K, STAGES, BOX_N, BOX_H, BOX_W)
    acc = warpgroup_mma_wait(0, deps=(acc,))
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))

    store_box(acc, y_desc, split, n0, p0, q0, k0, BOX_N, BOX_H, BOX_W, BLOCK_N)


@functools.lru_cache(maxsize=1024)
def box_shape(block_m: int, N: int, P: int, Q: int) -> tuple[int, int, int]:
    """(BOX_N, BOX_H, BOX_W), powers of two with product block_m, that cover the (N, P, Q)
    output pixels with the fewest boxes (the least work on pixels no one stores); ties go to
    the widest box (longest runs of consecutive pixels)."""
    best = None
    for wb in range(block_m.bit_length()):
        for hb in range(block_m.bit_length() - wb):
            bw, bh = 1 << wb, 1 << hb
            bn = block_m // (bw * bh)
            boxes = cdiv(N, bn) * cdiv(P, bh) * cdiv(Q, bw)
            key = (boxes, -bw, -bh)
            if best is None or key < best[0]:
                best = (key, (bn, bh, bw))
    return best[1]


def hopper_conv_problem(x: torch.Tensor, w: torch.Tensor, stride: Pair = 1) -> str:
    """Why hopper_conv_kernel cannot run this layer here ("" when it can): it needs a Hopper GPU
    with a Triton it was measured with, float16 or bfloat16, C and K multiples of 8 (rows of 16
    bytes, as TMA needs) and an input whose height and width are multiples of the stride (the
    kernel reads x as (N, H / stride_h, stride_h, W / stride_w, stride_w·C))."""
    if TensorDescriptor is None or triton.__version__.rsplit(".", 1)[0] not in MEASURED_TRITON:
        return (f"Triton {triton.__version__}'s Gluon is not one this kernel was measured with "
                f"({', '.join(MEASURED_TRITON)})")
    if not x.is_cuda or torch.cuda.get_device_capability(x.device)[0] != 9:
        return "it needs a Hopper GPU (compute capability 9.x: wgmma and TMA)"
    if x.dtype not in (torch.float16, torch.bfloat16):
        return f"it takes float16 or bfloat16, not {x.dtype}"
    (sh, sw), _, _ = geometry(stride, 0, 1)
    if x.shape[2] % sh or x.shape[3] % sw:
        return (f"the input's {x.shape[2]}x{x.shape[3]} pixels are not a multiple of the stride "
                f"{(sh, sw)} (it reads x in groups of stride pixels)")
    K, C = w.shape[:2]
    if C % 8 or K % 8:
        return f"C = {C} and K = {K} must be multiples of 8 (16-byte rows for TMA)"
    return ""


@functools.lru_cache(maxsize=256)
def _layout(block: tuple[int, ...], dtype: torch.dtype):
    """The shared-memory layout of a TMA block (the widest swizzle its rows allow)."""
    return gl.NVMMASharedLayout.get_default_for(list(block),
                                                getattr(gl, str(dtype).removeprefix("torch.")))


def _descriptor(t: torch.Tensor, block: tuple[int, ...]):
    """A TMA descriptor over t (its own shape and strides) in blocks of ``block``."""
    return TensorDescriptor(t, list(t.shape), list(t.stride()), list(block),
                            _layout(block, t.dtype))


def split_output(y: torch.Tensor, splits: int) -> torch.Tensor:
    """Where a Gluon convolution's programs store, as (splits, N, P, Q, K): y itself (a view of
    the channels_last (N, K, P, Q) output) for one split, else float32 partial sums, one (N, P,
    Q, K) per range of the reduction, for :func:`reduce_splits`."""
    if splits == 1:
        return y.permute(0, 2, 3, 1).unsqueeze(0)
    N, K, P, Q = y.shape
    return torch.empty((splits, N, P, Q, K), device=y.device, dtype=torch.float32)


def reduce_splits(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """y = the sum of split_output's partial sums (split 0 first) by split_k's reduction
    kernel; nothing to do when ``out`` is y's own view. Returns y."""
    splits, N, P, Q, K = out.shape
    if splits > 1:
        M = N * P * Q
        split_k_reduce_kernel[(cdiv(M * K, REDUCE_BLOCK),)](out, y, M, K, splits, K, 1,
                                                             BLOCK=REDUCE_BLOCK)
    return y


def pixels_in_one_row(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, stride: Pair,
                      padding: Pair) -> tuple[torch.Tensor, torch.Tensor]:
    """x and y as one image of one row of pixels, (1, C, 1, N·H·W) and (1, K, 1, N·P·Q) views of
    the same memory, for a 1x1 layer of stride 1 without padding: there the convolution is
    y = x @ w^T over the pixels, whatever image or row they sit in. box_shape then cuts the
    pixels into runs of BLOCK_M, the fewest tiles there can be, where boxes of an (N, P, Q)
    grid may compute pixels no one stores: 32 images of 7 x 7 take 28 boxes of 64 (8 wide for
    7) against 25 runs, 3 images of 14 x 14 take 12 against 10 (at 32 images of 14 x 14 both
    take 98). Other layers, and an x whose pixels are not one run of memory, come back as
    they are."""
    pointwise = w.shape[2:] == (1, 1) and geometry(stride, padding, 1)[:2] == ((1, 1), (0, 0))
    x_rows, y_rows = x.permute(0, 2, 3, 1), y.permute(0, 2, 3, 1)
    if not (pointwise and x_rows.is_contiguous() and y_rows.is_contiguous()):
        return x, y
    return (x_rows.reshape(1, 1, -1, x.shape[1]).permute(0, 3, 1, 2),
            y_rows.reshape(1, 1, -1, y.shape[1]).permute(0, 3, 1, 2))


def launch_hopper_conv2d(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, stride: Pair,
                         padding: Pair, dilation: Pair, config) -> torch.Tensor:
    """Run hopper_conv_kernel with ``config`` (HOPPER_CONV_NAMES) into the preallocated
    channels_last y; return y. The layer must pass :func:`hopper_conv_problem`; the box is
    box_shape's for BLOCK_M, over one row of pixels for a 1x1 layer (:func:`pixels_in_one_row`).
    With SPLIT_K > 1 the kernel writes (SPLIT_K, N, P, Q, K) float32 partial sums and split_k's
    reduction kernel adds them, split 0 first, into y."""
    result = y
    x, y = pixels_in_one_row(x, w, y, stride, padding)
    (sh, sw), (ph, pw), (dh, dw) = geometry(stride, padding, dilation)
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    P, Q = y.shape[2], y.shape[3]
    bm, bn, bk, splits = (config[name] for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K"))
    if sw > 1 and C % bk:
        raise ValueError(f"BLOCK_K = {bk} does not divide C = {C}: strided along W, a block of "
                         "channels would read the next pixel's; take a BLOCK_K that divides C")
    box_n, box_h, box_w = box_shape(bm, N, P, Q)
    out = split_output(y, splits)
    x_view = x.permute(0, 2, 3, 1).view(N, H // sh, sh, W // sw, sw * C)
    x_desc = _descriptor(x_view, (box_n, box_h, 1, box_w, bk))
    w_desc = _descriptor(w.permute(0, 2, 3, 1).reshape(K, R * S * C), (bn, bk))
    y_desc = _descriptor(out, (1, box_n, box_h, box_w, bn))
    tiles = cdiv(N, box_n) * cdiv(P, box_h) * cdiv(Q, box_w) * cdiv(K, bn)
    hopper_conv_kernel[(tiles * splits,)](
        x_desc, w_desc, y_desc, N, P, Q, C, K, ph, pw, dh, dw, sh, sw, R, S=S, BOX_N=box_n,
        BOX_H=box_h, BOX_W=box_w, BLOCK_N=bn, BLOCK_K=bk, STAGES=config["STAGES"], SPLIT_K=splits,
        num_warps=config["num_warps"])
    reduce_splits(out, y)
    return result


#: a configuration's names
HOPPER_CONV_NAMES = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "STAGES", "SPLIT_K", "num_warps")

#: the configurations the tuner races (the first is the default), from runs i-n of 2026-12-03 on
#: ResNet-50's layers (docs/results/h200.md): the tile, and with it how many programs share an
#: SM (2-4 stages of 24-48 KiB), mattered more than anything else; split-K for the layers with
#: few tiles, BLOCK_K 32 for channels that are an odd multiple of 32; 64 x 64 tiles, three
#: programs an SM, for the 1x1 C1024 -> 256 14² layer's 392 tiles (0.91x cuDNN against 0.88x
#: with 64 x 128, run 18 of 2026-12-04: at most 3 half-tiles an SM, not 2 whole ones)
HOPPER_CONV_CONFIGS = ((128, 64, 64, 3, 1, 4), (128, 128, 64, 3, 1, 4), (128, 128, 64, 4, 1, 4),
                       (128, 64, 64, 4, 1, 4), (64, 128, 64, 4, 1, 4), (64, 256, 64, 4, 1, 4),
                       (128, 128, 64, 2, 1, 4), (128, 64, 64, 2, 1, 4), (64, 128, 64, 3, 1, 4),
                       (128, 64, 32, 4, 1, 4), (128, 128, 64, 4, 2, 4), (128, 128, 64, 3, 2, 4),
                       (64, 128, 64, 4, 2, 4), (64, 128, 64, 3, 2, 4), (128, 64, 32, 6, 1, 4),
                       (64, 64, 64, 4, 1, 4))


def shared_bytes(config, element_bytes: int) -> int:
    """Shared memory a configuration takes (bytes): the ring of input and filter blocks, or the
    output tile (float32 when the reduction is split) if larger: the compiler gives the ring's
    memory to the output tile once the ring is done (the kernel's metadata says so)."""
    ring = config["STAGES"] * (config["BLOCK_M"] + config["BLOCK_N"]) * config["BLOCK_K"]
    out_bytes = 4 if config["SPLIT_K"] > 1 else element_bytes
    return max(ring * element_bytes, config["BLOCK_M"] * config["BLOCK_N"] * out_bytes)


def twice_the_output_channels(config, problem) -> str:
    """Why a tile wider than 64 output channels is too wide for the layer: its BLOCK_N is twice
    K or more, so half of it computes nothing ("" when it is not)."""
    if config["BLOCK_N"] >= 2 * problem["K"] and config["BLOCK_N"] > 64:
        return f"BLOCK_N = {config['BLOCK_N']} is twice K = {problem['K']} or more"
    return ""


def hopper_conv_prune(config, problem, resources) -> str | None:
    """Why the tuner skips ``config`` for ``problem`` (None: it races): its tiles overflow
    shared memory, its BLOCK_N is twice the output channels or more (half the tile computes
    nothing), or, strided along W, its BLOCK_K does not divide C."""
    if overflow := resources.shared_memory_problem(shared_bytes(config, 2)):  # fp16 or bf16
        return overflow
    wide = twice_the_output_channels(config, problem)
    if wide:
        return wide
    if problem.get("stride", (1, 1))[1] > 1 and problem["C"] % config["BLOCK_K"]:
        return (f"a block of {config['BLOCK_K']} channels would run past C = {problem['C']} "
                "into the next pixel's (a strided layer's view keeps stride_w pixels in a row)")
    return None


#: the tuner's search space: level 0 the default, level 1 every configuration above
HOPPER_CONV_SPACE = SearchSpace(default=Config(**dict(zip(HOPPER_CONV_NAMES,
                                                          HOPPER_CONV_CONFIGS[0]))),
                                small=configs_from_rows(HOPPER_CONV_NAMES, HOPPER_CONV_CONFIGS[1:]),
                                prune=hopper_conv_prune)

forbidden_in_graded_calls(hopper_conv_kernel)
