"""The attribute names a learner's graded code may read anywhere: the public API of what kernel
code uses, and nothing else.

Python reaches everything from anything through attributes (a kernel's record of the globals it
read, a function's module, a code object's constants), so a list of forbidden attribute names
is never complete: eight rounds of a red team (2026-12-05) found a new one each time. This
module turns the rule around. A learner's code may read, on any object, only

* the public names of the modules kernel code uses (torch at its top level, ``torch.Tensor``,
  ``torch.nn.functional``, ``torch.cuda``, Triton and ``triton.language``, cuTile where it is
  installed, ``math``, ``itertools``), of the classes whose objects it handles (dtypes,
  devices, CUDA events and device properties, autograd's ``Function`` and ``ctx``, ``nn``
  layers, Triton's ``Config``), and of the course's measuring modules
  (:data:`tilegym_edu.audit.ALLOWED_IMPORTS`) and their classes;
* a short, named list from the other allowed standard modules (:data:`STANDARD_PARTS`) and from
  Triton's kernel objects (:data:`TRITON_OBJECT_PARTS`);
* the methods of Python's own containers, numbers and strings.

Besides these, the audit allows the names the lesson's own cells read (``layer.q_proj``), and
:mod:`tilegym_edu.write_guard` lets any other name be read at run time from the learner's own
objects only. Forbidden names (:data:`tilegym_edu.audit.FORBIDDEN_ATTRIBUTES`, private and
dunder names) stay forbidden even where a public API has them.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import types

#: the parts of the other allowed standard modules graded code may use (the rest of them:
#: ``functools.update_wrapper``, ``typing.get_type_hints``, ``enum.global_enum`` ... reach
#: around the audit)
STANDARD_PARTS = {
    "functools": ("partial", "reduce", "lru_cache", "cache", "cached_property", "cmp_to_key",
                  "total_ordering"),
    "typing": ("Any", "Callable", "ClassVar", "Dict", "Final", "Iterable", "Iterator", "List",
               "Literal", "Mapping", "NamedTuple", "Optional", "Sequence", "Set", "Tuple",
               "TypeVar", "Union", "cast", "TYPE_CHECKING"),
    "dataclasses": ("dataclass", "field", "fields", "replace", "asdict", "astuple", "KW_ONLY",
                    "is_dataclass"),
    "collections": ("namedtuple", "defaultdict", "OrderedDict", "deque"),
    "warnings": ("warn",),
    "time": ("perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic",
             "monotonic_ns", "sleep"),
    "statistics": ("mean", "fmean", "median", "median_low", "median_high", "mode", "stdev",
                   "pstdev", "variance", "pvariance", "geometric_mean", "harmonic_mean",
                   "quantiles"),
    "random": ("random", "randint", "randrange", "choice", "choices", "shuffle", "sample",
               "uniform", "gauss", "seed", "Random"),
    "enum": ("Enum", "IntEnum", "Flag", "IntFlag", "StrEnum", "auto", "unique"),
}

#: what a learner reads from Triton's kernel objects, whose classes live in Triton's runtime
#: (a @jit function, an autotuned one, a compiled kernel, a Config): their other attributes
#: are the compiler's machinery
TRITON_OBJECT_PARTS = (
    "fn", "run", "warmup",                       # a @triton.jit function (.fn: plain Python)
    "best_config", "configs",                    # an autotuned one
    "asm", "metadata", "n_regs", "n_spills", "n_max_threads", "name",   # a compiled kernel
    "kwargs", "all_kwargs", "num_warps", "num_stages", "num_ctas", "maxnreg",   # a Config
)

#: submodules graded code may name in a chain (``torch.nn.functional.relu``, ``tl.extra.cuda``)
SUBMODULES = ("nn", "functional", "cuda", "autograd", "function", "fft", "linalg", "special",
              "testing", "language", "extra", "libdevice", "math")

#: Python's own types whose public methods graded code may call
_BUILTIN_TYPES = (str, list, dict, set, frozenset, tuple, int, float, bool, complex, range,
                  slice, BaseException, type({}.keys()), type({}.values()), type({}.items()))

#: decorator attributes of a property (``@radius.setter``); its fget/fset/fdel are not here
_PROPERTY_PARTS = ("setter", "getter", "deleter")


def _public(obj: object) -> set[str]:
    """Public names of ``obj`` that are not modules (its dataclass or NamedTuple fields
    included: a field without a default is not an attribute of the class)."""
    if isinstance(obj, dict):   # an instance's own attributes
        return {n for n in obj if not n.startswith("_")}
    names = {n for n in dir(obj) if not n.startswith("_")
             and not isinstance(inspect.getattr_static(obj, n, None), types.ModuleType)}
    if isinstance(obj, type) and dataclasses.is_dataclass(obj):
        names |= {f.name for f in dataclasses.fields(obj)}
    names |= set(getattr(obj, "_fields", ()) if isinstance(obj, type) else ())
    return names


def _module_and_classes(module: types.ModuleType, exported: bool = False) -> set[str]:
    """Public names of ``module`` and of the public classes it defines (``exported``: of
    every public class it holds, wherever defined)."""
    names = _public(module)
    for name in list(names):
        value = getattr(module, name, None)
        if isinstance(value, type) and (exported or value.__module__ == module.__name__):
            names |= _public(value)
    return names


def _torch_names() -> set[str]:
    import torch
    import torch.nn.functional
    layers = (torch.nn.Linear(1, 1), torch.nn.Embedding(1, 1), torch.nn.LayerNorm(1),
              torch.nn.RMSNorm(1))
    objects = [torch, torch.Tensor, torch.dtype, torch.device, torch.Size, torch.finfo,
               torch.iinfo, torch.Generator, torch.nn.functional, torch.cuda, torch.cuda.Event,
               torch.cuda.Stream, torch.autograd.Function,
               torch.autograd.function.FunctionCtx, torch.nn.Module, *layers,
               torch.testing.assert_close]
    names = set().union(*(_public(o) for o in objects))
    names |= {o.__name__ for o in objects if isinstance(o, type)}   # torch.autograd.Function
    # a CUDA device's properties (torch.cuda.get_device_properties), whose class only a CUDA
    # build has
    return names | {"name", "major", "minor", "multi_processor_count", "total_memory",
                    "L2_cache_size", "max_threads_per_multi_processor", "warp_size",
                    "regs_per_multiprocessor", "shared_memory_per_block_optin", "uuid"}


def _triton_names() -> set[str]:
    import triton
    import triton.language as tl
    import triton.testing
    objects = [triton, tl, triton.testing]
    # the classes triton.language exports (tensor, dtype, pointer_type, constexpr, descriptors)
    objects += [value for value in vars(tl).values() if isinstance(value, type)]
    # and what their instances hold (a pointer's element_ty, a block's shape)
    objects += [vars(tl.pointer_type(tl.float16)), vars(tl.block_type(tl.float16, [16])),
                vars(tl.float16), vars(tl.constexpr(1))]
    try:
        from triton.language.extra import libdevice
        objects.append(libdevice)
    except ImportError:   # a Triton without it: kernels cannot call it either
        pass
    return set().union(*(_public(o) for o in objects)) | set(TRITON_OBJECT_PARTS)


def _cutile_names() -> set[str]:
    """Public names of ``cuda.tile`` and its classes, where it is installed (lesson 07's ``ct``;
    where it is not, no cuTile code runs)."""
    from tilegym_edu.cutile import ct
    return _module_and_classes(ct, exported=True) if isinstance(ct, types.ModuleType) else set()


def _allowed_modules_names() -> set[str]:
    """Public names of every module graded code may import (but the standard ones with a named
    list of parts) and of the classes each defines."""
    from tilegym_edu import audit
    names: set[str] = set()
    for module in sorted(audit.ALLOWED_IMPORTS):
        if module.split(".")[0] not in STANDARD_PARTS and not module.endswith("*"):
            names |= _module_and_classes(importlib.import_module(module))
    return names


@functools.cache
def public_api() -> frozenset[str]:
    """Every attribute name graded code may read on any object (see the module docstring);
    the audit's forbidden names are taken out where they use it."""
    import itertools
    import math

    from tilegym_edu import audit
    names = (_torch_names() | _triton_names() | _allowed_modules_names()
             | _cutile_names())
    names |= _public(math) | _public(itertools)
    names |= {part for parts in STANDARD_PARTS.values() for part in parts}
    names |= set().union(*(_public(t) for t in _BUILTIN_TYPES))
    names |= {"func", "args", "keywords"}            # a functools.partial
    names |= {"default_factory", "maxlen", "name", "value"}   # defaultdict, deque, Enum members
    names |= set(_PROPERTY_PARTS) | set(SUBMODULES)
    # the modules graded code may import, as attributes of their packages (tilegym_edu.tune)
    names |= {part for entry in audit.ALLOWED_IMPORTS for part in entry.split(".") if part != "*"}
    return frozenset(names)


@functools.cache
def file_system_names() -> frozenset[str]:
    """The methods of ``pathlib.Path`` that touch the file system (those ``PurePath`` lacks:
    ``replace``, ``rename``, ``unlink`` ...). Some are public names elsewhere (``str.replace``),
    and the course's modules hand out paths (``device.cache_dir()``), so these are checked as
    they run (:mod:`tilegym_edu.write_guard`): never on a path."""
    import pathlib
    return frozenset(n for n in set(dir(pathlib.Path)) - set(dir(pathlib.PurePath))
                     if not n.startswith("_"))


def standard_part_allowed(module: str, name: str) -> bool:
    """Whether ``module.name`` may be used, for a standard module with a named list of
    parts (:data:`STANDARD_PARTS`); True for any other module (its names are checked against
    :func:`public_api`)."""
    parts = STANDARD_PARTS.get(module)
    return parts is None or name in parts
