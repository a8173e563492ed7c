"""tilegym_edu.cutile: lesson 07's cuTile kernels are defined on any machine and say what they
need where cuTile is missing; where cuda.tile is installed (no GPU needed), every kernel of
tilegym_edu.reference.cutile_kernels compiles to an sm_90 cubin as it is written."""
import pytest
import torch

from tilegym_edu import cutile
from tilegym_edu.reference import cutile_kernels as ck

KERNELS = ["silu_mul_kernel", "matmul_kernel", "persistent_matmul_kernel",
           "flash_attention_kernel"]


@pytest.mark.skipif(cutile.MISSING is None, reason="cuda.tile is installed here")
def test_without_cutile_kernels_are_defined_and_every_use_names_make_cutile():
    kernel = ck.flash_attention_kernel
    assert isinstance(kernel, cutile.MissingKernel) and kernel.options == {"occupancy": 2}
    assert "make cutile" in cutile.MISSING
    for use in (lambda: cutile.launch(torch.device("cpu"), (1,), kernel, ()),
                lambda: cutile.ct.cdiv(3, 2), lambda: cutile.require("lesson 07"), kernel):
        with pytest.raises(cutile.CutileMissing, match="make cutile"):
            use()
    assert cutile.ConstInt is int and cutile.ConstBool is bool


def test_a_wrapper_refuses_inputs_it_cannot_take_before_anything_needs_cutile():
    a = torch.ones(4, 8, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"\.cuda\(\)"):
        ck.matmul(a, a.t().contiguous())
    with pytest.raises(ValueError, match="must equal b's rows"):
        ck.matmul(a, a)


def _array(ct, dtype, ndim, divisible=8):
    from cuda.tile.compilation import ArrayConstraint
    return ArrayConstraint(dtype, ndim, index_dtype=ct.int32, stride_lower_bound_incl=0,
                           alias_groups=(), may_alias_internally=False,
                           stride_divisible_by=[divisible] * (ndim - 1) + [1],
                           base_addr_divisible_by=16)


def _signatures(ct, name):
    """Parameter constraints of each kernel at its default tiles, float16 and bfloat16; the
    matmuls with rows of a multiple of 16 bytes (TMA) and of any length, attention with
    head_dim 64 causal and 128 not."""
    from cuda.tile.compilation import ScalarConstraint
    for dtype in (ct.float16, ct.bfloat16):
        if name == "silu_mul_kernel":
            yield [_array(ct, dtype, 1) for _ in range(3)] + [ck.SILU_MUL_TILE]
        elif name == "flash_attention_kernel":
            for head_dim, causal in ((64, True), (128, False)):
                yield ([_array(ct, dtype, 4) for _ in range(4)]
                       + [ScalarConstraint(ct.float32), 3, head_dim]
                       + list(ck.ATTENTION_DEFAULT.values()) + [causal])
        else:
            default = ck.MATMUL_DEFAULT if name == "matmul_kernel" else ck.PERSISTENT_DEFAULT
            for divisible in (8, 1):
                yield ([_array(ct, dtype, 2, divisible) for _ in range(3)]
                       + list(default.values()))


@pytest.mark.parametrize("name", KERNELS)
def test_every_kernel_compiles_for_sm90_offline(name, tmp_path):
    ct = pytest.importorskip("cuda.tile", reason="needs cuda.tile (`make cutile`); no GPU needed")
    from cuda.tile.compilation import CallingConvention, KernelSignature, export_kernel
    for number, parameters in enumerate(_signatures(ct, name)):
        out = tmp_path / f"{name}-{number}.cubin"
        export_kernel(getattr(ck, name),
                      [KernelSignature(parameters, CallingConvention.cutile_python_v1())],
                      str(out), output_format="cubin", gpu_code="sm_90")
        assert out.stat().st_size > 0
