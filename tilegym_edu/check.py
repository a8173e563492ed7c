"""Correctness: a function against a float64 reference, over fresh random inputs.

For every case (a set of parameters such as a shape and a dtype) and every seed, inputs are drawn
fresh, the function runs, and its output is compared with the reference computed in float64 on
the CPU. The error is the relative norm ``‖out - ref‖ / ‖ref‖``; it must not exceed the
tolerance of the output dtype, and a NaN or inf anywhere fails whatever the norm says. The
output's shape and dtype must be what the reference says, and the inputs must come back
unmodified. Each failure names the case, seed, error and the first bad element.

Poisoning: outputs a function allocates while it is checked are filled with NaN first (see
:mod:`tilegym_edu.grading`), so an element the kernel never writes cannot pass.
"""
from __future__ import annotations

import copy
import math
import types
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch

from tilegym_edu import device, tune

#: largest relative error ‖out − ref‖ / ‖ref‖ accepted for an output of each dtype (other dtypes,
#: integers and bools, must match exactly). float32 has room for Triton's tl.dot, which uses tf32
#: on GPUs: a tiled float32 matmul measured 7.7e-4 on an H200 at 1024³ and 4096³
#: (docs/results/h200.md). Exercises that need float32 exactness pass tighter tolerances.
#: Read-only, as is every table of a module a learner's code may import: the grader reads it.
TOLERANCES: Mapping[torch.dtype, float] = types.MappingProxyType({
    torch.float64: 1e-10,
    torch.float32: 3e-3,
    torch.float16: 3e-3,
    torch.bfloat16: 2e-2,
})

Case = Mapping[str, Any]


@dataclass(frozen=True)
class CaseResult:
    """The outcome of one case and seed."""

    case: Case
    seed: int
    passed: bool
    error: float | None = None        # relative error, when the output could be compared
    message: str = ""                 # why it failed (empty when it passed)
    tolerance: float | None = None    # the largest relative error accepted for its dtype

    def describe(self) -> str:
        params = ", ".join(f"{k}={_show(v)}" for k, v in self.case.items())
        err = "" if self.error is None else f", relative error {self.error:.3g}"
        return f"case ({params}), seed {self.seed}{err}: {self.message or 'passed'}"


#: what a case reports when the exercise still holds nbgrader's placeholder
NOT_WRITTEN = ("raised NotImplementedError: the exercise is not written yet; replace "
               "`raise NotImplementedError()` in its solution cell with your code")


#: (words in an error, what they mean for the learner and what to do): errors a kernel meets
KNOWN_ERRORS = (
    ("illegal memory access", "the kernel read or wrote outside its tensors (a load or store "
     "without a mask, or an offset computed in the wrong units); the GPU context is now broken, "
     "so every later GPU cell of this notebook fails too: fix the masks, restart the kernel, "
     "grade again"),
    ("out of memory", "the function asked for more GPU memory than is free; allocate only the "
     "output (and small scratch), never a copy per element"),
    ("out of resource: shared memory", "the block sizes and num_stages need more shared memory "
     "than one block may use on this GPU: use smaller tiles or fewer stages"),
)


def hints(message: str, shown: str = "") -> str:
    """What an error message means and what to do, for the errors in KNOWN_ERRORS: one
    ``[...]`` per match not already begun in ``shown``, or an empty string."""
    lowered = message.lower()
    return "".join(f" [{hint}]" for words, hint in KNOWN_ERRORS
                   if words in lowered and hint[:40] not in shown)


def _defined_in_the_notebook(value: Any) -> bool:
    """Whether ``value``, or anything in its tuples, lists and dicts, is an object of a class
    the notebook defined (whose repr, dataclass-made, can run the notebook's code)."""
    if type(value).__module__ == "__main__":
        return True
    if isinstance(value, (tuple, list)):
        return any(_defined_in_the_notebook(v) for v in value)
    if isinstance(value, dict):
        return any(_defined_in_the_notebook(v) for v in [*value.keys(), *value.values()])
    return False


def explain(error: BaseException) -> str:
    """``raised <Type>: <first line of its message>``, plus what it means when it is an error
    kernels are known to meet (see KNOWN_ERRORS); one line, as the grade table shows it. An
    error that carries an object of the notebook's own classes is named without its message:
    formatting it would run the learner's code outside the graded call (round 25 of the red
    team ran a property's getter through a dataclass's repr)."""
    if _defined_in_the_notebook(error.args):
        return (f"raised {type(error).__name__}, with an object of your own class as its "
                "message (not shown: raise it with a string)")
    lines = str(error).strip().splitlines()
    return f"raised {type(error).__name__}: {lines[0] if lines else ''}" + hints(str(error))


def _show(value: Any) -> str:
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    return repr(value) if isinstance(value, str) else str(value)


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in float64 (the plain norm of ``out`` when ``ref`` is all zeros)."""
    out64, ref64 = out.detach().to("cpu", torch.float64), ref.detach().to("cpu", torch.float64)
    scale = torch.linalg.vector_norm(ref64).item() or 1.0
    return torch.linalg.vector_norm(out64 - ref64).item() / scale


def first_bad_index(out: torch.Tensor, ref: torch.Tensor, tol: float) -> tuple[int, ...]:
    """The first element (row-major) that is not finite or off by more than ``tol`` times the
    largest reference magnitude; the largest error's index when no single element stands out."""
    out64, ref64 = out.detach().to("cpu", torch.float64), ref.detach().to("cpu", torch.float64)
    diff = (out64 - ref64).abs()
    bad = ~torch.isfinite(out64) | (diff > tol * ref64.abs().max().clamp_min(1e-30))
    flat = bad.flatten().nonzero()
    index = (flat[0, 0].item() if len(flat)
             else torch.nan_to_num(diff, nan=float("inf")).argmax().item())
    return (tuple(int(i) for i in torch.unravel_index(torch.tensor(index), out.shape))
            if out.dim() else ())


def tolerance(dtype: torch.dtype, tolerances: Mapping[torch.dtype, float] | None = None) -> float:
    """The largest relative error accepted for an output of ``dtype``: ``tolerances`` where it
    names the dtype, else :data:`TOLERANCES`; 0 (exact) for integers and bools."""
    return {**TOLERANCES, **(tolerances or {})}.get(dtype, 0.0)


def compare_output(out: Any, ref: torch.Tensor, dtype: torch.dtype,
                   tolerances: Mapping[torch.dtype, float] | None = None
                   ) -> tuple[bool, float | None, str]:
    """(passed, relative error, message) for one output against its float64 reference.
    ``tolerances`` overrides :data:`TOLERANCES` for the dtypes it names."""
    if type(out) is not torch.Tensor:  # noqa: E721 - a subclass could override comparisons
        return False, None, f"returned {type(out).__name__}, expected a torch.Tensor"
    if tuple(out.shape) != tuple(ref.shape):
        return False, None, f"returned shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    if out.dtype != dtype:
        return False, None, f"returned dtype {_show(out.dtype)}, expected {_show(dtype)}"
    if out.numel() == 0:
        return True, 0.0, ""
    tol = tolerance(dtype, tolerances)
    error = relative_error(out, ref)
    finite = bool(torch.isfinite(out.detach()).all())
    if finite and error <= tol:
        return True, error, ""
    where = first_bad_index(out, ref, tol)
    got, want = out.detach()[where].item(), ref[where].item()
    what = "NaN or inf in the output" if not finite else f"error above the tolerance {tol:g}"
    unwritten = " (NaN: an element the kernel never wrote?)" if got != got else ""
    return False, error, (f"{what}; first bad element {list(where)}: "
                          f"got {got:.6g}, expected {want:.6g}{unwritten}")


def to_reference(value: Any, on: str | torch.device = "cpu") -> Any:
    """Inputs as the reference sees them: float tensors in float64, on the CPU (or ``on``);
    always a copy, never the tensor itself (what the candidate does to it later is not seen)."""
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().to(on, torch.float64, copy=True)
    if isinstance(value, torch.Tensor):
        return value.detach().to(on, copy=True)
    return value


def tensors_in(value: Any) -> list[torch.Tensor]:
    """The tensors ``value`` holds, in a fixed order: itself, those in its tuples, lists and
    dicts, and those in the attributes of its objects (a model's weights), each once."""
    found: list[torch.Tensor] = []
    seen: set[int] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, torch.Tensor):
            found.append(item)
        elif isinstance(item, (tuple, list)):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif not isinstance(item, (type, types.ModuleType, types.FunctionType)) and hasattr(
                item, "__dict__"):
            stack.extend(reversed(list(vars(item).values())))
    return found


def check(fn: Callable[..., Any], reference: Callable[..., torch.Tensor],
          make_inputs: Callable[[Case, torch.Generator], Sequence[Any]],
          cases: Iterable[Case], seeds: Iterable[int] = (0, 1, 2), *,
          tolerances: Mapping[torch.dtype, float] | None = None,
          call: Callable[[Callable[..., Any], Sequence[Any]], Any] | None = None,
          ) -> list[CaseResult]:
    """Run ``fn`` on every case and seed and compare each output with ``reference``.

    ``make_inputs(case, generator)`` returns the arguments of ``fn`` for one case; tensors are
    drawn with ``generator`` (on the CPU) and moved to the lesson's device. ``reference`` gets
    the same arguments as float64 CPU tensors. The expected output dtype is ``case["dtype"]``.
    ``call(fn, args)`` runs ``fn`` (the grader passes one that guards against shortcuts).
    Calls run under :func:`tilegym_edu.tune.defaults_only`: a kernel that autotunes runs its
    default configuration here, not a search per case. Returns one CaseResult per case and
    seed, in order.
    """
    results = []
    for case in cases:
        for seed in seeds:
            generator = torch.Generator().manual_seed(seed)
            args = tuple(make_inputs(case, generator))
            # the reference's inputs are copied now and it runs after the call: while the
            # function runs, there is no answer anywhere for it to find. Objects are copied
            # whole: a model's weights, zeroed by the function, would have given a reference
            # of zeros too
            originals = copy.deepcopy(args, {id(t): t.detach().clone() for t in tensors_in(args)})
            reference_inputs = [to_reference(a) for a in originals]
            try:
                with tune.defaults_only():      # correctness does not depend on tuning
                    out = call(fn, args) if call else fn(*args)
                if device.ON_GPU:
                    torch.cuda.synchronize()
            except NotImplementedError:
                results.append(CaseResult(case, seed, False, message=NOT_WRITTEN))
                continue
            except Exception as exc:  # the learner's code failed: report it as this case's result
                results.append(CaseResult(case, seed, False, message=explain(exc)))
                continue
            ref = reference(*reference_inputs)
            passed, error, message = compare_output(out, ref, case["dtype"], tolerances)
            changed = [i for i, (a, o) in enumerate(zip(args, originals))
                       if any(not torch.equal(t, u) for t, u in zip(tensors_in(a), tensors_in(o)))]
            if passed and changed:
                passed, message = False, f"modified its input argument(s) {changed}"
            results.append(CaseResult(case, seed, passed, error, message,
                                      tolerance(case["dtype"], tolerances)))
    return results


#: tensors of at least this many elements are drawn on the GPU (a speed check's inputs): the
#: CPU draws about 10^7 float64 normals a second, 14 s for lesson 04's six attention inputs
#: (cProfile on the H200)
DRAW_ON_GPU_FROM = 1 << 20


def generator_on(where: str | torch.device, generator: torch.Generator) -> torch.Generator:
    """A generator on ``where``, seeded by one draw from the CPU ``generator``: large random
    draws happen where the tensor lives (the CPU makes about 10^7 float64 normals a second)."""
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    return torch.Generator(device=where).manual_seed(seed)


def random_tensor(shape: Sequence[int], dtype: torch.dtype, generator: torch.Generator,
                  scale: float = 1.0) -> torch.Tensor:
    """Standard-normal values (times ``scale``) on the lesson's device: never zeros, never a
    pattern a wrong kernel could match by luck. Drawn from ``generator`` on the CPU, in
    float64; a large tensor on a GPU is drawn there, from a generator seeded by ``generator``
    (the same seed gives the same values on the same kind of device)."""
    shape = tuple(shape)
    if device.ON_GPU and math.prod(shape) >= DRAW_ON_GPU_FROM:
        draw = torch.float64 if dtype == torch.float64 else torch.float32
        return (torch.randn(shape, generator=generator_on(device.DEVICE, generator), dtype=draw,
                            device=device.DEVICE)
                * scale).to(dtype)
    values = torch.randn(shape, generator=generator, dtype=torch.float64) * scale
    return values.to(dtype).to(device.DEVICE)
