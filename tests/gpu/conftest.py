"""Tests in this folder need a CUDA GPU; elsewhere they are skipped, with the reason."""
from pathlib import Path

import pytest
import torch

from tests.conftest import tuning_cache_in

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: PyTorch sees none here, so kernels would "
                                   "run in Triton's interpreter, which these tests do not test")
    for item in items:
        if HERE in Path(item.fspath).resolve().parents:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def fresh_tuning_cache(tmp_path_factory):
    """The grading kernels inherit TILEGYM_CACHE_DIR: every submission of the module tunes from
    scratch, so a cached winner of the solution cannot stand in for a submission's own search."""
    with tuning_cache_in(tmp_path_factory.mktemp("tilegym_cache")):
        yield
