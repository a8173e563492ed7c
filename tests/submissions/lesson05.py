"""Submissions of lesson 05 (05_convolution) and the points each must lose."""
from tests.submissions import OnGpu, Submission

IM2COL = "im2col_solution"
CONV = "conv2d_solution"
INDEX = "test_im2col_index"
CORRECT = "test_conv2d_correct"
STRIDED = "test_conv2d_strided"
TRAFFIC = "test_never_materialises"
DEPTHWISE = "depthwise_solution"
PACKED = "packed_solution"

# PyTorch does the work: every cell that calls conv2d under the guard fails. The traffic check
# counts a guarded call (after an unguarded one that would tune), so it fails too; so do the speed
# cells, which need a GPU (measure_speed makes a guarded call first).
EMPTY_Y = ("    y = torch.empty((N, K, P, Q), device=x.device, dtype=x.dtype, "
           "memory_format=torch.channels_last)\n")
LIBRARY_SHORTCUT = Submission(
    "library_shortcut",
    {CONV: (EMPTY_Y, "    return F.conv2d(x, w, stride=stride, padding=padding,\n"
                     "                    dilation=dilation)"
                     ".contiguous(memory_format=torch.channels_last)\n" + EMPTY_Y)},
    loses=(CORRECT, STRIDED, TRAFFIC), reason="LibraryShortcut")

# conv2d's tuned launch, and in its place a launch of a direct kernel, one output pixel (all K
# channels) per program, defined after the wrapper
LAUNCH_TUNED = ("    config = autotune(conv2d_kernel, conv_problem(x, w, stride, padding, "
                "dilation), CONV_SPACE,\n                      launch, level=1).config\n"
                "    launch(config)\n    return y\n")
LAUNCH_DIRECT = ("    direct_pixel_kernel[(N * P * Q,)](x, w, y, N, H, W, C, K, P, Q, R, S, sh, sw,"
                 " ph, pw, dh, dw,\n"
                 "                                      BLOCK_C=triton.next_power_of_2(C),\n"
                 "                                      BLOCK_N=triton.next_power_of_2(K))\n"
                 "    return y\n")
DIRECT_PIXEL_KERNEL = '''

@triton.jit
def direct_pixel_kernel(x_ptr, w_ptr, y_ptr, N, H, W, C, K, P, Q, R, S, STRIDE_H, STRIDE_W,
                        PAD_H, PAD_W, DIL_H, DIL_W, BLOCK_C: tl.constexpr,
                        BLOCK_N: tl.constexpr):
    m = tl.program_id(0)
    n = m // (P * Q)
    p = m // Q % P
    q = m % Q
    k = tl.arange(0, BLOCK_N)
    c = tl.arange(0, BLOCK_C)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for r in range(R):
        for s in range(S):
            h = p * STRIDE_H - PAD_H + r * DIL_H
            w = q * STRIDE_W - PAD_W + s * DIL_W
            h = h + 0 * c      # as vectors, one per channel: the interpreter will not mix a
            w = w + 0 * c      # scalar condition into a vector mask
            inside = (c < C) & (h >= 0) & (h < H) & (w >= 0) & (w < W)
            xv = tl.load(x_ptr + ((n * H + h) * W + w) * C + c, mask=inside, other=0.0)
            wv = tl.load(w_ptr + k[:, None] * (R * S * C) + (r * S + s) * C + c[None, :],
                         mask=(k[:, None] < K) & (c[None, :] < C), other=0.0)
            acc += tl.sum(wv.to(tl.float32) * xv.to(tl.float32)[None, :], axis=1)
    tl.store(y_ptr + m * K + k, acc.to(y_ptr.dtype.element_ty), mask=k < K)
'''

# An untiled direct convolution (red-team gap G2): one program per output pixel, all K channels
# of it, looping over the taps (r, s), no tl.dot; a tap's input channels as one vector (a scalar
# loop over c loads the same bytes and fails the same way, only slower in the interpreter).
# Right everywhere (2a, 2b), and it stores y once; but every program loads all the filters
# again, so the traffic check's loads go over the budget of 16 x 16 tiles (5.4 times on its
# layer). The interpreter runs it a program per pixel: 35 s on 2a and 2b (2 cores, 2026-12-06,
# 95 s before the interpreter's dropped overflow checks went; the solution's kernel takes 5 s),
# so here it is graded on the traffic check alone, and on a GPU, through GPU_SUBMISSIONS, on
# every cell it reaches (its speed cells there too).
DIRECT_ONE_PIXEL_PER_PROGRAM = Submission(
    "direct_one_pixel_per_program", {CONV: (LAUNCH_TUNED, LAUNCH_DIRECT + DIRECT_PIXEL_KERNEL)},
    loses=(TRAFFIC,), reason="over the budget of 221,184",
    details={TRAFFIC: ("N1 C16 8x8 K64 3x3", "loaded 1,195,136 bytes",
                       "one output pixel or one output element")},
    interpreter_cells=(TRAFFIC,))

SUBMISSIONS = [
    # The index map forgets dilation (taps one pixel apart, always): right wherever dilation is 1,
    # wrong on the dilation-2 case. im2col_source is used by Exercise 1 alone.
    Submission("im2col_ignores_dilation",
               {IM2COL: ("    h = p * sh - ph + r * dh\n    w = q * sw - pw + s * dw\n",
                         "    h = p * sh - ph + r\n    w = q * sw - pw + s\n")},
               loses=(INDEX,), reason="im2col_source returned",
               details={INDEX: ("dilation 2", "A[")}),
    # PAD_H and PAD_W are never subtracted (the wrapper still sizes y with the padding): every
    # window is shifted down and right by the padding and reads no zeros. Stride-1 cases with
    # padding 1 fail in 2a, every padded case in 2b, and so does the traffic check, whose layer
    # pads by 1 (it checks the counted run's output, so that storing the right number of wrong
    # bytes earns nothing).
    Submission("padding_ignored",
               {CONV: ("    h0 = p * STRIDE_H - PAD_H\n    w0 = q * STRIDE_W - PAD_W\n",
                       "    h0 = p * STRIDE_H\n    w0 = q * STRIDE_W\n")},
               loses=(CORRECT, STRIDED, TRAFFIC), reason="tolerance",
               details={TRAFFIC: ("N1 C16 8x8 K64 3x3", "the counted run's output is wrong")}),
    # The height stride steps the width and the other way round: the same thing whenever the two
    # strides are equal, so 2a (stride 1 only) and the traffic check (stride 1 visible, 2 hidden)
    # pass; the strides (2, 1) and (1, 2) of 2b fail.
    Submission("stride_on_wrong_axis",
               {CONV: ("    h0 = p * STRIDE_H - PAD_H\n    w0 = q * STRIDE_W - PAD_W\n",
                       "    h0 = p * STRIDE_W - PAD_H\n    w0 = q * STRIDE_H - PAD_W\n")},
               loses=(STRIDED,), reason="tolerance",
               details={STRIDED: ("case (N=", "stride=(2, 1)", "seed", "first bad element")}),
    # x addressed as if it were NCHW, ((n * C + c) * H + h) * W + w, while it is channels_last:
    # every element read belongs to another pixel and channel (no case has C = 1, where the two
    # agree).
    # Masks are unchanged, so nothing is read out of bounds: wrong values in 2a, 2b and the traffic
    # check's output.
    Submission("nchw_indexing",
               {CONV: ("        a = tl.load(x_rows[:, None] + (r * DIL_H * W + s * DIL_W) * C"
                       " + c[None, :],\n",
                       "        a = tl.load(x_ptr + ((n[:, None] * C + c[None, :]) * H"
                       " + h[:, None]) * W + w[:, None],\n")},
               loses=(CORRECT, STRIDED, TRAFFIC), reason="tolerance"),
    LIBRARY_SHORTCUT,
    # The kernel runs twice: the output is right (2a and 2b pass), but y is stored twice, which the
    # traffic check counts.
    Submission("stores_y_twice",
               {CONV: ("    launch(config)\n    return y\n",
                       "    launch(config)\n    launch(config)\n    return y\n")},
               loses=(TRAFFIC,), reason="stored 16,384 bytes, but the output holds 8,192"),
    # The wrapper copies x with PyTorch before the kernel runs (as an im2col built with PyTorch's
    # copies would, round 13 of the red team): the output is right, but the copy's bytes count as
    # stored in the traffic check.
    Submission("copies_x_first",
               {CONV: (EMPTY_Y, "    x = x.clone(memory_format=torch.channels_last)\n" + EMPTY_Y)},
               loses=(TRAFFIC,),
               reason="stored 10,240 bytes (2,048 of them by PyTorch operations outside your "
                      "kernels"),
    DIRECT_ONE_PIXEL_PER_PROGRAM,
    # The depthwise taps ignore dilation (always one pixel apart): right on every case but the
    # dilated one.
    Submission("depthwise_ignores_dilation",
               {DEPTHWISE: ("        h = h0 + (tap // S) * DIL_H\n"
                            "        w = w0 + (tap % S) * DIL_W\n",
                            "        h = h0 + (tap // S)\n        w = w0 + (tap % S)\n")},
               loses=("test_depthwise_correct",), reason="checks failed",
               details={"test_depthwise_correct": ("dilation=2",)}),
    # Every block of groups reads the first block's input channels: stems (one group) and layers
    # whose groups fit one block stay right; 16 groups of 3 channels (two blocks of 8) do not.
    Submission("groups_read_the_first_group",
               {PACKED: ("* C + g * CB + c[None, :]", "* C + c[None, :]")},
               loses=("test_packed_correct",), reason="checks failed",
               details={"test_packed_correct": ("groups=16",)}),
]

# One GEMM per group, however narrow (no blocks of groups): correct everywhere; on a GPU the
# ResNeXt layer's 4-column GEMMs leave most of every tile idle.
ONE_GEMM_PER_GROUP = Submission(
    "one_gemm_per_group",
    {PACKED: ('GS = groups_per_block(groups, CG, KG, config.pop("GROUP_WIDTH"))',
              'GS, _ = 1, config.pop("GROUP_WIDTH")')},
    loses=())
# One channel per program, as if x were NCHW: correct everywhere; on a GPU each load takes one
# element of a pixel's channels, 2 bytes of every 32-byte sector.
DEPTHWISE_ONE_CHANNEL = Submission(
    "depthwise_one_channel_per_program",
    {DEPTHWISE: ("    config = DEPTHWISE_DEFAULT\n",
                 "    config = {**DEPTHWISE_DEFAULT, \"BLOCK_C\": 1}\n")},
    loses=())

#: graded on a GPU (tests/gpu/test_lessons_gpu.py): the shortcut (graded here too) loses both
#: speed cells of conv2d there; the two slow ones, right everywhere and graded there alone (they
#: would lose nothing here), the speed cell of their exercise
GPU_SUBMISSIONS = [OnGpu(LIBRARY_SHORTCUT,
                         also_loses=("test_conv2d_vs_im2col", "test_conv2d_vs_cudnn")),
                   OnGpu(ONE_GEMM_PER_GROUP, also_loses=("test_packed_vs_cudnn",)),
                   OnGpu(DEPTHWISE_ONE_CHANNEL, also_loses=("test_depthwise_vs_cudnn",)),
                   OnGpu(DIRECT_ONE_PIXEL_PER_PROGRAM,
                         may_lose=("test_conv2d_vs_im2col", "test_conv2d_vs_cudnn"))]
