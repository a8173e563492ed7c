"""The general FlashAttention (reference/flash.py) and its backward pass
(reference/flash_backward.py) against float64 PyTorch, in interpreter mode on small shapes:
grouped-query heads, decoding and chunked prefill, head sizes that are not powers of two, odd
lengths, causal and not; and the errors a caller meets."""
import math

import pytest
import torch

from tilegym_edu import grading
from tilegym_edu.check import check, random_tensor
from tilegym_edu.reference import flash, flash_backward
from tilegym_edu.tune import Config, Resources

pytestmark = pytest.mark.beside

SMALL = Config(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=1)
SMALL_BACKWARD = {"dkdv": SMALL, "dq": SMALL}

#: (batch, heads, kv_heads, seq_q, seq_k, head_dim): same heads, grouped-query, multi-query,
#: decoding one token, a chunk of prefill at the end of a cache, head sizes 8, 24, 80, 96,
#: groups of 3 (a block of 16 rows ends inside a query's group), and lengths of whole blocks
#: (the backward streams them by tensor descriptors; the last also with a resident block of
#: 32 keys past the end of 48 and head columns past 24 read as zeros)
SHAPES = [(1, 2, 2, 17, 17, 16), (2, 4, 2, 19, 19, 32), (1, 4, 1, 9, 9, 24),
          (2, 4, 2, 1, 37, 64), (1, 2, 1, 5, 33, 80), (1, 3, 3, 33, 50, 8), (1, 2, 2, 20, 20, 96),
          (1, 6, 2, 7, 23, 32), (1, 4, 2, 32, 64, 16), (2, 4, 2, 32, 48, 24)]


def shape_id(shape) -> str:
    b, h, hkv, sq, sk, d = shape
    return f"B{b}-H{h}-KV{hkv}-Q{sq}-K{sk}-D{d}"


def make_inputs(case, generator):
    b, h, hkv, sq, sk, d = case["shape"]
    return (random_tensor((b, h, sq, d), case["dtype"], generator),
            random_tensor((b, hkv, sk, d), case["dtype"], generator),
            random_tensor((b, hkv, sk, d), case["dtype"], generator))


def cases(dtypes=(torch.float32, torch.float16)):
    return [{"shape": s, "dtype": d} for s in SHAPES for d in dtypes]


@pytest.fixture(params=["descriptors", "pointers"])
def kv_path(request, monkeypatch):
    """k and v by tensor descriptors wherever they fit (every contiguous input here, whatever
    its head size), or by pointers everywhere."""
    if request.param == "pointers":
        monkeypatch.setattr(flash, "kv_descriptors", lambda *args: None)
    else:
        monkeypatch.setattr(flash, "DESCRIPTORS_FROM_BLOCK_D", 16)
    return request.param


@pytest.mark.parametrize("config", [SMALL, Config(BLOCK_M=16, BLOCK_N=32, num_warps=4,
                                                   num_stages=1)], ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_forward_matches_float64_on_every_shape(causal, config, kv_path):
    """Also with key blocks wider than query blocks, which lesson 04's kernel cannot take. One
    seed: the shapes, not the values, are what a block's bounds get wrong."""
    results = check(lambda q, k, v: flash.flash_forward(q, k, v, causal, config=config)[0],
                    lambda q, k, v: flash.attention_reference(q, k, v, causal),
                    make_inputs, cases(), seeds=(0,))
    failed = [r.describe() for r in results if not r.passed]
    assert not failed, failed[:3]


def test_longest_first_computes_every_block_on_every_shape():
    """The programs in longest-first order (every head's last query block first) cover every
    (query block, head) once: right on every shape, causal and not, lse too."""
    config = Config(**SMALL, LONGEST_FIRST=True)
    for causal in (True, False):
        results = check(lambda q, k, v: flash.flash_forward(q, k, v, causal, config=config)[0],
                        lambda q, k, v: flash.attention_reference(q, k, v, causal),
                        make_inputs, cases((torch.float32,)), seeds=range(1))
        failed = [r.describe() for r in results if not r.passed]
        assert not failed, failed[:3]
    generator = torch.Generator().manual_seed(1)
    q, k, v = make_inputs({"shape": (2, 4, 2, 37, 37, 16), "dtype": torch.float32}, generator)
    _, in_order = flash.flash_forward(q, k, v, True, config=SMALL)
    _, longest = flash.flash_forward(q, k, v, True, config=config)
    torch.testing.assert_close(longest, in_order, rtol=0, atol=0)


def test_the_order_space_races_longest_first_only_where_blocks_differ_in_work():
    """Learners' kernels take FLASH_SPACE, which sets no LONGEST_FIRST; FLASH_ORDER_SPACE adds
    longest-first rows, pruned for attention that is not causal."""
    assert not any("LONGEST_FIRST" in c for c in flash.FLASH_SPACE.configs(2))
    ordered = [c for c in flash.FLASH_ORDER_SPACE.configs(1) if c.get("LONGEST_FIRST")]
    assert len(ordered) == 3
    resources = Resources(shared_bytes=228 * 1024)
    q = torch.randn(1, 16, 2048, 128).half()
    for causal in (True, False):
        kept, pruned = flash.FLASH_ORDER_SPACE.candidates(1, flash.flash_problem(q, q, causal),
                                                          resources)
        assert sum(bool(c.get("LONGEST_FIRST")) for c in kept) == (3 if causal else 0)
        assert causal or any("causal" in why for _, why in pruned)


def test_forward_saves_the_log_sum_exp_in_log2_units():
    generator = torch.Generator().manual_seed(0)
    q, k, v = make_inputs({"shape": (1, 4, 2, 5, 33, 80), "dtype": torch.float32}, generator)
    _, lse = flash.flash_forward(q, k, v, causal=True, config=SMALL)
    scores = q.double() @ k.double().repeat_interleave(2, dim=1).transpose(-1, -2) / math.sqrt(80)
    keep = torch.ones(5, 33, dtype=torch.bool).tril(33 - 5)
    expected = scores.masked_fill(~keep, float("-inf")).logsumexp(-1) / math.log(2)
    assert lse.shape == (1, 4, 5) and lse.dtype == torch.float32
    torch.testing.assert_close(lse.double(), expected, rtol=1e-5, atol=1e-5)


def test_descriptors_read_rows_that_follow_one_another_on_16_byte_boundaries():
    k = torch.randn(2, 3, 10, 32)
    assert flash.descriptors_fit(k)
    assert flash.descriptors_fit(k.half()[:1])
    assert not flash.descriptors_fit(torch.randn(2, 3, 17, 32)[:, :, :10])  # a KV cache's view
    assert not flash.descriptors_fit(torch.randn(1, 10, 3, 32).transpose(1, 2))  # bshd
    assert not flash.descriptors_fit(torch.randn(2, 3, 10, 20).half())  # 40-byte rows
    assert flash.kv_descriptors(k, k[:, :, :5], 16, 32) is None


def test_descriptors_carry_head_blocks_of_128_columns_and_more():
    """What the H200 measured (DESCRIPTORS_FROM_BLOCK_D): blocks of 64 columns stay on
    pointers, head sizes 96 and 128 go by descriptors; the tuner keys the two apart."""
    for head_dim, expected in ((64, False), (96, True), (128, True)):
        q = torch.randn(1, 2, 4, head_dim)
        assert flash.flash_problem(q, q, False)["kv_descriptors"] is expected


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # head 1 computes on its own infinities
def test_the_next_heads_keys_never_reach_a_head_whose_last_block_runs_past_its_end(monkeypatch):
    """A descriptor block past a head's last key reads the next head's rows: they are masked,
    even where they hold infinities."""
    monkeypatch.setattr(flash, "DESCRIPTORS_FROM_BLOCK_D", 16)
    generator = torch.Generator().manual_seed(4)
    q, k, v = make_inputs({"shape": (1, 2, 2, 3, 20, 32), "dtype": torch.float32}, generator)
    k[0, 1, :], v[0, 1, :] = float("inf"), float("nan")
    o, lse = flash.flash_forward(q, k, v, config=SMALL)
    expected = flash.attention_reference(q[:, :1].double(), k[:, :1].double(), v[:, :1].double())
    torch.testing.assert_close(o[:, :1].double(), expected, rtol=1e-5, atol=1e-5)
    assert torch.isfinite(lse[:, 0]).all()


def gradients(attend):
    """fn(q, k, v, do) -> dq, dk, dv flattened into one tensor, through ``attend``."""
    def run(q, k, v, do):
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        attend(q, k, v).backward(do)
        return torch.cat([q.grad.flatten(), k.grad.flatten(), v.grad.flatten()])
    return run


def make_backward_inputs(case, generator):
    q, k, v = make_inputs(case, generator)
    return q, k, v, random_tensor(q.shape, case["dtype"], generator)


@pytest.fixture(params=["descriptors", "pointers"])
def stream_path(request, monkeypatch):
    """The backward's streamed blocks by tensor descriptors where the sequence is a whole
    number of them (the last shapes of SHAPES: the test fails unless some went so), or by
    pointers everywhere."""
    made = []
    if request.param == "pointers":
        monkeypatch.setattr(flash_backward, "stream_descriptors", lambda *args: None)
    else:
        real = flash_backward.stream_descriptors

        def counted(*args):
            made.append(real(*args))
            return made[-1]
        monkeypatch.setattr(flash_backward, "stream_descriptors", counted)
    yield request.param
    if request.param == "descriptors":
        assert any(d is not None for d in made), "no block went by descriptors"


@pytest.mark.parametrize("configs", [SMALL_BACKWARD, {
    "dkdv": Config(BLOCK_M=16, BLOCK_N=32, num_warps=4, num_stages=1),
    "dq": Config(BLOCK_M=32, BLOCK_N=16, num_warps=4, num_stages=1)}], ids=["square", "wide"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_backward_matches_float64_on_every_shape(causal, configs, stream_path):
    """Blocks of one size, and the resident block twice the streamed one (as on a GPU), so
    that the causal start of each loop falls inside a block and on a block's edge. Both dtypes
    with blocks of one size; the wider blocks' edges, in float16 alone (the dtype changes no
    bound: every load and cast is the same code at either size)."""
    def ours(q, k, v):
        return flash_backward.attention(q, k, v, causal, forward_config=SMALL,
                                        backward_configs=configs)
    results = check(gradients(ours),
                    gradients(lambda q, k, v: flash.attention_reference(q, k, v, causal)),
                    make_backward_inputs,
                    cases() if configs is SMALL_BACKWARD else cases((torch.float16,)),
                    seeds=(0,))
    failed = [r.describe() for r in results if not r.passed]
    assert not failed, failed[:3]


def test_the_backward_streams_by_descriptors_only_whole_blocks_of_rows_that_fit():
    """A streamed block never runs into the next head's rows: descriptors only where the
    block divides the sequence, and where descriptors can read the rows; the tuner keys the
    two ways apart."""
    q = torch.randn(1, 2, 32, 16)
    assert flash_backward.stream_descriptors(q, q, 16, 16) is not None
    assert flash_backward.stream_descriptors(q, q, 64, 16) is None          # 32 rows of 64
    assert flash_backward.stream_descriptors(q, q.transpose(1, 2).contiguous().transpose(1, 2),
                                             16, 16) is None               # (b, s, h, d)
    problem = flash_backward.backward_problem(q, q[:, :, :8], True)   # k: a view of a cache
    assert problem["q_descriptors"] is True and problem["kv_descriptors"] is False


def test_loss_backward_fills_every_grad_and_takes_a_broadcast_gradient():
    """o.sum() hands backward a gradient of stride 0: it is made contiguous, not misread."""
    generator = torch.Generator().manual_seed(1)
    q, k, v = (t.requires_grad_() for t in
               make_inputs({"shape": (1, 4, 2, 9, 21, 32), "dtype": torch.float32}, generator))
    flash_backward.attention(q, k, v, causal=True, forward_config=SMALL,
                             backward_configs=SMALL_BACKWARD).sum().backward()
    ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
    flash.attention_reference(*ref, causal=True).sum().backward()
    for ours, theirs in zip((q, k, v), ref):
        assert ours.grad.shape == ours.shape
        torch.testing.assert_close(ours.grad.double(), theirs.grad, rtol=1e-4, atol=1e-5)


def test_strided_views_go_in_without_copies():
    """q, k, v as views of one packed qkv tensor (the model's layout), gradients included."""
    generator = torch.Generator().manual_seed(2)
    qkv = random_tensor((1, 11, 6, 32), torch.float32, generator).requires_grad_()
    q, k, v = (qkv[:, :, i:i + 2].transpose(1, 2) for i in (0, 2, 4))
    out = flash_backward.attention(q, k, v, forward_config=SMALL,
                                   backward_configs=SMALL_BACKWARD)
    out.backward(torch.ones_like(out))
    ref_qkv = qkv.detach().double().requires_grad_()
    rq, rk, rv = (ref_qkv[:, :, i:i + 2].transpose(1, 2) for i in (0, 2, 4))
    flash.attention_reference(rq, rk, rv).backward(torch.ones_like(out, dtype=torch.float64))
    torch.testing.assert_close(qkv.grad.double(), ref_qkv.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shapes, causal, message", [
    (((1, 6, 4, 16), (1, 4, 4, 16), (1, 4, 4, 16)), False, "multiple of k and v's 4"),
    (((1, 2, 8, 16), (1, 2, 4, 16), (1, 2, 4, 16)), True, "more queries"),
    (((1, 2, 4, 300), (1, 2, 4, 300), (1, 2, 4, 300)), False, "1 to 256"),
    (((1, 2, 4, 16), (1, 2, 4, 16), (1, 2, 5, 16)), False, "k and v must have one shape"),
    (((1, 2, 4, 16), (1, 2, 4, 32), (1, 2, 4, 32)), False, "batch and head_dim"),
    (((2, 4, 16),) * 3, False, "must be \\(batch, heads, seq, head_dim\\)"),
])
def test_what_the_kernels_cannot_take_is_refused_with_what_to_change(shapes, causal, message):
    q, k, v = (torch.randn(s) for s in shapes)
    with pytest.raises(ValueError, match=message):
        flash.flash_forward(q, k, v, causal, config=SMALL)


def test_a_last_dimension_with_a_stride_is_refused():
    q = torch.randn(1, 2, 16, 4).transpose(-1, -2)
    with pytest.raises(ValueError, match="q.contiguous"):
        flash_backward.attention(q, q.contiguous(), q.contiguous())


def test_the_general_attention_is_a_reference_kernel_inside_graded_calls():
    q = torch.randn(1, 2, 4, 16)
    for fn in (flash.flash_forward, flash_backward.attention):
        with pytest.raises(grading.LibraryShortcut, match="reference"):
            grading.guarded_call(fn, (q, q, q))
