"""What the optional cuTile track (CUDA Tile Python, the ``cuda-tile`` package) needs on this
machine, checked: for ``tilegym-edu doctor``. Nothing of it is needed for lessons 00-06.

What was found on an H200 (driver 580.159.04, image CUDA 13.0; docs/results/h200.md):

* cuTile runs on compute capability 8.x to 12.x with a driver of r580 or later, and has no CPU
  interpreter;
* ``cuda.tile`` compiles with ``tileiras``, which needs ``ptxas`` and ``libnvvm``. From pip these
  are ``nvidia-cuda-tileiras``, ``nvidia-cuda-nvcc`` and ``nvidia-nvvm``; ``cuda.tile`` finds
  them only when all three are installed with one major.minor version;
* tileiras 13.4 with the CUDA 13.0 toolchain's ptxas and libnvvm failed on Hopper (exit status
  5): Hopper needs the 13.3 toolchain or newer. 13.4.92 compiled and ran there.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

from tilegym_edu.compat import Problem

#: the pip toolchain cuda.tile compiles with, one major.minor for all three
TOOLCHAIN = ("nvidia-cuda-tileiras", "nvidia-cuda-nvcc", "nvidia-nvvm")
#: the toolchain version `make cutile` installs: the one that ran on the H200
TESTED_TOOLCHAIN = "13.4"
#: the oldest driver branch cuTile runs on
MIN_DRIVER = 580
#: the oldest toolchain tileiras works with on Hopper (compute capability 9.x)
MIN_HOPPER_TOOLCHAIN = (13, 3)
INSTALL = (f"make cutile: cuda-tile and {', '.join(TOOLCHAIN)} at {TESTED_TOOLCHAIN}.*, the "
           "versions tested on an H200")


@dataclass(frozen=True)
class CutileFacts:
    """What decides whether cuTile can run here: package versions (None: not installed), the
    GPU's compute capability and driver version (None: no GPU)."""

    cuda_tile: str | None
    toolchain: dict[str, str | None]
    compute_capability: tuple[int, int] | None
    driver: str | None

    @classmethod
    def of_this_machine(cls) -> CutileFacts:
        from tilegym_edu import device
        facts = device.info()
        return cls(cuda_tile=_installed("cuda-tile"),
                   toolchain={name: _installed(name) for name in TOOLCHAIN},
                   compute_capability=facts.compute_capability if facts else None,
                   driver=facts.driver if facts else None)


def _installed(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _major_minor(text: str) -> tuple[int, int]:
    major, minor, *_ = (int(part) for part in text.split(".")[:2] + ["0"])
    return major, minor


def status(facts: CutileFacts) -> str:
    """One line for the doctor: what is installed, or that nothing is (the track is optional)."""
    if facts.cuda_tile is None:
        return "not installed (optional, for the cuTile track: `make cutile` installs it)"
    tools = ", ".join(f"{name} {v or 'missing'}" for name, v in facts.toolchain.items())
    return f"cuda-tile {facts.cuda_tile}; {tools}"


def problems(facts: CutileFacts) -> list[Problem]:
    """What stops cuTile from running here, each with its fix; none when it is not installed
    (lessons 00-06 do not need it)."""
    if facts.cuda_tile is None:
        return []
    found = []
    if facts.compute_capability is None:
        found.append(Problem(
            "cuTile has no CPU interpreter: its lesson needs an NVIDIA GPU (compute capability "
            "8.x to 12.x)", "run the cuTile track on a machine with such a GPU"))
    elif not 8 <= facts.compute_capability[0] <= 12:
        cc = ".".join(map(str, facts.compute_capability))
        found.append(Problem(f"cuTile runs on compute capability 8.x to 12.x; this GPU is {cc}",
                             "run the cuTile track on an Ampere, Ada, Hopper or Blackwell GPU"))
    if facts.driver is not None and int(facts.driver.split(".")[0]) < MIN_DRIVER:
        found.append(Problem(f"cuTile needs an NVIDIA driver of r{MIN_DRIVER} or later; this "
                             f"one is {facts.driver}",
                             f"install a driver of the r{MIN_DRIVER} branch or later"))
    missing = [name for name, v in facts.toolchain.items() if v is None]
    versions = {name: _major_minor(v) for name, v in facts.toolchain.items() if v is not None}
    if missing:
        found.append(Problem(f"cuda.tile compiles with tileiras, ptxas and libnvvm; not "
                             f"installed: {', '.join(missing)}", INSTALL))
    if len(set(versions.values())) > 1:
        shown = ", ".join(f"{name} {facts.toolchain[name]}" for name in versions)
        found.append(Problem(f"cuda.tile finds the pip toolchain only when its three packages "
                             f"share one major.minor version; installed: {shown}", INSTALL))
    hopper = facts.compute_capability is not None and facts.compute_capability[0] == 9
    old = [name for name, v in versions.items() if v < MIN_HOPPER_TOOLCHAIN]
    if hopper and old:
        least = ".".join(map(str, MIN_HOPPER_TOOLCHAIN))
        found.append(Problem(f"on Hopper tileiras fails with a toolchain older than {least} "
                             f"(exit status 5); installed: "
                             f"{', '.join(f'{n} {facts.toolchain[n]}' for n in old)}", INSTALL))
    return found
