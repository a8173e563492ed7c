"""Run 67b (H100, 2026-12-06, main at 26b7404): B4 H32 S4096 D128 causal fp16, the Gluon
forward on three schedules (one tile a program, persistent, persistent_q_once) and cuDNN SDPA,
interleaved by bench.compare (plain launches). Printed: specialised 1.1536, persistent 1.083,
persistent_q_once 1.0673, cuDNN 1.1684 ms."""
import tilegym_edu  # noqa: F401
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from tilegym_edu import bench
from tilegym_edu.reference import flash_hopper as fh
q, k, v = (torch.randn(4, 32, 4096, 128, device="cuda", dtype=torch.float16) for _ in range(3))
o, lse = torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)
fns = {s: (lambda s=s: fh.launch_hopper_flash(q, k, v, o, lse, True, (128, 128, 2, s)))
       for s in ("specialised", "persistent", "persistent_q_once")}
def cudnn():
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        F.scaled_dot_product_attention(q, k, v, is_causal=True)
fns["cuDNN"] = cudnn
for m in bench.compare(fns, rep_ms=300):
    print(m.name, round(m.median_ms, 4))
