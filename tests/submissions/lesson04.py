"""Submissions of lesson 04 (04_flash_attention) and the points each must lose."""
from tests.submissions import OnGpu, Submission

SOFTMAX = "softmax_solution"
STATS = "online_softmax_solution"
FLASH = "flash_attention_solution"
CORRECT = "test_flash_attention_correct"
CAUSAL = "test_flash_attention_causal"
TRAFFIC = "test_never_writes_scores"
BACKWARD = "flash_backward_solution"
BACKWARD_CORRECT = "test_flash_backward_correct"
GENERAL = "flash_forward_solution"
GENERAL_CORRECT = "test_general_attention_correct"
DECODE_TRAFFIC = "test_decode_reads_kv_once"

# PyTorch does the work: every cell that calls flash_attention under the guard fails.
LIBRARY_SHORTCUT = Submission(
    "library_shortcut",
    {FLASH: ("    check_attention_inputs(q, k, v)\n",
             "    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)\n")},
    loses=(CORRECT, CAUSAL, TRAFFIC), reason="LibraryShortcut")

SUBMISSIONS = [
    # exp(x) of the raw row: fine for standard normal rows, inf / inf = NaN once values reach ~90
    # (the graded rows reach 1e4, in fp32 and in fp16).
    Submission("softmax_without_max",
               {SOFTMAX: ("    x = x - tl.max(x, axis=0)\n", "")},
               loses=("test_softmax_correct",), reason="NaN or inf"),
    # The running sum is never rescaled when the maximum grows: right only when the first block
    # holds the row's maximum.
    Submission("stats_without_rescale",
               {STATS: ("ell = ell * torch.exp(m - shift) + ", "ell = ell + ")},
               loses=("test_softmax_stats",), reason="differs from sum(exp(x - m))"),
    # Not streaming: a copy of every block kept, the statistics taken over all of them at the
    # end (round 12 of the red team: the handed-out blocks themselves are released, so only
    # counting what the function holds sees it).
    Submission("stats_keeping_copies",
               {STATS: ("    m = ell = None\n    for block in blocks:\n",
                        "    x = torch.cat([block.clone() for block in blocks], dim=1)\n"
                        "    m = x.amax(dim=1)\n"
                        "    return m, torch.exp(x - m[:, None]).sum(dim=1)\n"
                        "    for block in blocks:\n")},
               loses=("test_softmax_stats",), reason="more than four blocks' worth"),
    # Not streaming: every block asked for and dropped, then the whole matrix read from the
    # stream object (round 14 of the red team read a public `blocks.x`; the stream keeps its
    # matrix out of reach now, and its private parts are refused to learner code).
    Submission("stats_from_the_stream_s_matrix",
               {STATS: ("    m = ell = None\n    for block in blocks:\n",
                        "    for block in blocks:\n        pass\n"
                        "    x = blocks.x\n"
                        "    m = x.amax(dim=1)\n"
                        "    return m, torch.exp(x - m[:, None]).sum(dim=1)\n"
                        "    m = ell = None\n    for block in blocks:\n")},
               loses=("test_softmax_stats",), reason="reading `x` of StreamedBlocks"),
    # A plain exp2 of the scores, no running maximum subtracted (and so nothing to rescale):
    # correct for scores of order 1, inf / inf = NaN for the graded scores of ~1e3. The traffic
    # check runs at ordinary scale and still passes.
    Submission("flash_without_max",
               {FLASH: ("        p = tl.math.exp2(qk - m_new[:, None])\n"
                        "        alpha = tl.math.exp2(m_i - m_new)\n",
                        "        p = tl.math.exp2(qk)\n"
                        "        alpha = tl.math.exp2(m_new - m_new)\n")},
               loses=(CORRECT, CAUSAL), reason="NaN or inf",
               details={CORRECT: ("case (batch=", "scale=32.0", "seed")}),
    # The accumulator is not multiplied by alpha when the maximum grows: wrong as soon as a row
    # spans two key blocks, which the traffic check's output (seq 256) does too.
    Submission("accumulator_not_rescaled",
               {FLASH: ("acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])",
                        "acc = tl.dot(p.to(v.dtype), v, acc)")},
               loses=(CORRECT, CAUSAL, TRAFFIC), reason="tolerance"),
    # Query i may not see key i: row 0 sees nothing (0 / 0 = NaN), the others miss their diagonal.
    # The traffic check's causal run checks its output too, so it fails there as well.
    Submission("causal_mask_off_by_one",
               {FLASH: ("valid = valid & (offs_m[:, None] >= cols[None, :])",
                        "valid = valid & (offs_m[:, None] > cols[None, :])")},
               loses=(CAUSAL, TRAFFIC), reason="NaN or inf",
               details={CAUSAL: ("causal=True", "first bad element")}),
    # Keys past seq_len are loaded as zeros (the loads stay masked) but not masked out of the
    # scores: each gets score 0 and a weight. The causal mask hides them from every real query,
    # and the traffic check's lengths are multiples of the blocks: only non-causal cases fail.
    Submission("tail_keys_not_masked",
               {FLASH: ("valid = cols[None, :] < seq_len", "valid = cols[None, :] >= 0")},
               loses=(CORRECT,), reason="tolerance"),
    LIBRARY_SHORTCUT,
    # dS = P * dP without the softmax's correction term delta: dk and dq (through dS) come out
    # wrong on every case with more than one key, dv stays right.
    Submission("backward_without_delta",
               {BACKWARD: ("ds_t = p_t * (tl.dot(v, tl.trans(do)) - delta[None, :])",
                           "ds_t = p_t * tl.dot(v, tl.trans(do))")},
               loses=(BACKWARD_CORRECT,), reason="tolerance"),
    # dq without the 1/sqrt(head_dim) of the scores: off by a factor of 8 at head_dim 64.
    Submission("dq_not_scaled",
               {BACKWARD: ("(dq * sm_scale).to(dq_ptr.dtype.element_ty)",
                           "dq.to(dq_ptr.dtype.element_ty)")},
               loses=(BACKWARD_CORRECT,), reason="tolerance"),
    # autograd through the three PyTorch operations: the matmuls run in PyTorch, inside the
    # graded call.
    Submission("backward_by_autograd",
               {BACKWARD: ("    grads, launchers = backward_launchers(q, k, v, o, lse, do, "
                           "causal)\n",
                           "    leaves = [t.detach().requires_grad_() for t in (q, k, v)]\n"
                           "    out = naive_attention(*leaves, causal)\n"
                           "    return torch.autograd.grad(out, leaves, do)\n")},
               loses=(BACKWARD_CORRECT,), reason="LibraryShortcut"),
    # The causal mask aligned to the start, as SDPA's is_causal is: a decode step's one query
    # sees key 0 and the blocks before its diagonal only. The decode traffic check compares
    # its output too.
    Submission("causal_mask_aligned_to_the_start",
               {GENERAL: ("query + shift, offs_n", "query, offs_n")},
               loses=(GENERAL_CORRECT, DECODE_TRAFFIC), reason="tolerance",
               details={GENERAL_CORRECT: ("causal=True",)}),
    # Query head h read key/value head h % kv_heads (repeat, where GQA means repeat_interleave:
    # h // group): right only when there is one key/value head or one query head per group.
    Submission("grouped_heads_interleaved",
               {GENERAL: ("head = kv_head * GROUP + rows % GROUP",
                          "head = kv_head + rows % GROUP * kv_heads")},
               loses=(GENERAL_CORRECT, DECODE_TRAFFIC), reason="tolerance"),
]

#: graded on a GPU too (tests/gpu/test_lessons_gpu.py): the shortcut is refused in the timed
#: FlashAttention cells as well; the peak-memory cell (it measures a guarded call) may lose too
GPU_SUBMISSIONS = [OnGpu(LIBRARY_SHORTCUT,
                         also_loses=("test_flash_vs_naive", "test_flash_vs_best_sdpa"),
                         may_lose=("test_peak_memory",))]
