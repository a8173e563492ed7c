"""tilegym_edu.reference.convolution's helpers: output sizes, the im2col matrix, the input
checks and their messages, the direct kernel, the search space."""
import pytest
import torch
import torch.nn.functional as F

from tilegym_edu.reference import convolution as conv
from tilegym_edu.reference.pipelined import matmul_prune
from tilegym_edu.tune import Resources

pytestmark = pytest.mark.beside

GEOMETRIES = [  # (N, C, H, W, K, R, S, stride, padding, dilation)
    (2, 3, 7, 9, 4, 3, 3, 1, 1, 1), (1, 5, 8, 5, 2, 1, 1, 1, 0, 1),
    (2, 2, 9, 6, 3, 2, 3, (2, 1), (1, 0), 1), (1, 4, 11, 10, 3, 3, 3, 2, 2, 2),
]


def channels_last(t):
    return t.contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_output_size_matches_f_conv2d(geometry):
    N, C, H, W, K, R, S, stride, padding, dilation = geometry
    y = F.conv2d(torch.zeros(N, C, H, W), torch.zeros(K, C, R, S), stride=stride,
                 padding=padding, dilation=dilation)
    (sh, sw), (ph, pw), (dh, dw) = (conv.pair(stride, "s"), conv.pair(padding, "p"),
                                    conv.pair(dilation, "d"))
    assert (conv.output_size(H, R, sh, ph, dh), conv.output_size(W, S, sw, pw, dw)) == y.shape[2:]


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_im2col_is_f_unfold_in_nhwc_order(geometry):
    """Row (n, p, q), column (r, s, c): F.unfold's (n, (c, r, s), (p, q)) reordered."""
    N, C, H, W, K, R, S, stride, padding, dilation = geometry
    x = torch.randn(N, C, H, W, dtype=torch.float64)
    a = conv.im2col(channels_last(x), R, S, stride, padding, dilation)
    unfolded = F.unfold(x, (R, S), dilation=dilation, padding=padding, stride=stride)
    expected = unfolded.view(N, C, R, S, -1).permute(0, 4, 2, 3, 1).reshape(a.shape)
    assert torch.equal(a, expected)


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_im2col_conv2d_and_direct_kernel_match_f_conv2d(geometry):
    N, C, H, W, K, R, S, stride, padding, dilation = geometry
    x = channels_last(torch.randn(N, C, H, W))
    w = channels_last(torch.randn(K, C, R, S))
    expected = F.conv2d(x, w, stride=stride, padding=padding, dilation=dilation)
    via_gemm = conv.im2col_conv2d(x, w, stride, padding, dilation)
    direct = conv.direct_conv2d(x, w, stride, padding, dilation, dict(BLOCK_M=32, BLOCK_N=16))
    for y in (via_gemm, direct):
        assert y.shape == expected.shape and y.is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(y, expected, rtol=1e-4, atol=1e-4)


def test_filters_as_matrix_is_a_view_of_channels_last_filters():
    w = channels_last(torch.randn(4, 3, 2, 5))
    matrix = conv.filters_as_matrix(w)
    assert matrix.shape == (4, 2 * 5 * 3) and matrix.data_ptr() == w.data_ptr()
    assert matrix[1, (1 * 5 + 4) * 3 + 2] == w[1, 2, 1, 4]  # row k, column (r, s, c)


def test_conv_flops_counts_two_per_multiply_add():
    x, w = torch.empty(2, 3, 8, 8), torch.empty(5, 3, 3, 3)
    assert conv.conv_flops(x, w, 6, 6) == 2 * 2 * 5 * 6 * 6 * 3 * 3 * 3


@pytest.mark.parametrize("x, w, kwargs, message", [
    (torch.randn(1, 3, 5, 5), channels_last(torch.randn(2, 3, 3, 3)), {},
     "x is not in channels_last"),
    (channels_last(torch.randn(1, 3, 5, 5)), torch.randn(2, 3, 3, 3), {},
     "w is not in channels_last"),
    (channels_last(torch.randn(1, 3, 5, 5)), channels_last(torch.randn(2, 4, 3, 3)), {},
     "x has 3 channels but w is (2, 4, 3, 3): w must be (K, C, R, S)"),
    (channels_last(torch.randn(1, 3, 5, 5)), channels_last(torch.randn(2, 3, 3, 3)).half(), {},
     "share one dtype"),
    (torch.randn(3, 5, 5), torch.randn(2, 3, 3, 3), {}, "x must be (N, C, H, W)"),
    (channels_last(torch.randn(1, 3, 2, 2)), channels_last(torch.randn(2, 3, 3, 3)), {},
     "does not fit"),
    (channels_last(torch.randn(1, 3, 5, 5)), channels_last(torch.randn(2, 3, 3, 3)), {"stride": 0},
     "stride and dilation must be >= 1"),
    (channels_last(torch.randn(1, 3, 5, 5)), channels_last(torch.randn(2, 3, 3, 3)),
     {"padding": (1, 2, 3)}, "padding must be an int or a pair"),
], ids=["x_nchw", "w_nchw", "channels", "dtype", "rank", "too_small", "stride_0", "padding_triple"])
def test_bad_inputs_get_a_message_that_says_what_to_do(x, w, kwargs, message):
    with pytest.raises(ValueError) as error:
        conv.check_conv_inputs(x, w, **kwargs)
    assert message in str(error.value)


def test_every_level_1_conv_config_fits_the_h200():
    h200 = Resources(shared_bytes=232448)
    problem = {"dtype": "float16"}
    fits = [c for c in conv.CONV_SPACE.configs(1) if matmul_prune(c, problem, h200) is None]
    assert fits == conv.CONV_SPACE.configs(1)
    small_gpu = Resources(shared_bytes=99 * 1024)  # consumer GPUs: about 100 KiB per block
    assert any(matmul_prune(c, problem, small_gpu) is None for c in conv.CONV_SPACE.configs(1))
