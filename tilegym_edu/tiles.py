"""Which output tile a program computes: the grouped ordering of lesson 02, written once.

Every tiled kernel of the course (matmul, pipelined and persistent matmul, implicit-GEMM
convolution) numbers its output tiles the same way, so they all call :func:`grouped_tile`
from inside the kernel (Triton inlines it). Its ``.fn`` is the plain Python function under
the decorator: ``grouped_tile.fn(pid, num_pid_m, num_pid_n, group_m)`` runs on ints, which is
how lesson 02 prints the launch order. Learner code may import this module.
"""
import triton
import triton.language as tl


@triton.jit
def grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n): the tile row and column that program ``pid`` computes, of a grid of
    num_pid_m x num_pid_n output tiles numbered in groups of GROUP_M tile rows. Programs
    0, 1, 2, ... go down one group's GROUP_M rows before moving one column right, so the
    programs that run at the same time share rows of a and columns of b in L2."""
    num_pid_in_group = GROUP_M * num_pid_n              # programs per group of GROUP_M tile rows
    first_pid_m = (pid // num_pid_in_group) * GROUP_M   # first tile row of this program's group
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)   # the last group may be shorter
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n
