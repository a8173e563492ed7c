"""One worker's grading of one student for ``tilegym-edu grade-class --workers N``
(:mod:`tilegym_edu.classroom` starts it, in the worker's copy of the lesson and with its GPU
pinned through CUDA_VISIBLE_DEVICES): the result, a report or the error, is written as JSON::

    python -m tilegym_edu.class_worker LESSON SUBMISSION STUDENT --root COPY --out RESULT.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from tilegym_edu import classroom


def main(argv: list[str] | None = None) -> int:
    """Grade the submission and write its result; always exit 0 (the error is in the JSON)."""
    p = argparse.ArgumentParser(prog="python -m tilegym_edu.class_worker")
    p.add_argument("lesson")
    p.add_argument("submission", type=Path, help="the student's folder of notebooks")
    p.add_argument("student")
    p.add_argument("--root", type=Path, required=True, help="this worker's copy of the course")
    p.add_argument("--out", type=Path, required=True, help="where the result JSON goes")
    p.add_argument("--hide", type=Path, action="append", default=[],
                   help="a folder the sandboxed kernel must not see (repeatable)")
    p.add_argument("--sandbox", action=argparse.BooleanOptionalAction, default=True)
    args = p.parse_args(argv)
    result = classroom.grade_student(args.lesson, args.submission, args.student, args.root,
                                     args.sandbox, args.hide)
    args.out.write_text(json.dumps(classroom.result_to_dict(result)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
