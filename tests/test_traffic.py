"""traffic: bytes loaded and stored by Triton kernels, counted in the interpreter."""
from dataclasses import astuple

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.jit import JITFunction

from tests.kernels import double_kernel, language_changes, language_snapshot, triton_double
from tilegym_edu import compat
from tilegym_edu.reference.matmul import naive_matmul, tiled_matmul
from tilegym_edu.traffic import Traffic, count_traffic

pytestmark = pytest.mark.beside


def test_an_elementwise_kernel_loads_and_stores_each_element_once():
    x = torch.randn(3000)
    traffic = count_traffic(triton_double, x)
    assert traffic == Traffic(loaded_bytes=3000 * 4, stored_bytes=3000 * 4, programs=3, launches=1,
                              per_launch=traffic.per_launch)
    assert traffic.total_bytes == 2 * 3000 * 4


def test_masked_off_lanes_move_nothing_and_dtype_sets_the_width():
    x = torch.randn(10, dtype=torch.float16)                 # one program of 1024 lanes
    assert count_traffic(triton_double, x).loaded_bytes == 10 * 2


def test_every_launch_of_a_wrapper_is_counted():
    x = torch.randn(100)
    traffic = count_traffic(lambda: triton_double(triton_double(x)))
    assert (traffic.launches, traffic.loaded_bytes, traffic.stored_bytes) == (2, 800, 800)


def test_tensor_descriptor_loads_count_as_pointer_loads_do(monkeypatch):
    """A kernel cannot hide its traffic behind TMA: the general attention's decode step moves
    the same bytes whether k and v come by descriptors or by pointers (reference/flash.py)."""
    from tilegym_edu.reference import flash
    from tilegym_edu.tune import Config

    generator = torch.Generator().manual_seed(0)
    q = torch.randn(1, 8, 1, 32, generator=generator).half()
    k, v = (torch.randn(1, 2, 64, 32, generator=generator).half() for _ in "kv")
    config = Config(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=1)
    counted = {}
    for path, first_block_d in (("pointers", 1024), ("descriptors", 16)):
        monkeypatch.setattr(flash, "DESCRIPTORS_FROM_BLOCK_D", first_block_d)
        counted[path] = count_traffic(lambda: flash.flash_forward(q, k, v, True, config=config))
    moved = {path: (c.loaded_bytes, c.stored_bytes,
                    [astuple(launch)[:5] for launch in c.per_launch])
             for path, c in counted.items()}   # what they hold differs: other code
    assert moved["descriptors"] == moved["pointers"]
    assert counted["pointers"].loaded_bytes >= q.nbytes + k.nbytes + v.nbytes


def test_naive_matmul_loads_a_row_and_a_column_per_output():
    a, b = torch.randn(5, 33), torch.randn(33, 7)
    traffic = count_traffic(naive_matmul, a, b)
    assert traffic.loaded_bytes == 2 * 5 * 7 * 33 * 4
    assert traffic.stored_bytes == 5 * 7 * 4 and traffic.programs == 35


def test_tiled_matmul_loads_each_tile_once_per_program():
    M = N = K = 64
    a, b = torch.randn(M, K), torch.randn(K, N)
    traffic = count_traffic(tiled_matmul, a, b, 32, 32, 16)
    assert traffic.loaded_bytes == 4 * (M * K * (N // 32) + K * N * (M // 32))
    assert traffic.stored_bytes == M * N * 4


def test_kernels_built_for_a_gpu_are_counted_through_the_interpreter():
    """On a GPU, kernels are JITFunctions; counting runs them in the interpreter instead."""
    gpu_kernel = JITFunction(double_kernel.fn)
    x, out = torch.randn(2000), torch.empty(2000)
    traffic = count_traffic(
        lambda: gpu_kernel[(triton.cdiv(2000, 1024),)](x, out, 2000, BLOCK=1024))
    assert traffic.loaded_bytes == 8000 and torch.equal(out, 2 * x)
    assert JITFunction.run is not None and "interpreted" not in JITFunction.run.__name__


def test_patch_interpreter_is_idempotent():
    from triton.runtime import interpreter
    compat.patch_interpreter()
    first = getattr(interpreter, "_patch_lang_tensor", None)
    compat.patch_interpreter()
    assert getattr(interpreter, "_patch_lang_tensor", None) is first


def test_counting_leaves_triton_language_as_it_found_it():
    """The interpreter patches triton.language while kernels run; on a GPU a leftover patch
    breaks every kernel compiled later, so counting must restore all of it."""
    before = language_snapshot()
    gpu_kernel = JITFunction(double_kernel.fn)
    x, out = torch.randn(100), torch.empty(100)
    count_traffic(lambda: gpu_kernel[(1,)](x, out, 100, BLOCK=1024))
    count_traffic(naive_matmul, torch.randn(3, 70), torch.randn(70, 2))   # tl.sum, nested calls
    assert not language_changes(before)


@triton.jit
def _read_by_atomic_add_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    seen = tl.atomic_add(x_ptr + offsets, tl.zeros((BLOCK,), tl.float32), mask=mask)
    tl.store(out_ptr + offsets, seen * 2, mask=mask)


def test_atomics_count_as_a_load_and_a_store_of_each_element():
    """Round 7 of the red team (2026-12-05) read a matmul's inputs with tl.atomic_add(p, 0),
    which moved nothing by the count, and passed a load budget."""
    x = torch.randn(10)
    out = torch.empty_like(x)
    counted = count_traffic(lambda: _read_by_atomic_add_kernel[(1,)](x, out, 10, BLOCK=16))
    assert torch.equal(out, x * 2)
    assert (counted.loaded_bytes, counted.stored_bytes) == (40, 40 + 40)   # the atomic's write too


def test_a_kernel_given_a_python_container_is_not_counted():
    """A dict passed to a kernel could keep what one program loaded for the next (round 8)."""
    import pytest
    with pytest.raises(Exception, match="argument `.*` is a dict"):
        count_traffic(lambda: _read_by_atomic_add_kernel[(1,)](torch.zeros(4), {}, 4, BLOCK=4))


@triton.jit
def _kernel_with_a_dict_default(x_ptr, n, BLOCK: tl.constexpr, TILES={}):  # noqa: B006
    offsets = tl.arange(0, BLOCK)
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


def test_a_kernel_with_a_python_container_as_default_or_in_a_tuple_is_not_counted():
    """Round 11 kept tiles in a dict that was the kernel's own default argument; a tuple holding
    a list would do the same."""
    import pytest
    with pytest.raises(Exception, match="argument `TILES` is a dict"):
        count_traffic(lambda: _kernel_with_a_dict_default[(1,)](torch.zeros(4), 4, BLOCK=4))
    with pytest.raises(Exception, match="argument `.*` is a list"):
        count_traffic(lambda: _read_by_atomic_add_kernel[(1,)](torch.zeros(4), ([],), 4,
                                                               BLOCK=4))


def test_pytorch_copies_outside_the_kernels_count_and_views_do_not():
    """A wrapper's clone, copy_ into a buffer, zeros and dtype conversion move memory as a kernel
    does; allocation and views move nothing."""
    x = torch.randn(100)

    def wrapper(x):
        buffer = torch.empty(200)                        # allocation: nothing
        buffer[50:150].view(10, 10).copy_(x.view(10, 10).t())   # views: nothing; copy_ 400/400
        torch.zeros(5)                                   # 20 written
        x.to(torch.float16)                              # 400 read, 200 written
        return triton_double(x.clone())                  # clone: 400 in, 400 out; kernel 400/400

    counted = count_traffic(wrapper, x)
    assert (counted.torch_loaded_bytes, counted.torch_stored_bytes) == (1200, 1020)
    assert (counted.loaded_bytes, counted.stored_bytes) == (1600, 1420)


def test_an_unfolded_matrix_built_with_pytorch_copies_is_charged_for():
    """Round 13 of the red team: im2col written by `as_strided(...).reshape(...)` (a copy) and
    then a Triton kernel over it; counting the kernels alone saw only the kernel's bytes."""
    x = torch.randn(10, 10)
    unfolded = (9 * 9) * 4                                # 3x3 windows of a 5x5 corner, 9 each

    def im2col_then_kernel(x):
        a = x.as_strided((9, 3, 3), (1, 10, 1)).reshape(9, 9)
        return triton_double(a)

    counted = count_traffic(im2col_then_kernel, x)
    assert (counted.torch_loaded_bytes, counted.torch_stored_bytes) == (unfolded, unfolded)
    assert counted.stored_bytes == 2 * unfolded


def test_what_the_interpreter_copies_to_run_a_kernel_is_not_counted_as_pytorch_s():
    x = torch.randn(3000)
    counted = count_traffic(triton_double, x)
    assert (counted.torch_loaded_bytes, counted.torch_stored_bytes) == (0, 0)


def test_each_launch_is_counted_apart_with_its_busiest_program():
    x = torch.randn(3000)
    counted = count_traffic(lambda: triton_double(triton_double(x[:100])))
    assert ([astuple(launch)[:5] for launch in counted.per_launch]
            == [("double_kernel", 1, 400, 400, 400)] * 2)
    one = count_traffic(triton_double, x).per_launch
    assert [astuple(launch)[:5] for launch in one] == [("double_kernel", 3, 12000, 12000, 1024 * 4)]
    assert one[0].largest_tensor_shape == (1024,)


def test_a_kernel_given_an_object_of_a_notebook_class_is_not_counted():
    """The interpreter calls a tensor-like argument's methods (data_ptr, ...) while it runs the
    kernel, where PyTorch's operations are not counted: an object of a class a notebook cell
    defined (module __main__) is refused."""
    import pytest
    notebook_class = type("LooksLikeATensor", (), {"__module__": "__main__",
                                                   "data_ptr": lambda self: 0})
    with pytest.raises(Exception, match="argument `.*` is a LooksLikeATensor"):
        count_traffic(lambda: _read_by_atomic_add_kernel[(1,)](torch.zeros(4), notebook_class(),
                                                               4, BLOCK=4))


@triton.jit
def _row_softmax_in_column_slices_kernel(x_ptr, y_ptr, COLS: tl.constexpr,
                                         SLICE: tl.constexpr):
    """Round 27 of the red team: one row of COLS values, loaded SLICE columns at a time into a
    (COLS,) tensor, then a plain softmax over all of it (no load holds more than SLICE)."""
    offs = tl.arange(0, COLS)
    row = tl.zeros((COLS,), dtype=tl.float32)
    for start in range(0, COLS, SLICE):
        part = (offs >= start) & (offs < start + SLICE)
        row += tl.load(x_ptr + offs, mask=part, other=0.0)
    row = tl.exp(row - tl.max(row, axis=0))
    tl.store(y_ptr + offs, row / tl.sum(row, axis=0))


def _row_softmax(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    _row_softmax_in_column_slices_kernel[(1,)](x, y, COLS=x.numel(), SLICE=8)
    return y


def test_what_a_program_holds_at_once_is_counted_however_its_loads_are_cut():
    """Rounds 26-28 of the red team kept a whole row of attention scores (loaded in one tl.load,
    in column slices, or as eight separate blocks) and took a plain softmax, within the total
    budget: each launch records the most elements a program held at once, every value it kept
    (views of one buffer once), and assert_traffic's held_at_most bounds it."""
    from tilegym_edu import grading
    x = torch.randn(64)
    counted = grading.assert_traffic(_row_softmax, (x,), lambda x: torch.softmax(x, 0),
                                     torch.float32, what="softmax", stores=64 * 4,
                                     loads_at_most=64 * 4, held_at_most=64 * 32)
    launch = counted.per_launch[0]
    assert launch.largest_tensor_shape == (64,)
    # in bytes: the row and the slice's loaded part (float32), the offsets (int32), the slice's
    # mask (bool) and pointers (8 bytes each), with their temporaries: never all that the loop
    # made (a temporary is freed at once)
    assert 64 * (4 + 4 + 4 + 1 + 8) <= launch.most_held_bytes <= 64 * 32
    with pytest.raises(AssertionError, match=r"a program of _row_softmax_in_column_slices_kernel "
                                             r"held [0-9,]+ bytes at once \(its values, "
                                             r"pointers and masks together; the largest one 64\), "
                                             r"more than the 1,024 the tiles need: hold"):
        grading.assert_traffic(_row_softmax, (x,), lambda x: torch.softmax(x, 0),
                               torch.float32, what="softmax", stores=64 * 4,
                               loads_at_most=64 * 4, held_at_most=1024, held_hint=": hold")


def test_a_program_loading_more_than_its_share_fails_the_traffic_check():
    """Round 28 of the red team met lesson 02's total budget with one program that computed all
    of C: program_loads_at_most bounds what any one program loads."""
    from tilegym_edu import grading
    x = torch.randn(3000)
    grading.assert_traffic(triton_double, (x,), lambda x: x * 2, torch.float32, what="double",
                           stores=3000 * 4, program_loads_at_most=1024 * 4)
    with pytest.raises(AssertionError, match="a program of double_kernel loaded 4,096 bytes, "
                                             "more than the 2,048 one tile of the output needs"):
        grading.assert_traffic(triton_double, (x,), lambda x: x * 2, torch.float32,
                               what="double", stores=3000 * 4, program_loads_at_most=512 * 4)
