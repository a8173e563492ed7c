"""The base of the course's PyTorch dispatch modes (the shortcut guard and held memory of
grading, the traffic count's PyTorch operations, the launch's no-PyTorch rule).

PyTorch wraps a ``TorchDispatchMode`` subclass's ``__torch_dispatch__`` in
``torch._disable_dynamo`` (where the class's ``_should_skip_dynamo`` says so, the default),
and that wrapper imports ``torch._dynamo`` at the first operation under the mode: 1.3 s
(torch 2.13 on this machine's CPU), paid again by every grading kernel. The wrapper keeps
``torch.compile`` from compiling the mode's own frames; these modes only watch or refuse
operations, so they opt out (a PyTorch without the hook ignores the method)."""
from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode


class DispatchMode(TorchDispatchMode):
    """A TorchDispatchMode whose ``__torch_dispatch__`` runs as written."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False
