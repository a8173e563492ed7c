"""Tests in this folder need a CUDA GPU; elsewhere they are skipped, with the reason."""
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: PyTorch sees none here, so kernels would "
                                   "run in Triton's interpreter, which these tests do not test")
    for item in items:
        if HERE in Path(item.fspath).resolve().parents:
            item.add_marker(skip)
