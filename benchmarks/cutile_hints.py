"""What cuTile's compiler hints give the reference cuTile kernels on a GPU (issue 20: matmul
at 0.90-0.93x cuBLAS with the hints left to the compiler, attention at head size 64 at 0.87x
cuDNN). Each kernel of tilegym_edu/reference/cutile_kernels.py runs at its default tiles and at
other tiles with the kernel options ``ct.kernel`` takes: ``num_ctas`` (CTAs of one cluster
sharing a tile's loads), ``occupancy`` (blocks per SM) and ``num_worker_warps`` (the warps of
a warp-specialised kernel's compute groups: 8 gives a 128 x 256 float32 accumulator two warp
groups' registers). Every variant is checked against float32 PyTorch and timed interleaved with
the Triton reference (tuned at level 1) and the vendor library, in one process.

A variant swaps the module's kernel for ``kernel.replace_hints(...)`` during its own calls
(the wrappers look the kernel up when called), so it runs through the reference wrapper
unchanged. Needs cuda.tile and its toolchain (``make cutile``). Prints tables; writes JSON
with --out.

    python benchmarks/cutile_hints.py --out cutile-hints.json
    python benchmarks/cutile_hints.py --kernels matmul --out cutile-hints-matmul.json
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import contextlib
import importlib.metadata

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

from attention_shapes import score_pairs, sdpa, tuned_forward
from cutile_compare import measure
from record import finish, header, options, write
from tilegym_edu.reference import cutile_kernels as ck
from tilegym_edu.reference import flash, pipelined

#: (tile overrides, kernel hints) tried on each kernel; ({}, {}) is the reference as it stands
MATMUL_VARIANTS = [
    ({}, {}), ({}, {"occupancy": 1}), ({}, {"occupancy": 3}), ({"GROUP_M": 4}, {}),
    ({"GROUP_M": 16}, {}), ({"TILE_K": 32}, {"occupancy": 3}),
    ({"TILE_N": 256}, {"num_worker_warps": 8, "occupancy": 1}),
    ({"TILE_M": 256}, {"num_worker_warps": 8, "occupancy": 1}),
    ({"TILE_M": 64}, {"occupancy": 4}), ({}, {"num_ctas": 2}),
]
PERSISTENT_VARIANTS = [
    ({}, {}), ({}, {"num_ctas": 2}), ({}, {"occupancy": 1}),
    ({"TILE_N": 256}, {"num_worker_warps": 8}), ({"TILE_M": 256}, {"num_worker_warps": 8}),
    ({"TILE_N": 256, "LATENCY": 5}, {"num_worker_warps": 8}),
    ({"TILE_N": 256}, {"num_worker_warps": 8, "num_ctas": 2}),
]
ATTENTION_VARIANTS = [
    ({}, {}), ({}, {"occupancy": 1}), ({}, {"num_worker_warps": 8}),
    ({"TILE_M": 128}, {"num_worker_warps": 8}), ({"TILE_M": 128}, {"occupancy": 1}),
    ({"TILE_M": 128, "TILE_N": 64}, {}), ({"TILE_N": 64}, {}),
    ({"TILE_M": 128}, {"num_worker_warps": 8, "occupancy": 1}),
]

#: (kernel name, hints) -> the kernel with those hints: one JIT cache each, made once
HINTED: dict = {}


@contextlib.contextmanager
def hinted(kernel_name: str, hints: dict):
    """ck.<kernel_name> replaced by its copy with ``hints`` while the block runs."""
    original = getattr(ck, kernel_name)
    if not hints:
        yield
        return
    variant = HINTED.setdefault((kernel_name, tuple(sorted(hints.items()))),
                                original.replace_hints(**hints))
    setattr(ck, kernel_name, variant)
    try:
        yield
    finally:
        setattr(ck, kernel_name, original)


def label(tiles: dict, hints: dict, default: dict) -> str:
    config = {**default, **tiles}
    shape = "x".join(str(config[k]) for k in ("TILE_M", "TILE_N", "TILE_K") if k in config)
    extra = [f"{k}={v}" for k, v in tiles.items() if not k.startswith("TILE")]
    extra += [f"{k}={v}" for k, v in hints.items()]
    return f"cuTile {shape}" + (f" {' '.join(extra)}" if extra else "")


def variants(kernel_name: str, run, tried: list, default: dict) -> dict:
    """{label: function of no arguments} for each (tiles, hints) of ``tried``."""
    fns = {}
    for tiles, hints in tried:
        def call(tiles=tiles, hints=hints):
            with hinted(kernel_name, hints):
                return run(tiles or None)
        fns[label(tiles, hints, default)] = call
    return fns


def matmul_row(m: int, n: int, k: int, persistent: bool) -> dict:
    a = torch.randn(m, k, device="cuda", dtype=torch.float16) / k ** 0.25
    b = torch.randn(k, n, device="cuda", dtype=torch.float16) / k ** 0.25
    ref = a.float() @ b.float()
    if persistent:
        fns = variants("persistent_matmul_kernel", lambda c: ck.persistent_matmul(a, b, c),
                       PERSISTENT_VARIANTS, ck.PERSISTENT_DEFAULT)
    else:
        fns = variants("matmul_kernel", lambda c: ck.matmul(a, b, c), MATMUL_VARIANTS,
                       ck.MATMUL_DEFAULT)
    pipelined.tuned_matmul(a, b, level=1, persistent=persistent)
    fns["Triton, tuned at level 1"] = lambda: pipelined.tuned_matmul(a, b, 1, persistent)
    fns["cuBLAS"] = lambda: a @ b
    name = f"{'persistent ' if persistent else ''}matmul {m}x{n}x{k} float16"
    return {"shape": [m, n, k], **measure(name, fns, ref, flops=2 * m * n * k, rep_ms=300)}


def attention_row(batch: int, heads: int, seq: int, head_dim: int, causal: bool) -> dict:
    q, k, v = (torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.float16)
               for _ in range(3))
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    fns = variants("flash_attention_kernel",
                   lambda c: ck.flash_attention(q, k, v, causal, c), ATTENTION_VARIANTS,
                   ck.ATTENTION_DEFAULT)
    tuned = tuned_forward(q, k, v, causal)
    fns["Triton, tuned at level 1"] = lambda: flash.flash_forward(q, k, v, causal,
                                                                   config=tuned.config)[0]
    fns["cuDNN SDPA"] = sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v, causal)
    pairs = score_pairs(batch, heads, seq, seq, causal)
    name = f"attention B{batch} H{heads} S{seq} D{head_dim}{' causal' if causal else ''} float16"
    return {"shape": [batch, heads, seq, head_dim], "causal": causal,
            **measure(name, fns, ref, flops=4 * head_dim * pairs, rep_ms=300)}


def main() -> None:
    parser = options(__doc__)
    parser.add_argument("--kernels", nargs="+", default=["matmul", "persistent", "attention"],
                        choices=["matmul", "persistent", "attention"])
    args = parser.parse_args()
    record = {**header(), "cuda_tile": importlib.metadata.version("cuda-tile"),
              "tileiras": importlib.metadata.version("nvidia-cuda-tileiras")}
    rows = {"matmul": [lambda n=n: matmul_row(n, n, n, False) for n in (4096, 8192)],
            "persistent": [lambda s=s: matmul_row(*s, True)
                           for s in ((8192, 8192, 512), (4096, 4096, 4096))],
            "attention": [lambda s=s: attention_row(*s)
                          for s in ((8, 16, 2048, 64, True), (4, 32, 4096, 128, False))]}
    for kernel in args.kernels:
        for make in rows[kernel]:
            record.setdefault(kernel, []).append(make())
            write(record, args.out)          # a run cut short keeps its rows
    finish(record, args.out)


if __name__ == "__main__":
    main()
