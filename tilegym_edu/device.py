"""Which mode kernels run in, and facts about the device they run on.

Two modes:

* ``"gpu"``: a CUDA GPU is visible to PyTorch; Triton compiles kernels for it.
* ``"interpreter"``: no CUDA GPU (or ``TILEGYM_MODE=interpreter``); Triton runs kernels on the
  CPU in its interpreter (``TRITON_INTERPRET=1``), one program instance at a time, which costs
  milliseconds per program. Lessons then use small problem sizes (see :func:`size`).

The mode is decided once, when this module is first imported, and must be decided before any
Triton kernel is defined: Triton picks compiled or interpreted execution when ``@triton.jit``
runs. ``import tilegym_edu`` at the top of a notebook does this.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch

MODE_VARIABLE = "TILEGYM_MODE"
MODES = ("gpu", "interpreter")

T = TypeVar("T")


def _decide_mode() -> str:
    """Pick the mode from TILEGYM_MODE, TRITON_INTERPRET or the presence of a CUDA GPU."""
    forced = os.environ.get(MODE_VARIABLE, "").strip().lower()
    if forced and forced not in MODES:
        raise ValueError(f"{MODE_VARIABLE}={forced!r} is not a mode; use one of {MODES}")
    if forced == "gpu" and os.environ.get("TRITON_INTERPRET", "0") == "1":
        raise ValueError(f"{MODE_VARIABLE}=gpu contradicts TRITON_INTERPRET=1 (Triton would run "
                         "kernels in its CPU interpreter): unset one of the two.")
    if forced == "gpu" and not torch.cuda.is_available():
        raise RuntimeError(
            f"{MODE_VARIABLE}=gpu but PyTorch sees no CUDA GPU (torch {torch.__version__}, "
            f"CUDA build: {torch.version.cuda or 'no'}). Unset {MODE_VARIABLE} to use the "
            "interpreter, or run `tilegym-edu doctor` to see why the GPU is not visible.")
    if forced:
        mode = forced
    elif os.environ.get("TRITON_INTERPRET", "0") == "1":
        mode = "interpreter"
    else:
        mode = "gpu" if torch.cuda.is_available() else "interpreter"
    if mode == "interpreter" and os.environ.get("TRITON_INTERPRET", "0") != "1":
        if "triton" in sys.modules:
            # triton.language's own helpers (tl.sigmoid, tl.cdiv, ...) were already built for a
            # GPU and fail in the interpreter with "Cannot call @triton.jit'd outside of the
            # scope of a kernel".
            raise RuntimeError(
                "triton was imported before tilegym_edu, and there is no GPU: restart the "
                "kernel (or Python) and put `import tilegym_edu` before `import triton`, or set "
                "TRITON_INTERPRET=1 before starting Python.")
        os.environ["TRITON_INTERPRET"] = "1"
    return mode


MODE: str = _decide_mode()
ON_GPU: bool = MODE == "gpu"
#: where lesson tensors live: kernels in the interpreter read CPU tensors.
DEVICE: str = "cuda" if ON_GPU else "cpu"


def cache_dir() -> Path:
    """The folder for what the course measures and tunes on this machine (ceilings, tuning
    results): ``$TILEGYM_CACHE_DIR``, else ``~/.cache/tilegym_edu``."""
    return Path(os.environ.get("TILEGYM_CACHE_DIR") or Path.home() / ".cache" / "tilegym_edu")


def size(gpu: T, cpu: T) -> T:
    """The problem size for this mode: ``gpu`` on a GPU, ``cpu`` in the interpreter.

    Lessons take every size from here rather than branching on the mode themselves, e.g.
    ``n = size(gpu=2**26, cpu=10_000)``.
    """
    return gpu if ON_GPU else cpu


def synchronize() -> None:
    """Wait until the GPU has finished all queued work (a no-op in interpreter mode, where every
    kernel has finished when its launch returns)."""
    if ON_GPU:
        torch.cuda.synchronize()


@dataclass(frozen=True)
class DeviceInfo:
    """Facts about one CUDA GPU, as the driver reports them."""

    name: str                          # e.g. "NVIDIA H200"
    compute_capability: tuple[int, int]
    sm_count: int
    memory_bytes: int
    l2_bytes: int
    driver: str                        # NVIDIA driver version, e.g. "580.159.04"

    def describe(self) -> str:
        major, minor = self.compute_capability
        return (f"{self.name} (compute capability {major}.{minor}, {self.sm_count} SMs, "
                f"{self.memory_bytes / 2**30:.0f} GiB, L2 {self.l2_bytes / 2**20:.0f} MiB, "
                f"driver {self.driver})")


@functools.cache
def has_tma(gpu: torch.device) -> bool:
    """Whether the GPU ``gpu`` has TMA, the tensor-memory accelerator tensor descriptors need
    (compute capability 9.0 or newer), asked once a device: torch.cuda.get_device_capability
    takes microseconds, and a launch wrapper may ask more than once a call."""
    return torch.cuda.get_device_capability(gpu) >= (9, 0)


@functools.cache
def info(index: int = 0) -> DeviceInfo | None:
    """Facts about GPU ``index``, or None in interpreter mode. Read once per process (the
    driver version comes from nvidia-smi, which takes tens of milliseconds)."""
    if not ON_GPU:
        return None
    props = torch.cuda.get_device_properties(index)
    return DeviceInfo(
        name=props.name,
        compute_capability=(props.major, props.minor),
        sm_count=props.multi_processor_count,
        memory_bytes=props.total_memory,
        l2_bytes=getattr(props, "L2_cache_size", 0),
        driver=driver_version(index),
    )


def nvidia_smi(query: str, index: int = 0) -> list[str] | None:
    """Values of an ``nvidia-smi --query-gpu`` query for GPU ``index`` (None if unavailable)."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits",
             "-i", str(index)],
            capture_output=True, text=True, timeout=20, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    return [v.strip() for v in out.strip().split(",")]


def driver_version(index: int = 0) -> str:
    """The NVIDIA driver version, or the CUDA driver API version if nvidia-smi is missing."""
    values = nvidia_smi("driver_version", index)
    if values:
        return values[0]
    api = torch._C._cuda_getDriverVersion()  # e.g. 13000 for CUDA 13.0
    return f"CUDA driver API {api // 1000}.{api % 1000 // 10}"


def sm_clock_mhz(index: int = 0) -> int | None:
    """The SM clock right now, in MHz, read (never set) through nvidia-smi; None if unavailable."""
    values = nvidia_smi("clocks.sm", index)
    try:
        return int(values[0]) if values else None
    except ValueError:
        return None


def banner() -> str:
    """One line that says which mode this process runs in, for the first cell of every lesson."""
    if ON_GPU:
        facts = info()
        return f"tilegym_edu: GPU mode on {facts.describe()}: kernels compile for this GPU."
    return ("tilegym_edu: interpreter mode (no CUDA GPU visible): kernels run in Triton's CPU "
            "interpreter at small sizes; Triton kernels' correctness is graded, speed cells "
            "(and CUDA C, cuTile and peak-memory cells) say 'needs GPU'.")


if not ON_GPU:
    # Kernels run in the interpreter: make older Triton interpreters work under numpy >= 2.4.
    from tilegym_edu.compat import patch_interpreter
    patch_interpreter()
