"""Session 2026-12-04 (fourth), run 18: the 1x1 C1024->256 14² layer (N32) against cuDNN with
conv_hopper configurations the space lacks: 64 x 64 tiles, three or four programs an SM (392
tiles: 3 of 0.5 units an SM at most, against 2 of 1 with 64 x 128), deeper rings."""
import tilegym_edu  # noqa
import json, math, os, time
import torch, torch.nn.functional as F
from tilegym_edu import bench
from tilegym_edu.reference import conv_hopper, conv_persistent
from tilegym_edu.reference import convolution as conv

LAYERS = {"1x1 C1024 14²": (32, 1024, 14, 14, 256), "1x1 C512 7² K2048": (32, 512, 7, 7, 2048)}
CANDS = [(64, 128, 64, 4, 1, 4), (64, 64, 64, 3, 1, 4), (64, 64, 64, 4, 1, 4), (64, 64, 64, 5, 1, 4),
         (64, 64, 64, 6, 1, 4), (64, 128, 64, 5, 1, 4), (64, 128, 64, 6, 1, 4), (64, 64, 32, 6, 1, 4),
         (64, 64, 32, 8, 1, 4), (128, 64, 64, 5, 1, 4), (64, 256, 64, 3, 1, 4), (128, 128, 64, 3, 1, 4)]
record = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "gpu": torch.cuda.get_device_name(),
          "torch": torch.__version__, "triton": __import__("triton").__version__,
          "cudnn": torch.backends.cudnn.version(), "layers": {}}
for key, (N, C, H, W, K) in LAYERS.items():
    torch.manual_seed(0)
    x = torch.randn(N, C, H, W, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    w = (torch.randn(K, C, 1, 1, device="cuda", dtype=torch.float16) / C ** 0.5).contiguous(memory_format=torch.channels_last)
    expected = F.conv2d(x.float(), w.float())
    fns = {"cuDNN": lambda: F.conv2d(x, w)}
    for row in CANDS:
        cfg = dict(zip(conv_hopper.HOPPER_CONV_NAMES, row))
        y = conv.new_output(x, K, H, W).fill_(math.nan)
        conv_hopper.launch_hopper_conv2d(x, w, y, 1, 0, 1, cfg)
        err = ((y.float() - expected).norm() / expected.norm()).item()
        print(key, row, f"rel {err:.2e}")
        if err < 2e-3:
            fns[f"gluon {row}"] = lambda cfg=cfg, y=y: conv_hopper.launch_hopper_conv2d(x, w, y, 1, 0, 1, cfg)
    flops = conv.conv_flops(x, w, H, W)
    results = bench.compare(fns, flops=flops, rep_ms=400, graph_below_ms=math.inf)
    ranked = [m.name for m in sorted(results, key=lambda m: m.median_ms) if m.name != "cuDNN"]
    again = bench.compare({n: fns[n] for n in ["cuDNN", *ranked[:5]]}, flops=flops, rep_ms=1500,
                          graph_below_ms=math.inf)
    cudnn = next(m for m in again if m.name == "cuDNN")
    first_cudnn = next(m for m in results if m.name == "cuDNN")
    print(f"== {key}: cuDNN {cudnn.median_ms*1e3:.2f} us, first pass:")
    for m in sorted(results, key=lambda m: m.median_ms):
        print(f"   {m.name:40s} {m.median_ms*1e3:6.2f} us {first_cudnn.median_ms/m.median_ms:.3f}x")
    print("   confirm:")
    for m in sorted(again, key=lambda m: m.median_ms):
        print(f"   {m.name:40s} {m.median_ms*1e3:6.2f} us {m.p20_ms*1e3:6.2f}-{m.p80_ms*1e3:6.2f} {cudnn.median_ms/m.median_ms:.3f}x")
    record["layers"][key] = {"first": {m.name: m.median_ms * 1e3 for m in results},
                             "confirm": {m.name: {"median_us": m.median_ms * 1e3, "p20_us": m.p20_ms * 1e3, "p80_us": m.p80_ms * 1e3,
                                                  "vs_cudnn": cudnn.median_ms / m.median_ms, "sm_clock_mhz": m.sm_clock_mhz} for m in again}}
    json.dump(record, open(os.path.join(os.environ.get("OUT", "."), "onebyone-18.json"), "w"), indent=1)
