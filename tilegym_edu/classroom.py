"""Grading a whole class: every student's notebooks of one lesson into a summary CSV, each in
its own sandboxed kernel (tilegym_edu.sandbox). A broken submission becomes a row that says
why; grading the rest carries on.

Layout of the class folder: one sub-folder per student, named by the student id, holding that
student's notebooks of the lesson::

    submissions/ada/03_software_pipelining.ipynb
    submissions/grace/03_software_pipelining.ipynb

One worker grades in this process, in the course root. More workers (``workers=N``; by
default one per visible GPU) each run one submission at a time as a process of its own
(``python -m tilegym_edu.class_worker``), pinned to its own GPU, in its own copy of the lesson
with its own gradebook; each finished grading is then recorded in the course's gradebook, and
its files copied into the course's ``.grading/``, by this process alone, one at a time.

A re-run grades only what is new, changed or failed: what was graded, and the hash of the
notebooks it was graded from, is kept in ``.grading/classes/<lesson>.json``.
"""
from __future__ import annotations

import contextlib
import csv
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator, TextIO

from tilegym_edu import (autograde, build, class_gradebook, class_state, course, device,
                         grade_report)

#: student ids become folder names and gradebook keys: letters, digits, '_', '-' and '.'
STUDENT_ID = re.compile(r"^[A-Za-z0-9_.-]+$")
#: held while a worker's grading is recorded in the course: one writer of its gradebook at once
_RECORDING = threading.Lock()


@dataclass(frozen=True)
class ClassResult:
    """One student's outcome: a GradeReport, or the error that stopped grading; ``seconds``:
    the wall time of that grading; ``earlier``: taken from an earlier run (unchanged since)."""

    student: str
    report: grade_report.GradeReport | None = None
    error: str = ""
    seconds: float = 0.0
    earlier: bool = False


#: where collect puts the learners' submissions, relative to the course root
COLLECTED = Path(".grading") / "collected"


def collect(lesson: str, root: Path | None = None) -> Path:
    """nbgrader's collect of ``lesson`` from the exchange (on a hub: tilegym_edu.hub): each
    learner's latest submission, with the receipts grading carries on to the feedback, into
    ``.grading/collected/<learner>/<lesson>/``. Returns ``.grading/collected``, the class folder
    for ``grade_class`` (then ``nbgrader release_feedback LESSON`` hands the feedback back)."""
    root = root or course.course_root()
    course.require_lesson(lesson, root)
    # the stock command, run at the course root: it reads the exchange's place from the Jupyter
    # config path (tilegym_edu.hub.write_nbgrader_config) as well as the course's own config
    run = subprocess.run([sys.executable, "-m", "nbgrader", "collect", lesson, "--update",
                          f"--CourseDirectory.submitted_directory={COLLECTED}"],
                         cwd=root, capture_output=True, text=True)
    if run.returncode:
        causes = course.nbgrader_causes(run.stdout + run.stderr)
        raise course.CourseError(
            f"nbgrader collect {lesson} failed: {'; '.join(causes) or run.stderr[-2000:]}. On a "
            "hub, run it where the exchange is configured (tilegym_edu.hub.write_nbgrader_config "
            "on JUPYTER_CONFIG_PATH), after nbgrader release_assignment")
    return root / COLLECTED


def students(folder: Path) -> list[str]:
    """The sub-folders of ``folder`` (one per student), sorted; hidden folders are skipped."""
    if not folder.is_dir():
        raise course.CourseError(f"{folder} is not a folder of student submissions")
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


def grade_student(lesson: str, submission: Path, student: str, root: Path | None,
                  sandboxed: bool, hide: list[Path]) -> ClassResult:
    """Grade ``student``'s folder of notebooks ``submission`` (course.submission_folder) in a
    fresh kernel with a tuning cache of its own; whatever goes wrong becomes the result's error
    (its first line)."""
    started = time.monotonic()
    try:
        with _own_cache():
            report = autograde.grade(lesson, submission, root=root, student=student,
                                     sandboxed=sandboxed, hide=hide)
    except Exception as exc:  # noqa: BLE001 - one student's failure never stops the class
        error = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return ClassResult(student, error=error, seconds=_since(started))
    return ClassResult(student, report, seconds=_since(started))


def _since(started: float) -> float:
    """Seconds since the ``time.monotonic()`` reading ``started``, to 0.1 s."""
    return round(time.monotonic() - started, 1)


def grade_class(lesson: str, folder: Path, root: Path | None = None, sandboxed: bool = True,
                workers: int | None = None, force: bool = False,
                progress: TextIO | None = None, scheduler: str | None = None) -> list[ClassResult]:
    """Grade ``folder/<student>/`` for every student, in name order, each in a fresh kernel
    (in the sandbox unless ``sandboxed`` is False) that cannot see the other students' work,
    with ``workers`` at once (default: one per visible GPU, else 1), or, given the address of
    a Dask ``scheduler``, as tasks of that cluster (tilegym_edu.class_cluster). Whatever one
    submission does, the others are graded: a student whose grading fails is a row that says
    why.
    Students whose notebooks (and the lesson) are unchanged since their last successful
    grading keep that result, unless ``force``. One line per finished grading goes to
    ``progress`` (default: stderr)."""
    folder, root = Path(folder), Path(root) if root else course.course_root()
    progress = progress or sys.stderr
    if scheduler is not None and workers is not None:
        raise course.CourseError("--workers and --scheduler: the cluster decides how many "
                                 "gradings run at once (one per GPU its workers offer); give one")
    slots = plan_workers(workers, visible_gpus()) if scheduler is None else []
    state = class_state.load_state(root, lesson)
    named = students(folder)
    results = {student: ClassResult(student, error="the folder name is not a student id "
                                    "(letters, digits, '_', '-' and '.' only): rename it")
               for student in named if not STUDENT_ID.match(student)}
    results |= {student: ClassResult(student, error=f"{folder / student} is a symbolic link: "
                                     "each student's folder must hold their own notebooks")
                for student in named if (folder / student).is_symlink()}
    hashes = class_state.submission_hashes(lesson, folder,
                                           [s for s in named if s not in results], root)
    results.update({} if force else _unchanged(state, hashes))
    to_grade = [student for student in hashes if student not in results]
    if len(to_grade) < len(hashes):
        print(f"{len(hashes) - len(to_grade)} of {len(hashes)} students unchanged since their "
              "last grading: their earlier grades are kept (--force grades them again)",
              file=progress, flush=True)
    if scheduler is not None:
        from tilegym_edu import class_cluster
        finished = class_cluster.grade_on_cluster(lesson, folder, to_grade, root, sandboxed,
                                                  scheduler)
    elif len(slots) == 1:
        finished = _grade_here(lesson, folder, to_grade, root, sandboxed)
    else:
        finished = _grade_in_workers(lesson, folder, to_grade, root, sandboxed, slots)
    for done, result in enumerate(finished, 1):
        print(f"[{done}/{len(to_grade)}] {_progress_line(lesson, result)}", file=progress,
              flush=True)
        results[result.student] = result
        state[result.student] = {**result_to_dict(result), "hash": hashes[result.student]}
        class_state.save_state(root, lesson, state)
    return [results[s] for s in sorted(results)]


def _unchanged(state: dict[str, dict], hashes: dict[str, str]) -> dict[str, ClassResult]:
    """The earlier results, from ``state``, of the students graded from the notebooks that
    ``hashes`` describe now; a failed grading is never kept."""
    return {student: replace(result_from_dict(state[student]), earlier=True)
            for student, digest in hashes.items()
            if student in state and state[student]["hash"] == digest
            and state[student]["report"]}


def _progress_line(lesson: str, result: ClassResult) -> str:
    """``student lesson points/max in S s``, or the error that stopped the grading."""
    if result.report is None:
        return (f"{result.student} {lesson} not graded: {grade_report.printable(result.error)} "
                f"({result.seconds:.0f} s)")
    return (f"{result.student} {lesson} {result.report.points:g}/{result.report.max_points:g} "
            f"in {result.seconds:.0f} s")


def _grade_here(lesson: str, folder: Path, to_grade: list[str], root: Path,
                sandboxed: bool) -> Iterator[ClassResult]:
    """Grade the students one after another in this process, in the course root."""
    for student in to_grade:
        yield grade_student(lesson, course.submission_folder(folder, student, lesson), student,
                            root, sandboxed, hide=[folder])


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them (its entries when it
    is set, else the indices 0, 1, ...); none in interpreter mode."""
    if not device.ON_GPU:
        return []
    import torch
    count = torch.cuda.device_count()
    named = os.environ.get("CUDA_VISIBLE_DEVICES")
    if named is not None:
        return [g.strip() for g in named.split(",") if g.strip()][:count]
    return [str(index) for index in range(count)]


def plan_workers(requested: int | None, gpus: list[str]) -> list[str | None]:
    """The GPU each worker is pinned to (None: a CPU worker, in interpreter mode): by default
    one worker per GPU (1 without a GPU); never two workers on one GPU."""
    if requested is not None and requested < 1:
        raise course.CourseError(f"--workers {requested}: grade with 1 worker or more")
    if not gpus:
        return [None] * (requested or 1)
    if requested is not None and requested > len(gpus):
        raise course.CourseError(
            f"--workers {requested}, but this machine has {len(gpus)} visible GPU(s) "
            f"(CUDA_VISIBLE_DEVICES {', '.join(gpus)}): each worker needs a GPU of its own, so "
            f"that speed cells measure one submission alone; use --workers {len(gpus)} or "
            "fewer")
    return list(gpus[:requested or len(gpus)])


def worker_environment(gpu: str | None, root: Path) -> dict[str, str]:
    """The environment of a worker process: the course root ``root`` (its copy), and only
    ``gpu`` visible (set before the worker imports torch); a CPU worker's is this one's."""
    env = {**os.environ, "TILEGYM_COURSE_ROOT": str(root)}
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return env


def worker_command(lesson: str, submission: Path, student: str, root: Path, sandboxed: bool,
                   hide: list[Path], out: Path) -> list[str]:
    """The command that grades one submission in a worker process (tilegym_edu.class_worker),
    writing its result as JSON to ``out``."""
    return [sys.executable, "-m", "tilegym_edu.class_worker", lesson, str(submission), student,
            "--root", str(root), "--out", str(out), "--sandbox" if sandboxed else "--no-sandbox",
            *[arg for folder in hide for arg in ("--hide", str(folder))]]


def _grade_in_workers(lesson: str, folder: Path, to_grade: list[str], root: Path,
                      sandboxed: bool, slots: list[str | None]) -> Iterator[ClassResult]:
    """Grade the students in ``len(slots)`` worker processes at once, each pinned to its slot's
    GPU and grading in its own copy of the lesson; yield each result as it finishes, after
    recording it in the course's gradebook and ``.grading/`` folders."""
    if not to_grade:
        return
    build.release(lesson, root)    # the course's gradebook holds the lesson's cells to record
    with tempfile.TemporaryDirectory(prefix="tilegym-class-") as scratch:
        free = queue.Queue()
        for number, gpu in enumerate(slots):
            copy = Path(scratch) / f"worker{number}"
            shutil.copytree(root / "solutions" / lesson, copy / "solutions" / lesson)
            free.put((gpu, copy))
        hide = [folder, root / "solutions", root / ".grading"]

        def grade_one(student: str) -> ClassResult:
            gpu, copy = free.get()
            try:
                return _run_worker(lesson, folder, student, root, copy, gpu, sandboxed, hide)
            finally:
                free.put((gpu, copy))

        with ThreadPoolExecutor(max_workers=len(slots)) as pool:
            running = {pool.submit(grade_one, student): student for student in to_grade}
            for future in as_completed(running):
                yield future.result()


def _run_worker(lesson: str, folder: Path, student: str, root: Path, copy: Path,
                gpu: str | None, sandboxed: bool, hide: list[Path]) -> ClassResult:
    """Grade one student in a worker process in the course copy ``copy`` and record the
    outcome in ``root``; a worker that dies, or a grading that cannot be recorded, becomes
    the student's error."""
    started = time.monotonic()
    log = worker_log(root, lesson, student)
    out = copy / "result.json"
    out.unlink(missing_ok=True)
    submission = course.submission_folder(folder, student, lesson)
    with open(log, "w") as log_file:
        status = subprocess.call(worker_command(lesson, submission, student, copy, sandboxed,
                                                hide, out),
                                 env=worker_environment(gpu, copy), stdout=log_file,
                                 stderr=subprocess.STDOUT)
    return record_worker_result(lesson, student, root, copy, status, log, started)


def worker_log(root: Path, lesson: str, student: str) -> Path:
    """Where a worker process's output goes: .grading/classes/LESSON-logs/STUDENT.log."""
    log = root / ".grading" / "classes" / f"{lesson}-logs" / f"{student}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    return log


def record_worker_result(lesson: str, student: str, root: Path, copy: Path, status: int,
                         log: Path, started: float) -> ClassResult:
    """The result a worker process (exit ``status``) left in ``copy``/result.json, recorded
    in ``root``'s gradebook and ``.grading/``; a worker that left none, or a grading that
    cannot be recorded, becomes the student's error."""
    out = copy / "result.json"
    if not out.is_file():
        how = f"killed by signal {-status}" if status < 0 else f"exit status {status}"
        return ClassResult(student, error=f"the grading process ended without a result ({how}; "
                           f"its output: {log}): the next run grades this student again",
                           seconds=_since(started))
    result = replace(result_from_dict(json.loads(out.read_text())), seconds=_since(started))
    if result.report is None:
        return result
    try:
        with _RECORDING:
            class_gradebook.record_in_gradebook(root, copy, lesson, student)
    except Exception as exc:  # noqa: BLE001 - the class goes on; this student is retried
        return ClassResult(student, error=f"graded, but recording the grade in {root}/.grading "
                           f"failed ({type(exc).__name__}: {exc}): the next run grades this "
                           "student again", seconds=result.seconds)
    return replace(result, report=_moved(result.report, copy, root))


def _moved(report: grade_report.GradeReport, copy: Path,
           root: Path) -> grade_report.GradeReport:
    """``report`` with its feedback paths in the course ``root`` instead of its copy."""
    return replace(report, feedback=[str(root / Path(p).relative_to(copy))
                                     for p in report.feedback])


def result_to_dict(result: ClassResult) -> dict:
    """The result as JSON-ready data (what a worker hands back, and the state keeps)."""
    return {"student": result.student, "error": result.error, "seconds": result.seconds,
            "report": result.report.to_dict() if result.report else None}


def result_from_dict(data: dict) -> ClassResult:
    """The result that :func:`result_to_dict` wrote."""
    report = grade_report.report_from_dict(data["report"]) if data["report"] else None
    return ClassResult(data["student"], report, data["error"], data["seconds"])


@contextlib.contextmanager
def _own_cache() -> Iterator[None]:
    """A fresh tuning cache for one student's grading (tilegym_edu.tune), so a configuration
    one submission's autotuning chose is never what the next one's finds (in the sandbox the
    kernel has a private one anyway; this covers --no-sandbox)."""
    saved = os.environ.get("TILEGYM_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="tilegym-cache-") as cache:
        os.environ["TILEGYM_CACHE_DIR"] = cache
        try:
            yield
        finally:
            if saved is None:
                os.environ.pop("TILEGYM_CACHE_DIR", None)
            else:
                os.environ["TILEGYM_CACHE_DIR"] = saved


def write_csv(results: list[ClassResult], path: Path) -> None:
    """One row per student: total, maximum, points per exercise, a column naming what failed
    and why (or the error that stopped grading), and the grading's wall time in seconds (last,
    so the columns before it stay where they were before it was added)."""
    exercises = list(dict.fromkeys(e.exercise for r in results if r.report
                                   for e in r.report.exercises))
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["student", "points", "max_points", *exercises, "problems", "seconds"])
        for r in results:
            if r.report is None:
                writer.writerow([r.student, 0, "", *[""] * len(exercises),
                                 f"not graded: {r.error}", f"{r.seconds:g}"])
                continue
            by_name = {e.exercise: e for e in r.report.exercises}
            problems = "; ".join(f"{e.exercise}: {e.status}"
                                 + (f" ({e.reason})" if e.reason else "")
                                 for e in r.report.exercises if e.status != "passed")
            writer.writerow([r.student, f"{r.report.points:g}", f"{r.report.max_points:g}",
                             *[f"{by_name[x].points:g}" if x in by_name else "" for x in exercises],
                             problems, f"{r.seconds:g}"])
