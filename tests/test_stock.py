"""The stock nbgrader commands, configured as nbgrader_config.py configures them, grade what
tilegym-edu grade does (tilegym_edu.stock): a notebook that solves nothing cannot earn points by
replacing the grader's checks, a deleted test cell scores 0, and the worked solution keeps every
point the interpreter can grade."""
import nbformat
import pytest
from nbgrader.api import Gradebook
from nbgrader.apps import NbGraderAPI
from nbgrader.preprocessors import OverwriteCells
from traitlets.config import Config

from tilegym_edu import build, course
from tilegym_edu.stock import PrepareSubmission

pytestmark = pytest.mark.beside

LESSON = "00_getting_started"
#: the lesson's graded cells and their points; test_silu_mul_bandwidth needs a GPU
POINTS = {"test_silu_mul_correct": 4, "test_bytes": 2, "test_silu_mul_bandwidth": 2}


def stock_api(root) -> NbGraderAPI:
    """nbgrader's API as the stock commands see the course: nbgrader_config.py's configure."""
    course.nbgrader_api(root)              # puts this environment's executables on PATH
    return NbGraderAPI(config=course.configure(Config(), root))


def hand_in(root, student: str, notebook) -> None:
    folder = root / ".grading" / "submitted" / student / LESSON
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, folder / f"{LESSON}.ipynb")


def scores(root, student: str) -> dict[str, float]:
    with Gradebook(course.gradebook_url(root)) as gradebook:
        return {grade_id: gradebook.find_grade(grade_id, LESSON, LESSON, student).score
                for grade_id in POINTS}


def with_cell(notebook, grade_id: str, change) -> nbformat.NotebookNode:
    """``notebook`` with the cell of ``grade_id`` changed by ``change`` (its source -> new
    source, or None to delete the cell)."""
    notebook = nbformat.from_dict(notebook)
    cells = []
    for cell in notebook.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            source = change(cell.source)
            if source is None:
                continue
            cell.source = source
        cells.append(cell)
    notebook.cells = cells
    return notebook


def test_the_course_config_prepares_submissions_and_tilegym_grading_does_not(tmp_path):
    stock = course.configure(Config(), tmp_path)
    sanitize = stock.Autograde.sanitize_preprocessors
    assert sanitize[sanitize.index(OverwriteCells) + 1] is PrepareSubmission
    assert stock.PrepareSubmission.course_root == str(tmp_path)
    own = course.nbgrader_api(tmp_path).config     # autograde.grade prepares its notebooks
    assert PrepareSubmission not in own.Autograde.sanitize_preprocessors


@pytest.mark.slow
def test_stock_autograde_grades_the_prepared_notebook(course_copy):
    build.release(LESSON, course_copy)
    blank = nbformat.read(course_copy / "notebooks" / LESSON / f"{LESSON}.ipynb", as_version=4)
    solution = nbformat.read(course_copy / "solutions" / LESSON / f"{LESSON}.ipynb",
                             as_version=4)
    forger = with_cell(blank, "silu_mul_solution", lambda source: source + (
        "\ngrading.assert_correct = lambda *a, **k: None"
        "\ngrading.require_gpu = lambda *a, **k: None"
        "\ngrading.assert_bandwidth_fraction = lambda *a, **k: None\n"))
    deleter = with_cell(solution, "test_bytes", lambda source: None)
    submissions = {"stock_solution": solution, "stock_forger": forger,
                   "stock_deleter": deleter}
    for student, notebook in submissions.items():
        hand_in(course_copy, student, notebook)
    api = stock_api(course_copy)
    for student in submissions:
        result = api.autograde(LESSON, student, force=True, create=True)
        assert result["success"], result["log"]
    # without a GPU the bandwidth cell scores 0 (needs GPU) for everyone
    assert scores(course_copy, "stock_solution") == {
        "test_silu_mul_correct": 4, "test_bytes": 2, "test_silu_mul_bandwidth": 0}
    assert scores(course_copy, "stock_forger") == {
        "test_silu_mul_correct": 0, "test_bytes": 0, "test_silu_mul_bandwidth": 0}
    assert scores(course_copy, "stock_deleter") == {
        "test_silu_mul_correct": 4, "test_bytes": 0, "test_silu_mul_bandwidth": 0}
    graded = nbformat.read(course_copy / ".grading" / "autograded" / "stock_forger" / LESSON
                           / f"{LESSON}.ipynb", as_version=4)
    [refused] = [c for c in graded.cells
                 if c.metadata.get("nbgrader", {}).get("grade_id") == "silu_mul_solution"]
    assert "SubmissionRefused" in str(refused.outputs)
