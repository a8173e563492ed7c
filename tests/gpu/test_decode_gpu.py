"""The decoding kernels on a GPU, where programs really run at once and the last one to arrive
merges: the skinny matmul on the capstone's decoding shapes and flash decoding on its attention,
at their defaults, every level-1 configuration and the tuned one, each repeated to catch a merge
that reads a partial before it is written (the merge order is fixed, so every repeat must give
the same bits)."""
import pytest
import torch

from tilegym_edu.reference import flash, flash_decode, skinny, split_k
from tilegym_edu.tune import Resources

#: (M, K, N): one and 16 tokens through the capstone's weights, and an odd width
MATMULS = [(1, 2048, 3072), (1, 5632, 2048), (16, 2048, 11264), (7, 1000, 999)]
#: (batch, heads, kv_heads, seq_q, seq_k, head_dim, causal): the capstone's decoding steps at
#: batch 1 and 16, a chunk of queries, multi-query heads, full attention at head size 64
ATTENTION = [(1, 16, 4, 1, 2040, 128, True), (16, 16, 4, 1, 2040, 128, True),
             (2, 16, 4, 37, 1500, 128, True), (3, 8, 1, 1, 777, 64, False)]
DTYPES = (torch.float16, torch.bfloat16)
REPEATS = 20


def repeatable(run) -> torch.Tensor:
    """run()'s result, after checking that REPEATS more calls give exactly the same bits."""
    first = run()
    for _ in range(REPEATS):
        assert torch.equal(run(), first), "a repeat gave other bits: the merge raced"
    return first


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", MATMULS, ids=lambda s: "x".join(map(str, s)))
def test_skinny_matmul_on_the_gpu(shape, dtype):
    M, K, N = shape
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(M, K, generator=generator).to("cuda", dtype)
    b = (torch.randn(K, N, generator=generator) / K ** 0.5).to("cuda", dtype)
    expected = a.float() @ b.float()
    configs = [dict(c) for c in skinny.SKINNY_SPACE.configs(1)]
    for config in configs:
        c = repeatable(lambda: skinny.skinny_matmul(a, b, config))
        error = ((c.float() - expected).norm() / expected.norm()).item()
        assert error < 1e-2, (config, error)
    c = split_k.shape_matmul(a, b)
    assert ((c.float() - expected).norm() / expected.norm()).item() < 1e-2


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", ATTENTION, ids=lambda s: "-".join(map(str, s)))
def test_flash_decode_on_the_gpu(shape, dtype):
    b, h, hkv, sq, sk, d, causal = shape
    generator = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(*dims, generator=generator).to("cuda", dtype)
               for dims in ((b, h, sq, d), (b, hkv, sk, d), (b, hkv, sk, d)))
    expected = flash.attention_reference(q.float(), k.float(), v.float(), causal)
    _, lse_forward = flash.flash_forward(q, k, v, causal)
    problem = flash_decode.decode_problem(q, k, causal)
    kept, _ = flash_decode.DECODE_SPACE.candidates(1, problem, Resources.of_gpu())
    for config in [dict(c) for c in kept] + [None]:
        o = repeatable(lambda: flash_decode.flash_decode(q, k, v, causal, config=config)[0])
        error = ((o.float() - expected).norm() / expected.norm()).item()
        assert error < 1e-2, (config, error)
    _, lse = flash_decode.flash_decode(q, k, v, causal)
    torch.testing.assert_close(lse, lse_forward, rtol=1e-3, atol=1e-3)
