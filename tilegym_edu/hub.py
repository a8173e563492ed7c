"""The course on JupyterHub (grader/README.md): what each user's single-user server gets, for a
class with nbgrader's exchange. In jupyterhub_config.py:

    from tilegym_edu import hub
    shared = hub.write_nbgrader_config("/srv/tilegym/etc", exchange="/srv/nbgrader/exchange")
    c.Spawner.pre_spawn_hook = hub.pre_spawn_hook(
        instructors={"ada"}, course_root="/srv/course/tilegym_edu", shared_config=shared)

Instructors' servers open the course root (this repository: nbgrader's course directory, with
every nbgrader tool); learners' servers open their home, where nbgrader fetches lessons, with
the assignment list (fetch, submit, fetch feedback) and without the instructor tools.
``tests/browser/test_jupyterhub.py`` runs a real hub this way, end to end.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from tilegym_edu.course import COURSE_ID

#: a Jupyter config folder for a hub learner: its labconfig/page_config.json leaves nbgrader's
#: assignment list and menu, and disables the formgrader, create-assignment and course-list
#: plugins and JupyterLab's news announcements (which would fetch from the internet); its
#: nbgrader_config.py makes the hub user the student nbgrader submits as
HUB_LEARNER_CONFIG = Path(__file__).resolve().parent / "jupyter" / "hub-learner"
#: nbgrader's server extensions a hub learner's server runs without (the assignment list stays)
LEARNER_OFF = ("nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.course_list")
#: JupyterHub 4.1 and later send `frame-ancestors 'none'`, which leaves the formgrader's tab in
#: JupyterLab empty (nbgrader #1870); an instructor's server allows frames of its own origin
FORMGRADER_FRAMES = ("--ServerApp.tornado_settings="
                     "{'headers': {'Content-Security-Policy': \"frame-ancestors 'self'\"}}")
_OURS = ("--ServerApp.jpserver_extensions=", "--ServerApp.tornado_settings=")


def write_nbgrader_config(folder: str | Path, exchange: str | Path) -> Path:
    """Write ``folder/nbgrader_config.py``, which every user's server reads (through
    JUPYTER_CONFIG_PATH, set by pre_spawn_hook): the course id and the exchange folder. Creates
    the exchange, writable by every user as nbgrader's exchange must be. Returns ``folder``."""
    folder, exchange = Path(folder), Path(exchange)
    folder.mkdir(parents=True, exist_ok=True)
    exchange.mkdir(parents=True, exist_ok=True)
    exchange.chmod(0o777)
    (folder / "nbgrader_config.py").write_text(
        "# written by tilegym_edu.hub.write_nbgrader_config: read by every user's server\n"
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
        f"c.Exchange.root = {str(exchange)!r}\n")
    return folder


def spawn_settings(user: str, instructors: Iterable[str], course_root: str | Path,
                   shared_config: str | Path, homes: str | Path | None = None
                   ) -> tuple[str | None, list[str], dict[str, str], list[str]]:
    """(notebook_dir, JUPYTER_CONFIG_PATH entries, other environment, extra server arguments)
    of ``user``'s server: for an instructor, the course root (also as TILEGYM_COURSE_ROOT, for
    `tilegym-edu collect` and `grade-class` in its terminal) and every tool; for a learner,
    ``homes/<user>`` (or the spawner's default, the user's home, when ``homes`` is None) with
    the hub learner's set-up."""
    if user in set(instructors):
        return (str(course_root), [str(shared_config)],
                {"TILEGYM_COURSE_ROOT": str(course_root)}, [FORMGRADER_FRAMES])
    disabled = ", ".join(f"'{name}': False" for name in LEARNER_OFF)
    notebook_dir = str(Path(homes) / user) if homes is not None else None
    return (notebook_dir, [str(HUB_LEARNER_CONFIG), str(shared_config)], {},
            [f"--ServerApp.jpserver_extensions={{{disabled}}}"])


def pre_spawn_hook(instructors: Iterable[str], course_root: str | Path,
                   shared_config: str | Path, homes: str | Path | None = None
                   ) -> Callable[[object], None]:
    """A JupyterHub ``Spawner.pre_spawn_hook`` giving each server spawn_settings; arguments it
    set on an earlier spawn of the same server are replaced, not repeated."""
    instructors = frozenset(instructors)

    def hook(spawner) -> None:
        notebook_dir, paths, environment, args = spawn_settings(
            spawner.user.name, instructors, course_root, shared_config, homes)
        if notebook_dir is not None:
            spawner.notebook_dir = notebook_dir
        earlier = [p for p in spawner.environment.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep)
                   if p and p not in paths]
        spawner.environment = {**spawner.environment, **environment,
                               "JUPYTER_CONFIG_PATH": os.pathsep.join(paths + earlier)}
        spawner.args = [a for a in spawner.args if not a.startswith(_OURS)] + args
    return hook
