"""Browser tests: JupyterLab started the way `make lab` starts it, driven in Debian's headless
Chromium by Playwright (which never downloads a browser of its own here). Skipped, with the
reason and the fix, where Chromium or Playwright is missing."""
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO
from tilegym_edu import cli

CHROMIUM = Path(os.environ.get("TILEGYM_CHROMIUM", "/usr/bin/chromium"))
#: Chromium flags for a closed network and a root user: no sandbox (root), no background
#: connections, no first-run work
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
ARTIFACTS = REPO / "test-artifacts" / "browser"


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).resolve().parent
    reason = None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        reason = "needs Playwright: `make test` installs it (pip install playwright)"
    if not CHROMIUM.exists():
        reason = (f"needs Debian's Chromium at {CHROMIUM}: `make test` installs it as root; "
                  "otherwise `sudo apt-get install chromium`")
    if reason:
        for item in items:
            if here in Path(item.fspath).resolve().parents:
                item.add_marker(pytest.mark.skip(reason=reason))


class Lab:
    """A running JupyterLab: its base URL and token."""

    def __init__(self, url: str, token: str, root: Path):
        self.url, self.token, self.root = url, token, root

    def notebook_url(self, relative: str) -> str:
        """The notebook alone in a fresh workspace (``reset``: no tabs from earlier tests)."""
        return f"{self.url}lab/tree/{relative}?reset&token={self.token}"

    def shut_down_kernels(self) -> None:
        """Stop every kernel, as closing a notebook and its kernel would: each lesson's kernel
        holds PyTorch in memory."""
        with urllib.request.urlopen(f"{self.url}api/sessions?token={self.token}") as response:
            sessions = json.load(response)
        for session in sessions:
            request = urllib.request.Request(
                f"{self.url}api/sessions/{session['id']}?token={self.token}", method="DELETE")
            urllib.request.urlopen(request).close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_lab(root: Path, instructor: bool, log: Path) -> tuple[subprocess.Popen, Lab]:
    """`tilegym-edu lab` as `make lab` runs it (from the course root), plus a fixed port and
    token so the test can connect, no browser, and --allow-root where the tests run as root."""
    port, token = free_port(), os.urandom(16).hex()
    extra = [f"--ServerApp.port={port}", f"--IdentityProvider.token={token}", "--no-browser"]
    if os.geteuid() == 0:
        extra.append("--allow-root")
    command = cli.lab_command(root, extra, instructor=instructor)
    proc = subprocess.Popen(command, cwd=root, env=cli.lab_environment(instructor),
                            stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}api/status?token={token}", timeout=2)
            return proc, Lab(url, token, root)
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.5)
    proc.terminate()
    raise RuntimeError(f"JupyterLab did not start; its log:\n{log.read_text()[-3000:]}")


def course_copy_for_lab(tmp_path_factory) -> Path:
    """The course as a learner has it (notebooks/, solutions/ for the instructor, the nbgrader
    config), in a temporary folder: running cells changes notebooks, never the repository's."""
    root = tmp_path_factory.mktemp("lab_course")
    for folder in ("notebooks", "solutions"):
        shutil.copytree(REPO / folder, root / folder)
    shutil.copy(REPO / "nbgrader_config.py", root / "nbgrader_config.py")
    return root


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def _lab_fixture(tmp_path_factory, instructor: bool):
    root = course_copy_for_lab(tmp_path_factory)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    name = "instructor" if instructor else "learner"
    proc, lab = start_lab(root, instructor, ARTIFACTS / f"jupyterlab-{name}.log")
    yield lab
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="session")
def learner_lab(tmp_path_factory):
    yield from _lab_fixture(tmp_path_factory, instructor=False)


@pytest.fixture(scope="session")
def instructor_lab(tmp_path_factory):
    yield from _lab_fixture(tmp_path_factory, instructor=True)
