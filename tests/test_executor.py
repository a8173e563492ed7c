"""The grading executor: a deadline for the notebook, and kernels replaced when they die or
ignore the interrupt at a cell's time limit (end to end in tests/test_structure.py)."""
import time

import nbformat

from tilegym_edu import executor


def test_each_cell_gets_at_most_what_is_left_of_the_notebook_deadline():
    execute = executor.ResilientExecute(timeout=600, notebook_timeout=100)
    execute._deadline = time.monotonic() + 42
    assert 40 <= execute._get_timeout(nbformat.v4.new_code_cell("1")) <= 42
    execute._deadline = time.monotonic() - 5
    assert execute._get_timeout(nbformat.v4.new_code_cell("1")) == 1


def test_exit_descriptions_name_the_signal():
    assert executor.exit_description(-9) == "signal 9 (SIGKILL)"
    assert executor.exit_description(137) == "signal 9 (SIGKILL)"   # a shell's or sandbox's 128 + 9
    assert executor.exit_description(3) == "exit status 3"
    assert executor.exit_description(None) == "no exit status"
