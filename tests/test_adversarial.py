"""The adversarial corpus: every graded kernel exercise of every lesson against every way of
being wrong we know of (tests/adversaries.py), each run through the lesson's own test cell.
Each must fail that cell with a message that says what went wrong; the honest solution must
pass it. (Whole notebooks, and that a failing cell costs exactly its points and nothing else,
are tested per lesson in tests/test_lessonNN.py; a kernel that never finishes in
tests/test_classroom.py; the GPU-only cases in tests/gpu/test_adversarial_gpu.py.)"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import pytest
import torch
import torch.nn.functional as F

from tests.adversaries import (GENERIC, REFERENCE, SHORTCUT, Adversary, lesson_namespace, memo,
                               run_test_cell)
from tilegym_edu.reference import (attention, conv_groups, convolution, flash, flash_backward,
                                   llama, llama_kernels, matmul, pipelined, split_k)


@dataclass(frozen=True)
class Exercise:
    """A graded test cell and the learner function it checks, with the library call and the
    course reference a cheater would hand the work to."""

    lesson: str
    cell: str
    function: str
    shortcut: Callable
    reference: Callable
    #: the function returns a flat tensor (the cell compares gradients flattened into one), so
    #: the adversaries that are wrong on a ragged edge or a non-square shape have no shape to
    #: be wrong on: they are not run against it
    flat: bool = False

    @property
    def id(self) -> str:
        return f"{self.lesson[:2]}:{self.cell}"


def _sdpa(q, k, v, causal=False, *rest, **options):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _sdpa_gradients(q, k, v, o, lse, do, causal=False, *rest):
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
    return torch.cat([g.flatten() for g in torch.autograd.grad(out, leaves, do)])


EXERCISES = [
    Exercise("00_getting_started", "test_silu_mul_correct", "silu_mul",
             lambda x, y: F.silu(x) * y, lambda x, y: matmul.naive_matmul(x[None], y[:, None])),
    Exercise("01_naive_matmul", "test_naive_matmul_correct", "naive_matmul",
             lambda a, b, *rest: a @ b, lambda a, b, *rest: matmul.naive_matmul(a, b)),
    Exercise("02_tiled_matmul", "test_tiled_matmul_correct", "tiled_matmul",
             lambda a, b, *rest: torch.mm(a, b), lambda a, b, *rest: matmul.tiled_matmul(a, b)),
    Exercise("02_tiled_matmul", "test_matmul_bias_relu_correct", "matmul_bias_relu",
             lambda a, b, bias, *rest: torch.relu(a @ b + bias),
             lambda a, b, bias, *rest: matmul.tiled_matmul(a, b)),
    Exercise("02_tiled_matmul", "test_bmm_correct", "bmm",
             lambda a, b, *rest: torch.bmm(a, b),
             lambda a, b, *rest: matmul.tiled_matmul(a[0], b[0])),
    Exercise("03_software_pipelining", "test_matmul_correct", "matmul",
             lambda a, b, config=None: torch.matmul(a, b),
             lambda a, b, config=None: pipelined.tuned_matmul(a, b)),
    Exercise("03_software_pipelining", "test_persistent_correct", "persistent_matmul",
             lambda a, b, config=None: torch.matmul(a, b),
             lambda a, b, config=None: pipelined.persistent_matmul(a, b)),
    Exercise("03_software_pipelining", "test_split_k_correct", "split_k_matmul",
             lambda a, b, config=None: torch.matmul(a, b),
             lambda a, b, config=None: split_k.split_k_matmul(a, b, config)),
    Exercise("04_flash_attention", "test_softmax_correct", "softmax",
             lambda x: torch.softmax(x, dim=-1), lambda x: attention.softmax(x)),
    Exercise("04_flash_attention", "test_flash_attention_correct", "flash_attention",
             _sdpa,
             lambda q, k, v, causal=False, *r, **o: attention.flash_attention(q, k, v, causal)),
    Exercise("04_flash_attention", "test_flash_attention_causal", "flash_attention",
             _sdpa,
             lambda q, k, v, causal=False, *r, **o: attention.flash_attention(q, k, v, causal)),
    # the backward and general-forward cells call flash_backward and flash_forward through
    # flat_gradients and output_of (the tensors the checker compares): those are replaced here
    Exercise("04_flash_attention", "test_flash_backward_correct", "flat_gradients",
             _sdpa_gradients,
             lambda q, k, v, o, lse, do, causal=False, *rest: torch.cat([
                 g.flatten() for g in flash_backward.flash_backward(q, k, v, o, lse, do, causal)]),
             flat=True),
    Exercise("04_flash_attention", "test_general_attention_correct", "output_of",
             lambda q, k, v, causal=False, *rest: F.scaled_dot_product_attention(
                 q, k, v, is_causal=causal, enable_gqa=True),
             lambda q, k, v, causal=False, *rest: flash.flash_forward(q, k, v, causal)[0]),
    Exercise("05_convolution", "test_conv2d_correct", "conv2d",
             lambda x, w, stride=1, padding=0, dilation=1:
                 F.conv2d(x, w, None, stride, padding, dilation),
             lambda x, w, stride=1, padding=0, dilation=1:
                 convolution.conv2d(x, w, stride, padding, dilation)),
    Exercise("05_convolution", "test_conv2d_strided", "conv2d",
             lambda x, w, stride=1, padding=0, dilation=1:
                 F.conv2d(x, w, None, stride, padding, dilation),
             lambda x, w, stride=1, padding=0, dilation=1:
                 convolution.conv2d(x, w, stride, padding, dilation)),
    Exercise("05_convolution", "test_depthwise_correct", "depthwise_conv2d",
             lambda x, w, stride=1, padding=0, dilation=1:
                 F.conv2d(x, w, None, stride, padding, dilation, x.shape[1]),
             lambda x, w, stride=1, padding=0, dilation=1:
                 conv_groups.depthwise_conv2d(x, w, stride, padding, dilation)),
    Exercise("05_convolution", "test_packed_correct", "packed_conv2d",
             lambda x, w, stride=1, padding=0, dilation=1, groups=1:
                 F.conv2d(x, w, None, stride, padding, dilation, groups),
             lambda x, w, stride=1, padding=0, dilation=1, groups=1:
                 conv_groups.packed_conv2d(x, w, stride, padding, dilation, groups)),
    Exercise("06_capstone", "test_rmsnorm_correct", "rmsnorm",
             lambda x, weight, eps: llama.rmsnorm_torch(x, weight, eps),
             lambda x, weight, eps: llama_kernels.rmsnorm(x, weight, eps)),
    # rope_ works in place; the test cell checks it through rope_on_a_copy (rope_ on x.clone()),
    # the function the learner's rope_ is called by and the one replaced here
    Exercise("06_capstone", "test_rope_correct", "rope_on_a_copy",
             lambda x, cos, sin: llama.rope_torch(x, cos[:x.shape[1]], sin[:x.shape[1]]),
             lambda x, cos, sin: llama_kernels.rope_(x.clone(), cos, sin)),
    Exercise("06_capstone", "test_swiglu_correct", "swiglu",
             lambda h: llama.swiglu_torch(h), lambda h: llama_kernels.swiglu(h)),
]

SHORTCUTS = [Adversary("library_shortcut", None, SHORTCUT),
             Adversary("reference_kernel", None, REFERENCE)]

pytestmark = [pytest.mark.slow, pytest.mark.beside]


def wrong_version(exercise: Exercise, adversary: Adversary) -> Callable:
    if adversary.name == "library_shortcut":
        return exercise.shortcut
    if adversary.name == "reference_kernel":
        return exercise.reference
    return adversary.make(memo(exercise.lesson, exercise.function))


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_the_honest_solution_passes(exercise):
    """Through the memo, as the adversaries see it: it changes nothing."""
    run_test_cell(exercise.lesson, exercise.cell,
                  {exercise.function: memo(exercise.lesson, exercise.function)})


SHAPED = {"block_multiples_only", "square_only"}
CASES = [(e, a) for e in EXERCISES for a in GENERIC + SHORTCUTS
         if not (e.flat and a.name in SHAPED)]


@pytest.mark.parametrize("exercise, adversary", CASES, ids=[f"{e.id}-{a.name}" for e, a in CASES])
def test_every_wrong_version_fails_the_cell_and_says_why(exercise, adversary):
    with pytest.raises(AssertionError) as failure:
        run_test_cell(exercise.lesson, exercise.cell,
                      {exercise.function: wrong_version(exercise, adversary)})
    assert re.search(adversary.expect, str(failure.value)), str(failure.value)[:2000]


def test_the_namespace_is_what_the_test_cells_need():
    """Every exercise's function is defined by the lesson's marked cells."""
    for exercise in EXERCISES:
        assert callable(lesson_namespace(exercise.lesson)[exercise.function]), exercise.id
