"""The Gluon forward for Hopper (reference/flash_hopper.py), every configuration it races, on
a GPU of compute capability 9.x: float16 and bfloat16 against float64, head sizes 64 and 128,
causal and not, grouped-query heads, a chunk of queries at the end of a longer cache; and its
log-sum-exp against float64's, in the log2 units flash.py's backward reads."""
import math

import pytest
import torch

from tests.test_flash import make_inputs, shape_id
from tilegym_edu.check import check
from tilegym_edu.reference import flash, flash_hopper

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
    reason="the Gluon forward is written for Hopper (compute capability 9.x) GPUs")

#: (batch, heads, kv_heads, seq_q, seq_k, head_dim): lengths are multiples of 128, as
#: hopper_fits asks
SHAPES = [(2, 4, 4, 256, 256, 64), (1, 8, 2, 384, 384, 128), (2, 4, 1, 128, 640, 128),
          (1, 2, 2, 1024, 1024, 64)]


def hopper_forward(config, causal):
    def run(q, k, v):
        assert flash_hopper.hopper_fits(q, k, v)
        o = torch.empty_like(q)
        lse = q.new_empty(q.shape[:3], dtype=torch.float32)
        flash_hopper.launch_hopper_flash(q, k, v, o, lse, causal, config)
        return o
    return run


@pytest.mark.parametrize("config", flash_hopper.HOPPER_CONFIGS, ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_every_configuration_is_right(shape, causal, config):
    results = check(hopper_forward(config, causal),
                    lambda q, k, v: flash.attention_reference(q, k, v, causal), make_inputs,
                    [{"shape": shape, "dtype": d} for d in (torch.float16, torch.bfloat16)],
                    seeds=(0,))
    failed = [r.describe() for r in results if not r.passed]
    assert not failed, failed[:3]


@pytest.mark.parametrize("config", [c for c in flash_hopper.HOPPER_CONFIGS
                                    if c[3] in flash_hopper.PERSISTENT_SCHEDULES], ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_persistent_programs_take_tile_after_tile(causal, config):
    """480 tiles (of 128 queries; 336 of 192) on at most 132 programs: the ring's phases and
    q's slots run on across the 3-4 tiles each program takes (the small shapes above give every
    program one tile); 1280 queries are 6 2/3 tiles of 192, the last one partly past a head.
    Three consumers (BLOCK_M 192) at head size 64, the only one the tuner races them at."""
    head_dim = 64 if config[0] == 192 else 128
    results = check(hopper_forward(config, causal),
                    lambda q, k, v: flash.attention_reference(q, k, v, causal), make_inputs,
                    [{"shape": (3, 16, 4, 1280, 1280, head_dim), "dtype": torch.float16}],
                    seeds=(0,))
    failed = [r.describe() for r in results if not r.passed]
    assert not failed, failed[:3]


@pytest.mark.parametrize("config", [c for c in flash_hopper.HOPPER_CONFIGS if c[0] == 128],
                         ids=str)
def test_a_strided_o_gets_the_same_answer_as_a_contiguous_one(config):
    """Into a contiguous o the two consumers' rows leave by TMA (o_by_tma); into o seen through
    a transpose of a (batch, seq, heads, head_dim) buffer, by plain stores along its strides:
    the same numbers either way, and nothing written outside o."""
    generator = torch.Generator().manual_seed(3)
    q, k, v = (t.cuda() for t in make_inputs({"shape": (2, 4, 2, 384, 384, 128),
                                              "dtype": torch.float16}, generator))
    lse = q.new_empty(q.shape[:3], dtype=torch.float32)
    contiguous = torch.full_like(q, float("nan"))
    flash_hopper.launch_hopper_flash(q, k, v, contiguous, lse, False, config)
    buffer = torch.full((2, 384 + 1, 4, 128), float("nan"), dtype=q.dtype, device=q.device)
    strided = buffer[:, :384].transpose(1, 2)
    assert not flash_hopper.o_by_tma(strided, 1, *config[:3])
    flash_hopper.launch_hopper_flash(q, k, v, strided, lse, False, config)
    assert torch.equal(strided, contiguous)
    assert buffer[:, 384].isnan().all()


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_log_sum_exp_matches_float64(causal):
    generator = torch.Generator().manual_seed(1)
    q, k, v = (t.cuda() for t in make_inputs({"shape": (1, 4, 2, 256, 512, 128),
                                              "dtype": torch.float16}, generator))
    o = torch.empty_like(q)
    lse = q.new_empty(q.shape[:3], dtype=torch.float32)
    for config in flash_hopper.HOPPER_CONFIGS:
        flash_hopper.launch_hopper_flash(q, k, v, o, lse, causal, config)
        assert (lse.double() - expected(q, k, causal)).abs().max().item() < 2e-2, config


def expected(q, k, causal):
    """The log-sum-exp of each query's scores in float64, in log2 units."""
    k64 = k.double().repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    scores = q.double() @ k64.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        shift = k.shape[2] - q.shape[2]
        keep = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril(shift)
        scores = scores.masked_fill(~keep, -math.inf)
    return torch.logsumexp(scores, dim=-1) / math.log(2)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_forward_runs_the_forward_it_raced(causal):
    """attention_forward: the faster of the Gluon kernels and flash.py, right either way."""
    generator = torch.Generator().manual_seed(2)
    q, k, v = (t.cuda() for t in make_inputs({"shape": (2, 8, 2, 1024, 1024, 64),
                                              "dtype": torch.float16}, generator))
    o, lse = flash_hopper.attention_forward(q, k, v, causal)
    path, _ = flash_hopper.tuned_forward_launch(q, k, v, torch.empty_like(q),
                                                     torch.empty_like(lse), causal)
    assert path in ("gluon", "flash.py")
    reference = flash.attention_reference(q.double(), k.double(), v.double(), causal)
    assert (o.double() - reference).abs().max().item() < 1e-2
    assert (lse.double() - expected(q, k, causal)).abs().max().item() < 2e-2
