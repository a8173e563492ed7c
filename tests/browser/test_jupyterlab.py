"""The course in a real browser, as a learner and as an instructor uses it: every lesson runs
cell by cell in JupyterLab (interpreter mode), showing only the errors it is meant to show;
nbgrader's Validate button works; the learner's JupyterLab hides the instructor tools and the
instructor's shows them. Screenshots go to test-artifacts/browser/."""
import nbformat
import pytest

from tests.browser.conftest import ARTIFACTS
from tests.browser.jupyterlab import PANEL, open_notebook, run_every_cell, unexpected_errors
from tests.conftest import REPO

LESSONS = sorted(p.name for p in (REPO / "notebooks").iterdir() if p.is_dir())


@pytest.fixture
def page(browser, request):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    yield page
    context.close()
    for name in ("learner_lab", "instructor_lab"):
        if name in request.fixturenames:
            request.getfixturevalue(name).shut_down_kernels()


@pytest.mark.parametrize("lesson", LESSONS)
def test_lesson_runs_cell_by_cell_in_jupyterlab(learner_lab, page, lesson):
    open_notebook(page, learner_lab.notebook_url(f"{lesson}/{lesson}.ipynb"))
    page.screenshot(path=ARTIFACTS / f"{lesson}-opened.png")

    def keep_evidence(run, cell):
        if any("tilegym_edu: interpreter mode" in t for t in run.texts):
            cell.screenshot(path=ARTIFACTS / f"{lesson}-banner.png")
        if run.images:
            cell.screenshot(path=ARTIFACTS / f"{lesson}-figure-cell-{run.index}.png")
        if any("NotImplementedError" in e for e in run.errors):
            cell.screenshot(path=ARTIFACTS / f"{lesson}-exercise-cell-{run.index}.png")

    notebook = nbformat.read(learner_lab.root / "notebooks" / lesson / f"{lesson}.ipynb",
                             as_version=4)
    runs = run_every_cell(page, len(notebook.cells), keep_evidence)
    page.screenshot(path=ARTIFACTS / f"{lesson}-ran.png")
    assert runs and all(r.prompt for r in runs), "a code cell did not run"
    assert not unexpected_errors(runs), "\n".join(unexpected_errors(runs))
    assert any("NotImplementedError" in e for r in runs for e in r.errors), \
        "the learner notebook's exercises should raise NotImplementedError"
    assert any("tilegym_edu: interpreter mode" in t for t in runs[0].texts), \
        "the first code cell should show the mode banner"
    if lesson == "00_getting_started":
        assert sum(r.images for r in runs) >= 1, "the roofline figure did not render"


def test_validate_button_reports_the_unfinished_exercises(learner_lab, page):
    lesson = "00_getting_started"
    open_notebook(page, learner_lab.notebook_url(f"{lesson}/{lesson}.ipynb"))
    page.locator(f"{PANEL} .validate-button").click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=600_000)
    text = dialog.inner_text()
    page.screenshot(path=ARTIFACTS / "validate-dialog.png")
    assert "Validation Results" in text
    assert "NotImplementedError" in text or "failed" in text.lower(), text[:2000]


def test_learner_lab_hides_the_instructor_tools(learner_lab, page):
    open_notebook(page, learner_lab.notebook_url("00_getting_started/00_getting_started.ipynb"))
    assert page.locator(f"{PANEL} .validate-button").is_visible()
    menu_bar = page.locator(".lm-MenuBar-content").inner_text()
    assert "Nbgrader" not in menu_bar, menu_bar
    assert page.get_by_text("Create Assignment").count() == 0
    assert page.get_by_text(
        "Would you like to get notified about official Jupyter news?").count() == 0


def test_instructor_lab_shows_the_formgrader(instructor_lab, page):
    open_notebook(page, instructor_lab.notebook_url(
        "solutions/00_getting_started/00_getting_started.ipynb"))
    page.locator(".lm-MenuBar-content").get_by_text("Nbgrader").click()
    assert page.get_by_text("Formgrader").first.is_visible()
    page.screenshot(path=ARTIFACTS / "instructor-menu.png")
