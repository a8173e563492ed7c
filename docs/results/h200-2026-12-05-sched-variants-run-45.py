"""EXPERIMENT: host schedules for flash_hopper's table-driven ws kernel (same compiled kernel,
different (order, starts)). List scheduling: tiles in a given order, each to the program that
frees first (simulated by key blocks + 1 a tile); a program's list kept in the order it takes
its tiles (its time order), or sorted by tile number (what tile_schedule.balanced does)."""
import heapq
import math
import torch


def blocks_for(n_m, seq_q, seq_k, bm, bn, causal):
    if not causal:
        return [seq_k // bn] * n_m
    shift = seq_k - seq_q
    return [min(math.ceil((m * bm + shift + bm) / bn), seq_k // bn) for m in range(n_m)]


def list_schedule(tiles, blocks, programs, sort_lists, per_tile=1.0):
    n_m = len(blocks)
    heap = [(0.0, p) for p in range(programs)]
    lists = [[] for _ in range(programs)]
    for t in tiles:
        load, p = heapq.heappop(heap)
        lists[p].append(t)
        heapq.heappush(heap, (load + blocks[t % n_m] + per_tile, p))
    if sort_lists:
        lists = [sorted(x) for x in lists]
    order = [t for x in lists for t in x]
    starts = [0]
    for x in lists:
        starts.append(starts[-1] + len(x))
    return torch.tensor(order, dtype=torch.int32), torch.tensor(starts, dtype=torch.int32)


def orders(n_bh, blocks):
    """name -> (tiles in order, sort_lists)"""
    n_m = len(blocks)
    lpt = sorted(range(n_bh * n_m), key=lambda t: (-blocks[t % n_m], t))
    head_major = [bh * n_m + m for bh in range(n_bh) for m in sorted(range(n_m), key=lambda m: -blocks[m])]
    out = {"lpt-sorted": (lpt, True), "lpt-time": (lpt, False), "heads-longest-first": (head_major, False)}
    for g in (8, 32):
        grouped = []
        for h0 in range(0, n_bh, g):
            group = [bh * n_m + m for bh in range(h0, min(n_bh, h0 + g)) for m in range(n_m)]
            grouped += sorted(group, key=lambda t: (-blocks[t % n_m], t))
        out[f"lpt-groups{g}"] = (grouped, False)
    return out


def schedules(n_bh, n_m, seq_q, seq_k, bm, bn, causal, programs):
    blocks = blocks_for(n_m, seq_q, seq_k, bm, bn, causal)
    return {name: list_schedule(tiles, blocks, programs, s) for name, (tiles, s) in orders(n_bh, blocks).items()}, blocks


# ---- the driver (run 45), variants above ----
"""GPU: flash_hopper's ws kernel, persistent (128, 128, 2), on each host schedule of
variants.py, against its one-tile-a-program grid ("specialised") and cuDNN, causal rows.
Each schedule is checked against flash.py first (outputs start as NaN). Run from the repo root:
  env PYTHONPATH=$PWD:$PWD/benchmarks python docs/results/h200-2026-12-05-sched-variants-run-45.py --out F"""
import argparse, json
import torch
from tilegym_edu import bench, device
from tilegym_edu.reference import flash, flash_hopper
from attention_shapes import FORWARD, BACKENDS, inputs, relative, score_pairs, sdpa, title


CONFIG = (128, 128, 2, "persistent")


def launch_with(q, k, v, o, lse, causal, config, table):
    real = flash_hopper.tile_schedule_on
    flash_hopper.tile_schedule_on = lambda *a: table
    try:
        flash_hopper.launch_hopper_flash(q, k, v, o, lse, causal, config)
    finally:
        flash_hopper.tile_schedule_on = real


def main(rows, out):
    record = {"facts": str(device.info()), "rows": {}}
    for row in rows:
        b, h, hkv, sq, sk, d, causal, _ = row
        q, k, v = inputs(row)
        ref_o, ref_lse = flash.flash_forward(q, k, v, causal)
        sms = torch.cuda.get_device_properties(q.device).multi_processor_count
        n_m = sq // 128
        tables, _ = schedules(b * h, n_m, sq, sk, 128, 128, causal, sms)
        fns, errors = {}, {}
        for name, (order, starts) in tables.items():
            table = (order.cuda(), starts.cuda())
            o = torch.full_like(q, float("nan"))
            lse = torch.full_like(ref_lse, float("nan"))
            launch_with(q, k, v, o, lse, causal, CONFIG, table)
            torch.cuda.synchronize()
            err = relative(o, ref_o.float())
            lerr = (lse - ref_lse).abs().max().item()
            errors[name] = {"rel": err, "lse": lerr, "ok": err < 5e-3 and lerr < 1e-2}
            if errors[name]["ok"]:
                fns[name] = (lambda o=o, lse=lse, t=table: launch_with(q, k, v, o, lse, causal, CONFIG, t))
        for cfg in (CONFIG, (128, 128, 2, "specialised")):
            o, lse = torch.empty_like(q), torch.empty_like(ref_lse)
            fns["library " + cfg[3]] = lambda o=o, lse=lse, c=cfg: flash_hopper.launch_hopper_flash(q, k, v, o, lse, causal, c)
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
    p.add_argument("--rows", type=int, nargs="*", default=[5, 1, 3, 9])
    p.add_argument("--out")
    a = p.parse_args()
    main([FORWARD[i] for i in a.rows], a.out)
