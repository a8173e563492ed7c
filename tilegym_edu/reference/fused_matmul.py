"""A matmul with SwiGLU in its epilogue: the capstone's MLP up-projection in one kernel.

The model's MLP computes ``h = x @ w13`` (rows, 2 * hidden), the gate and up projections side
by side, then ``silu(gate) * up`` (rows, hidden). Unfused, h goes out to memory at full width
and comes back for the SwiGLU kernel: at the capstone's prefill (8192 rows, hidden 5632,
float16) that is 185 MB written, read again, and 92 MB written, per layer. Here each program
keeps two accumulators, the gate's and the up projection's for the same output columns, both
fed by one tile of x, and stores only silu(gate) * up, computed from the float32 sums (one
rounding, where the unfused way rounds h to the model's dtype first).

:func:`matmul_swiglu` is course machinery (lesson 06's model through
``llama_kernels.reference_ops``), not an exercise. The kernel is lesson 03's persistent matmul
(``pipelined.persistent_matmul_kernel``: tiles through tensor descriptors, one program per SM)
with the second accumulator; where descriptors cannot read the inputs it falls back to
``split_k.shape_matmul`` then ``llama_kernels.swiglu``. Shapes: x (rows, dim), w13 (dim,
2 * hidden), the result (rows, hidden), in x's dtype.
"""
from __future__ import annotations

from typing import Mapping

import torch
import triton
import triton.language as tl

from tilegym_edu import device
from tilegym_edu.grading import forbidden_in_graded_calls
from tilegym_edu.reference.pipelined import matmul_problem, matmul_prune, persistent_grid_size, \
    tma_problem
from tilegym_edu.reference.skinny import SKINNY_ROWS
from tilegym_edu.tiles import cdiv, grouped_tile
from tilegym_edu.tune import Config, SearchSpace, autotune, configs_from_rows


@triton.jit
def matmul_swiglu_kernel(a_desc, gate_desc, up_desc, c_desc, M, N, K,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         GROUP_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr,
                         EPILOGUE_SPLIT: tl.constexpr, FLATTEN: tl.constexpr):
    """c = silu(a @ b_gate) * (a @ b_up), persistent: NUM_PROGRAMS programs walk the (M, N)
    output tiles in grouped order. a_desc (M, K) in blocks of BLOCK_M x BLOCK_K; gate_desc and
    up_desc the two (K, N) halves of w13 in blocks of BLOCK_K x BLOCK_N; c_desc (M, N) in
    blocks of BLOCK_M x (BLOCK_N // EPILOGUE_SPLIT). Out-of-bounds loads read zeros and
    out-of-bounds stores are dropped (TMA), so there are no masks."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    for tile in tl.range(pid, num_pid_m * num_pid_n, NUM_PROGRAMS, flatten=FLATTEN):
        pid_m, pid_n = grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M)
        offs_m = pid_m * BLOCK_M
        offs_n = pid_n * BLOCK_N
        gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([offs_m, k * BLOCK_K])
            gate = tl.dot(a, gate_desc.load([k * BLOCK_K, offs_n]), gate)
            up = tl.dot(a, up_desc.load([k * BLOCK_K, offs_n]), up)
        y = gate / (1.0 + tl.exp(-gate)) * up
        if EPILOGUE_SPLIT == 2:
            halves = tl.permute(tl.reshape(y, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            left, right = tl.split(halves)
            c_desc.store([offs_m, offs_n], left.to(c_desc.dtype))
            c_desc.store([offs_m, offs_n + BLOCK_N // 2], right.to(c_desc.dtype))
        else:
            c_desc.store([offs_m, offs_n], y.to(c_desc.dtype))


_NAMES = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "EPILOGUE_SPLIT", "FLATTEN", "num_warps",
          "num_stages")


def swiglu_prune(config: Mapping[str, object], problem: Mapping[str, object],
                 resources) -> str | None:
    """Lesson 03's matmul prune on the tile the kernel really holds: two accumulators of
    BLOCK_M x BLOCK_N are one of twice the width, and each stage holds two tiles of w13; the
    output it stages is one of those halves."""
    doubled = {**config, "BLOCK_N": 2 * config["BLOCK_N"],
               "EPILOGUE_SPLIT": 2 * config["EPILOGUE_SPLIT"]}
    return matmul_prune(doubled, problem, resources)


#: the fused kernel's search space: tiles whose two accumulators take at most 128 registers a
#: thread, as lesson 03's persistent kernel's one does, for 2-byte elements. On the H200
#: (2026-12-04, the capstone's 8192 x 2048 x 11264, against cuBLAS then torch.compile's SwiGLU)
#: the default ran at 1.03x (run f) and 1.02x (run g); in run g 3 stages with the output in one
#: piece 1.03x, 4 stages 1.01x, 256 x 64 tiles 0.90x and the default with its loops flattened
#: 0.78x (0.82x in run f); 128 x 64 and 64 x 128 tiles (0.41-0.55x, run f) are not raced
SWIGLU_SPACE = SearchSpace(
    default=Config(**dict(zip(_NAMES, (128, 128, 64, 8, 2, False, 8, 3)))),
    small=configs_from_rows(_NAMES, [
        (128, 128, 64, 8, 2, True, 8, 3), (128, 128, 64, 8, 2, False, 8, 4),
        (128, 128, 64, 8, 1, False, 8, 3), (256, 64, 64, 8, 1, False, 8, 3)]),
    prune=swiglu_prune)


def fused_problem(x: torch.Tensor, w13: torch.Tensor) -> str | None:
    """Why matmul_swiglu_kernel cannot take x (rows, dim) and w13 (dim, 2 * hidden) (None: it
    can): its tiles are sized for 2-byte elements; tensor descriptors must read x and both
    halves of w13 (rows on 16-byte boundaries, the up half starting on one) and write the
    (rows, hidden) result; and the GPU must have TMA (compute capability 9.0 or newer;
    interpreter mode runs them on the CPU). check_swiglu_inputs first."""
    if x.dtype not in (torch.float16, torch.bfloat16):
        return f"the fused kernel's tiles are sized for float16 and bfloat16, not {x.dtype}"
    hidden = w13.shape[1] // 2
    if (hidden * x.element_size()) % 16:
        return (f"the up half of w13 starts {hidden * x.element_size()} bytes into each row, "
                "and the result's rows are as long: tensor descriptors need multiples of 16 "
                "bytes (hidden a multiple of 8)")
    reason = tma_problem(x, w13)
    if reason:
        return reason
    if device.ON_GPU and not device.has_tma(x.device):
        return "tensor descriptors need compute capability 9.0 or newer"
    return None


def check_swiglu_inputs(x: torch.Tensor, w13: torch.Tensor) -> None:
    """Raise ValueError, saying what to change, unless x (rows, dim) and w13 (dim, 2 * hidden)
    make a product whose SwiGLU can be taken."""
    if x.dim() != 2 or w13.dim() != 2:
        raise ValueError(f"x and w13 must be matrices, got shapes {tuple(x.shape)} and "
                         f"{tuple(w13.shape)}")
    if x.shape[1] != w13.shape[0]:
        raise ValueError(f"x has {x.shape[1]} columns and w13 {w13.shape[0]} rows: x @ w13 "
                         "needs them equal")
    if w13.shape[1] % 2:
        raise ValueError(f"w13 has {w13.shape[1]} columns: [gate | up] needs an even number")
    if x.dtype != w13.dtype or x.device != w13.device:
        raise ValueError(f"x is {x.dtype} on {x.device}, w13 {w13.dtype} on {w13.device}: "
                         "give them one dtype and one device")


def launch_matmul_swiglu(x: torch.Tensor, w13: torch.Tensor, out: torch.Tensor,
                         config: Mapping[str, object]) -> None:
    """Run matmul_swiglu_kernel once with ``config`` into out (rows, hidden)."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    (M, K), hidden = x.shape, w13.shape[1] // 2
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    a_desc = TensorDescriptor.from_tensor(x, [bm, bk])
    gate_desc = TensorDescriptor.from_tensor(w13[:, :hidden], [bk, bn])
    up_desc = TensorDescriptor.from_tensor(w13[:, hidden:], [bk, bn])
    c_desc = TensorDescriptor.from_tensor(out, [bm, bn // config["EPILOGUE_SPLIT"]])
    programs = persistent_grid_size(cdiv(M, bm) * cdiv(hidden, bn))
    matmul_swiglu_kernel[(programs,)](a_desc, gate_desc, up_desc, c_desc, M, hidden, K,
                                      NUM_PROGRAMS=programs, **config)


@forbidden_in_graded_calls
def matmul_swiglu(x: torch.Tensor, w13: torch.Tensor,
                  config: Mapping[str, object] | None = None, level: int = 1) -> torch.Tensor:
    """silu(x @ gate) * (x @ up) for x (rows, dim) and w13 = [gate | up] (dim, 2 * hidden):
    (rows, hidden) in x's dtype, in one kernel with the configuration the tuner picks for the
    shape (or ``config``). Where fused_problem rules the kernel out, and for a decoding step's
    few rows (at most skinny.SKINNY_ROWS, where shape_matmul's skinny kernel splits K across
    the SMs and this kernel's row tiles would leave most of them idle): shape_matmul, then the
    SwiGLU kernel."""
    from tilegym_edu.reference import llama_kernels, split_k
    check_swiglu_inputs(x, w13)
    if x.shape[0] <= SKINNY_ROWS or fused_problem(x, w13):
        return llama_kernels.swiglu.__wrapped__(split_k.shape_matmul.__wrapped__(x, w13))
    out = torch.empty((x.shape[0], w13.shape[1] // 2), device=x.device, dtype=x.dtype)
    if config is None:
        problem = {**matmul_problem(x, w13), "N": w13.shape[1] // 2}
        config = autotune(matmul_swiglu_kernel, problem, SWIGLU_SPACE,
                          lambda c: launch_matmul_swiglu(x, w13, out, c), level=level).config
    launch_matmul_swiglu(x, w13, out, config)
    return out


forbidden_in_graded_calls(matmul_swiglu_kernel)

__all__ = ["matmul_swiglu_kernel", "SWIGLU_SPACE", "swiglu_prune", "fused_problem",
           "check_swiglu_inputs", "launch_matmul_swiglu", "matmul_swiglu"]
