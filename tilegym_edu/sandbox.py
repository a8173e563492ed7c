"""The grading kernel of an untrusted submission, inside a bubblewrap sandbox.

nbgrader starts the kernel that runs a notebook from the ``python3`` kernel spec it finds
first on ``JUPYTER_PATH``. :func:`kernel_spec` writes one whose command is the same Python
kernel under ``bwrap`` (https://github.com/containers/bubblewrap), and :func:`sandboxed`
puts it first for the length of one grading. Inside the sandbox the kernel:

* sees the whole file system read-only, with the course's ``solutions/`` and ``.grading/``
  (gradebook, other students' work) and the class folder replaced by empty folders; only the
  folder of the notebook being graded is visible in ``.grading/``, read-only;
* can write only a private ``/tmp`` (its ``HOME``, Triton's cache and tilegym's caches are
  there), which disappears with it: nothing a submission writes is seen by a later one;
* has no network (a new network namespace); it talks to nbgrader over Unix sockets in a
  private runtime folder (``KernelManager.transport = "ipc"``), the only folder it shares;
* has its own process, IPC and host-name namespaces, and dies with its parent;
* sees the GPUs (``/dev`` is bound) when the machine has any, for the speed cells.

Interrupts at a cell's time limit go as messages (``interrupt_mode: message``): a signal to
bwrap would not reach the kernel. The kernel's parent poller is off (in its own process
namespace it cannot see nbgrader's process); ``--die-with-parent`` ends it instead.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator, Sequence


class SandboxUnavailable(Exception):
    """bubblewrap is missing or cannot create namespaces on this machine."""


def bwrap() -> str:
    """The bwrap executable; raises SandboxUnavailable, saying how to get it, if it cannot
    run a sandbox here."""
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed: `sudo apt-get install "
                                 "bubblewrap` (Debian, Ubuntu) or `sudo dnf install bubblewrap`")
    probe = subprocess.run([path, "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid",
                            "--proc", "/proc", "--dev", "/dev", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        raise SandboxUnavailable(f"bwrap cannot create a sandbox here ({probe.stderr.strip()}): "
                                 "unprivileged user namespaces may be off "
                                 "(sysctl kernel.unprivileged_userns_clone=1), or run as root")
    return path


def _has_gpu_devices() -> bool:
    return any(Path("/dev").glob("nvidia*"))


def _python_folders_in_tmp() -> list[str]:
    """The folders this Python needs (its prefix, its import path, the course package) that
    lie under /tmp, which the sandbox replaces by an empty one: they are bound back,
    read-only."""
    package = Path(__file__).resolve().parent.parent
    folders = {str(Path(p).resolve()) for p in [sys.prefix, package, *sys.path] if p}
    return sorted(f for f in folders
                  if (f == "/tmp" or f.startswith("/tmp/")) and Path(f).is_dir()
                  and not any(f != g and f.startswith(g + "/") for g in folders
                              if g.startswith("/tmp/") and Path(g).is_dir()))


def command(hidden: Sequence[Path], visible: Sequence[Path], runtime_dir: Path) -> list[str]:
    """The bwrap arguments that start a kernel: ``hidden`` folders become empty, ``visible``
    ones (inside hidden ones) are bound back read-only, ``runtime_dir`` is shared writable."""
    args = [bwrap(), "--die-with-parent", "--unshare-net", "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--ro-bind", "/", "/", "--proc", "/proc",
            *(["--dev-bind", "/dev", "/dev"] if _has_gpu_devices() else ["--dev", "/dev"]),
            "--tmpfs", "/tmp"]
    for folder in _python_folders_in_tmp():     # a venv or a course that lives in /tmp
        args += ["--ro-bind", folder, folder]
    for folder in hidden:
        if Path(folder).is_dir():
            args += ["--tmpfs", str(Path(folder).resolve())]
    for folder in visible:
        args += ["--ro-bind", str(Path(folder).resolve()), str(Path(folder).resolve())]
    args += ["--bind", str(runtime_dir), str(runtime_dir)]
    return args


#: the sandboxed kernel's environment: home, caches and Triton's cache in its private /tmp
KERNEL_ENV = {"HOME": "/tmp", "XDG_CACHE_HOME": "/tmp/cache", "IPYTHONDIR": "/tmp/ipython",
              "TRITON_CACHE_DIR": "/tmp/triton-cache", "MPLCONFIGDIR": "/tmp/matplotlib",
              "TILEGYM_CACHE_DIR": "/tmp/tilegym_edu"}   # tuning and ceilings caches


def kernel_spec(folder: Path, hidden: Sequence[Path], visible: Sequence[Path],
                runtime_dir: Path) -> Path:
    """Write ``folder/kernels/python3/kernel.json``: this Python's kernel under bwrap."""
    spec = folder / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    argv = [*command(hidden, visible, runtime_dir),
            sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}",
            "--IPKernelApp.parent_handle=0"]
    (spec / "kernel.json").write_text(json.dumps({
        "argv": argv, "display_name": "Python 3 (tilegym_edu sandbox)", "language": "python",
        "interrupt_mode": "message", "env": KERNEL_ENV, "metadata": {"debugger": False}}))
    return spec


@contextlib.contextmanager
def sandboxed(hidden: Sequence[Path], visible: Sequence[Path]) -> Iterator[None]:
    """Within the block, kernels that nbgrader starts in this process run in the sandbox."""
    bwrap()   # fail early, with the fix, if it cannot work here
    with tempfile.TemporaryDirectory(prefix="tilegym-sandbox-") as scratch:
        scratch_path = Path(scratch)
        runtime = scratch_path / "runtime"
        runtime.mkdir()
        kernel_spec(scratch_path / "jupyter", hidden, visible, runtime)
        saved = {k: os.environ.get(k) for k in ("JUPYTER_PATH", "JUPYTER_RUNTIME_DIR")}
        os.environ["JUPYTER_PATH"] = os.pathsep.join(
            filter(None, [str(scratch_path / "jupyter"), saved["JUPYTER_PATH"]]))
        os.environ["JUPYTER_RUNTIME_DIR"] = str(runtime)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
