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
