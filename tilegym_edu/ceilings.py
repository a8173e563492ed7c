"""Your GPU's ceilings, measured: copy bandwidth and the vendor library's matmul rate per dtype.

Datasheet figures (:mod:`tilegym_edu.specs`) are what a GPU could do; these are what yours does,
through PyTorch, today. Lessons use them as the roofs a kernel is measured against. Results are
cached per GPU, driver and torch version in ``$TILEGYM_CACHE_DIR`` (default
``~/.cache/tilegym_edu``), so only the first call measures.
"""
from __future__ import annotations

import datetime
import json
import types
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from tilegym_edu import bench, device

#: matmul size for the vendor rate: large enough to fill any GPU of the spec table
MATMUL_SIZE = 8192
#: bytes copied for the bandwidth figure: far beyond any L2
COPY_BYTES = 2 * 2**30
#: read-only, as is every table of a module a learner's code may import
MATMUL_DTYPES = types.MappingProxyType({"fp16": torch.float16, "bf16": torch.bfloat16,
                                        "tf32": torch.float32, "fp32": torch.float32})


@dataclass(frozen=True)
class Ceilings:
    """Measured ceilings of one GPU: GB/s and TFLOP/s are 1e9 bytes and 1e12 FLOPs per second."""

    gpu: str
    driver: str
    torch: str
    measured_on: str                   # ISO date
    copy_gbs: float                    # device-to-device copy, bytes read + bytes written
    matmul_tflops: dict[str, float]    # torch.matmul (cuBLAS) at MATMUL_SIZE³, by dtype name


def cache_path() -> Path:
    return device.cache_dir() / "ceilings.json"


def _cache_key(facts: device.DeviceInfo) -> str:
    return f"{facts.name} | driver {facts.driver} | torch {torch.__version__}"


def measure_copy_gbs(nbytes: int = COPY_BYTES) -> float:
    """GB/s of a device-to-device copy moving ``nbytes`` (read + written)."""
    return bench.bench(bench.device_copy(nbytes), bytes=nbytes, name="copy").gbs


def measure_matmul_tflops(name: str, n: int = MATMUL_SIZE) -> float:
    """torch.matmul at n³ for dtype ``name`` ("tf32" is float32 with TF32 tensor cores on)."""
    dtype = MATMUL_DTYPES[name]
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
    try:
        return bench.bench(lambda: a @ b, flops=2 * n**3, name=f"matmul {name}").tflops
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def measure_ceilings(refresh: bool = False) -> Ceilings:
    """This GPU's ceilings, from the cache when they were measured before (``refresh`` measures
    again). Needs a GPU: raises RuntimeError in interpreter mode."""
    facts = device.info()
    if facts is None:
        raise RuntimeError("measure_ceilings() needs a CUDA GPU; in interpreter mode use the "
                           "datasheet figures of tilegym_edu.specs instead")
    path, key = cache_path(), _cache_key(facts)
    cache = json.loads(path.read_text()) if path.exists() else {}
    if key in cache and not refresh:
        return Ceilings(**cache[key])
    ceilings = Ceilings(
        gpu=facts.name, driver=facts.driver, torch=torch.__version__,
        measured_on=datetime.date.today().isoformat(), copy_gbs=measure_copy_gbs(),
        matmul_tflops={name: measure_matmul_tflops(name) for name in MATMUL_DTYPES})
    cache[key] = asdict(ceilings)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cache, indent=1))
    return ceilings


def cached_ceilings() -> Ceilings | None:
    """The cached ceilings of this GPU, or None when not measured yet (or no GPU)."""
    facts = device.info()
    path = cache_path()
    if facts is None or not path.exists():
        return None
    entry = json.loads(path.read_text()).get(_cache_key(facts))
    return Ceilings(**entry) if entry else None
