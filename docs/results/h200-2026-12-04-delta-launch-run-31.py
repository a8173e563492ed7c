"""The extra delta launch of flash_backward.fastest_launchers: backward_delta alone at the
backward rows' shapes, against the whole attention_backward (tuned at level 1)."""
import tilegym_edu  # noqa: F401
import math
import torch
from tilegym_edu import bench
from tilegym_edu.reference import flash, flash_backward as FB

for (B, H, S, D, causal) in [(4, 32, 4096, 128, False), (4, 32, 4096, 128, True), (8, 16, 2048, 64, True)]:
    q, k, v, do = (torch.randn(B, H, S, D, device="cuda", dtype=torch.float16) for _ in range(4))
    o, lse = flash.flash_forward(q, k, v, causal)
    FB.attention_backward(q, k, v, o, lse, do, causal)  # tunes
    ms = {m.name: m.median_ms for m in bench.compare(
        {"delta": lambda: FB.backward_delta(o, do),
         "attention_backward": lambda: FB.attention_backward(q, k, v, o, lse, do, causal)},
        graph_below_ms=math.inf)}
    print(f"B{B} H{H} S{S} D{D} {'causal' if causal else 'full'}: delta {ms['delta']:.4f} ms, "
          f"backward {ms['attention_backward']:.3f} ms ({100 * ms['delta'] / ms['attention_backward']:.1f}%)",
          flush=True)
