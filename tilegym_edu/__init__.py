"""tilegym_edu: the helper package every lesson of the course imports.

Importing it decides, once, whether kernels run on a CUDA GPU or in Triton's CPU interpreter
(see :mod:`tilegym_edu.device`); import it before you define any Triton kernel.
"""
import sys

# Grading imports nbformat, whose jsonschema checks the "iri" string format with rfc3987_syntax
# when that package is installed (jupyter_events brings it), and rfc3987_syntax compiles a
# grammar when imported: a grading worker (tilegym_edu.class_worker) took 7.0-7.2 s to start
# with it and 4.2-4.6 s without, three runs each on 2 cores (2026-12-03). No notebook schema uses
# the format; without the package jsonschema leaves it unchecked. A module set to None in
# sys.modules is one Python will not import.
sys.modules.setdefault("rfc3987_syntax", None)

from tilegym_edu import device  # noqa: E402,F401  (decides the mode before triton is imported)
from tilegym_edu.compat import keep_ast_contexts_out_of_copies  # noqa: E402

keep_ast_contexts_out_of_copies()   # Triton's compiles stay fast after a traceback in Jupyter

__version__ = "0.1.0"
