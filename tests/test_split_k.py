"""reference/split_k.py: split-K against float64 on odd shapes (interpreter), the shape
space's paths and prunes, and the errors it gives."""
import pytest
import torch

from tilegym_edu import grading
from tilegym_edu.check import check, random_tensor
from tilegym_edu.reference import split_k
from tilegym_edu.tune import Config, Resources

pytestmark = pytest.mark.beside

SMALL = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, GROUP_M=2, num_warps=4, num_stages=1)


def make_inputs(case, generator):
    M, N, K = case["M"], case["N"], case["K"]
    a = random_tensor((M, K), case["dtype"], generator)
    b = random_tensor((K, N), case["dtype"], generator)
    if case.get("transposed"):
        b = random_tensor((N, K), case["dtype"], generator).t()
    return a, b


@pytest.mark.parametrize("splits", [1, 3, 8])
def test_split_k_matches_float64_on_odd_shapes(splits):
    """K ranges that end inside a BLOCK_K step, more splits than K has steps, edges that are
    not multiples of any block, a transposed b."""
    cases = [{"M": 17, "N": 45, "K": 200, "dtype": torch.float32},
             {"M": 5, "N": 7, "K": 33, "dtype": torch.float16},
             {"M": 40, "N": 33, "K": 129, "dtype": torch.float16, "transposed": True}]
    results = check(lambda a, b: split_k.split_k_matmul(a, b, {**SMALL, "SPLIT_K": splits}),
                    lambda a, b: a @ b, make_inputs, cases, seeds=range(2))
    failed = [r.describe() for r in results if not r.passed]
    assert not failed, failed[:3]


def test_the_partials_are_added_in_a_fixed_order():
    """The same inputs give the same bits, call after call."""
    generator = torch.Generator().manual_seed(0)
    a, b = make_inputs({"M": 16, "N": 32, "K": 256, "dtype": torch.float32}, generator)
    first = split_k.split_k_matmul(a, b, {**SMALL, "SPLIT_K": 8})
    assert torch.equal(first, split_k.split_k_matmul(a, b, {**SMALL, "SPLIT_K": 8}))


def test_each_path_of_the_shape_space_computes_a_matmul():
    generator = torch.Generator().manual_seed(1)
    a, b = make_inputs({"M": 20, "N": 24, "K": 96, "dtype": torch.float32}, generator)
    expected = a.double() @ b.double()
    for path, extra in (("pipelined", {}), ("split_k", {"SPLIT_K": 4})):
        out = split_k.run_path(a, b, Config(**SMALL, **extra, PATH=path))
        torch.testing.assert_close(out.double(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("layout", ["unaligned", "b transposed"])
def test_the_padded_path_matches_float64_where_descriptors_cannot_read_the_inputs(layout):
    """Rows of 13 and 7 elements (26 and 14 bytes in fp16), or a b that is not row-major: the
    persistent kernel on zero-padded copies, c copied out contiguous."""
    generator = torch.Generator().manual_seed(2)
    a, b = make_inputs({"M": 21, "N": 7, "K": 13, "dtype": torch.float16,
                        "transposed": layout == "b transposed"}, generator)
    assert split_k.shape_problem(a, b)["tma"]
    config = Config(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, EPILOGUE_SPLIT=2,
                    FLATTEN=True, num_warps=4, num_stages=1, PATH="padded")
    out = split_k.run_path(a, b, config)
    assert out.shape == (21, 7) and out.is_contiguous() and out.dtype == torch.float16
    torch.testing.assert_close(out.double(), a.double() @ b.double(), rtol=2e-3, atol=2e-3)


def test_padded_rows_copies_once_and_zeroes_only_the_padding():
    t = torch.arange(6.0).reshape(2, 3).t()          # (3, 2), not row-major
    out = split_k.padded_rows(t, 4, 8)
    assert out.shape == (4, 8) and out.is_contiguous()
    assert torch.equal(out[:3, :2], t) and not out[3:].any() and not out[:, 2:].any()


def test_the_shape_space_holds_every_path_and_prunes_what_cannot_run():
    paths = {c["PATH"] for c in split_k.SHAPE_SPACE.configs(1)}
    assert paths == {"pipelined", "persistent", "split_k", "padded", "skinny"}
    gpu = Resources(shared_bytes=227 * 1024)
    unaligned = {"M": 8205, "N": 5921, "K": 2949, "dtype": "float16",
                 "tma": "a's rows are 5898 bytes apart"}
    kept, pruned = split_k.SHAPE_SPACE.candidates(1, unaligned, gpu)
    assert {c["PATH"] for c in kept} == {"pipelined", "split_k", "padded"}
    assert any("tensor descriptors" in why for _, why in pruned)
    short_k = {"M": 4096, "N": 4096, "K": 64, "dtype": "float16", "tma": ""}
    kept, pruned = split_k.SHAPE_SPACE.candidates(1, short_k, gpu)
    assert {c["PATH"] for c in kept} == {"pipelined", "persistent"}
    assert any("no copies needed" in why for _, why in pruned)
    assert any("the skinny kernel takes at most 16" in why for _, why in pruned)
    decoding = {"M": 1, "N": 2048, "K": 5632, "dtype": "float16", "tma": ""}
    kept, _ = split_k.SHAPE_SPACE.candidates(1, decoding, gpu)
    assert "skinny" in {c["PATH"] for c in kept}


def test_no_split_whose_partials_outgrow_32_bit_offsets():
    """A decoding benchmark's prefill (32640 x 11264 x 2048) crashed the H200 with an illegal
    memory access in 8 ranges (2.9e9 partial elements); 2 ranges (7.4e8) stay."""
    gpu = Resources(shared_bytes=227 * 1024)
    prefill = {"M": 32640, "N": 11264, "K": 2048, "dtype": "float16", "tma": ""}
    eight = Config(**{**split_k.SPLIT_K_DEFAULT, "SPLIT_K": 8})
    assert "32-bit offsets" in split_k.split_k_prune(eight, prefill, gpu)
    assert split_k.split_k_prune(eight.replace(SPLIT_K=2), prefill, gpu) is None
    kept, _ = split_k.SHAPE_SPACE.candidates(1, prefill, gpu)
    assert all(c["SPLIT_K"] * prefill["M"] * prefill["N"] < 2**31
               for c in kept if c["PATH"] == "split_k")


def test_shape_problem_says_why_descriptors_cannot_read_the_inputs():
    a = torch.randn(8, 13, dtype=torch.float16)     # rows of 26 bytes
    b = torch.randn(13, 8, dtype=torch.float16)
    assert "16 bytes" in split_k.shape_problem(a, b)["tma"]
    assert split_k.shape_problem(torch.randn(8, 16), torch.randn(16, 8))["tma"] == ""


def test_mismatched_shapes_are_refused_and_the_kernels_are_references_when_graded():
    with pytest.raises(ValueError, match="a's columns must be b's rows"):
        split_k.split_k_matmul(torch.randn(4, 5), torch.randn(6, 4), SMALL)
    a = torch.randn(4, 4)
    for fn in (split_k.split_k_matmul, split_k.shape_matmul,
               lambda a, b: split_k.padded_persistent_matmul(a, b, {})):
        with pytest.raises(grading.LibraryShortcut, match="reference"):
            grading.guarded_call(fn, (a, a))
