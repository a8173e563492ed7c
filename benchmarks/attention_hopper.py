"""The Gluon forward for Hopper (reference/flash_hopper.py) against cuDNN, PyTorch's
FlashAttention and flash.py's Triton forward, on a GPU of compute capability 9.x: every
configuration of HOPPER_CONFIGS on issue 18's forward rows (head sizes 64 and 128, causal and
not, 1k to 16k tokens), in bfloat16 and with grouped-query heads, each checked against float32
PyTorch (or, where the scores do not fit, against cuDNN) before it is timed. TFLOP/s count the
score pairs each query sees, 4·d FLOPs a pair, as benchmarks/attention_shapes.py does.

    python benchmarks/attention_hopper.py --out attention-hopper.json
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import torch

from tilegym_edu import bench
from tilegym_edu.reference import flash, flash_hopper

from attention_shapes import (BACKENDS, FORWARD, inputs, relative, score_pairs, sdpa, title,
                              tuned_forward)
from record import finish, header, options, write

#: attention_shapes' forward rows that the Gluon kernels take (issue 18's table, bfloat16,
#: grouped-query heads, a chunk of prefill), and at head size 64 bfloat16 and causal at 4096
ROWS = [row for row in FORWARD if row[5] in flash_hopper.HOPPER_HEAD_DIMS
        and row[3] % flash_hopper.HOPPER_SEQ_MULTIPLE == 0]
ROWS += [(4, 32, 32, 4096, 4096, 64, False, "bfloat16"),
         (4, 32, 32, 4096, 4096, 64, True, "float16")]


def hopper(q, k, v, causal, config):
    o = torch.empty_like(q)
    lse = q.new_empty(q.shape[:3], dtype=torch.float32)

    def run():
        flash_hopper.launch_hopper_flash(q, k, v, o, lse, causal, config)
        return o
    return run, lse


def compare_row(row, record, configs) -> None:
    b, h, hkv, sq, sk, d, causal, _ = row
    q, k, v = inputs(row)
    tuned = tuned_forward(q, k, v, causal)
    fns = {"flash.py": lambda: flash.flash_forward(q, k, v, causal, config=tuned.config)[0]}
    for name in ("SDPA cuDNN", "SDPA flash"):
        fns[name] = sdpa(BACKENDS[name], q, k, v, causal)
    lses = {}
    for config in configs:
        fns[f"gluon {config}"], lses[config] = hopper(q, k, v, causal, config)
    small = score_pairs(b, h, sq, sk, False) <= 2**32
    ref = (flash.attention_reference(q.float(), k.float(), v.float(), causal) if small
           else fns["SDPA cuDNN"]().float())
    errors = {name: relative(fn(), ref) for name, fn in fns.items()}
    _, flash_lse = flash.flash_forward(q, k, v, causal, config=tuned.config)
    lse_errors = {str(c): (lse - flash_lse).abs().max().item() for c, lse in lses.items()}
    ref = None
    results = bench.compare(fns, flops=4 * d * score_pairs(b, h, sq, sk, causal), rep_ms=400)
    print("==", title(row), "errors", {n: f"{e:.1e}" for n, e in errors.items()},
          "lse", lse_errors, "against", "float32" if small else "cuDNN")
    bench.print_table(results, baseline="SDPA cuDNN")
    record.setdefault("forward", {})[title(row)] = {
        "flash_py_config": dict(tuned.config), "lse_max_abs_diff": lse_errors,
        "checked_against": "float32 PyTorch" if small else "SDPA cuDNN",
        "results": {m.name: {"median_ms": m.median_ms, "tflops": m.tflops,
                             "rel_error": errors[m.name], "runs": m.runs,
                             "sm_clock_mhz": m.sm_clock_mhz} for m in results}}


def main() -> None:
    parser = options(__doc__)
    parser.add_argument("--rows", type=int, default=len(ROWS), help="the first N rows only")
    parser.add_argument("--head-dims", type=int, nargs="+", default=flash_hopper.HOPPER_HEAD_DIMS,
                        help="the rows of these head sizes only")
    parser.add_argument("--causal", action="store_true", help="the causal rows only")
    args = parser.parse_args()
    record = header(stamp=True)
    record["configs"] = [list(c) for c in flash_hopper.HOPPER_CONFIGS]
    for row in [row for row in ROWS[:args.rows]
                if row[5] in args.head_dims and (row[6] or not args.causal)]:
        compare_row(row, record, flash_hopper.HOPPER_CONFIGS)
        write(record, args.out)
    finish(record, args.out)


if __name__ == "__main__":
    main()
