"""What every lesson's grading tests check, written once: grade each submission once per test
session, and compare its grade table with the solution's."""
from __future__ import annotations

import functools
import hashlib
import importlib
import multiprocessing
import os
import shutil
from collections.abc import Collection
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

import nbformat
import pytest

from tests.submissions import OnGpu, Submission
from tilegym_edu import autograde, course, grade_report, submission as grading_input

REPO = Path(__file__).resolve().parent.parent
LESSONS = course.lessons(REPO)
#: lessons that need more than a GPU: their cells need this module too (lesson 07: cuTile)
NEEDS_MODULE = {"07_cutile": "cuda.tile"}


def skip_unless_it_runs(lesson: str) -> None:
    """On a GPU: skip a lesson whose extra module (NEEDS_MODULE) is not installed, saying how
    to install it (without it every cell of that lesson fails, which says nothing new)."""
    if lesson in NEEDS_MODULE:
        pytest.importorskip(NEEDS_MODULE[lesson], reason=f"{lesson} needs {NEEDS_MODULE[lesson]}: "
                            "`make cutile` installs it and its toolchain")


def solution_notebook(lesson: str) -> Path:
    return REPO / "solutions" / lesson / f"{lesson}.ipynb"


def solution_cells(lesson: str) -> dict[str, str]:
    """{grade id: source} of the solution notebook's cells that have a grade id."""
    cells = [(c.metadata.get("nbgrader", {}).get("grade_id"), c.source)
             for c in _solution(lesson).cells]
    found = {grade_id: source for grade_id, source in cells if grade_id}
    assert len(found) == sum(1 for grade_id, _ in cells if grade_id), "a grade id used twice"
    return found


@functools.cache
def _solution(lesson: str) -> nbformat.NotebookNode:
    """The lesson's solution notebook, read once a process (callers only read it)."""
    return nbformat.read(solution_notebook(lesson), as_version=4)


def _graded_cells(lesson: str):
    return [c for c in _solution(lesson).cells if c.metadata.get("nbgrader", {}).get("grade")]


@functools.cache
def _run_cells(lesson: str) -> list[tuple[str | None, str, set[str], set[str], bool]]:
    """(grade id, source, names it binds, names it reads from earlier cells, graded) of each
    code cell of the solution that grading runs (demonstrations left out), in order: names_of
    once per cell a process, where affected_exercises would parse each cell per submission."""
    return [(cell.metadata.get("nbgrader", {}).get("grade_id"), cell.source,
             *grading_input.names_of(cell.source), grading_input.is_graded(cell))
            for cell in _solution(lesson).cells
            if cell.cell_type == "code" and not grading_input.is_demonstration(cell)]


def _submissions_module(lesson: str):
    return importlib.import_module(f"tests.submissions.lesson{lesson[:2]}")


def submissions_of(lesson: str) -> list[Submission]:
    """The known-wrong submissions of a lesson (tests/submissions/lessonNN.py)."""
    return _submissions_module(lesson).SUBMISSIONS


def gpu_submissions_of(lesson: str) -> list[OnGpu]:
    """The submissions of a lesson also graded on a GPU, and what they lose there (its
    GPU_SUBMISSIONS; none where it has none)."""
    return getattr(_submissions_module(lesson), "GPU_SUBMISSIONS", [])


def affected_exercises(lesson: str, wrong: Submission) -> list[str]:
    """The graded cells whose result ``wrong``'s edits can change, in order: those that read,
    through any chain of cells, a name an edited cell binds (by the name analysis grading's own
    --exercise uses, tilegym_edu.submission.names_of). Every other graded cell runs exactly the
    solution's code on the solution's inputs, so grading it again would only repeat the
    solution's result."""
    tainted, affected = set(), []
    for grade_id, source, bound, read, graded in _run_cells(lesson):
        if grade_id in wrong.edits:
            old, new = wrong.edits[grade_id]
            tainted |= bound | grading_input.names_of(source.replace(old, new))[0]
        elif read & tainted:
            tainted |= bound
        else:
            continue
        if graded:
            affected.append(grade_id)
    return affected


def graded_here(lesson: str, wrong: Submission) -> list[str]:
    """The cells ``wrong`` is graded on in interpreter mode: its affected_exercises, or of
    them only its ``interpreter_cells`` where it names some (on a GPU, tests/gpu grades every
    affected cell)."""
    affected = affected_exercises(lesson, wrong)
    return [e for e in affected if e in wrong.interpreter_cells] if wrong.interpreter_cells \
        else affected


def lesson_points(lesson: str) -> dict[str, float]:
    """{grade id: points} of the lesson's graded cells, in order, from the notebook itself."""
    return {c.metadata.nbgrader["grade_id"]: c.metadata.nbgrader["points"]
            for c in _graded_cells(lesson)}


def gpu_only(lesson: str) -> set[str]:
    """The graded cells that say they need a GPU (they call grading.require_gpu)."""
    return {c.metadata.nbgrader["grade_id"] for c in _graded_cells(lesson)
            if "grading.require_gpu(" in c.source}


def by_exercise(report: grade_report.GradeReport) -> dict[str, grade_report.ExerciseResult]:
    return {e.exercise: e for e in report.exercises}


#: notebooks graded at once: each runs in its own kernel process, which keeps one core busy
#: (the interpreter is single-threaded), so two at a time nearly halve the time on 2 cores
GRADING_WORKERS = max(1, min(2, os.cpu_count() or 1))


def _limit_threads() -> None:
    """In each grading worker: one BLAS/OpenMP thread for it and the kernels it starts, so two
    gradings at once do not fight over the cores."""
    os.environ["OMP_NUM_THREADS"] = "1"


def _grade_in_own_course(lesson: str, folder: str, student: str, course_root: str,
                         workspace: str, exercises: list[str]) -> grade_report.GradeReport:
    """Grade ``folder`` (only ``exercises``, all when empty) in a copy of ``course_root`` that
    belongs to this worker process, so two gradings at once never share nbgrader's gradebook
    or working folders."""
    own = Path(workspace) / f"worker-{os.getpid()}"
    if not own.exists():
        for part in ("solutions", "notebooks"):
            shutil.copytree(Path(course_root) / part, own / part)
    return autograde.grade(lesson, Path(folder), root=own, student=student, exercises=exercises)


def packed(lesson: str, submissions: list[Submission]) -> list[list[Submission]]:
    """The submissions in groups that can share one grading: within a group no two edit the
    same cell or have an affected exercise in common, so (by affected_exercises) no edit of
    one reaches a cell graded for another. Greedy, in order."""
    groups: list[tuple[set[str], set[str], list[Submission]]] = []
    for wrong in submissions:
        cells = set(affected_exercises(lesson, wrong)) or set(lesson_points(lesson))
        for graded, edited, members in groups:
            if not graded & cells and not edited & set(wrong.edits):
                graded |= cells
                edited |= set(wrong.edits)
                members.append(wrong)
                break
        else:
            groups.append((cells, set(wrong.edits), [wrong]))
    return [members for _, _, members in groups]


def packed_gradings(lesson: str, submissions: list[Submission], root: Path, tmp_path_factory,
                    prefix: str, cells=graded_here
                    ) -> list[tuple[list[Submission], Path, str, list[str]]]:
    """The gradings that cover ``submissions`` of ``lesson``: per packed group, (its members,
    the folder of one notebook with every member's edits made on the solution at ``root``, a
    student id ``prefix`` + the first member's name, the exercises to grade: the members'
    ``cells(lesson, member)``, in the lesson's order). ``cells`` is graded_here without a GPU;
    on one, affected_exercises (every cell the edits reach, interpreter_cells or not)."""
    solution = root / "solutions" / lesson / f"{lesson}.ipynb"
    gradings = []
    for members in packed(lesson, submissions):
        together = Submission("+".join(m.name for m in members),
                              {k: v for m in members for k, v in m.edits.items()})
        folder = together.write(solution, tmp_path_factory.mktemp(f"{prefix}{members[0].name}"))
        graded = set().union(*(cells(lesson, m) for m in members))
        exercises = [e for e in lesson_points(lesson) if e in graded]
        gradings.append((members, folder, f"{prefix}{members[0].name}", exercises))
    return gradings


def grading_pool() -> ProcessPoolExecutor:
    """GRADING_WORKERS grading processes, started now (in the calling thread, with its
    environment as it is now: a test that patches the environment later changes nothing in
    them)."""
    pool = ProcessPoolExecutor(GRADING_WORKERS, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_limit_threads)
    for started in [pool.submit(os.getpid) for _ in range(GRADING_WORKERS)]:
        started.result()
    return pool


def start_lesson_gradings(lessons: list[str], root: Path, tmp_path_factory,
                          pool: ProcessPoolExecutor) -> dict[str, dict[str, Future]]:
    """{lesson: {"solution": the solution graded whole, and per known-wrong submission's name:
    the grading that holds its affected_exercises}}, each a Future of its GradeReport. Each
    lesson's submissions are graded in packed groups, each group as one notebook with every
    member's edits, on the members' affected exercises only. Every grading of every lesson
    goes to ``pool`` (grading_pool), the solutions first (the longest), so no worker waits for
    another lesson's last grading; each worker grades in its own copy of the course at
    ``root``; student ids are prefixed with the lesson number so lessons never share one.

    The notebooks are written here, in the calling thread, before this returns (about 1 s):
    never from a second thread of the test process, because Python 3.11 keeps one AST
    recursion counter for all threads, and an ``ast.parse`` in one thread while another is
    inside one fails the second with "SystemError: AST constructor recursion depth mismatch"
    (python/cpython#106905; CI, 2026-12-06: every lesson grading failed on it)."""
    solutions, packs, graded_in = {}, {}, {}
    for lesson in lessons:
        prefix = f"l{lesson[:2]}_"
        solutions[(lesson, "solution")] = (root / "solutions" / lesson, f"{prefix}solution", [])
        for members, folder, student, exercises in packed_gradings(
                lesson, submissions_of(lesson), root, tmp_path_factory, prefix):
            packs[(lesson, student)] = (folder, student, exercises)
            graded_in.update({(lesson, m.name): (lesson, student) for m in members})
    workspace = tmp_path_factory.mktemp("graders")
    futures = {key: pool.submit(_grade_in_own_course, key[0], str(folder), student, str(root),
                                str(workspace), exercises)
               for key, (folder, student, exercises) in {**solutions, **packs}.items()}
    return {lesson: {"solution": futures[(lesson, "solution")],
                     **{member: futures[job] for (of, member), job in graded_in.items()
                        if of == lesson}}
            for lesson in lessons}


def assert_full_marks_but_gpu(report: grade_report.GradeReport, points: dict[str, int],
                              gpu_only: set[str]) -> None:
    """Every exercise earns its points, except the GPU-only ones: 0 and "needs GPU"."""
    results = by_exercise(report)
    assert set(results) == set(points)
    for name, max_points in points.items():
        assert results[name].max_points == max_points
        if name in gpu_only:
            assert (results[name].points, results[name].status) == (0, "needs GPU")
            assert "needs an NVIDIA GPU" in results[name].reason
        else:
            assert ((results[name].points, results[name].status)
                    == (max_points, "passed")), results[name]


def assert_loses_exactly(solution: grade_report.GradeReport, graded: grade_report.GradeReport,
                         submission: Submission, also: tuple[str, ...] = (),
                         may: tuple[str, ...] = (), only: Collection[str] | None = None) -> None:
    """The cells ``submission.loses`` score 0 with its reason (and its ``details`` for those it
    names), the cells of ``also`` score 0, those of ``may`` 0 or as the solution does, and every
    other cell checked scores as the solution does. Checked: the cells of ``only`` (the
    submission's affected_exercises, for a packed grading of grade_lessons, which must hold
    them), else every cell of the lesson, which ``graded`` must hold."""
    solution_results, graded_results = by_exercise(solution), by_exercise(graded)
    checked = set(solution_results) if only is None else set(only)
    assert checked <= set(graded_results) <= set(solution_results), graded.format_table()
    assert set(submission.loses) | set(also) <= checked, (
        "a cell the submission must lose is not checked: affected_exercises missed it",
        graded.format_table())
    results = {name: r for name, r in graded_results.items() if name in checked}
    assert set(submission.details) <= set(submission.loses), submission.details
    for name, result in results.items():
        if name in submission.loses:
            assert result.points == 0 and result.status == "failed", result
            for phrase in (submission.reason, *submission.details.get(name, ())):
                assert phrase in result.reason, (phrase, result.reason)
        elif name in also:
            assert result.points == 0, result
        elif name not in may or result.points != 0:
            assert result.points == solution_results[name].points, result
            assert result.status == solution_results[name].status


def grade_blank(lesson: str, root: Path) -> grade_report.GradeReport:
    """Grade the learner notebook of ``lesson`` as given (blank); check it scores 0 on every
    cell, each failure is the NotImplementedError placeholder, feedback is written, and the
    notebook is not modified. Returns the report for lesson-specific checks."""
    notebook = root / "notebooks" / lesson / f"{lesson}.ipynb"
    before = hashlib.sha256(notebook.read_bytes()).hexdigest()
    report = autograde.grade(lesson, root=root, student=f"l{lesson[:2]}_blank")
    assert all(e.points == 0 for e in report.exercises), report.format_table()
    assert {e.status for e in report.exercises} <= {"failed", "needs GPU"}
    assert all("not written yet" in e.reason for e in report.exercises if e.status == "failed"), \
        report.format_table()
    assert hashlib.sha256(notebook.read_bytes()).hexdigest() == before, "grading modified it"
    assert all(path.endswith(".html") and os.path.exists(path) for path in report.feedback)
    return report
