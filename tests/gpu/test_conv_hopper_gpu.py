"""The Gluon implicit-GEMM convolution (reference/conv_hopper.py) on a Hopper GPU: every
configuration against float32 PyTorch on layers that reach every edge (padding, dilation,
channels that are not a multiple of BLOCK_K, output channels fewer than BLOCK_N, sizes that
are not multiples of a box, one image, the reduction split in more ranges than it has steps,
strides of 2 and 3, along one axis or both), in float16 and bfloat16; and shape_conv2d's race
with the Gluon kernel in it."""
import pytest
import torch
import torch.nn.functional as F

from tests.conftest import tuning_cache_in
from tilegym_edu import tune
from tilegym_edu.reference import conv_hopper, conv_persistent
from tilegym_edu.reference.convolution import check_conv_inputs, new_output

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
    reason="the Gluon convolution is written for Hopper (compute capability 9.x) GPUs")

#: (N, C, H, W, K, R, S, padding, dilation, stride)
LAYERS = [(2, 64, 56, 56, 64, 3, 3, 1, 1, 1), (3, 256, 14, 14, 256, 3, 3, 1, 1, 1),
          (5, 512, 7, 7, 128, 3, 3, 1, 1, 1), (1, 40, 13, 17, 24, 3, 3, 1, 1, 1),
          (2, 96, 33, 35, 40, 5, 5, 2, 1, 1), (2, 64, 20, 21, 72, 3, 3, 2, 2, 1),
          (4, 128, 9, 9, 256, 1, 1, 0, 1, 1), (3, 64, 14, 14, 40, 1, 1, 0, 1, 1),
          (2, 16, 11, 10, 8, 3, 5, 0, 1, 1),
          (2, 128, 56, 56, 128, 3, 3, 1, 1, 2), (3, 256, 28, 28, 64, 1, 1, 0, 1, 2),
          (2, 64, 14, 22, 32, 3, 3, 1, 1, 2), (1, 64, 16, 12, 16, 3, 3, 2, 2, 2),
          (1, 64, 12, 10, 24, 3, 3, 1, 1, (2, 1)), (1, 32, 9, 12, 16, 3, 3, 1, 1, (3, 2))]


def _output(x, w, padding, dilation, stride):
    P, Q = check_conv_inputs(x, w, stride, padding, dilation)
    return new_output(x, w.shape[0], P, Q)


def _layer(layer, dtype):
    N, C, H, W, K, R, S, padding, dilation, stride = layer
    torch.manual_seed(0)
    x = torch.randn(N, C, H, W, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
    w = (torch.randn(K, C, R, S, device="cuda", dtype=dtype) / (C * R * S) ** 0.5).to(
        memory_format=torch.channels_last)
    return x, w, padding, dilation, stride


@pytest.mark.parametrize("config", conv_hopper.HOPPER_CONV_CONFIGS, ids=str)
@pytest.mark.parametrize("layer", LAYERS, ids=str)
def test_every_configuration_matches_pytorch(layer, config):
    x, w, padding, dilation, stride = _layer(layer, torch.float16)
    assert conv_hopper.hopper_conv_problem(x, w, stride) == ""
    options = dict(zip(conv_hopper.HOPPER_CONV_NAMES, config))
    stride_w = stride if isinstance(stride, int) else stride[1]
    if stride_w > 1 and w.shape[1] % options["BLOCK_K"]:  # channels past C: the tuner's prune
        problem = {"K": 4096, "C": w.shape[1], "stride": (1, stride_w)}  # skips it, says why
        assert "past C" in conv_hopper.hopper_conv_prune(options, problem,
                                                         tune.Resources.of_gpu())
        with pytest.raises(ValueError, match="does not divide C"):
            conv_hopper.launch_hopper_conv2d(x, w, _output(x, w, padding, dilation, stride),
                                             stride, padding, dilation, options)
        return
    y = _output(x, w, padding, dilation, stride).fill_(float("nan"))
    conv_hopper.launch_hopper_conv2d(x, w, y, stride, padding, dilation, options)
    expected = F.conv2d(x.float(), w.float(), stride=stride, padding=padding, dilation=dilation)
    assert torch.isfinite(y).all(), "a pixel of y was never written"
    assert ((y.float() - expected).norm() / expected.norm()).item() < 2e-3


@pytest.mark.parametrize("layer", LAYERS[:4] + LAYERS[7:8] + LAYERS[9:11], ids=str)
def test_bfloat16(layer):
    x, w, padding, dilation, stride = _layer(layer, torch.bfloat16)
    y = _output(x, w, padding, dilation, stride)
    config = dict(zip(conv_hopper.HOPPER_CONV_NAMES, conv_hopper.HOPPER_CONV_CONFIGS[0]))
    conv_hopper.launch_hopper_conv2d(x, w, y, stride, padding, dilation, config)
    expected = F.conv2d(x.float(), w.float(), stride=stride, padding=padding, dilation=dilation)
    assert ((y.float() - expected).norm() / expected.norm()).item() < 1e-2


def test_input_sizes_that_are_not_a_multiple_of_the_stride_are_refused():
    x, w, *_ = _layer((1, 64, 15, 16, 64, 3, 3, 1, 1, 2), torch.float16)
    assert "multiple of the stride" in conv_hopper.hopper_conv_problem(x, w, 2)


def test_more_splits_than_steps_leave_no_gaps():
    """A 1x1 layer of 64 channels has one reduction step: splits 2 and 3 add zeros."""
    x, w, padding, dilation, _ = _layer((2, 64, 9, 9, 64, 1, 1, 0, 1, 1), torch.float16)
    y = new_output(x, 64, 9, 9).fill_(float("nan"))
    config = dict(zip(conv_hopper.HOPPER_CONV_NAMES, (128, 64, 64, 4, 3, 4)))
    conv_hopper.launch_hopper_conv2d(x, w, y, 1, padding, dilation, config)
    expected = F.conv2d(x.float(), w.float())
    assert ((y.float() - expected).norm() / expected.norm()).item() < 2e-3


def test_shape_conv2d_races_the_gluon_kernel(tmp_path):
    x, w, padding, dilation, _ = _layer(LAYERS[1], torch.float16)
    problem = conv_persistent.shape_conv_problem(x, w, 1, padding, dilation)
    assert problem["hopper"] == ""
    kept, _ = conv_persistent.SHAPE_CONV_SPACE.candidates(1, problem, tune.Resources.of_gpu())
    assert any(c["PATH"] == "hopper" for c in kept)
    with tuning_cache_in(tmp_path):
        y = conv_persistent.shape_conv2d(x, w, 1, padding, dilation)
    expected = F.conv2d(x.float(), w.float(), padding=padding, dilation=dilation)
    assert ((y.float() - expected).norm() / expected.norm()).item() < 2e-3
