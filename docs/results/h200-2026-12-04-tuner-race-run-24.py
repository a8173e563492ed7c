"""Session 2026-12-04 (fifth), run 24: the tuner's race with RACE_GRAPH_BELOW_MS, a default
tried in that run and dropped after run 25 (every candidate a CUDA graph where the first
launches take under 1 ms of host time; the committed code races the depthwise kernels as graphs
by benchmarks/conv_groups.py's graph_below_ms=math.inf) on MobileNetV2's
depthwise 112² (stride 2) and 14² layers: each candidate's GPU time as a graph, 300 ms each (the
ranking), then tune.autotune three times without a cache, and where its winners rank."""
import tilegym_edu  # noqa
import json, os, time
import torch
from tilegym_edu import bench, tune
from tilegym_edu.reference import conv_groups
from tilegym_edu.reference import convolution as conv

record = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "gpu": torch.cuda.get_device_name(),
          "torch": torch.__version__, "triton": __import__("triton").__version__, "layers": {}}
for N, C, H, W, stride in ((32, 96, 112, 112, 2), (32, 384, 14, 14, 1)):
    torch.manual_seed(0)
    x = torch.randn(N, C, H, W, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    w = (torch.randn(C, 1, 3, 3, device="cuda", dtype=torch.float16) / 3).contiguous(memory_format=torch.channels_last)
    launch = lambda c, x=x, w=w, stride=stride: conv_groups.depthwise_conv2d(x, w, stride, 1, 1, c)  # noqa: E731
    problem = {**conv.conv_problem(x, w, stride, 1, 1), "groups": C}
    kept, _ = conv_groups.DEPTHWISE_SPACE.candidates(1, problem, tune.Resources.of_gpu())
    for c in kept:
        launch(c)
    fns = {str(c): (lambda c=c: launch(c)) for c in kept}
    truth = {m.name: m.median_ms for m in bench.compare(fns, rep_ms=300, graph_below_ms=float("inf"))}
    best = min(truth.values())
    layer = f"depthwise N{N} C{C} {H}x{W} stride {stride}"
    print(f"== {layer}: best {min(truth, key=truth.get)} {best * 1e3:.1f} us")
    rows = []
    for attempt in range(3):
        result = tune.autotune(conv_groups.DEPTHWISE_KERNELS, problem, conv_groups.DEPTHWISE_SPACE, launch,
                               level=1, min_ms=0, cache=False, progress=False)
        name = str(result.config)
        rank = sorted(truth, key=truth.get).index(name) + 1
        print(f"   tuner attempt {attempt + 1}: {name}: {truth[name] * 1e3:.1f} us ({truth[name] / best:.2f}x the best, rank {rank} of {len(truth)}), {result.seconds:.1f} s")
        rows.append({"winner": name, "graph_ms": truth[name], "rank": rank, "seconds": result.seconds})
    record["layers"][layer] = {"graph_ms": truth, "tuner": rows}
json.dump(record, open(os.path.join(os.environ.get("OUT", "."), "race-24.json"), "w"), indent=1)
