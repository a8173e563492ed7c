"""check: relative error, the first bad element, output comparison and the case-by-seed checker."""
import pytest
import torch

from tests.kernels import triton_double
from tilegym_edu import check, device




def reference(x):
    return 2 * x


def make_inputs(case, generator):
    return (check.random_tensor(case["shape"], case["dtype"], generator),)


CASES = [{"shape": (3000,), "dtype": torch.float32}, {"shape": (7, 5), "dtype": torch.float16}]


# relative_error / first_bad_index ----------------------------------------------------------------

def test_relative_error_is_the_norm_ratio():
    ref = torch.tensor([3.0, 4.0])
    assert check.relative_error(ref, ref) == 0.0
    assert check.relative_error(torch.tensor([3.0, 4.5]), ref) == pytest.approx(0.1)


def test_relative_error_against_zeros_is_the_plain_norm():
    assert check.relative_error(torch.tensor([3.0, 4.0]), torch.zeros(2)) == pytest.approx(5.0)


def test_first_bad_index_finds_the_first_nan():
    ref = torch.ones(10)
    out = ref.clone()
    out[[4, 7]] = float("nan")
    out[2] = 1.5
    assert check.first_bad_index(out, ref, tol=1.0) == (4,)  # 1.5 is within tol 1.0; NaN is not


def test_first_bad_index_finds_the_first_big_error_in_2d():
    ref = torch.ones(3, 4)
    out = ref.clone()
    out[1, 2], out[2, 0] = 5.0, 9.0
    where = check.first_bad_index(out, ref, tol=1e-3)
    assert where == (1, 2) and all(type(i) is int for i in where)


def test_first_bad_index_without_a_standout_gives_the_largest_error():
    ref = torch.ones(2, 3)
    out = ref + torch.tensor([[0.0, 1e-4, 0.0], [3e-4, 0.0, 0.0]])
    assert check.first_bad_index(out, ref, tol=1.0) == (1, 0)


def test_first_bad_index_of_a_scalar_is_empty():
    assert check.first_bad_index(torch.tensor(float("nan")), torch.tensor(1.0), 1e-3) == ()


# compare_output ----------------------------------------------------------------------------------

def test_correct_output_passes():
    ref = torch.randn(100, dtype=torch.float64)
    passed, error, message = check.compare_output(ref.float(), ref, torch.float32)
    assert passed and error < 1e-6 and message == ""


@pytest.mark.parametrize("out, dtype, words", [
    (torch.zeros(99), torch.float32, "shape (99,), expected (100,)"),
    (torch.zeros(100, dtype=torch.float16), torch.float32, "dtype float16, expected float32"),
    ([0.0] * 100, torch.float32, "returned list, expected a torch.Tensor"),
    (None, torch.float32, "returned NoneType"),
])
def test_wrong_kind_of_output_fails(out, dtype, words):
    passed, error, message = check.compare_output(out, torch.zeros(100, dtype=torch.float64), dtype)
    assert not passed and error is None and words in message


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_one_non_finite_element_among_many_fails(bad):
    ref = torch.full((10_000,), 1e-20, dtype=torch.float64)  # tiny norm
    out = ref.float()
    out[1234] = bad
    passed, _, message = check.compare_output(out, ref, torch.float32)
    assert not passed and "NaN or inf" in message and "[1234]" in message


def test_nan_is_reported_as_possibly_unwritten():
    ref = torch.ones(8, dtype=torch.float64)
    out = ref.float()
    out[5:] = float("nan")
    _, _, message = check.compare_output(out, ref, torch.float32)
    assert "first bad element [5]" in message and "never wrote" in message


def test_error_above_the_tolerance_fails():
    ref = torch.ones(100, dtype=torch.float64)
    out = ref.float()
    out[42] = 1.5
    passed, error, message = check.compare_output(out, ref, torch.float32)
    assert not passed and error == pytest.approx(0.05)
    assert "above the tolerance 0.003" in message and "[42]" in message
    assert "got 1.5, expected 1" in message


def test_custom_tolerances_override_the_defaults():
    ref = torch.ones(100, dtype=torch.float64)
    out = ref.float()
    out[42] = 1.5  # relative error 0.05
    assert check.compare_output(out, ref, torch.float32, tolerances={torch.float32: 0.1})[0]
    ok16 = ref.half()
    ok16[0] = 1.0 + 2**-8  # 4e-4: within the default float16 tolerance, not a custom 1e-5
    assert check.compare_output(ok16, ref, torch.float16)[0]
    assert not check.compare_output(ok16, ref, torch.float16, tolerances={torch.float16: 1e-5})[0]


def test_empty_output_passes():
    assert check.compare_output(torch.empty(0, 4), torch.empty(0, 4, dtype=torch.float64),
                                torch.float32) == (True, 0.0, "")


def test_integer_output_is_compared_exactly():
    ref = torch.tensor([1, 2, 3])
    assert check.compare_output(ref.clone(), ref, torch.int64)[0]
    assert not check.compare_output(torch.tensor([1, 2, 4]), ref, torch.int64)[0]


# check -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", [triton_double, lambda x: x * 2], ids=["triton", "torch"])
def test_a_correct_function_passes_every_case_and_seed(fn):
    results = check.check(fn, reference, make_inputs, CASES, seeds=(0, 1, 2))
    assert [(r.case, r.seed) for r in results] == [(c, s) for c in CASES for s in (0, 1, 2)]
    assert all(r.passed and r.message == "" and r.error is not None for r in results)


def test_an_exception_is_reported_not_raised():
    def broken(x):
        raise ZeroDivisionError("oops")
    results = check.check(broken, reference, make_inputs, CASES[:1], seeds=(0, 1))
    assert len(results) == 2
    assert all(not r.passed and r.message == "raised ZeroDivisionError: oops" for r in results)


def test_modifying_the_input_fails():
    def in_place(x):
        return x.mul_(2)
    results = check.check(in_place, reference, make_inputs, CASES[:1], seeds=(0,))
    assert not results[0].passed and "modified its input" in results[0].message


def test_a_cached_answer_fails_on_the_next_seed():
    cache = {}

    def cached(x):
        return cache.setdefault("out", x * 2)
    first, second = check.check(cached, reference, make_inputs, CASES[:1], seeds=(0, 1))
    assert first.passed and not second.passed and second.seed == 1


def test_tolerances_reach_the_comparison():
    def slightly_off(x):
        return x * 2.01  # relative error 5e-3
    case = [{"shape": (64,), "dtype": torch.float32}]
    assert not check.check(slightly_off, reference, make_inputs, case, seeds=(0,))[0].passed
    assert check.check(slightly_off, reference, make_inputs, case, seeds=(0,),
                       tolerances={torch.float32: 1e-2})[0].passed


def test_call_runs_the_function():
    seen = []

    def call(fn, args):
        seen.append(args)
        return fn(*args)
    check.check(triton_double, reference, make_inputs, CASES[:1], seeds=(0,), call=call)
    assert len(seen) == 1 and seen[0][0].shape == (3000,)


def test_the_reference_gets_float64_cpu_copies():
    got = []

    def ref(x):
        got.append(x)
        return 2 * x
    check.check(lambda x: x * 2, ref, make_inputs, CASES[1:], seeds=(0,))
    assert got[0].dtype == torch.float64 and got[0].device.type == "cpu"


def test_describe_names_case_seed_and_error():
    bad = check.CaseResult({"shape": (7, 5), "dtype": torch.float16, "mode": "fast"}, 2, False,
                           0.0123, "error above the tolerance 0.003")
    assert bad.describe() == ("case (shape=(7, 5), dtype=float16, mode='fast'), seed 2, "
                              "relative error 0.0123: error above the tolerance 0.003")
    good = check.CaseResult({"n": 4}, 0, True)
    assert good.describe() == "case (n=4), seed 0: passed"


def test_describe_from_a_real_check_names_everything():
    results = check.check(lambda x: x * 3, reference, make_inputs, CASES[:1], seeds=(1,))
    text = results[0].describe()
    assert "shape=(3000,)" in text and "dtype=float32" in text and "seed 1" in text
    assert "relative error 0.5" in text and "above the tolerance" in text


# random_tensor -----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, dtype", [((3, 4), torch.float32), ((5,), torch.float16),
                                          ((2, 1, 3), torch.bfloat16)])
def test_random_tensor_has_the_shape_dtype_and_device(shape, dtype):
    t = check.random_tensor(shape, dtype, torch.Generator().manual_seed(0))
    assert t.shape == shape and t.dtype == dtype and t.device.type == device.DEVICE
    assert bool((t != 0).all())


def test_random_tensor_depends_on_the_seed_only():
    def draw(seed, scale=1.0):
        return check.random_tensor((64,), torch.float32, torch.Generator().manual_seed(seed), scale)
    assert torch.equal(draw(0), draw(0))
    assert not torch.equal(draw(0), draw(1))
    assert torch.allclose(draw(3, scale=10.0), 10 * draw(3))


def test_an_unwritten_exercise_says_what_to_do():
    def placeholder(x):
        raise NotImplementedError()
    [result] = check.check(placeholder, lambda x: x, lambda case, g: (torch.ones(3),),
                     [{"dtype": torch.float32}], seeds=[0])
    assert not result.passed
    assert "not written yet" in result.message and "raise NotImplementedError()" in result.message


@pytest.mark.parametrize("error, hint", [
    (RuntimeError("CUDA error: an illegal memory access was encountered"), "outside its tensors"),
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 TiB"), "more GPU memory"),
    (RuntimeError("out of resource: shared memory, Required: 262176, Hardware limit: 232448"),
     "smaller tiles or fewer stages"),
])
def test_errors_kernels_meet_come_with_what_to_do(error, hint):
    def fails(x):
        raise error
    [result] = check.check(fails, reference, make_inputs, CASES[:1], seeds=(0,))
    assert result.message.startswith(f"raised {type(error).__name__}: ") and hint in result.message


def test_an_unknown_error_is_reported_as_it_is():
    assert check.explain(ValueError("x must be 2-D")) == "raised ValueError: x must be 2-D"


def test_modifying_a_tensor_inside_an_input_object_fails():
    """A model's weights, zeroed by the function, made the reference (computed after the call)
    zeros as well: objects are copied whole before the call, and checked after it."""
    class Layer:
        def __init__(self, weight):
            self.weight = weight

    def make_layer_inputs(case, generator):
        return (check.random_tensor(case["shape"], case["dtype"], generator),
                Layer(check.random_tensor((case["shape"][-1],), case["dtype"], generator)))

    def scaled(x, layer):
        return x * layer.weight

    def zeroes_the_weight(x, layer):
        layer.weight.zero_()
        return torch.zeros_like(x)

    cases = [{"shape": (3, 5), "dtype": torch.float32}]
    assert check.check(scaled, scaled, make_layer_inputs, cases, seeds=(0,))[0].passed
    [result] = check.check(zeroes_the_weight, scaled, make_layer_inputs, cases, seeds=(0,))
    assert not result.passed


def test_the_tensors_an_input_holds_are_found_once_each_in_order():
    a, b = torch.zeros(1), torch.ones(1)

    class Holder:
        def __init__(self):
            self.items, self.again = {"b": b, "a": a}, a
    assert [id(t) for t in check.tensors_in((a, [Holder()], b))] == [id(a), id(b)]


class Note:
    """An object of a class the notebook defined (``__module__`` is ``__main__`` there)."""

    def __repr__(self):
        raise AssertionError("the learner's repr ran")


Note.__module__ = "__main__"


def test_an_error_that_carries_the_notebook_s_object_is_named_without_running_its_repr():
    """Round 25 of the red team: formatting an exception's message ran a dataclass repr that
    read the learner's property, outside the graded call."""
    for error in [ValueError(Note()), ValueError("case", (1, [Note()]))]:
        assert check.explain(error) == ("raised ValueError, with an object of your own class as "
                                        "its message (not shown: raise it with a string)")
    assert check.explain(ValueError("plain", 3)) == "raised ValueError: ('plain', 3)"
