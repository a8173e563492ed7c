"""Lesson 04: what is particular to it (what every lesson is checked for, graded through nbgrader
in interpreter mode, is tests/test_lessons.py): the stream Exercise 3 is graded with."""
import math
import weakref

import pytest
import torch

from tests.lesson_checks import solution_cells
from tilegym_edu import check

LESSON = "04_flash_attention"


def test_block_stream_refuses_a_second_pass_and_kept_blocks():
    """The stream Exercise 3 is graded with: one pass only, and no block kept two requests on
    (checked without autograding: the lesson's solution and helper cells, run here)."""
    cells = solution_cells(LESSON)
    namespace = {"math": math, "torch": torch, "weakref": weakref, "check": check}
    exec(cells["online_softmax_solution"], namespace)
    exec(cells["online_softmax_helpers"], namespace)
    stream = namespace["StreamedBlocks"]
    x = torch.randn(3, 100, dtype=torch.float64)

    m, total = namespace["softmax_stats"](stream(x, 16))
    assert torch.equal(m, x.amax(dim=1))

    def two_passes(blocks):
        m = torch.stack([b.amax(dim=1) for b in blocks]).amax(dim=0)
        return m, sum(torch.exp(b - m[:, None]).sum(dim=1) for b in blocks)

    def keeps_blocks(blocks):
        x = torch.cat(list(blocks), dim=1)
        return x.amax(dim=1), torch.exp(x - x.amax(dim=1)[:, None]).sum(dim=1)

    with pytest.raises(AssertionError, match="iterated a second time"):
        two_passes(stream(x, 16))
    with pytest.raises(AssertionError, match="block 0 was still referenced when block 2"):
        keeps_blocks(stream(x, 16))


def test_backward_definition_is_the_gradient_of_attention():
    """The formulas Exercise 8 is graded against (backward_definition, from the o and lse that
    make_backward_inputs computes) give autograd's gradients of the float64 definition."""
    cells = solution_cells(LESSON)
    namespace = {}
    exec(cells["setup"], namespace)

    def not_here(*args):  # the helper cells' own demo checks call the kernels: not tested here
        raise NotImplementedError
    namespace.update(flash_attention=not_here, flash_backward=not_here)
    for grade_id in ("attention_reference", "attention_helpers", "backward_helpers"):
        exec(cells[grade_id], namespace)
    for causal in (False, True):
        case = {"batch": 2, "heads": 2, "seq": 23, "head_dim": 16, "dtype": torch.float64,
                "causal": causal}
        q, k, v, o, lse, do, *_ = namespace["make_backward_inputs"](
            case, torch.Generator().manual_seed(5))
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        out = namespace["attention_reference"](*leaves, causal)
        expected = torch.cat([g.flatten() for g in torch.autograd.grad(out, leaves, do)])
        torch.testing.assert_close(out, o)
        # lse is float32, as the kernels take it: agreement to its precision
        torch.testing.assert_close(
            namespace["backward_definition"](q, k, v, o, lse.double(), do, causal), expected,
            rtol=1e-5, atol=1e-6)
