"""kernel_bounds: in Triton's interpreter a launch touches only its own tensors (round 15 of the
red team hid copies in a tensor passed as an integer address, built an im2col matrix with a
tensor passed as a constexpr, and launched a kernel from inside a kernel)."""
import pytest
import torch
import triton
import triton.language as tl

from tests.kernels import triton_double
from tilegym_edu import kernel_bounds

pytestmark = pytest.mark.beside


@pytest.fixture(autouse=True)
def confined():
    kernel_bounds.confine()


@triton.jit
def _copy_through_an_address(x_ptr, address, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    hidden = address.to(tl.pointer_type(tl.float32))
    tl.store(hidden + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


@triton.jit
def _copy_in_python(x, out, X: tl.constexpr):
    put = X.zero_
    put()


@triton.jit
def _launches_another(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    _copy_through_an_address[(1,)](x_ptr, 0, n, BLOCK=BLOCK)


def test_a_kernel_within_its_tensors_runs():
    x = torch.randn(3000)
    assert torch.equal(triton_double(x), 2 * x)


def test_a_store_through_an_address_made_from_an_integer_is_refused():
    x, hidden = torch.randn(16), torch.zeros(16)
    with pytest.raises(Exception, match="kernel `_copy_through_an_address` stored to address "
                                        ".* outside every tensor passed to it"):
        _copy_through_an_address[(1,)](x, hidden.data_ptr(), 16, BLOCK=16)
    assert torch.equal(hidden, torch.zeros(16))


def test_a_tensor_given_as_a_constexpr_is_refused():
    x = torch.randn(4)
    with pytest.raises(Exception, match="argument `X` is a tensor given as a tl.constexpr"):
        _copy_in_python[(1,)](x, x, X=x)
    assert x.abs().sum() > 0


def test_a_kernel_launched_from_a_kernel_is_refused():
    x = torch.randn(4)
    with pytest.raises(Exception, match="launched `_copy_through_an_address` from inside"):
        _launches_another[(1,)](x, x, 4, BLOCK=4)


@triton.jit
def _calls_its_argument(x_ptr, WORK: tl.constexpr):
    WORK()


def test_a_function_given_to_a_kernel_is_refused():
    """Round 16: the kernel called a function it was given, which ran PyTorch's copies (or kept
    loaded values in a dict) in the middle of the launch."""
    ran = []
    with pytest.raises(Exception, match="argument `WORK` is a function"):
        _calls_its_argument[(1,)](torch.zeros(1), WORK=lambda: ran.append(1))
    assert ran == []


@triton.heuristics({"KEEP": lambda args: 0})
@triton.jit
def _holder(KEEP: tl.constexpr):
    pass


def test_a_kernel_given_to_a_kernel_is_refused():
    """Round 17 hid a Python function in a @triton.heuristics kernel's `values` and passed that
    kernel, which the receiving kernel's body then called."""
    with pytest.raises(Exception, match="argument `WORK` is a Heuristics"):
        _calls_its_argument[(1,)](torch.zeros(1), WORK=_holder)


KEPT = []   # a list a kernel could keep tiles in between programs (round 19)
SCALE = tl.constexpr(2)


@triton.jit
def _keeps_in_a_global_list(x_ptr, n, BLOCK: tl.constexpr):
    box = KEPT
    box += [tl.load(x_ptr + tl.arange(0, BLOCK), mask=tl.arange(0, BLOCK) < n)]


@triton.jit
def _calls_pytorch(x_ptr):
    torch.ones(1)


@triton.jit
def _scales(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) * SCALE,
             mask=offsets < n)


def test_a_kernel_reading_a_global_list_is_refused_before_it_runs():
    refused = "`_keeps_in_a_global_list` reads the global `KEPT`, a list"
    with pytest.raises(Exception, match=refused):
        _keeps_in_a_global_list[(1,)](torch.randn(4), 4, BLOCK=4)
    assert KEPT == []


def test_a_pytorch_operation_while_the_programs_run_is_refused_and_the_mode_is_left():
    with pytest.raises(Exception, match="`_calls_pytorch` ran the PyTorch operation `aten.ones"):
        _calls_pytorch[(1,)](torch.randn(4))
    x = torch.randn(4)
    assert torch.equal(x + 0, x), "PyTorch works again after the refused launch"


def test_globals_of_a_kind_a_kernel_may_read_run():
    x = torch.ones(8)
    _scales[(1,)](x, 8, BLOCK=8)
    assert torch.equal(x, torch.full((8,), 2.0))


def test_what_a_grid_function_puts_in_its_arguments_does_not_reach_the_kernel():
    """Round 21: the interpreter handed the grid function the very dict of (checked) arguments
    it then launched with, and a grid function put a Python list there for the kernel."""
    x = torch.ones(8)

    def grid(meta):
        meta["x_ptr"] = [1, 2, 3]
        return (1,)

    _scales[grid](x, 8, BLOCK=8)
    assert torch.equal(x, torch.full((8,), 2.0))
