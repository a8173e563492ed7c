"""A class on a real JupyterHub, end to end. The hub (DummyAuthenticator, servers as local
processes, configurable-http-proxy from the npm registry) spawns servers set up by
tilegym_edu.hub. The instructor releases lesson 00 through nbgrader's exchange; two learners log
in through the browser, fetch it in nbgrader's Assignment List, each solve one exercise in
JupyterLab and submit; the instructor collects (`tilegym-edu collect`), grades the class on two
workers (`grade-class --workers 2`) and releases the feedback; each learner fetches it in the
browser and finds their own score. `make test` (or `make test-hub`, this test alone) installs
JupyterHub and the proxy and runs it (52 s on 2 cores); without them it is skipped, with that
fix."""
import csv
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from tests.browser.conftest import ARTIFACTS, course_copy_for_lab, free_port
from tests.conftest import REPO
from tilegym_edu import hub

LESSON = "00_getting_started"
PASSWORD = "a-class-password"
API_TOKEN = os.urandom(16).hex()
INSTRUCTOR = "instructor"
#: learner -> (the solution cell they write, the graded cell it earns, its points of 8)
LEARNERS = {"ada": ("bytes_solution", "test_bytes", 2),
            "grace": ("silu_mul_solution", "test_silu_mul_correct", 4)}
PROXY = REPO / ".venv" / "hub-proxy" / "node_modules" / ".bin" / "configurable-http-proxy"
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"
BIN = Path(sys.executable).parent


def pytest_skip_reason() -> str | None:
    try:
        import jupyterhub  # noqa: F401
    except ImportError:
        return 'needs JupyterHub: `make test-hub` installs it and runs this test'
    if not PROXY.exists():
        return (f"needs configurable-http-proxy at {PROXY}: `make test-hub` installs it from the "
                "npm registry and runs this test")
    return None


pytestmark = pytest.mark.skipif(pytest_skip_reason() is not None,
                                reason=pytest_skip_reason() or "")


class Hub:
    """A running hub: its URL, the course root and the environment of the instructor's shell."""

    def __init__(self, url: str, base: Path, course: Path, shared: Path):
        self.url, self.base, self.course = url, base, course
        self.instructor_env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
                               "JUPYTER_CONFIG_PATH": str(shared),
                               "TILEGYM_COURSE_ROOT": str(course)}

    def home(self, user: str) -> Path:
        return self.base / "home" / user

    def instructor(self, *command: str) -> str:
        """Run a command as the instructor does in their server's terminal, at the course root;
        its output."""
        run = subprocess.run(command, cwd=self.course, env=self.instructor_env,
                             capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, f"{' '.join(command)} failed:\n{run.stdout}\n{run.stderr}"
        return run.stdout + run.stderr


def write_hub_config(base: Path, course: Path, shared: Path, port: int) -> Path:
    config = base / "jupyterhub_config.py"
    config.write_text(f"""\
from tilegym_edu import hub
c = get_config()  # noqa: F821
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {free_port()}
c.ConfigurableHTTPProxy.command = [{str(PROXY)!r}]
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{free_port()}"
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {PASSWORD!r}
c.Authenticator.allowed_users = {{{", ".join(repr(u) for u in [INSTRUCTOR, *LEARNERS])}}}
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = {str(base / "home" / "{username}")!r}
c.Spawner.cmd = [{str(BIN / "jupyterhub-singleuser")!r}]
c.Spawner.args = {["--allow-root"] if os.geteuid() == 0 else []!r}
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
c.Spawner.pre_spawn_hook = hub.pre_spawn_hook({{{INSTRUCTOR!r}}}, {str(course)!r}, {str(shared)!r})
c.JupyterHub.db_url = "sqlite:///{base / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = {str(base / "cookie_secret")!r}
c.JupyterHub.pid_file = {str(base / "jupyterhub.pid")!r}
# the test's token, allowed to start servers (it starts the learners' at once, before they log
# in; the hub answers at once instead of waiting up to 10 s for each spawn)
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 0}}
c.JupyterHub.services = [{{"name": "class-test", "api_token": {API_TOKEN!r}}}]
c.JupyterHub.load_roles = [{{"name": "class-test", "scopes": ["servers"],
                             "services": ["class-test"]}}]
""")
    return config


def start_servers(url: str, users) -> None:
    """Ask the hub to start each user's server (the spawns then run at the same time)."""
    for user in users:
        request = urllib.request.Request(f"{url}hub/api/users/{user}/server", method="POST",
                                         headers={"Authorization": f"token {API_TOKEN}"})
        urllib.request.urlopen(request, timeout=30).close()


@pytest.fixture(scope="module")
def class_hub(tmp_path_factory):
    base = tmp_path_factory.mktemp("hub")
    course = course_copy_for_lab(tmp_path_factory)
    for user in (INSTRUCTOR, *LEARNERS):
        (base / "home" / user).mkdir(parents=True)
    shared = hub.write_nbgrader_config(base / "etc", base / "exchange")
    port = free_port()
    config = write_hub_config(base, course, shared, port)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log = ARTIFACTS / "jupyterhub.log"
    proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=base,
                            env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"},
                            stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    the_class = Hub(url, base, course, shared)
    # the instructor prepares the lesson while the hub starts, and releases it while the
    # learners' servers start
    the_class.instructor(str(BIN / "nbgrader"), "generate_assignment", LESSON, "--force",
                         "--create")
    deadline = time.monotonic() + 90
    while True:
        try:
            urllib.request.urlopen(f"{url}hub/api", timeout=2).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"JupyterHub did not start; its log:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)
    start_servers(url, LEARNERS)
    the_class.instructor(str(BIN / "nbgrader"), "release_assignment", LESSON)
    yield the_class
    proc.terminate()         # stops the single-user servers too (cleanup_servers)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def log_in(browser, class_hub: Hub, user: str):
    """A page of ``user``'s JupyterLab on the hub, logged in through the hub's login form."""
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    page.goto(f"{class_hub.url}hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", PASSWORD)
    page.click("#login_submit")
    page.wait_for_selector(".lm-MenuBar-content", timeout=180_000)
    return page


def open_assignment_list(page) -> None:
    page.locator(".lm-MenuBar-content").get_by_text("Nbgrader").click()
    page.locator(".lm-Menu").get_by_text("Assignment List").click()
    page.wait_for_selector("text=Submitted assignments", timeout=60_000)


def solution_text(grade_id: str) -> str:
    """The course's solution of cell ``grade_id`` of lesson 00, as a learner would type it."""
    notebook = nbformat.read(REPO / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
    cell = next(c for c in notebook.cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    return "\n".join(line for line in cell.source.split("\n") if "### " not in line)


def first_def(source: str) -> str:
    """``def name`` of the first function a cell defines: where to find the cell."""
    return next(line for line in source.split("\n") if line.startswith("def ")).split("(")[0]


def a_line_only_in(source: str, released: str) -> str:
    """A line of ``source`` (without quotes or backslashes, which the notebook's JSON would
    escape) that the released notebook does not hold: once it is in the file, the save landed."""
    return next(line.strip() for line in source.split("\n")
                if line.strip() and not set(line) & set("\"'\\") and line.strip() not in released)


def write_cell(page, marker: str, source: str) -> None:
    """Replace the source of the notebook's first cell containing ``marker`` and save."""
    page.locator(f"{PANEL} .jp-Cell").first.click()
    page.keyboard.press("Escape")
    for _ in range(200):
        if marker in page.locator(f"{PANEL} .jp-Cell.jp-mod-active").inner_text():
            break
        page.keyboard.press("j")
    else:
        raise AssertionError(f"no cell holds {marker!r}")
    page.keyboard.press("Enter")
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(source)
    page.keyboard.press("Escape")
    page.keyboard.press("Control+s")


def wait_for(condition, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_a_class_on_jupyterhub_from_release_to_feedback(browser, class_hub):
    pages = {}
    for learner, (solution_id, _, _) in LEARNERS.items():
        page = pages[learner] = log_in(browser, class_hub, learner)
        menu = page.locator(".lm-MenuBar-content")
        menu.get_by_text("Nbgrader").click()
        offered = page.locator(".lm-Menu").inner_text()
        assert "Assignment List" in offered and "Formgrader" not in offered, offered
        page.keyboard.press("Escape")
        open_assignment_list(page)
        page.get_by_role("button", name="Fetch", exact=True).click()
        notebook = class_hub.home(learner) / LESSON / f"{LESSON}.ipynb"
        wait_for(notebook.exists, f"{learner}'s fetched lesson")
        page.goto(f"{class_hub.url}user/{learner}/lab/tree/{LESSON}/{LESSON}.ipynb?reset")
        page.wait_for_selector(f"{PANEL} .jp-Cell", timeout=90_000)
        source = solution_text(solution_id)
        saved = a_line_only_in(source, notebook.read_text())
        write_cell(page, first_def(source), source)
        wait_for(lambda: saved in notebook.read_text(), f"{learner}'s saved notebook")
        open_assignment_list(page)
        page.get_by_role("button", name="Submit", exact=True).click()
        page.get_by_role("button", name="Fetch Feedback").wait_for(timeout=60_000)
        page.screenshot(path=ARTIFACTS / f"hub-{learner}-submitted.png")

    said = class_hub.instructor(str(BIN / "tilegym-edu"), "collect", LESSON)
    assert f"collected {len(LEARNERS)} submissions" in said, said
    grades = class_hub.base / "grades.csv"
    class_hub.instructor(str(BIN / "tilegym-edu"), "grade-class", LESSON,
                         ".grading/collected", "--workers", "2", "--csv", str(grades))
    rows = {row["student"]: row for row in csv.DictReader(grades.open())}
    for learner, (_, exercise, points) in LEARNERS.items():
        assert rows[learner]["points"] == str(points), rows[learner]
        assert rows[learner][exercise] == str(points), rows[learner]
    class_hub.instructor(str(BIN / "nbgrader"), "release_feedback", LESSON)

    for learner, (_, _, points) in LEARNERS.items():
        page = pages[learner]
        open_assignment_list(page)
        page.get_by_role("button", name="Fetch Feedback").click()
        page.get_by_text("view feedback").wait_for(timeout=60_000)
        page.screenshot(path=ARTIFACTS / f"hub-{learner}-feedback.png")
        feedback = list((class_hub.home(learner) / LESSON / "feedback").glob(f"*/{LESSON}.html"))
        assert len(feedback) == 1, feedback
        assert f"Score: {points:.1f} / 8.0" in feedback[0].read_text()
        page.context.close()
    shutil.copy(grades, ARTIFACTS / "hub-grades.csv")
