"""Submissions of lesson 07 (07_cutile) and the points each must lose.

SUBMISSIONS are graded in interpreter mode (tests/test_lessons.py): the plain-Python exercises.
cuTile has no CPU interpreter, so the wrong cuTile kernels (CUTILE_SUBMISSIONS) are graded only on
a GPU with cuTile (tests/gpu/test_lessons_gpu.py); each cuTile one was compiled offline for sm_90
with cuda-tile 1.7.0, so it fails by what it computes, not by failing to compile."""
from tests.submissions import OnGpu, Submission

TILES = "tile_arithmetic_solution"
KEY_TILES = "key_tiles_solution"
SILU = "silu_mul_solution"
MATMUL = "matmul_solution"
PERSISTENT = "persistent_solution"
FLASH = "flash_attention_solution"

#: lesson 02's tiled matmul in Triton, as a learner might paste it into lesson 07 (the cuTile
#: matmul it replaces is kept, renamed)
TRITON_MATMUL = """import triton
import triton.language as tl


@triton.jit
def triton_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK: tl.constexpr):
    rm = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    rn = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k in range(0, K, BLOCK):
        rk = k + tl.arange(0, BLOCK)
        x = tl.load(a_ptr + rm[:, None] * K + rk[None, :],
                    mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        y = tl.load(b_ptr + rk[:, None] * N + rn[None, :],
                    mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, y)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a, b, config=None):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    triton_matmul_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64))](a, b, c, M, N, K, BLOCK=64)
    return c


"""

SUBMISSIONS = [
    # The span is not clipped at the edge of the array: the padding counted as elements read.
    Submission("tile_span_unclipped",
               {TILES: ("range(i * t, min((i + 1) * t, n))", "range(i * t, (i + 1) * t)")},
               loses=("test_tile_arithmetic",), reason="tile_span("),
    # A causal query tile visits every key tile, as a non-causal one does: right without the
    # causal mask, and wrong (tiles wholly above the diagonal visited) with it.
    Submission("key_tiles_causal_visits_every_tile",
               {KEY_TILES: ("end = -(-min((block_m + 1) * TILE_M, seq_len) // TILE_N)",
                            "end = -(-seq_len // TILE_N)")},
               loses=("test_key_tiles",), reason="key_tiles(",
               details={"test_key_tiles": ("causal=True",)}),
]

CUTILE_SUBMISSIONS = [
    # The grid rounds down: the last, partial tile is never computed and its elements stay NaN
    # (sizes below one tile launch no block at all). The speed cell's 2^26 elements are whole
    # tiles, so it passes there.
    Submission("silu_mul_drops_the_tail_tile",
               {SILU: ("(ct.cdiv(n, SILU_MUL_TILE),)", "(n // SILU_MUL_TILE,)")},
               loses=("test_silu_mul_correct",), reason="checks failed"),
    # The K loop stops before the last, partial tile of K: right where K is a multiple of TILE_K
    # (the speed cell's 4096), wrong elsewhere.
    Submission("matmul_drops_the_k_tail",
               {MATMUL: ("for k in range(ct.cdiv(a.shape[1], TILE_K)):",
                         "for k in range(a.shape[1] // TILE_K):")},
               loses=("test_matmul_correct",), reason="checks failed"),
    # No zero padding on the loads: the last K step multiplies whatever the padding holds. NAN
    # stands for "undetermined" (which may hold anything) so that the failure is certain; the
    # speed cell's 8192 x 8192 x 512 has no partial tile, but there the NaN padding makes the
    # kernel slow (GPU_SUBMISSIONS).
    Submission("persistent_without_zero_padding",
               {PERSISTENT: ("padding_mode=ct.PaddingMode.ZERO, latency=LATENCY)",
                             "padding_mode=ct.PaddingMode.NAN, latency=LATENCY)")},
               loses=("test_persistent_correct",), reason="checks failed"),
    # The causal mask compares key columns with row numbers counted from the query tile's start,
    # not the sequence's: right for the first query tile only. The speed cell is not causal.
    Submission("flash_causal_mask_from_the_tile_start",
               {FLASH: ("rows = (block_m * TILE_M + ct.arange(TILE_M, dtype=ct.int32))[:, None]",
                        "rows = ct.arange(TILE_M, dtype=ct.int32)[:, None]")},
               loses=("test_flash_attention_correct",), reason="checks failed",
               details={"test_flash_attention_correct": ("causal=True",)}),
    # cuBLAS does the work: every graded call of matmul is refused (the shortcut guard covers a
    # cuTile lesson as it covers a Triton one), its speed cell included (ALSO_LOSES).
    Submission("library_shortcut",
               {MATMUL: ("    check_matmul_inputs(a, b)\n", "    return torch.matmul(a, b)\n")},
               loses=("test_matmul_correct",), reason="LibraryShortcut"),
    # Lesson 02's tiled matmul in Triton instead of cuTile: right, and as fast as lesson 02's,
    # but this lesson grades cuTile kernels, so its setup cell refuses Triton launches in graded
    # calls (grading.refuse_triton_in_graded_calls): the correctness cell and, through the same
    # guarded call, the speed cell (ALSO_LOSES).
    Submission("matmul_in_triton",
               {MATMUL: ("def matmul(a: torch.Tensor, b: torch.Tensor,\n           config",
                         TRITON_MATMUL + "def cutile_matmul(a: torch.Tensor, b: torch.Tensor,\n"
                                         "                  config")},
               loses=("test_matmul_correct",),
               reason="LibraryShortcut: the graded call launched the Triton kernel"),
    # 16 x 16 x 16 tiles by default: correct everywhere, but each block reuses a loaded element
    # only 16 times, far too few to feed the tensor cores.
    Submission("matmul_with_tiny_tiles",
               {MATMUL: ("opts = tile_options(config, MATMUL_DEFAULT)",
                         'opts = tile_options(config, {**MATMUL_DEFAULT, "TILE_M": 16, '
                         '"TILE_N": 16, "TILE_K": 16})')},
               loses=("test_matmul_speed",), reason="too slow"),
]

#: cells a GPU submission loses besides its own: NaN padding also costs the persistent kernel its
#: speed, 0.68x lesson 03's persistent Triton kernel on the H200 (run r of 2026-12-02), where the
#: reference measured 1.05x with zero padding; the library shortcut is refused in the speed cell
#: too (not yet graded on a GPU: added after run r)
ALSO_LOSES = {"persistent_without_zero_padding": ("test_persistent_speed",),
              "library_shortcut": ("test_matmul_speed",),
              "matmul_in_triton": ("test_matmul_speed",)}

#: graded on a GPU with cuTile (tests/gpu/test_lessons_gpu.py)
GPU_SUBMISSIONS = [OnGpu(submission, also_loses=ALSO_LOSES.get(submission.name, ()))
                   for submission in CUTILE_SUBMISSIONS]
