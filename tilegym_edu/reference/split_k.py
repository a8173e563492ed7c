"""Matmul for the shapes lesson 03's kernels leave slow: split-K for outputs too small to fill
the GPU, the persistent kernel on padded copies for rows tensor descriptors cannot read, and
one tuned entry point that picks, per shape, the fastest of lesson 03's pipelined kernel, its
persistent tensor-descriptor kernel (where the layout allows descriptors, else on padded
copies), split-K and, for a decoding step's few rows, the skinny kernel (`skinny`).

Why padded copies: a tensor descriptor (TMA) reads rows that start at multiples of 16 bytes.
An fp16 matrix of 2949 columns has rows of 5898 bytes, so neither lesson 03's persistent
kernel nor cuBLAS's fastest kernels can read it; on the H200 cuBLAS ran 8205 x 5921 x 2949 at
135 TFLOP/s against 670-689 on aligned shapes (docs/results/h200-2026-12-01-matmul-shapes.md).
Copying a and b into buffers whose rows are padded with zeros to a multiple of 16 bytes moves
each input once more (83 MB there, about 0.03 ms at the H200's 4.2 TB/s, against 2.1 ms for
cuBLAS's product), after which the persistent kernel runs on aligned rows; c is computed
padded and copied out.

Why split-K: a 256 x 256 output is 4 tiles of 128 x 128, so lesson 03's kernels run 4 programs
on a GPU of 132 SMs, each walking all of K alone. Split-K also cuts K into SPLIT_K ranges: tile
x range programs each compute a partial product in float32, and a second kernel adds the
partials (in a fixed order: the result does not depend on scheduling).

Shapes: ``a`` (M, K), ``b`` (K, N), any strides; the result (M, N) in a's dtype (float16,
bfloat16 or float32), accumulated in float32. Launch options come in one ``config`` mapping, as
in `pipelined`.
"""
import torch
import triton
import triton.language as tl

from tilegym_edu.grading import forbidden_in_graded_calls
from tilegym_edu.reference.skinny import (SKINNY_ROWS, SKINNY_SPACE, skinny_matmul,
                                          skinny_matmul_kernel)
from tilegym_edu.reference.pipelined import (PERSISTENT_SPACE, PIPELINED_SPACE, launch_persistent,
                                             matmul_problem, matmul_prune,
                                             persistent_matmul_kernel, pipelined_matmul,
                                             pipelined_matmul_kernel, tma_output, tma_problem)
from tilegym_edu.tiles import grouped_tile
from tilegym_edu.tune import (Config, KernelGroup, SearchSpace, TuneResult, autotune,
                              configs_from_rows, path_configs, path_prune, split_path)


@triton.jit
def split_k_matmul_kernel(a_ptr, b_ptr, partial_ptr, M, N, K, K_PER_SPLIT,
                          stride_am, stride_ak, stride_bk, stride_bn,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr):
    """partial[s] = a[:, ks] @ b[ks, :] in float32 for the K range ks = [s * K_PER_SPLIT,
    min((s + 1) * K_PER_SPLIT, K)) of split s = program_id(1), one BLOCK_M x BLOCK_N tile per
    program_id(0) in grouped order; partial is (splits, M, N), contiguous. K_PER_SPLIT is a
    multiple of BLOCK_K. Rows and columns past the edge wrap around (% M, % N), as in lesson 03's
    pipelined kernel; only each range's last step needs a mask."""
    pid = tl.program_id(0)
    split = tl.program_id(1)
    pid_m, pid_n = grouped_tile(pid, tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    k_start = split * K_PER_SPLIT
    k_len = tl.minimum(K - k_start, K_PER_SPLIT)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + (k_start + offs_k)[None, :] * stride_ak
    b_ptrs = b_ptr + (k_start + offs_k)[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(k_len, BLOCK_K)):
        k_left = k_len - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(partial_ptr + split * M * N + rows[:, None] * N + cols[None, :], acc, mask=mask)


@triton.jit
def split_k_reduce_kernel(partial_ptr, c_ptr, M, N, SPLITS, stride_cm, stride_cn,
                          BLOCK: tl.constexpr):
    """c = the sum over s of partial[s] ((splits, M, N) float32, contiguous), split 0 first,
    for BLOCK elements of c per program, converted to c's dtype."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M * N
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(SPLITS):
        acc += tl.load(partial_ptr + s * M * N + offs, mask=mask, other=0.0)
    rows, cols = offs // N, offs % N
    tl.store(c_ptr + rows * stride_cm + cols * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=mask)


#: the split-K default: lesson 03's tile, K cut in 16 ranges
SPLIT_K_DEFAULT = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, SPLIT_K=16,
                       num_warps=8, num_stages=4)
#: elements of c each program of the reduction adds up
REDUCE_BLOCK = 1024


def k_per_split(K: int, split_k: int, block_k: int) -> int:
    """The length of each K range: K / split_k rounded up to whole BLOCK_K steps."""
    return triton.cdiv(triton.cdiv(K, split_k), block_k) * block_k


@forbidden_in_graded_calls
def split_k_matmul(a: torch.Tensor, b: torch.Tensor, config=None) -> torch.Tensor:
    """a @ b by split-K; ``config`` (a mapping) overrides SPLIT_K_DEFAULT (SPLIT_K is how many K
    ranges at most: fewer when K is short). Needs (splits, M, N) float32 of scratch memory."""
    options = {**SPLIT_K_DEFAULT, **(config or {})}
    split_k = options.pop("SPLIT_K")
    (M, K), N = a.shape, b.shape[1]
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a is {tuple(a.shape)} and b {tuple(b.shape)}: a's columns must be "
                         "b's rows")
    length = k_per_split(K, split_k, options["BLOCK_K"])
    splits = max(1, triton.cdiv(K, length))
    partial = torch.empty((splits, M, N), device=a.device, dtype=torch.float32)
    tiles = triton.cdiv(M, options["BLOCK_M"]) * triton.cdiv(N, options["BLOCK_N"])
    split_k_matmul_kernel[(tiles, splits)](a, b, partial, M, N, K, length, a.stride(0),
                                           a.stride(1), b.stride(0), b.stride(1), **options)
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    split_k_reduce_kernel[(triton.cdiv(M * N, REDUCE_BLOCK),)](
        partial, c, M, N, splits, c.stride(0), c.stride(1), BLOCK=REDUCE_BLOCK)
    return c


def split_k_prune(config, problem, resources) -> str | None:
    """lesson 03's limits (shared memory, accumulator registers), no split shorter than four
    BLOCK_K steps (the partials would cost more than they save), and no partials past 2**31
    elements, which the kernels' 32-bit offsets (split * M * N) cannot reach: on the H200 a
    prefill's 32640 x 11264 product in 8 ranges crashed with an illegal memory access."""
    M, N, K = problem["M"], problem["N"], problem["K"]
    if config["SPLIT_K"] * 4 * config["BLOCK_K"] > K:
        return (f"K = {K} in {config['SPLIT_K']} ranges leaves fewer than four "
                f"steps of {config['BLOCK_K']} each")
    splits = triton.cdiv(K, k_per_split(K, config["SPLIT_K"], config["BLOCK_K"]))
    if splits * M * N >= 2**31:
        return (f"{splits} partials of {M} x {N} hold {splits * M * N:,} elements, past the "
                f"2**31 that 32-bit offsets reach")
    return matmul_prune(config, problem, resources)


_SPLIT_NAMES = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "SPLIT_K", "num_warps", "num_stages")
#: level 1 holds, besides square tiles, 128 x 256 tiles with 4 to 64 ranges: a large-K product
#: with a small output is memory-bound (256 x 256 x 524288: 128 FLOPs per byte of a and b), and
#: with tiles as wide as the output no two programs want the same range of a (0.97x cuBLAS there
#: on the H200, 64 ranges); at 1024 x 1024 the output has 32 such tiles, one wave of 128
#: programs at 4 ranges, 1/4 of the partials 16 ranges write
SPLIT_K_SPACE = SearchSpace(
    default=Config(**SPLIT_K_DEFAULT),
    small=configs_from_rows(_SPLIT_NAMES, [
        (128, 128, 64, 8, 4, 8, 4), (128, 128, 64, 8, 32, 8, 4), (128, 128, 64, 8, 64, 8, 4),
        (64, 128, 64, 8, 16, 4, 4), (64, 64, 64, 8, 32, 4, 4), (128, 256, 64, 8, 16, 8, 3),
        (128, 256, 64, 8, 32, 8, 3), (128, 256, 64, 8, 64, 8, 3), (128, 256, 64, 8, 4, 8, 3),
        (128, 256, 64, 8, 8, 8, 3)]),
    grid={"BLOCK_M": (64, 128), "BLOCK_N": (64, 128, 256), "BLOCK_K": (64, 128),
          "GROUP_M": (8,), "SPLIT_K": (2, 4, 8, 16, 32, 64, 128), "num_warps": (4, 8),
          "num_stages": (3, 4)},
    prune=split_k_prune, cap=120)

def padded_rows(t: torch.Tensor, rows: int, columns: int) -> torch.Tensor:
    """A new row-major (rows, columns) tensor holding ``t`` (2-D, any strides) in its top-left
    corner and zeros elsewhere: only the padding is zeroed, the rest is one copy."""
    out = torch.empty((rows, columns), device=t.device, dtype=t.dtype)
    out[:t.shape[0], :t.shape[1]].copy_(t)
    out[t.shape[0]:].zero_()
    out[:t.shape[0], t.shape[1]:].zero_()
    return out


@forbidden_in_graded_calls
def padded_persistent_matmul(a: torch.Tensor, b: torch.Tensor, config) -> torch.Tensor:
    """a @ b for inputs tensor descriptors cannot read (rows not a multiple of 16 bytes, or not
    row-major): the persistent kernel with ``config`` (every launch option) on copies whose rows
    are padded with zeros to multiples of 16 bytes (the zeros add nothing to the products), into
    a padded c whose first N columns are copied out. Needs M x K8 + K8 x N8 + M x N8 elements of
    scratch memory, K8 and N8 being K and N rounded up to 16 bytes."""
    (M, K), N = a.shape, b.shape[1]
    align = 16 // a.element_size()
    k8, n8 = triton.cdiv(K, align) * align, triton.cdiv(N, align) * align
    a8, b8 = padded_rows(a, M, k8), padded_rows(b, k8, n8)
    c8 = torch.empty((M, n8), device=a.device, dtype=a.dtype)
    launch_persistent.__wrapped__(a8, b8, c8, config)
    return c8[:, :N].contiguous()


#: the ways to run a matmul, each with its search space; a configuration of SHAPE_SPACE names
#: its way in PATH
PATHS = {"pipelined": PIPELINED_SPACE, "persistent": PERSISTENT_SPACE, "split_k": SPLIT_K_SPACE,
         "padded": PERSISTENT_SPACE, "skinny": SKINNY_SPACE}


def shape_prune(config, problem, resources) -> str | None:
    """A path's own prune; no persistent configuration where tensor descriptors cannot read the
    inputs (problem["tma"] says why not), and no padded one where they can (the copies would
    buy nothing)."""
    path = config["PATH"]
    if path == "persistent" and problem["tma"]:
        return f"the persistent kernel reads through tensor descriptors: {problem['tma']}"
    if path == "padded" and not problem["tma"]:
        return "tensor descriptors read these inputs as they are: no copies needed"
    return path_prune(PATHS, config, problem, resources)


#: every path's candidates in one space: the tuner races them all and caches the winner, PATH
#: included, per shape; the default (level 0, and what the interpreter runs) is lesson 03's
SHAPE_SPACE = SearchSpace(
    default=Config(**PIPELINED_SPACE.default, PATH="pipelined"),
    small=path_configs(PATHS),
    prune=shape_prune)


#: what the tuner keys SHAPE_SPACE's results on: the source of every kernel a path runs
SHAPE_KERNELS = KernelGroup("shape_matmul", (pipelined_matmul_kernel, persistent_matmul_kernel,
                                             split_k_matmul_kernel, split_k_reduce_kernel,
                                             skinny_matmul_kernel))


def run_path(a: torch.Tensor, b: torch.Tensor, config) -> torch.Tensor:
    """a @ b on the path config["PATH"] (a mapping) names, with the rest of it as options."""
    path, options = split_path(config)
    if path == "pipelined":
        return pipelined_matmul.__wrapped__(a, b, options)
    if path == "split_k":
        return split_k_matmul.__wrapped__(a, b, options)
    if path == "padded":
        return padded_persistent_matmul.__wrapped__(a, b, options)
    if path == "skinny":
        return skinny_matmul.__wrapped__(a, b, options)
    c = tma_output.__wrapped__(a, b)
    launch_persistent.__wrapped__(a, b, c, options)
    return c


def shape_problem(a: torch.Tensor, b: torch.Tensor) -> dict[str, object]:
    """lesson 03's problem, and why tensor descriptors cannot read a and b ("" when they can)."""
    c_row_bytes = b.shape[1] * a.element_size()
    tma = tma_problem(a, b) or ("" if c_row_bytes % 16 == 0 else
                                f"c's rows would be {c_row_bytes} bytes: not a multiple of 16")
    return {**matmul_problem(a, b), "tma": tma}


def tune_shape_matmul(a: torch.Tensor, b: torch.Tensor, level: int = 1) -> TuneResult:
    """The tuner's race of every path of SHAPE_SPACE for a @ b (once per shape, then cached,
    the winner's PATH included; a hit costs dictionary lookups). Products of at most 16 rows
    are raced even under tune.TUNE_ABOVE_MS: a decoding step's take 10-40 µs each and run
    several times per token, and lesson 03's default tile of 128 rows leaves most SMs idle on
    them. They are raced as CUDA graphs, the GPU's work alone, as a decoding step runs: their
    launches take longer in Python than on the GPU. On the H200 of run 37 (2026-12-04) lesson
    03's pipelined kernel ran the MLP's products at about 34 and 26 µs a call where run y's
    pick, the skinny kernel, had taken 20 and 15 (2026-12-02): probably races timed as plain
    launches on a slow host (inferred from run 37's log, docs/results/h200.md). Raced as graphs,
    run 38 (2026-12-05) picked the skinny kernel for every product of the step again."""
    return autotune(SHAPE_KERNELS, shape_problem(a, b), SHAPE_SPACE,
                    lambda config: run_path(a, b, config), level=level,
                    **({"min_ms": 0, "race_as_graphs": True} if a.shape[0] <= SKINNY_ROWS
                       else {}))


@forbidden_in_graded_calls
def shape_matmul(a: torch.Tensor, b: torch.Tensor, level: int = 1) -> torch.Tensor:
    """a @ b on whichever of the pipelined, persistent (on a and b, or on padded copies),
    split-K and, for at most 16 rows, skinny kernels :func:`tune_shape_matmul` found fastest
    for this shape."""
    return run_path(a, b, tune_shape_matmul(a, b, level).config)


forbidden_in_graded_calls(split_k_matmul_kernel)
forbidden_in_graded_calls(split_k_reduce_kernel)
