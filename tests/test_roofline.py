"""roofline: the model's arithmetic, which spec is drawn, and what the plot contains."""
import json
from dataclasses import asdict

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from tilegym_edu import ceilings, device, roofline  # noqa: E402
from tilegym_edu.bench import Measurement  # noqa: E402
from tilegym_edu.specs import spec_by_key  # noqa: E402

interpreter_only = pytest.mark.skipif(device.ON_GPU,
                                      reason="tests interpreter mode; a GPU is visible")

H200 = spec_by_key("h200-sxm")


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture
def fake_h200(monkeypatch, tmp_path):
    """This process 'runs on' an H200, with an empty ceilings cache."""
    facts = device.DeviceInfo("NVIDIA H200", (9, 0), 132, 141 * 2**30, 60 * 2**20, "580.1")
    monkeypatch.setattr(device, "info", lambda index=0: facts)
    monkeypatch.setenv("TILEGYM_CACHE_DIR", str(tmp_path))
    return facts


def datasheet_lines(ax):
    return [line for line in ax.get_lines() if line.get_label().startswith("datasheet")]


# arithmetic --------------------------------------------------------------------------------------

@pytest.mark.parametrize("intensity, expected", [(1.0, 4.8), (100.0, 480.0), (1000.0, 989.5)])
def test_attainable_tflops_is_the_lower_roof(intensity, expected):
    assert roofline.attainable_tflops(intensity, 989.5, 4800) == pytest.approx(expected)


def test_ridge_point_is_where_the_roofs_meet():
    ridge = roofline.ridge_point(989.5, 4800)
    assert ridge == pytest.approx(989.5e3 / 4800)
    assert roofline.attainable_tflops(ridge, 989.5, 4800) == pytest.approx(989.5)


# resolve_spec ------------------------------------------------------------------------------------

@interpreter_only
def test_default_spec_is_the_h200_datasheet_without_a_gpu():
    assert roofline.resolve_spec(None) == (spec_by_key(roofline.DEFAULT_SPEC), False)
    assert roofline.DEFAULT_SPEC == "h200-sxm"


@interpreter_only
@pytest.mark.parametrize("gpu", ["a100-sxm-80gb", "NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"])
def test_spec_by_key_or_device_name(gpu):
    assert roofline.resolve_spec(gpu) == (spec_by_key("a100-sxm-80gb"), False)


def test_unknown_gpu_is_a_key_error():
    with pytest.raises(KeyError, match="known keys"):
        roofline.resolve_spec("Voodoo 3")


def test_on_a_known_gpu_the_default_is_this_gpu(fake_h200):
    assert roofline.resolve_spec(None) == (H200, True)
    assert roofline.resolve_spec("NVIDIA H200") == (H200, True)
    assert roofline.resolve_spec("t4") == (spec_by_key("t4"), False)


# plot_roofline -----------------------------------------------------------------------------------

def test_plot_has_log_axes_labels_title_and_one_line_per_roof():
    ax = roofline.plot_roofline(gpu="h200-sxm")
    assert isinstance(ax, plt.Axes)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "intensity" in ax.get_xlabel() and "TFLOP/s" in ax.get_ylabel()
    assert "NVIDIA H200 SXM" in ax.get_title()
    assert len(datasheet_lines(ax)) == 3  # FP32, TF32 tensor, FP16 tensor
    assert len(roofline.plot_roofline(gpu="t4").get_lines()) == 2  # no TF32 on a T4


def test_roofs_bend_at_the_ridge_point():
    fp16 = datasheet_lines(roofline.plot_roofline(gpu="h200-sxm"))[2]
    x, y = fp16.get_xdata(), fp16.get_ydata()
    assert np.all(np.isfinite(x)) and y.max() == pytest.approx(989.5)
    below = x < roofline.ridge_point(989.5, 4800)
    assert np.allclose(y[below], x[below] * 4.8)


def test_measurements_are_labelled_points():
    ms = [Measurement("matmul", (1.0,), flops=5e11, bytes=1e9),   # 500 TFLOP/s at 500 FLOP/B
          Measurement("silu", (1.0,), flops=1e9, bytes=3e9)]
    ax = roofline.plot_roofline(ms, gpu="h200-sxm")
    texts = [t.get_text() for t in ax.texts]
    assert any(t.startswith("matmul: 500 TFLOP/s") for t in texts)
    assert any(t.startswith("silu:") for t in texts)
    points = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert [(float(p.get_xdata()[0]), float(p.get_ydata()[0])) for p in points] == [
        pytest.approx((500.0, 500.0)), pytest.approx((1 / 3, 1.0))]
    assert ax.get_xlim()[0] <= 1 / 3


def test_interpreter_measurement_is_hollow_at_the_roof():
    m = Measurement("mine", (50.0,), flops=1e6, bytes=1e6, interpreter=True)  # intensity 1
    ax = roofline.plot_roofline([m], gpu="h200-sxm")
    (point,) = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert point.get_markerfacecolor() == "none"
    assert point.get_xdata()[0] == 1.0
    assert point.get_ydata()[0] == pytest.approx(roofline.attainable_tflops(1.0, 989.5, 4800))
    assert any("mine (interpreter" in t.get_text() for t in ax.texts)


def test_measurement_without_flops_is_skipped():
    m = Measurement("copy", (1.0,), bytes=1e9)
    ax = roofline.plot_roofline([m], gpu="h200-sxm")
    assert not ax.texts and [line.get_marker() for line in ax.get_lines()].count("o") == 0


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_zero_flop_measurement_does_not_break_the_roofs():
    m = Measurement("copy", (1.0,), flops=0, bytes=1e9)
    ax = roofline.plot_roofline([m], gpu="h200-sxm")
    assert all(np.all(np.isfinite(line.get_xdata())) for line in datasheet_lines(ax))


def test_draws_into_the_given_axes_with_the_given_title():
    _, ax = plt.subplots()
    assert roofline.plot_roofline(gpu="l4", ax=ax, title="mine") is ax
    assert ax.get_title() == "mine"


def test_measured_roofs_are_drawn_on_this_gpu_when_cached(fake_h200):
    entry = ceilings.Ceilings(gpu="NVIDIA H200", driver="580.1", torch=torch.__version__,
                              measured_on="2025-01-01", copy_gbs=4000.0,
                              matmul_tflops={"fp16": 700.0, "bf16": 700.0, "tf32": 350.0,
                                             "fp32": 50.0})
    ceilings.cache_path().write_text(json.dumps({ceilings._cache_key(fake_h200): asdict(entry)}))
    ax = roofline.plot_roofline()
    measured = [line.get_label() for line in ax.get_lines()
                if line.get_label().startswith("measured")]
    assert len(measured) == 2 and "700 TFLOP/s" in measured[0] and "4,000 GB/s" in measured[0]
    assert "(this GPU)" in ax.get_title()


def test_ladder_has_one_labelled_bar_per_version_on_a_log_axis():
    from tilegym_edu.roofline import plot_ladder
    versions = [Measurement("naive", (100.0,), 2e12, device="NVIDIA H200"),
                Measurement("tiled", (1.0,), 2e12, device="NVIDIA H200"),
                Measurement("cuBLAS", (0.5,), 2e12, device="NVIDIA H200")]
    ax = plot_ladder(versions)
    assert ax.get_xscale() == "log" and "TFLOP/s" in ax.get_xlabel()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["cuBLAS", "tiled", "naive"]
    labels = [t.get_text() for t in ax.texts]
    assert any("(100x)" in label for label in labels) and any("(200x)" in label for label in labels)
    assert "NVIDIA H200" in ax.get_title()
    plt.close(ax.figure)


def test_ladder_refuses_interpreter_timings():
    from tilegym_edu.roofline import plot_ladder
    with pytest.raises(ValueError, match="interpreter"):
        plot_ladder([Measurement("naive", (1.0,), 1e9, interpreter=True)])
