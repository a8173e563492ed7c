"""Run 29 (2026-12-04): the Gluon dq kernel (.gpu/flash_dq_gluon.py), never run before:
(1) every configuration against float32 PyTorch and the reference's dq, B2 H4 S1024, head sizes
64 and 128, causal and not, fp16 (bf16 for the first configuration); (2) the backward whole
with both Gluon kernels (delta by the reference's kernel) against the reference and cuDNN,
each Gluon kernel's configurations raced first."""
import tilegym_edu  # noqa: F401
import json, math, os, sys, time
import torch
import torch.nn.functional as F
import triton
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tilegym_edu import bench
from tilegym_edu.reference import flash_backward as FB
from tilegym_edu.reference.flash import flash_forward
from torch.nn.attention import SDPBackend, sdpa_kernel
import flash_dkdv_gluon as GK
import flash_dq_gluon as GQ

OUT = os.environ.get("OUT", ".")
record = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
          "gpu": torch.cuda.get_device_name(), "correctness": {}, "backward": {}}
rel = lambda a, b: ((a.float() - b.float()).norm() / b.float().norm()).item()  # noqa: E731


def inputs(B, H, S, D, dtype, causal, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, do = (torch.randn(B, H, S, D, device="cuda", generator=g).to(dtype) for _ in range(4))
    o, lse = flash_forward(q, k, v, causal)
    delta = (o.float() * do.float()).sum(-1)
    return q, k, v, o, lse, do, delta


print("== 1: correctness", record["date"], record["gpu"], flush=True)
ok = {}
for D in (128, 64):
    for causal in (False, True):
        for dtype in (torch.float16, torch.bfloat16):
            q, k, v, o, lse, do, delta = inputs(2, 4, 1024, D, dtype, causal, seed=D + causal)
            ref = GQ.reference_dq(q, k, v, do, causal)
            dq_t = FB.flash_backward(q, k, v, o, lse, do, causal)[0]
            configs = GQ.CONFIGS[D] if dtype == torch.float16 else GQ.CONFIGS[D][:1]
            for c in configs:
                dq = torch.full_like(q, float("nan"))
                t = time.time()
                GQ.dq_launcher(q, k, v, lse, do, dq, delta, causal, c)()
                torch.cuda.synchronize()
                e, e_t = rel(dq, ref), rel(dq, dq_t)
                good = e < 1e-2
                ok[(D, c)] = ok.get((D, c), True) and good
                name = f"D{D} {'causal' if causal else 'full  '} {str(dtype)[6:]:8s} {c}"
                print(f"  {name}: vs float32 {e:.2e} (reference dq {rel(dq_t, ref):.2e}), vs "
                      f"reference {e_t:.2e} {'ok' if good else 'WRONG'} ({time.time() - t:.1f} s)",
                      flush=True)
                record["correctness"][name] = {"vs_float32": e, "vs_reference": e_t, "ok": good}

print("\n== 2: the backward whole", flush=True)
for (B, H, S, D, dtype, causal) in [(4, 32, 4096, 128, torch.float16, False),
                                    (4, 32, 4096, 128, torch.float16, True),
                                    (4, 32, 4096, 128, torch.bfloat16, True),
                                    (8, 16, 2048, 64, torch.float16, True),
                                    (4, 32, 4096, 64, torch.float16, False),
                                    (16, 16, 1024, 128, torch.float16, True)]:
    title = f"B{B} H{H} S{S} D{D} {str(dtype)[6:]} {'causal' if causal else 'full'}"
    q, k, v, o, lse, do, delta = inputs(B, H, S, D, dtype, causal)
    dq_t, dk_t, dv_t = FB.flash_backward(q, k, v, o, lse, do, causal)   # tunes (level 1)
    grads, launchers = FB.backward_launchers(q, k, v, o, lse, do, causal)
    tuned = FB.tune_backward(FB.backward_problem(q, k, causal), launchers)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    kv_fns = {c: GK.dkdv_launcher(q, k, v, o, lse, do, dk, dv, causal, c, delta) for c in GK.CONFIGS[D]}
    q_fns = {c: GQ.dq_launcher(q, k, v, lse, do, dq, delta, causal, c)
             for c in GQ.CONFIGS[D] if ok.get((D, c))}
    if not q_fns:
        print(f"{title}: no Gluon dq configuration passed at head size {D}", flush=True)
        continue
    kv_named = {m.name: m.median_ms for m in bench.compare({str(c): f for c, f in kv_fns.items()},
                                                           graph_below_ms=math.inf)}
    kv_ms = {c: kv_named[str(c)] for c in kv_fns}
    q_named = {m.name: m.median_ms for m in bench.compare({str(c): f for c, f in q_fns.items()},
                                                          graph_below_ms=math.inf)}
    q_ms = {c: q_named[str(c)] for c in q_fns}
    best_kv = min(kv_ms, key=kv_ms.get)
    best_q = min(q_ms, key=q_ms.get)
    triton_dq_ms = bench.compare({"t": lambda: launchers["dq"][2](tuned["dq"].config)},
                                 graph_below_ms=math.inf)[0].median_ms
    columns = FB.block_d(D)
    delta_h = torch.empty_like(lse)
    run_kv = GK.dkdv_launcher(q, k, v, o, lse, do, dk, dv, causal, best_kv, delta_h)
    run_q = GQ.dq_launcher(q, k, v, lse, do, dq, delta_h, causal, best_q)

    def gluon_backward():
        FB.flash_delta_kernel[(triton.cdiv(S, 64), B * H)](
            o, do, delta_h, *FB.head_strides(o, do), H, S, HEAD_DIM=D, BLOCK_D=columns, BLOCK_M=64)
        run_kv()
        run_q()
    gluon_backward()
    torch.cuda.synchronize()
    errs = {"dq": rel(dq, dq_t), "dk": rel(dk, dk_t), "dv": rel(dv, dv_t)}
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
    ms = {m.name: m.median_ms for m in bench.compare(
        {"cuDNN": lambda: torch.autograd.grad(out, leaves, do, retain_graph=True),
         "reference": lambda: FB.flash_backward(q, k, v, o, lse, do, causal),
         "gluon dk/dv + gluon dq": gluon_backward}, graph_below_ms=math.inf)}
    print(f"{title}: dk/dv {kv_ms[best_kv]:.3f} ms {best_kv}; dq {q_ms[best_q]:.3f} ms {best_q} "
          f"(Triton's tuned dq {triton_dq_ms:.3f}; others " +
          ", ".join(f"{c} {t:.3f}" for c, t in q_ms.items() if c != best_q) + ")", flush=True)
    print("   " + "  ".join(f"{n} {t:.3f} ms ({ms['cuDNN'] / t:.3f}x cuDNN)" for n, t in ms.items())
          + "  | vs the reference's grads: " + " ".join(f"{n} {e:.1e}" for n, e in errs.items()),
          flush=True)
    record["backward"][title] = {"ms": ms, "dkdv_ms": {str(c): t for c, t in kv_ms.items()},
                                 "dq_ms": {str(c): t for c, t in q_ms.items()},
                                 "triton_dq_ms": triton_dq_ms, "errors": errs}
    json.dump(record, open(os.path.join(OUT, "diag-29.json"), "w"), indent=1, default=str)
    del q, k, v, o, lse, do, delta, out, leaves, grads, launchers, kv_fns, q_fns, run_kv, run_q
    torch.cuda.empty_cache()
