"""bench: Measurement arithmetic, interpreter-mode timing, the table, the roofline sanity check."""
import functools

import pytest

from tilegym_edu import bench, device
from tilegym_edu.bench import Measurement

interpreter_only = pytest.mark.skipif(device.ON_GPU,
                                      reason="tests interpreter mode; a GPU is visible")


def gpu_measurement(name="k", times_ms=(1.0,), flops=None, bytes=None, **kw) -> Measurement:
    return Measurement(name, tuple(times_ms), flops, bytes, interpreter=False,
                       device="NVIDIA H200", **kw)


# Measurement ------------------------------------------------------------------------------------

def test_runs_and_median():
    m = Measurement("k", (5.0, 1.0, 3.0, 2.0, 4.0))
    assert m.runs == 5 and m.median_ms == 3.0
    assert Measurement("k", (1.0, 2.0, 3.0, 4.0)).median_ms == 2.5


@pytest.mark.parametrize("q, expected", [(0, 1.0), (25, 2.0), (50, 3.0), (100, 5.0),
                                         (20, 1.8), (80, 4.2), (10, 1.4)])
def test_percentile_interpolates_linearly(q, expected):
    m = Measurement("k", (5.0, 1.0, 3.0, 2.0, 4.0))
    assert m.percentile_ms(q) == pytest.approx(expected)


def test_p20_and_p80():
    m = Measurement("k", (5.0, 1.0, 3.0, 2.0, 4.0))
    assert m.p20_ms == pytest.approx(1.8) and m.p80_ms == pytest.approx(4.2)
    assert Measurement("k", (7.0,)).p20_ms == Measurement("k", (7.0,)).p80_ms == 7.0


def test_rates_at_the_median_time():
    m = Measurement("k", (2.0, 2.0, 100.0), flops=4e12, bytes=8e9)  # median 2 ms
    assert m.tflops == pytest.approx(2000.0)
    assert m.gbs == pytest.approx(4000.0)
    assert m.intensity == pytest.approx(500.0)


@pytest.mark.parametrize("flops, bytes", [(None, None), (1e9, None), (None, 1e9), (1e9, 0)])
def test_missing_counts_give_none(flops, bytes):
    m = Measurement("k", (1.0,), flops, bytes)
    assert m.intensity is None
    assert (m.tflops is None) == (flops is None)
    assert (m.gbs is None) == (bytes is None)


# compare / bench in interpreter mode -------------------------------------------------------------

@interpreter_only
def test_compare_labels_interpreter_time_in_the_given_order():
    calls = {"b": 0, "a": 0}

    def counter(name):
        def fn():
            calls[name] += 1
        return fn
    results = bench.compare({"b": counter("b"), "a": counter("a")}, max_runs=3)
    assert [m.name for m in results] == ["b", "a"]
    for m in results:
        assert m.interpreter and m.device == "CPU (Triton interpreter)"
        assert m.runs == 3 and all(t >= 0 for t in m.times_ms)
        assert not m.cuda_graph and m.problem is None
    assert calls == {"b": 4, "a": 4}  # one warm-up call each, then the timed runs


@interpreter_only
def test_compare_takes_counts_per_function_or_for_all():
    fns = {"x": lambda: None, "y": lambda: None}
    x, y = bench.compare(fns, flops={"x": 10.0}, bytes={"x": 1.0, "y": 2.0}, max_runs=1)
    assert (x.flops, x.bytes) == (10.0, 1.0)
    assert (y.flops, y.bytes) == (None, 2.0)
    x, y = bench.compare(fns, flops=5.0, max_runs=1)
    assert x.flops == y.flops == 5.0 and x.bytes is None


@interpreter_only
def test_compare_best_keeps_each_functions_fastest_round(monkeypatch):
    medians = {"a": iter([3.0, 1.0, 2.0]), "b": iter([1.0, 4.0, 5.0])}

    def one_round(fns, **options):
        assert options == {"rep_ms": 7}
        return [Measurement(name, (next(medians[name]),)) for name in fns]
    monkeypatch.setattr(bench, "compare", one_round)
    a, b = bench.compare_best({"a": None, "b": None}, rep_ms=7)
    assert (a.name, a.median_ms) == ("a", 1.0) and (b.name, b.median_ms) == ("b", 1.0)
    assert next(medians["a"], "done") == "done"   # three rounds, no more


def test_compare_best_needs_a_round():
    with pytest.raises(ValueError, match="at least one round"):
        bench.compare_best({"a": lambda: None}, rounds=0)


def test_compare_needs_a_function():
    with pytest.raises(ValueError, match="at least one"):
        bench.compare({})


def _named():
    pass


@interpreter_only
@pytest.mark.parametrize("fn, name, expected", [
    (_named, None, "_named"),
    (lambda: None, "mine", "mine"),
    (functools.partial(print, end=""), None, "fn"),  # no __name__
])
def test_bench_names_the_measurement(fn, name, expected):
    m = bench.bench(fn, flops=2.0, bytes=4.0, name=name, max_runs=2)
    assert m.name == expected and m.runs == 2
    assert (m.flops, m.bytes) == (2.0, 4.0)


# format_table ------------------------------------------------------------------------------------

def test_format_table_ratios_against_the_baseline():
    slow, fast = gpu_measurement("slow", (2.0,)), gpu_measurement("fast", (0.5,))
    lines = bench.format_table([slow, fast], baseline="slow").splitlines()
    assert "vs slow" in lines[0]
    assert lines[1].startswith("slow") and lines[1].endswith("1.00x")
    assert lines[2].startswith("fast") and lines[2].endswith("4.00x")


def test_format_table_unknown_baseline_is_a_key_error():
    with pytest.raises(KeyError, match="nope"):
        bench.format_table([gpu_measurement("a")], baseline="nope")


def test_format_table_without_measurements():
    assert bench.format_table([]) == "(no measurements)"


def test_format_table_shows_gpu_rates_and_conditions():
    m = gpu_measurement("k", (1.0,), flops=2e9, bytes=3e9, sm_clock_mhz=1980, l2_flushed=True)
    text = bench.format_table([m])
    row = text.splitlines()[1]
    assert "2" in row.split() and "3,000" in row.split()  # 2 TFLOP/s, 3,000 GB/s
    assert "NVIDIA H200, SM clock 1980 MHz, L2 flushed before each run, CUDA events" in text
    assert "WARNING" not in text


def test_format_table_in_interpreter_mode_has_no_rates():
    m = Measurement("k", (1.0, 2.0), flops=2e12, bytes=3e9, interpreter=True,
                    device="CPU (Triton interpreter)")
    text = bench.format_table([m])
    assert text.splitlines()[1].split()[-2:] == ["-", "-"]
    assert "says nothing about GPU speed" in text


def test_format_table_warns_about_a_problem():
    bad = gpu_measurement("k", problem="impossible")
    assert bench.format_table([bad]).splitlines()[-1] == "WARNING k: impossible"


def test_print_table_prints_the_table(capsys):
    ms = [gpu_measurement("a"), gpu_measurement("b", (2.0,))]
    bench.print_table(ms, baseline="a")
    assert capsys.readouterr().out == bench.format_table(ms, baseline="a") + "\n"


# roofline_problem --------------------------------------------------------------------------------

def test_bandwidth_above_the_datasheet_is_flagged():
    m = gpu_measurement(bytes=6e9)  # 6,000 GB/s in 1 ms; an H200 has 4,800
    problem = bench.roofline_problem(m, "NVIDIA H200")
    assert problem and "memory bandwidth" in problem and "measurement error" in problem
    assert bench.roofline_problem(m, "NVIDIA H200", memory_bytes=141 * 2**30) == problem


def test_compute_above_the_peak_is_flagged():
    m = gpu_measurement(flops=1.2e12)  # 1,200 TFLOP/s in 1 ms; an H200 peaks at 989.5
    problem = bench.roofline_problem(m, "NVIDIA H200")
    assert problem and "peak" in problem and "measurement error" in problem


def test_plausible_measurement_has_no_problem():
    m = gpu_measurement(flops=5e11, bytes=4e9)  # 500 TFLOP/s, 4,000 GB/s
    assert bench.roofline_problem(m, "NVIDIA H200") is None


def test_unknown_gpu_or_interpreter_has_no_problem():
    m = gpu_measurement(flops=1e15, bytes=1e15)
    assert bench.roofline_problem(m, "Some Future GPU") is None
    interp = Measurement("k", (1.0,), 1e15, 1e15, interpreter=True)
    assert bench.roofline_problem(interp, "NVIDIA H200") is None


def test_gpu_time_sleeps_the_gpu_through_the_hosts_launch_and_keeps_the_least(monkeypatch):
    """bench.gpu_time_ms: the GPU sleeps 1.5x a call's host time (cycles at 3 GHz, more than
    any GPU's clock) before each timed call, so the host's launch falls inside the sleep and
    the events hold the GPU's work alone; the least of three."""
    import torch
    order, elapsed = [], iter([0.05, 0.03, 0.04])

    class Event:
        def __init__(self, enable_timing):
            assert enable_timing

        def record(self):
            order.append("record")

        def elapsed_time(self, end):
            return next(elapsed)
    monkeypatch.setattr(bench, "host_time_ms", lambda fn, warmup_ms: 2.0)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: order.append(("sleep", cycles)))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: order.append("sync"))
    assert bench.gpu_time_ms(lambda: order.append("fn"), warmup_ms=2) == 0.03
    assert order == [("sleep", 9_000_000), "record", "fn", "record", "sync"] * 3
