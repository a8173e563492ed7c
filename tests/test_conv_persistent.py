"""reference/conv_persistent.py and conv_split_k.py in the interpreter: the persistent 1x1 kernel
and split-K against F.conv2d in float64 (channels that are not a multiple of BLOCK_K, more tiles
than programs, with and without the flattened loop, any number of ranges), the layers the
persistent kernel refuses and why, split-K's prune, and the space shape_conv2d races."""
import pytest
import torch
import torch.nn.functional as F

from tests.test_conv_groups import inputs
from tilegym_edu import grading
from tilegym_edu.reference import conv_persistent, conv_split_k
from tilegym_edu.tune import Config, Resources

pytestmark = pytest.mark.beside

SMALL = dict(BLOCK_M=32, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, FLATTEN=True, num_warps=4,
             num_stages=1)

LAYERS = [  # (N, C, H, W, K)
    (1, 16, 8, 8, 24),          # 3 x 2 tiles
    (2, 24, 7, 9, 40),          # 24 channels: the last block of 16 half past the edge
    (1, 8, 3, 5, 8),            # fewer pixels than one tile
]


@pytest.mark.parametrize("layer", LAYERS, ids=[f"C{c[1]}-K{c[4]}" for c in LAYERS])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_persistent_conv2d_matches_f_conv2d(layer, dtype):
    N, C, H, W, K = layer
    x, w = inputs(N, C, H, W, K, C, 1, 1, dtype)
    y = conv_persistent.persistent_conv2d(x, w, config=SMALL)
    expected = F.conv2d(x.double(), w.double())
    assert y.shape == expected.shape and y.dtype == dtype
    assert y.is_contiguous(memory_format=torch.channels_last)
    tolerance = 1e-4 if dtype == torch.float32 else 3e-3
    torch.testing.assert_close(y.double(), expected, rtol=tolerance, atol=tolerance)


def test_each_program_walks_several_tiles_and_the_flattened_loop_agrees():
    """6 x 2 output tiles on the interpreter's 4 programs: every program takes 3."""
    x, w = inputs(2, 16, 10, 9, 32, 16, 1, 1, torch.float32)
    expected = F.conv2d(x.double(), w.double())
    for flatten in (True, False):
        y = conv_persistent.persistent_conv2d(x, w, config={**SMALL, "FLATTEN": flatten})
        torch.testing.assert_close(y.double(), expected, rtol=1e-4, atol=1e-4)


def test_layers_that_are_not_a_matrix_product_or_lack_aligned_rows_are_refused():
    x, w = inputs(1, 16, 6, 6, 16, 16, 3, 3, torch.float16)
    assert "not a matrix product" in conv_persistent.descriptor_problem(x, w, 1, 1)
    with pytest.raises(ValueError, match="use convolution.conv2d"):
        conv_persistent.persistent_conv2d(x, w, 1, 1)
    x, w = inputs(1, 16, 6, 6, 16, 16, 1, 1, torch.float16)
    assert "stride (2, 2)" in conv_persistent.descriptor_problem(x, w, 2, 0)
    assert "padding (1, 1)" in conv_persistent.descriptor_problem(x, w, 1, 1)
    assert conv_persistent.descriptor_problem(x, w) == ""
    x, w = inputs(1, 12, 4, 4, 8, 12, 1, 1, torch.float16)            # 24-byte rows
    assert "12 input channels" in conv_persistent.descriptor_problem(x, w)
    x, w = inputs(1, 16, 4, 4, 12, 16, 1, 1, torch.float16)
    assert "12 output channels" in conv_persistent.descriptor_problem(x, w)


def test_shape_conv2d_races_each_path_only_where_it_runs():
    paths = {c["PATH"] for c in conv_persistent.SHAPE_CONV_SPACE.configs(1)}
    assert paths == {"lesson05", "persistent", "split_k", "hopper", "halo"}
    assert conv_persistent.SHAPE_CONV_SPACE.default["PATH"] == "lesson05"
    gpu = Resources(shared_bytes=227 * 1024)
    x, w = inputs(1, 64, 9, 9, 64, 64, 3, 3, torch.float16)
    layer = conv_persistent.shape_conv_problem(x, w, 1, 1, 1)
    kept, pruned = conv_persistent.SHAPE_CONV_SPACE.candidates(1, layer, gpu)
    assert {c["PATH"] for c in kept} == {"lesson05", "split_k"}
    assert any("not a matrix product" in why for _, why in pruned)
    assert any("Gluon kernel cannot run" in why for _, why in pruned)   # no Hopper GPU here
    assert any("Gluon halo kernel cannot run" in why for _, why in pruned)
    x, w = inputs(1, 64, 9, 9, 256, 64, 1, 1, torch.float16)
    pointwise = conv_persistent.shape_conv_problem(x, w, 1, 0, 1)
    kept, _ = conv_persistent.SHAPE_CONV_SPACE.candidates(1, pointwise, gpu)
    assert {c["PATH"] for c in kept} == {"lesson05", "persistent"}     # C = 64: one step


def test_shape_conv2d_in_the_interpreter_runs_lesson_05s_default_and_both_paths_agree():
    x, w = inputs(1, 16, 6, 7, 16, 16, 1, 1, torch.float32)
    y = conv_persistent.shape_conv2d(x, w)
    torch.testing.assert_close(y.double(), F.conv2d(x.double(), w.double()),
                               rtol=1e-4, atol=1e-4)
    config = Config(**SMALL, PATH="persistent")
    out = conv_persistent.run_conv_path(x, w, torch.empty_like(y), 1, 0, 1, config)
    torch.testing.assert_close(out, y, rtol=1e-4, atol=1e-4)


def test_the_kernel_and_its_wrappers_are_references_when_graded():
    x, w = inputs(1, 16, 4, 4, 16, 16, 1, 1, torch.float32)
    for fn in (conv_persistent.persistent_conv2d, conv_persistent.shape_conv2d):
        with pytest.raises(grading.LibraryShortcut, match="reference"):
            grading.guarded_call(fn, (x, w))


SPLIT = dict(BLOCK_M=32, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, num_warps=4, num_stages=1)


@pytest.mark.parametrize("split_k", [1, 2, 3, 8])
def test_split_k_conv2d_matches_f_conv2d_in_any_number_of_ranges(split_k):
    """24 channels, 3x3: 18 steps of 16, cut into 1, 2, 3 and 8 ranges (the last shorter)."""
    x, w = inputs(2, 24, 7, 6, 20, 24, 3, 3, torch.float32)
    y = conv_split_k.split_k_conv2d(x, w, (2, 1), 1, 1, {**SPLIT, "SPLIT_K": split_k})
    expected = F.conv2d(x.double(), w.double(), stride=(2, 1), padding=1)
    assert y.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(y.double(), expected, rtol=1e-4, atol=1e-4)


def test_split_k_conv2d_in_float16_with_dilation():
    x, w = inputs(1, 40, 8, 9, 16, 40, 3, 3, torch.float16)
    y = conv_split_k.split_k_conv2d(x, w, 1, 2, 2, {**SPLIT, "SPLIT_K": 4})
    expected = F.conv2d(x.double(), w.double(), padding=2, dilation=2)
    torch.testing.assert_close(y.double(), expected, rtol=3e-3, atol=3e-3)


def test_split_k_prunes_short_ranges_and_partials_past_32_bit_offsets():
    gpu = Resources(shared_bytes=227 * 1024)
    x, w = inputs(1, 64, 9, 9, 64, 64, 3, 3, torch.float16)
    layer = conv_persistent.shape_conv_problem(x, w, 1, 1, 1)          # 9 steps of 64
    config = Config(**conv_split_k.SPLIT_K_CONV_DEFAULT)
    assert "fewer than four" in conv_split_k.split_k_conv_prune(config, layer, gpu)
    assert conv_split_k.split_k_conv_prune(config.replace(SPLIT_K=2), layer, gpu) is None
    huge = {**layer, "N": 4096, "H": 224, "W": 224, "C": 512}
    assert "2**31" in conv_split_k.split_k_conv_prune(config, huge, gpu)
