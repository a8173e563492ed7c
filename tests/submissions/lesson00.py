"""Submissions of lesson 00 (00_getting_started) and the points each must lose."""
from tests.submissions import Submission

KERNEL = "silu_mul_solution"
BYTES = "bytes_solution"
CORRECT = "test_silu_mul_correct"

SUBMISSIONS = [
    # a grid of n // BLOCK programs: the last partial block is never written
    Submission("tail_not_covered",
               {KERNEL: ("silu_mul_kernel[(triton.cdiv(n, BLOCK_SIZE),)]",
                         "silu_mul_kernel[(n // BLOCK_SIZE,)]")},
               loses=(CORRECT,), reason="NaN",
               details={CORRECT: ("case (shape=", "seed", "first bad element")}),
    Submission("wrong_dtype",        # always returns float32
               {KERNEL: ("out = torch.empty_like(x)",
                         "out = torch.empty_like(x, dtype=torch.float32)")},
               loses=(CORRECT,), reason="dtype"),
    Submission("library_shortcut",   # PyTorch does the work
               {KERNEL: ("    out = torch.empty_like(x)\n",
                         "    return F.silu(x) * y\n    out = torch.empty_like(x)\n")},
               loses=(CORRECT,), reason="LibraryShortcut"),
    Submission("half_precision_intermediate",  # rounds silu(x) to float16: float32 loses accuracy
               {KERNEL: ("out = x * tl.sigmoid(x) * y",
                         "silu = (x * tl.sigmoid(x)).to(tl.float16)\n"
                         "    out = silu.to(tl.float32) * y")},
               loses=(CORRECT,), reason="tolerance"),
    Submission("eager_bytes_forgets_intermediate",
               {BYTES: ("return (2 + 3) * n * element_size", "return 3 * n * element_size")},
               loses=("test_bytes",), reason="eager_bytes"),
    Submission("uses_a_demonstration_name",   # n_small is bound only by a demo cell
               {BYTES: ("return (2 + 3) * n * element_size",
                        "return (2 + 3) * n * element_size * n_small // n_small")},
               loses=("test_bytes",), reason="only a cell grading skips defines `n_small`"),
    Submission("noisy_but_correct",  # warnings and stderr output cost nothing
               {KERNEL: ("    out = torch.empty_like(x)\n",
                         "    import warnings\n"
                         "    warnings.warn('a harmless warning (on stderr)')\n"
                         "    print('debug output')\n"
                         "    out = torch.empty_like(x)\n")},
               loses=()),
]
