"""nbgrader's Execute preprocessor, made to survive what a submission does to its kernel.

* A limit on the whole notebook as well as on each cell: a cell gets at most what is left of
  ``notebook_timeout``, then is interrupted like any cell past its limit.
* A kernel that dies (a crash, ``os._exit``, a signal, the memory killer) costs only the cell
  it was running: that cell gets a ``KernelDied`` error naming the signal or exit status, a
  fresh kernel replays the cells before it (their outputs and points stay as they were), and
  the notebook carries on with the next cell.
* A cell that ignores the interrupt sent at its time limit is handled the same way: its
  kernel is killed and replaced (``KernelUnresponsive``).
* After ``max_restarts`` replacements, the remaining cells are not run and say why.
* The kernel is reached over Unix sockets (IPC), never TCP.
* The kernel process's own stdout and stderr (not a cell's, which comes back as the cell's
  output) go to ``kernel.log`` beside the graded notebook: what a kernel prints as it starts
  or dies (ipykernel's connection notes in the sandbox, libzmq's assertions at shutdown) is
  nothing the learner can act on.

Every cell's run time is recorded in ``cell.metadata.tilegym.seconds`` for the grade report.
"""
from __future__ import annotations

import copy
import os
import signal
import sys
import time
import uuid
from pathlib import Path

from jupyter_core.paths import jupyter_runtime_dir

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import run_sync
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Bool, Integer

from tilegym_edu import lesson_data, submission, write_guard
from tilegym_edu.progress import ProgressBar

#: the error names the grade report recognises
KERNEL_DIED = "KernelDied"
KERNEL_UNRESPONSIVE = "KernelUnresponsive"
NOT_RUN = "NotRun"
#: the file, beside the graded notebook, that holds the kernel process's own stdout and stderr
KERNEL_LOG = "kernel.log"


def exit_description(code: int | None) -> str:
    """``signal 9 (SIGKILL)`` or ``exit status 3`` for a process's return code (a shell's or
    sandbox's 128 + N is read as signal N)."""
    if code is None:
        return "no exit status"
    number = -code if code < 0 else code - 128 if code > 128 else None
    if number:
        try:
            return f"signal {number} ({signal.Signals(number).name})"
        except ValueError:
            return f"signal {number}"
    return f"exit status {code}"


_CAUSES = {9: "often the machine ran out of memory and the system killed the process",
           11: "a segmentation fault: a crash in compiled code",
           6: "an abort: a failed check in compiled code"}


def _lesson_data_checks(nb) -> tuple[dict[int, str], dict[int, str]]:
    """For a prepared notebook (its first cell the grader's setup, tilegym_edu.submission
    .prepare): ({cell index: the source to run instead}, {cell index: the grader's code to run
    after it}). The lesson's own cells that bind values the tests read keep copies of them as
    they bind them (lesson_data.instrumented); the setup is followed by the keeper, each test
    cell by the check. Nothing for any other notebook."""
    cells = nb.cells
    if not cells or not write_guard.is_setup(cells[0].get("source", "")):
        return {}, {}
    code = [(i, c) for i, c in enumerate(cells) if c.cell_type == "code" and i > 0]
    lesson = [(i, c) for i, c in code if submission.learner_label(c) is None
              and not submission.is_graded(c) and not submission.is_solution(c)]
    tests = [(i, c) for i, c in code if submission.is_graded(c) and not submission.is_solution(c)]
    protected = lesson_data.protected_names([c.source for _, c in lesson],
                                            [c.source for _, c in tests])
    sources = {i: lesson_data.instrumented(c.source, protected) for i, c in lesson}
    epilogues = {0: ("import tilegym_edu.lesson_data as __tilegym_lesson_data__\n"
                     "__tilegym_kept__ = __tilegym_lesson_data__.Kept(\n"
                     f"    globals(), {tuple(sorted(protected))!r})")}
    epilogues.update({i: "__tilegym_kept__.check()" for i, _ in tests})
    return {i: s for i, s in sources.items() if s != cells[i].source}, epilogues


def error_output(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue,
                        traceback=[f"{ename}: {evalue}"])


class ResilientExecute(Execute):
    """Execute with a notebook deadline, per-cell timing, and kernels replaced when they die
    or hang (see the module docstring)."""

    notebook_timeout = Integer(3600, help="seconds for the whole notebook").tag(config=True)
    show_progress = Bool(
        True, help="draw a progress bar on stderr while cells run").tag(config=True)
    max_restarts = Integer(3, help="kernels replaced before the rest is not run").tag(config=True)
    # seconds a cell's output may trail its reply; after the interrupt at a cell's time limit,
    # a kernel that stays busy this long is taken to ignore it (nbclient's default is 4)
    iopub_timeout = Integer(10, allow_none=True, help="seconds to wait for output after a "
                            "reply, and for a cell to stop after its interrupt").tag(config=True)

    def create_kernel_manager(self):
        """The grading kernel talks over Unix sockets, not TCP: no port another process of
        this machine could reach, no network needed in the sandbox, and no warning about
        unencrypted TCP."""
        km = super().create_kernel_manager()
        stem = Path(jupyter_runtime_dir()) / f"tilegym-{uuid.uuid4().hex[:12]}"
        stem.parent.mkdir(parents=True, exist_ok=True)
        km.transport, km.ip, km.connection_file = "ipc", f"{stem}-ipc", f"{stem}.json"
        return km

    async def async_start_new_kernel(self, **kwargs) -> None:
        """Start the grading kernel, its output to KERNEL_LOG beside the notebook, with
        grading.GRADING_ENV set: the test cells draw seeds no one knew in advance
        (grading.graded_seeds), whichever command graded (tilegym-edu's or nbgrader's)."""
        from tilegym_edu.grading import GRADING_ENV   # torch loads only when grading
        folder = Path((self.resources or {}).get("metadata", {}).get("path") or ".")
        kwargs.setdefault("env", {**os.environ, GRADING_ENV: "1"})
        with open(folder / KERNEL_LOG, "ab") as log:      # the kernel gets its own copy
            await super().async_start_new_kernel(stdout=log, stderr=log, **kwargs)

    # nbclient's synchronous form wraps its own coroutine, not an override: wrap this one
    start_new_kernel = run_sync(async_start_new_kernel)

    def preprocess(self, nb, resources=None, km=None):
        self._deadline = time.monotonic() + self.notebook_timeout
        self._sources, self._epilogues = _lesson_data_checks(nb)
        self._restarts = 0
        self._lethal: set[int] = set()   # cells that took a kernel down: not replayed
        self._given_up = ""
        name = (resources or {}).get("unique_key") or "notebook"
        self._progress = ProgressBar(f"grading {name}", enabled=self.show_progress,
                                     stream=sys.stderr)
        self._cells = len(nb.cells)
        try:
            return super().preprocess(nb, resources, km)
        finally:
            self._progress.close(f"{self._cells} cells run")

    def preprocess_cell(self, cell, resources, index):
        self._progress.show(index, self._cells, "cells")
        if cell.cell_type != "code":
            return cell, resources
        if self._given_up:
            cell.outputs = [error_output(NOT_RUN, self._given_up)]
            return cell, resources
        start = time.monotonic()
        source = cell.source
        cell.source = self._sources.get(index, source)
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
            self._run_epilogue(cell, index)
            if failed := self._setup_failure(cell, index):
                self._given_up = f"not run: the grader's setup cell failed ({failed})"
        except DeadKernelError:
            code = self._exit_code()
            what = exit_description(code)
            cause = _CAUSES.get(-code if code and code < 0 else (code or 0) - 128, "")
            cell.outputs = [error_output(KERNEL_DIED, f"the kernel died ({what}) while running "
                                         f"this cell{': ' + cause if cause else ''}")]
            self._lethal.add(index)
            self._replace_kernel(index)
        except CellTimeoutError:
            cell.outputs = [error_output(
                KERNEL_UNRESPONSIVE, "the cell ran past its time limit and did not stop when "
                "interrupted; its kernel was killed and replaced")]
            self._lethal.add(index)
            self._replace_kernel(index)
        cell.source = source
        cell.metadata.setdefault(submission.META, {})["seconds"] = round(
            time.monotonic() - start, 2)
        return cell, resources

    def _setup_failure(self, cell, index: int) -> str:
        """"ename: evalue" of the error ``cell`` ended with where it is the grader's setup cell
        of a prepared notebook (index 0, followed by the keeper of _lesson_data_checks), else
        "". Without the keeper no test cell's check can run, so the rest is not run: a test
        cell would otherwise fail with a NameError that says nothing of the cause."""
        if index != 0 or 0 not in self._epilogues:
            return ""
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        return f"{errors[0].get('ename')}: {errors[0].get('evalue')}" if errors else ""

    def _run_epilogue(self, cell, index: int) -> None:
        """Run the grader's code that follows cell ``index`` (:func:`_lesson_data_epilogues`)
        as a cell of its own, its outputs dropped; an error it raises (a test cell's kept
        values changed) is added to ``cell``'s outputs, which fails a test cell."""
        code = self._epilogues.get(index)
        if not code or any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
            return
        cells = list(self.nb.cells)
        grader = NotebookNode(cell_type="code", source=code, outputs=[], metadata=NotebookNode(),
                              execution_count=None)
        try:
            self.execute_cell(grader, index, store_history=False)
        finally:
            self.nb.cells[:] = cells
        cell.outputs.extend(o for o in grader.outputs if o.get("output_type") == "error")

    def _get_timeout(self, cell):
        per_cell = super()._get_timeout(cell)
        remaining = max(1, int(self._deadline - time.monotonic()))
        return remaining if per_cell is None else min(per_cell, remaining)

    def _exit_code(self) -> int | None:
        provisioner = getattr(self.km, "provisioner", None)
        process = getattr(provisioner, "process", None)
        if process is None:
            return None
        try:
            return process.wait(timeout=5)
        except Exception:  # noqa: BLE001 - any failure to read it means "unknown"
            return None

    def _replace_kernel(self, index: int) -> None:
        """A fresh kernel with the state of cells 0..index-1 (run again, outputs discarded;
        cells that took a kernel down are not run again)."""
        self._restarts += 1
        if self._restarts > self.max_restarts:
            self._given_up = (f"not run: the kernel was replaced {self.max_restarts} times, "
                              "so the rest of the notebook was given up")
            return
        run_sync(self._async_fresh_kernel)()
        cells = list(self.nb.cells)        # nbclient puts each executed cell back in its place
        try:
            for i, earlier in enumerate(cells[:index]):
                if (earlier.cell_type == "code" and earlier.source.strip()
                        and i not in self._lethal):
                    replayed = copy.deepcopy(earlier)
                    replayed.source = self._sources.get(i, replayed.source)
                    self.execute_cell(replayed, i, store_history=False)
                    self._run_epilogue(replayed, i)
                    if failed := self._setup_failure(replayed, i):
                        self._given_up = ("not run: the grader's setup cell failed when it "
                                          f"was run again in a fresh kernel ({failed})")
                        break
        except (DeadKernelError, CellTimeoutError):
            self._given_up = ("not run: the kernel died again while the cells before this one "
                              "were replayed")
        finally:
            self.nb.cells[:] = cells       # the replays' outputs are discarded

    async def _async_fresh_kernel(self) -> None:
        if self.kc is not None:
            self.kc.stop_channels()
        await self.km.shutdown_kernel(now=True)    # this also closes the manager's sockets
        self.km = self.create_kernel_manager()
        await self.async_start_new_kernel()        # nbclient's own start: same cwd and options
        await self.async_start_new_kernel_client()
