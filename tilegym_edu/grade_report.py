"""What grading a lesson reports: one row per graded cell, every cell's time, the grade table.

:func:`exercise_results` reads the autograded notebook and nbgrader's scores into one
:class:`ExerciseResult` per graded cell: points, status, the figure closest to failing
(:mod:`tilegym_edu.figures`) and the reason, traced to the learner's cell that failed or to a
cell grading skipped. :func:`cell_times` reads how long each cell ran. :class:`GradeReport`
holds a lesson's grading and prints it as the grade table, the slowest cells or JSON.
"""
from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook

from tilegym_edu import course, figures, submission
from tilegym_edu.check import NOT_WRITTEN, hints

#: the error a speed check raises without a GPU (tilegym_edu.grading.NeedsGPU)
NEEDS_GPU_ERROR = "NeedsGPU"


@dataclass(frozen=True)
class ExerciseResult:
    """One graded cell of a lesson."""

    notebook: str
    exercise: str          # the cell's nbgrader grade id
    points: float
    max_points: float
    status: str            # "passed", "failed" or "needs GPU"
    reason: str = ""       # the error that cost the points (empty when passed)
    seconds: float | None = None   # how long the cell ran
    figure: str = ""       # what it measured, closest to failing (tilegym_edu.figures.summary)
    figures: list[dict] = field(default_factory=list)   # every figure it reported


@dataclass(frozen=True)
class CellTime:
    """How long one cell of the graded notebook ran."""

    notebook: str
    cell: str              # the grade id, the learner's cell's label, or "cell N: first line"
    seconds: float


@dataclass(frozen=True)
class GradeReport:
    """Self-grading of one lesson."""

    lesson: str
    student: str
    exercises: list[ExerciseResult] = field(default_factory=list)
    feedback: list[str] = field(default_factory=list)   # feedback HTML files
    notes: list[str] = field(default_factory=list)      # what the grader ignored or refused
    cells: list[CellTime] = field(default_factory=list)  # every code cell that ran, in order
    seconds: float = 0.0   # the whole grading, wall clock

    @property
    def points(self) -> float:
        return sum(e.points for e in self.exercises)

    @property
    def max_points(self) -> float:
        return sum(e.max_points for e in self.exercises)

    def to_dict(self) -> dict:
        return {**asdict(self), "points": self.points, "max_points": self.max_points}

    def format_table(self) -> str:
        header = ("exercise", "points", "status", "measured", "reason")
        rows = [(printable(e.exercise), f"{e.points:g}/{e.max_points:g}", e.status,
                 printable(e.figure), printable(e.reason)) for e in self.exercises]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
        lines = [f"{self.lesson} (graded as '{self.student}')"]
        for row in [header, *rows]:
            lines.append(("  ".join(c.ljust(w) for c, w in zip(row[:4], widths)) + "  "
                          + row[4]).rstrip())
        lines.append(f"total: {self.points:g}/{self.max_points:g} ({self.seconds:.0f} s)")
        lines += [f"note: {printable(note)}" for note in self.notes]
        lines += [f"feedback: {path}" for path in self.feedback]
        return "\n".join(lines)

    def format_profile(self, top: int = 10) -> str:
        """The ``top`` slowest cells and what they took of the whole grading."""
        ran = sum(c.seconds for c in self.cells)
        lines = [f"where the {self.seconds:.1f} s went ({ran:.1f} s running cells, the rest "
                 "starting kernels, nbgrader and feedback); slowest cells:"]
        for c in sorted(self.cells, key=lambda c: -c.seconds)[:top]:
            lines.append(f"  {c.seconds:7.1f} s  {c.cell}")
        return "\n".join(lines)



_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` on one line, every control character (a terminal's escape codes, carriage
    returns, newlines) written out as an escape: strings a learner can choose (a cell's
    grade_id, an error's message) cannot redraw the table an instructor reads (round 14 of the
    red team printed a fake "total: 8/8" over a 0/2 grading)."""
    return _CONTROL_CHARACTERS.sub(lambda match: ascii(match.group())[1:-1], text)


def report_json(report: GradeReport) -> str:
    """The report as JSON: every field, and the points and maximum points."""
    return json.dumps(report.to_dict(), indent=2)


def report_from_dict(data: dict) -> GradeReport:
    """The report that :meth:`GradeReport.to_dict` (or :func:`report_json`) wrote."""
    fields = {k: v for k, v in data.items() if k not in ("points", "max_points")}
    return GradeReport(**{**fields,
                          "exercises": [ExerciseResult(**e) for e in data["exercises"]],
                          "cells": [CellTime(**c) for c in data["cells"]]})


def _error_of(cell) -> tuple[str, str]:
    """(error name, one-line reason) of a cell's error output, or ('', '') if it has none."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            ename, evalue = output.get("ename", ""), output.get("evalue", "")
            first = evalue.strip().splitlines()[0] if evalue.strip() else ""
            if first:  # errors raised outside check() get their hint here
                first += hints(evalue, shown=first)
            return ename, f"{ename}: {first}" if first else ename
    return "", ""


def _reason(ename: str, reason: str, failed_before: list[tuple[str, str]],
            skipped_names: set[str]) -> str:
    """The reason a graded cell shows: timeouts and placeholders said plainly, and a name the
    learner's code should have defined traced to the learner's cell that failed before it, or
    to a cell grading skips."""
    if ename == "KeyboardInterrupt":   # how nbclient stops a cell past its time limit
        return (f"the cell ran past its time limit ({course.CELL_TIMEOUT_S} s a cell, "
                f"{course.NOTEBOOK_TIMEOUT_S} s the notebook) and was interrupted: look for a "
                "kernel or loop that never finishes, or sizes too large for this machine")
    if ename == "NotImplementedError" and reason == ename:   # the blank exercise's placeholder
        return NOT_WRITTEN.removeprefix("raised ")
    name = re.search(r"name '(\w+)' is not defined", reason)
    if name and name.group(1) in skipped_names:
        return (f"{reason} (only a cell grading skips defines `{name.group(1)}`: a "
                "demonstration, or with --exercise a cell that exercise does not need; define "
                "what your code uses in your own cells)")
    if ename == "NameError" and failed_before:
        label, why = failed_before[-1]
        return f"{reason} (because {label} failed earlier: {why})"
    return reason


def _cell_name(cell, number: int) -> str:
    first = next((line.strip() for line in cell.source.splitlines() if line.strip()), "")
    return (cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            or submission.learner_label(cell) or f"cell {number}: {first[:60]}")


def cell_times(autograded: Path, notebook: str) -> list[CellTime]:
    """How long each code cell of the autograded notebook ran, in order."""
    nb = nbformat.read(autograded, as_version=4)
    return [CellTime(notebook, _cell_name(cell, n), seconds)
            for n, cell in enumerate(nb.cells) if cell.cell_type == "code"
            and (seconds := cell.get("metadata", {}).get(submission.META, {}).get("seconds"))
            is not None]


def exercise_results(autograded: Path, notebook: str, lesson: str, student: str,
                     gradebook: Gradebook, prepared: submission.Prepared,
                     exercises: Collection[str] = ()) -> list[ExerciseResult]:
    """Every graded cell of the lesson's notebook (or only those of ``exercises``), scored from
    nbgrader's automatic grades (manual scores and extra credit in the gradebook count for
    nothing here)."""
    nb = nbformat.read(autograded, as_version=4)
    submitted = gradebook.find_submission_notebook(notebook, lesson, student)
    grades = {g.name: g for g in submitted.grades}
    missing = prepared.missing
    results, failed_before = [], []
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        ename, reason = _error_of(cell)
        label = submission.learner_label(cell)
        if label and ename:
            failed_before.append((label, reason))
        if not meta.get("grade") or (exercises and meta["grade_id"] not in exercises):
            continue
        grade_id = meta["grade_id"]
        grade = grades[grade_id]
        score, max_score = grade.auto_score or 0.0, grade.max_score
        reason = _reason(ename, reason, failed_before, prepared.skipped_names)
        if grade_id in missing:
            score, ename = 0.0, "missing"
            reason = ("this graded cell was deleted from your notebook: copy it back from a "
                      "fresh copy of the lesson (git checkout notebooks/) to earn its points")
        if score >= max_score:
            status, reason = "passed", ""
        elif ename == NEEDS_GPU_ERROR:
            status = "needs GPU"
        else:
            status = "failed"
            reason = reason or "no points (the cell produced no error: check its output)"
        seconds = cell.get("metadata", {}).get(submission.META, {}).get("seconds")
        measured = [] if grade_id in missing else figures.read(cell)
        results.append(ExerciseResult(notebook, grade_id, score, max_score, status, reason,
                                      seconds, figures.summary(measured), measured))
    return results

