"""tilegym_edu.hub: what each user's server gets on a JupyterHub, and the nbgrader configuration
it reads; course.submission_folder, which lets grade-class read nbgrader's collected layout. The
hub itself runs end to end in tests/browser/test_jupyterhub.py."""
import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace

from traitlets.config import Config

from tilegym_edu import cli, course, hub


def spawner(name: str, **earlier):
    return SimpleNamespace(user=SimpleNamespace(name=name), notebook_dir="",
                           environment=dict(earlier.get("environment", {})),
                           args=list(earlier.get("args", [])))


def test_an_instructor_gets_the_course_root_and_every_tool(tmp_path):
    hook = hub.pre_spawn_hook({"ada"}, tmp_path / "course", tmp_path / "etc")
    server = spawner("ada", environment={"JUPYTER_CONFIG_PATH": "/site/jupyter"})
    hook(server)
    assert server.notebook_dir == str(tmp_path / "course")
    assert server.environment["TILEGYM_COURSE_ROOT"] == str(tmp_path / "course")
    assert server.environment["JUPYTER_CONFIG_PATH"].split(os.pathsep) == [
        str(tmp_path / "etc"), "/site/jupyter"]
    assert server.args == [hub.FORMGRADER_FRAMES]


def test_a_learner_gets_the_assignment_list_without_the_instructor_tools(tmp_path):
    hook = hub.pre_spawn_hook({"ada"}, tmp_path / "course", tmp_path / "etc", tmp_path / "home")
    server = spawner("grace", args=["--allow-root"])
    hook(server)
    hook(server)                      # a second spawn of the same server repeats nothing
    assert server.notebook_dir == str(tmp_path / "home" / "grace")
    assert server.environment["JUPYTER_CONFIG_PATH"].split(os.pathsep) == [
        str(hub.HUB_LEARNER_CONFIG), str(tmp_path / "etc")]
    assert "TILEGYM_COURSE_ROOT" not in server.environment
    assert server.args[0] == "--allow-root" and len(server.args) == 2
    disabled = server.args[1]
    assert all(f"'{name}': False" in disabled for name in hub.LEARNER_OFF)
    assert "assignment_list" not in disabled
    assert "nbgrader.server_extensions.assignment_list" in cli.INSTRUCTOR_SERVER_EXTENSIONS


def test_the_hub_learner_page_config_keeps_only_the_assignment_list():
    off = json.loads((hub.HUB_LEARNER_CONFIG / "labconfig" / "page_config.json").read_text())
    off = {name for name, disabled in off["disabledExtensions"].items() if disabled}
    assert off == {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                   "@jupyter/nbgrader:course-list",
                   "@jupyterlab/apputils-extension:announcements"}


def load_config(path: Path, environment: dict[str, str]) -> Config:
    c = Config()
    saved = dict(os.environ)
    os.environ.update(environment)
    try:
        exec(path.read_text(), {"get_config": lambda: c})
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return c


def test_a_hub_learner_submits_as_the_hub_user_not_the_operating_system_user():
    c = load_config(hub.HUB_LEARNER_CONFIG / "nbgrader_config.py", {"JUPYTERHUB_USER": "grace"})
    assert c.CourseDirectory.student_id == "grace"


def test_the_shared_config_names_the_course_and_the_exchange(tmp_path):
    folder = hub.write_nbgrader_config(tmp_path / "etc", tmp_path / "exchange")
    c = load_config(folder / "nbgrader_config.py", {})
    assert c.CourseDirectory.course_id == course.COURSE_ID
    assert c.Exchange.root == str(tmp_path / "exchange")
    assert stat.S_IMODE((tmp_path / "exchange").stat().st_mode) == 0o777


def test_submission_folder_reads_both_class_layouts(tmp_path):
    (tmp_path / "ada").mkdir()
    (tmp_path / "grace" / "00_getting_started").mkdir(parents=True)
    assert course.submission_folder(tmp_path, "ada", "00_getting_started") == tmp_path / "ada"
    assert (course.submission_folder(tmp_path, "grace", "00_getting_started")
            == tmp_path / "grace" / "00_getting_started")
