"""Submissions of lesson 02 (02_tiled_matmul) and the points each must lose."""
from tests.submissions import Submission

TILED = "tiled_matmul_solution"
BIAS_RELU = "matmul_bias_relu_solution"
BMM = "bmm_solution"
CORRECT = "test_tiled_matmul_correct"
TRAFFIC = "test_tiled_matmul_traffic"

SUBMISSIONS = [
    # A grid of M // BLOCK_M x N // BLOCK_N programs: tail tiles are never computed and stay NaN.
    # The traffic check (64^3, 32-blocks: no tail) still passes.
    Submission("tail_tiles_not_computed",
               {TILED: ("grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)",
                        "grid = ((M // block_m) * (N // block_n),)")},
               loses=(CORRECT,), reason="NaN"),
    # Strides taken from the shapes, as if every input were contiguous: right for contiguous
    # inputs (the traffic check), wrong for transposed and strided views. (Its reads stay inside
    # the inputs' storage, so the interpreter reads no foreign memory.)
    Submission("assumes_contiguous",
               {TILED: ("a.stride(0), a.stride(1),\n"
                        "                              b.stride(0), b.stride(1),",
                        "K, 1,\n                              N, 1,")},
               loses=(CORRECT,), reason="tolerance"),
    # Accumulates in the output dtype: float32 is fine, float16 rounds the running sum at every
    # K step and fails the long-K check (error 1.2e-3 to 1.4e-3 against a tolerance of 5e-4).
    Submission("fp16_accumulator",
               {TILED: ("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
                        "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=c_ptr.dtype.element_ty)")},
               loses=(CORRECT,), reason="tolerance",
               details={CORRECT: ("case (M=32, N=32, K=2048", "seed", "tolerance 0.0005")}),
    # PyTorch does the work: both cells that call tiled_matmul under the guard fail.
    Submission("library_shortcut",
               {TILED: ("    M, K = a.shape\n",
                        "    return torch.matmul(a, b)\n    M, K = a.shape\n")},
               loses=(CORRECT, TRAFFIC), reason="LibraryShortcut"),
    # Correct, but with 16 x 16 tiles whatever it is asked for: twice the loads of 32 x 32 tiles.
    Submission("ignores_block_sizes",
               {TILED: ("    M, K = a.shape\n",
                        "    block_m = block_n = 16\n    M, K = a.shape\n")},
               loses=(TRAFFIC,), reason="over the budget"),
    Submission("relu_before_bias",
               {BIAS_RELU: ("    acc = acc + bias.to(tl.float32)[None, :]\n"
                            "    acc = tl.maximum(acc, 0.0)\n",
                            "    acc = tl.maximum(acc, 0.0)\n"
                            "    acc = acc + bias.to(tl.float32)[None, :]\n")},
               loses=("test_matmul_bias_relu_correct",), reason="tolerance"),
    # Uses a's batch stride for b. Every graded bmm case has a.stride(0) <= b.stride(0), so the
    # wrong reads stay inside b's storage, and some cases have them differ.
    Submission("bmm_uses_a_batch_stride",
               {BMM: ("b.stride(0), b.stride(1), b.stride(2)",
                      "a.stride(0), b.stride(1), b.stride(2)")},
               loses=("test_bmm_correct",), reason="tolerance"),
]
