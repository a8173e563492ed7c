"""tilegym_edu: the helper package every lesson of the course imports.

Importing it decides, once, whether kernels run on a CUDA GPU or in Triton's CPU interpreter
(see :mod:`tilegym_edu.device`); import it before you define any Triton kernel.
"""
from tilegym_edu import device  # noqa: F401  (decides the mode before triton is imported)

__version__ = "0.1.0"
