"""Arrival counters for kernels whose last program to finish does the final step (adding the
partial results of the programs that share an output block), so that no second launch is
needed: int32, one per output block, zero between calls because each call's last program sets
its counter back. Used by `skinny` (a matmul's K ranges) and `flash_decode` (attention's key
ranges).
"""
import torch

_COUNTERS: dict[torch.device, torch.Tensor] = {}
#: counters replaced by larger ones, kept alive: a CUDA graph captured with them replays on
#: their memory, which freed could hold another tensor by then
_OUTGROWN: list[torch.Tensor] = []


def arrival_counters(device: torch.device, blocks: int) -> torch.Tensor:
    """At least ``blocks`` int32 counters on ``device``, all zero; the same memory on every
    call (at least doubled when more blocks come, the old counters kept for the graphs that
    use them: a few tensors at most), so
    allocating them costs nothing inside a CUDA graph."""
    counters = _COUNTERS.get(device)
    if counters is None or counters.numel() < blocks:
        if counters is not None:
            _OUTGROWN.append(counters)
        size = max(blocks, 2 * counters.numel() if counters is not None else 0, 4096)
        counters = torch.zeros(size, device=device, dtype=torch.int32)
        _COUNTERS[device] = counters
    return counters
