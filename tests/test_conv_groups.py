"""reference/conv_groups.py against F.conv2d in float64 (interpreter): the packed implicit
GEMM on a stem's few channels and on grouped convolution, both depthwise kernels (tiles and
rows) with and without a channel multiplier, odd geometry; the depthwise race's space and
prune; and the errors they give."""
import pytest
import torch
import torch.nn.functional as F

from tilegym_edu import grading
from tilegym_edu.reference import conv_groups
from tilegym_edu.reference.convolution import conv_problem
from tilegym_edu.tune import Config, Resources

pytestmark = pytest.mark.beside

SMALL_PACKED = dict(BLOCK_M=32, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, num_warps=4, num_stages=1)
SMALL_DEPTHWISE = dict(BLOCK_M=16, BLOCK_C=16, num_warps=4, num_stages=1)
#: the rows kernel on tiles small enough that every case has several strips, runs and channel
#: blocks, the last of each cut short
SMALL_ROWS = dict(PATH="rows", BLOCK_W=8, BLOCK_C=16, ROWS=4, PREFETCH=1, num_warps=1)


def channels_last(t):
    return t.contiguous(memory_format=torch.channels_last)


def inputs(N, C, H, W, K, CG, R, S, dtype, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(N, C, H, W, generator=generator, dtype=torch.float64)
    w = torch.randn(K, CG, R, S, generator=generator, dtype=torch.float64) / (CG * R * S) ** 0.5
    return channels_last(x.to(dtype)), channels_last(w.to(dtype))


def assert_matches(y, x, w, tolerance, **geometry):
    expected = F.conv2d(x.double(), w.double(), **geometry)
    assert y.shape == expected.shape and y.dtype == x.dtype
    assert y.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(y.double(), expected, rtol=tolerance, atol=tolerance)


PACKED = [  # (N, C, H, W, K, groups, R, S, stride, padding, dilation)
    (2, 3, 15, 13, 8, 1, 7, 7, 2, 3, 1),       # a stem: 3 channels, 7x7, stride 2
    (1, 3, 9, 11, 5, 1, 3, 5, (2, 1), (1, 2), 2),
    (2, 8, 7, 6, 12, 4, 3, 3, 1, 1, 1),        # grouped: 2 channels in, 3 out per group
    (1, 12, 6, 7, 6, 3, 3, 2, 2, 0, (1, 2)),
    (1, 5, 5, 5, 17, 1, 1, 1, 1, 0, 1),        # 1x1 with an odd number of outputs
]


@pytest.mark.parametrize("layer", PACKED, ids=[f"C{c[1]}-G{c[5]}-{c[6]}x{c[7]}" for c in PACKED])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_packed_conv2d_matches_f_conv2d(layer, dtype):
    N, C, H, W, K, groups, R, S, stride, padding, dilation = layer
    x, w = inputs(N, C, H, W, K, C // groups, R, S, dtype)
    y = conv_groups.packed_conv2d(x, w, stride, padding, dilation, groups, SMALL_PACKED)
    assert_matches(y, x, w, 1e-4 if dtype == torch.float32 else 3e-3, stride=stride,
                   padding=padding, dilation=dilation, groups=groups)


BLOCKS_OF_GROUPS = [  # (layer as in PACKED, GROUP_WIDTH, groups per program it gives)
    ((1, 24, 6, 5, 16, 8, 3, 3, 1, 1, 1), 32, 8),       # all 8 groups in one block-diagonal tile
    ((1, 32, 5, 6, 32, 16, 3, 3, 2, 1, 1), 16, 8),      # 16 groups of 2 in two blocks of 8
    ((2, 8, 7, 6, 12, 4, 3, 3, 1, 1, 1), 6, 2),         # 2 in, 3 out per group: blocks of 2
    ((2, 8, 7, 6, 12, 4, 3, 3, 1, 1, 1), 1, 1),         # one GEMM per group
]


@pytest.mark.parametrize("layer, width, blocked", BLOCKS_OF_GROUPS,
                         ids=[f"G{c[0][5]}-width{c[1]}" for c in BLOCKS_OF_GROUPS])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_packed_conv2d_on_blocks_of_groups(layer, width, blocked, dtype):
    N, C, H, W, K, groups, R, S, stride, padding, dilation = layer
    assert conv_groups.groups_per_block(groups, C // groups, K // groups, width) == blocked
    x, w = inputs(N, C, H, W, K, C // groups, R, S, dtype, seed=3)
    y = conv_groups.packed_conv2d(x, w, stride, padding, dilation, groups,
                                  {**SMALL_PACKED, "GROUP_WIDTH": width})
    assert_matches(y, x, w, 1e-4 if dtype == torch.float32 else 3e-3, stride=stride,
                   padding=padding, dilation=dilation, groups=groups)


def test_groups_per_block_is_a_power_of_two_dividing_groups():
    assert conv_groups.groups_per_block(32, 4, 4, 32) == 8        # ResNeXt-50 32x4d
    assert conv_groups.groups_per_block(32, 4, 4, 64) == 16
    assert conv_groups.groups_per_block(12, 4, 4, 64) == 4        # 8 does not divide 12
    assert conv_groups.groups_per_block(1, 3, 64, 32) == 1        # a stem
    assert conv_groups.groups_per_block(2, 64, 64, 32) == 1       # wide groups stay alone


DEPTHWISE = [  # (N, C, H, W, multiplier, R, S, stride, padding, dilation)
    (2, 20, 9, 8, 1, 3, 3, 1, 1, 1),           # MobileNet's 3x3 depthwise
    (1, 7, 11, 10, 1, 3, 3, 2, 1, 1),          # strided
    (1, 5, 8, 9, 3, 5, 3, (1, 2), (2, 1), 2),  # 3 outputs per channel, dilated
]


@pytest.mark.parametrize("layer", DEPTHWISE, ids=[f"C{c[1]}x{c[4]}-{c[5]}x{c[6]}-s{c[7]}"
                                                   for c in DEPTHWISE])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_depthwise_conv2d_matches_f_conv2d(layer, dtype):
    N, C, H, W, mult, R, S, stride, padding, dilation = layer
    x, w = inputs(N, C, H, W, C * mult, 1, R, S, dtype)
    y = conv_groups.depthwise_conv2d(x, w, stride, padding, dilation, SMALL_DEPTHWISE)
    assert_matches(y, x, w, 1e-5 if dtype == torch.float32 else 3e-3, stride=stride,
                   padding=padding, dilation=dilation, groups=C)


ROWS_CASES = [  # (N, C, H, W, multiplier, R, S, stride, padding, dilation, config changes)
    (2, 20, 6, 10, 1, 3, 3, 1, 1, 1, {}),               # MobileNet's 3x3, batch 2
    (1, 7, 11, 10, 1, 3, 3, 2, 1, 1, {}),               # strided: 2 input rows an output row
    (1, 5, 8, 9, 1, 3, 3, 1, 0, 1, {}),                 # no padding
    (1, 5, 9, 8, 1, 3, 3, 1, 2, 2, {}),                 # dilated 3x3, padding 2
    (1, 6, 7, 7, 1, 1, 1, 2, 0, 1, {}),                 # 1x1 strided: rows between are skipped
    (1, 4, 6, 7, 1, 5, 5, 1, 2, 1, {"ROWS": 2}),        # 5x5 (pruned on a GPU: it runs here)
    (1, 5, 10, 9, 3, 5, 3, (1, 2), (2, 1), (2, 1), {}),  # 3 outputs a channel, non-square
    (2, 6, 7, 9, 2, 3, 3, 1, 1, 1, {"PREFETCH": 0}),    # K = 2C, no row loaded ahead
    (1, 9, 8, 6, 1, 3, 3, (2, 1), 1, (1, 2), {"PREFETCH": 2, "ROWS": 1}),
    (1, 16, 6, 5, 1, 3, 3, 1, 1, 1, {"PREFETCH": 9, "ROWS": 4}),   # ahead past the last row
]


@pytest.mark.parametrize("layer", ROWS_CASES, ids=[
    f"C{c[1]}x{c[4]}-{c[5]}x{c[6]}-s{c[7]}-p{c[8]}-d{c[9]}-{i}" for i, c in enumerate(ROWS_CASES)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_depthwise_rows_kernel_matches_f_conv2d(layer, dtype):
    N, C, H, W, mult, R, S, stride, padding, dilation, changes = layer
    x, w = inputs(N, C, H, W, C * mult, 1, R, S, dtype, seed=5)
    y = conv_groups.depthwise_conv2d(x, w, stride, padding, dilation, {**SMALL_ROWS, **changes})
    assert_matches(y, x, w, 1e-5 if dtype == torch.float32 else 3e-3, stride=stride,
                   padding=padding, dilation=dilation, groups=C)


def test_depthwise_paths_agree_and_a_config_without_path_runs_the_tiles_kernel():
    x, w = inputs(1, 20, 5, 7, 20, 1, 3, 3, torch.float32, seed=6)
    tiles = conv_groups.depthwise_conv2d(x, w, 1, 1, 1, SMALL_DEPTHWISE)
    assert_matches(tiles, x, w, 1e-5, padding=1, groups=20)
    for path in conv_groups.DEPTHWISE_PATHS:        # each path's own default, PATH alone given
        y = conv_groups.depthwise_conv2d(x, w, 1, 1, 1, {"PATH": path})
        torch.testing.assert_close(y, tiles, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="PATH must be one of"):
        conv_groups.depthwise_conv2d(x, w, 1, 1, 1, {"PATH": "columns"})


def test_depthwise_space_races_both_kernels_from_the_unchanged_default():
    space = conv_groups.DEPTHWISE_SPACE
    assert conv_groups.DEPTHWISE_DEFAULT == dict(BLOCK_M=64, BLOCK_C=64, num_warps=4,
                                                 num_stages=2)     # lesson 05's configuration
    assert space.default == Config(**conv_groups.DEPTHWISE_DEFAULT, PATH="tiles")
    assert space.configs(0) == [space.default]
    level1 = space.configs(1)
    for path, own in conv_groups.DEPTHWISE_PATHS.items():
        assert [c for c in level1 if c["PATH"] == path] == [Config(**c, PATH=path)
                                                            for c in own.configs(1)]
    assert {c["PATH"] for c in space.configs(2)} == {"tiles", "rows"}
    assert "depthwise_rows_kernel" in conv_groups.DEPTHWISE_KERNELS.src
    assert "depthwise_conv2d_kernel" in conv_groups.DEPTHWISE_KERNELS.src


def layer_problem(N, C, H, W, R, S, stride, padding):
    """conv_problem of a depthwise layer of N images, C channels, H x W pixels, R x S filters."""
    x, w = inputs(N, C, H, W, C, 1, R, S, torch.float16)
    return conv_problem(x, w, stride, padding, 1)


def test_the_rows_kernel_is_pruned_where_it_would_idle_or_spill_with_why():
    gpu = Resources(shared_bytes=227 * 1024)
    rows = Config(**conv_groups.DEPTHWISE_ROWS_DEFAULT, PATH="rows")    # 64 columns, 8 rows
    tiles = conv_groups.DEPTHWISE_SPACE.default
    mobilenet = layer_problem(1, 16, 56, 56, 3, 3, 1, 1)
    short = layer_problem(1, 16, 4, 56, 3, 3, 1, 1)             # P = 4
    strided = layer_problem(1, 16, 56, 56, 3, 3, 2, 1)          # Q = 28
    five = layer_problem(1, 16, 56, 56, 5, 5, 1, 2)
    five_by_three = layer_problem(1, 16, 56, 56, 5, 3, 1, 1)
    assert conv_groups.DEPTHWISE_SPACE.prune(rows, mobilenet, gpu) is None
    for problem, why in ((short, "a run of 8 rows is twice the output's 4"),
                         (strided, "a strip of 64 columns is twice the output's 28"),
                         (five, "a 5x5 filter has 25 taps, over the 9"),
                         (five_by_three, "a 5x3 filter has 15 taps")):
        assert why in conv_groups.DEPTHWISE_SPACE.prune(rows, problem, gpu)
        assert conv_groups.DEPTHWISE_SPACE.prune(tiles, problem, gpu) is None   # tiles: never
    seven = layer_problem(32, 960, 7, 7, 3, 3, 1, 1)                      # MobileNetV2's 7x7
    kept, pruned = conv_groups.DEPTHWISE_SPACE.candidates(1, seven, gpu)
    assert {c["BLOCK_W"] for c in kept if c["PATH"] == "rows"} == {8}
    assert all(c["PATH"] == "rows" for c, _ in pruned)


def test_grouped_conv2d_picks_the_kernel_that_fits():
    x, w = inputs(1, 6, 5, 5, 6, 1, 3, 3, torch.float32)
    assert_matches(conv_groups.grouped_conv2d(x, w, 1, 1, 1, 6), x, w, 1e-5, padding=1,
                   groups=6)
    x, w = inputs(1, 6, 5, 5, 4, 3, 3, 3, torch.float32)
    assert_matches(conv_groups.grouped_conv2d(x, w, 1, 1, 1, 2), x, w, 1e-4, padding=1,
                   groups=2)


@pytest.mark.parametrize("call, message", [
    (lambda x, w: conv_groups.packed_conv2d(x, w, groups=4), "groups=4 must divide both"),
    (lambda x, w: conv_groups.packed_conv2d(x, w, groups=3),
     "w must be (K, C // groups, R, S) = (K, 2, R, S) with groups=3"),
    (lambda x, w: conv_groups.packed_conv2d(x, w, groups=0), "groups must be a positive int"),
    (lambda x, w: conv_groups.depthwise_conv2d(x, w), "w must be (K, 1, R, S)"),
], ids=["not_dividing", "wrong_filter_channels", "zero_groups", "depthwise_needs_one_channel"])
def test_bad_groups_get_a_message_that_says_what_to_do(call, message):
    x, w = inputs(1, 6, 5, 5, 6, 3, 3, 3, torch.float32)      # (K=6, C/G=3): groups=2
    with pytest.raises(ValueError) as error:
        call(x, w)
    assert message in str(error.value)


def test_the_kernels_are_references_when_graded():
    x, w = inputs(1, 4, 5, 5, 4, 1, 3, 3, torch.float32)
    y = torch.empty_like(x)
    for fn in (lambda: conv_groups.depthwise_conv2d(x, w),
               lambda: conv_groups.depthwise_conv2d(x, w, config={"PATH": "rows"}),
               lambda: conv_groups.packed_conv2d(x, w, groups=4),
               lambda: conv_groups.grouped_conv2d(x, w, groups=4),
               lambda: conv_groups.launch_depthwise_tiles(x, w, y, 1, 1, 1,
                                                          conv_groups.DEPTHWISE_DEFAULT),
               lambda: conv_groups.launch_depthwise_rows(x, w, y, 1, 1, 1,
                                                         conv_groups.DEPTHWISE_ROWS_DEFAULT)):
        with pytest.raises(grading.LibraryShortcut, match="reference"):
            grading.guarded_call(fn, ())
