"""Session 2026-12-04 (fifth), run 23: why the tuner's race of run 21 picked a depthwise
configuration 1.31x slower than ones it dropped (MobileNetV2's 112² layer, N32 C96, stride 2).
1. Each candidate's host time a launch (bench.host_time_ms, three times): near the 0.1 ms above
   which bench.compare stops timing a call as a CUDA graph?
2. Four rounds of the old gpu_measure (one bench.compare a round, every candidate): which
   candidates were timed as a graph in one round and as plain launches in another, and what
   that did to their medians.
3. Every candidate as a graph, 300 ms each: the GPU's own ranking.
4. tune.autotune with the new gpu_measure, three times, no cache: its winners in that ranking."""
import tilegym_edu  # noqa
import json, os, statistics, time
import torch
from tilegym_edu import bench, tune
from tilegym_edu.reference import conv_groups
from tilegym_edu.reference import convolution as conv

torch.manual_seed(0)
N, C, H, W, stride, padding = 32, 96, 112, 112, 2, 1
x = torch.randn(N, C, H, W, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
w = (torch.randn(C, 1, 3, 3, device="cuda", dtype=torch.float16) / 3).contiguous(memory_format=torch.channels_last)
launch = lambda c: conv_groups.depthwise_conv2d(x, w, stride, padding, 1, c)  # noqa: E731
problem = {**conv.conv_problem(x, w, stride, padding, 1), "groups": C}
kept, _ = conv_groups.DEPTHWISE_SPACE.candidates(1, problem, tune.Resources.of_gpu())
for c in kept:
    launch(c)
torch.cuda.synchronize()
record = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "gpu": torch.cuda.get_device_name(),
          "torch": torch.__version__, "triton": __import__("triton").__version__, "candidates": {}}
fns = {str(c): (lambda c=c: launch(c)) for c in kept}
host = {name: [bench.host_time_ms(fn, 2) for _ in range(3)] for name, fn in fns.items()}
rounds = []
for r in range(4):
    results = bench.compare(fns, warmup_ms=2, rep_ms=1, max_runs=5)
    rounds.append({m.name: (m.cuda_graph, m.median_ms) for m in results})
truth = {m.name: m.median_ms for m in bench.compare(fns, rep_ms=300, graph_below_ms=float("inf"))}
best = min(truth.values())
print(f"{'candidate':64s} host ms (x3)         rounds: graph? median ms            all-graph ms")
for name in sorted(truth, key=truth.get):
    flips = len({rounds[r][name][0] for r in range(4)}) > 1
    cells = " ".join(f"{'G' if rounds[r][name][0] else 'P'}{rounds[r][name][1]:.4f}" for r in range(4))
    print(f"{name:64s} {' '.join(f'{t:.3f}' for t in host[name])}  {cells} {truth[name]:.4f} ({truth[name]/best:.2f}x){' FLIPS' if flips else ''}")
    record["candidates"][name] = {"host_ms": host[name], "rounds": [rounds[r][name] for r in range(4)],
                                  "all_graph_ms": truth[name]}
print("candidates timed both ways in four rounds:", sum(len({rounds[r][n][0] for r in range(4)}) > 1 for n in truth), "of", len(truth))
record["new_tuner"] = []
for attempt in range(3):
    result = tune.autotune(conv_groups.DEPTHWISE_KERNELS, problem, conv_groups.DEPTHWISE_SPACE, launch,
                           level=1, min_ms=0, cache=False, progress=False)
    name = str(result.config)
    print(f"new tuner, attempt {attempt + 1}: {name}: all-graph {truth[name]:.4f} ms ({truth[name]/best:.2f}x the best), {result.seconds:.1f} s")
    record["new_tuner"].append({"winner": name, "all_graph_ms": truth[name], "seconds": result.seconds})
json.dump(record, open(os.path.join(os.environ.get("OUT", "."), "race-23.json"), "w"), indent=1)
