# Run 44 of 2026-12-05 (H200), the driver as it ran at commit 5a38c5d, from .gpu/overlap/: an experiment,
# not part of the package. Its result: docs/results/h200-2026-12-05-overlap-run-44.json, docs/results/h200.md.
"""GPU: flash_overlap's kernel (persistent, balanced schedule, double-buffered q, cross-tile
overlap) against the library's tuned forward and cuDNN on issue 18's rows.

--smoke: every config on small odd problems against float64 (seq_q != seq_k, grouped-query,
192-row tiles, programs with one tile); run it first, alone, under `timeout` (a hang or a fault
poisons the process). Otherwise: correctness on each row (o against float32 PyTorch or flash.py,
lse against flash.py's; outputs start as NaN so unwritten rows fail), then one interleaved
bench.compare a row. Run from the repo root:
  P="PYTHONPATH=$PWD:$PWD/benchmarks:$PWD/.gpu/overlap"
  env $P timeout 120 python .gpu/overlap/run_overlap.py --smoke
  env $P timeout 400 python .gpu/overlap/run_overlap.py --rows 5 2 1 --out $OUT/overlap.json"""
import argparse
import json

import torch

from tilegym_edu import bench, device
from tilegym_edu.reference import flash, flash_hopper
from attention_shapes import FORWARD, BACKENDS, inputs, relative, score_pairs, sdpa, title
from flash_overlap import launch_overlap

CONFIGS = {64: [(128, 128, 2, True), (128, 128, 2, False), (128, 128, 3, True),
                (192, 128, 2, False), (192, 128, 2, True), (128, 64, 3, True)],
           128: [(128, 128, 2, True), (128, 128, 2, False), (128, 64, 3, True)]}
#: (batch, heads, kv_heads, seq_q, seq_k, head_dim, causal, dtype)
SMOKE = [(2, 4, 4, 512, 1024, 64, True, "float16"), (3, 16, 4, 1280, 1280, 64, True, "float16"),
         (1, 1, 1, 128, 128, 64, True, "float16"), (2, 8, 2, 384, 1152, 128, True, "bfloat16"),
         (1, 2, 2, 640, 640, 128, False, "float16"), (1, 3, 1, 1152, 1152, 64, False, "bfloat16")]
TOLERANCE = {torch.float16: 1e-3, torch.bfloat16: 5e-3}


def launch(q, k, v, causal, config):
    """(o, lse) of one launch, both starting as NaN."""
    o = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:3], float("nan"), device=q.device, dtype=torch.float32)
    launch_overlap(q, k, v, o, lse, causal, config)
    torch.cuda.synchronize()
    return o, lse


def check(row, q, k, v, ref, ref_lse, config) -> dict:
    o, lse = launch(q, k, v, row[6], config)
    err, worst = relative(o, ref), (o.float() - ref).abs().max().item()
    lse_err = (lse - ref_lse).abs().max().item()
    ok = err < TOLERANCE[q.dtype] and worst < 1e-2 * max(1.0, ref.abs().max().item()) \
        and lse_err < 1e-2
    return {"rel_error": err, "max_abs": worst, "lse_max_abs": lse_err, "ok": ok}


def smoke() -> None:
    failures = 0
    for row in SMOKE:
        q, k, v = inputs(row)
        ref = flash.attention_reference(q.double(), k.double(), v.double(), row[6]).float()
        _, ref_lse = flash.flash_forward(q, k, v, row[6])
        for config in CONFIGS[row[5]]:
            result = check(row, q, k, v, ref, ref_lse, config)
            failures += not result["ok"]
            print(title(row), config, json.dumps(result), flush=True)
    print("smoke:", "all right" if not failures else f"{failures} wrong", flush=True)


def measure(rows, out) -> None:
    record = {"facts": str(device.info()), "rows": {}}
    for row in rows:
        b, h, hkv, sq, sk, d, causal, _ = row
        q, k, v = inputs(row)
        ref_o, ref_lse = flash.flash_forward(q, k, v, causal)
        ref = (flash.attention_reference(q.float(), k.float(), v.float(), causal)
               if score_pairs(b, h, sq, sk, False) <= 2**32 else ref_o.float())
        fns, errors = {}, {}
        for config in CONFIGS[d]:
            name = "ov " + " ".join(map(str, config))
            errors[name] = check(row, q, k, v, ref, ref_lse, config)
            if errors[name]["ok"]:
                o, lse = torch.empty_like(q), torch.empty_like(ref_lse)
                fns[name] = (lambda o=o, lse=lse, c=config:
                             launch_overlap(q, k, v, o, lse, causal, c))
        del ref
        fns["reference"] = lambda: flash_hopper.attention_forward(q, k, v, causal)
        fns["SDPA cuDNN"] = sdpa(BACKENDS["SDPA cuDNN"], q, k, v, causal)
        fns["reference"]()  # tuned before timing
        results = bench.compare(fns, flops=4 * d * score_pairs(b, h, sq, sk, causal), rep_ms=300)
        print("==", title(row), flush=True)
        print("errors:", json.dumps(errors), flush=True)
        bench.print_table(results, baseline="SDPA cuDNN")
        record["rows"][title(row)] = {
            "errors": errors,
            "results": {m.name: {"median_ms": m.median_ms, "tflops": m.tflops, "runs": m.runs,
                                 "sm_clock_mhz": m.sm_clock_mhz} for m in results}}
        if out:
            json.dump(record, open(out, "w"), indent=1, default=str)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--rows", type=int, nargs="*", default=[5, 2, 1, 0, 3, 4, 6, 9],
                        help="indexes into attention_shapes.FORWARD (5: B8 H16 S2048 D64 causal)")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.smoke:
        smoke()
    else:
        measure([FORWARD[i] for i in args.rows], args.out)
