"""Submissions of lesson 01 (01_naive_matmul) and the points each must lose.

SUBMISSIONS are graded in interpreter mode (tests/test_lessons.py). CUDA_SUBMISSIONS are wrong
CUDA C kernels: their cell is graded only on a GPU (tests/gpu/test_lessons_gpu.py)."""
from tests.submissions import OnGpu, Submission

CUDA = "cuda_kernel_solution"
KERNEL = "naive_matmul_solution"
TRAFFIC = "naive_traffic_solution"
CUDA_CORRECT = "test_cuda_kernel"
CORRECT = "test_naive_matmul_correct"
TRAFFIC_TEST = "test_naive_traffic"

SUBMISSIONS = [
    Submission("b_strides_swapped",   # right for square contiguous inputs, wrong for any other
               {KERNEL: ("b = tl.load(b_ptr + offs_k * stride_bk + n * stride_bn,",
                         "b = tl.load(b_ptr + offs_k * stride_bn + n * stride_bk,")},
               loses=(CORRECT,), reason="error above the tolerance",
               details={CORRECT: ("case (M=", "seed", "first bad element")}),
    Submission("k_tail_dropped",      # the loop stops before the last, partial BLOCK_K step
               {KERNEL: ("for k0 in range(0, K, BLOCK_K):",
                         "for k0 in range(0, K - BLOCK_K + 1, BLOCK_K):")},
               loses=(CORRECT,), reason="error above the tolerance"),
    Submission("library_shortcut",    # cuBLAS does the work
               {KERNEL: ("    c = torch.empty((M, N), device=a.device, dtype=a.dtype)\n",
                         "    return torch.matmul(a, b)\n")},
               loses=(CORRECT,), reason="LibraryShortcut"),
    Submission("traffic_forgets_stores",
               {TRAFFIC: ("return loaded, stored", "return loaded, 0")},
               loses=(TRAFFIC_TEST,), reason="naive_traffic"),
    Submission("traffic_loads_a_row_once",   # as if the programs of a row shared its row of a
               {TRAFFIC: ("loaded = M * N * 2 * K * element_size",
                          "loaded = (M * K + M * N * K) * element_size")},
               loses=(TRAFFIC_TEST,), reason="naive_traffic"),
]

CUDA_SUBMISSIONS = [
    Submission("cuda_no_bounds_check",   # threads past the edge read and write out of bounds
               {CUDA: ("if (row < M && col < N) {", "{")},
               loses=(CUDA_CORRECT,), reason="checks failed"),
    Submission("cuda_row_col_swapped",   # x indexes rows: right only for square grids
               {CUDA: ("int row = blockIdx.y * blockDim.y + threadIdx.y;\n"
                       "    int col = blockIdx.x * blockDim.x + threadIdx.x;",
                       "int row = blockIdx.x * blockDim.x + threadIdx.x;\n"
                       "    int col = blockIdx.y * blockDim.y + threadIdx.y;")},
               loses=(CUDA_CORRECT,), reason="checks failed"),
]

#: graded on a GPU (tests/gpu/test_lessons_gpu.py): each loses its CUDA cell and nothing else
GPU_SUBMISSIONS = [OnGpu(submission) for submission in CUDA_SUBMISSIONS]
