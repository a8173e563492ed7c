"""compat: detection of known-bad package combinations, and the automatic repair."""
import shutil
import subprocess
import sys

import pytest
import torch
import triton
import triton.language as tl

from tests.kernels import language_changes, language_snapshot
from tilegym_edu import compat
from tilegym_edu.compat import Problem

NUMPY_BREAK = ("Traceback (most recent call last):\n  ...\n"
               "TypeError: only 0-dimensional arrays can be converted to Python scalars\n")


def fake_run(monkeypatch, returncode, stdout="", stderr=""):
    """subprocess.run answering every command with this result; returns the list of commands."""
    calls = []

    def run(cmd, **kwargs):
        calls.append((cmd, kwargs))
        return subprocess.CompletedProcess(cmd, returncode, stdout=stdout, stderr=stderr)
    monkeypatch.setattr(subprocess, "run", run)
    return calls


def test_the_installed_interpreter_runs_the_probe():
    assert compat.interpreter_problem() is None  # triton 3.9 + numpy 2.4 work together


def test_the_numpy_break_is_recognised_and_repairable(monkeypatch):
    calls = fake_run(monkeypatch, 1, stderr=NUMPY_BREAK)
    problem = compat.interpreter_problem()
    assert problem.repair == ("numpy<2.4",)
    assert 'numpy<2.4' in problem.fix
    assert "only 0-dimensional arrays" in problem.summary and "numpy" in problem.summary
    cmd, kwargs = calls[0]
    assert cmd[:2] == [sys.executable, "-c"] and kwargs["env"]["TRITON_INTERPRET"] == "1"


@pytest.mark.parametrize("stderr, last_line", [
    ("RuntimeError: something else\n", "RuntimeError: something else"),
    ("", "(no output)")])
def test_another_failure_is_a_problem_without_repair(monkeypatch, stderr, last_line):
    fake_run(monkeypatch, 1, stderr=stderr)
    problem = compat.interpreter_problem()
    assert problem.repair == ()
    assert problem.summary.endswith(last_line) and "tilegym-edu doctor" in problem.fix


def test_cuda_build_problem_needs_nvidia_smi(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    assert compat.cuda_build_problem() is None


def test_cpu_torch_on_a_gpu_machine_is_a_problem(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(torch.version, "cuda", None)
    fake_run(monkeypatch, 0, stdout="GPU 0: NVIDIA H200 (UUID: GPU-1234)\n")
    problem = compat.cuda_build_problem()
    assert "CPU-only build" in problem.summary and "NVIDIA H200" in problem.summary
    assert "make lab" in problem.fix and problem.repair == ()


@pytest.mark.parametrize("cuda, returncode, stdout", [
    ("12.8", 0, "GPU 0: NVIDIA H200\n"),   # a CUDA build: fine
    (None, 9, ""),                         # nvidia-smi fails
    (None, 0, "No devices were found\n"),  # no GPU listed
])
def test_no_cuda_build_problem(monkeypatch, cuda, returncode, stdout):
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(torch.version, "cuda", cuda)
    fake_run(monkeypatch, returncode, stdout=stdout)
    assert compat.cuda_build_problem() is None


def test_problems_lists_what_the_checks_find(monkeypatch):
    found = Problem("interpreter broken", "fix it")
    monkeypatch.setattr(compat, "interpreter_problem", lambda: found)
    monkeypatch.setattr(compat, "cuda_build_problem", lambda: None)
    assert compat.problems() == [found]


def test_repair_installs_the_safe_fixes_and_checks_again(monkeypatch, capsys):
    fixable, manual = (Problem("numpy too new", "pin it", ("numpy<2.4",)),
                       Problem("other", "by hand"))
    answers = iter([[fixable, manual], [manual]])
    monkeypatch.setattr(compat, "problems", lambda: next(answers))
    calls = fake_run(monkeypatch, 0)
    assert compat.repair() == [manual]
    assert [cmd for cmd, _ in calls] == [
        [sys.executable, "-m", "pip", "install", "--quiet", "numpy<2.4"]]
    assert "fixing: pip install numpy<2.4" in capsys.readouterr().out


def test_main_prints_problems_and_returns_zero(monkeypatch, capsys):
    monkeypatch.setattr(compat, "problems", lambda: [Problem("it is broken", "do this")])
    assert compat.main([]) == 0
    assert capsys.readouterr().out == "tilegym_edu: problem: it is broken\n  fix: do this\n"


def test_main_repair_prints_what_remains(monkeypatch, capsys):
    monkeypatch.setattr(compat, "repair", lambda: [])
    monkeypatch.setattr(compat, "problems", lambda: pytest.fail("--repair must not only list"))
    assert compat.main(["--repair"]) == 0
    assert capsys.readouterr().out == ""


def test_missing_nvcc_is_a_problem_only_with_a_gpu(monkeypatch):
    import torch
    from torch.utils import cpp_extension
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert compat.cuda_compiler_problem() is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", None)
    problem = compat.cuda_compiler_problem()
    assert problem and "nvcc" in problem.summary and "CUDA_HOME" in problem.fix
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", "/usr/local/cuda")
    assert compat.cuda_compiler_problem() is None


@triton.jit
def _plus_one(x):
    return x + 1


@triton.jit
def _add_in_steps_kernel(x_ptr, out_ptr, STEPS: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)
    for _ in tl.static_range(STEPS):
        x = _plus_one(x)
    tl.store(out_ptr + offsets, x)


def _swaps_in_a_launch(monkeypatch, steps: int) -> int:
    """How many times a launch of _add_in_steps_kernel (``steps`` helper calls) swapped a
    module's functions for the interpreter's (Triton's _patch_builtin), checking its output."""
    from triton.runtime import interpreter
    calls = []
    swap = interpreter._patch_builtin
    monkeypatch.setattr(interpreter, "_patch_builtin", lambda *a: calls.append(a) or swap(*a))
    x, out = torch.arange(8, dtype=torch.float32), torch.empty(8)
    _add_in_steps_kernel[(1,)](x, out, STEPS=steps, BLOCK=8)
    assert torch.equal(out, x + steps)
    return len(calls)


def test_a_launch_patches_triton_language_once_however_often_it_calls_a_helper(monkeypatch):
    compat.patch_interpreter()
    assert _swaps_in_a_launch(monkeypatch, 12) == _swaps_in_a_launch(monkeypatch, 0) > 0


def test_each_launch_patches_again_and_leaves_triton_language_as_it_found_it():
    compat.patch_interpreter()
    before = language_snapshot()
    x, out = torch.arange(8, dtype=torch.float32), torch.empty(8)
    for steps in (3, 5):      # the second launch must swap again after the first put them back
        _add_in_steps_kernel[(1,)](x, out, STEPS=steps, BLOCK=8)
        assert torch.equal(out, x + steps)
    assert not language_changes(before)


def test_a_copied_ast_node_shares_its_context_whatever_hangs_on_it():
    """IPython's tracebacks (the executing package) hang a `parent` on the parser's shared
    contexts; a copy of a Name must not copy the tree behind it (Triton copies the target of
    every `+=` it compiles)."""
    import ast
    import copy
    compat.keep_ast_contexts_out_of_copies()
    tree = ast.parse("def f(x):\n    y = x\n    y += 1\n    del y\n    return x")
    for context in (ast.Load(), ast.Store(), ast.Del()):
        context.parent = tree
        name = ast.Name("y", context)
        copied = copy.deepcopy(name)
        assert copied is not name and copied.id == "y" and copied.ctx is context
    assert ast.unparse(copy.deepcopy(tree)) == ast.unparse(tree)


@triton.jit
def _index_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, offsets * 3 - 1, mask=offsets < n)


def test_the_interpreter_skips_the_overflow_checks_whose_verdict_it_drops(monkeypatch):
    """Without ``debug`` the interpreter throws an overflow check's verdict away: after the
    patch no int32 +, - or * of a kernel is done again in int64, and its values stay the same.
    With ``debug`` on, the checks stay."""
    import dataclasses

    from triton.runtime import interpreter
    builder, semantic = interpreter.interpreter_builder, type(interpreter.interpreter_semantic)
    casts, cast = [], semantic.cast
    monkeypatch.setattr(semantic, "cast", lambda self, x, ty, *a: casts.append(ty) or
                        cast(self, x, ty, *a))

    def int64_casts_in_a_launch() -> int:
        casts.clear()
        out = torch.empty(40, dtype=torch.int32)
        _index_kernel[(3,)](out, 40, BLOCK=16)
        assert torch.equal(out, torch.arange(40, dtype=torch.int32) * 3 - 1)
        return sum(ty == tl.int64 for ty in casts)

    as_triton_has_them = dataclasses.replace(builder.options, sanitize_overflow=True)
    monkeypatch.setattr(builder, "options", as_triton_has_them)
    assert not builder.options.debug and int64_casts_in_a_launch() > 0
    compat.patch_interpreter()
    assert builder.options.sanitize_overflow is False and int64_casts_in_a_launch() == 0
    builder.options = dataclasses.replace(as_triton_has_them, debug=True)
    compat.patch_interpreter()
    assert builder.options.sanitize_overflow is True
