"""Submissions of lesson 06 (06_capstone) and the points each must lose."""
from tests.submissions import OnGpu, Submission

RMSNORM = "rmsnorm_solution"
ROPE = "rope_solution"
SWIGLU = "swiglu_solution"
KERNELS = "bring_your_kernels"
T_RMSNORM = "test_rmsnorm_correct"
T_ROPE = "test_rope_correct"
T_SWIGLU = "test_swiglu_correct"
T_KERNELS = "test_your_kernels"
T_MODEL = "test_swapped_model"
T_DECODE = "test_decoding"   # the model again, decoding over the KV cache
MATMUL_DEF = "def matmul(a: torch.Tensor, b: torch.Tensor, config=None) -> torch.Tensor:\n"

# PyTorch does SwiGLU: Exercise 3a and the model (which calls swiglu in every layer), in the
# prefill and decoding, fail under the guard; so do the timed cells that call swiglu, which need
# a GPU.
LIBRARY_SHORTCUT = Submission(
    "library_shortcut",
    {SWIGLU: ("    y = torch.empty((rows, hidden), device=h.device, dtype=h.dtype)\n",
              "    return torch.nn.functional.silu(h[:, :hidden]) * h[:, hidden:]\n")},
    loses=(T_SWIGLU, T_MODEL, T_DECODE), reason="LibraryShortcut")

SUBMISSIONS = [
    # RMSNorm without its epsilon: identical wherever mean(x^2) >> 1e-5, so the model's logits (rows
    # of size about 1) still pass; rows of zeros give 0/0 = NaN and rows of 1e-4 are scaled up too
    # much, which Exercise 1a checks. Which case the reason names first depends on the graded
    # seeds, which no one knows in advance: the first case, one element x, comes out as sign(x)
    # instead of x / sqrt(x^2 + eps), outside the tolerance whenever |x| is small.
    Submission("rmsnorm_without_eps",
               {RMSNORM: ("tl.rsqrt(mean_sq + eps)", "tl.rsqrt(mean_sq)")},
               loses=(T_RMSNORM,), reason="checks failed",
               details={T_RMSNORM: ("case (rows=", "seed")}),
    # The two halves of each head swapped on loading: the rotation pairs the right elements but
    # turns the wrong half by the wrong sign. Exercise 2a and, through q and k, the model's logits
    # fail.
    Submission("rope_wrong_half",
               {ROPE: ("    x1 = tl.load(base, mask=mask, other=0.0).to(tl.float32)\n"
                       "    x2 = tl.load(base + HALF, mask=mask, other=0.0).to(tl.float32)\n",
                       "    x1 = tl.load(base + HALF, mask=mask, other=0.0).to(tl.float32)\n"
                       "    x2 = tl.load(base, mask=mask, other=0.0).to(tl.float32)\n")},
               loses=(T_ROPE, T_MODEL, T_DECODE), reason="tolerance"),
    # rope_ rotates a copy and returns it: right values (the checker, which works on a copy,
    # passes), but x itself is not rotated, which the in-place check catches (x's error is above
    # the tolerance), and the model's q and k stay unrotated (prefill and decoding).
    Submission("rope_not_in_place",
               {ROPE: ("    rope_kernel[(seq, batch)](x, cos",
                       "    x = x.clone()\n    rope_kernel[(seq, batch)](x, cos")},
               loses=(T_ROPE, T_MODEL, T_DECODE), reason="error above the tolerance"),
    # Attention without the causal mask: every position sees the future. The grouped-query check of
    # Exercise 4a (causal) and the model's logits fail.
    Submission("attention_without_causal_mask",
               {KERNELS: ("HEAD_DIM=head_dim, CAUSAL=causal, **config)",
                          "HEAD_DIM=head_dim, CAUSAL=False, **config)")},
               loses=(T_KERNELS, T_MODEL), reason="tolerance",
               details={T_MODEL: ("case (batch=", "first bad element")}),
    LIBRARY_SHORTCUT,
    # Red team round 18: the lesson's tolerance table loosened through an alias (`|=` on a name
    # bound to it, which the audit cannot follow) while the model check's own cell runs the model
    # on these kernels. The kernels are right, but the model cells read a table the learner's
    # code changed, so they fail and say so (tilegym_edu.lesson_data).
    Submission("loosens_the_tolerance_through_an_alias",
               {KERNELS: (MATMUL_DEF, "def loosen_the_tolerance():\n"
                                      "    try:\n"
                                      "        tolerance = MODEL_TOLERANCE\n"
                                      "    except NameError:\n"
                                      "        return\n"
                                      "    tolerance |= {torch.float32: 1e30,"
                                      " torch.float16: 1e30}\n"
                                      f"\n\n{MATMUL_DEF}    loosen_the_tolerance()\n")},
               loses=(T_MODEL, T_DECODE), reason="LessonDataChanged: your code changed "
               "`MODEL_TOLERANCE`"),
    # Red team round 22: the model's own code may index (its embedding) and add (its
    # residuals) inside the graded call; that allowance used to cover the learner's functions
    # the model calls too, and a SwiGLU built from table lookups and additions, with no kernel,
    # passed the model's cells. Here the wrapper adds with PyTorch: Exercise 3a refuses it, and
    # so do the model's cells now (grading.without_allowances).
    Submission("adds_in_the_swiglu_wrapper",
               {SWIGLU: ("    return y\n", "    return y + 0.0\n")},
               loses=(T_SWIGLU, T_MODEL, T_DECODE), reason="torch operation 'add'"),
    # Lesson 04's attention for every shape with its causal mask aligned to the start: the prompt
    # (as many queries as keys) comes out right, each decoding step's queries miss the keys of
    # the blocks before the diagonal. Only the decoding check fails: the prefill runs on
    # flash_attention.
    Submission("decode_mask_aligned_to_the_start",
               {KERNELS: ("query + shift, offs_n", "query, offs_n")},
               loses=(T_DECODE,), reason="tolerance"),
]

#: graded on a GPU too (tests/gpu/test_lessons_gpu.py): there the shortcut also loses the timed
#: cells that call swiglu, its own bandwidth check and the model's prefill
GPU_SUBMISSIONS = [OnGpu(LIBRARY_SHORTCUT,
                         also_loses=("test_swiglu_bandwidth", "test_model_vs_eager"))]
