"""What the wrappers' host path rests on: tiles.py's plain-Python cdiv and next_power_of_2 give
Triton's values, descriptors_fit asks a GPU's capability once, and benchmarks/host_overhead.py
runs without a GPU (launches as no-ops) and leaves the modules as it found them."""
import json
import os
import runpy
import sys
from pathlib import Path

import pytest
import torch
import triton

from tilegym_edu import device, tiles, tune
from tilegym_edu.reference import flash

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "host_overhead.py"

pytestmark = pytest.mark.usefixtures("fresh_cache")   # the benchmark must not write into it


def test_cdiv_and_next_power_of_2_are_tritons():
    assert all(tiles.cdiv(a, b) == triton.cdiv(a, b) for a in range(-40, 600)
               for b in range(1, 40))
    numbers = [*range(-40, 5000), 2**31 - 1, 2**31, 2**31 + 1, 2**63 + 1]
    assert [tiles.next_power_of_2(n) for n in numbers] == [triton.next_power_of_2(n)
                                                           for n in numbers]


def test_descriptors_fit_asks_the_gpus_capability_once(monkeypatch):
    asked = []

    def capability(where):
        asked.append(where)
        return (8, 0) if where == torch.device("cpu") else (9, 0)
    monkeypatch.setattr(device, "ON_GPU", True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", capability)
    device.has_tma.cache_clear()
    try:
        k = torch.empty(2, 3, 10, 32, dtype=torch.float16)
        assert [flash.descriptors_fit(k) for _ in range(3)] == [False] * 3  # "cpu": cc 8.0
        assert asked == [torch.device("cpu")]
    finally:
        device.has_tma.cache_clear()


def test_the_benchmark_runs_without_a_gpu_and_restores_what_it_patched(tmp_path, monkeypatch):
    if device.ON_GPU:
        pytest.skip("times real launches on a GPU")
    out = tmp_path / "host.json"
    kernel, folder = flash.flash_forward_kernel, os.environ.get("TILEGYM_CACHE_DIR")
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "--calls", "2", "--out", str(out)])
    runpy.run_path(str(SCRIPT), run_name="__main__")
    record = json.loads(out.read_text())
    assert record["mode"].startswith("CPU") and record["calls"] == 2
    assert {"flash_forward", "lesson04_flash_attention", "shape_matmul_qkv", "matmul_swiglu",
            "rmsnorm", "add_rmsnorm", "rope_", "swiglu"} <= set(record["us_per_call"])
    assert all(times["host_us"] > 0 for times in record["us_per_call"].values())
    assert flash.flash_forward_kernel is kernel
    assert os.environ.get("TILEGYM_CACHE_DIR") == folder and not tune.cache_path().exists()
