"""tilegym_edu.wheelhouse: the course's wheel and its requirements, what ``--have`` leaves to the
node, and a wheelhouse installed offline (``pip install --no-index``) into a fresh virtual
environment. Offline throughout: the dependencies come from a folder of small wheels built here
(``pip download --no-index --find-links``), the course's own requirements are all named in
``have``."""
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tilegym_edu import wheelhouse

COURSE_REQUIREMENTS = [Requirement(text) for text in tomllib.loads(
    (wheelhouse.ROOT / "pyproject.toml").read_text())["project"]["dependencies"]]


def fake_wheel(folder: Path, name: str, requires: tuple[str, ...] = ()) -> Path:
    """A pure-Python wheel of package ``name`` 1.0 (one module) requiring ``requires``."""
    module = name.replace("-", "_")
    info = f"{module}-1.0.dist-info"
    metadata = "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"]
                       + [f"Requires-Dist: {r}\n" for r in requires])
    files = {f"{module}/__init__.py": f"NAME = {name!r}\n", f"{info}/METADATA": metadata,
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{info}/RECORD"])
    path = folder / f"{module}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in files.items():
            archive.writestr(member, text)
    return path


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    """A folder standing in for the package index: a needs b (always) and c (never: a marker
    no Python 3 meets)."""
    folder = tmp_path_factory.mktemp("mirror")
    fake_wheel(folder, "fakedep-a", ("fakedep-b>=1.0", "fakedep-c; python_version < '3'"))
    fake_wheel(folder, "fakedep-b")
    fake_wheel(folder, "fakedep-c")
    return folder


@pytest.fixture(scope="module")
def built(tmp_path_factory, mirror):
    """A wheelhouse of the course and fakedep-a, every course requirement left to the node."""
    out = tmp_path_factory.mktemp("wheelhouse")
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    wheels = wheelhouse.build(out, python, have=tuple(r.name for r in COURSE_REQUIREMENTS),
                              also=("fakedep-a",),
                              pip_args=("--no-index", "--find-links", str(mirror)))
    return out, wheels


def test_the_course_wheel_requires_what_pyproject_lists(built):
    out, wheels = built
    course = next(w for w in wheels if w.name.startswith("tilegym_edu-"))
    assert ({str(r) for r in wheelhouse.wheel_requirements(course)}
            == {str(r) for r in COURSE_REQUIREMENTS})


def test_the_wheelhouse_holds_the_course_and_the_closure_of_what_was_asked(built):
    out, wheels = built
    assert sorted(w.name.split("-")[0] for w in wheels) == ["fakedep_a", "fakedep_b",
                                                              "tilegym_edu"]
    instructions = (out / "INSTALL.txt").read_text()
    assert f"python -m pip install --no-index --find-links {out.name} tilegym-edu fakedep-a" \
        in instructions
    assert "must already have: " + ", ".join(
        sorted(canonicalize_name(r.name) for r in COURSE_REQUIREMENTS)) in instructions
    assert all(w.name in instructions for w in wheels)


def test_the_wheelhouse_installs_offline_into_a_fresh_environment(built, tmp_path):
    out, _ = built
    venv.create(tmp_path / "node", with_pip=True)
    python = str(tmp_path / "node" / "bin" / "python")
    install = [python, "-m", "pip", "install", "--quiet", "--no-index", "--find-links", str(out)]
    subprocess.run(install + ["fakedep-a"], check=True)
    # the course's own requirements are the node's (have): its wheel goes in on its own
    subprocess.run(install + ["--no-deps", "tilegym-edu"], check=True)
    shown = subprocess.run([python, "-m", "pip", "show", "tilegym-edu"], check=True,
                           capture_output=True, text=True).stdout
    assert "Name: tilegym-edu" in shown
    names = subprocess.run([python, "-c", "import fakedep_a, fakedep_b; print(fakedep_a.NAME, "
                            "fakedep_b.NAME)"], check=True, capture_output=True, text=True)
    assert names.stdout.split() == ["fakedep-a", "fakedep-b"]


def test_drop_removes_the_wheels_the_node_already_has(tmp_path):
    kept = fake_wheel(tmp_path, "fakedep-a")
    dropped = fake_wheel(tmp_path, "fakedep-b")
    assert wheelhouse.drop(tmp_path, {"fakedep-b"}) == [dropped]
    assert sorted(tmp_path.glob("*.whl")) == [kept]


def test_cutile_requirements_pin_the_three_toolchain_packages_to_one_version():
    requirements = [Requirement(r) for r in wheelhouse.cutile_requirements("13.4.*")]
    assert [r.name for r in requirements] == ["cuda-tile", "nvidia-cuda-tileiras",
                                              "nvidia-cuda-nvcc", "nvidia-nvvm"]
    assert {str(r.specifier) for r in requirements[1:]} == {"==13.4.*"}
