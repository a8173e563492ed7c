"""benchmarks/attention_forward_ideas.py without a GPU: its polynomial exp2 (exp2_poly) against
float64 2^x, the poly exp2 variants of its experimental kernel against float32 PyTorch
attention through the script's own launcher (in Triton's interpreter on the CPU; on a GPU where
one is visible), and --shapes picking rows of SHAPES."""
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from tilegym_edu import device

pytestmark = pytest.mark.beside

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load_ideas():
    """benchmarks/attention_forward_ideas.py as a module, its folder on sys.path while it
    imports (as `python benchmarks/attention_forward_ideas.py` has it)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(BENCHMARKS))
        spec = importlib.util.spec_from_file_location("attention_forward_ideas",
                                                      BENCHMARKS / "attention_forward_ideas.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


ideas = load_ideas()
POLY_VARIANTS = [v for v in ideas.VARIANTS if "poly" in v]


@triton.jit
def exp2_poly_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, ideas.exp2_poly(x), mask=offs < n)


@triton.jit
def exp2_columns_kernel(x_ptr, y_ptr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        POLY: tl.constexpr):
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    tl.store(y_ptr + offs, ideas.exp2_columns(tl.load(x_ptr + offs), BLOCK_M, BLOCK_N, POLY))


def exp2_poly(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    exp2_poly_kernel[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), 4096)
    return y


def test_the_polynomial_is_within_1_5e_4_of_exp2_down_to_the_clamp():
    x = torch.linspace(-126, 0, 2**16, dtype=torch.float32, device=device.DEVICE)
    x = torch.cat([x, torch.tensor([0.0, -0.5, -0.25, -1.5, -2.5, -125.5, -126.0],
                                   device=device.DEVICE)])
    exact = np.exp2(x.double().cpu().numpy())
    relative = np.abs(exp2_poly(x).double().cpu().numpy() / exact - 1)
    normal = x.cpu().numpy() > -125.5     # at -126 the result's exponent field reaches 0
    assert relative[normal].max() < 7.6e-5   # the polynomial's own 7.48e-5 on [-0.5, 0.5]
    assert relative.max() < 1.5e-4


def test_the_polynomial_is_tiny_and_finite_below_the_clamp():
    x = torch.tensor([-126.5, -127.0, -127.5, -200.0, -1e30, -float("inf")],
                     device=device.DEVICE)
    y = exp2_poly(x).cpu()
    assert torch.isfinite(y).all() and (y >= 0).all() and (y < 1.2e-38).all()


@pytest.mark.parametrize("poly", [2, 4])
def test_the_poly_columns_are_the_odd_ones(poly):
    """POLY 2: the odd columns by exp2_poly, the even ones by tl.math.exp2; 4: only the odd
    columns of the right half by exp2_poly."""
    torch.manual_seed(0)
    bm, bn = 16, 64
    x = -8 * torch.rand(bm, bn, device=device.DEVICE)
    y = torch.empty_like(x)
    exp2_columns_kernel[(1,)](x, y, bm, bn, poly)
    columns = torch.arange(bn, device=x.device)
    by_poly = (columns % 2 == 1) & ((columns >= bn // 2) if poly == 4 else True)
    assert torch.equal(y[:, by_poly].cpu(), exp2_poly(x[:, by_poly].contiguous()).cpu())
    assert torch.allclose(y[:, ~by_poly], torch.exp2(x[:, ~by_poly]), rtol=1e-6, atol=0)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("variant", POLY_VARIANTS)
def test_poly_variants_match_float32_attention(variant, causal):
    """Host descriptors ("tma host, ...") run in the interpreter too (TensorDescriptor on CPU
    tensors), so every poly variant is checked."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 1, 128, 64, device=device.DEVICE, dtype=torch.float16)
               for _ in range(3))
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    out = ideas.launcher(q, k, v, causal, variant, (64, 64, 4, 3))()
    assert ideas.relative(out, ref) < 2e-3     # best_config's tolerance


def test_shapes_picks_rows_by_index(monkeypatch):
    ran = []

    def compare_shape(shape, variants):
        ran.append((shape, tuple(variants)))
        return str(shape), {}
    monkeypatch.setattr(sys, "argv", ["attention_forward_ideas.py", "--shapes", "4", "1",
                                      "--variants", "fma", "poly exp2 1/2"])
    ideas.ideas_main("doc", ideas.SHAPES, ideas.VARIANTS, compare_shape, dict, "causal")
    assert ran == [(ideas.SHAPES[1], ("fma", "poly exp2 1/2")),
                   (ideas.SHAPES[4], ("fma", "poly exp2 1/2"))]
    monkeypatch.setattr(sys, "argv", ["attention_forward_ideas.py", "--shapes", "0", "4",
                                      "--causal-only"])
    ran.clear()
    ideas.ideas_main("doc", ideas.SHAPES, ideas.VARIANTS, compare_shape, dict, "causal")
    assert [shape for shape, _ in ran] == [ideas.SHAPES[4]]
    monkeypatch.setattr(sys, "argv", ["attention_forward_ideas.py", "--shapes", "5"])
    with pytest.raises(SystemExit):
        ideas.ideas_main("doc", ideas.SHAPES, ideas.VARIANTS, compare_shape, dict, "causal")
