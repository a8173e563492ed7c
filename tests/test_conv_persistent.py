"""reference/conv_persistent.py in the interpreter: the persistent descriptor kernel against
F.conv2d in float64 on every geometry (padding, stride, dilation, channels that are not a
multiple of BLOCK_K, a 1x1 layer read as a matrix and one that is not), more tiles than
programs, the space shape_conv2d races, and the errors a layer without descriptors gets."""
import pytest
import torch
import torch.nn.functional as F

from tests.test_conv_groups import inputs
from tilegym_edu import grading
from tilegym_edu.reference import conv_persistent
from tilegym_edu.tune import Config, Resources

SMALL = dict(BLOCK_M=32, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, FLATTEN=True, num_warps=4,
             num_stages=1)

LAYERS = [  # (N, C, H, W, K, R, S, stride, padding, dilation)
    (2, 24, 7, 9, 16, 3, 3, 1, 1, 1),        # 24 channels: blocks of 16 run into the next tap
    (1, 16, 8, 8, 24, 1, 1, 1, 0, 1),        # 1x1, stride 1: the input read as a matrix
    (1, 16, 6, 5, 8, 1, 1, 2, 0, 1),         # 1x1 strided: gathered
    (1, 8, 9, 7, 8, 3, 3, 2, 1, 1),
    (1, 40, 6, 6, 16, 3, 3, 1, 2, 2),        # dilated
    (1, 16, 5, 5, 40, 5, 3, (1, 2), (2, 1), 1),   # 5x3 filters, a stride and padding per axis
]


@pytest.mark.parametrize("layer", LAYERS, ids=[f"C{c[1]}-{c[5]}x{c[6]}-s{c[7]}" for c in LAYERS])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_persistent_conv2d_matches_f_conv2d(layer, dtype):
    N, C, H, W, K, R, S, stride, padding, dilation = layer
    x, w = inputs(N, C, H, W, K, C, R, S, dtype)
    y = conv_persistent.persistent_conv2d(x, w, stride, padding, dilation, SMALL)
    expected = F.conv2d(x.double(), w.double(), stride=stride, padding=padding,
                        dilation=dilation)
    assert y.shape == expected.shape and y.dtype == dtype
    assert y.is_contiguous(memory_format=torch.channels_last)
    tolerance = 1e-4 if dtype == torch.float32 else 3e-3
    torch.testing.assert_close(y.double(), expected, rtol=tolerance, atol=tolerance)


def test_each_program_walks_several_tiles_and_the_flattened_loop_agrees():
    """6 x 2 output tiles on the interpreter's 4 programs: every program takes 3."""
    x, w = inputs(2, 16, 10, 9, 32, 16, 3, 3, torch.float32)
    expected = F.conv2d(x.double(), w.double(), padding=1)
    for flatten in (True, False):
        y = conv_persistent.persistent_conv2d(x, w, 1, 1, 1, {**SMALL, "FLATTEN": flatten})
        torch.testing.assert_close(y.double(), expected, rtol=1e-4, atol=1e-4)


def test_a_layer_descriptors_cannot_serve_is_refused_with_what_to_use():
    x, w = inputs(1, 3, 9, 9, 8, 3, 7, 7, torch.float16)          # filter rows of 147
    assert "147 elements" in conv_persistent.descriptor_problem(x, w)
    with pytest.raises(ValueError, match="use convolution.conv2d"):
        conv_persistent.persistent_conv2d(x, w, 2, 3)
    x, w = inputs(1, 8, 5, 5, 12, 8, 3, 3, torch.float16)          # 12 outputs: 24-byte rows
    assert "output's rows (K)" in conv_persistent.descriptor_problem(x, w)


def test_only_an_unpadded_unit_stride_1x1_layer_reads_its_input_as_a_matrix():
    x, w = inputs(1, 16, 4, 4, 8, 16, 1, 1, torch.float16)
    assert conv_persistent.reads_input_as_matrix(x, w, 1, 0, 1)
    assert not conv_persistent.reads_input_as_matrix(x, w, 2, 0, 1)
    assert not conv_persistent.reads_input_as_matrix(x, w, 1, 1, 1)
    x3, w3 = inputs(1, 12, 4, 4, 8, 12, 1, 1, torch.float16)        # 24-byte rows
    assert not conv_persistent.reads_input_as_matrix(x3, w3, 1, 0, 1)


def test_shape_conv2d_races_both_paths_and_keeps_lesson_05_where_descriptors_cannot_run():
    paths = {c["PATH"] for c in conv_persistent.SHAPE_CONV_SPACE.configs(1)}
    assert paths == {"lesson05", "persistent"}
    assert conv_persistent.SHAPE_CONV_SPACE.default["PATH"] == "lesson05"
    gpu = Resources(shared_bytes=227 * 1024)
    x, w = inputs(1, 3, 9, 9, 64, 3, 7, 7, torch.float16)
    stem = conv_persistent.shape_conv_problem(x, w, 2, 3, 1)
    kept, pruned = conv_persistent.SHAPE_CONV_SPACE.candidates(1, stem, gpu)
    assert {c["PATH"] for c in kept} == {"lesson05"}
    assert any("needs tensor descriptors" in why for _, why in pruned)
    x, w = inputs(1, 64, 9, 9, 64, 64, 3, 3, torch.float16)
    layer = conv_persistent.shape_conv_problem(x, w, 1, 1, 1)
    kept, _ = conv_persistent.SHAPE_CONV_SPACE.candidates(1, layer, gpu)
    assert {c["PATH"] for c in kept} == {"lesson05", "persistent"}


def test_shape_conv2d_in_the_interpreter_runs_lesson_05s_default():
    x, w = inputs(1, 16, 6, 7, 16, 16, 3, 3, torch.float32)
    y = conv_persistent.shape_conv2d(x, w, 1, 1)
    torch.testing.assert_close(y.double(), F.conv2d(x.double(), w.double(), padding=1),
                               rtol=1e-4, atol=1e-4)
    config = Config(**SMALL, PATH="persistent")
    out = conv_persistent.run_conv_path(x, w, torch.empty_like(y), 1, 1, 1, config)
    torch.testing.assert_close(out, y, rtol=1e-4, atol=1e-4)


def test_the_kernel_and_its_wrappers_are_references_when_graded():
    x, w = inputs(1, 16, 4, 4, 16, 16, 3, 3, torch.float32)
    for fn in (conv_persistent.persistent_conv2d, conv_persistent.shape_conv2d):
        with pytest.raises(grading.LibraryShortcut, match="reference"):
            grading.guarded_call(fn, (x, w))
