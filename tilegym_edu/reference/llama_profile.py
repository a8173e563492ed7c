"""Where the model's GPU time goes: each operation of an Ops timed apart.

:func:`profiled` runs every operation of an :class:`~tilegym_edu.reference.llama.Ops` inside a
torch.profiler range named after it, and :func:`gpu_ms_by_op` splits the GPU time of a run by
those ranges: lesson 06's profile of the model (a demonstration) and ``benchmarks/capstone.py``.
Course machinery only: graded cells may not use torch.profiler.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import torch

from tilegym_edu.reference.llama import Ops


def profiled(ops: Ops) -> Ops:
    """``ops`` with every operation run inside a torch.profiler range named ``ops.<name>``
    (``ops.matmul``, ``ops.attention``, ...), so that a profile of the model splits its GPU
    time by operation (:func:`gpu_ms_by_op`); outside a profiler the ranges cost ~1 µs each."""
    def in_range(name: str, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with torch.profiler.record_function(f"ops.{name}"):
                return fn(*args, **kwargs)
        return run
    return Ops(**{f.name: in_range(f.name, getattr(ops, f.name))
                  for f in dataclasses.fields(Ops) if getattr(ops, f.name) is not None})


def gpu_ms_by_op(run: Callable[[], object], repeats: int = 3) -> dict[str, float]:
    """GPU time of one call of ``run`` in ms (the mean of ``repeats`` profiled calls), split by
    the ``ops.<name>`` ranges of a :func:`profiled` Ops that ``run`` goes through:
    {"matmul": ..., "attention": ..., "rmsnorm": ..., "rope_": ..., "swiglu": ...,
    "other": kernels launched outside those ranges (embedding, residual additions),
    "total": every kernel}. Kernel time only: while the GPU waits for the host, nothing counts.

    A kernel belongs to the range its launch happened in, on the host's clock: the profiler
    ties PyTorch's own kernels to the operation that launched them, but not Triton's, which
    are launched through the CUDA driver from Python."""
    from torch.profiler import ProfilerActivity, profile
    run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            run()
        torch.cuda.synchronize()
    host = torch.autograd.DeviceType.CPU
    events = prof.events()
    ranges = [(e.time_range.start, e.time_range.end, e.name[len("ops."):]) for e in events
              if e.device_type == host and e.name.startswith("ops.")]
    launched_at = {e.id: e.time_range.start for e in events  # CUDA runtime and driver calls
                   if e.device_type == host and e.name.startswith("cu")}
    split = dict.fromkeys([f.name for f in dataclasses.fields(Ops)] + ["other"], 0.0)
    for kernel in events:
        if (kernel.device_type == host or kernel.is_user_annotation
                or kernel.name.startswith("ops.")):
            continue
        t = launched_at.get(kernel.id)
        op = next((name for start, end, name in ranges if t is not None and start <= t <= end),
                  "other")
        split[op] += kernel.time_range.elapsed_us()
    result = {name: us / repeats / 1e3 for name, us in split.items()}
    result["total"] = sum(split.values()) / repeats / 1e3
    return result


__all__ = ["profiled", "gpu_ms_by_op"]
