"""grading: the shortcut guard, NaN poisoning, assert_correct, thresholds, and speed checks
without a GPU."""
import tomllib
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import triton

from tests.kernels import double_kernel, triton_double
from tilegym_edu import check, device, grading
from tilegym_edu.grading import LibraryShortcut, NeedsGPU

THRESHOLDS = Path(grading.__file__).with_name("thresholds.toml")

interpreter_only = pytest.mark.skipif(device.ON_GPU,
                                      reason="tests interpreter mode; a GPU is visible")




def triton_double_first_half(x):
    """Launches too few programs: the tail of ``out`` is never written."""
    out = torch.empty_like(x)
    double_kernel[(1,)](x, out, x.numel(), BLOCK=1024)
    return out


def reference(x):
    return 2 * x


def make_inputs(case, generator):
    return (check.random_tensor(case["shape"], case["dtype"], generator),)


CASES = [{"shape": (3000,), "dtype": torch.float32}]


# guarded_call ------------------------------------------------------------------------------------

def test_a_triton_kernel_runs_under_the_guard():
    x = torch.randn(3000)
    assert torch.equal(grading.guarded_call(triton_double, (x,)), 2 * x)


@pytest.mark.parametrize("op", [
    lambda a: torch.empty(4, 4), lambda a: torch.zeros(3, dtype=torch.int64),
    lambda a: a.view(16), lambda a: a.reshape(2, 8), lambda a: a.t().contiguous(),
    lambda a: a[1:, :2], lambda a: a.clone(), lambda a: torch.empty(4, 4).copy_(a),
    lambda a: a.to(torch.float16), lambda a: a.unsqueeze(0).expand(3, 4, 4),
    lambda a: torch.full((2,), 3.0), lambda a: a.new_zeros(3).fill_(1.0),
], ids=["empty", "zeros", "view", "reshape", "t-contiguous", "slice", "clone", "copy_", "to",
        "expand", "full", "new_zeros-fill_"])
def test_allocation_views_and_copies_are_allowed(op):
    a = torch.randn(4, 4)
    assert isinstance(grading.guarded_call(op, (a,)), torch.Tensor)


@pytest.mark.parametrize("shortcut, ops", [
    (lambda a, b: torch.matmul(a, b), {"mm"}),
    (lambda a, b: a @ b, {"mm"}),
    (lambda a, b: torch.mm(a, b), {"mm"}),
    (lambda a, b: torch.bmm(a[None], b[None]), {"bmm"}),
    (lambda a, b: torch.addmm(a, a, b), {"addmm"}),
    (lambda a, b: F.linear(a, b), {"mm", "addmm", "linear"}),
    (lambda a, b: F.conv2d(a[None, None], b[None, None]), {"convolution", "conv2d"}),
    (lambda a, b: F.scaled_dot_product_attention(a[None], b[None], b[None]), None),
    (lambda a, b: torch.sigmoid(a), {"sigmoid"}),
    (lambda a, b: a * b, {"mul"}),
    (lambda a, b: torch.einsum("ij,jk->ik", a, b), {"bmm", "mm", "mul"}),
], ids=["matmul", "@", "mm", "bmm", "addmm", "linear", "conv2d", "sdpa", "sigmoid", "mul",
        "einsum"])
def test_library_arithmetic_is_a_shortcut(shortcut, ops):
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with pytest.raises(LibraryShortcut) as caught:
        grading.guarded_call(shortcut, (a, b))
    message = str(caught.value)
    op = message.split("torch operation '")[1].split("'")[0]
    assert ops is None or op in ops
    assert "your Triton kernel" in message and "may only allocate, view and copy" in message


def test_allow_lets_an_extra_op_through():
    a = torch.randn(4)
    assert torch.equal(grading.guarded_call(lambda x: x * 2, (a,), allow=("mul",)), a * 2)
    with pytest.raises(LibraryShortcut, match="'add'"):
        grading.guarded_call(lambda x: x + 2, (a,), allow=("mul",))



def test_without_allowances_refuses_inside_what_the_graded_call_allows_around_it():
    """Round 22 of the red team: lesson 06's model may add its residuals, the learner's
    functions it calls may not."""
    a = torch.randn(4)
    strict = grading.without_allowances(lambda x: x + 2)
    with pytest.raises(LibraryShortcut, match="'add'"):
        grading.guarded_call(lambda x: strict(x) + 1, (a,), allow=("add",))
    assert torch.equal(grading.guarded_call(lambda x: x + 1, (a,), allow=("add",)), a + 1)
    copy = grading.without_allowances(lambda x: x.clone())
    assert torch.equal(grading.guarded_call(copy, (a,), allow=("add",)), a)
    assert torch.equal(strict(a), a + 2)            # outside a graded call: as it is
    assert strict.__wrapped__ is not None and strict.__name__ == "<lambda>"


class Deferred:
    """Round 23 of the red team: an op's result whose work happens later, in the lesson's own
    code, where the allowance holds."""

    def __init__(self, x):
        self.x = x

    def view(self, *shape):
        return (self.x + 1).view(*shape)


def test_without_allowances_wants_a_plain_tensor_back():
    a = torch.randn(4)

    def model(x):
        return grading.without_allowances(Deferred)(x).view(2, 2)
    assert torch.equal(model(a), (a + 1).view(2, 2))       # outside a graded call
    with pytest.raises(TypeError, match="returned a Deferred, not a torch.Tensor"):
        grading.guarded_call(model, (a,), allow=("add",))


def test_without_allowances_wants_a_tensor_without_an_autograd_graph():
    """Round 24 of the red team: the graph of an op's output held a generator whose finally
    did the work when the model freed the output, with the model's allowance."""
    strict = grading.without_allowances(lambda x: x.clone())
    a = torch.randn(4, requires_grad=True)
    with pytest.raises(TypeError, match=r"returned a tensor with an autograd graph \(Clone"):
        grading.guarded_call(strict, (a,), allow=("add",))
    with torch.no_grad():
        assert grading.guarded_call(strict, (a,), allow=("add",)).grad_fn is None

@pytest.mark.parametrize("alloc", [
    lambda a: torch.empty(5), lambda a: torch.empty_like(a), lambda a: a.new_empty(3),
    lambda a: torch.empty_strided((2, 2), (1, 2)), lambda a: torch.empty(5, dtype=torch.float16),
], ids=["empty", "empty_like", "new_empty", "empty_strided", "empty-float16"])
def test_float_allocations_come_out_nan(alloc):
    out = grading.guarded_call(alloc, (torch.randn(4),))
    assert out.is_floating_point() and bool(out.isnan().all())


def test_integer_allocations_are_not_touched():
    out = grading.guarded_call(lambda: torch.empty(5, dtype=torch.int32), ())
    assert out.dtype == torch.int32  # left uninitialised: no NaN to put there


def test_outside_a_guarded_call_nothing_is_poisoned_or_forbidden():
    a = torch.randn(4)
    assert torch.equal(a * 2, a + a)
    assert not bool(torch.zeros(3).isnan().any())


# forbidden_in_graded_calls -----------------------------------------------------------------------

@grading.forbidden_in_graded_calls
def course_reference_double(x):
    """The course's own kernel."""
    return triton_double(x)


def test_reference_kernels_work_outside_graded_calls():
    x = torch.randn(100)
    assert torch.equal(course_reference_double(x), 2 * x)


def test_reference_kernels_are_a_shortcut_inside_graded_calls():
    with pytest.raises(LibraryShortcut, match="course_reference_double.*write your own kernel"):
        grading.guarded_call(course_reference_double, (torch.randn(100),))
    assert torch.equal(course_reference_double(torch.ones(3)), torch.full((3,), 2.0))  # reset


def test_forbidden_wrapper_keeps_name_and_doc():
    assert course_reference_double.__name__ == "course_reference_double"
    assert course_reference_double.__doc__ == "The course's own kernel."
    assert course_reference_double.__wrapped__.__name__ == "course_reference_double"


# assert_correct ----------------------------------------------------------------------------------

def test_assert_correct_passes_with_its_largest_error_as_one_line(capsys):
    assert grading.assert_correct(triton_double, reference, make_inputs, CASES,
                                  seeds=(0, 1)) is None
    out = capsys.readouterr().out
    assert out.startswith("largest error ") and "2 checks" in out and out.count("\n") == 1


def _zeros(x):
    return torch.zeros_like(x)


def _float64(x):
    out = torch.empty(x.shape, dtype=torch.float64)
    double_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out


def _shortcut(x):
    return x * 2


@pytest.mark.parametrize("fn, words", [
    (_zeros, "error above the tolerance"),
    (triton_double_first_half, "NaN"),
    (_float64, "dtype float64, expected float32"),
    (_shortcut, "raised LibraryShortcut"),
], ids=["zeros", "unwritten-tail", "wrong-dtype", "shortcut"])
def test_assert_correct_fails_with_count_and_first_case(fn, words):
    with pytest.raises(AssertionError) as caught:
        grading.assert_correct(fn, reference, make_inputs, CASES, seeds=(0, 1, 2))
    message = str(caught.value)
    assert message.startswith("3 of 3 checks failed. "
                              "First: case (shape=(3000,), dtype=float32), seed 0")
    assert words in message and message.count("also:") == 2


def test_assert_correct_names_unwritten_elements():
    with pytest.raises(AssertionError, match=r"first bad element \[1024\].*never wrote"):
        grading.assert_correct(triton_double_first_half, reference, make_inputs, CASES, seeds=(0,))


def test_assert_correct_allow_and_tolerances():
    off = lambda x: x * 2.01  # noqa: E731  (relative error 5e-3)
    with pytest.raises(AssertionError):
        grading.assert_correct(off, reference, make_inputs, CASES, seeds=(0,), allow=("mul",))
    grading.assert_correct(off, reference, make_inputs, CASES, seeds=(0,), allow=("mul",),
                           tolerances={torch.float32: 1e-2})


# thresholds --------------------------------------------------------------------------------------

TABLE = tomllib.loads(THRESHOLDS.read_text())
ROWS = [(lesson, name) for lesson, rows in TABLE.items() for name in rows]


def _scripted_pending(monkeypatch, candidate_us, idle_us):
    """grading._pending_us replaced: the candidate's tries return (own, left) from candidate_us
    in turn, the empty steps in between (0, idle) from idle_us."""
    candidate_us, idle_us = list(candidate_us), list(idle_us)

    def pending(step):
        return (0.0, idle_us.pop(0)) if step() is None else candidate_us.pop(0)
    monkeypatch.setattr(grading, "_pending_us", pending)


def test_work_left_behind_is_measured_against_an_idle_synchronize(monkeypatch):
    # lesson 05's honest conv2d in a notebook's kernel (run 27): 35 µs left after 235 µs of its
    # own, where a synchronize with nothing to wait for takes 30 µs
    _scripted_pending(monkeypatch, [(235.0, 35.0), (234.0, 38.0), (236.0, 36.0)], [30.0] * 3)
    grading.assert_no_work_left_behind(lambda: "y", ())


def test_work_left_on_a_side_stream_fails_and_says_what_to_do(monkeypatch):
    # the whole kernel on a side stream: 5 µs on the current stream, 300 µs left after it
    _scripted_pending(monkeypatch, [(5.0, 300.0), (5.0, 310.0), (6.0, 305.0)], [12.0, 30.0, 11.0])
    with pytest.raises(AssertionError, match=r"still busy 300 µs .* nothing to wait for took 12 µs"
                       r".*another CUDA stream.*wait_stream"):
        grading.assert_no_work_left_behind(lambda: "y", ())


def test_one_slow_synchronize_is_not_work_left_behind(monkeypatch):
    _scripted_pending(monkeypatch, [(100.0, 400.0), (100.0, 14.0), (100.0, 15.0)], [11.0] * 3)
    grading.assert_no_work_left_behind(lambda: "y", ())


def test_threshold_reads_the_table_row():
    limit = grading.threshold("00_getting_started", "silu_mul_bandwidth")
    row = TABLE["00_getting_started"]["silu_mul_bandwidth"]
    assert (limit.lesson, limit.name) == ("00_getting_started", "silu_mul_bandwidth")
    assert (limit.minimum, limit.metric, limit.h200, limit.margin, limit.source) == (
        row["minimum"], row["metric"], row["h200"], row["margin"], row["source"])
    assert 0 < limit.minimum and (limit.h200 == 0.0 or limit.minimum <= limit.h200)


@pytest.mark.parametrize("lesson, name", [("00_getting_started", "nope"), ("99_nope", "x")])
def test_unknown_threshold_is_a_key_error(lesson, name):
    with pytest.raises(KeyError, match=f"no threshold {lesson}.{name}"):
        grading.threshold(lesson, name)


@pytest.mark.parametrize("lesson, name", ROWS)
def test_every_threshold_row_is_complete(lesson, name):
    row = TABLE[lesson][name]
    assert {"metric", "versus", "minimum", "h200", "margin", "source"} <= set(row)
    assert all(isinstance(row[k], str) and row[k] for k in ("metric", "versus", "margin", "source"))
    assert 0 < row["minimum"] and row["h200"] >= 0


@pytest.mark.parametrize("lesson, name", ROWS)
def test_every_minimum_is_at_most_the_h200_figure(lesson, name):
    row = TABLE[lesson][name]
    if row["h200"] == 0.0:
        pytest.skip(f"{lesson}.{name}: h200 = 0.0, not measured on an H200 yet")
    assert row["minimum"] <= row["h200"]
    assert grading.threshold(lesson, name).minimum <= grading.threshold(lesson, name).h200


# speed checks without a GPU ----------------------------------------------------------------------

LIMIT = grading.Threshold("test", "double", 0.6, "your GB/s / copy GB/s", 0.9, "test", "test")


@interpreter_only
def test_require_gpu_raises_needs_gpu():
    with pytest.raises(NeedsGPU, match="the speed cell needs an NVIDIA GPU"):
        grading.require_gpu("the speed cell")


@pytest.mark.parametrize("ratio", [0.6, 0.75, 2.0])
def test_assert_ratio_passes_at_or_above_the_minimum(ratio, capsys):
    assert grading.assert_ratio(ratio, LIMIT) is None
    out = capsys.readouterr().out
    assert out.startswith(f"passed: your GB/s / copy GB/s = {ratio:.2f}, threshold 0.60")
    assert "0.90 on an H200" in out


def test_assert_ratio_fails_below_the_minimum(capsys):
    with pytest.raises(AssertionError,
                       match=r"too slow: your GB/s / copy GB/s = 0\.59, threshold 0\.60"):
        grading.assert_ratio(0.59, LIMIT)
    assert capsys.readouterr().out.startswith("too slow: your GB/s / copy GB/s = 0.59")  # shown too



def test_assert_slowest_ratio_names_every_layer_and_grades_the_slowest(capsys):
    assert grading.assert_slowest_ratio({"a": 0.9, "b": 0.61, "c": 2.0}, LIMIT, "speed") is None
    out = capsys.readouterr().out
    assert "speed: a: 0.90, b: 0.61, c: 2.00" in out
    assert "the slowest layer, b, counts" in out
    assert "passed: your GB/s / copy GB/s = 0.61" in out
    with pytest.raises(AssertionError, match=r"too slow: .* = 0\.59"):
        grading.assert_slowest_ratio({"a": 0.9, "b": 0.59}, LIMIT, "speed")
    assert "the slowest layer, b, counts" in capsys.readouterr().out

@interpreter_only
def test_measure_speed_needs_a_gpu():
    x = torch.randn(8)
    with pytest.raises(NeedsGPU, match="needs an NVIDIA GPU"):
        grading.measure_speed(triton_double, {"base": lambda: x * 2}, [(x,)], reference,
                              torch.float32, bytes=64)


@interpreter_only
def test_assert_bandwidth_fraction_needs_a_gpu():
    x = torch.randn(8)
    with pytest.raises(NeedsGPU, match="your GB/s / copy GB/s needs an NVIDIA GPU"):
        grading.assert_bandwidth_fraction(triton_double, [(x,)], reference, torch.float32,
                                          bytes=64, limit=LIMIT)


@interpreter_only
def test_assert_speedup_needs_a_gpu():
    x = torch.randn(8)
    with pytest.raises(NeedsGPU, match="needs an NVIDIA GPU"):
        grading.assert_speedup(triton_double, reference, [(x,)], reference, torch.float32, LIMIT)


@interpreter_only
def test_copy_baseline_needs_a_gpu():
    with pytest.raises(NeedsGPU, match="needs an NVIDIA GPU"):
        grading.copy_baseline(1024)


def test_shuffling_keeps_the_values_and_moves_them():
    """What the timed replays compute on: the same values (token ids stay token ids), in an
    order nobody could know when the candidate ran."""
    x = torch.arange(1000, dtype=torch.int64)
    view = torch.randn(6, 50)[:, 10:30]          # a strided view is shuffled where it lies
    before = view.clone()
    grading._shuffle_(x, torch.Generator().manual_seed(0))
    grading._shuffle_(view, torch.Generator().manual_seed(0))
    assert (torch.equal(x.sort().values, torch.arange(1000))
            and not torch.equal(x, torch.arange(1000)))
    assert torch.equal(view.flatten().sort().values, before.flatten().sort().values)
    assert not torch.equal(view, before)


def test_graded_seeds_are_the_given_ones_outside_grading_and_unknowable_inside(monkeypatch):
    monkeypatch.delenv(grading.GRADING_ENV, raising=False)
    assert grading.graded_seeds([0, 1, 2]) == (0, 1, 2)
    monkeypatch.setenv(grading.GRADING_ENV, "1")
    first, second = grading.graded_seeds([0, 1, 2]), grading.graded_seeds([0, 1, 2])
    assert first != second and len(set(first)) == 3
    assert [s - first[0] for s in first] == [0, 1, 2]



def test_drawn_cases_are_fixed_outside_grading_and_fresh_inside(monkeypatch):
    """Round 22 of the red team read a formula exercise's fixed hidden cases out of the
    feedback and tabulated them; drawn cases differ from one grading to the next."""
    def draw(rng):
        return rng.randint(0, 10**9)
    monkeypatch.delenv(grading.GRADING_ENV, raising=False)
    assert grading.drawn_cases(draw, 3) == grading.drawn_cases(draw, 3)
    assert len(grading.drawn_cases(draw, 3)) == 3
    monkeypatch.setenv(grading.GRADING_ENV, "1")
    assert grading.drawn_cases(draw, 3) != grading.drawn_cases(draw, 3)


def test_formula_answer_wants_plain_python_and_makes_generators_tuples():
    assert grading.formula_answer(lambda m, n: (m * n, [1.5, None, range(3)]), 2, 3) == (
        6, [1.5, None, range(3)])
    assert grading.formula_answer(lambda n: (i * i for i in range(n)), 3) == (0, 1, 4)


class EqualToAnything:
    """Round 23 of the red team: enum's functional API made a class like this one."""

    def __eq__(self, other):
        return True


class IntLike(int):
    pass


@pytest.mark.parametrize("answer", [EqualToAnything(), IntLike(3), (1, EqualToAnything()),
                                    torch.tensor(3)], ids=["object", "int_subclass", "nested",
                                                           "tensor"])
def test_formula_answer_refuses_any_other_value(answer):
    def worked_out():
        return answer
    with pytest.raises(TypeError, match="your `worked_out` returned a"):
        grading.formula_answer(worked_out)


def test_formula_answer_refuses_counting_traffic_and_pytorch_arithmetic():
    """Round 23 returned what count_traffic measured of the learner's own kernel."""
    from tilegym_edu import traffic
    x = torch.ones(4)
    with pytest.raises(LibraryShortcut, match="counted memory traffic"):
        grading.formula_answer(lambda: traffic.count_traffic(triton_double, x).loaded_bytes)
    with pytest.raises(LibraryShortcut, match="'sum'"):
        grading.formula_answer(lambda: int(x.sum()))
    assert traffic.count_traffic(triton_double, x).loaded_bytes == 16   # outside: counts

def test_tensor_descriptors_run_in_this_interpreter():
    grading.require_tensor_descriptors("the persistent matmul")  # triton here has them: no raise


def test_tensor_descriptors_need_hopper_on_a_gpu(monkeypatch):
    from tilegym_edu import device
    ampere = device.DeviceInfo("NVIDIA A100", (8, 0), 108, 80 * 2**30, 40 * 2**20, "580")
    monkeypatch.setattr(device, "info", lambda index=0: ampere)
    with pytest.raises(grading.NeedsGPU, match="compute capability 9.0 or newer.*A100 is 8.0"):
        grading.require_tensor_descriptors("the persistent matmul")


def test_the_tensors_a_model_argument_holds_are_found_for_the_before_and_after_check():
    """A speed cell checks that a candidate left the tensors of its non-tensor arguments alone
    (zeroed weights would make a reference computed afterwards agree with zeros)."""
    from tilegym_edu.reference.llama import CPU_CONFIG, Llama
    model = Llama(CPU_CONFIG, seed=0)
    held = grading._held_tensors([torch.zeros(3), model, 7, "text", torch.nn.Linear(3, 4)])
    ids = {id(t) for t, _ in held}
    assert id(model.embedding) in ids and id(model.layers[1]["w13"]) in ids and id(model.cos) in ids
    assert len(held) == 3 + 6 * CPU_CONFIG.n_layers + 2 + 2      # the Linear: weight and bias
    assert all(torch.equal(t, copy) and t is not copy for t, copy in held)


def test_held_memory_counts_what_is_still_held_once_per_storage():
    """HeldMemory (lesson 04's streaming check): storage created inside and still alive,
    views counted once; a kept copy counts, a dropped temporary does not; reading values into
    Python is refused."""
    x = torch.ones(4, 8, dtype=torch.float64)       # made outside: not counted
    with grading.HeldMemory() as held:
        kept = [x.clone() for _ in range(3)]
        view = kept[0][:, :2]
        (x * 2).sum()                                 # a temporary, dropped
        assert held.held_bytes() == 3 * x.nbytes
        del kept[1:]
        assert held.held_bytes() == x.nbytes and view.shape == (4, 2)
        with pytest.raises(AssertionError, match="read into Python"):
            float(x[0, 0])


def test_held_memory_counts_a_tensor_made_before_and_written_inside():
    """Round 13: a scratch tensor made in another cell, filled with a copy of every block."""
    scratch = torch.empty(4, 64, dtype=torch.float64)
    block = torch.ones(4, 8, dtype=torch.float64)
    with grading.HeldMemory() as held:
        scratch[:, :8].copy_(block)
        assert held.held_bytes() == scratch.nbytes
