"""tilegym_edu.reference.fused_matmul: the matmul with SwiGLU in its epilogue (the capstone's
MLP up-projection in one kernel), in interpreter mode; every configuration of its search space,
and bfloat16 (whose tl.dot Triton's interpreter does not support: triton-lang/triton#11584),
on a GPU in tests/gpu/test_fused_matmul_gpu.py."""
import pytest
import torch

from tilegym_edu import check, grading
from tilegym_edu.reference import fused_matmul, llama, llama_kernels
from tilegym_edu.reference.llama import CPU_CONFIG, TORCH_OPS, Llama

pytestmark = pytest.mark.beside

SMALL = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, EPILOGUE_SPLIT=2, FLATTEN=False,
             num_warps=4, num_stages=2)


def problem(rows, dim, hidden, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, dim, generator=g).to(dtype)
    w13 = (torch.randn(dim, 2 * hidden, generator=g) / dim ** 0.5).to(dtype)
    return x, w13


def expected(x, w13):
    return llama.swiglu_torch(x.double() @ w13.double())


@pytest.mark.parametrize("rows, dim, hidden", [(37, 40, 24), (17, 64, 72), (33, 24, 8),
                                               (20, 16, 16)])
@pytest.mark.parametrize("split", [1, 2])
def test_fused_kernel_matches_matmul_then_swiglu(rows, dim, hidden, split):
    """Rows, the reduction and hidden not multiples of the 16-wide blocks: the tiles past the
    edge read zeros (the gate's descriptor ends at hidden, so its last tile reads zeros past it,
    not the up half) and their stores are dropped."""
    x, w13 = problem(rows, dim, hidden, torch.float16)
    assert fused_matmul.fused_problem(x, w13) is None
    out = fused_matmul.matmul_swiglu(x, w13, {**SMALL, "EPILOGUE_SPLIT": split})
    assert out.shape == (rows, hidden) and out.dtype == torch.float16
    assert check.relative_error(out, expected(x, w13)) < 2e-3


def test_the_tuned_default_runs_in_the_interpreter():
    x, w13 = problem(20, 32, 24, torch.float16, seed=1)
    assert check.relative_error(fused_matmul.matmul_swiglu(x, w13), expected(x, w13)) < 2e-3


@pytest.mark.parametrize("x, w13, why", [
    (torch.randn(20, 32).half(), torch.randn(32, 18).half(), "up half of w13 starts 18 bytes"),
    (torch.randn(20, 32).half(), torch.randn(32, 24).half(), "up half of w13 starts 24 bytes"),
    (torch.randn(32, 20).half().t(), torch.randn(32, 32).half(), "last stride"),
    (torch.randn(20, 32), torch.randn(32, 32), "float16 and bfloat16")])
def test_inputs_the_kernel_cannot_take_go_unfused(x, w13, why, monkeypatch):
    """More rows than a decoding step's (which go unfused whatever the inputs): the reason alone
    sends them to shape_matmul and the SwiGLU kernel, with the right answer. The second case has
    rows on 16-byte boundaries and an up half that starts off one."""
    reason = fused_matmul.fused_problem(x, w13)
    assert reason and why in reason
    monkeypatch.setattr(fused_matmul, "launch_matmul_swiglu", None)    # fails if called
    out = fused_matmul.matmul_swiglu(x, w13)
    assert out.shape == (20, w13.shape[1] // 2) and out.dtype == x.dtype
    assert check.relative_error(out, expected(x, w13)) < 2e-3


@pytest.mark.parametrize("x, w13, why", [
    (torch.randn(20, 48).half(), torch.randn(32, 48).half(), "48 columns and w13 32 rows"),
    (torch.randn(20, 32).half(), torch.randn(32, 33).half(), "even number"),
    (torch.randn(20, 32).half(), torch.randn(32, 32), "one dtype"),
    (torch.randn(2, 20, 32).half(), torch.randn(32, 32).half(), "matrices")])
def test_inputs_that_make_no_product_are_refused(x, w13, why):
    with pytest.raises(ValueError, match=why):
        fused_matmul.matmul_swiglu(x, w13)


def test_a_decoding_steps_few_rows_take_shape_matmul_and_swiglu(monkeypatch):
    """At most skinny.SKINNY_ROWS rows: the skinny matmul (shape_matmul's pick) and then the
    SwiGLU kernel, not the fused kernel's 128-row tiles."""
    x, w13 = problem(16, 32, 24, torch.float16)
    assert fused_matmul.fused_problem(x, w13) is None
    launched = []
    monkeypatch.setattr(fused_matmul, "launch_matmul_swiglu", lambda *a: launched.append(a))
    out = fused_matmul.matmul_swiglu(x, w13)
    assert not launched and check.relative_error(out, expected(x, w13)) < 2e-3
    fused_matmul.matmul_swiglu(*problem(17, 32, 24, torch.float16), SMALL)
    assert len(launched) == 1


def test_prune_counts_both_accumulators_and_both_weight_tiles():
    """128 x 128 tiles with two accumulators hold as many registers as lesson 03's 128 x 256;
    four stages of x's and w13's two tiles, 48 KiB each, and a 16 KiB output half fit 227 KiB,
    five do not."""
    from tilegym_edu.tune import Resources
    h200 = Resources(shared_bytes=232448)
    problem_ = {"M": 8192, "N": 5632, "K": 2048, "dtype": "float16"}
    config = dict(fused_matmul.SWIGLU_SPACE.default, num_stages=4)
    assert fused_matmul.swiglu_prune(config, problem_, h200) is None
    assert "shared memory" in fused_matmul.swiglu_prune({**config, "num_stages": 5}, problem_,
                                                        h200)
    assert "registers" in fused_matmul.swiglu_prune({**config, "num_warps": 4}, problem_, h200)


def test_refused_inside_a_graded_call():
    """The wrapper, and a launch of the raw kernel (through its launcher), raise."""
    x, w13 = problem(20, 16, 16, torch.float16)
    out = torch.empty(20, 16, dtype=torch.float16)
    with pytest.raises(grading.LibraryShortcut):
        grading.guarded_call(lambda: fused_matmul.matmul_swiglu(x, w13, SMALL), ())
    with pytest.raises(grading.LibraryShortcut):
        grading.guarded_call(lambda: fused_matmul.launch_matmul_swiglu(x, w13, out, SMALL), ())


def test_the_model_takes_the_fused_op_where_the_ops_have_it():
    """up_and_swiglu: Ops.matmul_swiglu in place of matmul then swiglu; the reference ops'
    model gives the unfused model's logits."""
    calls = []

    def fused(h, w13):
        calls.append(w13.shape)
        return llama.swiglu_torch(h @ w13)
    model = Llama(CPU_CONFIG, torch.float64)
    t = llama.random_tokens(CPU_CONFIG, 3, 6, torch.Generator().manual_seed(2))   # 18 rows
    swapped = llama.Ops(matmul_swiglu=fused)
    assert torch.allclose(model(t, swapped), model(t, TORCH_OPS))
    assert calls == [(CPU_CONFIG.dim, 2 * CPU_CONFIG.hidden)] * CPU_CONFIG.n_layers
    half = model.to(torch.float16)
    assert check.relative_error(half(t, llama_kernels.reference_ops()), model(t)) < 5e-3
