"""reference/skinny.py in the interpreter: the skinny matmul against float64 for 1 to 16 rows,
K in one range and in several (a K range shorter than the rest, columns past a block), the
arrival counters left at zero for the next call, strided inputs, the refusals, and its path in
shape_matmul's race."""
import pytest
import torch

from tilegym_edu.reference import counters, skinny, split_k
from tilegym_edu.tune import Resources

pytestmark = pytest.mark.beside

CASES = [  # (M, K, N, BLOCK_N, BLOCK_K, SPLIT_K)
    (1, 100, 70, 32, 32, 3),       # K in 3 ranges of 64, 32 and 4: the last one short
    (16, 96, 64, 32, 16, 4),       # every row of the tile
    (5, 64, 40, 32, 32, 1),        # one range: c written straight from the accumulator
    (3, 33, 17, 16, 16, 8),        # 8 ranges asked, 3 of 16 fit
]


def operands(M, K, N, dtype, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(M, K, generator=generator).to(dtype),
            torch.randn(K, N, generator=generator).to(dtype))


@pytest.mark.parametrize("case", CASES, ids=[f"M{c[0]}-K{c[1]}-N{c[2]}-split{c[5]}"
                                             for c in CASES])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_skinny_matmul_matches_float64_and_leaves_its_counters_at_zero(case, dtype):
    M, K, N, block_n, block_k, split = case
    a, b = operands(M, K, N, dtype)
    config = dict(BLOCK_N=block_n, BLOCK_K=block_k, SPLIT_K=split, num_warps=4, num_stages=2)
    expected = a.double() @ b.double()
    tolerance = 1e-4 if dtype == torch.float32 else 2e-3
    for _ in range(2):                  # the second call finds the counters the first reset
        c = skinny.skinny_matmul(a, b, config)
        assert c.shape == (M, N) and c.dtype == dtype
        torch.testing.assert_close(c.double(), expected, rtol=tolerance, atol=tolerance)
        assert not counters.arrival_counters(a.device, 8).any()


def test_strided_inputs_go_through_shape_matmuls_skinny_path():
    a, b = operands(4, 48, 24, torch.float32)
    a_t = a.t().contiguous().t()                                   # column-major rows
    config = dict(PATH="skinny", BLOCK_N=16, BLOCK_K=16, SPLIT_K=2, num_warps=4, num_stages=2)
    c = split_k.run_path(a_t, b[:, ::1], config)
    torch.testing.assert_close(c.double(), a.double() @ b.double(), rtol=1e-4, atol=1e-4)


def test_more_than_sixteen_rows_or_mismatched_shapes_are_refused():
    a, b = operands(17, 8, 8, torch.float32)
    with pytest.raises(ValueError, match="at most 16"):
        skinny.skinny_matmul(a, b)
    with pytest.raises(ValueError, match="a's columns must be b's rows"):
        skinny.skinny_matmul(a[:4], b[:5])


def test_the_prune_keeps_the_skinny_path_to_few_rows_and_long_enough_ranges():
    gpu = Resources(shared_bytes=227 * 1024)
    config = dict(skinny.SKINNY_DEFAULT)
    problem = {"M": 1, "N": 2048, "K": 5632, "dtype": "float16"}
    assert skinny.skinny_prune(config, problem, gpu) is None
    assert "at most 16" in skinny.skinny_prune(config, {**problem, "M": 17}, gpu)
    assert "fewer than two steps" in skinny.skinny_prune({**config, "SPLIT_K": 32}, problem,
                                                         gpu)
    assert "shared memory" in skinny.skinny_prune({**config, "BLOCK_N": 256, "BLOCK_K": 256,
                                                   "num_stages": 5}, problem, gpu)
    paths = {c["PATH"] for c in split_k.SHAPE_SPACE.configs(1)}
    assert "skinny" in paths
    assert skinny.skinny_matmul_kernel in split_k.SHAPE_KERNELS.kernels
