"""The helper package on a real GPU: timing, ceilings, speed grading. (Lesson 00 graded end
to end, like every lesson: tests/gpu/test_lessons_gpu.py.)"""
import json
import time

import pytest
import torch

from tests.kernels import triton_double
from tilegym_edu import bench, ceilings, device, grading
from tilegym_edu.specs import find_spec


scale = triton_double


def test_mode_and_facts():
    assert device.MODE == "gpu" and device.DEVICE == "cuda"
    facts = device.info()
    assert facts.sm_count > 0 and facts.memory_bytes > 2**30 and facts.l2_bytes > 2**20
    assert "GPU mode" in device.banner()


def test_copy_bandwidth_is_below_datasheet_and_plausible():
    m = bench.bench(grading.copy_baseline(2**31),
                    bytes=2**31, name="copy")
    spec = find_spec(device.info().name, device.info().memory_bytes)
    assert m.problem is None and m.l2_flushed and not m.interpreter
    assert 0.5 * spec.memory_bandwidth_gbs < m.gbs <= 1.05 * spec.memory_bandwidth_gbs
    assert m.sm_clock_mhz and m.sm_clock_mhz > 100


def test_short_kernels_are_timed_through_cuda_graphs():
    x = torch.randn(4096, device="cuda")
    m = bench.bench(lambda: scale(x), bytes=2 * x.nbytes)
    assert m.cuda_graph and m.runs >= 5 and m.median_ms < 1


def test_graph_below_ms_decides_which_calls_are_graphed():
    """A short call with a slow Python wrapper (0.3 ms of host time) is timed as host time under
    the default threshold and as GPU work when graph_below_ms is raised (lesson 05's cells)."""
    x = torch.randn(4096, device="cuda")

    def slow_wrapper():
        time.sleep(0.0003)
        return scale(x)

    default, raised = (bench.bench(slow_wrapper, bytes=2 * x.nbytes, graph_below_ms=limit)
                       for limit in (bench.GRAPH_THRESHOLD_MS, 1.0))
    assert not default.cuda_graph and raised.cuda_graph
    assert raised.median_ms < default.median_ms


def test_a_call_that_cannot_be_graphed_runs_as_it_is_and_leaves_random_numbers_working():
    """A call that synchronizes (here .item(); autograd's backward, which runs on threads of its
    own, is another) fails its capture half-way; the timing falls back to plain calls, and the
    GPU's generator is not left in capture mode (lesson 04's Exercise 8b, then a torch.randn on
    the GPU in Exercise 9a, failed so on 2026-12-01)."""
    x = torch.randn(4096, device="cuda")
    m = bench.bench(lambda: scale(x).sum().item(), bytes=2 * x.nbytes, graph_below_ms=1e9)
    assert not m.cuda_graph and m.runs >= 5
    assert torch.randn(8, device="cuda").isfinite().all()


def test_warm_cache_is_faster_than_flushed_for_small_inputs():
    x = torch.randn(2**20, device="cuda")
    cold, warm = (bench.bench(lambda: scale(x), bytes=2 * x.nbytes, flush_l2=f)
                  for f in (True, False))
    assert warm.median_ms < cold.median_ms


def test_a_measurement_above_the_roofline_is_rejected():
    x = torch.randn(2**26, device="cuda")
    m = bench.bench(lambda: scale(x), bytes=100 * 2 * x.nbytes)   # claims 100x the real bytes
    assert m.problem and "measurement error" in m.problem


def test_measure_ceilings_caches_per_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEGYM_CACHE_DIR", str(tmp_path))
    first = ceilings.measure_ceilings()
    assert first.copy_gbs > 100 and first.matmul_tflops["fp16"] > first.matmul_tflops["fp32"]
    assert ceilings.cached_ceilings() == first == ceilings.measure_ceilings()
    assert json.loads(ceilings.cache_path().read_text())


def test_assert_speedup_measures_a_real_speedup():
    n = 2**26
    sets = [(torch.randn(n, device="cuda"),) for _ in range(2)]
    def slow(x):    # 5 passes
        return (x * 1.0).add_(x).sub_(x).mul_(2.0).div_(2.0).mul_(2.0)

    limit = grading.Threshold("test", "scale", 1.5, "speedup over a 6-pass version", 3.0,
                              "test", "test")
    assert grading.assert_speedup(scale, slow, sets, lambda x: 2 * x, torch.float32, limit,
                                  bytes=2 * 4 * n) is None  # a number would be partial credit
    too_high = grading.Threshold("test", "scale", 100.0, "speedup", 3.0, "test", "test")
    with pytest.raises(AssertionError, match="too slow"):
        grading.assert_speedup(scale, slow, sets, lambda x: 2 * x, torch.float32, too_high)


def test_guard_allows_triton_and_blocks_cublas():
    x = torch.randn(1000, device="cuda")
    assert torch.equal(grading.guarded_call(scale, (x,)), 2 * x)
    with pytest.raises(grading.LibraryShortcut):
        grading.guarded_call(lambda a: a @ a.T, (torch.randn(8, 8, device="cuda"),))


def test_a_timed_candidate_that_calls_cublas_is_refused():
    sets = [(torch.randn(256, 256, device="cuda"), torch.randn(256, 256, device="cuda"))]
    limit = grading.Threshold("test", "matmul", 0.1, "speedup", 1.0, "test", "test")
    with pytest.raises(grading.LibraryShortcut):
        grading.assert_speedup(torch.matmul, torch.matmul, sets, lambda a, b: a @ b,
                               torch.float32, limit)


def test_counting_traffic_does_not_break_later_gpu_compiles():
    from tests.kernels import double_kernel
    from tilegym_edu.reference.matmul import naive_matmul
    from tilegym_edu.traffic import count_traffic
    a, b = torch.randn(3, 70, device="cuda"), torch.randn(70, 2, device="cuda")
    assert count_traffic(naive_matmul, a, b).loaded_bytes == 2 * 3 * 2 * 70 * 4
    x = torch.randn(5000, device="cuda")
    out = torch.empty_like(x)
    double_kernel[(5,)](x, out, 5000, BLOCK=1024)   # a fresh compile after counting
    assert torch.equal(out, 2 * x)
