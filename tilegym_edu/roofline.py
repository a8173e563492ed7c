"""The roofline model and its plot.

A kernel that performs F floating-point operations while moving B bytes through device memory
has arithmetic intensity I = F / B (FLOP per byte). On a GPU with peak compute P (TFLOP/s) and
memory bandwidth W (GB/s) it cannot run faster than ``min(P, I · W)``: below the ridge point
I = P / W it is memory-bound, above it compute-bound. The plot draws those roofs (datasheet, and
measured ones when this GPU's ceilings are cached) on log-log axes with each measurement as a
point, so you can see how far a kernel is from the roof above it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from tilegym_edu import device
from tilegym_edu.bench import Measurement
from tilegym_edu.ceilings import cached_ceilings
from tilegym_edu.specs import GpuSpec, find_spec, spec_by_key

if TYPE_CHECKING:
    import matplotlib.pyplot as plt


def _pyplot():
    """matplotlib.pyplot, imported at the first plot: a grading kernel, which runs no
    demonstration, never plots, and the import took 0.6 s of each one's start."""
    import matplotlib.pyplot as plt
    return plt

#: the GPU whose datasheet roofs are drawn when no GPU is present and none is named
DEFAULT_SPEC = "h200-sxm"


def attainable_tflops(intensity: float, peak_tflops: float, bandwidth_gbs: float) -> float:
    """The roofline: the highest TFLOP/s a kernel of ``intensity`` FLOP/byte can reach."""
    return min(peak_tflops, intensity * bandwidth_gbs / 1e3)


def ridge_point(peak_tflops: float, bandwidth_gbs: float) -> float:
    """The intensity (FLOP/byte) where the memory roof meets the compute roof."""
    return peak_tflops * 1e3 / bandwidth_gbs


def resolve_spec(gpu: str | None = None) -> tuple[GpuSpec, bool]:
    """The spec to draw, and whether it is the GPU this process runs on. ``gpu`` is a spec key
    (``"a100-sxm-80gb"``) or a device name (``"NVIDIA A100-SXM4-80GB"``)."""
    facts = device.info()
    if gpu is None:
        if facts is not None and (spec := find_spec(facts.name, facts.memory_bytes)):
            return spec, True
        return spec_by_key(DEFAULT_SPEC), False
    try:
        spec = spec_by_key(gpu)
    except KeyError:
        spec = find_spec(gpu)
        if spec is None:
            raise
    return spec, facts is not None and find_spec(facts.name, facts.memory_bytes) == spec


def plot_roofline(measurements: Sequence[Measurement] = (), gpu: str | None = None,
                  ax: plt.Axes | None = None, title: str | None = None) -> plt.Axes:
    """Draw the roofline of ``gpu`` (default: this GPU, or an H200's datasheet without one) with
    ``measurements`` as labelled points; returns the axes.

    Measurements need ``flops`` and ``bytes`` (those without FLOPs are left out). Interpreter
    measurements have no GPU rate: they are drawn hollow at the roof above their intensity (the
    best that kernel could do there).
    """
    spec, is_this_gpu = resolve_spec(gpu)
    if ax is None:
        _, ax = _pyplot().subplots(figsize=(8, 5))
    roofs = {"FP32": spec.fp32_tflops, "TF32 tensor": spec.tf32_tflops,
             "FP16 tensor": spec.fp16_tflops}
    roofs = {k: v for k, v in roofs.items() if v}
    plotted = [m for m in measurements if m.intensity]  # no FLOPs (a copy): not on this plot
    lo = min([0.05] + [m.intensity / 3 for m in plotted])
    hi = max([10 * ridge_point(max(roofs.values()), spec.memory_bandwidth_gbs)]
             + [m.intensity * 3 for m in plotted])
    x = np.logspace(np.log10(lo), np.log10(hi), 400)
    bw = spec.memory_bandwidth_gbs
    for (label, peak), style in zip(roofs.items(), ["-", "--", "-."]):
        ax.plot(x, np.minimum(peak, x * bw / 1e3), style, color="black", linewidth=1.2,
                label=f"datasheet {label}: {peak:g} TFLOP/s, {bw:,.0f} GB/s")
    measured = cached_ceilings() if is_this_gpu else None
    if measured:
        for label, key in (("cuBLAS fp16", "fp16"), ("cuBLAS fp32", "fp32")):
            peak = measured.matmul_tflops[key]
            ax.plot(x, np.minimum(peak, x * measured.copy_gbs / 1e3), ":", color="tab:blue",
                    label=f"measured {label}: {peak:.0f} TFLOP/s, "
                          f"copy {measured.copy_gbs:,.0f} GB/s")
    for i, m in enumerate(plotted):
        color = f"C{(i + 1) % 10}"
        if m.interpreter:
            y = attainable_tflops(m.intensity, max(roofs.values()), bw)
            ax.plot(m.intensity, y, "o", mfc="none", color=color, markersize=9)
            ax.annotate(f"{m.name} (interpreter: drawn at the roof)", (m.intensity, y),
                        textcoords="offset points", xytext=(8, -12 - 13 * i), color=color)
        else:
            ax.plot(m.intensity, m.tflops, "o", color=color, markersize=8)
            ax.annotate(f"{m.name}: {m.tflops:.3g} TFLOP/s", (m.intensity, m.tflops),
                        textcoords="offset points", xytext=(8, 4 - 13 * i), color=color)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of device memory traffic)")
    ax.set_ylabel("TFLOP/s")
    where = "this GPU" if is_this_gpu else "datasheet only, not the GPU measured here"
    ax.set_title(title or f"Roofline: {spec.name} ({where})")
    rates = [m.tflops for m in plotted if m.tflops and not m.interpreter]
    if rates:  # slow kernels sit far below the roofs: keep them and their labels in view
        ax.set_ylim(bottom=min(ax.get_ylim()[0], min(rates) / 4))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return ax


def plot_ladder(measurements: Sequence[Measurement], ax: plt.Axes | None = None,
                title: str | None = None) -> plt.Axes:
    """The ladder chart of a lesson: one horizontal bar per version (in the order given, e.g.
    naive, tiled, cuBLAS), its TFLOP/s on a log scale, each bar labelled with its rate and its
    speedup over the first. Measurements need ``flops``; interpreter measurements are refused
    (their time says nothing about a GPU)."""
    if any(m.interpreter for m in measurements):
        raise ValueError("a ladder of interpreter timings would say nothing about GPU speed: "
                         "plot it on a GPU (the roofline shows the interpreter's kernels)")
    rated = [m for m in measurements if m.tflops]
    if not rated:
        raise ValueError("plot_ladder needs measurements with flops")
    if ax is None:
        _, ax = _pyplot().subplots(figsize=(8, 0.6 * len(rated) + 1.5))
    names = [m.name for m in rated][::-1]
    rates = [m.tflops for m in rated][::-1]
    ax.barh(names, rates, color=[f"C{i % 10}" for i in range(len(rated))][::-1])
    for y, rate in enumerate(rates):
        ax.annotate(f" {rate:.3g} TFLOP/s ({rate / rated[0].tflops:.3g}x)", (rate, y),
                    va="center", fontsize=9)
    ax.set_xscale("log")
    ax.set_xlim(min(rates) / 2, max(rates) * 20)
    ax.set_xlabel("TFLOP/s (log scale)")
    ax.set_title(title or f"Versions of the kernel on {rated[0].device}")
    ax.grid(True, axis="x", which="both", alpha=0.3)
    return ax
