"""The adversarial cases only a GPU can show (tests/test_adversarial.py has the rest): work on
a side stream the timer cannot see, an allocation larger than the GPU, and a kernel that
crashes the CUDA context with an illegal address. Each fails what it should with a message
that says what happened, and the grading of everything else carries on."""
import pytest
import torch

from tests.adversaries import lesson_namespace, run_test_cell
from tests.submissions import Submission
from tilegym_edu import autograde

LESSON = "00_getting_started"


def honest_silu_mul():
    return lesson_namespace(LESSON)["silu_mul"]


def test_work_on_a_side_stream_fails_the_speed_cell_and_says_so():
    honest, side = honest_silu_mul(), torch.cuda.Stream()

    def on_a_side_stream(x, y):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            return honest(x, y)

    with pytest.raises(AssertionError, match="ran work on another CUDA stream"):
        run_test_cell(LESSON, "test_silu_mul_bandwidth", {"silu_mul": on_a_side_stream})
    run_test_cell(LESSON, "test_silu_mul_bandwidth", {"silu_mul": honest})


def test_a_side_stream_that_is_joined_is_fine():
    honest, side = honest_silu_mul(), torch.cuda.Stream()

    def joined(x, y):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out = honest(x, y)
        torch.cuda.current_stream().wait_stream(side)
        return out

    run_test_cell(LESSON, "test_silu_mul_bandwidth", {"silu_mul": joined})


def test_an_allocation_larger_than_the_gpu_fails_only_its_own_cell():
    honest = honest_silu_mul()
    too_much = 2 * torch.cuda.get_device_properties(0).total_memory

    def greedy(x, y):
        torch.empty(too_much, dtype=torch.uint8, device=x.device)
        return honest(x, y)

    with pytest.raises(AssertionError, match="OutOfMemoryError.*more GPU memory than is free"):
        run_test_cell(LESSON, "test_silu_mul_correct", {"silu_mul": greedy})
    run_test_cell(LESSON, "test_silu_mul_correct", {"silu_mul": honest})  # the GPU is fine


#: the store lands 2^40 elements past the output: an illegal address on any GPU
ILLEGAL_ADDRESS = Submission(
    "illegal_address",
    {"silu_mul_solution": ("tl.store(out_ptr + offsets, ",
                           "tl.store(out_ptr + offsets + (1 << 40), ")},
    loses=("test_silu_mul_correct", "test_silu_mul_bandwidth"), reason="illegal memory access")


def test_an_illegal_address_loses_the_gpu_cells_says_why_and_the_next_grading_is_whole(
        course_copy, tmp_path):
    solution = course_copy / "solutions" / LESSON / f"{LESSON}.ipynb"
    crashed = autograde.grade(LESSON, ILLEGAL_ADDRESS.write(solution, tmp_path / "crash"),
                           root=course_copy, student="gpu_illegal_address")
    print(crashed.format_table())
    results = {e.exercise: e for e in crashed.exercises}
    correct = results["test_silu_mul_correct"]
    assert correct.points == 0 and "illegal memory access" in correct.reason
    assert "outside its tensors" in correct.reason  # what it means and what to do
    assert results["test_silu_mul_bandwidth"].points == 0
    assert results["test_bytes"].points == results["test_bytes"].max_points  # no GPU needed
    after = autograde.grade(LESSON, solution.parent, root=course_copy, student="gpu_after_crash")
    assert after.points == after.max_points, after.format_table()


def guard_is_on() -> bool:
    """What a cheating candidate would ask: is this call checked? (Arithmetic raises then.)"""
    try:
        torch.ones(1, device="cuda") + 1
    except Exception:  # noqa: BLE001 - LibraryShortcut
        return True
    return False


def test_a_candidate_that_is_slow_only_when_checked_is_timed_slow():
    """Family 4 (the timed runs are not the graded run): honest work four times over when the
    guard is on, once when it is off. The timed runs replay the guarded call, so it is slow
    there too, and the cell fails for speed; the honest function passes the same cell."""
    honest = honest_silu_mul()

    def two_faced(x, y):
        for _ in range(3 if guard_is_on() else 0):
            honest(x, y)
        return honest(x, y)

    with pytest.raises(AssertionError, match="too slow"):
        run_test_cell(LESSON, "test_silu_mul_bandwidth", {"silu_mul": two_faced})


def test_a_candidate_that_replays_a_remembered_answer_fails_the_timed_output_check():
    """A memo keyed by the inputs' addresses: honest the first time it sees an input, a copy of
    the answer after that. The timed replays run on the same buffers with their elements
    shuffled, so the remembered answers are wrong there."""
    honest, memo = honest_silu_mul(), {}

    def remembers(x, y):
        key = (x.data_ptr(), y.data_ptr())
        if key not in memo:
            memo[key] = honest(x, y)
        out = torch.empty_like(x)
        out.copy_(memo[key])
        return out

    with pytest.raises(AssertionError, match="output of a timed run .* is wrong"):
        run_test_cell(LESSON, "test_silu_mul_bandwidth", {"silu_mul": remembers})


def test_a_candidate_that_synchronizes_cannot_be_timed_and_is_told_why():
    honest = honest_silu_mul()

    def synchronizes(x, y):
        out = honest(x, y)
        torch.cuda.synchronize()
        return out

    with pytest.raises(AssertionError, match="could not be timed: capturing it in a CUDA graph"):
        run_test_cell(LESSON, "test_silu_mul_bandwidth", {"silu_mul": synchronizes})
    torch.randn(8, device="cuda")          # the failed capture left the random generator usable
    run_test_cell(LESSON, "test_silu_mul_bandwidth", {"silu_mul": honest})


def test_a_candidate_that_zeroes_its_input_and_returns_zeros_fails():
    """silu(x) * 0 = 0: zero y once, then return zeros without computing. The timed replays
    run on the inputs as they were before the candidate first saw them (shuffled), so the
    zeros are wrong there."""
    honest, state = honest_silu_mul(), {"calls": 0}

    def zeroes(x, y):
        state["calls"] += 1
        if state["calls"] == 1:
            return honest(x, y)          # the guarded first call is honest
        y.zero_()
        out = torch.empty_like(x)
        out.zero_()
        return out

    with pytest.raises(AssertionError, match="output of a timed run .* is wrong"):
        run_test_cell(LESSON, "test_silu_mul_bandwidth", {"silu_mul": zeroes})


@pytest.fixture
def triton_refused(monkeypatch):
    """grading.refuse_triton_in_graded_calls("cuTile"), as lesson 07's setup cell calls it, for
    this test only: the launch hook goes back to Triton's own afterwards."""
    import triton

    from tilegym_edu import grading
    if hasattr(triton, "knobs"):
        chain = triton.knobs.runtime.launch_enter_hook
        monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", type(chain)())
    else:
        monkeypatch.setattr(triton.compiler.CompiledKernel, "launch_enter_hook", None)
    grading.refuse_triton_in_graded_calls("cuTile")


def test_a_triton_kernel_where_the_lesson_grades_cutile_loses_the_cell(triton_refused):
    """Lesson 07 grades cuTile kernels: lesson 00's Triton silu_mul, pasted there, loses the
    correctness cell and is told why; the same kernel launched by the grader (a baseline, outside
    a graded call) still runs, and so does a compiled kernel relaunched through its own
    ``[grid]`` outside, but not inside, a graded call."""
    import triton
    import triton.language as tl

    from tilegym_edu import grading
    honest = honest_silu_mul()
    refused = "LibraryShortcut: the graded call launched the Triton kernel .*cuTile"
    with pytest.raises(AssertionError, match=refused):
        run_test_cell(LESSON, "test_silu_mul_correct", {"silu_mul": honest})

    @triton.jit
    def double(x_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) * 2,
                 mask=offsets < n)

    x = torch.ones(1000, device="cuda")
    compiled = double[(1,)](x, x.numel(), BLOCK=1024)      # outside: runs
    compiled[(1, 1, 1)](x, x.numel(), 1024)   # a compiled kernel takes every argument
    torch.cuda.synchronize()
    assert torch.equal(x, torch.full_like(x, 4))
    with pytest.raises(grading.LibraryShortcut, match="'double'"):
        grading.guarded_call(lambda t: compiled[(1, 1, 1)](t, t.numel(), 1024), (x,))
