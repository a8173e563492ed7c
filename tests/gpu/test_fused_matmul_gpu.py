"""The matmul with SwiGLU in its epilogue on a GPU: every level-1 configuration the prune keeps
and the tuned one, on the capstone's MLP shape, one row past a tile and odd widths, float16 and
bfloat16, against float32 PyTorch; and the capstone's prefill on the reference kernels (the
fused MLP among them) against the model in float32."""
import pytest
import torch

from tilegym_edu import check
from tilegym_edu.reference import fused_matmul, llama, llama_kernels
from tilegym_edu.tune import Resources

#: (rows, dim, hidden): the capstone's prefill (batch 4 x 2048 tokens), a row past one tile,
#: an odd number of rows with hidden not a multiple of any block
SHAPES = [(8192, 2048, 5632), (129, 2048, 5632), (1000, 512, 328)]
DTYPES = (torch.float16, torch.bfloat16)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_configuration_matches_float32(shape, dtype):
    rows, dim, hidden = shape
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, dim, generator=generator).to("cuda", dtype)
    w13 = (torch.randn(dim, 2 * hidden, generator=generator) / dim ** 0.5).to("cuda", dtype)
    assert fused_matmul.fused_problem(x, w13) is None
    expected = llama.swiglu_torch(x.float() @ w13.float())
    problem = {"M": rows, "N": hidden, "K": dim, "dtype": str(dtype).removeprefix("torch.")}
    resources = Resources.of_gpu()
    configs = [dict(c) for c in fused_matmul.SWIGLU_SPACE.configs(1)
               if fused_matmul.swiglu_prune(c, problem, resources) is None]
    assert len(configs) >= 4
    for config in configs + [None]:
        out = fused_matmul.matmul_swiglu(x, w13, config)
        assert check.relative_error(out, expected) < 1e-2, config


def test_the_capstone_prefill_on_the_reference_kernels_matches_float32():
    cfg = llama.GPU_CONFIG
    model = llama.Llama(cfg, torch.float16, "cuda")
    tokens = llama.random_tokens(cfg, 2, 512, torch.Generator().manual_seed(0))
    expected = model.to(torch.float32)(tokens).float()
    out = model(tokens, llama_kernels.reference_ops(small_blocks=False)).float()
    assert check.relative_error(out, expected) < 5e-3     # 1.4e-3 on the H200, 2026-12-01
