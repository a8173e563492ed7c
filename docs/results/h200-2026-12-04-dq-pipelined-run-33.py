"""Run 33: dq with the next key block's S and dP issued behind this block's dS K matmul
(.gpu/fbh_dqpipe.py: flash_backward_hopper with that dq loop; offline every configuration
compiles for sm_90a, no spills). (1) every dq configuration against float64 autograd, MHA and
GQA, causal and not, D64/D128; (2) on the backward rows: every dq configuration, the
library's against the pipelined one, interleaved; then the backward (delta + best dk/dv + best
dq) of each against cuDNN.
Run: PYTHONPATH=$PWD python .gpu/check_dqpipe33.py  (about 200 s)"""
import tilegym_edu  # noqa: F401
import importlib.util, math, os, time
import torch
import torch.nn.functional as F
from tilegym_edu import bench
from tilegym_edu.check import relative_error
from tilegym_edu.reference import flash, flash_backward as FB, flash_backward_hopper as G
from torch.nn.attention import SDPBackend, sdpa_kernel

spec = importlib.util.spec_from_file_location("fbh_dqpipe", os.path.join(os.path.dirname(__file__), "fbh_dqpipe.py")  # h200-2026-12-04-dq-pipelined-run-33.diff applied to flash_backward_hopper.py)
P = importlib.util.module_from_spec(spec)
spec.loader.exec_module(P)


def case(B, H, KV, S, D, dtype, causal, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, do = (torch.randn(B, H, S, D, device="cuda", generator=g).to(dtype) for _ in range(2))
    k, v = (torch.randn(B, KV, S, D, device="cuda", generator=g).to(dtype) for _ in range(2))
    o, lse = flash.flash_forward(q, k, v, causal)
    delta = (o.float() * do.float()).sum(-1)
    return q, k, v, o, lse, do, delta


def dq_configs(D):
    return [r for r in G.DQ_CONFIGS if not G.dq_prune(dict(zip(G.DQ_NAMES, r)), {"head_dim": D}, None)]


print("== correctness", time.strftime("%H:%M:%S"), flush=True)
bad = 0
for (B, H, KV, S, D) in [(1, 4, 1, 384, 64), (2, 8, 2, 256, 128), (1, 2, 2, 1024, 128), (2, 4, 4, 128, 64)]:
    for causal in (False, True):
        q, k, v, o, lse, do, delta = case(B, H, KV, S, D, torch.float16, causal)
        leaves = [t.double().requires_grad_() for t in (q, k, v)]
        flash.attention_reference(*leaves, causal).backward(do.double())
        for row in dq_configs(D):
            dq = torch.full_like(q, float("nan"))
            P.launch_dq(q, k, v, lse, delta, do, dq, causal, dict(zip(G.DQ_NAMES, row)))
            e = relative_error(dq, leaves[0].grad)
            bad += not e <= 3e-3
            print(f"  dq B{B} H{H}/KV{KV} S{S} D{D} {'causal' if causal else 'full'} {row}: {e:.2e}", flush=True)
print(f"wrong: {bad}", flush=True)

ROWS = [(4, 32, 32, 4096, 128, False, torch.float16), (4, 32, 32, 4096, 128, True, torch.float16),
        (8, 16, 16, 2048, 64, True, torch.float16), (4, 32, 8, 4096, 128, True, torch.float16),
        (4, 32, 32, 4096, 128, True, torch.bfloat16)]
for (B, H, KV, S, D, causal, dtype) in ROWS:
    name = f"B{B} H{H}/KV{KV} S{S} D{D} {'causal' if causal else 'full'} {str(dtype)[6:]}"
    print(f"== {name}", time.strftime("%H:%M:%S"), flush=True)
    q, k, v, o, lse, do, delta = case(B, H, KV, S, D, dtype, causal)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    cands = {}
    for row in dq_configs(D):
        c = dict(zip(G.DQ_NAMES, row))
        cands[f"lib {row}"] = lambda c=c: G.launch_dq(q, k, v, lse, delta, do, dq, causal, c)
        cands[f"pipe {row}"] = lambda c=c: P.launch_dq(q, k, v, lse, delta, do, dq, causal, c)
    ms = {m.name: m.median_ms for m in bench.compare(cands, graph_below_ms=math.inf)}
    print("  dq " + ", ".join(f"{n} {t:.3f}" for n, t in ms.items()), flush=True)
    best_lib = min((n for n in ms if n.startswith("lib")), key=ms.get)
    best_pipe = min((n for n in ms if n.startswith("pipe")), key=ms.get)
    print(f"  best dq: {best_lib} {ms[best_lib]:.3f} ms, {best_pipe} {ms[best_pipe]:.3f} ms "
          f"({ms[best_lib] / ms[best_pipe]:.3f}x)", flush=True)
    kv = {}
    for row in G.DKDV_CONFIGS:
        c = dict(zip(G.DKDV_NAMES, row))
        if not G.dkdv_prune(c, {"head_dim": D}, None):
            kv[str(row)] = lambda c=c: G.launch_dkdv(q, k, v, lse, delta, do, dk, dv, causal, c)
    kv_ms = {m.name: m.median_ms for m in bench.compare(kv, graph_below_ms=math.inf)}
    best_kv = min(kv_ms, key=kv_ms.get)
    lib_c = dict(zip(G.DQ_NAMES, eval(best_lib[4:])))
    pipe_c = dict(zip(G.DQ_NAMES, eval(best_pipe[5:])))

    def backward(module, c):
        def run():
            d = FB.backward_delta(o, do)
            kv[best_kv]()
            module.launch_dq(q, k, v, lse, d, do, dq, causal, c)
        return run
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out = F.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=KV != H)
    ms = {m.name: m.median_ms for m in bench.compare(
        {"cuDNN": lambda: torch.autograd.grad(out, leaves, do, retain_graph=True),
         "Gluon, dq as in the library": backward(G, lib_c),
         "Gluon, dq pipelined": backward(P, pipe_c)}, graph_below_ms=math.inf)}
    print(f"  dk/dv {best_kv} {kv_ms[best_kv]:.3f} ms; backward: " + "  ".join(
        f"{n} {t:.3f} ms ({ms['cuDNN'] / t:.3f}x)" for n, t in ms.items()), flush=True)
print("done", time.strftime("%H:%M:%S"), flush=True)
