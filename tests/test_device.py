"""device: the mode decided at import, its facts, and nvidia-smi reads, without a GPU."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tilegym_edu import device

REPO = Path(__file__).resolve().parent.parent

interpreter_only = pytest.mark.skipif(device.ON_GPU,
                                      reason="tests interpreter mode; a GPU is visible")


#: fresh interpreters, for decisions made at import time: (code, environment changes)
FRESH_IMPORTS = {
    "bogus mode": ("import tilegym_edu", {"TILEGYM_MODE": "bogus"}),
    "gpu mode": ("import tilegym_edu", {"TILEGYM_MODE": "gpu"}),
    "triton first": ("import triton\nimport tilegym_edu", {}),
    "gpu mode, interpret set": ("import tilegym_edu",
                                {"TILEGYM_MODE": "gpu", "TRITON_INTERPRET": "1"}),
    "triton first, interpret set": ("import triton\nimport tilegym_edu\n"
                                    "print(tilegym_edu.device.MODE)", {"TRITON_INTERPRET": "1"}),
}


@pytest.fixture(scope="module")
def fresh_imports() -> dict[str, subprocess.CompletedProcess]:
    """Every FRESH_IMPORTS entry run in its own Python, all at once (each takes seconds), with
    TRITON_INTERPRET and TILEGYM_MODE unset unless the entry sets them."""
    base = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "TILEGYM_MODE")}
    procs = {name: subprocess.Popen([sys.executable, "-c", code], env={**base, **changes},
                                    cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
             for name, (code, changes) in FRESH_IMPORTS.items()}
    results = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=300)
        results[name] = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return results


@interpreter_only
def test_without_a_gpu_the_mode_is_the_interpreter():
    assert device.MODE == "interpreter"
    assert device.DEVICE == "cpu"
    assert device.ON_GPU is False
    assert os.environ["TRITON_INTERPRET"] == "1"


@interpreter_only
def test_size_picks_the_cpu_value():
    assert device.size(gpu=2**26, cpu=10_000) == 10_000
    assert device.size(gpu="big", cpu="small") == "small"


@interpreter_only
def test_info_is_none_in_interpreter_mode():
    assert device.info() is None


def test_info_asks_the_driver_once_a_process(monkeypatch):
    """device.info() sits on launch paths (persistent grids, the tuner's keys): uncached, its
    nvidia-smi call cost 25 ms a launch on the H200 (run 26, 2026-12-04)."""
    asked = []

    class Props:
        name, major, minor, multi_processor_count = "NVIDIA H200", 9, 0, 132
        total_memory, L2_cache_size = 141 * 2**30, 60 * 2**20

    def properties(index):
        asked.append(("properties", index))
        return Props
    monkeypatch.setattr(device, "ON_GPU", True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    monkeypatch.setattr(device, "driver_version", lambda index=0: asked.append("driver") or "580.1")
    device.info.cache_clear()
    try:
        assert [device.info().sm_count for _ in range(3)] == [132] * 3
        assert asked == [("properties", 0), "driver"]
    finally:
        device.info.cache_clear()


@interpreter_only
def test_banner_says_interpreter_mode():
    text = device.banner()
    assert "interpreter mode" in text and "needs GPU" in text


@interpreter_only
def test_synchronize_is_a_no_op(monkeypatch):
    def boom():
        raise AssertionError("torch.cuda.synchronize must not be called in interpreter mode")
    monkeypatch.setattr(torch.cuda, "synchronize", boom)
    assert device.synchronize() is None


def test_device_info_describes_itself():
    facts = device.DeviceInfo(name="NVIDIA H200", compute_capability=(9, 0), sm_count=132,
                              memory_bytes=141 * 2**30, l2_bytes=60 * 2**20, driver="580.1")
    assert facts.describe() == ("NVIDIA H200 (compute capability 9.0, 132 SMs, 141 GiB, "
                                "L2 60 MiB, driver 580.1)")


# nvidia-smi --------------------------------------------------------------------------------------

@pytest.fixture
def no_nvidia_smi(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)


@pytest.fixture
def fake_nvidia_smi(monkeypatch):
    """nvidia-smi 'found', answering with the stdout set in the returned dict."""
    answer = {"stdout": "", "calls": []}
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: f"/usr/bin/{name}")

    def run(cmd, **kwargs):
        answer["calls"].append(cmd)
        if isinstance(answer["stdout"], Exception):
            raise answer["stdout"]
        return subprocess.CompletedProcess(cmd, 0, stdout=answer["stdout"], stderr="")
    monkeypatch.setattr(subprocess, "run", run)
    return answer


def test_nvidia_smi_missing_gives_none(no_nvidia_smi):
    assert device.nvidia_smi("clocks.sm") is None
    assert device.sm_clock_mhz() is None


def test_nvidia_smi_splits_the_csv_values(fake_nvidia_smi):
    fake_nvidia_smi["stdout"] = "580.159.04, NVIDIA H200\n"
    assert device.nvidia_smi("driver_version,name", index=3) == ["580.159.04", "NVIDIA H200"]
    cmd = fake_nvidia_smi["calls"][0]
    assert cmd[0] == "nvidia-smi" and "--query-gpu=driver_version,name" in cmd and "3" in cmd


def test_nvidia_smi_failure_gives_none(fake_nvidia_smi):
    fake_nvidia_smi["stdout"] = subprocess.CalledProcessError(9, "nvidia-smi")
    assert device.nvidia_smi("clocks.sm") is None


@pytest.mark.parametrize("stdout, mhz", [("1980\n", 1980), ("[N/A]\n", None)])
def test_sm_clock_mhz_reads_nvidia_smi(fake_nvidia_smi, stdout, mhz):
    fake_nvidia_smi["stdout"] = stdout
    assert device.sm_clock_mhz() == mhz


def test_driver_version_comes_from_nvidia_smi(fake_nvidia_smi):
    fake_nvidia_smi["stdout"] = "580.159.04\n"
    assert device.driver_version() == "580.159.04"


# the mode is decided at import time: fresh interpreters --------------------------------------

#: the FRESH_IMPORTS entries that must fail, and what each must say on stderr
REFUSED_IMPORTS = [
    pytest.param("bogus mode", ("ValueError", "'bogus'", "'gpu'", "'interpreter'"),
                 id="unknown_mode_names_the_modes"),
    pytest.param("gpu mode", ("RuntimeError", "no CUDA GPU", "Unset TILEGYM_MODE",
                              "tilegym-edu doctor"),
                 id="forced_gpu_mode_without_a_gpu_says_what_to_do", marks=interpreter_only),
    pytest.param("triton first", ("RuntimeError", "import tilegym_edu", "before `import triton`"),
                 id="triton_imported_first_without_interpret_flag", marks=interpreter_only),
    pytest.param("gpu mode, interpret set", ("ValueError", "contradicts TRITON_INTERPRET=1"),
                 id="forced_gpu_mode_contradicting_the_interpret_flag"),
]


@pytest.mark.parametrize("entry, says", REFUSED_IMPORTS)
def test_a_refused_import_fails_and_says_why(fresh_imports, entry, says):
    result = fresh_imports[entry]
    assert result.returncode != 0
    for phrase in says:
        assert phrase in result.stderr, (phrase, result.stderr)


def test_triton_imported_first_is_fine_with_the_interpret_flag_set(fresh_imports):
    result = fresh_imports["triton first, interpret set"]
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "interpreter"
