"""tilegym_edu.reference.fused_matmul: the matmul with SwiGLU in its epilogue (the capstone's
MLP up-projection in one kernel), in interpreter mode; every configuration of its search space,
and bfloat16 (whose tl.dot Triton's interpreter does not support: triton-lang/triton#11584),
on a GPU in tests/gpu/test_fused_matmul_gpu.py."""
import pytest
import torch

from tilegym_edu import check, grading
from tilegym_edu.reference import fused_matmul, llama, llama_kernels
from tilegym_edu.reference.llama import CPU_CONFIG, TORCH_OPS, Llama

SMALL = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, EPILOGUE_SPLIT=2, FLATTEN=False,
             num_warps=4, num_stages=2)


def problem(rows, dim, hidden, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, dim, generator=g).to(dtype)
    w13 = (torch.randn(dim, 2 * hidden, generator=g) / dim ** 0.5).to(dtype)
    return x, w13


def expected(x, w13):
    return llama.swiglu_torch(x.double() @ w13.double())


@pytest.mark.parametrize("dtype, tolerance", [(torch.float16, 2e-3), (torch.float32, 1e-5)])
@pytest.mark.parametrize("rows, dim, hidden", [(37, 40, 24), (17, 64, 72), (33, 24, 8),
                                               (20, 16, 16)])
@pytest.mark.parametrize("split", [1, 2])
def test_fused_kernel_matches_matmul_then_swiglu(rows, dim, hidden, dtype, tolerance, split):
    """Rows, the reduction and hidden not multiples of the 16-wide blocks: the tiles past the
    edge read zeros and their stores are dropped; the gate's tile past hidden reads the up
    projection's first columns, whose products land only in dropped columns."""
    x, w13 = problem(rows, dim, hidden, dtype)
    assert fused_matmul.fused_problem(x, w13) is None
    out = fused_matmul.matmul_swiglu(x, w13, {**SMALL, "EPILOGUE_SPLIT": split})
    assert out.shape == (rows, hidden) and out.dtype == dtype
    assert check.relative_error(out, expected(x, w13)) < tolerance


def test_the_tuned_default_runs_in_the_interpreter():
    x, w13 = problem(20, 32, 24, torch.float16, seed=1)
    assert check.relative_error(fused_matmul.matmul_swiglu(x, w13), expected(x, w13)) < 2e-3


@pytest.mark.parametrize("x, w13, why", [
    (torch.randn(6, 32).half(), torch.randn(32, 18).half(), "multiples of 16 bytes"),
    (torch.randn(32, 6).half().t(), torch.randn(32, 32).half(), "last stride"),
    (torch.randn(6, 32).half(), torch.randn(32, 33).half(), "even number")])
def test_inputs_descriptors_cannot_read_take_the_unfused_path(x, w13, why, monkeypatch):
    reason = fused_matmul.fused_problem(x, w13)
    assert reason and why in reason
    if w13.shape[1] % 2:
        return
    monkeypatch.setattr(fused_matmul, "launch_matmul_swiglu", None)    # fails if called
    out = fused_matmul.matmul_swiglu(x, w13)
    assert out.shape == (6, w13.shape[1] // 2)
    assert check.relative_error(out, expected(x, w13)) < 2e-3


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
    x, w13 = problem(8, 16, 16, torch.float16)
    with pytest.raises(grading.LibraryShortcut):
        grading.guarded_call(lambda: fused_matmul.matmul_swiglu(x, w13, SMALL), ())


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
