"""ceilings: no GPU, no ceilings; the per-GPU cache, with the measurements faked."""
import json

import pytest
import torch

from tilegym_edu import ceilings, device

interpreter_only = pytest.mark.skipif(device.ON_GPU,
                                      reason="tests interpreter mode; a GPU is visible")


def fake_facts(driver="580.1"):
    return device.DeviceInfo("NVIDIA H200", (9, 0), 132, 141 * 2**30, 60 * 2**20, driver)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEGYM_CACHE_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def fake_gpu(monkeypatch, cache_dir):
    """device.info says H200; the measurements return fixed numbers and count their calls."""
    state = {"facts": fake_facts(), "copy": 0, "matmul": []}
    monkeypatch.setattr(device, "info", lambda index=0: state["facts"])

    def copy_gbs(nbytes=ceilings.COPY_BYTES):
        state["copy"] += 1
        return 4321.0

    def matmul_tflops(name, n=ceilings.MATMUL_SIZE):
        state["matmul"].append(name)
        return {"fp16": 700.0, "bf16": 690.0, "tf32": 350.0, "fp32": 50.0}[name]
    monkeypatch.setattr(ceilings, "measure_copy_gbs", copy_gbs)
    monkeypatch.setattr(ceilings, "measure_matmul_tflops", matmul_tflops)
    return state


@interpreter_only
def test_measure_ceilings_needs_a_gpu(cache_dir):
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        ceilings.measure_ceilings()
    assert not ceilings.cache_path().exists()


@interpreter_only
def test_no_cached_ceilings_without_a_gpu(cache_dir):
    assert ceilings.cached_ceilings() is None


def test_cache_path_honours_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEGYM_CACHE_DIR", str(tmp_path / "here"))
    assert ceilings.cache_path() == tmp_path / "here" / "ceilings.json"
    monkeypatch.delenv("TILEGYM_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert ceilings.cache_path() == tmp_path / ".cache" / "tilegym_edu" / "ceilings.json"


def test_measure_ceilings_measures_once_and_caches(fake_gpu):
    first = ceilings.measure_ceilings()
    assert first.gpu == "NVIDIA H200" and first.driver == "580.1"
    assert first.torch == torch.__version__ and first.copy_gbs == 4321.0
    assert first.matmul_tflops == {"fp16": 700.0, "bf16": 690.0, "tf32": 350.0, "fp32": 50.0}
    assert fake_gpu["copy"] == 1 and sorted(fake_gpu["matmul"]) == sorted(ceilings.MATMUL_DTYPES)
    cache = json.loads(ceilings.cache_path().read_text())
    assert list(cache) == [f"NVIDIA H200 | driver 580.1 | torch {torch.__version__}"]

    assert ceilings.measure_ceilings() == first
    assert ceilings.cached_ceilings() == first
    assert fake_gpu["copy"] == 1 and len(fake_gpu["matmul"]) == 4


def test_refresh_measures_again(fake_gpu):
    ceilings.measure_ceilings()
    ceilings.measure_ceilings(refresh=True)
    assert fake_gpu["copy"] == 2 and len(fake_gpu["matmul"]) == 8
    assert len(json.loads(ceilings.cache_path().read_text())) == 1


def test_another_driver_is_another_cache_entry(fake_gpu):
    old = ceilings.measure_ceilings()
    fake_gpu["facts"] = fake_facts(driver="590.2")
    assert ceilings.cached_ceilings() is None
    new = ceilings.measure_ceilings()
    assert fake_gpu["copy"] == 2 and new.driver == "590.2" and old.driver == "580.1"
    assert len(json.loads(ceilings.cache_path().read_text())) == 2
    fake_gpu["facts"] = fake_facts()
    assert ceilings.cached_ceilings() == old


def test_no_cache_file_means_no_cached_ceilings(fake_gpu):
    assert not ceilings.cache_path().exists()
    assert ceilings.cached_ceilings() is None


def test_unknown_matmul_dtype_is_a_key_error():
    with pytest.raises(KeyError):
        ceilings.measure_matmul_tflops("fp8")


@interpreter_only
@pytest.mark.parametrize("measure", [lambda: ceilings.measure_copy_gbs(1024),
                                     lambda: ceilings.measure_matmul_tflops("fp16", n=8)],
                         ids=["copy", "matmul"])
def test_the_raw_measurements_fail_without_a_gpu(measure):
    # Only measure_ceilings() checks for a GPU; these fail inside torch.
    with pytest.raises((AssertionError, RuntimeError)):
        measure()
