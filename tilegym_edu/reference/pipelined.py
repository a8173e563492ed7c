"""Matmul kernels of lesson 03: the pipelined tiled kernel and the persistent kernel that loads
its tiles through tensor descriptors (TMA on Hopper and later).

Shapes: ``a`` is (M, K), ``b`` is (K, N), the result (M, N), in the inputs' dtype (float16 or
float32) with float32 accumulation. Launch options (block sizes, ``num_warps``,
``num_stages``) come in as one ``config`` mapping (a :class:`tilegym_edu.tune.Config` or a
dict) keyed by the kernel's own names; what it leaves out keeps its default.
"""
from typing import Mapping

import torch
import triton
import triton.language as tl

from tilegym_edu import device
from tilegym_edu.grading import forbidden_in_graded_calls
from tilegym_edu.tiles import grouped_tile
from tilegym_edu.tune import TILE_NAMES, Config, SearchSpace, autotune, configs_from_rows


@triton.jit
def pipelined_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                            stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                            GROUP_M: tl.constexpr):
    """c = a @ b, one BLOCK_M x BLOCK_N tile of c per program, grouped ordering as in lesson 02.
    The K loop is a tl.range: the compiler software-pipelines it, keeping num_stages - 1 tile
    loads in flight while tl.dot works on the current tile (num_stages is a launch option).
    Rows and columns past the edge wrap around (% M, % N) instead of being masked, so only the
    last K step needs a mask; the wrapped results are never stored."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M)

    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


#: the hand-written configuration of lesson 03 (a tune.SearchSpace's level 0)
PIPELINED_DEFAULT = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=8,
                         num_stages=3)


@forbidden_in_graded_calls
def pipelined_matmul(a: torch.Tensor, b: torch.Tensor,
                     config: Mapping[str, object] | None = None) -> torch.Tensor:
    """a @ b with the pipelined kernel; ``config`` overrides PIPELINED_DEFAULT's launch options
    (use blocks of 16 to 32 in interpreter mode, where each program costs milliseconds)."""
    options = {**PIPELINED_DEFAULT, **(config or {})}
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, options["BLOCK_M"]) * triton.cdiv(N, options["BLOCK_N"]),)
    pipelined_matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1),
                                  b.stride(0), b.stride(1), c.stride(0), c.stride(1), **options)
    return c


@triton.jit
def persistent_matmul_kernel(a_desc, b_desc, c_desc, M, N, K,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                             BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                             NUM_PROGRAMS: tl.constexpr, EPILOGUE_SPLIT: tl.constexpr,
                             FLATTEN: tl.constexpr):
    """c = a @ b with NUM_PROGRAMS programs (one per SM) that each walk over output tiles
    pid, pid + NUM_PROGRAMS, ... in grouped order. Tiles move through tensor descriptors:
    a_desc is a (M, K) descriptor with blocks of BLOCK_M x BLOCK_K, b_desc (K, N) with
    BLOCK_K x BLOCK_N, c_desc (M, N) with BLOCK_M x (BLOCK_N // EPILOGUE_SPLIT). Out-of-bounds
    loads read zeros and out-of-bounds stores are dropped by the hardware (TMA on Hopper), so
    the kernel has no masks. EPILOGUE_SPLIT = 2 stores c in two halves, halving the shared
    memory the store stages through. FLATTEN = True lets the compiler pipeline the tile loop and
    the K loop as one, so the next tile's first loads overlap this tile's epilogue."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    for tile in tl.range(pid, num_tiles, NUM_PROGRAMS, flatten=FLATTEN):
        pid_m, pid_n = grouped_tile(tile, num_pid_m, num_pid_n, GROUP_M)
        offs_m = pid_m * BLOCK_M
        offs_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([offs_m, k * BLOCK_K])
            b = b_desc.load([k * BLOCK_K, offs_n])
            acc = tl.dot(a, b, acc)
        if EPILOGUE_SPLIT == 2:
            halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            left, right = tl.split(halves)
            c_desc.store([offs_m, offs_n], left.to(c_desc.dtype))
            c_desc.store([offs_m, offs_n + BLOCK_N // 2], right.to(c_desc.dtype))
        else:
            c_desc.store([offs_m, offs_n], acc.to(c_desc.dtype))


#: the hand-written configuration of the persistent kernel (its SearchSpace's level 0)
PERSISTENT_DEFAULT = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, EPILOGUE_SPLIT=2,
                          FLATTEN=True, num_warps=8, num_stages=4)


def tma_problem(a: torch.Tensor, b: torch.Tensor) -> str | None:
    """Why a and b cannot be read through tensor descriptors, or None when they can: TMA needs
    row-major (last stride 1) tensors whose rows start at multiples of 16 bytes."""
    for name, t in (("a", a), ("b", b)):
        if t.stride(-1) != 1:
            return f"{name} has last stride {t.stride(-1)}: tensor descriptors need .contiguous()"
        if (t.stride(0) * t.element_size()) % 16 or t.data_ptr() % 16:
            return (f"{name}'s rows are {t.stride(0) * t.element_size()} bytes apart: tensor "
                    f"descriptors need multiples of 16 bytes (pad the row length to a multiple "
                    f"of {16 // t.element_size()} elements)")
    return None


def persistent_grid_size(num_tiles: int) -> int:
    """Programs for a persistent launch: one per SM (4 in interpreter mode), never more than
    there are tiles."""
    facts = device.info()
    return max(1, min(num_tiles, facts.sm_count if facts else 4))


@forbidden_in_graded_calls
def tma_output(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A new (M, N) tensor for c = a @ b, in a's dtype, once tensor descriptors can read a and b
    and write c; ValueError saying why not (tma_problem, or c's rows not a multiple of 16
    bytes) otherwise."""
    problem = tma_problem(a, b)
    if problem:
        raise ValueError(problem)
    c = torch.empty((a.shape[0], b.shape[1]), device=a.device, dtype=a.dtype)
    if (c.shape[1] * c.element_size()) % 16:
        raise ValueError(f"c's rows would be {c.shape[1] * c.element_size()} bytes long: tensor "
                         "descriptors need multiples of 16 bytes")
    return c


@forbidden_in_graded_calls
def launch_persistent(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, config) -> None:
    """Run persistent_matmul_kernel once with ``config`` (every launch option) into c = a @ b:
    descriptors of a (blocks BLOCK_M x BLOCK_K), b (BLOCK_K x BLOCK_N) and c (BLOCK_M x
    BLOCK_N / EPILOGUE_SPLIT), and one program per SM (persistent_grid_size)."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    (M, K), N = a.shape, b.shape[1]
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    a_desc = TensorDescriptor.from_tensor(a, [bm, bk])
    b_desc = TensorDescriptor.from_tensor(b, [bk, bn])
    c_desc = TensorDescriptor.from_tensor(c, [bm, bn // config["EPILOGUE_SPLIT"]])
    programs = persistent_grid_size(triton.cdiv(M, bm) * triton.cdiv(N, bn))
    persistent_matmul_kernel[(programs,)](a_desc, b_desc, c_desc, M, N, K,
                                          NUM_PROGRAMS=programs, **config)


@forbidden_in_graded_calls
def persistent_matmul(a: torch.Tensor, b: torch.Tensor,
                      config: Mapping[str, object] | None = None) -> torch.Tensor:
    """a @ b with the persistent tensor-descriptor kernel; ``config`` overrides
    PERSISTENT_DEFAULT. Raises ValueError when the layout rules out descriptors (tma_output)."""
    c = tma_output(a, b)
    launch_persistent(a, b, c, {**PERSISTENT_DEFAULT, **(config or {})})
    return c


ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


def matmul_shared_bytes(config: Mapping[str, int], element_bytes: int,
                        epilogue_split: int | None = None) -> int:
    """Shared memory a matmul configuration needs, in bytes: num_stages buffers, each holding
    one BLOCK_M x BLOCK_K tile of a and one BLOCK_K x BLOCK_N tile of b. With
    ``epilogue_split`` (the persistent kernel) the output tile, or its 1/split part, is staged
    there too before its TMA store. On the H200 the compiler's figure matched this exactly for
    the pipelined kernel and to within 48 bytes (its barriers) for the persistent one
    (docs/results/h200.md)."""
    bm, bn, bk = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"]
    needed = config["num_stages"] * (bm * bk + bk * bn) * element_bytes
    if epilogue_split:
        needed += bm * (bn // epilogue_split) * element_bytes
    return needed


#: accumulator registers per thread above which the rest of the kernel no longer fits in 255
MAX_ACCUMULATOR_REGISTERS = 128


def matmul_prune(config: Mapping[str, int], problem: Mapping[str, object],
                 resources) -> str | None:
    """Why ``config`` cannot run well on a GPU with ``resources`` (a tune.Resources), or None.
    Rejects configurations whose tiles overflow shared memory (they fail to compile) or whose
    float32 accumulator takes more than MAX_ACCUMULATOR_REGISTERS registers per thread (they
    spill to slow local memory)."""
    split = config.get("EPILOGUE_SPLIT")
    needed = matmul_shared_bytes(config, ELEMENT_BYTES[str(problem["dtype"])], split)
    if overflow := resources.shared_memory_problem(needed):
        return overflow
    accumulator = config["BLOCK_M"] * config["BLOCK_N"] // (32 * config["num_warps"])
    if accumulator > MAX_ACCUMULATOR_REGISTERS:
        return (f"accumulator takes {accumulator} registers per thread "
                f"(over {MAX_ACCUMULATOR_REGISTERS}: it would spill)")
    return None



#: the pipelined kernel's search space; level 1 holds configurations that did well on the H200
#: (benchmarks/matmul_configs.py) plus smaller tiles (48 and 24 KiB in float16) that fit GPUs
#: with less shared memory, and float32
PIPELINED_SPACE = SearchSpace(
    default=Config(**PIPELINED_DEFAULT),
    small=configs_from_rows(TILE_NAMES, [
        (128, 256, 64, 8, 8, 3), (128, 256, 32, 8, 8, 5), (128, 128, 64, 8, 8, 4),
        (128, 128, 32, 8, 4, 5), (64, 128, 64, 8, 4, 4), (128, 64, 64, 8, 4, 4),
        (128, 128, 32, 8, 4, 3), (64, 64, 32, 8, 4, 3)]),
    grid={"BLOCK_M": (64, 128, 256), "BLOCK_N": (64, 128, 256), "BLOCK_K": (32, 64, 128),
          "GROUP_M": (8,), "num_warps": (4, 8), "num_stages": (2, 3, 4, 5)},
    prune=matmul_prune, cap=120)

_PERSISTENT_NAMES = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "EPILOGUE_SPLIT", "FLATTEN",
                     "num_warps", "num_stages")

#: the persistent kernel's search space (tensor descriptors: compute capability 9.0 and up)
PERSISTENT_SPACE = SearchSpace(
    default=Config(**PERSISTENT_DEFAULT),
    small=configs_from_rows(_PERSISTENT_NAMES, [
        (128, 256, 64, 8, 2, True, 8, 3), (256, 128, 64, 8, 2, True, 8, 3),
        (128, 128, 64, 8, 1, True, 8, 4), (128, 128, 64, 8, 1, False, 4, 4),
        (128, 256, 32, 8, 2, True, 8, 6), (128, 128, 32, 8, 2, True, 8, 3)]),
    grid={"BLOCK_M": (128, 256), "BLOCK_N": (128, 256), "BLOCK_K": (32, 64, 128),
          "GROUP_M": (8,), "EPILOGUE_SPLIT": (1, 2), "FLATTEN": (True, False),
          "num_warps": (4, 8), "num_stages": (2, 3, 4, 5)},
    prune=matmul_prune, cap=120)


def matmul_problem(a: torch.Tensor, b: torch.Tensor) -> dict[str, object]:
    """What the best configuration depends on: the shape and the dtype."""
    return {"M": a.shape[0], "N": b.shape[1], "K": a.shape[1],
            "dtype": str(a.dtype).removeprefix("torch.")}


@forbidden_in_graded_calls
def tuned_matmul(a: torch.Tensor, b: torch.Tensor, level: int = 1,
                 persistent: bool = False) -> torch.Tensor:
    """a @ b with the configuration tune.autotune picks for this shape (once; then cached):
    the pipelined kernel, or the persistent one with ``persistent=True``."""
    run, space, kernel = ((persistent_matmul, PERSISTENT_SPACE, persistent_matmul_kernel)
                          if persistent else
                          (pipelined_matmul, PIPELINED_SPACE, pipelined_matmul_kernel))
    result = autotune(kernel, matmul_problem(a, b), space,
                      lambda config: run.__wrapped__(a, b, config), level=level)
    return run.__wrapped__(a, b, result.config)


# a launch of a raw kernel inside a graded call raises too
forbidden_in_graded_calls(pipelined_matmul_kernel)
forbidden_in_graded_calls(persistent_matmul_kernel)
