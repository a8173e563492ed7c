"""Lesson 04 graded through nbgrader in interpreter mode: the solution earns every point that
does not need a GPU, the blank learner notebook earns none, and each known-wrong submission loses
exactly the points it should, with a reason that says why. (The solution's kernels are the
reference's: tests/test_reference.py.)"""
import pytest

from tests.lesson_checks import (assert_full_marks_but_gpu, assert_loses_exactly, by_exercise,
                                 grade_blank, grade_submissions)
from tests.submissions.lesson04 import SUBMISSIONS

LESSON = "04_flash_attention"
POINTS = {"test_softmax_correct": 3, "test_softmax_bandwidth": 2, "test_softmax_stats": 2,
          "test_flash_attention_correct": 4, "test_flash_attention_causal": 3,
          "test_never_writes_scores": 2, "test_flash_vs_naive": 2, "test_peak_memory": 2,
          "test_flash_vs_best_sdpa": 2}
GPU_ONLY = {"test_softmax_bandwidth", "test_flash_vs_naive", "test_peak_memory",
            "test_flash_vs_best_sdpa"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def reports(course_copy, tmp_path_factory):
    return grade_submissions(LESSON, course_copy, tmp_path_factory, SUBMISSIONS)


def test_solution_earns_every_point_but_the_gpu_ones(reports):
    assert_full_marks_but_gpu(reports["solution"], POINTS, GPU_ONLY)


@pytest.mark.parametrize("submission", SUBMISSIONS, ids=lambda s: s.name)
def test_wrong_submission_loses_exactly_its_points(reports, submission):
    assert_loses_exactly(reports["solution"], reports[submission.name], submission)


def test_blank_learner_notebook_scores_zero_on_every_cell(course_copy):
    report = grade_blank(LESSON, course_copy)
    assert len(report.exercises) == len(POINTS)
    assert {e.status for e in report.exercises} == {"failed", "needs GPU"}


def test_failures_name_the_case(reports):
    reason = by_exercise(reports["flash_without_max"])["test_flash_attention_correct"].reason
    assert "case (batch=" in reason and "scale=32.0" in reason and "seed" in reason
    reason = by_exercise(reports["causal_mask_off_by_one"])["test_flash_attention_causal"].reason
    assert "causal=True" in reason and "first bad element" in reason


def test_block_stream_refuses_a_second_pass_and_kept_blocks():
    """The stream Exercise 3 is graded with: one pass only, and no block kept two requests on
    (checked without autograding: the lesson's solution and helper cells, run here)."""
    import math
    import weakref

    import nbformat
    import torch

    from tests.conftest import REPO
    from tilegym_edu import check

    notebook = nbformat.read(REPO / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in notebook.cells}
    namespace = {"math": math, "torch": torch, "weakref": weakref, "check": check}
    exec(cells["online_softmax_solution"], namespace)
    exec(cells["online_softmax_helpers"], namespace)
    stream = namespace["StreamedBlocks"]
    x = torch.randn(3, 100, dtype=torch.float64)

    m, l = namespace["softmax_stats"](stream(x, 16))
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
