"""The reference convolutions and shape_matmul in float16 and bfloat16 on a GPU, against float64:
Triton's interpreter cannot check bfloat16 (its tl.dot multiplies bfloat16 operands as raw
bits, triton-lang/triton#11584, which upstream closed as unsupported), so these run here only.
Odd sizes and every path: lesson 05's implicit GEMM, its split-K form, the persistent 1x1
kernel and shape_conv2d's race (the Gluon kernel in it on Hopper GPUs, strided too), the stem
kernel, the packed kernel on a stem, on one GEMM per group and on blocks of groups, both depthwise
kernels (every configuration of the rows kernel's space on MobileNetV2's depthwise layers and an
odd one, against cuDNN in float32), and shape_matmul's padded and split-K paths."""
import functools

import pytest
import torch
import torch.nn.functional as F

from tests.test_conv_groups import inputs as cpu_inputs
from tilegym_edu.reference import (conv_groups, conv_persistent, conv_split_k, conv_stem,
                                   convolution, split_k)

DTYPES = [torch.float16, torch.bfloat16]
#: relative to the largest element of the float64 result: one rounding of the output (bf16 keeps
#: 8 bits of mantissa) plus float32 accumulation
TOLERANCE = {torch.float16: 3e-3, torch.bfloat16: 2e-2}


def inputs(N, C, H, W, K, CG, R, S, dtype, seed=0):
    """tests/test_conv_groups.py's inputs, on the GPU (channels_last kept)."""
    x, w = cpu_inputs(N, C, H, W, K, CG, R, S, dtype, seed)
    return x.cuda(), w.cuda()


def assert_close_to_float64(y, x, w, dtype, **geometry):
    expected = F.conv2d(x.double(), w.double(), **geometry)
    assert y.dtype == dtype and y.shape == expected.shape
    error = (y.double() - expected).abs().max() / expected.abs().max()
    assert error < TOLERANCE[dtype], f"{dtype}: largest error {error:.2e} of the largest element"


@pytest.mark.parametrize("dtype", DTYPES)
def test_implicit_gemm_conv2d(dtype):
    x, w = inputs(2, 37, 15, 13, 41, 37, 3, 3, dtype)
    assert_close_to_float64(convolution.conv2d(x, w, 2, 1), x, w, dtype, stride=2, padding=1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_persistent_1x1_conv2d(dtype):
    x, w = inputs(2, 72, 9, 11, 40, 72, 1, 1, dtype)     # 72 channels: a block half past C
    assert_close_to_float64(conv_persistent.persistent_conv2d(x, w), x, w, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layer", [(2, 40, 15, 13, 48, 3, 2, 1), (2, 64, 9, 11, 72, 1, 1, 0),
                                   (2, 64, 14, 12, 48, 3, 2, 1)],
                         ids=["3x3-strided", "1x1", "3x3-strided-even"])
def test_shape_conv2d(layer, dtype):
    N, C, H, W, K, R, stride, padding = layer
    x, w = inputs(N, C, H, W, K, C, R, R, dtype)
    y = conv_persistent.shape_conv2d(x, w, stride, padding)
    assert_close_to_float64(y, x, w, dtype, stride=stride, padding=padding)


@pytest.mark.parametrize("dtype", DTYPES)
def test_split_k_conv2d(dtype):
    x, w = inputs(2, 72, 7, 7, 40, 72, 3, 3, dtype)
    y = conv_split_k.split_k_conv2d(x, w, 1, 1, 1, {"SPLIT_K": 3})
    assert_close_to_float64(y, x, w, dtype, padding=1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_stem_conv2d(dtype):
    x, w = inputs(2, 3, 31, 29, 64, 3, 7, 7, dtype)
    assert_close_to_float64(conv_stem.stem_conv2d(x, w, 2, 3, level=1), x, w, dtype, stride=2,
                            padding=3)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layer", [
    (2, 3, 31, 29, 64, 1, 7, 2, 3, None),        # a stem
    (2, 64, 9, 11, 64, 16, 3, 1, 1, None),       # groups of 4 in blocks (GROUP_WIDTH 32)
    (2, 64, 9, 11, 64, 16, 3, 1, 1, 1),          # the same, one GEMM per group
    (1, 48, 8, 7, 36, 12, 3, 2, 1, None),        # 12 groups of 4 in, 3 out: blocks of 4
], ids=["stem", "blocks", "one-per-group", "odd-blocks"])
def test_packed_conv2d(layer, dtype):
    N, C, H, W, K, groups, R, stride, padding, width = layer
    x, w = inputs(N, C, H, W, K, C // groups, R, R, dtype)
    config = None if width is None else {"GROUP_WIDTH": width}
    y = conv_groups.packed_conv2d(x, w, stride, padding, 1, groups, config)
    assert_close_to_float64(y, x, w, dtype, stride=stride, padding=padding, groups=groups)


@pytest.mark.parametrize("dtype", DTYPES)
def test_depthwise_conv2d(dtype):
    x, w = inputs(2, 37, 17, 15, 74, 1, 3, 3, dtype)        # 2 outputs per channel
    assert_close_to_float64(conv_groups.depthwise_conv2d(x, w, 2, 1), x, w, dtype, stride=2,
                            padding=1, groups=37)


#: (N, C, H, W, K, R, stride, padding, dilation): MobileNetV2's depthwise layers
#: (benchmarks/conv_groups.py) and an odd one: 2 outputs a channel, sizes no block divides,
#: dilation 2
DEPTHWISE_LAYERS = {
    "112x112-s2": (32, 96, 112, 112, 96, 3, 2, 1, 1),
    "56x56": (32, 144, 56, 56, 144, 3, 1, 1, 1),
    "14x14": (32, 384, 14, 14, 384, 3, 1, 1, 1),
    "7x7": (32, 960, 7, 7, 960, 3, 1, 1, 1),
    "odd": (3, 37, 29, 23, 74, 3, 1, 2, 2),
}


@functools.cache
def depthwise_layer(name: str, dtype: torch.dtype):
    """x and w of DEPTHWISE_LAYERS[name] in ``dtype`` on the GPU, channels_last, and cuDNN's
    float32 output from them (TF32 off), made once for every configuration tested on them."""
    N, C, H, W, K, R, stride, padding, dilation = DEPTHWISE_LAYERS[name]
    generator = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(N, C, H, W, device="cuda", generator=generator).to(dtype)
    w = torch.randn(K, 1, R, R, device="cuda", generator=generator).to(dtype) / R
    x, w = (t.contiguous(memory_format=torch.channels_last) for t in (x, w))
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        expected = F.conv2d(x.float(), w.float(), stride=stride, padding=padding,
                            dilation=dilation, groups=C)
    return x, w, expected


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layer", DEPTHWISE_LAYERS)
@pytest.mark.parametrize("config", conv_groups.DEPTHWISE_ROWS_SPACE.configs(1),
                         ids=lambda config: str(config).replace(" ", ","))
def test_depthwise_rows_kernel_against_cudnn(config, layer, dtype):
    """Every level-1 configuration on every layer, pruned there or not: a pruned one would
    idle, not err."""
    x, w, expected = depthwise_layer(layer, dtype)
    _, _, _, _, _, _, stride, padding, dilation = DEPTHWISE_LAYERS[layer]
    y = conv_groups.depthwise_conv2d(x, w, stride, padding, dilation, {**config, "PATH": "rows"})
    assert y.dtype == dtype and y.shape == expected.shape
    assert y.is_contiguous(memory_format=torch.channels_last)
    error = (y.float() - expected).abs().max() / expected.abs().max()
    assert error < TOLERANCE[dtype], f"{dtype}: largest error {error:.2e} of the largest element"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1029, 517, 771), (128, 128, 65536)],
                         ids=["unaligned-padded", "large-K-split"])
def test_shape_matmul(shape, dtype):
    M, N, K = shape
    generator = torch.Generator().manual_seed(1)
    a = torch.randn(M, K, generator=generator, dtype=torch.float64)
    b = torch.randn(K, N, generator=generator, dtype=torch.float64)
    expected = a @ b
    c = split_k.shape_matmul(a.to(dtype).cuda(), b.to(dtype).cuda())
    assert c.dtype == dtype
    error = (c.double().cpu() - expected).abs().max() / expected.abs().max()
    assert error < TOLERANCE[dtype], f"{dtype}: largest error {error:.2e} of the largest element"
