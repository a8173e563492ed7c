"""Known-wrong (and known-right) submissions, made from a lesson's solution notebook by
replacing the source of named cells: each says exactly what it gets wrong."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import nbformat


@dataclass(frozen=True)
class Submission:
    """A solution notebook with some cells edited; ``loses`` names the graded cells whose
    points it must lose, and nothing else."""

    name: str
    edits: dict[str, tuple[str, str]] = field(default_factory=dict)  # grade_id -> (old, new)
    loses: tuple[str, ...] = ()
    reason: str = ""   # a phrase the grade table's reason must contain
    #: grade_id (one of ``loses``) -> more phrases that cell's reason must contain: the failing
    #: case it names
    details: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: where not empty, the only cells graded in interpreter mode (those of ``loses`` among
    #: them): a kernel that takes minutes in the interpreter on the other cells its edits
    #: reach, which its OnGpu entry in GPU_SUBMISSIONS grades on a GPU
    interpreter_cells: tuple[str, ...] = ()

    def write(self, solution: Path, folder: Path) -> Path:
        """Write this submission of ``solution`` into ``folder``; return the folder."""
        nb = nbformat.read(solution, as_version=4)
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id in self.edits:
                old, new = self.edits[grade_id]
                assert old in cell.source, f"{self.name}: {old!r} not in cell {grade_id}"
                cell.source = cell.source.replace(old, new)
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, folder / solution.name)
        return folder


@dataclass(frozen=True)
class OnGpu:
    """A submission graded on a GPU too (tests/gpu/test_lessons_gpu.py): there it loses its own
    ``loses`` (with its reason), every cell of ``also_loses`` and perhaps those of ``may_lose``,
    and nothing else. Both name cells that need a GPU (tests/test_lessons.py checks)."""

    submission: Submission
    also_loses: tuple[str, ...] = ()
    may_lose: tuple[str, ...] = ()
