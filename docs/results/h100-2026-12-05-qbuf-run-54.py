"""GPU: flash_hopper's ws kernel on the persistent grid with q single- and double-buffered
(q_buffers forced to 1 or 2), on issue 18's non-causal head-size-128 rows (and rows 2 and 5
for the other cases), against the one-tile-a-program grid and cuDNN. Each variant checked
against flash.py first (outputs start as NaN). From the repo root:
  env PYTHONPATH=$PWD:$PWD/benchmarks python docs/results/h100-2026-12-05-qbuf-run-54.py --out F"""
import argparse, json
import torch
from tilegym_edu import bench, device
from tilegym_edu.reference import flash, flash_hopper
from attention_shapes import FORWARD, BACKENDS, inputs, relative, score_pairs, sdpa, title


def launch_with_buffers(q, k, v, o, lse, causal, config, buffers):
    real = flash_hopper.q_buffers
    flash_hopper.q_buffers = lambda persistent, *a: buffers if persistent else 1
    try:
        flash_hopper.launch_hopper_flash(q, k, v, o, lse, causal, config)
    finally:
        flash_hopper.q_buffers = real


def main(rows, out):
    record = {"facts": str(device.info()), "rows": {}}
    for row in rows:
        b, h, hkv, sq, sk, d, causal, _ = row
        q, k, v = inputs(row)
        ref_o, ref_lse = flash.flash_forward(q, k, v, causal)
        fns, errors = {}, {}
        for cfg in ((128, 128, 2, "persistent"), (192, 128, 2, "persistent")):
            for buffers in (1, 2):
                name = f"{cfg[0]}x{cfg[1]} persistent, q x{buffers}"
                o = torch.full_like(q, float("nan"))
                lse = torch.full_like(ref_lse, float("nan"))
                try:
                    launch_with_buffers(q, k, v, o, lse, causal, cfg, buffers)
                    torch.cuda.synchronize()
                except Exception as e:   # does not fit: say so and go on
                    errors[name] = {"error": str(e)[:200]}
                    continue
                err = relative(o, ref_o.float())
                lerr = (lse - ref_lse).abs().max().item()
                errors[name] = {"rel": err, "lse": lerr, "ok": err < 5e-3 and lerr < 1e-2}
                if errors[name]["ok"]:
                    fns[name] = (lambda o=o, lse=lse, c=cfg, n=buffers:
                                 launch_with_buffers(q, k, v, o, lse, causal, c, n))
        o, lse = torch.empty_like(q), torch.empty_like(ref_lse)
        fns["128x128 one tile a program"] = lambda: flash_hopper.launch_hopper_flash(
            q, k, v, o, lse, causal, (128, 128, 2, "specialised"))
        fns["SDPA cuDNN"] = sdpa(BACKENDS["SDPA cuDNN"], q, k, v, causal)
        results = bench.compare(fns, flops=4 * d * score_pairs(b, h, sq, sk, causal), rep_ms=300)
        print("==", title(row), flush=True)
        print("errors:", json.dumps(errors), flush=True)
        bench.print_table(results, baseline="SDPA cuDNN")
        record["rows"][title(row)] = {"errors": errors, "results": {
            m.name: {"median_ms": m.median_ms, "tflops": m.tflops, "runs": m.runs,
                     "sm_clock_mhz": m.sm_clock_mhz} for m in results}}
        if out:
            json.dump(record, open(out, "w"), indent=1, default=str)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, nargs="*", default=[0, 4, 2, 5])
    p.add_argument("--out")
    a = p.parse_args()
    main([FORWARD[i] for i in a.rows], a.out)
