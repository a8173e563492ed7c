"""Small Triton kernels the tests share (a few programs each: cheap in the interpreter)."""
import torch
import triton
import triton.language as tl


@triton.jit
def double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out[i] = 2 * x[i] for i < n; one program per BLOCK elements."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


def triton_double(x: torch.Tensor) -> torch.Tensor:
    """2 * x for a contiguous tensor, computed by double_kernel."""
    out = torch.empty_like(x)
    double_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out


#: what Triton's interpreter patches while a kernel runs (triton.language and its parts)
LANGUAGE_PARTS = [tl.core.tensor, tl.core, tl.math, tl]


def language_snapshot() -> list[dict]:
    """The attributes of each of LANGUAGE_PARTS, as they are now."""
    return [dict(vars(obj)) for obj in LANGUAGE_PARTS]


def language_changes(before: list[dict]) -> list[str]:
    """'part: [names]' for each of LANGUAGE_PARTS whose attributes differ from ``before``."""
    found = []
    for obj, old in zip(LANGUAGE_PARTS, before):
        new = vars(obj)
        changed = [k for k in set(old) | set(new) if old.get(k, None) is not new.get(k, None)]
        if changed:
            found.append(f"{getattr(obj, '__name__', obj)}: {changed[:5]}")
    return found
