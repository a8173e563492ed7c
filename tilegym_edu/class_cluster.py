"""``grade-class --scheduler ADDRESS``: a class graded as tasks of a Dask distributed cluster
(``pip install distributed``; Dask's own deployers start one on Slurm, Kubernetes, or by hand),
one submission per task, each task holding one unit of the workers' ``GPU`` resource.

Start one worker per GPU, each pinned to its GPU and offering one unit, so that a speed cell
measures one submission alone on its GPU::

    dask scheduler                                   # prints tcp://HOST:8786
    CUDA_VISIBLE_DEVICES=0 dask worker tcp://HOST:8786 --nthreads 1 --resources GPU=1
    CUDA_VISIBLE_DEVICES=1 dask worker tcp://HOST:8786 --nthreads 1 --resources GPU=1

Every machine of the cluster must see the course root and the class folder at the same paths
(a shared filesystem) and have this package installed. A task grades in a copy of the lesson
of its own, under ``.grading-cluster/<lesson>/<student>/`` in the course root, with
``python -m tilegym_edu.class_worker`` as ``--workers N`` does; this process then records
each finished grading in the course's gradebook and ``.grading/``, one at a time, as it does
for local workers, and removes the copy.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Iterator

from tilegym_edu import build, course
from tilegym_edu.classroom import (ClassResult, record_worker_result, worker_command,
                                   worker_log)


#: how long to wait for the scheduler to answer
CONNECT_TIMEOUT_S = 30


def scratch_folder(root: Path, lesson: str) -> Path:
    """Where the tasks' copies of the lesson go: on the course root's (shared) filesystem."""
    return root / ".grading-cluster" / lesson


def run_grading(command: list[str], copy: str, log: str) -> tuple[int, float]:
    """On a cluster worker: run one class_worker ``command`` in the lesson copy ``copy``,
    its output to ``log``; return its exit status and wall time in seconds. The worker's own
    environment (its pinned GPU) is kept."""
    started = time.monotonic()
    with open(log, "w") as log_file:
        status = subprocess.call(command, env={**os.environ, "TILEGYM_COURSE_ROOT": copy},
                                 stdout=log_file, stderr=subprocess.STDOUT)
    return status, time.monotonic() - started


def _client(scheduler: str):
    try:
        from distributed import Client
    except ImportError:
        raise course.CourseError("--scheduler grades on a Dask cluster, which needs the "
                                 "`distributed` package: pip install distributed") from None
    try:
        return Client(scheduler, timeout=CONNECT_TIMEOUT_S)
    except OSError as exc:
        raise course.CourseError(f"no Dask scheduler answered at {scheduler} ({exc}): start "
                                 "one with `dask scheduler`, and workers with `dask worker "
                                 f"{scheduler} --nthreads 1 --resources GPU=1`") from None


def grade_on_cluster(lesson: str, folder: Path, to_grade: list[str], root: Path,
                     sandboxed: bool, scheduler: str) -> Iterator[ClassResult]:
    """Grade the students as tasks on the cluster at ``scheduler``, one GPU unit each; yield
    each result as it finishes, recorded in the course's gradebook and ``.grading/``."""
    if not to_grade:
        return
    from distributed import as_completed
    client = _client(scheduler)
    build.release(lesson, root)    # the course's gradebook holds the lesson's cells to record
    scratch = scratch_folder(root, lesson)
    hide = [folder, root / "solutions", root / ".grading", scratch]
    copies, tasks = {}, {}
    try:
        for student in to_grade:
            copies[student] = copy = scratch / student
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(root / "solutions" / lesson, copy / "solutions" / lesson)
            command = worker_command(lesson, course.submission_folder(folder, student, lesson),
                                     student, copy, sandboxed, hide, copy / "result.json")
            log = worker_log(root, lesson, student)
            tasks[client.submit(run_grading, command, str(copy), str(log), key=f"{lesson}-"
                                f"{student}-{time.time_ns()}", resources={"GPU": 1})] = (
                student, log)
        for task in as_completed(tasks):
            student, log = tasks[task]
            if task.status != "finished":
                yield ClassResult(student, error=f"the cluster task failed ({task.exception()}; "
                                  f"its output: {log}): the next run grades this student again")
            else:
                status, seconds = task.result()
                yield record_worker_result(lesson, student, root, copies[student], status,
                                           log, time.monotonic() - seconds)
            shutil.rmtree(copies[student], ignore_errors=True)
    finally:
        client.close()
        for empty in (scratch, scratch.parent):   # left only if some copy is still there
            with contextlib.suppress(OSError):
                empty.rmdir()
