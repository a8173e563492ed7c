"""Which output tile a program computes: the grouped ordering of lesson 02, written once.

Every tiled kernel of the course (matmul, pipelined and persistent matmul, implicit-GEMM
convolution) numbers its output tiles the same way, so they all call :func:`grouped_tile`
from inside the kernel (Triton inlines it). Its ``.fn`` is the plain Python function under
the decorator: ``grouped_tile.fn(pid, num_pid_m, num_pid_n, group_m)`` runs on ints, which is
how lesson 02 prints the launch order. Learner code may import this module.

:func:`cdiv` and :func:`next_power_of_2` are the host's side of tile arithmetic (grids, block
sizes) in plain Python: ``triton.cdiv`` and ``triton.next_power_of_2`` are constexpr functions,
whose calls from host code cost microseconds each (their arguments are unwrapped first), and a
launch wrapper may make several per call.
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


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for ints, b > 0: how many tiles of b cover a (triton.cdiv's value)."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n, and 0 for n <= 0: triton.next_power_of_2's value (for n up
    to 2**64)."""
    return 1 << (n - 1).bit_length() if n > 0 else 0
