"""dispatch_mode: the course's PyTorch dispatch modes see every operation, and entering one does
not import torch._dynamo (1.3 s in every grading kernel)."""
import subprocess
import sys

import torch

from tilegym_edu.dispatch_mode import DispatchMode

PROBE = """
import sys, torch
from tilegym_edu.dispatch_mode import DispatchMode
from tilegym_edu import grading, kernel_bounds, traffic

class Seen(DispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))

for mode in (Seen(), grading.HeldMemory()):
    with mode:
        torch.empty(3).add_(1)
print("torch._dynamo" in sys.modules)
"""


def test_a_mode_sees_every_operation_under_it():
    seen = []

    class Recorder(DispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with Recorder():
        torch.ones(4).mul_(2)
    assert any("ones" in op for op in seen) and any("mul_" in op for op in seen), seen


def test_entering_the_course_modes_imports_no_torch_dynamo():
    """In a fresh process, where nothing imported torch._dynamo before (PyTorch's own wrapper
    of ``__torch_dispatch__`` would, at the first operation)."""
    found = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                           check=True).stdout.split()[-1]
    assert found == "False"
