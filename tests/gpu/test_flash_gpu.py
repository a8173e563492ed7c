"""The general FlashAttention and its backward pass on a GPU, with the configurations the
wrappers choose (tuned by default; each search space's default inside the checks), in float16
and bfloat16 (float32 is checked in the interpreter, tests/test_flash.py): three of the
interpreter tests' shapes (decoding, a chunk at head size 80, head size 96, whole blocks) and
longer ones where many blocks pipeline (head sizes 128 and 256, a long KV cache, grouped
heads, lengths of whole blocks that the backward streams by TMA)."""
import pytest
import torch

from tests.test_flash import (SHAPES, gradients, make_backward_inputs, make_inputs,
                              shape_id)
from tilegym_edu.check import check
from tilegym_edu.reference import flash, flash_backward
from tilegym_edu.tune import Resources

DTYPES = (torch.float16, torch.bfloat16)
#: longer problems: a prefill of 1000 with grouped heads at head sizes 128 and 256, a decode
#: step over a cache of 3001, a chunk of 300 queries at the end of 2000 keys, and lengths of
#: whole blocks: a prefill of 1024 with grouped heads, a chunk of 256 at the end of 1024 keys
LONG = [(2, 8, 2, 1000, 1000, 128), (1, 4, 4, 777, 777, 256), (4, 8, 1, 1, 3001, 128),
        (1, 8, 2, 300, 2000, 64), (2, 8, 2, 1024, 1024, 128), (1, 8, 8, 256, 1024, 64)]
GPU_SHAPES = SHAPES[3:5] + SHAPES[6:] + LONG


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=shape_id)
def test_forward_on_the_gpu(shape, causal):
    results = check(lambda q, k, v: flash.flash_forward(q, k, v, causal)[0],
                    lambda q, k, v: flash.attention_reference(q, k, v, causal), make_inputs,
                    [{"shape": shape, "dtype": d} for d in DTYPES], seeds=(0,))
    failed = [r.describe() for r in results if not r.passed]
    assert not failed, failed[:3]


@pytest.mark.parametrize("config", [c for c in flash.FLASH_ORDER_SPACE.configs(1)
                                    if c.get("LONGEST_FIRST")], ids=str)
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=shape_id)
def test_longest_first_on_the_gpu(shape, config):
    """Every longest-first row of FLASH_ORDER_SPACE, causal, where it fits the GPU."""
    b, h, hkv, sq, sk, d = shape
    problem = flash.flash_problem(torch.empty(b, h, sq, d, device="cuda", dtype=torch.float16),
                                  torch.empty(b, hkv, sk, d, device="cuda"), True)
    why = flash.flash_order_prune(config, problem, Resources.of_gpu())
    if why:
        pytest.skip(f"{config} does not run here: {why}")
    results = check(lambda q, k, v: flash.flash_forward(q, k, v, True, config=config)[0],
                    lambda q, k, v: flash.attention_reference(q, k, v, True), make_inputs,
                    [{"shape": shape, "dtype": d} for d in DTYPES], seeds=(0,))
    failed = [r.describe() for r in results if not r.passed]
    assert not failed, failed[:3]


def test_the_capstones_views_tuned_over_the_order_space(fresh_tuning_cache):
    """The model's calls (16 query heads as 4 groups of 4 over stride-0 views of 4 key/value
    heads, views into one qkv tensor), tuned over FLASH_ORDER_SPACE as reference_ops runs
    them: whatever wins is right."""
    torch.manual_seed(5)
    qkv = torch.randn(1, 2048, 24, 128, device="cuda", dtype=torch.float16)
    q = qkv[0, :, :16].view(2048, 4, 4, 128).permute(1, 2, 0, 3)
    k, v = (qkv[0, :, i:i + 4].permute(1, 0, 2)[:, None].expand(4, 4, 2048, 128)
            for i in (16, 20))
    o, _ = flash.flash_forward(q, k, v, True, space=flash.FLASH_ORDER_SPACE)
    expected = flash.attention_reference(q.float(), k.float(), v.float(), True)
    assert (o.float() - expected).norm() / expected.norm() < 5e-3


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=shape_id)
def test_backward_on_the_gpu(shape, causal):
    results = check(gradients(lambda q, k, v: flash_backward.attention(q, k, v, causal)),
                    gradients(lambda q, k, v: flash.attention_reference(q, k, v, causal)),
                    make_backward_inputs, [{"shape": shape, "dtype": d} for d in DTYPES],
                    seeds=(0,))
    failed = [r.describe() for r in results if not r.passed]
    assert not failed, failed[:3]


def test_tuned_configurations_give_the_same_answer(fresh_tuning_cache):
    """Outside a check the wrappers tune; whatever wins must still be right."""
    generator = torch.Generator().manual_seed(3)
    q, k, v, do = make_backward_inputs({"shape": (2, 16, 4, 2048, 2048, 128),
                                        "dtype": torch.float16}, generator)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    flash_backward.attention(q, k, v, causal=True).backward(do)
    ref = [t.detach().float().requires_grad_() for t in (q, k, v)]
    out = flash.attention_reference(*ref, causal=True)
    out.backward(do.float())
    for ours, theirs in zip((q, k, v), ref):
        error = (ours.grad.float() - theirs.grad).norm() / theirs.grad.norm()
        assert error < 5e-3, error
