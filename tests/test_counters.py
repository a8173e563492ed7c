"""reference/counters.py: the arrival counters skinny and flash_decode share."""
import pytest
import torch

from tilegym_edu.reference import counters

pytestmark = pytest.mark.beside


def test_the_same_zeroed_counters_come_back_until_more_blocks_are_asked_for():
    device = torch.device("cpu")
    first = counters.arrival_counters(device, 8)
    assert first.dtype == torch.int32 and first.numel() >= 4096 and not first.any()
    assert counters.arrival_counters(device, first.numel()) is first
    grown = counters.arrival_counters(device, first.numel() + 1)
    assert grown.numel() == 2 * first.numel() and not grown.any()      # doubled: few outgrown
    assert counters.arrival_counters(device, 8) is grown


def test_outgrown_counters_stay_allocated_for_the_graphs_captured_with_them():
    """A CUDA graph replays on the counters' address as captured: freed when larger ones
    replaced them, that memory could belong to another tensor at the next replay."""
    device = torch.device("cpu")
    old = counters.arrival_counters(device, 8)
    address = old.data_ptr()
    del old
    counters.arrival_counters(device, counters._COUNTERS[device].numel() + 4096)
    assert any(t.data_ptr() == address for t in counters._OUTGROWN)
