"""environment.yml installs the same packages as pyproject.toml; the Makefile and README show the
commands a new learner needs."""
import tomllib

import yaml

from tests.conftest import REPO


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert sorted(p for p in pip if not p.startswith("-e")) == sorted(project["dependencies"])
    assert "-e ." in pip
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python"))
    assert python.removeprefix("python") == project["requires-python"]


def test_readme_starts_with_the_two_commands():
    readme = (REPO / "README.md").read_text()
    assert readme.index("make lab") < readme.index("make test") < readme.index("## ")


def test_ci_runs_the_readme_test_command():
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_lab_binds_to_localhost_and_keeps_token_auth():
    from tilegym_edu import cli
    command = cli.lab_command(REPO, [])
    assert "--ServerApp.ip=127.0.0.1" in command
    assert not [a for a in command if "token" in a.lower() or "password" in a.lower()]
    assert command[-1].endswith("00_getting_started.ipynb")
    assert cli.lab_command(REPO, ["--no-browser"])[-1] == "--no-browser"


def test_readme_images_exist():
    import re
    readme = (REPO / "README.md").read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", readme)
    assert images, "the README shows what a learner will see"
    assert [p for p in images if not (REPO / p).is_file()] == []


def test_learner_lab_hides_instructor_tools_and_instructor_lab_has_them():
    import json
    from tilegym_edu import cli
    learner = cli.lab_command(REPO, [])
    assert any("nbgrader.server_extensions.formgrader': False" in a for a in learner)
    assert f"--ServerApp.root_dir={REPO / 'notebooks'}" in learner
    instructor = cli.lab_command(REPO, [], instructor=True)
    assert f"--ServerApp.root_dir={REPO}" in instructor
    assert not any("jpserver_extensions" in a for a in instructor)
    page_config = json.loads((cli.LEARNER_CONFIG / "labconfig" / "page_config.json").read_text())
    assert page_config["disabledExtensions"]["@jupyter/nbgrader:formgrader"] is True
    assert "@jupyter/nbgrader:validate-assignment" not in page_config["disabledExtensions"]
    assert str(cli.LEARNER_CONFIG) in cli.lab_environment()["JUPYTER_CONFIG_PATH"]
    assert "JUPYTER_CONFIG_PATH" not in cli.lab_environment(instructor=True) or \
        str(cli.LEARNER_CONFIG) not in cli.lab_environment(instructor=True)["JUPYTER_CONFIG_PATH"]
