"""Issue 18's record in one process, on a GPU: attention_shapes.py's rows (the reference
forward and backward against every SDPA backend, issue 18's shapes plus bfloat16, head sizes
96 and 256, grouped-query attention, a decode step and a chunk of prefill over a KV cache, and
forward + backward on the training shapes), then capstone.py's prefill and decoding (the
Llama-style model on PyTorch eager, torch.compile, the lessons' kernels and the reference
kernels). The record is written after every row and part, so a run cut short keeps what it
measured. Tuning is the scripts' own (level 1); a tuning cache filled by an earlier run on the
same machine (TILEGYM_CACHE_DIR) leaves the process its measurements alone.

    python benchmarks/attention_and_capstone.py --out issue-18.json
    python benchmarks/attention_and_capstone.py --parts attention prefill
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import attention_shapes
import capstone
from record import finish, header, options

#: what --parts can pick, in the order they run
PARTS = ("attention", "prefill", "decode")


def main() -> None:
    parser = options(__doc__)
    parser.add_argument("--parts", nargs="*", default=list(PARTS), choices=PARTS)
    args = parser.parse_args()
    record = header(stamp=True, clock_before=True)
    if "attention" in args.parts:
        attention_shapes.measure(record, args.out)
    capstone.measure(record, args.out, [part for part in args.parts if part != "attention"])
    finish(record, args.out)


if __name__ == "__main__":
    main()
