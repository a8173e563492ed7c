"""Every lesson graded end to end on a GPU, one table for all: the solution earns every point (the
speed cells, lesson 01's CUDA C kernel built with load_inline, and lesson 03's persistent cells,
which need compute capability 9.0, included), the blank learner notebook earns none, and each
submission of a lesson's GPU_SUBMISSIONS (tests/submissions/lessonNN.py) loses there exactly the
cells it should: lesson 01's wrong CUDA C kernels their CUDA cell, lesson 03's search spaces without
pipelining its speed cells, lessons 04-06's library calls the timed cells too, and lesson 07's wrong
cuTile kernels their cells (lesson 07 is skipped where cuda.tile is not installed). The submissions
are graded as tests/test_lessons.py grades them, in packed groups on the cells their edits can reach
(submissions_on_gpu). Points come from the notebooks' own metadata, and the totals must be
TOTAL_POINTS. The same table without a GPU is tests/test_lessons.py.

Each lesson is graded with a tuning cache and a CUDA C build folder of its own, fresh (the grading
kernels inherit both): every submission tunes from scratch, so a cached winner of the solution
cannot stand in for a submission's own search; every build is real, and no lock file left by an
interrupted build elsewhere can hang one. Each grade table is printed with its slowest cells, and so
is what the solution's GPU cells printed (what they measured against each threshold): the record of
the run."""
import nbformat
import pytest

from tests.conftest import tuning_cache_in
from tests.lesson_checks import (LESSONS, affected_exercises, assert_full_marks_but_gpu,
                                 assert_loses_exactly, gpu_submissions_of, lesson_points,
                                 packed_gradings, skip_unless_it_runs)
from tilegym_edu import autograde, grade_report

#: each lesson's points, as the H200 runs recorded them (docs/results/h200.md; lesson 07's in
#: runs p and r of 2026-12-02)
TOTAL_POINTS = {"00_getting_started": 8, "01_naive_matmul": 9, "02_tiled_matmul": 18,
                "03_software_pipelining": 25, "04_flash_attention": 34, "05_convolution": 27,
                "06_capstone": 22, "07_cutile": 30}

CASES = [(lesson, case) for lesson in LESSONS for case in gpu_submissions_of(lesson)]


@pytest.fixture(scope="session")
def grade_on_gpu(course_copy, tmp_path_factory):
    """grade_on_gpu(lesson, student, folder=None): ``folder`` (None: the learner notebook) graded
    in the lesson's own tuning cache and CUDA C build folder; its grade table printed."""
    folders = {}

    def grade(lesson: str, student: str, folder=None,
              exercises=()) -> grade_report.GradeReport:
        if lesson not in folders:
            folders[lesson] = [tmp_path_factory.mktemp(f"l{lesson[:2]}_{name}")
                               for name in ("tilegym_cache", "torch_extensions")]
        cache, extensions = folders[lesson]
        with tuning_cache_in(cache), pytest.MonkeyPatch.context() as patch:
            patch.setenv("TORCH_EXTENSIONS_DIR", str(extensions))
            report = autograde.grade(lesson, folder, root=course_copy, student=student,
                                     exercises=exercises)
        print(report.format_table())
        print(report.format_profile())
        return report
    return grade


@pytest.fixture(scope="session")
def submissions_on_gpu(course_copy, grade_on_gpu, tmp_path_factory):
    """submissions_on_gpu(lesson): {submission name: the grade report that holds its cells}
    for the lesson's GPU_SUBMISSIONS, graded once a session in packed groups, as
    tests/test_lessons.py grades them without a GPU: one notebook per group with every
    member's edits, graded on the exercises those edits can reach only (every other cell would
    run the solution's code again)."""
    graded = {}

    def reports(lesson: str) -> dict[str, grade_report.GradeReport]:
        if lesson not in graded:
            graded[lesson] = {}
            submissions = [case.submission for case in gpu_submissions_of(lesson)]
            for members, folder, student, exercises in packed_gradings(
                    lesson, submissions, course_copy, tmp_path_factory, f"gpu{lesson[:2]}_",
                    cells=affected_exercises):
                report = grade_on_gpu(lesson, student, folder, exercises)
                graded[lesson].update({m.name: report for m in members})
        return graded[lesson]
    return reports


@pytest.fixture(scope="session")
def solution_on_gpu(course_copy, grade_on_gpu):
    """solution_on_gpu(lesson): the grade report of the lesson's solution, graded once a session;
    what its GPU cells printed is printed too."""
    graded = {}

    def solution(lesson: str) -> grade_report.GradeReport:
        if lesson not in graded:
            student = f"gpu{lesson[:2]}_solution"
            graded[lesson] = grade_on_gpu(lesson, student, course_copy / "solutions" / lesson)
            print_gpu_cells(course_copy, lesson, student)
        return graded[lesson]
    return solution


def print_gpu_cells(root, lesson: str, student: str) -> None:
    """The printed output of the graded notebook's GPU cells (tokens/s, profiles, the ratios
    measured against each threshold)."""
    path = root / ".grading" / "autograded" / student / lesson / f"{lesson}.ipynb"
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "code" and "require_gpu" in cell.source:
            print(f"--- {cell.metadata.get('nbgrader', {}).get('grade_id', 'cell')}")
            print("".join(o.get("text", "") for o in cell.get("outputs", [])
                          if o.get("output_type") == "stream"))


@pytest.mark.parametrize("lesson", LESSONS)
def test_solution_earns_every_point(lesson, solution_on_gpu):
    skip_unless_it_runs(lesson)
    report = solution_on_gpu(lesson)
    assert report.points == report.max_points == TOTAL_POINTS[lesson], report.format_table()
    assert_full_marks_but_gpu(report, lesson_points(lesson), set())


@pytest.mark.parametrize("lesson", LESSONS)
def test_blank_learner_notebook_scores_zero(lesson, grade_on_gpu):
    skip_unless_it_runs(lesson)
    blank = grade_on_gpu(lesson, f"gpu{lesson[:2]}_blank")
    assert ([(e.exercise, e.points) for e in blank.exercises]
            == [(name, 0) for name in lesson_points(lesson)]), blank.format_table()


@pytest.mark.parametrize("lesson, case", CASES,
                         ids=[f"{lesson[:2]}:{case.submission.name}" for lesson, case in CASES])
def test_wrong_submission_loses_exactly_its_cells(lesson, case, solution_on_gpu,
                                                  submissions_on_gpu):
    skip_unless_it_runs(lesson)
    submission = case.submission
    assert_loses_exactly(solution_on_gpu(lesson), submissions_on_gpu(lesson)[submission.name],
                         submission, also=case.also_loses, may=case.may_lose,
                         only=affected_exercises(lesson, submission))


@pytest.mark.usefixtures("fresh_tuning_cache")
def test_gpu_ms_by_op_puts_every_kernel_under_its_operation():
    """Lesson 06's profile split (section 6): Triton's kernels (launched through the driver) and
    PyTorch's both land under the operation that launched them, and the parts add up."""
    import torch

    from tilegym_edu.reference import llama, llama_kernels, llama_profile
    cfg = llama.LlamaConfig(dim=256, n_layers=2, n_heads=4, n_kv_heads=2, hidden=512,
                            vocab=1000, max_seq=256)
    model = llama.Llama(cfg, torch.float16)
    tokens = llama.random_tokens(cfg, 1, 256, torch.Generator().manual_seed(0))
    # the reference ops fuse the residual add into the norm after it, and SwiGLU into the MLP's
    # first matmul
    for ops, operations in (
            (llama.TORCH_OPS, ("matmul", "attention", "rmsnorm", "rope_", "swiglu")),
            (llama_kernels.reference_ops(small_blocks=True),
             ("matmul", "attention", "rmsnorm", "rope_", "add_rmsnorm", "matmul_swiglu"))):
        split = llama_profile.gpu_ms_by_op(lambda: model(tokens, llama_profile.profiled(ops)))
        print(split)
        assert all(split[name] > 0 for name in operations), split
        assert 0 < split["other"] < split["matmul"], split
        assert abs(sum(v for k, v in split.items() if k != "total") - split["total"]) < 1e-9
