"""Host time per call of the capstone's reference wrappers: the microseconds of Python each one
spends (checks, the tuner's lookup, allocations, launch arithmetic) before the GPU has its work.

The calls are those `llama_kernels.reference_ops` makes in a batch-1 prefill of 2048 tokens of
the capstone's model (GPU_CONFIG: dim 2048, 16 query heads over 4 key/value heads of 128,
hidden 5632): `flash.flash_forward` over FLASH_ORDER_SPACE on the model's views (and on one
grouped-query call of 16 heads, for comparison), lesson 04's `attention.flash_attention`,
`split_k.shape_matmul`, `fused_matmul.matmul_swiglu` and lesson 06's `rmsnorm`, `add_rmsnorm`,
`rope_` and `swiglu`. Each runs a few times (tuning on a GPU whatever its cache lacks), then
``--calls`` times back to back, torch.cuda.synchronize only at the end: ``host_us`` is the loop
before that synchronize, per call (the host's time while the GPU's queue has room), ``wall_us``
the loop with it (the GPU's time instead where the GPU is the slower). Each is the best of
three loops; the H200's host is noisy (2026-12-04, docs/results/h200.md: eager prefills of one
code at 6.75 to 10.5 ms in one run), so run it a few times and take the least.

Without a GPU the launches are no-ops (each module's kernels stand in for themselves except for
being launched), the tuner is primed with zero timings (so its lookups hit, as on a GPU that has
tuned; in a cache folder of its own, deleted at the end) and the rest of each wrapper runs as it
does: its own Python alone. ``--profile NAME`` prints a cProfile of NAME's calls.

    python benchmarks/host_overhead.py --out host.json
    python benchmarks/host_overhead.py --calls 2000 --profile flash_forward
"""
from __future__ import annotations

import tilegym_edu  # noqa: F401  (first: decides the mode before triton is imported)

import contextlib
import cProfile
import functools
import os
import pstats
import tempfile
import time
from typing import Callable, Iterator
from unittest import mock

import torch
from triton.runtime.jit import KernelInterface

from tilegym_edu import device
from tilegym_edu.reference import (attention, flash, fused_matmul, llama, llama_kernels,
                                   pipelined, skinny, split_k)

from record import finish, header, options

SEQ = 2048
CFG = llama.GPU_CONFIG
#: the modules whose kernels the wrappers launch, and whose autotune calls are primed on a CPU
MODULES = (attention, flash, fused_matmul, llama_kernels, pipelined, skinny, split_k)


class NoLaunch:
    """A kernel that is not launched: ``kernel[grid](...)`` does nothing; any other attribute
    (its source, its name) is the kernel's, so the tuner keys it as the kernel."""

    def __init__(self, kernel: KernelInterface):
        self.kernel = kernel

    def __getitem__(self, grid) -> Callable[..., None]:
        return lambda *args, **kwargs: None

    def __getattr__(self, name: str):
        return getattr(self.kernel, name)


@contextlib.contextmanager
def no_launches() -> Iterator[None]:
    """Every kernel of MODULES a NoLaunch for the time of the block."""
    with contextlib.ExitStack() as stack:
        for module in MODULES:
            for name, value in list(vars(module).items()):
                if isinstance(value, KernelInterface):
                    stack.enter_context(mock.patch.object(module, name, NoLaunch(value)))
        yield


@contextlib.contextmanager
def own_tuning_cache() -> Iterator[None]:
    """The tuner's cache in a new folder (TILEGYM_CACHE_DIR), deleted when the block ends."""
    with tempfile.TemporaryDirectory() as folder, \
            mock.patch.dict(os.environ, {"TILEGYM_CACHE_DIR": folder}):
        yield


@contextlib.contextmanager
def primed_tuner() -> Iterator[None]:
    """Within it, MODULES' autotune calls time every candidate at 0 ms, so that the default is
    stored ("too small to tune") for each problem they meet."""
    def zero(configs):
        return {c: [0.0] for c in configs}
    with contextlib.ExitStack() as stack:
        for module in MODULES:
            if hasattr(module, "autotune"):
                stack.enter_context(mock.patch.object(module, "autotune", functools.partial(
                    module.autotune, measure=zero, progress=False)))
        yield


def calls() -> dict[str, Callable[[], object]]:
    """Each wrapper on the prefill's inputs (uninitialised: only shapes and strides matter)."""
    ops = llama_kernels.reference_ops(small_blocks=False)
    on = dict(device=device.DEVICE, dtype=torch.float16)
    hd, nh, nkv, group = CFG.head_dim, CFG.n_heads, CFG.n_kv_heads, CFG.group
    x = torch.empty(SEQ, CFG.dim, **on)
    weight = torch.empty(CFG.dim, **on)
    wqkv = torch.empty(CFG.dim, (nh + 2 * nkv) * hd, **on)
    w13 = torch.empty(CFG.dim, 2 * CFG.hidden, **on)
    w2 = torch.empty(CFG.hidden, CFG.dim, **on)
    qkv = torch.empty(1, SEQ, nh + 2 * nkv, hd, **on)
    cos, sin = (torch.empty(CFG.max_seq, hd // 2, device=device.DEVICE) for _ in "cs")
    q, k, v = qkv[:, :, :nh], qkv[:, :, nh:nh + nkv], qkv[:, :, nh + nkv:]
    # the model's views (llama.Llama.attention): kv heads as the batch, stride-0 groups
    qb = q[0].view(SEQ, nkv, group, hd).permute(1, 2, 0, 3)
    kb, vb = (t[0].permute(1, 0, 2)[:, None].expand(nkv, group, SEQ, hd) for t in (k, v))
    # the same attention as one grouped-query call: (1, 16, seq, hd) over (1, 4, seq, hd)
    qg, kg, vg = (t.permute(0, 2, 1, 3) for t in (q, k, v))
    h, y = torch.empty(SEQ, 2 * CFG.hidden, **on), torch.empty(SEQ, CFG.hidden, **on)
    return {
        "flash_forward": lambda: ops.attention(qb, kb, vb, True),
        "flash_forward_gqa": lambda: flash.flash_forward(qg, kg, vg, True,
                                                         space=flash.FLASH_ORDER_SPACE),
        "lesson04_flash_attention": lambda: attention.flash_attention(qb, kb, vb, True),
        "shape_matmul_qkv": lambda: ops.matmul(x, wqkv),
        "shape_matmul_down": lambda: ops.matmul(y, w2),
        "matmul_swiglu": lambda: ops.matmul_swiglu(x, w13),
        "rmsnorm": lambda: ops.rmsnorm(x, weight, CFG.eps),
        "add_rmsnorm": lambda: ops.add_rmsnorm(x, x, weight, CFG.eps),
        "rope_": lambda: ops.rope_(qkv[:, :, :nh + nkv], cos[:SEQ], sin[:SEQ]),
        "swiglu": lambda: ops.swiglu(h),
    }


def time_calls(call: Callable[[], object], n: int) -> dict[str, float]:
    """host_us and wall_us per call of ``n`` calls back to back (the best of three loops)."""
    best = {"host_us": float("inf"), "wall_us": float("inf")}
    for _ in range(3):
        device.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            call()
        queued = time.perf_counter()
        device.synchronize()
        done = time.perf_counter()
        best["host_us"] = min(best["host_us"], (queued - start) / n * 1e6)
        best["wall_us"] = min(best["wall_us"], (done - start) / n * 1e6)
    return {key: round(value, 1) for key, value in best.items()}


def warm_up(cases: dict[str, Callable[[], object]]) -> None:
    """Each call a few times: compiled, and on a GPU tuned (or found in the cache)."""
    for call in cases.values():
        for _ in range(3):
            call()


def measure(cases: dict[str, Callable[[], object]], n: int,
            profile: str | None) -> dict[str, dict[str, float]]:
    """{wrapper: its times}, printed as they come; then the profile asked for."""
    results = {}
    for name, call in cases.items():
        results[name] = time_calls(call, n)
        print(f"{name:26s} {results[name]['host_us']:8.1f} µs host "
              f"{results[name]['wall_us']:8.1f} µs wall")
    if profile:
        profiler = cProfile.Profile()
        profiler.runcall(lambda: [cases[profile]() for _ in range(n)])
        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
    return results


def main() -> None:
    parser = options(__doc__)
    parser.add_argument("--calls", type=int, default=500, help="calls per timed loop")
    parser.add_argument("--profile", metavar="NAME", help="print a cProfile of NAME's calls")
    args = parser.parse_args()
    record = header(clock_before=True)
    record["mode"] = ("GPU: real launches" if device.ON_GPU else
                      "CPU: launches are no-ops, the tuner primed with zero timings")
    record["calls"] = args.calls
    with contextlib.ExitStack() as stack:
        if not device.ON_GPU:
            stack.enter_context(no_launches())
            stack.enter_context(own_tuning_cache())
        cases = calls()
        with primed_tuner() if not device.ON_GPU else contextlib.nullcontext():
            warm_up(cases)
        record["us_per_call"] = measure(cases, args.calls, args.profile)
    finish(record, args.out)


if __name__ == "__main__":
    main()
