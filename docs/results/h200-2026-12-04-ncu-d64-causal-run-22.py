"""Session 2026-12-04 (fifth), run 22: one forward of B8 H16 S2048 D64 causal by flash.py's best
configuration of run 2 (128 x 64, 8 warps, 3 stages, longest first) and one by cuDNN's SDPA,
for Nsight Compute to say where each kernel's time goes (issue slots, pipes, stalls)."""
import tilegym_edu  # noqa
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from tilegym_edu.reference import flash

torch.manual_seed(0)
q, k, v = (torch.randn(8, 16, 2048, 64, device="cuda", dtype=torch.float16) for _ in range(3))
config = dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3, LONGEST_FIRST=True)
o, _ = flash.flash_forward(q, k, v, True, config=config)  # compiles
torch.cuda.synchronize()
o, _ = flash.flash_forward(q, k, v, True, config=config)
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
torch.cuda.synchronize()
print("max difference", (o - ref).abs().max().item())
