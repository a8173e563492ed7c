"""The Gluon convolution's host side, without a GPU: the box each tile covers, which layers and
machines it refuses (and says why), what its configurations take from shared memory, and its
place in shape_conv2d's race. Its kernel runs in tests/gpu/test_conv_hopper_gpu.py."""
import pytest
import torch

from tilegym_edu import tune
from tilegym_edu.reference import conv_hopper, conv_persistent

pytestmark = pytest.mark.beside


@pytest.mark.parametrize("N, P, Q, block_m, box", [
    (32, 56, 56, 128, (2, 8, 8)),     # 56 = 7 x 8 both ways: no pixel computed twice
    (32, 14, 14, 128, (32, 2, 2)),    # 14 = 7 x 2: whole images in a box
    (32, 7, 7, 128, (16, 1, 8)),      # one row of 8 for 7 pixels: the least waste
    (1, 13, 17, 64, (1, 16, 4)),     # 1 x 5 boxes, where 16 wide would take 4 x 2
    (1, 1, 1, 64, (1, 1, 64))])
def test_box_covers_the_output_with_the_fewest_boxes(N, P, Q, block_m, box):
    assert conv_hopper.box_shape(block_m, N, P, Q) == box
    bn, bh, bw = box
    assert bn * bh * bw == block_m


def test_box_count_is_minimal_against_every_power_of_two_box():
    import itertools
    N, P, Q = 3, 28, 20
    best = conv_hopper.box_shape(128, N, P, Q)
    count = lambda b: -(-N // b[0]) * -(-P // b[1]) * -(-Q // b[2])  # noqa: E731
    for hb, wb in itertools.product(range(8), range(8)):
        if hb + wb <= 7:
            other = (128 >> (hb + wb), 1 << hb, 1 << wb)
            assert count(best) <= count(other)


@pytest.mark.parametrize("N, C, H, W, K", [(32, 1024, 14, 14, 256), (3, 16, 14, 14, 8)])
def test_a_pointwise_layer_is_one_row_of_pixels_over_the_same_memory(N, C, H, W, K):
    """A 1x1 layer of stride 1 without padding is y = x @ w^T over its pixels: as one row of
    N·H·W pixels, cut into runs of 64 (3 images of 14 x 14: 10 runs, where boxes take 12)."""
    x = torch.randn(N, C, H, W).to(memory_format=torch.channels_last)
    w = torch.randn(K, C, 1, 1).to(memory_format=torch.channels_last)
    y = torch.empty(N, K, H, W).to(memory_format=torch.channels_last)
    x_rows, y_rows = conv_hopper.pixels_in_one_row(x, w, y, 1, 0)
    assert x_rows.shape == (1, C, 1, N * H * W) and y_rows.shape == (1, K, 1, N * H * W)
    assert x_rows.data_ptr() == x.data_ptr() and y_rows.data_ptr() == y.data_ptr()
    y_rows.copy_(torch.einsum("nchw,kc->nkhw", x_rows, w[:, :, 0, 0]))  # written through the view
    torch.testing.assert_close(y, torch.nn.functional.conv2d(x, w), rtol=1e-4, atol=1e-4)
    assert conv_hopper.box_shape(64, *y_rows.shape[:1], *y_rows.shape[2:]) == (1, 1, 64)


@pytest.mark.parametrize("R, stride, padding, sliced", [
    (3, 1, 1, None), (1, 2, 0, None), (1, 1, 1, None), (1, 1, 0, "x"), (1, 1, 0, "y")])
def test_other_layers_keep_their_images(R, stride, padding, sliced):
    """Taps of a 3x3 filter, strides and padding cross image rows: those layers keep their
    (N, P, Q) boxes, as does an x or a y whose pixels are not one run of memory (a slice with
    gaps between its rows)."""
    x = torch.randn(4, 8, 6, 6).to(memory_format=torch.channels_last)
    if sliced == "x":
        x = x[:, :, :, :4]
    w = torch.randn(8, 8, R, R).to(memory_format=torch.channels_last)
    y = torch.nn.functional.conv2d(x, w, stride=stride, padding=padding).to(
        memory_format=torch.channels_last)
    if sliced == "y":
        y = torch.empty(4, 8, 6, 8).to(memory_format=torch.channels_last)[:, :, :, :6]
    x_rows, y_rows = conv_hopper.pixels_in_one_row(x, w, y, stride, padding)
    assert x_rows is x and y_rows is y


def _layer(C=64, K=64, dtype=torch.float16, R=3):
    x = torch.zeros(1, C, 8, 8, dtype=dtype).to(memory_format=torch.channels_last)
    w = torch.zeros(K, C, R, R, dtype=dtype).to(memory_format=torch.channels_last)
    return x, w


def test_refuses_without_a_hopper_gpu_and_says_why():
    x, w = _layer()
    reason = conv_hopper.hopper_conv_problem(x, w)
    assert "Hopper" in reason or "Triton" in reason


def test_shape_conv2d_never_races_it_where_it_cannot_run():
    x, w = _layer()
    problem = conv_persistent.shape_conv_problem(x, w, 1, 1, 1)
    assert problem["hopper"]
    config = next(c for c in conv_persistent.SHAPE_CONV_SPACE.configs(1) if c["PATH"] == "hopper")
    assert "Gluon" in conv_persistent.shape_conv_prune(config, problem,
                                                       tune.Resources(shared_bytes=232448))


def test_every_configuration_fits_an_h200_and_the_prune_counts_like_the_kernel():
    h200 = tune.Resources(shared_bytes=232448)
    problem = {"K": 256}
    for row in conv_hopper.HOPPER_CONV_CONFIGS:
        config = dict(zip(conv_hopper.HOPPER_CONV_NAMES, row))
        assert conv_hopper.hopper_conv_prune(config, problem, h200) is None, config
    config = dict(zip(conv_hopper.HOPPER_CONV_NAMES, (128, 128, 64, 4, 2, 4)))
    # 4 stages of (128 + 128) x 64 halves; the 128 x 128 float32 tile of partial sums reuses them
    assert conv_hopper.shared_bytes(config, 2) == 4 * 256 * 64 * 2
    config = dict(zip(conv_hopper.HOPPER_CONV_NAMES, (128, 128, 32, 2, 2, 4)))
    assert conv_hopper.shared_bytes(config, 2) == 128 * 128 * 4
    small = tune.Resources(shared_bytes=48 * 1024)
    assert "shared memory" in conv_hopper.hopper_conv_prune(config, problem, small)


def test_prune_drops_tiles_twice_as_wide_as_the_output_channels():
    h200 = tune.Resources(shared_bytes=232448)
    config = dict(zip(conv_hopper.HOPPER_CONV_NAMES, (128, 128, 64, 4, 1, 4)))
    assert "twice K" in conv_hopper.hopper_conv_prune(config, {"K": 64}, h200)
    assert conv_hopper.hopper_conv_prune(config, {"K": 72}, h200) is None


def test_prune_keeps_channel_blocks_inside_a_pixel_when_strided_along_w():
    h200 = tune.Resources(shared_bytes=232448)
    config = dict(zip(conv_hopper.HOPPER_CONV_NAMES, (128, 64, 64, 3, 1, 4)))
    strided = {"K": 64, "C": 96, "stride": (2, 2)}
    assert "past C" in conv_hopper.hopper_conv_prune(config, strided, h200)
    assert conv_hopper.hopper_conv_prune(config, {**strided, "stride": (2, 1)}, h200) is None
    assert conv_hopper.hopper_conv_prune(config, {**strided, "C": 128}, h200) is None
