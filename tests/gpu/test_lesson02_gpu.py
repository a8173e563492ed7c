"""Lesson 02 graded end to end on a GPU: the solution earns every point, including both speed
cells; the blank learner notebook earns none."""
from tilegym_edu import course

LESSON = "02_tiled_matmul"


def test_lesson02_graded_end_to_end(course_copy):
    solution = course.grade(LESSON, course_copy / "solutions" / LESSON, root=course_copy,
                            student="gpu_solution")
    print(solution.format_table())
    assert solution.points == solution.max_points, solution.format_table()
    blank = course.grade(LESSON, root=course_copy, student="gpu_blank")
    print(blank.format_table())
    assert all(e.points == 0 for e in blank.exercises), blank.format_table()
