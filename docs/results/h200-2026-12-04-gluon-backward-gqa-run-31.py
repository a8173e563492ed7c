"""Next session (prepared 2026-12-04): .gpu/fbh_gqa.py, flash_backward_hopper with grouped-query
heads (the dk/dv programs stream the query blocks of every head of their group; dq reads its
k/v head), never run on a GPU (offline: every configuration compiles for sm_90a, MHA and
H4/KV1, no spills). (1) every configuration against float64 autograd, GQA and MHA, causal and
not, D64/D128; (2) B4 H32/KV8 S4096 D128 causal: the GQA Gluon backward (best of its configs)
against the reference (Triton kernels for GQA) and cuDNN.
Run: PYTHONPATH=$PWD python .gpu/check_gqa31.py  (about 120 s)"""
import tilegym_edu  # noqa: F401
import importlib.util, math, os, sys, time
import torch
import torch.nn.functional as F
import triton
from tilegym_edu import bench
from tilegym_edu.check import relative_error
from tilegym_edu.reference import flash, flash_backward as FB
from torch.nn.attention import SDPBackend, sdpa_kernel

# fbh_gqa.py: flash_backward_hopper.py with grouped-query heads, as the library holds it since
# this run (the commit that records it), less the configuration checks that commit kept
spec = importlib.util.spec_from_file_location("fbh_gqa", os.path.join(os.path.dirname(__file__), "fbh_gqa.py"))
G = importlib.util.module_from_spec(spec)
spec.loader.exec_module(G)


def case(B, H, KV, S, D, dtype, causal, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, do = (torch.randn(B, H, S, D, device="cuda", generator=g).to(dtype) for _ in range(2))
    k, v = (torch.randn(B, KV, S, D, device="cuda", generator=g).to(dtype) for _ in range(2))
    o, lse = flash.flash_forward(q, k, v, causal)
    delta = (o.float() * do.float()).sum(-1)
    return q, k, v, o, lse, do, delta


print("== correctness", time.strftime("%H:%M:%S"), flush=True)
bad = 0
for (B, H, KV, S, D) in [(1, 4, 1, 384, 64), (2, 8, 2, 256, 128), (1, 4, 4, 512, 128), (1, 6, 2, 1024, 64)]:
    for causal in (False, True):
        q, k, v, o, lse, do, delta = case(B, H, KV, S, D, torch.float16, causal)
        leaves = [t.double().requires_grad_() for t in (q, k, v)]
        flash.attention_reference(*leaves, causal).backward(do.double())
        assert G.backward_fits(q, k, v, lse)
        for row in G.DKDV_CONFIGS:
            c = dict(zip(G.DKDV_NAMES, row))
            if G.dkdv_prune(c, {"head_dim": D}, None):
                continue
            dk, dv = torch.full_like(k, float("nan")), torch.full_like(v, float("nan"))
            G.launch_dkdv(q, k, v, lse, delta, do, dk, dv, causal, c)
            e = max(relative_error(dk, leaves[1].grad), relative_error(dv, leaves[2].grad))
            bad += e > 3e-3
            print(f"  dkdv B{B} H{H}/KV{KV} S{S} D{D} {'causal' if causal else 'full'} {row}: {e:.2e}", flush=True)
        for row in G.DQ_CONFIGS:
            c = dict(zip(G.DQ_NAMES, row))
            if G.dq_prune(c, {"head_dim": D}, None):
                continue
            dq = torch.full_like(q, float("nan"))
            G.launch_dq(q, k, v, lse, delta, do, dq, causal, c)
            e = relative_error(dq, leaves[0].grad)
            bad += e > 3e-3
            print(f"  dq   B{B} H{H}/KV{KV} S{S} D{D} {'causal' if causal else 'full'} {row}: {e:.2e}", flush=True)
print(f"wrong: {bad}", flush=True)

print("== B4 H32/KV8 S4096 D128 causal", time.strftime("%H:%M:%S"), flush=True)
q, k, v, o, lse, do, delta = case(4, 32, 8, 4096, 128, torch.float16, True)
dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
kv = {str(r): (lambda c=dict(zip(G.DKDV_NAMES, r)): G.launch_dkdv(q, k, v, lse, delta, do, dk, dv, True, c))
      for r in G.DKDV_CONFIGS if not G.dkdv_prune(dict(zip(G.DKDV_NAMES, r)), {"head_dim": 128}, None)}
qq = {str(r): (lambda c=dict(zip(G.DQ_NAMES, r)): G.launch_dq(q, k, v, lse, delta, do, dq, True, c))
      for r in G.DQ_CONFIGS if not G.dq_prune(dict(zip(G.DQ_NAMES, r)), {"head_dim": 128}, None)}
kv_ms = {m.name: m.median_ms for m in bench.compare(kv, graph_below_ms=math.inf)}
q_ms = {m.name: m.median_ms for m in bench.compare(qq, graph_below_ms=math.inf)}
best_kv, best_q = min(kv_ms, key=kv_ms.get), min(q_ms, key=q_ms.get)
print("  dk/dv", kv_ms, "\n  dq", q_ms, flush=True)
columns = FB.block_d(128)


def gluon():
    FB.flash_delta_kernel[(triton.cdiv(4096, 64), 4 * 32)](o, do, delta, *FB.head_strides(o, do), 32, 4096,
                                                          HEAD_DIM=128, BLOCK_D=columns, BLOCK_M=64)
    kv[best_kv]()
    qq[best_q]()


leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    out = F.scaled_dot_product_attention(*leaves, is_causal=True, enable_gqa=True)
ms = {m.name: m.median_ms for m in bench.compare(
    {"cuDNN": lambda: torch.autograd.grad(out, leaves, do, retain_graph=True),
     "reference (Triton, GQA)": lambda: FB.flash_backward(q, k, v, o, lse, do, True),
     "Gluon GQA": gluon}, graph_below_ms=math.inf)}
print("  " + "  ".join(f"{n} {t:.3f} ms ({ms['cuDNN'] / t:.3f}x cuDNN)" for n, t in ms.items()), flush=True)
