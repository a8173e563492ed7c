"""Every lesson graded through nbgrader in interpreter mode, one table for all: the solution earns
every point that does not need a GPU, the blank learner notebook earns none on every cell, and each
known-wrong submission (tests/submissions/lessonNN.py) loses exactly the points it should, with a
reason that says why (and names the failing case, where its ``details`` say so). Points come from
the notebooks' own metadata. What is particular to one lesson is in its tests/test_lessonNN.py;
the same table on a GPU is tests/gpu/test_lessons_gpu.py, whose submissions are checked here too."""
import pytest

from tests.lesson_checks import (LESSONS, affected_exercises, assert_full_marks_but_gpu,
                                 assert_loses_exactly, gpu_only, gpu_submissions_of, grade_blank,
                                 graded_here, lesson_points, solution_notebook, submissions_of)

CASES = [(lesson, s) for lesson in LESSONS for s in submissions_of(lesson)]


@pytest.mark.slow
@pytest.mark.parametrize("lesson", LESSONS)
def test_solution_earns_every_point_but_the_gpu_ones(lesson, lesson_reports):
    assert_full_marks_but_gpu(lesson_reports(lesson)["solution"], lesson_points(lesson),
                              gpu_only(lesson))


@pytest.mark.slow
@pytest.mark.parametrize("lesson, submission", CASES,
                         ids=[f"{lesson[:2]}:{s.name}" for lesson, s in CASES])
def test_wrong_submission_loses_exactly_its_points(lesson, submission, lesson_reports):
    """Graded on the cells its edits can reach (the others run the solution's own code; of
    those, its interpreter_cells where it names some), packed with submissions whose edits
    reach other cells (tests/lesson_checks.py)."""
    reports = lesson_reports(lesson)
    assert_loses_exactly(reports["solution"], reports[submission.name], submission,
                         only=graded_here(lesson, submission))


@pytest.mark.slow
@pytest.mark.parametrize("lesson", LESSONS)
def test_blank_learner_notebook_scores_zero_on_every_cell(lesson, course_copy):
    report = grade_blank(lesson, course_copy)
    assert [e.exercise for e in report.exercises] == list(lesson_points(lesson))
    statuses = {e.exercise: e.status for e in report.exercises}
    assert {g for g, s in statuses.items() if s == "needs GPU"} <= gpu_only(lesson)
    assert "failed" in statuses.values()


@pytest.mark.parametrize("lesson", LESSONS)
def test_gpu_submissions_apply_and_lose_only_gpu_cells_beyond_their_own(lesson, tmp_path):
    """Each submission graded on a GPU still applies to the solution; what it loses there beyond
    its own ``loses`` needs a GPU; every cell it may lose there is one its edits reach (the GPU
    tests grade only those); and one graded there alone (not one of SUBMISSIONS, graded here:
    lesson 01's CUDA C kernels) loses only cells that need a GPU."""
    on_cpu = {s.name: s for s in submissions_of(lesson)}
    for case in gpu_submissions_of(lesson):
        submission = case.submission
        folder = submission.write(solution_notebook(lesson), tmp_path / submission.name)
        assert (folder / solution_notebook(lesson).name).exists()
        assert set(case.also_loses) | set(case.may_lose) <= gpu_only(lesson), case
        reached = set(affected_exercises(lesson, submission))
        assert {*submission.loses, *case.also_loses, *case.may_lose} <= reached, case
        if submission.name in on_cpu:
            assert on_cpu[submission.name] is submission
        else:
            assert set(submission.loses) <= gpu_only(lesson), submission


@pytest.mark.parametrize("lesson", LESSONS)
def test_a_submission_graded_on_some_cells_here_is_graded_on_every_cell_on_a_gpu(lesson):
    """A known-wrong submission whose interpreter_cells leave some of the cells its edits reach
    ungraded here loses its own cells among them, and is one of the lesson's GPU_SUBMISSIONS,
    whose test grades every cell it reaches."""
    on_gpu = {case.submission.name for case in gpu_submissions_of(lesson)}
    for submission in submissions_of(lesson):
        if submission.interpreter_cells:
            affected = set(affected_exercises(lesson, submission))
            assert set(submission.loses) <= set(submission.interpreter_cells) <= affected
            assert submission.name in on_gpu, submission.name
