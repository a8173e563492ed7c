"""The walls behind the audit, each tried on its own with code the audit would have refused
(so that a hole in the audit still finds them): outputs that are not plain tensors, Python
arithmetic on tensor data, the course's raw kernels, and answers computed ahead for the seeds
a test cell shows."""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from tests.adversaries import lesson_namespace, run_test_cell
from tilegym_edu import check, grading
from tilegym_edu.reference import matmul

LESSON = "00_getting_started"


class Agreeable(torch.Tensor):
    """A tensor subclass whose comparisons could say anything."""


def test_an_output_that_is_a_tensor_subclass_fails():
    ref = torch.ones(3, dtype=torch.float64)
    passed, _, message = check.compare_output(torch.ones(3).as_subclass(Agreeable), ref,
                                              torch.float32)
    assert not passed and "returned Agreeable, expected a torch.Tensor" in message


def test_python_arithmetic_on_tensor_data_is_a_shortcut():
    x = torch.randn(4)
    with pytest.raises(grading.LibraryShortcut, match="_local_scalar_dense"):
        grading.guarded_call(lambda t: float(t[0]) * 2.0, (x,))


def test_a_raw_reference_kernel_refuses_to_launch_in_a_graded_call():
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    c = torch.empty(4, 4)

    def launches_the_reference(a, b):
        matmul.naive_matmul_kernel[(4, 4)](a, b, c, 4, 4, 4, 4, 1, 4, 1, 4, 1, BLOCK_K=4)
        return c

    with pytest.raises(grading.LibraryShortcut, match="reference kernel 'naive_matmul_kernel'"):
        grading.guarded_call(launches_the_reference, (a, b))
    launches_the_reference(a, b)       # outside a graded call it is the course's to use
    assert torch.allclose(c, a @ b, atol=1e-5)


def answers_computed_ahead(honest):
    """silu_mul(x, y) for every input the visible test cell draws (its shapes, dtypes and
    seeds, known from the notebook), computed before the test runs; then looked up by shape
    and order of the calls, and handed back through a copy."""
    ahead = {}
    for shape in [(1,), (7,), (1024,), (4097,), (37, 129)]:
        for dtype in (torch.float32, torch.float16):
            for seed in (0, 1, 2):
                g = torch.Generator().manual_seed(seed)
                x = check.random_tensor(shape, dtype, g)
                y = check.random_tensor(shape, dtype, g)
                ahead.setdefault((shape, dtype), []).append(honest(x, y))
    calls = {}

    def lookup(x, y):
        key = (tuple(x.shape), x.dtype)
        n = calls.get(key, 0)
        calls[key] = n + 1
        out = torch.empty_like(x)
        out.copy_(ahead[key][n % 3])
        return out
    return lookup


def test_answers_computed_ahead_for_the_visible_seeds_fail_in_a_grading_kernel(monkeypatch):
    honest = lesson_namespace(LESSON)["silu_mul"]
    source = "grading.assert_correct(silu_mul, silu_mul_reference, make_silu_inputs, " \
             "[{'shape': s, 'dtype': d} for s in [(1,), (7,), (1024,), (4097,), (37, 129)] " \
             "for d in (torch.float32, torch.float16)], tolerances={torch.float32: 1e-5})"
    from tests import adversaries
    monkeypatch.setattr(adversaries, "test_cell_source", lambda lesson, grade_id: source)
    monkeypatch.delenv(grading.GRADING_ENV, raising=False)
    run_test_cell(LESSON, "visible", {"silu_mul": answers_computed_ahead(honest)})  # it works...
    monkeypatch.setenv(grading.GRADING_ENV, "1")
    with pytest.raises(AssertionError, match="error above the tolerance|NaN"):  # ...not here
        run_test_cell(LESSON, "visible", {"silu_mul": answers_computed_ahead(honest)})


def test_triton_launch_hooks_exist_in_this_triton():
    """The raw-kernel wall relies on JITFunction.add_pre_run_hook."""
    assert hasattr(matmul.naive_matmul_kernel, "add_pre_run_hook"), triton.__version__


@triton.jit
def _store_zeros_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.zeros((BLOCK,), tl.float32), mask=offsets < n)


def test_a_counted_run_that_zeroes_its_inputs_fails_the_traffic_check():
    """Round 3 of the red team (2026-12-05): stores of exactly the output's bytes, all zeros,
    then `x.zero_()`: the traffic check's reference, read from the inputs after the call,
    agreed. It reads copies taken before the call now, and the inputs must come back as they
    were."""
    def zeros_then_zero_the_input(x):
        out = torch.empty_like(x)
        _store_zeros_kernel[(1,)](out, x.numel(), BLOCK=16)
        x.zero_()
        return out

    x = torch.randn(16)
    with pytest.raises(AssertionError, match=r"modified its input argument\(s\) \[0\]"):
        grading.assert_traffic(zeros_then_zero_the_input, (x,), lambda x: x * 2, torch.float32,
                               what="doubling", stores=16 * 4)


def test_a_counted_run_that_copies_with_pytorch_stores_too_much_and_is_told_so():
    """Round 13 of the red team built an unfolded im2col matrix with PyTorch's copies (allowed
    under the shortcut guard) and ran a Triton GEMM on it: the count of the kernels' stores
    alone matched the output. PyTorch's copies count now."""
    def copy_first(x):
        return _double(x.clone())

    x = torch.randn(16)
    with pytest.raises(AssertionError, match=r"stored 128 bytes \(64 of them by PyTorch "
                                             r"operations outside your kernels"):
        grading.assert_traffic(copy_first, (x,), lambda x: x * 2, torch.float32,
                               what="doubling", stores=16 * 4)


def test_the_grader_s_own_fills_and_copies_are_not_counted():
    """The guard NaN-fills what the call allocates and copies its output: neither is the
    call's traffic."""
    grading.assert_traffic(_double, (torch.randn(16),), lambda x: x * 2, torch.float32,
                           what="doubling", stores=16 * 4)


@triton.jit
def _double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) * 2,
             mask=offsets < n)


def _double(x):
    out = torch.empty_like(x)
    _double_kernel[(1,)](x, out, x.numel(), BLOCK=16)
    return out


class _WritesTheAnswerWhenFreed:
    """Held by a candidate's output: freed with it, it writes the answer of the latest call
    into that call's output, as round 5 of the red team did with a generator's `finally`."""

    def __init__(self, pending):
        self.pending = pending

    def __del__(self):
        x, out = self.pending[-1]
        out.copy_(x * 2)


# the finalizer's arithmetic, run under the guard, raises LibraryShortcut, which Python reports
# as an exception ignored in __del__
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_answer_written_after_the_guarded_call_is_not_the_one_compared():
    """Each call's output, freed when the next one arrives (outside the shortcut guard), set
    off code that wrote the next output's answer: every check after the first passed. The
    grader compares a copy taken under the guard, so none does now."""
    pending = []

    def doubled_later(x):
        out = torch.empty_like(x)
        pending[:] = [(x, out)]       # the latest call's only: an earlier output is freed
        out.keeper = _WritesTheAnswerWhenFreed(pending)
        return out

    def inputs(case, generator):
        return (check.random_tensor(case["shape"], case["dtype"], generator),)

    with pytest.raises(AssertionError, match="4 of 4 checks failed"):
        grading.assert_correct(doubled_later, lambda x: 2 * x, inputs,
                               [{"shape": (8,), "dtype": torch.float32}], seeds=(0, 1, 2, 3))


def test_the_copy_that_is_compared_never_runs_the_output_s_own_methods():
    """Round 6 of the red team (2026-12-05) returned a Tensor subclass whose `detach` handed
    the grader's copy a tensor it kept, and wrote the answer into that later. A subclass is
    not copied at all now (the comparison refuses it); a plain tensor is copied with torch's
    own methods."""
    class Sub(torch.Tensor):
        def detach(self):
            raise AssertionError("the output's own detach ran")

    out = torch.ones(3).as_subclass(Sub)
    assert grading._detached_copy(out) is out
    assert not check.compare_output(out, torch.ones(3, dtype=torch.float64), torch.float32)[0]
    plain = torch.ones(3)
    copied = grading._detached_copy((plain, [plain]))
    assert type(copied) is tuple and copied[0] is not plain and torch.equal(copied[1][0], plain)
