"""Every speed cell of every lesson, run on the GPU with the lesson's own solution: each must
pass, and prints what it measured (the ratio and its threshold). The whole notebooks are
graded in tests/gpu/test_lessons_gpu.py; this runs only the cells that time something, so
that a change to how speed is measured can be checked on all of them in minutes."""
import io

import pytest

from tests.adversaries import _run_cell, lesson_namespace
from tests.adversaries import test_cell_source as cell_source
from tests.lesson_checks import skip_unless_it_runs

SPEED_CELLS = [
    ("00_getting_started", "test_silu_mul_bandwidth"),
    ("02_tiled_matmul", "test_tiled_vs_naive"),
    ("02_tiled_matmul", "test_tiled_vs_cublas"),
    ("03_software_pipelining", "test_pipelined_vs_unpipelined"),
    ("03_software_pipelining", "test_pipelined_vs_cublas"),
    ("03_software_pipelining", "test_persistent_vs_cublas"),
    ("03_software_pipelining", "test_split_k_vs_cublas"),
    ("04_flash_attention", "test_softmax_bandwidth"),
    ("04_flash_attention", "test_flash_vs_naive"),
    ("04_flash_attention", "test_flash_vs_best_sdpa"),
    ("04_flash_attention", "test_backward_vs_best_sdpa"),
    ("05_convolution", "test_conv2d_vs_im2col"),
    ("05_convolution", "test_conv2d_vs_cudnn"),
    ("06_capstone", "test_rmsnorm_bandwidth"),
    ("06_capstone", "test_rope_bandwidth"),
    ("06_capstone", "test_swiglu_bandwidth"),
    ("06_capstone", "test_model_vs_eager"),
    ("07_cutile", "test_silu_mul_bandwidth"),
    ("07_cutile", "test_matmul_speed"),
    ("07_cutile", "test_persistent_speed"),
    ("07_cutile", "test_flash_attention_speed"),
]


@pytest.mark.parametrize("lesson, cell", SPEED_CELLS,
                         ids=[f"{lesson[:2]}:{c}" for lesson, c in SPEED_CELLS])
def test_the_solution_passes_every_speed_cell(lesson, cell):
    skip_unless_it_runs(lesson)
    namespace = dict(lesson_namespace(lesson))
    output = io.StringIO()
    try:
        _run_cell(cell_source(lesson, cell), f"{lesson}:{cell}", namespace, stdout=output)
    finally:
        print(output.getvalue())          # what it measured, in the pytest log (-rA)
