"""Run 35 (2026-12-04): dk, dv and dq in one pass (h200-2026-12-04-one-pass-run-35-kernels.py), dq's share
of each (key block, query block) reduce-added by TMA (cp.reduce.async.bulk.tensor) into a
float32 accumulator. Schedules: "one" (one warpgroup of 64 keys), "ws" (producer warp, two
consumers of 64 keys, each reducing its own share), "ws2" (FlashAttention-3's split: both
consumers' dS^T in shared memory, each consumer reducing half of dq's columns over all 128
keys); ROTATE: non-causal programs start their walk over the query blocks at their own key
block's index, so programs running together reduce into different rows. Offline every
configuration compiles for sm_90a (.gpu/compile_fused.py, not kept).
  --part check: every configuration against float64 autograd (MHA and GQA, causal and not, D64
    and D128, float16, bfloat16 on one shape), outputs NaN-filled first, each run twice (dk
    and dv must repeat bit for bit: no atomics there); lines over tolerance end in WRONG.
  --part time: on the backward rows, each configuration alone (and the accumulator's zeroing),
    the best one's gradients against attention_backward's, then the one-pass backward (zero,
    delta, kernel, convert) against attention_backward (two passes) and cuDNN, interleaved.
Run: PYTHONPATH=$PWD python docs/results/h200-2026-12-04-one-pass-run-35.py --part check|time"""
import tilegym_edu  # noqa: F401
import argparse, importlib.util, math, os, time
import torch
import torch.nn.functional as F
import triton
from tilegym_edu import bench
from tilegym_edu.check import relative_error
from tilegym_edu.reference import flash, flash_backward as FB
from torch.nn.attention import SDPBackend, sdpa_kernel

spec = importlib.util.spec_from_file_location("fbh_fused", os.path.join(os.path.dirname(__file__), "h200-2026-12-04-one-pass-run-35-kernels.py"))
P = importlib.util.module_from_spec(spec)
spec.loader.exec_module(P)
CONFIGS = {str(r): dict(zip(P.FUSED_NAMES, r)) for r in P.FUSED_CONFIGS}


def case(B, H, KV, S, D, dtype, causal, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, do = (torch.randn(B, H, S, D, device="cuda", generator=g).to(dtype) for _ in range(2))
    k, v = (torch.randn(B, KV, S, D, device="cuda", generator=g).to(dtype) for _ in range(2))
    o, lse = flash.flash_forward(q, k, v, causal)
    return q, k, v, o, lse, do


def run(q, k, v, lse, delta, do, causal, c):
    """(dq, dk, dv) of one fused launch into NaN-filled outputs."""
    acc = torch.zeros(q.shape, dtype=torch.float32, device="cuda")
    dq, dk, dv = (torch.full_like(t, float("nan")) for t in (q, k, v))
    P.launch_fused(q, k, v, lse, delta, do, acc, dk, dv, causal, c)
    n = acc.numel()
    P._dq_convert_kernel[(triton.cdiv(n, 4096),)](acc, dq, 1 / math.sqrt(q.shape[-1]), n, BLOCK=4096)
    return dq, dk, dv


def check():
    bad = 0
    for (B, H, KV, S, D, dtype) in [(1, 4, 1, 384, 64, torch.float16), (2, 8, 2, 256, 128, torch.float16),
                                    (1, 2, 2, 1024, 128, torch.float16), (2, 4, 4, 256, 64, torch.float16),
                                    (1, 2, 2, 512, 128, torch.bfloat16)]:
        for causal in (False, True):
            q, k, v, o, lse, do = case(B, H, KV, S, D, dtype, causal)
            delta = FB.backward_delta(o, do)
            leaves = [t.double().requires_grad_() for t in (q, k, v)]
            flash.attention_reference(*leaves, causal).backward(do.double())
            tol = 3e-3 if dtype == torch.float16 else 2e-2
            for name, c in CONFIGS.items():
                try:
                    first = run(q, k, v, lse, delta, do, causal, c)
                    again = run(q, k, v, lse, delta, do, causal, c)
                    torch.cuda.synchronize()
                    errors = [relative_error(g_, l.grad) for g_, l in zip(first, leaves)]
                    repeats = torch.equal(first[1], again[1]) and torch.equal(first[2], again[2])
                    dq_drift = relative_error(again[0], first[0].double())
                except Exception as e:  # noqa: BLE001
                    errors, repeats, dq_drift = [float("inf")] * 3, False, float("inf")
                    print(f"  FAIL {name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                wrong = not (max(errors) <= tol and repeats)
                bad += wrong
                print(f"  B{B} H{H}/KV{KV} S{S} D{D} {str(dtype)[6:]} {'causal' if causal else 'full'} {name}: "
                      f"dq {errors[0]:.2e} dk {errors[1]:.2e} dv {errors[2]:.2e}, dk/dv repeat {repeats}, "
                      f"dq drift {dq_drift:.1e}{' WRONG' if wrong else ''}", flush=True)
    print(f"wrong: {bad}", flush=True)


ROWS = [(4, 32, 32, 4096, 128, False, torch.float16), (4, 32, 32, 4096, 128, True, torch.float16),
        (8, 16, 16, 2048, 64, True, torch.float16), (4, 32, 8, 4096, 128, True, torch.float16),
        (4, 32, 32, 4096, 64, False, torch.float16)]


def timing():
    for (B, H, KV, S, D, causal, dtype) in ROWS:
        print(f"== B{B} H{H}/KV{KV} S{S} D{D} {'causal' if causal else 'full'} {str(dtype)[6:]}",
              time.strftime("%H:%M:%S"), flush=True)
        q, k, v, o, lse, do = case(B, H, KV, S, D, dtype, causal)
        delta = FB.backward_delta(o, do)
        acc = torch.zeros(q.shape, dtype=torch.float32, device="cuda")
        dk, dv = torch.empty_like(k), torch.empty_like(v)
        alone = {n: (lambda c=c: P.launch_fused(q, k, v, lse, delta, do, acc, dk, dv, causal, c))
                 for n, c in CONFIGS.items()}
        alone["zero the accumulator"] = lambda: acc.zero_()
        ms = {m.name: m.median_ms for m in bench.compare(alone, graph_below_ms=math.inf)}
        print("  alone: " + ", ".join(f"{n} {t:.3f} ms" for n, t in ms.items()), flush=True)
        best = min(CONFIGS, key=ms.get)
        theirs = FB.attention_backward(q, k, v, o, lse, do, causal)  # tunes the library's race
        ours = run(q, k, v, lse, delta, do, causal, CONFIGS[best])
        print(f"  {best} against attention_backward: " + ", ".join(
            f"{n} {relative_error(a, b.double()):.1e}" for n, a, b in zip(("dq", "dk", "dv"), ours, theirs)),
            flush=True)
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            out = F.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=KV != H)
        ms = {m.name: m.median_ms for m in bench.compare(
            {"cuDNN": lambda: torch.autograd.grad(out, leaves, do, retain_graph=True),
             "attention_backward (two passes)": lambda: FB.attention_backward(q, k, v, o, lse, do, causal),
             f"one pass {best}": lambda: P.fused_backward(q, k, v, o, lse, do, causal, CONFIGS[best])},
            graph_below_ms=math.inf)}
        print("  backward: " + "  ".join(f"{n} {t:.3f} ms ({ms['cuDNN'] / t:.3f}x)" for n, t in ms.items()),
              flush=True)
    print("done", time.strftime("%H:%M:%S"), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--part", choices=["check", "time"], required=True)
    {"check": check, "time": timing}[parser.parse_args().part]()
