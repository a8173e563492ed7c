"""Datasheet peak rates of common NVIDIA GPUs, from T4 to B200, and where each figure comes from.

Roofline plots draw their roofs from this table, and :mod:`tilegym_edu.bench` uses it to flag a
measurement that lies above the roof (which means the measurement is wrong, not the GPU fast).

Units and conventions:

* Compute rates are in TFLOP/s (1e12 floating-point operations per second; a fused multiply-add
  counts as two) and are **dense**: NVIDIA's datasheets often quote tensor-core rates "with
  sparsity" (2:4 structured sparsity), which doubles them. Where a datasheet gives only the sparse
  figure, this table halves it and says so in ``notes``.
* Rates are peaks at the boost clock. Under a long load a GPU may clock lower (power or heat).
* ``memory_bandwidth_gbs`` is in GB/s, 1e9 bytes per second, as on the datasheet.
* ``memory_gib`` is the capacity as sold, the datasheet's "GB" figure. GPU memory comes in binary
  sizes (an "80 GB" A100 has 80 GiB of DRAM), so read it as GiB; the driver reports a little less
  (ECC and reserved memory).

Datasheet peaks are upper bounds that real kernels rarely reach. A ceiling measured on your own
GPU (the package measures them elsewhere) is the better roof: prefer it whenever you have one.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuSpec:
    """Datasheet peak rates of one GPU model. Rates are dense (no structured sparsity).

    ``memory_gib`` is the datasheet's "GB" capacity, which for GPU memory is in effect GiB.
    """

    key: str                      # short stable id, e.g. "h200-sxm", "a100-sxm-80gb", "t4"
    name: str                     # human name, e.g. "NVIDIA H200 SXM"
    compute_capability: tuple[int, int]
    sm_count: int
    memory_gib: float             # as sold: the datasheet's "GB" figure (binary sizes, so GiB)
    memory_bandwidth_gbs: float   # GB/s, 1e9 bytes per second, datasheet
    fp32_tflops: float            # plain FP32 (CUDA cores, no tensor cores), dense
    tf32_tflops: float | None     # tensor-core TF32, dense; None where the GPU has none (T4, V100)
    fp16_tflops: float            # tensor-core FP16 with FP32 accumulate, dense
    bf16_tflops: float | None     # tensor-core BF16 dense; None where unsupported
    source: str                   # where the figures come from: datasheet/whitepaper title and URL
    notes: str = ""               # what a learner should know (half-rate accumulate, etc.)
    device_names: tuple[str, ...] = ()  # exact strings torch.cuda.get_device_name() reports


_V100 = "NVIDIA V100 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/v100/"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/a100/"
_H100 = "NVIDIA H100 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/h100/"
_H200 = "NVIDIA H200 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/h200/"
_GH200 = ("NVIDIA GH200 Grace Hopper Superchip datasheet, "
          "https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/")
_GA102 = ("NVIDIA Ampere GA102 GPU Architecture whitepaper (appendix tables), "
          "https://www.nvidia.com/content/PDF/"
          "nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf")
_ADA = ("NVIDIA Ada GPU Architecture whitepaper (appendix tables), "
        "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf")

_SPARSE_HALVED = "The datasheet's tensor-core figures are with sparsity; halved here."
_GEFORCE_HALF_RATE = ("GeForce tensor cores run FP16 with FP32 accumulate at half the "
                      "FP16-accumulate rate ({fp16acc} TFLOP/s); fp16/bf16 here are the "
                      "FP32-accumulate figures.")

SPECS: tuple[GpuSpec, ...] = (
    # Turing and Volta: FP16 tensor cores only (no TF32, no BF16).
    GpuSpec(
        key="t4", name="NVIDIA T4", compute_capability=(7, 5), sm_count=40,
        memory_gib=16, memory_bandwidth_gbs=320,
        fp32_tflops=8.1, tf32_tflops=None, fp16_tflops=65, bf16_tflops=None,
        source="NVIDIA T4 Tensor Core GPU datasheet, "
               "https://www.nvidia.com/en-us/data-center/tesla-t4/",
        notes="fp16 is the datasheet's 'mixed precision (FP16/FP32)' tensor figure. The 70 W "
              "power cap often holds the clock well below boost under a sustained load.",
        device_names=("Tesla T4",),
    ),
    GpuSpec(
        key="v100-sxm2-16gb", name="NVIDIA V100 SXM2 16GB", compute_capability=(7, 0),
        sm_count=80, memory_gib=16, memory_bandwidth_gbs=900,
        fp32_tflops=15.7, tf32_tflops=None, fp16_tflops=125, bf16_tflops=None,
        source=_V100,
        notes="fp16 is the datasheet's 'tensor performance' (FP16 inputs, FP32 accumulate).",
        device_names=("Tesla V100-SXM2-16GB",),
    ),
    GpuSpec(
        key="v100-sxm2-32gb", name="NVIDIA V100 SXM2 32GB", compute_capability=(7, 0),
        sm_count=80, memory_gib=32, memory_bandwidth_gbs=900,
        fp32_tflops=15.7, tf32_tflops=None, fp16_tflops=125, bf16_tflops=None,
        source=_V100,
        notes="fp16 is the datasheet's 'tensor performance' (FP16 inputs, FP32 accumulate).",
        device_names=("Tesla V100-SXM2-32GB",),
    ),
    GpuSpec(
        key="v100-pcie-16gb", name="NVIDIA V100 PCIe 16GB", compute_capability=(7, 0),
        sm_count=80, memory_gib=16, memory_bandwidth_gbs=900,
        fp32_tflops=14, tf32_tflops=None, fp16_tflops=112, bf16_tflops=None,
        source=_V100,
        notes="fp16 is the datasheet's 'tensor performance' (FP16 inputs, FP32 accumulate). "
              "Lower clock than the SXM2 part.",
        device_names=("Tesla V100-PCIE-16GB",),
    ),
    GpuSpec(
        key="v100-pcie-32gb", name="NVIDIA V100 PCIe 32GB", compute_capability=(7, 0),
        sm_count=80, memory_gib=32, memory_bandwidth_gbs=900,
        fp32_tflops=14, tf32_tflops=None, fp16_tflops=112, bf16_tflops=None,
        source=_V100,
        notes="fp16 is the datasheet's 'tensor performance' (FP16 inputs, FP32 accumulate). "
              "Lower clock than the SXM2 part.",
        device_names=("Tesla V100-PCIE-32GB",),
    ),
    # Ampere.
    GpuSpec(
        key="a100-pcie-40gb", name="NVIDIA A100 PCIe 40GB", compute_capability=(8, 0),
        sm_count=108, memory_gib=40, memory_bandwidth_gbs=1555,
        fp32_tflops=19.5, tf32_tflops=156, fp16_tflops=312, bf16_tflops=312,
        source=_A100,
        device_names=("NVIDIA A100-PCIE-40GB",),
    ),
    GpuSpec(
        key="a100-sxm-40gb", name="NVIDIA A100 SXM4 40GB", compute_capability=(8, 0),
        sm_count=108, memory_gib=40, memory_bandwidth_gbs=1555,
        fp32_tflops=19.5, tf32_tflops=156, fp16_tflops=312, bf16_tflops=312,
        source=_A100,
        device_names=("NVIDIA A100-SXM4-40GB",),
    ),
    GpuSpec(
        key="a100-pcie-80gb", name="NVIDIA A100 PCIe 80GB", compute_capability=(8, 0),
        sm_count=108, memory_gib=80, memory_bandwidth_gbs=1935,
        fp32_tflops=19.5, tf32_tflops=156, fp16_tflops=312, bf16_tflops=312,
        source=_A100,
        device_names=("NVIDIA A100 80GB PCIe",),
    ),
    GpuSpec(
        key="a100-sxm-80gb", name="NVIDIA A100 SXM4 80GB", compute_capability=(8, 0),
        sm_count=108, memory_gib=80, memory_bandwidth_gbs=2039,
        fp32_tflops=19.5, tf32_tflops=156, fp16_tflops=312, bf16_tflops=312,
        source=_A100,
        device_names=("NVIDIA A100-SXM4-80GB",),
    ),
    GpuSpec(
        key="a10", name="NVIDIA A10", compute_capability=(8, 6), sm_count=72,
        memory_gib=24, memory_bandwidth_gbs=600,
        fp32_tflops=31.2, tf32_tflops=62.5, fp16_tflops=125, bf16_tflops=125,
        source="NVIDIA A10 Tensor Core GPU datasheet, "
               "https://www.nvidia.com/en-us/data-center/products/a10-gpu/",
        device_names=("NVIDIA A10",),
    ),
    GpuSpec(
        key="a10g", name="NVIDIA A10G", compute_capability=(8, 6), sm_count=80,
        memory_gib=24, memory_bandwidth_gbs=600,
        fp32_tflops=35, tf32_tflops=35, fp16_tflops=70, bf16_tflops=70,
        source="Baseten, 'NVIDIA A10 vs A10G for ML model inference', "
               "https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/ ; "
               "AWS EC2 G5 instances, https://aws.amazon.com/ec2/instance-types/g5/",
        notes="An AWS-only variant (EC2 G5) with no NVIDIA datasheet: the rates are third-party "
              "figures, approximate; prefer a measured ceiling. Same memory as the A10, more "
              "CUDA-core but less tensor-core throughput.",
        device_names=("NVIDIA A10G",),
    ),
    GpuSpec(
        key="rtx-3080-10gb", name="NVIDIA GeForce RTX 3080 (10 GB)", compute_capability=(8, 6),
        sm_count=68, memory_gib=10, memory_bandwidth_gbs=760,
        fp32_tflops=29.8, tf32_tflops=29.8, fp16_tflops=59.5, bf16_tflops=59.5,
        source=_GA102,
        notes=_GEFORCE_HALF_RATE.format(fp16acc=119) + " The 12 GB RTX 3080 (more SMs, "
              "912 GB/s) reports the same name and is not in this table.",
        device_names=("NVIDIA GeForce RTX 3080",),
    ),
    GpuSpec(
        key="rtx-3090", name="NVIDIA GeForce RTX 3090", compute_capability=(8, 6), sm_count=82,
        memory_gib=24, memory_bandwidth_gbs=936,
        fp32_tflops=35.6, tf32_tflops=35.6, fp16_tflops=71, bf16_tflops=71,
        source=_GA102,
        notes=_GEFORCE_HALF_RATE.format(fp16acc=142),
        device_names=("NVIDIA GeForce RTX 3090",),
    ),
    GpuSpec(
        key="rtx-a6000", name="NVIDIA RTX A6000", compute_capability=(8, 6), sm_count=84,
        memory_gib=48, memory_bandwidth_gbs=768,
        fp32_tflops=38.7, tf32_tflops=77.4, fp16_tflops=154.8, bf16_tflops=154.8,
        source="NVIDIA RTX A6000 datasheet, "
               "https://www.nvidia.com/en-us/design-visualization/rtx-a6000/",
        notes="The datasheet gives one tensor figure, 309.7 TFLOP/s with sparsity: fp16/bf16 are "
              "half of it, tf32 a quarter (the TF32:FP16 ratio the A40 datasheet gives for the "
              "same GA102 chip). Unlike GeForce, FP32 accumulate runs at full rate.",
        device_names=("NVIDIA RTX A6000",),
    ),
    # Ada Lovelace.
    GpuSpec(
        key="l4", name="NVIDIA L4", compute_capability=(8, 9), sm_count=58,
        memory_gib=24, memory_bandwidth_gbs=300,
        fp32_tflops=30.3, tf32_tflops=60, fp16_tflops=121, bf16_tflops=121,
        source="NVIDIA L4 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/l4/",
        notes=_SPARSE_HALVED + " The 72 W power cap often holds the clock below boost.",
        device_names=("NVIDIA L4",),
    ),
    GpuSpec(
        key="l40s", name="NVIDIA L40S", compute_capability=(8, 9), sm_count=142,
        memory_gib=48, memory_bandwidth_gbs=864,
        fp32_tflops=91.6, tf32_tflops=183, fp16_tflops=362.05, bf16_tflops=362.05,
        source="NVIDIA L40S GPU datasheet, https://www.nvidia.com/en-us/data-center/l40s/",
        device_names=("NVIDIA L40S",),
    ),
    GpuSpec(
        key="rtx-4080", name="NVIDIA GeForce RTX 4080", compute_capability=(8, 9), sm_count=76,
        memory_gib=16, memory_bandwidth_gbs=716.8,
        fp32_tflops=48.7, tf32_tflops=48.7, fp16_tflops=97.5, bf16_tflops=97.5,
        source=_ADA,
        notes=_GEFORCE_HALF_RATE.format(fp16acc=194.9),
        device_names=("NVIDIA GeForce RTX 4080",),
    ),
    GpuSpec(
        key="rtx-4090", name="NVIDIA GeForce RTX 4090", compute_capability=(8, 9), sm_count=128,
        memory_gib=24, memory_bandwidth_gbs=1008,
        fp32_tflops=82.6, tf32_tflops=82.6, fp16_tflops=165.2, bf16_tflops=165.2,
        source=_ADA,
        notes=_GEFORCE_HALF_RATE.format(fp16acc=330.3),
        device_names=("NVIDIA GeForce RTX 4090",),
    ),
    GpuSpec(
        key="rtx-6000-ada", name="NVIDIA RTX 6000 Ada Generation", compute_capability=(8, 9),
        sm_count=142, memory_gib=48, memory_bandwidth_gbs=960,
        fp32_tflops=91.1, tf32_tflops=182.1, fp16_tflops=364.2, bf16_tflops=364.2,
        source="NVIDIA RTX 6000 Ada Generation datasheet, https://www.nvidia.com/content/dam/"
               "en-zz/Solutions/design-visualization/rtx-6000/"
               "proviz-print-rtx6000-datasheet-web-2504660.pdf",
        notes="The datasheet gives one tensor figure, FP8 1457.0 TFLOP/s with sparsity: fp16/bf16 "
              "are a quarter of it and tf32 an eighth (the FP8:FP16:TF32 ratios the L40S "
              "datasheet gives for the same AD102 chip). FP32 accumulate runs at full rate.",
        device_names=("NVIDIA RTX 6000 Ada Generation",),
    ),
    # Hopper.
    GpuSpec(
        key="h100-pcie", name="NVIDIA H100 PCIe", compute_capability=(9, 0), sm_count=114,
        memory_gib=80, memory_bandwidth_gbs=2000,
        fp32_tflops=51, tf32_tflops=378, fp16_tflops=756.5, bf16_tflops=756.5,
        source=_H100,
        notes=_SPARSE_HALVED + " HBM2e; the datasheet rounds the bandwidth to 2 TB/s.",
        device_names=("NVIDIA H100 PCIe",),
    ),
    GpuSpec(
        key="h100-sxm", name="NVIDIA H100 SXM", compute_capability=(9, 0), sm_count=132,
        memory_gib=80, memory_bandwidth_gbs=3350,
        fp32_tflops=67, tf32_tflops=494.5, fp16_tflops=989.5, bf16_tflops=989.5,
        source=_H100,
        notes=_SPARSE_HALVED,
        device_names=("NVIDIA H100 80GB HBM3",),
    ),
    GpuSpec(
        key="h100-nvl", name="NVIDIA H100 NVL", compute_capability=(9, 0), sm_count=132,
        memory_gib=94, memory_bandwidth_gbs=3900,
        fp32_tflops=60, tf32_tflops=417.5, fp16_tflops=835.5, bf16_tflops=835.5,
        source=_H100,
        notes=_SPARSE_HALVED + " A PCIe card; per-GPU figures.",
        device_names=("NVIDIA H100 NVL",),
    ),
    GpuSpec(
        key="h200-sxm", name="NVIDIA H200 SXM", compute_capability=(9, 0), sm_count=132,
        memory_gib=141, memory_bandwidth_gbs=4800,
        fp32_tflops=67, tf32_tflops=494.5, fp16_tflops=989.5, bf16_tflops=989.5,
        source=_H200,
        notes=_SPARSE_HALVED + " The H100 SXM's compute with more, faster memory (HBM3e).",
        device_names=("NVIDIA H200",),
    ),
    GpuSpec(
        key="h200-nvl", name="NVIDIA H200 NVL", compute_capability=(9, 0), sm_count=132,
        memory_gib=141, memory_bandwidth_gbs=4800,
        fp32_tflops=60, tf32_tflops=417.5, fp16_tflops=835.5, bf16_tflops=835.5,
        source=_H200,
        notes=_SPARSE_HALVED + " A PCIe card with a lower power limit than the SXM part.",
        device_names=("NVIDIA H200 NVL",),
    ),
    GpuSpec(
        key="gh200-96gb", name="NVIDIA GH200 (96 GB HBM3)", compute_capability=(9, 0),
        sm_count=132, memory_gib=96, memory_bandwidth_gbs=4000,
        fp32_tflops=67, tf32_tflops=494.5, fp16_tflops=989.5, bf16_tflops=989.5,
        source=_GH200,
        notes=_SPARSE_HALVED + " The GPU half of a Grace Hopper superchip; '480GB' in the "
              "reported name is the Grace CPU's LPDDR5X, reached over NVLink-C2C, not GPU memory.",
        device_names=("NVIDIA GH200 480GB",),
    ),
    GpuSpec(
        key="gh200-144gb", name="NVIDIA GH200 (144 GB HBM3e)", compute_capability=(9, 0),
        sm_count=132, memory_gib=144, memory_bandwidth_gbs=4900,
        fp32_tflops=67, tf32_tflops=494.5, fp16_tflops=989.5, bf16_tflops=989.5,
        source=_GH200,
        notes=_SPARSE_HALVED + " The GPU half of a Grace Hopper superchip, HBM3e version.",
        device_names=("NVIDIA GH200 144G HBM3e",),
    ),
    # Blackwell.
    GpuSpec(
        key="b200", name="NVIDIA B200", compute_capability=(10, 0), sm_count=148,
        memory_gib=180, memory_bandwidth_gbs=7700,
        fp32_tflops=75, tf32_tflops=1100, fp16_tflops=2250, bf16_tflops=2250,
        source="NVIDIA HGX B200 specifications (per GPU), "
               "https://www.nvidia.com/en-us/data-center/hgx/",
        notes=_SPARSE_HALVED + " Per-GPU figures of the HGX B200 board (1,000 W); earlier "
              "announcements gave 192 GB and 8 TB/s.",
        device_names=("NVIDIA B200",),
    ),
    GpuSpec(
        key="rtx-5090", name="NVIDIA GeForce RTX 5090", compute_capability=(12, 0),
        sm_count=170, memory_gib=32, memory_bandwidth_gbs=1792,
        fp32_tflops=104.8, tf32_tflops=104.8, fp16_tflops=209.5, bf16_tflops=209.5,
        source="NVIDIA RTX Blackwell GPU Architecture whitepaper (appendix tables), "
               "https://images.nvidia.com/aem-dam/Solutions/geforce/blackwell/"
               "nvidia-rtx-blackwell-gpu-architecture.pdf",
        notes=_GEFORCE_HALF_RATE.format(fp16acc=419),
        device_names=("NVIDIA GeForce RTX 5090",),
    ),
)

_BY_KEY = {spec.key: spec for spec in SPECS}


def _normalise(device_name: str) -> str:
    """Lower-case, single-spaced, without the leading "NVIDIA"/"Tesla" that drivers add or drop."""
    words = device_name.lower().split()
    while words and words[0] in ("nvidia", "tesla"):
        words.pop(0)
    return " ".join(words)


def _memory_fits(spec: GpuSpec, memory_bytes: int) -> bool:
    """Whether a reported total memory can be this model's: at most 15% below its datasheet size
    (ECC and driver reservations) and at most 5% above it."""
    gib = memory_bytes / 2**30
    return 0.85 * spec.memory_gib <= gib <= 1.05 * spec.memory_gib


def find_spec(device_name: str, memory_bytes: int | None = None) -> GpuSpec | None:
    """The spec whose model matches torch.cuda.get_device_name() output, e.g. 'NVIDIA H200',
    'NVIDIA A100-SXM4-80GB', 'Tesla T4', 'NVIDIA GeForce RTX 4090', 'NVIDIA H100 80GB HBM3',
    'NVIDIA H100 PCIe', 'NVIDIA A10G', 'NVIDIA L4'. Use memory_bytes (total device memory) to
    tell apart variants that share a name (e.g. A100 40GB vs 80GB PCIe). None when unknown.

    Names match whole (ignoring case, spacing and a leading "NVIDIA"/"Tesla"), never as
    substrings, so 'NVIDIA A100...' never matches the A10 and 'RTX 4090 D' or a laptop part
    never matches the RTX 4090. With ``memory_bytes`` (``torch.cuda.get_device_properties(0)
    .total_memory``), a model whose datasheet memory does not fit it is ruled out; when more
    than one model (or none) is left, the answer is None rather than a guess.
    """
    wanted = _normalise(device_name)
    matches = [spec for spec in SPECS
               if any(_normalise(name) == wanted for name in spec.device_names)]
    if memory_bytes is not None:
        matches = [spec for spec in matches if _memory_fits(spec, memory_bytes)]
    return matches[0] if len(matches) == 1 else None


def spec_by_key(key: str) -> GpuSpec:
    """Look up by key; KeyError listing the known keys when missing."""
    try:
        return _BY_KEY[key]
    except KeyError:
        raise KeyError(f"no GPU spec with key {key!r}; known keys: "
                       f"{', '.join(sorted(_BY_KEY))}") from None
