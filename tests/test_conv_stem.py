"""reference/conv_stem.py against F.conv2d in float64 (interpreter): stems of 1 to 8 channels,
square and odd filters, strides and padding per axis, the padded operands it builds, and the
layers it refuses with what to use instead."""
import pytest
import torch
import torch.nn.functional as F

from tests.test_conv_groups import inputs
from tilegym_edu import grading
from tilegym_edu.reference import conv_stem
from tilegym_edu.tune import Resources

pytestmark = pytest.mark.beside

SMALL = dict(BLOCK_M=32, BLOCK_N=16, GROUP_M=2, num_warps=4, num_stages=1)

LAYERS = [  # (N, C, H, W, K, R, S, stride, padding)
    (2, 3, 15, 13, 8, 7, 7, 2, 3),            # a ResNet stem, small
    (1, 3, 9, 10, 16, 3, 3, 1, 1),
    (1, 1, 8, 9, 5, 5, 3, (2, 1), (1, 2)),    # one channel, a stride and padding per axis
    (1, 8, 7, 6, 20, 3, 5, 1, 0),             # 8 channels: rows of 5 x 8 = 40 -> 64
    (1, 5, 11, 7, 8, 4, 4, 3, 2),             # 5 channels padded to 8
]


@pytest.mark.parametrize("layer", LAYERS, ids=[f"C{c[1]}-{c[5]}x{c[6]}" for c in LAYERS])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_stem_conv2d_matches_f_conv2d(layer, dtype):
    N, C, H, W, K, R, S, stride, padding = layer
    x, w = inputs(N, C, H, W, K, C, R, S, dtype)
    y = conv_stem.stem_conv2d(x, w, stride, padding, config=SMALL)
    expected = F.conv2d(x.double(), w.double(), stride=stride, padding=padding)
    assert y.shape == expected.shape and y.dtype == dtype
    assert y.is_contiguous(memory_format=torch.channels_last)
    tolerance = 1e-4 if dtype == torch.float32 else 3e-3
    torch.testing.assert_close(y.double(), expected, rtol=tolerance, atol=tolerance)


def test_the_padded_operands_hold_x_and_w_where_the_kernel_reads_them():
    x, w = inputs(1, 3, 6, 5, 4, 3, 7, 7, torch.float32)
    xp, wp = conv_stem.padded_stem_operands(x, w, 2, 3, Q=3)
    assert conv_stem.stem_layout(3, 7) == (4, 32)
    assert xp.shape == (1, 12, 12, 4) and wp.shape == (4, 7, 32)   # Wp = max(11, 2·2 + 8)
    assert torch.equal(xp[0, 3:9, 3:8, :3], x[0].permute(1, 2, 0)) and not xp[..., 3].any()
    assert xp[0, :3].abs().sum() == 0 and xp[0, 9:].abs().sum() == 0
    rows = wp.view(4, 7, 8, 4)
    assert torch.equal(rows[:, :, :7, :3], w.permute(0, 2, 3, 1))
    assert not rows[:, :, 7].any() and not rows[..., 3].any()


def test_layers_the_kernel_does_not_take_are_refused_with_what_to_use():
    x, w = inputs(1, 16, 6, 6, 8, 16, 3, 3, torch.float32)
    with pytest.raises(ValueError, match="at most 8 input channels.*convolution.conv2d"):
        conv_stem.stem_conv2d(x, w, 1, 1)
    x, w = inputs(1, 3, 9, 9, 8, 3, 3, 3, torch.float32)
    with pytest.raises(ValueError, match="dilation must be 1.*packed_conv2d"):
        conv_stem.stem_conv2d(x, w, 1, 1, 2)
    with pytest.raises(ValueError, match="channels_last"):
        conv_stem.stem_conv2d(x.contiguous(), w.contiguous(), 1, 1)


def test_the_space_prunes_on_the_row_length_and_the_kernel_is_a_reference_when_graded():
    x, w = inputs(1, 3, 9, 9, 64, 3, 7, 7, torch.float16)
    problem = conv_stem.stem_problem(x, w, 2, 3)
    kept, pruned = conv_stem.STEM_SPACE.candidates(1, problem, Resources(shared_bytes=24 * 1024))
    assert kept and pruned and all("shared memory" in why for _, why in pruned)
    with pytest.raises(grading.LibraryShortcut, match="reference"):
        grading.guarded_call(conv_stem.stem_conv2d, (x, w, 2, 3))
