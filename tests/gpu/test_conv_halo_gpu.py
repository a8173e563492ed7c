"""The halo convolution (reference/conv_halo.py) on a Hopper GPU, both schedules: every
configuration against float32 PyTorch on layers that reach every edge (padding of every size
and none, channels that are not a multiple of BLOCK_K, output channels fewer than BLOCK_N,
sizes that are not multiples of a box, rectangular and 5x5 and 7x7 filters, one image, a
reduction split in more ranges than it has steps), in float16 and bfloat16; and shape_conv2d's
race with the halo kernel in it."""
import pytest
import torch
import torch.nn.functional as F

from tests.conftest import tuning_cache_in
from tilegym_edu import tune
from tilegym_edu.reference import conv_halo, conv_persistent
from tilegym_edu.reference.convolution import check_conv_inputs, new_output

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
    reason="the Gluon halo convolution is written for Hopper (compute capability 9.x) GPUs")

#: (N, C, H, W, K, R, S, padding)
LAYERS = [(2, 64, 56, 56, 64, 3, 3, 1), (5, 512, 7, 7, 128, 3, 3, 1),
          (1, 40, 13, 17, 24, 3, 3, 1), (2, 96, 33, 35, 40, 5, 5, 2),
          (2, 16, 11, 10, 8, 3, 5, 0), (3, 72, 20, 9, 200, 3, 3, (2, 0)),
          (1, 64, 16, 16, 64, 7, 7, 3), (2, 32, 9, 12, 16, 2, 2, 1)]


def _layer(layer, dtype):
    N, C, H, W, K, R, S, padding = layer
    torch.manual_seed(0)
    x = torch.randn(N, C, H, W, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
    w = (torch.randn(K, C, R, S, device="cuda", dtype=dtype) / (C * R * S) ** 0.5).to(
        memory_format=torch.channels_last)
    P, Q = check_conv_inputs(x, w, 1, padding)
    return x, w, padding, new_output(x, K, P, Q).fill_(float("nan"))


def _error(y, x, w, padding):
    expected = F.conv2d(x.float(), w.float(), padding=padding)
    assert torch.isfinite(y).all(), "a pixel of y was never written"
    return ((y.float() - expected).norm() / expected.norm()).item()


def _options_that_fit(row, w) -> dict:
    """The configuration ``row`` as a dict; the test skips where its ring does not fit this
    GPU's shared memory with w's taps along the halo axis (the tuner's prune skips it too)."""
    options = dict(zip(conv_halo.HALO_CONV_NAMES, row))
    taps = w.shape[2] if options["ORDER"][0] == "h" else w.shape[3]
    if conv_halo.halo_shared_bytes(options, taps, 2) > tune.Resources.of_gpu().shared_bytes:
        pytest.skip(f"{row} needs more shared memory than this GPU has with {taps} taps "
                    "(the tuner's prune skips it)")
    return options


@pytest.mark.parametrize("config", conv_halo.HALO_CONV_CONFIGS, ids=str)
@pytest.mark.parametrize("layer", LAYERS, ids=str)
def test_every_configuration_matches_pytorch(layer, config):
    x, w, padding, y = _layer(layer, torch.float16)
    assert conv_halo.halo_conv_problem(x, w, 1, padding, 1) == ""
    options = _options_that_fit(config, w)
    conv_halo.launch_halo_conv2d(x, w, y, 1, padding, 1, options)
    assert _error(y, x, w, padding) < 2e-3


@pytest.mark.parametrize("row", [conv_halo.HALO_CONV_CONFIGS[0], conv_halo.HALO_CONV_CONFIGS[-1]],
                         ids=str)
@pytest.mark.parametrize("layer", LAYERS[:4], ids=str)
def test_bfloat16(layer, row):
    x, w, padding, y = _layer(layer, torch.bfloat16)
    config = _options_that_fit(row, w)
    conv_halo.launch_halo_conv2d(x, w, y, 1, padding, 1, config)
    assert _error(y, x, w, padding) < 1e-2


@pytest.mark.parametrize("row", [("hnw", 8, 2, 8, 64, 32, 2, 4, 4, "one"),
                                 ("hnw", 8, 2, 8, 64, 32, 2, 4, 8, "specialised")], ids=str)
def test_more_splits_than_steps_leave_no_gaps(row):
    """A 3x3 layer of 16 channels has 3 reduction steps (one per tap along w): 4 ranges, so
    some programs add no step at all and store zeros."""
    x, w, padding, y = _layer((2, 16, 9, 9, 64, 3, 3, 1), torch.float16)
    config = dict(zip(conv_halo.HALO_CONV_NAMES, row))
    conv_halo.launch_halo_conv2d(x, w, y, 1, padding, 1, config)
    assert _error(y, x, w, padding) < 2e-3


def test_shape_conv2d_races_the_halo_kernel(tmp_path):
    x, w, padding, _ = _layer(LAYERS[0], torch.float16)
    problem = conv_persistent.shape_conv_problem(x, w, 1, padding, 1)
    assert problem["halo"] == ""
    kept, _ = conv_persistent.SHAPE_CONV_SPACE.candidates(1, problem, tune.Resources.of_gpu())
    assert any(c["PATH"] == "halo" for c in kept)
    with tuning_cache_in(tmp_path):
        y = conv_persistent.shape_conv2d(x, w, 1, padding, 1)
    assert _error(y, x, w, padding) < 2e-3
