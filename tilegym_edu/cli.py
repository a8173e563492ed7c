"""The `tilegym-edu` command: doctor, lab, grade, grade-class, collect, generate.

    tilegym-edu doctor                 versions, GPU facts and ceilings, known-bad combinations
    tilegym-edu lab [jupyter args]     JupyterLab on 127.0.0.1 (token auth) at notebooks/
    tilegym-edu lab --instructor       the same at the course root, with nbgrader's formgrader
    tilegym-edu grade LESSON [--json]  grade your notebook of LESSON (never modifies it)
    tilegym-edu grade LESSON --exercise ID   only that exercise (and what it needs)
    tilegym-edu grade LESSON --profile       also the slowest cells: where the time went
    tilegym-edu grade LESSON --submission FOLDER   someone else's notebook, in a sandbox
    tilegym-edu grade-class LESSON FOLDER [--csv PATH] [--workers N] [--force]   instructors:
                                       every student's notebook, each in a sandbox
                                       (--no-sandbox: only for trusted work), N at once (default
                                       one per GPU, each on its own), only what is new, changed
                                       or failed since the last run unless --force;
                                       --scheduler ADDRESS: as tasks of a Dask cluster
    tilegym-edu collect LESSON         instructors on a hub: the learners' submissions from
                                       nbgrader's exchange into .grading/collected/, for
                                       grade-class
    tilegym-edu generate [LESSON ...]  rebuild solutions/ from the lesson sources (.py), then
                                       notebooks/ from solutions/ (maintainers; --from-notebooks:
                                       the sources from edited solutions/ notebooks)

Exit status: 0 done, 1 grading ran and not every point was earned, 2 a usage or course error.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from urllib.parse import quote

from tilegym_edu import autograde, build, course, grade_report

VERSIONED_PACKAGES = ("torch", "triton", "numpy", "nbgrader", "jupyterlab")


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def doctor(args: argparse.Namespace) -> int:
    from tilegym_edu import compat, device

    import torch
    print(f"Python      {platform.python_version()} ({sys.executable})")
    for name in VERSIONED_PACKAGES:
        extra = f" (CUDA {torch.version.cuda})" if name == "torch" and torch.version.cuda else ""
        extra = " (CPU-only build)" if name == "torch" and not torch.version.cuda else extra
        print(f"{name:<11} {_version(name)}{extra}")
    facts = device.info()
    if facts is None:
        print("GPU         no GPU: interpreter mode (kernels run in Triton's CPU interpreter)")
    else:
        print(f"GPU         {facts.describe()}")
        from tilegym_edu.ceilings import measure_ceilings
        print("ceilings    measuring (once per GPU, driver and torch; cached) ...", flush=True)
        measured = measure_ceilings(refresh=args.remeasure)
        rates = ", ".join(f"{k} {v:.0f}" for k, v in measured.matmul_tflops.items())
        print(f"            copy {measured.copy_gbs:,.0f} GB/s; torch.matmul TFLOP/s: {rates} "
              f"(measured {measured.measured_on})")
    from tilegym_edu import cutile_check
    cutile = cutile_check.CutileFacts.of_this_machine()
    print(f"cuTile      {cutile_check.status(cutile)}")
    found = compat.problems() + cutile_check.problems(cutile)
    if not found:
        print("problems    none found")
    for problem in found:
        print(f"PROBLEM     {problem.summary}\n  fix:      {problem.fix}")
    return 0


#: nbgrader's instructor tools, off in the learner's JupyterLab: its Validate button stays
INSTRUCTOR_SERVER_EXTENSIONS = ("nbgrader.server_extensions.formgrader",
                                "nbgrader.server_extensions.assignment_list",
                                "nbgrader.server_extensions.course_list")
#: a Jupyter config folder whose labconfig/page_config.json disables the instructor tools'
#: JupyterLab plugins (formgrader, create assignment, course and assignment lists, the nbgrader
#: menu) and JupyterLab's news announcements (which would fetch from the internet)
LEARNER_CONFIG = Path(__file__).resolve().parent / "jupyter" / "learner"


def running_as_root() -> bool:
    """Whether this process runs as root (common in containers), which jupyter server refuses
    without --allow-root."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


def lab_command(root: Path, extra: list[str], instructor: bool = False) -> list[str]:
    """JupyterLab on 127.0.0.1 with Jupyter's token authentication (and --allow-root when
    running as root); ``extra`` arguments (e.g. ``--ip``) override. The learner's serves
    notebooks/ without nbgrader's instructor tools, and the URL it prints (with ?token=) opens
    the first lesson: that URL's path is ``LabApp.default_url`` (JupyterLab overrides
    ``ServerApp.default_url``; a notebook passed as an argument only steers a browser that
    jupyter opens itself). The instructor's serves the course root with all the tools."""
    command = [sys.executable, "-m", "jupyter", "lab", "--ServerApp.ip=127.0.0.1"]
    allow_root = ["--allow-root"] if running_as_root() else []
    if instructor:
        return [*command, f"--ServerApp.root_dir={root}", *allow_root, *extra]
    notebooks = root / "notebooks"
    first = sorted(notebooks.glob("00_*/*.ipynb"))[:1]
    disabled = ", ".join(f"'{name}': False" for name in INSTRUCTOR_SERVER_EXTENSIONS)
    return [*command, f"--ServerApp.root_dir={notebooks}",
            f"--ServerApp.jpserver_extensions={{{disabled}}}", *allow_root,
            *[f"--LabApp.default_url=/lab/tree/{quote(p.relative_to(notebooks).as_posix())}"
              for p in first], *extra]


def lab_environment(instructor: bool = False) -> dict[str, str]:
    """The environment JupyterLab runs in: the learner's adds LEARNER_CONFIG to
    JUPYTER_CONFIG_PATH, so the instructor plugins are off for this launch only (nothing is
    changed in the user's or the environment's Jupyter settings)."""
    env = dict(os.environ)
    if not instructor:
        earlier = env.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep)
        paths = [str(LEARNER_CONFIG), *filter(None, earlier)]
        env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(paths)
    return env


def lab(args: argparse.Namespace) -> None:
    who = "instructor (formgrader on)" if args.instructor else "learner"
    print(f"Starting JupyterLab, {who} set-up, on 127.0.0.1 with token authentication: open "
          "the URL with ?token=... that it prints below.")
    if running_as_root():
        print("Running as root (common in containers): JupyterLab is started with --allow-root, "
              "since Jupyter refuses root without it.")
    command = lab_command(course.course_root(), args.jupyter_args, args.instructor)
    sys.stdout.flush()
    # JupyterLab takes this process's place, so a signal to it (Ctrl+C, kill) stops the server
    # itself; a child left running would keep its port and kernels
    os.execve(command[0], command, lab_environment(args.instructor))


def _sandbox_wanted(args: argparse.Namespace, default: bool) -> bool:
    """Whether to sandbox the grading kernel; raises CourseError when it is wanted and cannot
    work here, saying what to do."""
    from tilegym_edu import sandbox
    wanted = default if args.sandbox is None else args.sandbox
    if wanted:
        try:
            sandbox.bwrap()
        except sandbox.SandboxUnavailable as exc:
            raise course.CourseError(f"{exc}; or grade with --no-sandbox as a user that owns "
                                     "nothing else (grader/README.md)") from None
    return wanted


def grade(args: argparse.Namespace) -> int:
    folder = Path(args.submission) if args.submission else None
    report = autograde.grade(args.lesson, folder, exercises=args.exercise or (),
                             sandboxed=_sandbox_wanted(args, default=folder is not None))
    print(grade_report.report_json(report) if args.json else report.format_table())
    if args.profile and not args.json:      # the JSON holds every cell's time anyway
        print(report.format_profile())
    return 0 if report.points >= report.max_points else 1


def grade_class(args: argparse.Namespace) -> int:
    from tilegym_edu import classroom
    results = classroom.grade_class(args.lesson, Path(args.folder),
                                    sandboxed=_sandbox_wanted(args, default=True),
                                    workers=args.workers, force=args.force,
                                    scheduler=args.scheduler)
    for r in results:
        if not r.earlier:
            print(r.report.format_table() if r.report else f"{r.student}: not graded: {r.error}")
    out = Path(args.csv or f"{args.lesson}-grades.csv")
    classroom.write_csv(results, out)
    print(f"summary of {len(results)} students: {out}")
    return 0


def collect(args: argparse.Namespace) -> int:
    from tilegym_edu import classroom
    folder = classroom.collect(args.lesson)
    learners = [s for s in classroom.students(folder) if (folder / s / args.lesson).is_dir()]
    print(f"collected {len(learners)} submissions of {args.lesson} into {folder}: "
          f"{', '.join(learners) or 'none yet'}")
    print(f"next: tilegym-edu grade-class {args.lesson} {folder}, then "
          f"nbgrader release_feedback {args.lesson}")
    return 0


def generate(args: argparse.Namespace) -> int:
    if args.from_notebooks:
        paths = [p for lesson in args.lessons or course.lessons()
                 for p in build.write_sources(lesson)]
    else:
        paths = build.generate(args.lessons or None)
    for path in paths:
        print(f"wrote {path}")
    return 0


def _sandbox_flags(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("--sandbox", dest="sandbox", action="store_true", default=None,
                       help="run the grading kernel in a bubblewrap sandbox")
    group.add_argument("--no-sandbox", dest="sandbox", action="store_false",
                       help="run it unsandboxed (only for work you trust)")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tilegym-edu", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("doctor", help="versions, GPU facts and ceilings, known-bad combinations")
    d.add_argument("--remeasure", action="store_true", help="measure the ceilings again")
    d.set_defaults(run=doctor)
    la = sub.add_parser("lab", help="JupyterLab on 127.0.0.1 at notebooks/ (other arguments "
                                    "go to jupyter lab, e.g. --no-browser)")
    la.add_argument("--instructor", action="store_true",
                    help="the course root with nbgrader's instructor tools (formgrader)")
    la.set_defaults(run=lab)
    g = sub.add_parser("grade", help="grade your notebook of a lesson (never modifies it)")
    g.add_argument("lesson", help="e.g. 00_getting_started")
    g.add_argument("--json", action="store_true", help="print the result as JSON")
    g.add_argument("--submission", metavar="FOLDER",
                   help="grade the notebooks in FOLDER instead (someone else's: sandboxed)")
    g.add_argument("--profile", action="store_true",
                   help="also print the slowest cells and where the grading's time went")
    g.add_argument("--exercise", metavar="ID", action="append",
                   help="grade only this exercise (a graded cell's id, as in the table) and "
                        "what it needs: a quick check while you work (give it again for "
                        "more than one); grade the whole lesson for your total")
    _sandbox_flags(g)
    g.set_defaults(run=grade)
    gc = sub.add_parser("grade-class", help="instructors: grade every student's notebook of a "
                                            "lesson (FOLDER/<student>/*.ipynb) into a CSV")
    gc.add_argument("lesson")
    gc.add_argument("folder", help="one sub-folder per student, named by the student id")
    gc.add_argument("--csv", help="summary file (default: LESSON-grades.csv)")
    gc.add_argument("--workers", type=int, metavar="N",
                    help="grade N submissions at once, each worker on a GPU of its own "
                         "(default: one per visible GPU; without a GPU 1, N CPU workers)")
    gc.add_argument("--force", action="store_true",
                    help="grade every submission again, also those unchanged since their last "
                         "grading (kept in .grading/classes/LESSON.json)")
    gc.add_argument("--scheduler", metavar="ADDRESS",
                    help="grade as tasks of the Dask cluster whose scheduler is at ADDRESS "
                         "(tcp://host:8786), one GPU each (grader/README.md)")
    _sandbox_flags(gc)
    gc.set_defaults(run=grade_class)
    co = sub.add_parser("collect", help="instructors on a hub: the learners' submissions of a "
                                        "lesson from nbgrader's exchange, for grade-class")
    co.add_argument("lesson")
    co.set_defaults(run=collect)
    ge = sub.add_parser("generate", help="rebuild solutions/ notebooks from their .py sources, "
                                         "then notebooks/ from solutions/")
    ge.add_argument("lessons", nargs="*", help="lessons (default: all)")
    ge.add_argument("--from-notebooks", action="store_true",
                    help="the other way: write each lesson's .py source from its solutions/ "
                         "notebook (after editing the notebook in JupyterLab)")
    ge.set_defaults(run=generate)
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args, extra = p.parse_known_args(argv)
    if extra and args.command != "lab":
        p.error(f"unrecognized arguments: {' '.join(extra)}")
    args.jupyter_args = extra
    try:
        return args.run(args)
    except course.CourseError as exc:
        print(f"tilegym-edu: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
