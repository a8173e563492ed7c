"""Submissions of lesson 03 (03_software_pipelining) and the points each must lose."""
from tests.submissions import OnGpu, Submission

MODEL = "pipeline_model_solution"
SHARED = "shared_memory_solution"
MATMUL = "matmul_solution"
PERSISTENT = "persistent_solution"
SCHEDULE = "test_pipeline_schedule"
CORRECT = "test_matmul_correct"
UNPIPELINED = "test_pipelined_vs_unpipelined"
CUBLAS = "test_pipelined_vs_cublas"
SPLIT_K = "split_k_solution"
SPLIT_CORRECT = "test_split_k_correct"
SPLIT_STORES = "test_split_k_stores"
SPLIT_SPEED = "test_split_k_vs_cublas"

# K is never split (one range, whatever SPLIT_K says): the right product, but nothing of split-K,
# which the store count shows; on a GPU its 4 programs walk all of K alone, as slow as no split.
SPLIT_K_IGNORED = Submission(
    "split_k_ignored",
    {SPLIT_K: ('length = k_per_split(K, split_k, options["BLOCK_K"])',
               'length = k_per_split(K, 1, options["BLOCK_K"])')},
    loses=(SPLIT_STORES,), reason="stored")

# Split 0 walks all of K and the other splits store partials of zeros (round 14 of the red
# team): the right product and the right number of bytes stored, but one program loads far more
# than one range of a and b, which the store check's count by launch shows.
SPLIT_K_ALL_IN_SPLIT_0 = Submission(
    "split_k_all_in_split_0",
    {SPLIT_K: ("    k_len = tl.minimum(K - k_start, K_PER_SPLIT)\n",
               "    k_start = 0\n    k_len = tl.where(split == 0, K, 0)\n")},
    loses=(SPLIT_STORES,), reason="each program walks its own range of K")
# One launch walks all of K into the first partial and PyTorch zeroes the others: as many bytes
# stored as split-K stores (PyTorch's count too), but no launch stored the partials.
SPLIT_K_ZEROED_BY_TORCH = Submission(
    "split_k_zeroed_by_torch",
    {SPLIT_K: ("    split_k_matmul_kernel[(tiles, splits)](a, b, partial, M, N, K, length, ",
               "    partial[1:].zero_()\n"
               "    split_k_matmul_kernel[(tiles, 1)](a, b, partial, M, N, K, K, ")},
    loses=(SPLIT_STORES,), reason="no launch stored all 5 partials")

# Every configuration of the search space with num_stages=1: correct everywhere, and on a GPU
# (where autotune really picks from the space) as slow as the unpipelined baseline.
NUM_STAGES_FORCED_TO_1 = Submission(
    "num_stages_forced_to_1",
    {MATMUL: ("    prune=fits, cap=120)\n",
              "    prune=fits, cap=120)\n"
              "MATMUL_SPACE = tune.SearchSpace(\n"
              "    default=MATMUL_SPACE.default.replace(num_stages=1),\n"
              "    small=[config.replace(num_stages=1) for config in MATMUL_SPACE.small],\n"
              "    grid={**MATMUL_SPACE.grid, \"num_stages\": (1,)}, prune=fits, cap=120)\n")},
    loses=())

# Searches again on every call (the cache is never read): correct, and without a GPU there is
# nothing to search. On a GPU every timed call runs a whole search.
AUTOTUNES_EVERY_CALL = Submission(
    "autotunes_every_call",
    {MATMUL: ("MATMUL_SPACE, launch, level=level).config",
              "MATMUL_SPACE, launch, level=level, cache=False).config")},
    loses=())

SUBMISSIONS = [
    # Waits for the previous compute before every load, whatever S is: the S = 1 schedule. The
    # first check (S = 2) already differs.
    Submission("schedule_ignores_stages",
               {MODEL: ("load_start = 0.0 if j < S else schedule[j - S][3]",
                        "load_start = schedule[j - 1][3] if j else 0.0")},
               loses=(SCHEDULE,), reason="the rules give",
               details={SCHEDULE: ("pipeline_schedule(T=4, S=2, L=3, C=1): tile 1",)}),
    # Reuses a buffer one tile too early (tile j waits for tile j - S + 1): S - 1 buffers. The first
    # check (S = 2) gives wrong times before any S = 1 case could raise IndexError.
    Submission("buffer_reuse_off_by_one",
               {MODEL: ("schedule[j - S][3]", "schedule[j - S + 1][3]")},
               loses=(SCHEDULE,), reason="the rules give"),
    # One stage's buffers, not num_stages of them.
    Submission("shared_memory_without_stages",
               {SHARED: ("return config[\"num_stages\"] * (bm * bk + bk * bn) * element_bytes",
                         "return (bm * bk + bk * bn) * element_bytes")},
               loses=("test_shared_memory_bytes",), reason="the compiler allocated"),
    # Drops the K tail: K // BLOCK_K steps instead of cdiv(K, BLOCK_K). (Removing the tail's mask
    # instead would read past the end of a and b in the interpreter, which may crash the kernel or
    # read anything: this wrong kernel stays inside the inputs.) K = 1 gives zeros.
    Submission("k_tail_dropped",
               {MATMUL: ("for k in tl.range(0, tl.cdiv(K, BLOCK_K)):",
                         "for k in tl.range(0, K // BLOCK_K):")},
               loses=(CORRECT,), reason="error above the tolerance",
               details={CORRECT: ("case (M=1, N=1, K=1", "seed")}),
    # PyTorch does the work.
    Submission("library_shortcut",
               {MATMUL: ("    if config is None:\n        config = matmul_config(a, b)\n",
                         "    return torch.matmul(a, b)\n")},
               loses=(CORRECT,), reason="LibraryShortcut"),
    # Stores only the left half of each output tile (EPILOGUE_SPLIT = 2, the default): the right
    # halves stay NaN wherever N > 128.
    Submission("persistent_stores_left_half",
               {PERSISTENT: ("            c_desc.store([offs_m, offs_n + BLOCK_N // 2], "
                             "right.to(c_desc.dtype))\n", "")},
               loses=("test_persistent_correct",), reason="NaN"),
    # Every range stores its partial at split 0's place: they overwrite one another, and the
    # reduction adds one range's partial to scratch memory no one wrote (whatever it holds: the
    # reason may be a tolerance or a NaN). The store count is still right, but the traffic check
    # compares the output too.
    Submission("partials_in_one_slot",
               {SPLIT_K: ("partial_ptr + split * M * N + rows", "partial_ptr + rows")},
               loses=(SPLIT_CORRECT, SPLIT_STORES),
               details={SPLIT_CORRECT: ("checks failed",), SPLIT_STORES: ("output is wrong",)}),
    SPLIT_K_IGNORED,
    SPLIT_K_ALL_IN_SPLIT_0,
    SPLIT_K_ZEROED_BY_TORCH,
]

#: graded on a GPU (tests/gpu/test_lessons_gpu.py): there the first two, right everywhere and
#: graded there alone (here they would lose nothing: the interpreter has no speed to lose and
#: nothing to search), lose the two speed cells of the pipelined matmul; the unsplit split-K,
#: graded here too, its speed cell
GPU_SUBMISSIONS = [OnGpu(NUM_STAGES_FORCED_TO_1, also_loses=(UNPIPELINED, CUBLAS)),
                   OnGpu(AUTOTUNES_EVERY_CALL, also_loses=(UNPIPELINED, CUBLAS)),
                   OnGpu(SPLIT_K_IGNORED, also_loses=(SPLIT_SPEED,))]
