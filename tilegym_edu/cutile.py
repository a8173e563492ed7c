"""cuTile (CUDA Tile Python, the optional ``cuda-tile`` package) as lesson 07 and
:mod:`tilegym_edu.reference.cutile_kernels` use it, importable without it.

cuTile has no CPU interpreter, and lessons 00-06 do not need it, so nothing here may fail at
import time. Where ``cuda.tile`` imports, :data:`ct` is that module and :func:`cutile_kernel` is
``ct.kernel``. Where it does not, :data:`ct` is a stand-in whose every attribute raises
:class:`CutileMissing` (naming ``make cutile``), and :func:`cutile_kernel` keeps the function as a
:class:`MissingKernel` that refuses to launch: a kernel can still be defined, read and
included, which is what a notebook opened on a machine without cuTile does.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from tilegym_edu.cutile_check import INSTALL, CutileFacts, problems

try:
    import cuda.tile as _cuda_tile
except ImportError:
    _cuda_tile = None

#: why cuTile kernels cannot be compiled here and what installs cuTile; None when it imports
MISSING = (f"cuda.tile is not installed (optional, for the cuTile track of lesson 07); {INSTALL}"
           if _cuda_tile is None else None)


class CutileMissing(RuntimeError):
    """cuTile was asked for on a machine where ``cuda.tile`` does not import (or cannot run)."""


class _MissingModule:
    """Stands in for ``cuda.tile`` where it is not installed: any use says what to install."""

    def __getattr__(self, name: str) -> Any:
        raise CutileMissing(f"ct.{name}: {MISSING}")

    def __repr__(self) -> str:
        return "<cuda.tile: not installed>"


#: ``cuda.tile`` (the lessons write ``ct.load``, ``ct.mma``, ``ct.launch`` ...), or its stand-in
ct: Any = _cuda_tile if _cuda_tile is not None else _MissingModule()

#: a compile-time integer parameter: one compilation per value (1.7.0 has no ct.ConstInt);
#: plain ``int`` without cuTile, so that a kernel's signature still evaluates
ConstInt: Any = _cuda_tile.Constant[int] if _cuda_tile is not None else int
#: a compile-time boolean parameter (``bool`` without cuTile)
ConstBool: Any = _cuda_tile.Constant[bool] if _cuda_tile is not None else bool


class MissingKernel:
    """A function written as a cuTile kernel where cuTile is not installed: it keeps the Python
    function (``fn``) and the kernel options, and refuses to be launched or called."""

    def __init__(self, fn: Callable[..., Any], options: dict[str, Any]):
        self.fn, self.options = fn, options
        self.__name__, self.__doc__ = fn.__name__, fn.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise CutileMissing(f"cuTile kernel {self.__name__}: {MISSING}")

    def __repr__(self) -> str:
        return f"<cuTile kernel {self.__name__}, not compiled: cuda.tile is not installed>"


def cutile_kernel(fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """``ct.kernel``, bare (``@cutile_kernel``) or with options (``@cutile_kernel(occupancy=2)``:
    ``num_ctas``, ``occupancy``, ``opt_level``, ``num_worker_warps``); without cuTile, the
    function kept as a :class:`MissingKernel`."""
    if _cuda_tile is not None:
        return _cuda_tile.kernel(fn, **options) if fn is not None else _cuda_tile.kernel(**options)
    if fn is None:
        return lambda f: MissingKernel(f, options)
    return MissingKernel(fn, options)


def require(what: str) -> None:
    """Raise CutileMissing, saying why and what to do, unless cuTile kernels can run here: cuda.tile
    installed with its toolchain, on a GPU it supports."""
    if _cuda_tile is None:
        raise CutileMissing(f"{what} needs cuTile: {MISSING}")
    found = problems(CutileFacts.of_this_machine())
    if found:
        raise CutileMissing(f"{what} needs cuTile, which cannot run here: "
                            + "; ".join(f"{p.summary} ({p.fix})" for p in found))


def launch(device: torch.device, grid: tuple[int, ...], kernel: Any, args: tuple) -> None:
    """``ct.launch(stream, grid, kernel, args)`` on ``device``'s current PyTorch stream (the one
    the course's timer measures): ``grid`` is a tuple of one to three block counts, ``args``
    the kernel's own arguments, positional, in its order."""
    if isinstance(kernel, MissingKernel):
        kernel()
    ct.launch(torch.cuda.current_stream(device), grid, kernel, args)
