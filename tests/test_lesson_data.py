"""tilegym_edu.lesson_data: the values a lesson defines and its tests read are kept as the lesson
bound them, and a test cell fails, naming them, when learner code changed them by any route
(round 18 of the red team loosened lesson 06's tolerance table through an alias)."""
import math

import pytest
import torch

from tilegym_edu import lesson_data
from tilegym_edu.lesson_data import Kept, LessonDataChanged

LESSON = ["TOLERANCE = {'fp16': 1e-2}\nLAYERS = {'a': {'N': 32}}\nscratch = 1",
          "def checker(x):\n    return x * SCALE\nSCALE = 2.0"]
TESTS = ["ok = run(TOLERANCE, LAYERS['a'])\nassert ok", "checker(3)", "scratch = 2\nscratch"]


@pytest.fixture(autouse=True)
def no_keeper_left():
    """Each Kept made here becomes the process's keeper (grading checks it): none outlives its
    test."""
    yield
    lesson_data._keeper.clear()


def test_protected_are_the_lesson_s_values_its_tests_or_functions_read():
    assert lesson_data.protected_names(LESSON, TESTS) == {"TOLERANCE", "LAYERS", "SCALE"}


def test_a_copy_is_taken_right_after_each_binding_statement():
    source = "TOLERANCE = {\n    'fp16': 1e-2}\nrun_the_learners_model()\nSCALE = 2.0; x = 1"
    assert lesson_data.instrumented(source, {"TOLERANCE", "SCALE"}).splitlines() == [
        "TOLERANCE = {", "    'fp16': 1e-2}", "__tilegym_kept__.keep(('TOLERANCE',))",
        "run_the_learners_model()", "SCALE = 2.0; x = 1", "__tilegym_kept__.keep(('SCALE',))"]
    assert lesson_data.instrumented("print(1)", {"TOLERANCE"}) == "print(1)"


def kept(**values):
    namespace = dict(values)
    keeper = Kept(namespace, values)
    keeper.keep(values)
    return namespace, keeper


@pytest.mark.parametrize("change", [
    lambda ns: ns["TOLERANCE"].__ior__({"fp16": 1e30}),            # `alias |= {...}`
    lambda ns: ns["LAYERS"]["a"].__setitem__("N", 1),               # a nested alias
    lambda ns: ns["WEIGHTS"].mul_(0),                               # a tensor in place
    lambda ns: ns["MODEL"].weight.data.zero_(),                     # a module's weights
    lambda ns: ns.__setitem__("SCALE", 3.0),                        # rebound
    lambda ns: ns["SHAPES"].clear(),
], ids=["alias", "nested", "tensor", "module", "rebound", "emptied"])
def test_a_changed_value_fails_the_check_and_is_named(change):
    namespace, keeper = kept(TOLERANCE={"fp16": 1e-2}, LAYERS={"a": {"N": 32}},
                             WEIGHTS=torch.ones(3), MODEL=torch.nn.Linear(2, 2), SCALE=2.0,
                             SHAPES=[(1, 2)])
    keeper.check()
    change(namespace)
    with pytest.raises(LessonDataChanged, match=r"your code changed `\w+`, which the lesson"):
        keeper.check()


def test_values_left_alone_pass_nan_and_objects_without_equality_included():
    nan = torch.tensor([math.nan, 1.0])
    namespace, keeper = kept(T=nan, F=math.nan, STREAM=object(), GEN=torch.Generator(),
                             DEVICE=torch.device("cpu"), DTYPES=(torch.float16,))
    keeper.check()
    assert keeper.differing() == []


def test_a_value_the_lesson_binds_again_is_kept_as_bound_again():
    namespace, keeper = kept(TOLERANCE={"fp16": 1e-2})
    namespace["TOLERANCE"] = {"fp16": 5e-2}
    keeper.keep(["TOLERANCE"])
    keeper.check()


def test_the_grading_functions_check_the_keeper_as_they_finish():
    """A value changed during a check and put back after it (by a callback at the end of the
    cell, say) is caught by the check the grading functions make as they finish."""
    from tilegym_edu import grading
    namespace, keeper = kept(TOLERANCE={torch.float32: 1e-6})

    def loosens(x):
        namespace["TOLERANCE"][torch.float32] = 1e30
        return torch.zeros_like(x)

    with pytest.raises(LessonDataChanged, match="`TOLERANCE`"):
        grading.assert_correct(loosens, lambda x: x + 1,
                               lambda case, g: (torch.randn(4, generator=g),),
                               [{"dtype": torch.float32}], seeds=(0,),
                               tolerances=namespace["TOLERANCE"])
