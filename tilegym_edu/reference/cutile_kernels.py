"""Kernels of lesson 07 in cuTile (CUDA Tile Python: the ``cuda-tile`` package, imported as
``cuda.tile``): lesson 00's fused SiLU-and-multiply, lesson 03's grouped and persistent matmuls
and lesson 04's FlashAttention forward, each the twin of a Triton kernel of the course
(docs/cutile-notes.md maps them).

A cuTile kernel is written for one block and sees whole tiles: ``ct.load(array, index, shape)``
reads the tile at ``index`` of the array cut into tiles of ``shape`` (no pointers, no masks; a
tile that runs past the edge is padded on load and clipped on store), and the compiler picks the
threads, the shared-memory staging, TMA and the pipelining that Triton's ``num_warps`` and
``num_stages`` set by hand. Tile sizes are compile-time constants and powers of two.

Shapes: ``silu_mul`` takes any two contiguous tensors of one shape; ``matmul`` and
``persistent_matmul`` take ``a`` (M, K) and ``b`` (K, N), row-major, and return (M, N);
``flash_attention`` takes ``q``, ``k``, ``v`` (batch, heads, seq, head_dim), contiguous, and
returns o of q's shape. Matmul and attention accumulate in float32 and return the inputs' dtype.
Inputs are read detached: there is no autograd.

cuda.tile is optional. Without it this module still imports, and every kernel is defined, as
Python, but cannot run: ``@cutile_kernel`` (tilegym_edu.cutile) is ``ct.kernel`` where cuda.tile
imports and otherwise keeps the function, and a launch raises CutileMissing, naming
``make cutile``. So lesson 07 can include these kernels by source (tilegym_edu.includes) on any
machine.
"""
import math
from typing import Mapping

import torch

from tilegym_edu.cutile import ConstBool, ConstInt, ct, cutile_kernel, launch
from tilegym_edu.grading import forbidden_in_graded_calls

#: log2(e): exp(x) = exp2(x * LOG2E); the softmax runs in base 2, on the GPU's native exp2
LOG2E = 1.4426950408889634

# The defaults below come from the H200 (cuda-tile 1.7.0, tileiras 13.4.92, fp16; 2026-12-02,
# docs/results/h200-2026-12-02-cutile.md and benchmarks/cutile_hints.py's run). Tiles and kernel
# options go together: a 128 x 256 float32 accumulator needs the registers of two warp groups
# (num_worker_warps=8); with the compiler's 4 worker warps those tiles ran at 45-77 TFLOP/s.

#: elements per block of silu_mul (lesson 00's BLOCK_SIZE)
SILU_MUL_TILE = 1024
#: matmul's tiles and GROUP_M, the tile rows of one group; with two blocks an SM (the kernel's
#: occupancy=2) 645 TFLOP/s at 4096³ (0.95x cuBLAS) and 652 at 8192³ (1.00x), 3-4% more than
#: the compiler's own choice
MATMUL_DEFAULT = dict(TILE_M=128, TILE_N=128, TILE_K=64, GROUP_M=8)
#: persistent_matmul's tiles and LATENCY, the hint on its a and b loads: 1 (light DRAM traffic)
#: to 10 (heavy). With 8 worker warps, 609 TFLOP/s at 8192 x 8192 x 512 (1.02x cuBLAS) and 697
#: at 4096³ (0.96x); 128 x 128 tiles reached 510 and 556
PERSISTENT_DEFAULT = dict(TILE_M=128, TILE_N=256, TILE_K=64, GROUP_M=8, LATENCY=5)
#: flash_attention's query and key tiles: 64 queries against 128 keys a step (575-580 TFLOP/s
#: at B4 H32 S4096 D128, 0.90-0.92x cuDNN; 128 x 128 ran at half that)
ATTENTION_DEFAULT = dict(TILE_M=64, TILE_N=128)

#: the longest dimension an array may have: cuTile's shapes and indices are int32 by default
MAX_DIM = 2**31 - 1
HALF_TYPES = (torch.float16, torch.bfloat16)


def check_on_gpu(**tensors: torch.Tensor) -> None:
    """Raise ValueError, saying what to change, unless every tensor is a contiguous CUDA tensor
    and all are on one device."""
    for name, t in tensors.items():
        if not t.is_cuda:
            raise ValueError(f"{name} is on {t.device}: cuTile runs on an NVIDIA GPU, "
                             f"move it with {name}.cuda()")
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (strides {t.stride()}): "
                             f"pass {name}.contiguous()")
    devices = {t.device for t in tensors.values()}
    if len(devices) > 1:
        raise ValueError(f"{', '.join(tensors)} are on {sorted(map(str, devices))}: "
                         "move them to one device")


def check_silu_mul_inputs(a: torch.Tensor, b: torch.Tensor) -> None:
    """Raise ValueError, saying what to change, unless silu_mul can take a and b."""
    if a.shape != b.shape or a.dtype != b.dtype:
        raise ValueError(f"a and b must match: got {tuple(a.shape)} {a.dtype} "
                         f"and {tuple(b.shape)} {b.dtype}")
    if a.dtype not in (torch.float32, *HALF_TYPES):
        raise ValueError(f"silu_mul takes float16, bfloat16 or float32, not {a.dtype}")
    if a.numel() > MAX_DIM:
        raise ValueError(f"a has {a.numel()} elements, more than cuTile's int32 indices reach "
                         f"({MAX_DIM}): split it")
    check_on_gpu(a=a, b=b)


def check_matmul_inputs(a: torch.Tensor, b: torch.Tensor) -> None:
    """Raise ValueError, saying what to change, unless the matmuls can take a and b."""
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"a must be (M, K) and b (K, N); got shapes {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: a's columns (K) "
                         "must equal b's rows")
    if a.dtype != b.dtype or a.dtype not in HALF_TYPES:
        raise ValueError(f"a and b must both be float16 or both bfloat16; got {a.dtype} and "
                         f"{b.dtype} (convert with .half() or .bfloat16())")
    check_on_gpu(a=a, b=b)


def check_attention_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Raise ValueError, saying what to change, unless flash_attention can take q, k, v."""
    if q.dim() != 4:
        raise ValueError(f"q must be (batch, heads, seq, head_dim), got shape {tuple(q.shape)}")
    if k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"q, k, v must have one shape; got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if not q.dtype == k.dtype == v.dtype or q.dtype not in HALF_TYPES:
        raise ValueError(f"q, k, v must all be float16 or all bfloat16; got {q.dtype}, "
                         f"{k.dtype}, {v.dtype}")
    if q.shape[-1] not in (64, 128):
        raise ValueError(f"head_dim must be 64 or 128 (a tile dimension: a power of two), "
                         f"not {q.shape[-1]}")
    check_on_gpu(q=q, k=k, v=v)


def tile_options(config: Mapping[str, int] | None, default: Mapping[str, int]) -> dict[str, int]:
    """``default`` overridden by ``config``; ValueError for a key the kernel does not take, a
    tile size that is not a power of two, GROUP_M below 1 or LATENCY outside 1..10."""
    options = {**default, **(config or {})}
    unknown = sorted(set(options) - set(default))
    if unknown:
        raise ValueError(f"unknown configuration keys {unknown}: the kernel takes "
                         f"{sorted(default)}")
    for name, value in options.items():
        if name.startswith("TILE_") and (value < 1 or value & (value - 1)):
            raise ValueError(f"{name}={value}: cuTile's tile sizes are powers of two")
    if options.get("GROUP_M", 1) < 1:
        raise ValueError(f"GROUP_M={options['GROUP_M']}: a group holds at least one tile row")
    if not 1 <= options.get("LATENCY", 1) <= 10:
        raise ValueError(f"LATENCY={options['LATENCY']}: ct.load's latency hint is 1 to 10")
    return options


def grouped_tile(tile, num_tiles_m, num_tiles_n, GROUP_M):
    """(tile_m, tile_n): the output tile of number ``tile``, numbered in groups of GROUP_M
    tile rows, as tilegym_edu.tiles.grouped_tile numbers them. A plain function: called
    from a kernel, it is compiled into it."""
    tiles_in_group = GROUP_M * num_tiles_n
    first_m = (tile // tiles_in_group) * GROUP_M
    group_size_m = min(num_tiles_m - first_m, GROUP_M)    # the last group may be shorter
    tile_m = first_m + (tile % tiles_in_group) % group_size_m
    tile_n = (tile % tiles_in_group) // group_size_m
    return tile_m, tile_n


@cutile_kernel
def silu_mul_kernel(a, b, out, TILE: ConstInt):
    """out = silu(a) * b = a / (1 + exp(-a)) * b for tile ct.bid(0) of TILE elements of the
    1-D arrays a, b, out (one length, one dtype), in float32. The last tile runs past the
    end: its loads read undetermined padding (PaddingMode.UNDETERMINED, the default) and
    the store drops those elements, so they never reach memory."""
    bid = ct.bid(0)
    x = ct.load(a, index=(bid,), shape=(TILE,)).astype(ct.float32)
    y = ct.load(b, index=(bid,), shape=(TILE,)).astype(ct.float32)
    ct.store(out, index=(bid,), tile=(x / (1.0 + ct.exp(-x)) * y).astype(out.dtype))


@cutile_kernel(occupancy=2)     # two blocks per SM: 3-4% faster on the H200 (MATMUL_DEFAULT)
def matmul_kernel(a, b, c, TILE_M: ConstInt, TILE_N: ConstInt, TILE_K: ConstInt,
                  GROUP_M: ConstInt):
    """c = a @ b, one TILE_M x TILE_N tile of c per block, in grouped order: a (M, K),
    b (K, N), c (M, N). Tiles past the edge of a and b read zeros (PaddingMode.ZERO), so
    the last K step adds nothing for the missing columns; c's tile is clipped on store."""
    num_tiles_m = ct.cdiv(a.shape[0], TILE_M)
    num_tiles_n = ct.cdiv(b.shape[1], TILE_N)
    tile_m, tile_n = grouped_tile(ct.bid(0), num_tiles_m, num_tiles_n, GROUP_M)
    acc = ct.zeros((TILE_M, TILE_N), dtype=ct.float32)
    for k in range(ct.cdiv(a.shape[1], TILE_K)):
        x = ct.load(a, index=(tile_m, k), shape=(TILE_M, TILE_K),
                    padding_mode=ct.PaddingMode.ZERO)
        y = ct.load(b, index=(k, tile_n), shape=(TILE_K, TILE_N),
                    padding_mode=ct.PaddingMode.ZERO)
        acc = ct.mma(x, y, acc)     # x @ y + acc on the tensor cores, float32 acc
    ct.store(c, index=(tile_m, tile_n), tile=acc.astype(c.dtype))


@cutile_kernel(num_worker_warps=8)   # two warp groups hold a 128 x 256 float32 accumulator
def persistent_matmul_kernel(a, b, c, TILE_M: ConstInt, TILE_N: ConstInt,
                             TILE_K: ConstInt, GROUP_M: ConstInt, LATENCY: ConstInt):
    """c = a @ b with ct.num_blocks(0) blocks (one per SM) that each walk over output tiles
    bid, bid + num_blocks, ... in grouped order; the tile loop and the K loop are those of
    matmul_kernel. LATENCY (1 to 10) tells the compiler how heavy the DRAM traffic of the
    a and b loads is: higher values typically prefetch deeper."""
    num_tiles_m = ct.cdiv(a.shape[0], TILE_M)
    num_tiles_n = ct.cdiv(b.shape[1], TILE_N)
    num_k = ct.cdiv(a.shape[1], TILE_K)
    for tile in range(ct.bid(0), num_tiles_m * num_tiles_n, ct.num_blocks(0)):
        tile_m, tile_n = grouped_tile(tile, num_tiles_m, num_tiles_n, GROUP_M)
        acc = ct.zeros((TILE_M, TILE_N), dtype=ct.float32)
        for k in range(num_k):
            x = ct.load(a, index=(tile_m, k), shape=(TILE_M, TILE_K),
                        padding_mode=ct.PaddingMode.ZERO, latency=LATENCY)
            y = ct.load(b, index=(k, tile_n), shape=(TILE_K, TILE_N),
                        padding_mode=ct.PaddingMode.ZERO, latency=LATENCY)
            acc = ct.mma(x, y, acc)
        ct.store(c, index=(tile_m, tile_n), tile=acc.astype(c.dtype))


@cutile_kernel(occupancy=2)     # two blocks per SM, as cuda-tile's AttentionFMHA sample asks
def flash_attention_kernel(q, k, v, o, qk_scale: float, HEADS: ConstInt,
                           HEAD_DIM: ConstInt, TILE_M: ConstInt, TILE_N: ConstInt,
                           CAUSAL: ConstBool):
    """o = softmax(q k^T / sqrt(HEAD_DIM)) v for one TILE_M tile of queries of one (batch,
    head): block (i, batch * HEADS + head); q, k, v, o are (batch, heads, seq, HEAD_DIM).
    Keys and values stream through in TILE_N tiles with the online softmax, in base 2
    (qk_scale = log2(e) / sqrt(HEAD_DIM)); the seq x seq scores never leave the chip.
    Key tiles before ``first_masked`` need no mask; the loop's only test of ``j``,
    ``j >= first_masked``, is what cuTile's loop_split pass turns into two loops, one
    without masks and one with, as lesson 04 writes them by hand. Causal attention stops
    at the diagonal."""
    block_m = ct.bid(0)
    batch = ct.bid(1) // HEADS
    head = ct.bid(1) % HEADS
    seq_len = k.shape[2]
    rows = (block_m * TILE_M + ct.arange(TILE_M, dtype=ct.int32))[:, None]  # (TILE_M, 1)
    cols_in_tile = ct.arange(TILE_N, dtype=ct.int32)[None, :]             # (1, TILE_N)
    # rows past seq_len read zeros: finite scores, never stored
    q_tile = ct.load(q, index=(batch, head, block_m, 0), shape=(1, 1, TILE_M, HEAD_DIM),
                     padding_mode=ct.PaddingMode.ZERO).reshape((TILE_M, HEAD_DIM))
    acc = ct.zeros((TILE_M, HEAD_DIM), dtype=ct.float32)
    l_i = ct.zeros((TILE_M, 1), dtype=ct.float32)
    m_i = ct.full((TILE_M, 1), -math.inf, dtype=ct.float32)
    if CAUSAL:
        end = ct.cdiv(min((block_m + 1) * TILE_M, seq_len), TILE_N)
        first_masked = min(block_m * TILE_M // TILE_N, seq_len // TILE_N)
    else:
        end = ct.cdiv(seq_len, TILE_N)
        first_masked = seq_len // TILE_N
    for j in range(end):
        # k's tile is loaded transposed, (HEAD_DIM, TILE_N): order swaps the last two axes
        k_tile = ct.load(k, index=(batch, head, 0, j), shape=(1, 1, HEAD_DIM, TILE_N),
                         order=(0, 1, 3, 2), padding_mode=ct.PaddingMode.ZERO,
                         latency=2).reshape((HEAD_DIM, TILE_N))
        qk = ct.mma(q_tile, k_tile, ct.zeros((TILE_M, TILE_N), dtype=ct.float32))
        if j >= first_masked:
            cols = j * TILE_N + cols_in_tile
            valid = ct.full((TILE_M, TILE_N), True, dtype=ct.bool_) & (cols < seq_len)
            if CAUSAL:
                valid = valid & (rows >= cols)
            qk = ct.where(valid, qk, -math.inf)
        # the scale is positive, so it can wait until after the row maximum
        m_new = ct.maximum(m_i, ct.max(qk, axis=-1, keepdims=True) * qk_scale)
        p = ct.exp2(qk * qk_scale - m_new, flush_to_zero=True)
        alpha = ct.exp2(m_i - m_new, flush_to_zero=True)
        l_i = l_i * alpha + ct.sum(p, axis=-1, keepdims=True)
        v_tile = ct.load(v, index=(batch, head, j, 0), shape=(1, 1, TILE_N, HEAD_DIM),
                         padding_mode=ct.PaddingMode.ZERO,
                         latency=4).reshape((TILE_N, HEAD_DIM))
        acc = ct.mma(p.astype(v.dtype), v_tile, acc * alpha)
        m_i = m_new
    out = (acc / l_i).astype(o.dtype).reshape((1, 1, TILE_M, HEAD_DIM))
    ct.store(o, index=(batch, head, block_m, 0), tile=out)


@forbidden_in_graded_calls
def silu_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """silu(a) * b elementwise, computed in float32, for contiguous CUDA tensors a and b of
    one shape (any) and dtype (float16, bfloat16 or float32); returns that shape and dtype.
    One block per SILU_MUL_TILE elements of the flattened tensors."""
    check_silu_mul_inputs(a, b)
    out = torch.empty_like(a)
    n = a.numel()
    if n:
        launch(a.device, (ct.cdiv(n, SILU_MUL_TILE),), silu_mul_kernel,
               (a.detach().view(-1), b.detach().view(-1), out.view(-1), SILU_MUL_TILE))
    return out


@forbidden_in_graded_calls
def matmul(a: torch.Tensor, b: torch.Tensor,
           config: Mapping[str, int] | None = None) -> torch.Tensor:
    """a @ b for a (M, K) and b (K, N), row-major float16 or bfloat16 CUDA tensors, any
    sizes: returns (M, N) in a's dtype, accumulated in float32. One block per output tile;
    ``config`` overrides MATMUL_DEFAULT (TILE_M, TILE_N, TILE_K, GROUP_M)."""
    check_matmul_inputs(a, b)
    opts = tile_options(config, MATMUL_DEFAULT)
    M, N = a.shape[0], b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    if c.numel():
        tiles = ct.cdiv(M, opts["TILE_M"]) * ct.cdiv(N, opts["TILE_N"])
        launch(a.device, (tiles,), matmul_kernel,
               (a.detach(), b.detach(), c, opts["TILE_M"], opts["TILE_N"], opts["TILE_K"],
                opts["GROUP_M"]))
    return c


@forbidden_in_graded_calls
def persistent_matmul(a: torch.Tensor, b: torch.Tensor,
                      config: Mapping[str, int] | None = None) -> torch.Tensor:
    """a @ b as matmul computes it, with one block per SM (never more blocks than output
    tiles), each looping over tiles; ``config`` overrides PERSISTENT_DEFAULT (TILE_M,
    TILE_N, TILE_K, GROUP_M, LATENCY)."""
    check_matmul_inputs(a, b)
    opts = tile_options(config, PERSISTENT_DEFAULT)
    M, N = a.shape[0], b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    if c.numel():
        tiles = ct.cdiv(M, opts["TILE_M"]) * ct.cdiv(N, opts["TILE_N"])
        sms = torch.cuda.get_device_properties(a.device).multi_processor_count
        launch(a.device, (min(sms, tiles),), persistent_matmul_kernel,
               (a.detach(), b.detach(), c, opts["TILE_M"], opts["TILE_N"], opts["TILE_K"],
                opts["GROUP_M"], opts["LATENCY"]))
    return c


@forbidden_in_graded_calls
def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    config: Mapping[str, int] | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(head_dim)) v, causal if asked, for q, k, v (batch, heads, seq,
    head_dim) of one shape, contiguous float16 or bfloat16 CUDA tensors, head_dim 64 or 128,
    any seq; scores in float32, o of q's shape and dtype. ``config`` overrides
    ATTENTION_DEFAULT (TILE_M queries and TILE_N keys per tile)."""
    check_attention_inputs(q, k, v)
    opts = tile_options(config, ATTENTION_DEFAULT)
    batch, heads, seq, head_dim = q.shape
    out = torch.empty_like(q)
    if out.numel():
        grid = (ct.cdiv(seq, opts["TILE_M"]), batch * heads)
        launch(q.device, grid, flash_attention_kernel,
               (q.detach(), k.detach(), v.detach(), out, LOG2E / math.sqrt(head_dim),
                heads, head_dim, opts["TILE_M"], opts["TILE_N"], bool(causal)))
    return out
