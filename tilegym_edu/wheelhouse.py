"""A folder of wheels for GPU nodes without internet (`make wheelhouse`): the course's own wheel,
the packages it needs for the node's Python and platform (PyPI's torch for Linux is the CUDA
build), optionally cuda-tile and its toolchain, and INSTALL.txt with the one command that
installs it all offline:

    python -m pip install --no-index --find-links WHEELHOUSE tilegym-edu

A node whose image already has some packages (torch and Triton, as a GPU image often does) names
them with ``--have``: they are neither downloaded as direct dependencies nor kept when another
package pulls them in, and pip on the node finds them installed.

    python -m tilegym_edu.wheelhouse --out wheelhouse --python 3.12 --have torch triton
    python -m tilegym_edu.wheelhouse --out wheelhouse --cutile "13.4.*"
    python -m tilegym_edu.wheelhouse --out wheelhouse -- --index-url https://mirror.example/simple

Arguments after ``--`` go to ``pip download`` as they are (a mirror, ``--no-index
--find-links DIR``). The wheels are downloaded here, where the internet is; nothing is
downloaded on the node.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

ROOT = Path(__file__).resolve().parent.parent
#: the manylinux tags of x86-64 Linux with glibc 2.28 or later (every current GPU node image),
#: and "any" for pure-Python wheels
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any")


def cutile_requirements(toolchain: str) -> list[str]:
    """cuda-tile and the pip toolchain it compiles with, all at one version (cuda.tile finds
    a pip tileiras only so); ``toolchain`` is a version pattern such as "13.4.*"."""
    return ["cuda-tile", f"nvidia-cuda-tileiras=={toolchain}", f"nvidia-cuda-nvcc=={toolchain}",
            f"nvidia-nvvm=={toolchain}"]


def wheel_requirements(wheel: Path) -> list[Requirement]:
    """The Requires-Dist of a wheel's METADATA that apply without extras."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(name).decode())
    requirements = [Requirement(text) for text in metadata.get_all("Requires-Dist") or []]
    return [r for r in requirements if r.marker is None or r.marker.evaluate({"extra": ""})]


def build_course_wheel(out: Path) -> Path:
    """The course's wheel, built from this checkout into ``out`` (no build isolation: setuptools
    comes from this environment, so nothing is fetched for the build)."""
    before = set(out.glob("tilegym_edu-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(out), str(ROOT)], check=True)
    built = sorted(set(out.glob("tilegym_edu-*.whl")) - before) or sorted(
        out.glob("tilegym_edu-*.whl"))
    return built[-1]


def download(requirements: list[str], out: Path, python: str, platforms: tuple[str, ...],
             pip_args: list[str]) -> None:
    """Binary wheels of ``requirements`` and everything they need, for CPython ``python`` on
    ``platforms``, into ``out`` (pip resolves them together, so their versions agree)."""
    if not requirements:
        return
    platform_args = [arg for platform in platforms for arg in ("--platform", platform)]
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
                    "--python-version", python, "--implementation", "cp", *platform_args,
                    "--dest", str(out), *pip_args, *requirements], check=True)


def drop(out: Path, have: set[str]) -> list[Path]:
    """Remove the wheels in ``out`` of the packages in ``have`` (canonical names); return them."""
    dropped = [wheel for wheel in sorted(out.glob("*.whl"))
               if parse_wheel_filename(wheel.name)[0] in have]
    for wheel in dropped:
        wheel.unlink()
    return dropped


def write_instructions(out: Path, course: Path, also: list[str], have: set[str]) -> Path:
    """INSTALL.txt: the offline install command, what the folder holds and what it leaves to
    the node."""
    names = ["tilegym-edu"] + [str(Requirement(r).name) for r in also]
    wheels = sorted(wheel.name for wheel in out.glob("*.whl"))
    lines = [f"Wheels of {course.name.split('-')[0]} and its dependencies, for a node without "
             "internet. On the node, in a fresh virtual environment:",
             "",
             f"    python -m pip install --no-index --find-links {out.name} {' '.join(names)}",
             ""]
    if have:
        lines += ["The node must already have: " + ", ".join(sorted(have)) + " (left out here).",
                  ""]
    lines += [f"{len(wheels)} wheels:"] + [f"    {name}" for name in wheels]
    path = out / "INSTALL.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def build(out: Path, python: str, platforms: tuple[str, ...] = PLATFORMS,
          have: tuple[str, ...] = (), also: tuple[str, ...] = (),
          pip_args: tuple[str, ...] = ()) -> list[Path]:
    """Fill ``out`` with the course's wheel, the wheels of its dependencies (less ``have``) and
    of ``also`` (extra requirement strings, such as cutile_requirements), for CPython
    ``python`` ("3.12") on ``platforms``; write INSTALL.txt. Returns the wheels, sorted."""
    out.mkdir(parents=True, exist_ok=True)
    left_to_node = {canonicalize_name(name) for name in have}
    course = build_course_wheel(out)
    wanted = [str(r) for r in wheel_requirements(course)
              if canonicalize_name(r.name) not in left_to_node] + list(also)
    download(wanted, out, python, platforms, list(pip_args))
    drop(out, left_to_node)
    write_instructions(out, course, list(also), left_to_node)
    return sorted(out.glob("*.whl"))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    pip_args = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(prog="python -m tilegym_edu.wheelhouse", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("wheelhouse"),
                        help="the folder to fill (default: wheelhouse)")
    parser.add_argument("--python", default=f"{sys.version_info.major}.{sys.version_info.minor}",
                        help="the node's Python, major.minor (default: this one's)")
    parser.add_argument("--platform", action="append", dest="platforms",
                        help=f"a wheel platform tag of the node, repeatable (default: "
                             f"{', '.join(PLATFORMS)})")
    parser.add_argument("--have", nargs="+", default=[], metavar="PACKAGE",
                        help="packages the node already has: not downloaded, not kept")
    parser.add_argument("--cutile", metavar="VERSION",
                        help="add cuda-tile and its toolchain at this version (e.g. '13.4.*')")
    args = parser.parse_args(argv)
    also = tuple(cutile_requirements(args.cutile)) if args.cutile else ()
    wheels = build(args.out, args.python, tuple(args.platforms or PLATFORMS), tuple(args.have),
                   also, tuple(pip_args))
    size = sum(wheel.stat().st_size for wheel in wheels)
    print(f"{args.out}: {len(wheels)} wheels, {size / 2**20:,.0f} MiB; "
          f"install on the node: see {args.out / 'INSTALL.txt'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
