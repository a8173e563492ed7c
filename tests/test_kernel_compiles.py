"""kernel_compiles: a notebook's kernel that Triton's interpreter runs must be one Triton's
compiler takes (round 29 of the red team kept Python values inside kernels, which no count
sees), and may run only the lines the compiler visited for the launch (rounds 30-32 took a
branch the compiler had dropped). The kernels here are made the notebook's by their module
name, "__main__"."""
import pytest
import torch
import triton
import triton.language as tl

from triton.runtime import interpreter

from tilegym_edu import kernel_bounds, kernel_compiles, traffic

pytestmark = pytest.mark.beside


@triton.jit
def _row_softmax_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """A valid kernel with reductions (tl.max, tl.sum: kernels of triton.language's own)."""
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + offs, e / tl.sum(e, axis=0), mask=offs < n)


@triton.jit
def _kept_in_a_python_int_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """Round 29: a value kept as a Python int, which only the interpreter allows."""
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    kept: tl.constexpr = 0
    kept |= int(tl.sum(x, axis=0))
    tl.store(y_ptr + offs, x + kept, mask=offs < n)


@triton.jit
def _values_in_a_growing_tuple_kernel(x_ptr, y_ptr):
    """Loop counters left behind by data-dependent loops, kept in a tuple that grows."""
    kept = ()
    for i in range(2):
        for count in range(tl.load(x_ptr + i)):
            pass
        kept = kept + (count,)
    tl.store(y_ptr, kept[0] + kept[1])


@triton.jit
def _one_overflows_kernel(x_ptr, y_ptr, one):
    """An int argument of 1 is a constant to the compiler: if the interpreter made it an int32
    tensor, `one * 2**31` would overflow there and take the branch the compiler dropped."""
    if one * 2**31 > 0:
        tl.store(y_ptr, tl.load(x_ptr))
    else:
        kept: tl.constexpr = 0
        kept |= int(tl.load(x_ptr))
        tl.store(y_ptr, kept + 100)


@triton.jit
def _one_is_one_kernel(x_ptr, y_ptr, one):
    """Round 31: `is` on an argument of 1 (a tensor's identity in the interpreter)."""
    if one is int(1):  # round 31's `one is 1`, without Python's warning about a literal
        tl.store(y_ptr, tl.load(x_ptr))
    else:
        tl.store(y_ptr, tl.load(x_ptr) + 100)


@triton.jit
def _one_rounds_kernel(x_ptr, y_ptr, one):
    """Round 31: float rounding on an argument of 1 (fp32 in the interpreter's tensor)."""
    if one * 0.1 * 3 != 0.3:
        tl.store(y_ptr, tl.load(x_ptr))
    else:
        tl.store(y_ptr, tl.load(x_ptr) + 100)


@triton.jit
def _one_in_a_tuple_kernel(x_ptr, y_ptr, t):
    """Round 32: the 1 inside a tuple argument is a constant to the compiler too."""
    if t[0] * 2147483647 + t[0] > 0:
        tl.store(y_ptr, tl.load(x_ptr))
    else:
        tl.store(y_ptr, tl.load(x_ptr) + 100)


@triton.jit
def _tells_a_float_kernel(x_ptr, y_ptr, scale):
    """Round 30: a float argument is an fp32 tensor to the compiler, a Python float to the
    interpreter; the branch only the interpreter takes is valid Triton, so it compiles."""
    if isinstance(scale, float):
        tl.store(y_ptr, tl.load(x_ptr) + 100)
    else:
        tl.store(y_ptr, tl.load(x_ptr))


@triton.jit
def _tells_a_float_on_one_line_kernel(x_ptr, y_ptr, scale):
    """Round 30's branch with its body on the line of its test."""
    if isinstance(scale, float): tl.store(y_ptr, tl.load(x_ptr) + 100)  # noqa: E701
    tl.store(y_ptr, tl.load(x_ptr) * 0)


@triton.jit
def _tells_a_float_in_an_expression_kernel(x_ptr, y_ptr, scale):
    """Round 30's branch as a conditional expression."""
    tl.store(y_ptr, tl.load(x_ptr) + 100 if isinstance(scale, float) else tl.load(x_ptr) * 0)


@triton.jit
def _tells_a_float_by_and_kernel(x_ptr, y_ptr, scale):
    """Round 30's branch as the second operand of `and`, which the compiler skips."""
    isinstance(scale, float) and tl.store(y_ptr, tl.load(x_ptr) + 100)


MODE = tl.constexpr(0)


@triton.jit
def _reads_a_global_kernel(x_ptr, y_ptr):
    """Round 32: compiled with MODE 0, then launched with MODE 1, which takes another path."""
    if MODE == 1:
        kept: tl.constexpr = 0
        kept |= int(tl.load(x_ptr))
        tl.store(y_ptr, kept)
    else:
        tl.store(y_ptr, tl.load(x_ptr))


@pytest.fixture
def notebook_kernels(monkeypatch):
    """The kernels above as if a notebook's cells had defined them, in a confined interpreter."""
    kernel_bounds.confine()
    for kernel in (_row_softmax_kernel, _kept_in_a_python_int_kernel,
                   _values_in_a_growing_tuple_kernel, _one_overflows_kernel,
                   _one_is_one_kernel, _one_rounds_kernel, _one_in_a_tuple_kernel,
                   _reads_a_global_kernel, _tells_a_float_kernel,
                   _tells_a_float_on_one_line_kernel, _tells_a_float_in_an_expression_kernel,
                   _tells_a_float_by_and_kernel):
        monkeypatch.setattr(kernel.fn, "__module__", "__main__")
        # the interpreter makes a notebook's kernel anew (kernel_compiles guards its lines)
        monkeypatch.delitem(interpreter.InterpretedFunction.rewritten_fn, kernel.fn,
                            raising=False)


def _softmax(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    _row_softmax_kernel[(1,)](x, y, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
    return y


def test_a_kernel_the_compiler_takes_runs_even_after_runs_that_left_the_language_patched(
        notebook_kernels):
    """An interpreted run of a kernel with a reduction leaves some of triton.language patched
    for the interpreter; the check compiles against the language as it was."""
    x = torch.randn(100)
    torch.testing.assert_close(_softmax(x), torch.softmax(x, 0))
    kernel_compiles._compiled.clear()
    counted = traffic.count_traffic(_softmax, x)
    assert counted.loaded_bytes == 400


def test_a_python_int_kept_in_a_kernel_is_refused_with_the_compiler_s_message(notebook_kernels):
    x = torch.arange(8, dtype=torch.int32)
    with pytest.raises(kernel_compiles.NotCompilable,
                       match=r"kernel `_kept_in_a_python_int_kernel` runs in Triton's interpreter, "
                             r"but Triton's compiler refuses it \(line \d+ of "
                             r"`_kept_in_a_python_int_kernel`, `kept \|= int\(tl.sum\(x, "
                             r"axis=0\)\)`: .*int\(\) argument"):
        _kept_in_a_python_int_kernel[(1,)](x, torch.empty_like(x), 8, BLOCK=8)


def test_loop_counters_kept_in_a_growing_tuple_are_refused(notebook_kernels):
    x = torch.tensor([3, 5], dtype=torch.int32)
    with pytest.raises(kernel_compiles.NotCompilable, match="_values_in_a_growing_tuple_kernel"):
        _values_in_a_growing_tuple_kernel[(1,)](x, torch.zeros(1, dtype=torch.int32))


@pytest.mark.parametrize("kernel", ["_one_overflows_kernel", "_one_is_one_kernel",
                                    "_one_rounds_kernel"])
def test_an_argument_of_1_is_a_constant_in_the_interpreter_as_in_the_compiler(kernel,
                                                                              notebook_kernels):
    """Rounds 30-31 took, in the interpreter, a branch the compiler had dropped (so never
    checked) by a test on an argument of 1: int32 overflow, `is`, fp32 rounding."""
    x, y = torch.tensor([7], dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    globals()[kernel][(1,)](x, y, 1)
    assert y.item() == 7


def test_a_1_inside_a_tuple_argument_is_a_constant_too(notebook_kernels):
    x, y = torch.tensor([7], dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    _one_in_a_tuple_kernel[(1,)](x, y, (1, 2))
    assert y.item() == 7
    with pytest.raises(kernel_bounds.OutOfBounds, match="a tuple holding 1 beside tensors"):
        _one_in_a_tuple_kernel[(1,)](x, y, (1, x))


def test_a_global_the_kernel_reads_is_part_of_what_was_compiled(notebook_kernels, monkeypatch):
    x, y = torch.tensor([7], dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    _reads_a_global_kernel[(1,)](x, y)
    monkeypatch.setitem(globals(), "MODE", tl.constexpr(1))
    with pytest.raises(kernel_compiles.NotCompilable, match="int\\(\\) argument"):
        _reads_a_global_kernel[(1,)](x, y)


def test_a_line_the_compiler_skipped_fails_where_the_interpreter_runs_it(notebook_kernels):
    """The compiler decided `isinstance(scale, float)` False and never visited the branch the
    interpreter then took: the launch fails on that branch's first statement."""
    x, y = torch.tensor([7.0]), torch.zeros(1)
    with pytest.raises(kernel_compiles.NotCompilable,
                       match=r"kernel `_tells_a_float_kernel` ran the code at line \d+, column "
                             r"9 in Triton's interpreter, code Triton's compiler skipped"):
        _tells_a_float_kernel[(1,)](x, y, 0.5)
    assert y.item() == 0, "nothing of the skipped line ran"


@pytest.mark.parametrize("kernel", ["_tells_a_float_on_one_line_kernel",
                                    "_tells_a_float_in_an_expression_kernel",
                                    "_tells_a_float_by_and_kernel"])
def test_code_the_compiler_skipped_on_a_line_it_visited_fails_too(kernel, notebook_kernels):
    """`if C: body` on one line, `a if C else b` and `C and b`: the line was visited (for C),
    the code the interpreter then ran was not."""
    x, y = torch.tensor([7.0]), torch.zeros(1)
    with pytest.raises(kernel_compiles.NotCompilable, match=f"kernel `{kernel}` ran the code"):
        globals()[kernel][(1,)](x, y, 0.5)
    assert y.item() == 0


def test_kernels_of_modules_are_not_compiled_here():
    """The course's own kernels (and these, outside the fixture) are left to their tests."""
    kernel_bounds.confine()
    x, y = torch.tensor([3, 5], dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    _values_in_a_growing_tuple_kernel[(1,)](x, y)
    assert y.item() == 2 + 4
