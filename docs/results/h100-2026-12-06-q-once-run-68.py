"""Run 68 (H100, 2026-12-06; persistent_q_once in the tree, as 26b7404 had it, on 2987b64;
its log h100-2026-12-06-gpu-run-68-q-once.log): why the tuner's race and
an interleaved timing disagree on B4 H32 S4096 D128 causal (run 67). For fp16 and bf16: the
three 128 x 128 ws schedules and cuDNN, (a) as plain launches, 1 s of interleaved runs, and
(b) as CUDA-graph replays, each with median, p20-p80 and the SM clocks seen; then (c) the
library's race itself, three times (cache off), with the winner each time."""
import tilegym_edu  # noqa: F401
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from tilegym_edu import bench, tune
from tilegym_edu.reference import flash_hopper as fh

SCHEDULES = ("specialised", "persistent", "persistent_q_once")
for dtype in (torch.float16, torch.bfloat16):
    q, k, v = (torch.randn(4, 32, 4096, 128, device="cuda", dtype=dtype) for _ in range(3))
    o, lse = torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)
    fns = {s: (lambda s=s: fh.launch_hopper_flash(q, k, v, o, lse, True, (128, 128, 2, s)))
           for s in SCHEDULES}

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    fns["cuDNN"] = cudnn
    for label, graphed in (("plain", []), ("graphs", list(fns))):
        print(f"== {dtype} {label}")
        for m in bench.compare(fns, rep_ms=1000, graph_below_ms=0, graphed=graphed):
            times = sorted(m.times_ms)
            print(f"{m.name:20s} median {m.median_ms:.4f}  p20 {times[len(times) // 5]:.4f}  "
                  f"p80 {times[4 * len(times) // 5]:.4f}  runs {m.runs}  clock {m.sm_clock_mhz}")
    for attempt in range(3):
        problem = {**fh.flash_problem(q, k, True), "attempt": attempt}
        result = tune.autotune(fh.HOPPER_KERNELS, problem, fh.HOPPER_SPACE,
                               lambda c: fh.launch_hopper_flash(q, k, v, o, lse, True, c),
                               cache=False, progress=False)
        print("race", attempt, dict(result.config), f"clock {result.sm_clock_mhz}")
        print(result.table())
