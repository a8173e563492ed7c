"""What grade-class remembers between runs, so that a re-run grades only what is new, changed
or failed: per student, the last result and a hash of the notebooks it was graded from, in
``.grading/classes/<lesson>.json``."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tilegym_edu import course, handed_in


def submission_hashes(lesson: str, folder: Path, named: list[str],
                      root: Path) -> dict[str, str]:
    """Per student of ``named``: a hash of their notebooks of ``lesson`` in ``folder``, of the
    exchange's receipts beside them (a resubmission of the same notebook is a new submission:
    its feedback must carry the new receipts) and of the lesson's own notebooks (a changed
    lesson grades everyone again)."""
    lesson_hash = _files_hash(sorted((root / "solutions" / lesson).glob("*.ipynb")))
    hashes = {}
    for student in named:
        submitted = course.submission_folder(folder, student, lesson)
        receipts = [submitted / name for name in course.EXCHANGE_RECEIPTS
                    if (submitted / name).exists() or (submitted / name).is_symlink()]
        try:
            hashes[student] = _files_hash(sorted(submitted.glob("*.ipynb")) + receipts,
                                          lesson_hash)
        except course.CourseError as exc:   # graded anyway: the grading says what is wrong
            hashes[student] = f"unreadable: {exc}"
    return hashes


def _files_hash(paths: list[Path], salt: str = "") -> str:
    """SHA-256 (hex) of the files' names and contents, after ``salt``."""
    digest = hashlib.sha256(salt.encode())
    for path in paths:
        digest.update(path.name.encode() + b"\0" + handed_in.read_bytes(path) + b"\0")
    return digest.hexdigest()


def state_path(root: Path, lesson: str) -> Path:
    """Where grade-class keeps what it graded of ``lesson``: ``.grading/classes/LESSON.json``."""
    return root / ".grading" / "classes" / f"{lesson}.json"


def load_state(root: Path, lesson: str) -> dict[str, dict]:
    """Per student: the last grading of ``lesson`` (result_to_dict) and the hash of what was
    graded; empty if nothing was graded yet."""
    path = state_path(root, lesson)
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise course.CourseError(f"{path} is not what grade-class wrote ({exc}): delete it, and "
                                 "the next run grades every student again") from None


def save_state(root: Path, lesson: str, state: dict[str, dict]) -> None:
    """Write the state whole (a new file renamed over the old: never half written)."""
    path = state_path(root, lesson)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(state, indent=1, sort_keys=True))
    partial.replace(path)
