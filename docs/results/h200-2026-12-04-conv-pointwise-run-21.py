"""Session 2026-12-04 (fifth), run 21: the 1x1 layers of issue 19's suite on conv_hopper with
their pixels as one row (pixels_in_one_row: boxes of BLOCK_M consecutive pixels, no waste) --
every HOPPER_CONV_CONFIGS row checked against float32 F.conv2d (output filled with NaN first),
then timed with cuDNN and the persistent 1x1 kernel's space, CUDA graphs, L2 flushed; the best
five again with more runs. Run 17's figures for the same layers are the images' boxes."""
import tilegym_edu  # noqa
import json, math, os, time
import torch, torch.nn.functional as F
from tilegym_edu import bench, tune
from tilegym_edu.reference import conv_hopper, conv_persistent
from tilegym_edu.reference import convolution as conv

LAYERS = {"1x1 C1024 14² K256": (32, 1024, 14, 14, 256), "1x1 C512 7² K2048": (32, 512, 7, 7, 2048),
          "1x1 C64 56² K256": (32, 64, 56, 56, 256), "1x1 C256 56² K64": (32, 256, 56, 56, 64)}
record = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "gpu": torch.cuda.get_device_name(),
          "torch": torch.__version__, "triton": __import__("triton").__version__,
          "cudnn": torch.backends.cudnn.version(), "layers": {}}
res = tune.Resources.of_gpu()
for key, (N, C, H, W, K) in LAYERS.items():
    torch.manual_seed(0)
    x = torch.randn(N, C, H, W, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    w = (torch.randn(K, C, 1, 1, device="cuda", dtype=torch.float16) / C ** 0.5).contiguous(memory_format=torch.channels_last)
    expected = F.conv2d(x.float(), w.float())
    problem = conv_persistent.shape_conv_problem(x, w, 1, 0, 1)
    fns = {"cuDNN": lambda: F.conv2d(x, w)}
    errors = {}
    for row in conv_hopper.HOPPER_CONV_CONFIGS:
        cfg = dict(zip(conv_hopper.HOPPER_CONV_NAMES, row))
        if conv_hopper.hopper_conv_prune(cfg, problem, res):
            continue
        y = conv.new_output(x, K, H, W).fill_(math.nan)
        conv_hopper.launch_hopper_conv2d(x, w, y, 1, 0, 1, cfg)
        err = ((y.float() - expected).norm() / expected.norm()).item()
        errors[f"gluon {row}"] = err
        print(key, "gluon", row, f"rel {err:.2e}", "" if err < 2e-3 else "WRONG")
        if err < 2e-3:
            fns[f"gluon {row}"] = lambda cfg=cfg, y=y: conv_hopper.launch_hopper_conv2d(x, w, y, 1, 0, 1, cfg)
    for cfg in conv_persistent.PERSISTENT_CONV_SPACE.candidates(1, problem, res)[0]:
        y = conv.new_output(x, K, H, W).fill_(math.nan)
        conv_persistent.launch_persistent_conv2d(x, w, y, 1, 0, 1, dict(cfg))
        err = ((y.float() - expected).norm() / expected.norm()).item()
        name = "persistent " + str(tuple(cfg.values()))
        errors[name] = err
        if err < 2e-3:
            fns[name] = lambda cfg=dict(cfg), y=y: conv_persistent.launch_persistent_conv2d(x, w, y, 1, 0, 1, cfg)
    flops = conv.conv_flops(x, w, H, W)
    results = bench.compare(fns, flops=flops, rep_ms=300, graph_below_ms=math.inf)
    ranked = [m.name for m in sorted(results, key=lambda m: m.median_ms) if m.name != "cuDNN"]
    again = bench.compare({n: fns[n] for n in ["cuDNN", *ranked[:5]]}, flops=flops, rep_ms=1500,
                          graph_below_ms=math.inf)
    cudnn = next(m for m in again if m.name == "cuDNN")
    first_cudnn = next(m for m in results if m.name == "cuDNN")
    print(f"== {key}: box {conv_hopper.box_shape(64, 1, 1, N * H * W)} for 64 rows; first pass, top 8:")
    for m in sorted(results, key=lambda m: m.median_ms)[:8]:
        print(f"   {m.name:52s} {m.median_ms*1e3:7.2f} us {first_cudnn.median_ms/m.median_ms:.3f}x")
    print(f"   confirm (SM clock {cudnn.sm_clock_mhz} MHz):")
    for m in sorted(again, key=lambda m: m.median_ms):
        print(f"   {m.name:52s} {m.median_ms*1e3:7.2f} us {m.p20_ms*1e3:7.2f}-{m.p80_ms*1e3:7.2f} {cudnn.median_ms/m.median_ms:.3f}x")
    record["layers"][key] = {"shape": [N, C, H, W, K], "errors": errors,
                             "first": {m.name: {"median_us": m.median_ms * 1e3, "vs_cudnn": first_cudnn.median_ms / m.median_ms} for m in results},
                             "confirm": {m.name: {"median_us": m.median_ms * 1e3, "p20_us": m.p20_ms * 1e3, "p80_us": m.p80_ms * 1e3,
                                                  "vs_cudnn": cudnn.median_ms / m.median_ms, "sm_clock_mhz": m.sm_clock_mhz} for m in again}}
    json.dump(record, open(os.path.join(os.environ.get("OUT", "."), "pointwise-21.json"), "w"), indent=1)
