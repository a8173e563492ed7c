"""reference/flash_decode.py in the interpreter: flash decoding against float64 attention and
flash.flash_forward's log-sum-exp, on a decoding step, grouped and multi-query heads, chunks
of queries at the end of the keys (rows that see none of a split's keys), full attention, one
split and more splits than key blocks; the counters left at zero; the prune; and the capstone's
cached passes on it."""
import pytest
import torch

from tests.test_flash import make_inputs, shape_id
from tilegym_edu.reference import counters, flash, flash_decode
from tilegym_edu.tune import Resources

pytestmark = pytest.mark.beside

CASES = [  # (shape (batch, heads, kv_heads, seq_q, seq_k, head_dim), causal, SPLITS)
    ((1, 4, 1, 1, 100, 32), True, 4),      # a decoding step, multi-query, 4 ranges of 32 keys
    ((2, 8, 2, 3, 70, 40), True, 3),       # three queries, head size 40
    ((1, 2, 2, 5, 33, 16), False, 8),      # full attention; 8 asked, 3 ranges of 16 keys fit
    ((2, 4, 1, 9, 9, 16), True, 1),        # one range: no merge
    ((1, 4, 2, 20, 50, 24), True, 2),      # a chunk: its first queries see nothing of range 2
]
SMALL = dict(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=2)


@pytest.mark.parametrize("shape, causal, splits", CASES,
                         ids=[f"{shape_id(s)}-{'causal' if c else 'full'}-{n}"
                              for s, c, n in CASES])
def test_flash_decode_matches_float64_and_the_forwards_lse(shape, causal, splits):
    q, k, v = make_inputs({"shape": shape, "dtype": torch.float16},
                          torch.Generator().manual_seed(0))
    expected = flash.attention_reference(q.double(), k.double(), v.double(), causal)
    _, lse_forward = flash.flash_forward(q, k, v, causal, config=SMALL)
    for _ in range(2):                  # the second call finds the counters the first reset
        o, lse = flash_decode.flash_decode(q, k, v, causal, config={**SMALL, "SPLITS": splits})
        assert o.shape == q.shape and o.dtype == q.dtype
        torch.testing.assert_close(o.double(), expected, rtol=3e-3, atol=3e-3)
        torch.testing.assert_close(lse, lse_forward, rtol=1e-5, atol=1e-5)
        assert not counters.arrival_counters(q.device, 8).any()


def test_a_strided_cache_view_and_bad_inputs():
    """The capstone passes the first rows of a longer cache (a strided view); the checks of
    flash.flash_forward apply."""
    q, k, v = make_inputs({"shape": (1, 4, 2, 1, 40, 16), "dtype": torch.float32},
                          torch.Generator().manual_seed(1))
    k_cache = torch.zeros(1, 2, 64, 16)
    v_cache = torch.zeros(1, 2, 64, 16)
    k_cache[:, :, :40], v_cache[:, :, :40] = k, v
    o, _ = flash_decode.flash_decode(q, k_cache[:, :, :40], v_cache[:, :, :40], True,
                                     config={**SMALL, "SPLITS": 2})
    expected = flash.attention_reference(q.double(), k.double(), v.double(), True)
    torch.testing.assert_close(o.double(), expected, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="multiple of k and v's 3"):
        flash_decode.flash_decode(q, torch.zeros(1, 3, 40, 16), torch.zeros(1, 3, 40, 16))


def test_the_prune_and_the_problem_key():
    problem = {"seq_k": 1024, "head_dim": 128, "dtype": "float16", "causal": True}
    config = dict(flash_decode.DECODE_DEFAULT)
    gpu = Resources(227 * 1024)
    assert flash_decode.decode_prune(config, problem, gpu) is None
    assert "leave some ranges empty" in flash_decode.decode_prune(config, {**problem,
                                                                           "seq_k": 128}, gpu)
    assert "shared memory" in flash_decode.decode_prune({**config, "BLOCK_M": 128,
                                                         "BLOCK_N": 128, "num_stages": 8},
                                                        problem, Resources(100 * 1024))
    q = torch.zeros(1, 16, 1, 128)
    short, longer = (flash_decode.decode_problem(q, torch.zeros(1, 4, n, 128), True)
                     for n in (1025, 2040))
    assert short == longer          # a decoding loop's growing cache tunes once per power of 2
