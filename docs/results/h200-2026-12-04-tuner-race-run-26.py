"""Next session, run 26 (prepared 2026-12-04, not yet run): why did a race timed as CUDA graphs
fail to rank lesson 03's persistent-matmul candidates (8192 x 8192 x 512 fp16; run 25 kept all 7
through 4 rounds and picked one at 0.75x cuBLAS), where plain launches (2026-12-01) narrowed to 3
and won at 0.97x? The reference's kernel and space (pipelined.launch_persistent,
PERSISTENT_SPACE), each candidate: host time, its GPU time as a graph over 300 ms (the ranking),
and the samples of four race-sized rounds (5 runs each) as graphs and as plain launches; then
three races each way (tune.autotune, no cache) and where their winners rank."""
import tilegym_edu  # noqa
import json, math, os, statistics, time
import torch
from tilegym_edu import bench, tune
from tilegym_edu.reference import pipelined

torch.manual_seed(0)
M = N = 8192
K = 512
a = torch.randn(M, K, device="cuda", dtype=torch.float16)
b = torch.randn(K, N, device="cuda", dtype=torch.float16)
c = pipelined.tma_output(a, b)
launch = lambda cfg: pipelined.launch_persistent(a, b, c, cfg)  # noqa: E731
problem = {"M": M, "N": N, "K": K, "dtype": "float16"}
kept, _ = pipelined.PERSISTENT_SPACE.candidates(1, problem, tune.Resources.of_gpu())
for cfg in kept:
    launch(cfg)
torch.cuda.synchronize()
fns = {str(cfg): (lambda cfg=cfg: launch(cfg)) for cfg in kept}
cublas = bench.compare({"cuBLAS": lambda: torch.matmul(a, b)}, rep_ms=300, graph_below_ms=math.inf)[0]
truth = {m.name: m.median_ms for m in bench.compare(fns, rep_ms=300, graph_below_ms=math.inf)}
best = min(truth.values())
print(f"cuBLAS {cublas.median_ms:.4f} ms; candidates as graphs, 300 ms each:")
replays = {name: bench.graph_replay(fn) for name, fn in fns.items()}
record = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "gpu": torch.cuda.get_device_name(),
          "cublas_ms": cublas.median_ms, "candidates": {}}
for name in sorted(truth, key=truth.get):
    host = bench.host_time_ms(fns[name], 2)
    rounds = {"graph": [], "plain": []}
    for _ in range(4):
        g = bench.compare({name: replays[name]}, warmup_ms=2, rep_ms=1, max_runs=5, graphed=[name])[0]
        p = bench.compare({name: fns[name]}, warmup_ms=2, rep_ms=1, max_runs=5, graph_below_ms=0)[0]
        rounds["graph"].append(list(g.times_ms))
        rounds["plain"].append(list(p.times_ms))
    flat = {k: [t for r in v for t in r] for k, v in rounds.items()}
    print(f"  {name:90s} {truth[name]:.4f} ({truth[name] / best:.2f}x, {cublas.median_ms / truth[name]:.2f}x cuBLAS) host {host:.3f}"
          f" | rounds as graphs min/med/max {min(flat['graph']):.4f}/{statistics.median(flat['graph']):.4f}/{max(flat['graph']):.4f}"
          f" plain {min(flat['plain']):.4f}/{statistics.median(flat['plain']):.4f}/{max(flat['plain']):.4f}")
    record["candidates"][name] = {"graph_ms": truth[name], "host_ms": host, "rounds": rounds}
for label, below in (("graphs", math.inf), ("plain", 0.0)):
    for attempt in range(3):
        result = tune.autotune(pipelined.persistent_matmul_kernel, problem, pipelined.PERSISTENT_SPACE, launch,
                               level=1, cache=False, progress=False,
                               measure=tune.gpu_measure(launch, graph_below_ms=below))
        name = str(result.config)
        kept_n = sum(t.status in ("winner", "raced") for t in result.trials)
        print(f"race as {label}, attempt {attempt + 1}: {name}: {truth[name] / best:.2f}x the best, {kept_n} left after the rounds")
        record.setdefault("races", []).append({"as": label, "winner": name, "vs_best": truth[name] / best, "left": kept_n})
json.dump(record, open(os.path.join(os.environ.get("OUT", "."), "race-26.json"), "w"), indent=1)
