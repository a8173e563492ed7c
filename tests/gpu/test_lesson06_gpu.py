"""Lesson 06 graded end to end on a GPU: the solution earns every point (the three fused kernels
near copy bandwidth, the model on the learner's kernels at least as fast as PyTorch eager), the
blank learner notebook earns none, and a PyTorch SwiGLU is refused in the timed cells too."""
import nbformat
import pytest

from tests.submissions.lesson06 import SUBMISSIONS
from tilegym_edu import course

LESSON = "06_capstone"
# the timed cells that call swiglu: its own bandwidth check and the model's prefill
SWIGLU_SPEED_CELLS = {"test_swiglu_bandwidth", "test_model_vs_eager"}

pytestmark = pytest.mark.usefixtures("fresh_tuning_cache")


@pytest.fixture(scope="module")
def solution(course_copy) -> course.GradeReport:
    report = course.grade(LESSON, course_copy / "solutions" / LESSON, root=course_copy,
                          student="gpu_solution06")
    print(report.format_table())
    print_gpu_cells(course_copy, "gpu_solution06")
    return report


def print_gpu_cells(root, student: str) -> None:
    """The printed output of the graded notebook's GPU cells (tokens/s, profiles, the ratios
    measured against each threshold): the record of the run."""
    path = root / ".grading" / "autograded" / student / LESSON / f"{LESSON}.ipynb"
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "code" and "require_gpu" in cell.source:
            print(f"--- {cell.metadata.get('nbgrader', {}).get('grade_id', 'cell')}")
            print("".join(o.get("text", "") for o in cell.get("outputs", [])
                          if o.get("output_type") == "stream"))


def test_solution_earns_every_point(solution):
    assert solution.points == solution.max_points, solution.format_table()


def test_blank_learner_notebook_scores_zero(course_copy):
    blank = course.grade(LESSON, root=course_copy, student="gpu_blank06")
    print(blank.format_table())
    assert all(e.points == 0 for e in blank.exercises), blank.format_table()


def test_library_shortcut_loses_every_cell_that_calls_it(course_copy, solution, tmp_path):
    [shortcut] = [s for s in SUBMISSIONS if s.name == "library_shortcut"]
    folder = shortcut.write(course_copy / "solutions" / LESSON / f"{LESSON}.ipynb", tmp_path)
    report = course.grade(LESSON, folder, root=course_copy, student="gpu_shortcut06")
    print(report.format_table())
    lost = {e.exercise for e in report.exercises if e.points == 0}
    assert set(shortcut.loses) | SWIGLU_SPEED_CELLS == lost, report.format_table()


def test_gpu_ms_by_op_puts_every_kernel_under_its_operation():
    """The profile split of section 6: Triton's kernels (launched through the driver) and
    PyTorch's both land under the operation that launched them, and the parts add up."""
    import torch

    from tilegym_edu.reference import llama
    cfg = llama.LlamaConfig(dim=256, n_layers=2, n_heads=4, n_kv_heads=2, hidden=512,
                            vocab=1000, max_seq=256)
    model = llama.Llama(cfg, torch.float16)
    tokens = llama.random_tokens(cfg, 1, 256, torch.Generator().manual_seed(0))
    operations = ("matmul", "attention", "rmsnorm", "rope_", "swiglu")
    for ops in (llama.TORCH_OPS, llama.reference_ops(small_blocks=True)):
        split = llama.gpu_ms_by_op(lambda: model(tokens, llama.profiled(ops)))
        print(split)
        assert all(split[name] > 0 for name in operations), split
        assert 0 < split["other"] < split["matmul"], split
        assert abs(sum(v for k, v in split.items() if k != "total") - split["total"]) < 1e-9
