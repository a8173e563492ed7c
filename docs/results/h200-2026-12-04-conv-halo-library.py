"""Session 2026-12-04 (fourth): the library's halo path (conv_halo) on issue 19's layers against
cuDNN and conv_hopper's current winner, every configuration of HALO_CONV_SPACE plus a run's own
extra candidates (its prune's waste limit ignored), each checked against float32 F.conv2d
first, then timed interleaved as CUDA graphs (L2 flushed), the best five again with more runs.

    PYTHONPATH=. OUT=folder python docs/results/h200-2026-12-04-conv-halo-library.py 15
    PYTHONPATH=. OUT=folder python docs/results/h200-2026-12-04-conv-halo-library.py 16

Run 15: the three layers below target, more orders and deeper rings. Run 16: N32 and N64 C512
7², 64-column tiles of three programs an SM, 128-channel blocks, 16-image boxes. Run 19: N32
C512 7², 128 x 64 tiles one program an SM with rings of 4-8 stages (fewer filter bytes a flop).
(Run 15 ran HALO_CONV_CONFIGS of commit a65bc9f.)"""
import tilegym_edu  # noqa
import json, math, os, sys, time
import torch, torch.nn.functional as F
from tilegym_edu import bench, tune
from tilegym_edu.reference import conv_halo, conv_hopper
from tilegym_edu.reference import convolution as conv

RUN = sys.argv[1] if len(sys.argv) > 1 else "16"
LAYERS = {"5x5": (8, 96, 65, 67, 40, 5, 2), "n64c64": (64, 64, 56, 56, 64, 3, 1),
          "c512": (32, 512, 7, 7, 512, 3, 1), "n64c512": (64, 512, 7, 7, 512, 3, 1)}
RUN_LAYERS = {"15": ("5x5", "n64c64", "c512"), "16": ("c512", "n64c512"), "19": ("c512",)}[RUN]
CURRENT = {"5x5": (128, 64, 32, 6, 1, 4), "n64c64": (128, 64, 64, 3, 1, 4),
           "c512": (128, 128, 64, 4, 2, 4), "n64c512": (128, 128, 64, 4, 1, 4)}
C512_16 = [("hnw", 8, 8, 1, 64, 32, 4, 1, 4), ("hnw", 8, 8, 1, 64, 128, 2, 1, 4),
           ("hwn", 8, 1, 8, 64, 32, 4, 1, 4), ("hwn", 8, 1, 8, 64, 64, 2, 1, 4),
           ("hwn", 8, 1, 8, 64, 128, 2, 1, 4), ("hnw", 8, 8, 1, 64, 64, 2, 1, 4),
           ("hwn", 8, 1, 16, 64, 64, 3, 1, 8), ("hwn", 8, 1, 16, 128, 64, 3, 1, 8),
           ("hwn", 8, 1, 16, 128, 32, 4, 1, 8)]
EXTRA = {"15": {"c512": [("hnw", 8, 8, 1, 64, 64, 3, 1, 4), ("hnw", 8, 8, 1, 64, 64, 2, 1, 4),
                         ("hnw", 8, 8, 1, 64, 32, 5, 1, 4), ("hnw", 8, 8, 1, 64, 32, 6, 1, 4),
                         ("hnw", 8, 16, 1, 64, 64, 3, 1, 4), ("hnw", 8, 16, 1, 64, 64, 3, 1, 8),
                         ("hnw", 8, 8, 1, 128, 32, 4, 1, 4), ("hnw", 8, 8, 1, 128, 64, 2, 1, 4),
                         ("hwn", 8, 1, 8, 128, 64, 3, 1, 4), ("hwn", 8, 1, 8, 64, 64, 3, 1, 4),
                         ("hnw", 8, 16, 1, 128, 32, 4, 1, 8), ("hnw", 8, 16, 1, 128, 64, 3, 1, 8),
                         ("hnw", 8, 8, 1, 128, 64, 3, 2, 4), ("hnw", 8, 8, 1, 64, 64, 3, 2, 4)],
                "n64c64": [("hnw", 8, 4, 8, 64, 32, 4, 1, 8), ("hnw", 8, 4, 8, 64, 64, 3, 1, 8),
                           ("hwn", 8, 8, 4, 64, 32, 3, 1, 8)],
                "5x5": [("hwn", 8, 2, 8, 64, 32, 3, 1, 4), ("hwn", 8, 4, 8, 64, 32, 2, 1, 8)]},
         "16": {"c512": C512_16, "n64c512": C512_16},
         "19": {"c512": [("hnw", 8, 16, 1, 64, 64, 4, 1, 4), ("hnw", 8, 16, 1, 64, 64, 5, 1, 4),
                         ("hnw", 8, 16, 1, 64, 64, 4, 1, 8), ("hnw", 8, 16, 1, 64, 64, 5, 1, 8),
                         ("hwn", 8, 1, 16, 64, 64, 4, 1, 4), ("hwn", 8, 1, 16, 64, 64, 5, 1, 8),
                         ("hnw", 8, 16, 1, 64, 32, 8, 1, 4), ("hnw", 8, 16, 1, 64, 32, 8, 1, 8)]}}[RUN]
record = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
          "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
          "triton": __import__("triton").__version__, "cudnn": torch.backends.cudnn.version(),
          "layers": {}}
res = tune.Resources.of_gpu()
for key in RUN_LAYERS:
    N, C, H, W, K, R, pad = LAYERS[key]
    torch.manual_seed(0)
    x = torch.randn(N, C, H, W, device="cuda", dtype=torch.float16).contiguous(memory_format=torch.channels_last)
    w = (torch.randn(K, C, R, R, device="cuda", dtype=torch.float16) / (C * R * R) ** 0.5).contiguous(memory_format=torch.channels_last)
    P, Q = conv.check_conv_inputs(x, w, 1, pad)
    expected = F.conv2d(x.float(), w.float(), padding=pad)
    problem = {"N": N, "C": C, "H": H, "W": W, "K": K, "R": R, "S": R, "stride": (1, 1),
               "padding": (pad, pad), "dilation": (1, 1)}
    fns = {"cuDNN": lambda: F.conv2d(x, w, padding=pad)}
    cur = dict(zip(conv_hopper.HOPPER_CONV_NAMES, CURRENT[key]))
    yc = conv.new_output(x, K, P, Q)
    fns[f"gluon {CURRENT[key]}"] = lambda: conv_hopper.launch_hopper_conv2d(x, w, yc, 1, pad, 1, cur)
    errors = {}
    for row in list(conv_halo.HALO_CONV_CONFIGS) + EXTRA.get(key, []):
        cfg = dict(zip(conv_halo.HALO_CONV_NAMES, row))
        why = conv_halo.halo_conv_prune(cfg, problem, res)
        if why and "rows per row" not in why:
            print(f"{key} skip {row}: {why}")
            continue
        y = conv.new_output(x, K, P, Q).fill_(math.nan)
        try:
            conv_halo.launch_halo_conv2d(x, w, y, 1, pad, 1, cfg)
            torch.cuda.synchronize()
        except Exception as e:
            print(f"{key} FAIL {row}: {type(e).__name__}: {str(e)[:300]}")
            continue
        err = ((y.float() - expected).norm() / expected.norm()).item()
        errors[str(row)] = err
        print(f"{key} check {row} rel {err:.2e}{'' if err < 2e-3 else ' WRONG'}{' (pruned: ' + why + ')' if why else ''}")
        if err < 2e-3:
            fns[f"halo {row}"] = lambda cfg=cfg, y=y: conv_halo.launch_halo_conv2d(x, w, y, 1, pad, 1, cfg)
    flops = conv.conv_flops(x, w, P, Q)
    results = bench.compare(fns, flops=flops, rep_ms=400, graph_below_ms=math.inf)
    ranked = sorted(results, key=lambda m: m.median_ms)
    keep = ["cuDNN"] + [m.name for m in ranked if m.name != "cuDNN"][:5]
    if f"gluon {CURRENT[key]}" not in keep:
        keep.append(f"gluon {CURRENT[key]}")
    again = bench.compare({n: fns[n] for n in keep}, flops=flops, rep_ms=1500, graph_below_ms=math.inf)
    cudnn = next(m for m in again if m.name == "cuDNN")
    print(f"== {key}: cuDNN {cudnn.median_ms*1e3:.1f} us (confirm), SM clock {cudnn.sm_clock_mhz}")
    for m in sorted(again, key=lambda m: m.median_ms):
        print(f"   {m.name:48s} {m.median_ms*1e3:6.1f} us  {m.p20_ms*1e3:6.1f}-{m.p80_ms*1e3:6.1f}  {cudnn.median_ms/m.median_ms:.3f}x")
    record["layers"][key] = {
        "shape": [N, C, H, W, K, R, pad], "errors": errors,
        "first": {m.name: {"median_us": m.median_ms * 1e3, "vs_cudnn": next(c for c in results if c.name == "cuDNN").median_ms / m.median_ms} for m in results},
        "confirm": {m.name: {"median_us": m.median_ms * 1e3, "p20_us": m.p20_ms * 1e3, "p80_us": m.p80_ms * 1e3, "vs_cudnn": cudnn.median_ms / m.median_ms, "sm_clock_mhz": m.sm_clock_mhz} for m in again}}
    json.dump(record, open(os.path.join(os.environ.get("OUT", "."), f"halo-explore-{RUN}.json"), "w"), indent=1)
