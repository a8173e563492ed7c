"""Known-bad combinations of installed packages: detection, the fix, and an automatic repair.

``python -m tilegym_edu.compat --repair`` (run by the Makefile after every install) applies the
fixes that are safe to apply automatically; ``tilegym-edu doctor`` lists every problem found.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass

# A loop with a run-time bound is the smallest kernel that trips the numpy >= 2.4 break in
# older Triton interpreters (triton 3.6.0 + numpy 2.4 raises "only 0-dimensional arrays can be
# converted to Python scalars"; triton 3.9.0 is fixed).
_INTERPRETER_PROBE = textwrap.dedent("""
    import os
    os.environ["TRITON_INTERPRET"] = "1"
    import torch, triton, triton.language as tl

    @triton.jit
    def total(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        acc = tl.zeros((BLOCK,), tl.float32)
        for start in range(0, n, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        tl.store(out_ptr, tl.sum(acc))

    x = torch.arange(10, dtype=torch.float32)
    out = torch.empty(1)
    total[(1,)](x, out, 10, BLOCK=4)
    assert out.item() == 45.0, out.item()
""")


@dataclass(frozen=True)
class Problem:
    """One known-bad combination found on this machine."""

    summary: str                 # what is wrong, one line
    fix: str                     # what to do, as a command or a sentence
    repair: tuple[str, ...] = ()  # pip arguments that fix it automatically, if it is safe to


def patch_interpreter() -> None:
    """Three changes to Triton's interpreter, in this process (each made once):

    * Work around the numpy >= 2.4 break of Triton < 3.9's interpreter. Those interpreters
      turn a kernel's run-time integers into Python ints with ``int(array_of_one_element)``,
      which numpy 2.4 forbids; Triton 3.9 squeezes the array first. This applies the same fix
      to older versions (a no-op where it is not needed).
    * Patch ``triton.language`` once per launch (_patch_language_once), not again at every
      call of a ``@triton.jit`` helper inside it.
    * Skip the integer overflow checks whose verdict the interpreter throws away
      (_skip_discarded_overflow_checks).
    """
    import triton.runtime.interpreter as interp
    original = getattr(interp, "_patch_lang_tensor", None)
    if original is not None and not getattr(original, "tilegym_patched", False):
        def patch_lang_tensor(tensor, scope):
            original(tensor, scope)
            scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

        patch_lang_tensor.tilegym_patched = True
        interp._patch_lang_tensor = patch_lang_tensor
    _patch_language_once(interp)
    _skip_discarded_overflow_checks(interp)


def _skip_discarded_overflow_checks(interp) -> None:
    """The interpreter's options ask for overflow checks (``sanitize_overflow``) but not for
    device asserts (``debug``): every int32 ``+``, ``-`` and ``*`` a kernel does is done again
    in int64 and compared with int32's bounds, and then the assert that would read the result
    returns at once (``device_assert`` does nothing without ``debug``). Lesson 05's check
    and traffic cells on a one-pixel-per-program convolution, which computes its indices
    element by element, took 6.8 s each with the checks and 2.8 s without (2026-12-06, Triton
    3.9, this machine's CPU; 3.4 and 3.6 have the same options). With ``debug`` off, the
    checks are off too: every value a kernel computes stays the same, and the int64 copies no
    GPU would make stop counting as bytes a program holds (tilegym_edu.traffic)."""
    builder = getattr(interp, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if (options is None or getattr(options, "debug", True)
            or not getattr(options, "sanitize_overflow", False)):
        return
    builder.options = dataclasses.replace(options, sanitize_overflow=False)


def _patch_language_once(interp) -> None:
    """Triton's interpreter swaps ``triton.language``'s functions for interpreted ones when a
    launch starts (and puts them back when it ends), and again, never undone, at every call of
    a ``@triton.jit`` helper inside the kernel: about 0.3 ms a call, which found nothing left
    to swap where the launch had swapped it already. Lesson 04's traffic check calls its helper
    50,000 times: 22 s, 17 s without the second swaps (2026-12-06, Triton 3.9, this machine's
    CPU). Here a call swaps only the modules (``triton.language``, ``triton.language.core``)
    its function sees that no earlier call of the launch swapped; the launch's own put-back
    ends that record. A no-op where the interpreter has no ``_patch_lang`` returning a
    ``_LangPatchScope`` (Triton 3.4 has none)."""
    original = getattr(interp, "_patch_lang", None)
    if (original is None or getattr(original, "tilegym_patched", False)
            or not hasattr(interp, "_LangPatchScope")):
        return
    import inspect

    import triton.language as tl
    swapped: set[int] = set()       # id() of the language modules swapped and not yet put back

    def patch_lang(fn):
        modules = {id(value) for value in fn.__globals__.values()
                   if inspect.ismodule(value) and value in (tl, tl.core)}
        if modules and modules <= swapped:
            return interp._LangPatchScope()        # nothing swapped, so nothing to put back
        scope = original(fn)
        swapped.update(modules)
        put_back = scope.restore

        def restore():
            swapped.clear()
            put_back()

        scope.restore = restore
        return scope

    patch_lang.tilegym_patched = True
    interp._patch_lang = patch_lang


def keep_ast_contexts_out_of_copies() -> None:
    """Make ``copy.deepcopy`` of a Python AST node share its context (``ast.Load``,
    ``ast.Store``, ``ast.Del``) instead of copying it.

    Python's parser gives every node of every tree one shared context object of each kind.
    IPython (8 and later) shows a traceback through the ``executing`` package, which sets a
    ``parent`` attribute on every node of the trees it parses, the shared contexts included
    (alexmojaki/executing#63). From the first traceback on, copying any ``Name`` copies its
    context's parent: a whole tree. Triton's code generator copies the target of every ``+=``
    of a kernel it compiles (``CodeGenerator.visit_AugAssign``): 35-55 ms a copy in a grading
    kernel, 40% of lesson 02's grading on CPU (kernel_compiles compiles every launch's
    kernel). A context holds no data, so sharing it is a copy. Once per process."""
    import ast
    for context in (ast.Load, ast.Store, ast.Del):
        if "__deepcopy__" not in vars(context):
            context.__deepcopy__ = _shared_context


def _shared_context(context, memo):
    return context


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version
    found = {}
    for name in ("numpy", "triton", "torch"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = ""
    return found


def interpreter_problem() -> Problem | None:
    """Run a small kernel with a run-time loop bound in Triton's interpreter, in a subprocess."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, "-c", _INTERPRETER_PROBE], capture_output=True,
                            text=True, timeout=300, env=env)
    if result.returncode == 0:
        return None
    versions = _versions()
    last_line = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
    if "0-dimensional arrays" in result.stderr:
        return Problem(
            summary=(f"Triton {versions['triton']}'s interpreter breaks under numpy "
                     f"{versions['numpy']} (loops with a run-time bound fail: {last_line})"),
            fix='pip install "numpy<2.4"   (or a Triton >= 3.9, where torch allows it)',
            repair=("numpy<2.4",))
    return Problem(summary=f"Triton's interpreter cannot run a simple kernel: {last_line}",
                   fix="reinstall with `rm -rf .venv && make lab`; if it persists, report it "
                       "with the output of `tilegym-edu doctor`")


def cuda_build_problem() -> Problem | None:
    """A CPU-only build of torch on a machine whose driver reports an NVIDIA GPU."""
    import torch
    if torch.version.cuda is not None or shutil.which("nvidia-smi") is None:
        return None
    probe = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    if probe.returncode != 0 or "GPU" not in probe.stdout:
        return None
    return Problem(
        summary=f"torch {torch.__version__} is a CPU-only build but this machine has an "
                f"NVIDIA GPU ({probe.stdout.strip().splitlines()[0]})",
        fix="rm -rf .venv && make lab   (the Makefile installs the CUDA build when "
            "nvidia-smi finds a GPU)")


def cuda_compiler_problem() -> Problem | None:
    """A CUDA GPU but no nvcc: torch.utils.cpp_extension cannot build lesson 01's CUDA C."""
    import torch
    if not torch.cuda.is_available():
        return None
    from torch.utils import cpp_extension
    if cpp_extension.CUDA_HOME is not None:
        return None
    return Problem(
        summary="no CUDA compiler found (nvcc, CUDA_HOME): lesson 01's CUDA C cells cannot build",
        fix=f"install the CUDA toolkit for CUDA {torch.version.cuda} (for example "
            "`conda install -c nvidia cuda-nvcc`) and set CUDA_HOME to it")


def problems() -> list[Problem]:
    """Every known-bad combination found on this machine."""
    found = (interpreter_problem(), cuda_build_problem(), cuda_compiler_problem())
    return [p for p in found if p is not None]


def repair() -> list[Problem]:
    """Apply the automatic fixes; return the problems that remain."""
    for problem in problems():
        if problem.repair:
            print(f"tilegym_edu: {problem.summary}\n"
                  f"  fixing: pip install {' '.join(problem.repair)}")
            subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *problem.repair],
                           check=True)
    return problems()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repair", action="store_true", help="apply the automatic fixes")
    args = parser.parse_args(argv)
    remaining = repair() if args.repair else problems()
    for problem in remaining:
        print(f"tilegym_edu: problem: {problem.summary}\n  fix: {problem.fix}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
