"""The reference kernels: correct on every seed (so no honest kernel compared with them is failed
by a flaky reference) and forbidden inside graded calls. (They are the lesson solutions: the
solution cells include them, tests/test_includes.py.)"""
import pytest
import torch

from tilegym_edu import grading
from tilegym_edu.check import check, random_tensor
from tilegym_edu.reference import attention, convolution, llama, llama_kernels, matmul, pipelined
from tilegym_edu.tune import Config

pytestmark = pytest.mark.beside

SHAPES = [(1, 1, 1), (5, 3, 7), (2, 6, 70), (8, 1, 40)]  # few programs: 20 seeds each


def make_inputs(case, generator):
    M, N, K = case["shape"]
    return (random_tensor((M, K), case["dtype"], generator),
            random_tensor((K, N), case["dtype"], generator))


@pytest.mark.parametrize("fn", [matmul.naive_matmul,
                                lambda a, b: matmul.tiled_matmul(a, b, 16, 16, 16)],
                         ids=["naive", "tiled"])
def test_reference_matmuls_pass_on_20_seeds(fn):
    cases = [{"shape": s, "dtype": d} for s in SHAPES for d in (torch.float32, torch.float16)]
    results = check(fn, lambda a, b: a @ b, make_inputs, cases, seeds=range(20))
    failed = [r.describe() for r in results if not r.passed]
    assert not failed, failed[:3]


@pytest.mark.parametrize("fn", [
    lambda a, b: pipelined.pipelined_matmul(a, b, dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)),
    lambda a, b: pipelined.persistent_matmul(a, b, dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)),
], ids=["pipelined", "persistent"])
def test_lesson03_reference_matmuls_pass_on_20_seeds(fn):
    # row lengths that tensor descriptors can address (multiples of 16 bytes)
    shapes = [(1, 8, 8), (5, 16, 24), (33, 8, 40)]
    cases = [{"shape": s, "dtype": d} for s in shapes for d in (torch.float32, torch.float16)]
    results = check(fn, lambda a, b: a @ b, make_inputs, cases, seeds=range(20))
    failed = [r.describe() for r in results if not r.passed]
    assert not failed, failed[:3]


def attention_inputs(case, generator):
    return tuple(random_tensor(case["shape"], case["dtype"], generator) for _ in range(3))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_attention_passes_on_20_seeds(causal):
    small = Config(BLOCK_M=32, BLOCK_N=16, num_warps=4, num_stages=2)
    cases = [{"shape": s, "dtype": d} for s in [(1, 1, 1, 16), (1, 2, 37, 32), (2, 1, 50, 16)]
             for d in (torch.float32, torch.float16)]
    results = check(lambda q, k, v: attention.flash_attention(q, k, v, causal, config=small),
                    lambda q, k, v: attention.naive_attention(q, k, v, causal),
                    attention_inputs, cases, seeds=range(20))
    failed = [r.describe() for r in results if not r.passed]
    assert not failed, failed[:3]


def test_softmax_passes_on_20_seeds():
    cases = [{"shape": s, "dtype": d} for s in [(1, 1), (3, 1000), (2, 4097)]
             for d in (torch.float32, torch.float16)]
    results = check(attention.softmax, lambda x: torch.softmax(x, dim=-1),
                    lambda case, g: (random_tensor(case["shape"], case["dtype"], g),),
                    cases, seeds=range(20))
    failed = [r.describe() for r in results if not r.passed]
    assert not failed, failed[:3]


def conv_inputs(case, generator):
    N, C, H, W, K, R = case["shape"]
    x = random_tensor((N, C, H, W), case["dtype"], generator)
    w = random_tensor((K, C, R, R), case["dtype"], generator)
    return (x.contiguous(memory_format=torch.channels_last),
            w.contiguous(memory_format=torch.channels_last), case["stride"], case["padding"])


def test_implicit_gemm_conv2d_passes_on_20_seeds():
    cases = [{"shape": s, "stride": st, "padding": p, "dtype": d}
             for s, st, p in [((1, 3, 5, 4, 2, 3), 1, 1), ((2, 5, 7, 6, 3, 1), 1, 0),
                              ((1, 17, 6, 5, 18, 3), (2, 1), (1, 0))]
             for d in (torch.float32, torch.float16)]
    small = dict(BLOCK_M=32, BLOCK_N=16, BLOCK_K=16, GROUP_M=4)
    results = check(lambda x, w, stride, padding: convolution.conv2d(x, w, stride, padding,
                                                                      config=small),
                    lambda x, w, stride, padding: torch.nn.functional.conv2d(
                        x, w, stride=stride, padding=padding), conv_inputs, cases, seeds=range(20))
    failed = [r.describe() for r in results if not r.passed]
    assert not failed, failed[:3]


def rmsnorm_inputs(case, generator):
    rows, dim = case["shape"]
    x = random_tensor((rows, dim), case["dtype"], generator, case.get("scale", 1.0))
    x[:case.get("zero_rows", 0)] = 0
    return x, random_tensor((dim,), case["dtype"], generator), 1e-5


def rope_inputs(case, generator):
    B, S, H, D = case["shape"]
    # a view, as q in qkv
    x = random_tensor((B, S, H + 2, D), case["dtype"], generator)[:, :, 1:H + 1]
    cos, sin = llama.rope_tables(S + 1, D, device_=x.device)
    return x, cos, sin


@pytest.mark.parametrize("kernel", ["rmsnorm", "rope", "swiglu"])
def test_lesson06_fused_kernels_pass_on_20_seeds(kernel):
    dtypes = (torch.float32, torch.float16)
    if kernel == "rmsnorm":
        cases = [{"shape": s, "dtype": d, **extra} for s, extra in
                 [((1, 1), {}), ((5, 333), {}), ((4, 64), {"zero_rows": 2}),
                  ((3, 70), {"scale": 1e-4})]
                 for d in dtypes]
        args = (llama_kernels.rmsnorm, llama.rmsnorm_torch, rmsnorm_inputs)
    elif kernel == "rope":
        cases = [{"shape": s, "dtype": d}
                 for s in [(1, 1, 1, 16), (2, 5, 3, 32), (1, 4, 5, 64)] for d in dtypes]
        args = (lambda x, cos, sin: llama_kernels.rope_(x.clone(), cos, sin),
                lambda x, cos, sin: llama.rope_torch(x, cos[:x.shape[1]], sin[:x.shape[1]]),
                rope_inputs)
    else:
        cases = [{"shape": s, "dtype": d} for s in [(1, 2), (5, 74), (3, 3000)] for d in dtypes]
        args = (llama_kernels.swiglu, llama.swiglu_torch,
                lambda case, g: (random_tensor(case["shape"], case["dtype"], g, 3.0),))
    results = check(*args, cases, seeds=range(20))
    failed = [r.describe() for r in results if not r.passed]
    assert not failed, failed[:3]


def test_reference_kernels_raise_inside_graded_calls():
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    for fn in (matmul.naive_matmul, matmul.tiled_matmul, pipelined.pipelined_matmul,
               pipelined.tuned_matmul, attention.softmax):
        with pytest.raises(grading.LibraryShortcut, match="reference"):
            grading.guarded_call(fn, (a, b))
    x = torch.randn(1, 2, 3, 3).contiguous(memory_format=torch.channels_last)
    w = torch.randn(2, 2, 1, 1).contiguous(memory_format=torch.channels_last)
    for fn in (convolution.conv2d, convolution.direct_conv2d):
        with pytest.raises(grading.LibraryShortcut, match="reference"):
            grading.guarded_call(fn, (x, w))
    cos, sin = llama.rope_tables(3, 16)
    for fn, args in ((llama_kernels.rmsnorm, (a, a[0], 1e-5)), (llama_kernels.swiglu, (a,)),
                     (llama_kernels.rope_, (torch.randn(1, 3, 2, 16), cos, sin))):
        with pytest.raises(grading.LibraryShortcut, match="reference"):
            grading.guarded_call(fn, args)


@pytest.mark.parametrize("lesson, function, make_inputs, reference, cases", [
    ("00_getting_started", "silu_mul", "make_silu_inputs", "silu_mul_reference",
     [{"shape": s, "dtype": d} for s in [(7,), (4097,), (37, 129)]
      for d in (torch.float32, torch.float16)]),
    ("02_tiled_matmul", "matmul_bias_relu", "make_bias_relu_inputs", "bias_relu_reference",
     [{"M": 37, "N": 29, "K": 70, "dtype": d, "blocks": (32, 32, 32, 8)}
      for d in (torch.float32, torch.float16)]
     + [{"M": 20, "N": 40, "K": 33, "dtype": torch.float16, "bias": "strided",
         "blocks": (16, 32, 16, 2)}]),
    ("02_tiled_matmul", "bmm", "make_bmm_inputs", "bmm_reference",
     [{"batch": 2, "M": 29, "N": 40, "K": 33, "dtype": d, "blocks": (16, 32, 16, 2)}
      for d in (torch.float32, torch.float16)]),
], ids=["silu_mul", "matmul_bias_relu", "bmm"])
def test_solutions_that_live_only_in_notebooks_pass_on_20_seeds(lesson, function, make_inputs,
                                                                 reference, cases):
    """The lesson's own function, inputs and definition, as its test cells use them."""
    from tests.adversaries import lesson_namespace
    names = lesson_namespace(lesson)
    results = check(names[function], names[reference], names[make_inputs], cases, seeds=range(20))
    failed = [r.describe() for r in results if not r.passed]
    assert not failed, failed[:3]
