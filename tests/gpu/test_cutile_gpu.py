"""The cuTile kernels of lesson 07 (tilegym_edu.reference.cutile_kernels) on an NVIDIA GPU,
against float64 PyTorch: sizes that are not multiples of any tile, each default configuration
and one with other tiles. cuTile has no CPU interpreter, so these run only where cuda.tile
imports and a GPU is visible (conftest.py skips the folder without a GPU)."""
import math

import pytest
import torch

pytest.importorskip("cuda.tile", reason="needs cuda.tile (the optional cuda-tile package): "
                                        "`make cutile` installs it and its toolchain")

from tilegym_edu.reference import cutile_kernels as ck  # noqa: E402

#: largest error relative to the largest element of the float64 result. silu_mul: one rounding
#: of a float32 result. The matmuls: float32 accumulation, then one rounding of the output (bf16
#: keeps 8 bits of mantissa). Attention: p rounded to the input dtype before p @ v as well.
SILU_TOLERANCE = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}
MATMUL_TOLERANCE = {torch.float16: 3e-3, torch.bfloat16: 2e-2}
ATTENTION_TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 3e-2}
HALF = [torch.float16, torch.bfloat16]


def randn(*shape, dtype, seed=0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, generator=generator, device="cuda").to(dtype)


def assert_close_to_float64(out, expected, dtype, tolerance):
    assert out.dtype == dtype and out.shape == expected.shape, (out.dtype, out.shape)
    assert torch.isfinite(out).all(), "NaN or inf in the output"
    error = ((out.double() - expected).abs().max() / expected.abs().max()).item()
    assert error < tolerance, f"{dtype}: largest error {error:.2e} of the largest element"


@pytest.mark.parametrize("dtype", [torch.float32, *HALF])
@pytest.mark.parametrize("shape", [(1_000_003,), (7, 333), (1,)], ids=str)
def test_silu_mul(shape, dtype):
    a, b = randn(*shape, dtype=dtype, seed=1), randn(*shape, dtype=dtype, seed=2)
    x, y = a.double(), b.double()
    assert_close_to_float64(ck.silu_mul(a, b), x * torch.sigmoid(x) * y, dtype,
                            SILU_TOLERANCE[dtype])


#: (M, N, K): odd sizes, a single element, whole tiles
MATMUL_SHAPES = [(1029, 517, 771), (1, 1, 1), (256, 256, 256), (77, 1030, 33)]
#: other tiles than the defaults; 64 x 64 tiles make 153 output tiles of 1029 x 517, more than
#: an H200's 132 SMs, so persistent blocks loop over tiles
SMALL_TILES = {"TILE_M": 64, "TILE_N": 64, "TILE_K": 32, "GROUP_M": 4}


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("config", [None, SMALL_TILES], ids=["default", "small-tiles"])
@pytest.mark.parametrize("shape", MATMUL_SHAPES, ids=str)
def test_matmul(shape, config, dtype):
    M, N, K = shape
    a, b = randn(M, K, dtype=dtype, seed=1), randn(K, N, dtype=dtype, seed=2)
    assert_close_to_float64(ck.matmul(a, b, config), a.double() @ b.double(), dtype,
                            MATMUL_TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("config", [None, {**SMALL_TILES, "LATENCY": 8}],
                         ids=["default", "small-tiles"])
@pytest.mark.parametrize("shape", MATMUL_SHAPES, ids=str)
def test_persistent_matmul(shape, config, dtype):
    M, N, K = shape
    a, b = randn(M, K, dtype=dtype, seed=1), randn(K, N, dtype=dtype, seed=2)
    assert_close_to_float64(ck.persistent_matmul(a, b, config), a.double() @ b.double(), dtype,
                            MATMUL_TOLERANCE[dtype])


def attention_float64(q, k, v, causal):
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        seq = q.shape[2]
        keep = torch.ones(seq, seq, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, -math.inf)
    return torch.softmax(scores, dim=-1) @ v


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq", [1000, 77])
def test_flash_attention(seq, causal, head_dim, dtype):
    q, k, v = (randn(2, 3, seq, head_dim, dtype=dtype, seed=s) for s in (1, 2, 3))
    assert_close_to_float64(ck.flash_attention(q, k, v, causal), attention_float64(q, k, v, causal),
                            dtype, ATTENTION_TOLERANCE[dtype])


@pytest.mark.parametrize("tiles", [(64, 32), (32, 64)], ids=["wide-queries", "wide-keys"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_attention_other_tiles(tiles, causal):
    """Query tiles wider and narrower than key tiles: the diagonal crosses tiles differently."""
    q, k, v = (randn(1, 2, 333, 64, dtype=torch.float16, seed=s) for s in (1, 2, 3))
    config = {"TILE_M": tiles[0], "TILE_N": tiles[1]}
    assert_close_to_float64(ck.flash_attention(q, k, v, causal, config),
                            attention_float64(q, k, v, causal), torch.float16,
                            ATTENTION_TOLERANCE[torch.float16])


def test_wrong_inputs_are_refused_with_what_to_change():
    a = randn(64, 32, dtype=torch.float16)
    b = randn(32, 16, dtype=torch.float16)
    q = randn(1, 2, 16, 64, dtype=torch.float16)
    cases = [
        (lambda: ck.silu_mul(a, a.float()), "must match"),
        (lambda: ck.silu_mul(a.double(), a.double()), "float16, bfloat16 or float32"),
        (lambda: ck.silu_mul(a.cpu(), a.cpu()), r"\.cuda\(\)"),
        (lambda: ck.silu_mul(a.t(), a.t()), r"\.contiguous\(\)"),
        (lambda: ck.matmul(a, a), "must equal b's rows"),
        (lambda: ck.matmul(a.float(), b.float()), "float16 or both bfloat16"),
        (lambda: ck.matmul(a, b, {"BLOCK_M": 64}), "unknown configuration keys"),
        (lambda: ck.matmul(a, b, {"TILE_M": 48}), "powers of two"),
        (lambda: ck.persistent_matmul(a, b, {"LATENCY": 11}), "1 to 10"),
        (lambda: ck.flash_attention(q[..., :32], q[..., :32], q[..., :32]), "64 or 128"),
        (lambda: ck.flash_attention(q, q, q[:, :1]), "one shape"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()
