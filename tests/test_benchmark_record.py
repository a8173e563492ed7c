"""benchmarks/record.py, the record every benchmark script writes (header, SM clock, --out,
JSON), and every script in benchmarks/ importing without a GPU."""
import datetime
import importlib.util
import json
import re
import runpy
from pathlib import Path

import pytest
import torch
import triton

from tilegym_edu import device

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if p.name != "record.py")
#: scripts that write a record; profile_cell.py only prints a profile
RECORDING = [p for p in SCRIPTS if p.name != "profile_cell.py"]
FAKE_GPU = device.DeviceInfo(name="NVIDIA H200", compute_capability=(9, 0), sm_count=132,
                             memory_bytes=141 * 2**30, l2_bytes=60 * 2**20, driver="580.159.04")


def load_record():
    """benchmarks/record.py as a module (scripts find it as ``record`` on their sys.path)."""
    spec = importlib.util.spec_from_file_location("record", BENCHMARKS / "record.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


record = load_record()


@pytest.fixture
def fake_gpu(monkeypatch):
    """device as if an H200 were visible, its SM clock at 1980 MHz."""
    monkeypatch.setattr(device, "ON_GPU", True)
    monkeypatch.setattr(device, "info", lambda index=0: FAKE_GPU)
    monkeypatch.setattr(device, "sm_clock_mhz", lambda index=0: 1980)


# the header ------------------------------------------------------------------------------------

def test_header_fields_and_types():
    head = record.header()
    assert list(head) == ["date", "gpu", "torch", "triton", "host", "host_python_ms"]
    assert all(isinstance(head[k], str) for k in ("date", "gpu", "torch", "triton", "host"))
    assert head["host"].endswith(" CPUs") and 0 < head["host_python_ms"] < 1000
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", head["date"])
    assert datetime.date.fromisoformat(head["date"]) == datetime.date.today()
    assert head["torch"] == torch.__version__ and head["triton"] == triton.__version__


@pytest.mark.skipif(device.ON_GPU, reason="tests the header without a GPU; a GPU is visible")
def test_header_without_a_gpu():
    assert device.info() is None
    head = record.header(clock_before=True)
    assert head["gpu"] == record.NO_GPU == "none: interpreter mode"
    assert head["sm_clock_before_mhz"] is None
    assert record.sm_clock() is None


def test_header_on_a_gpu(fake_gpu):
    head = record.header(clock_before=True)
    assert head["gpu"] == FAKE_GPU.describe()
    assert head["gpu"].startswith("NVIDIA H200 (compute capability 9.0, 132 SMs, 141 GiB")
    assert list(head)[-1] == "sm_clock_before_mhz" and head["sm_clock_before_mhz"] == 1980


def test_header_stamp_is_a_utc_time():
    when = datetime.datetime.fromisoformat(record.header(stamp=True)["date"])
    assert when.utcoffset() == datetime.timedelta(0)
    now = datetime.datetime.now(datetime.timezone.utc)
    assert abs((now - when).total_seconds()) < 60


def test_header_is_a_new_dict_each_time():
    first = record.header()
    first["layers"] = {}
    assert "layers" not in record.header()


# writing ---------------------------------------------------------------------------------------

def test_finish_writes_json_that_reads_back(tmp_path, fake_gpu):
    out = tmp_path / "run.json"
    rec = {**record.header(), "shapes": {"4096x4096x4096": {"cuBLAS": {"tflops": 700.5}}}}
    assert record.finish(rec, out) is rec
    back = json.loads(out.read_text())
    assert back == rec
    assert list(back) == ["date", "gpu", "torch", "triton", "host", "host_python_ms", "shapes",
                          "sm_clock_after_mhz"]
    assert back["sm_clock_after_mhz"] == 1980
    assert out.read_text() == json.dumps(rec, indent=1)      # json.dump(record, f, indent=1)


def test_finish_keeps_a_clock_key_in_its_place(tmp_path):
    out = str(tmp_path / "run.json")                          # a str path works too
    rec = {**record.header(), "sm_clock_after_mhz": None, "copy_gbs": {"2 GiB": 4100.0}}
    record.finish(rec, out)
    assert list(json.loads(Path(out).read_text()))[-2:] == ["sm_clock_after_mhz", "copy_gbs"]


def test_finish_without_clock_or_out(tmp_path, capsys):
    rec = {**record.header(), "configs": {}}
    record.finish(rec, None, clock_after=False)
    assert "sm_clock_after_mhz" not in rec
    assert list(tmp_path.iterdir()) == [] and capsys.readouterr().out == ""


def test_finish_show_prints_the_record(capsys):
    rec = record.finish({**record.header(), "ladder": {}}, None, show=True)
    assert json.loads(capsys.readouterr().out) == rec


def test_write_none_writes_nothing(tmp_path):
    record.write({"a": 1}, None)
    record.write({"a": 1}, tmp_path / "a.json")
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


# the command line ------------------------------------------------------------------------------

def test_options_out():
    parser = record.options("Doc.\n\n    python benchmarks/x.py --out x.json\n")
    assert parser.parse_args([]).out is None
    assert parser.parse_args(["--out", "x.json"]).out == Path("x.json")


def test_options_take_a_scripts_own(capsys):
    parser = record.options("Lesson 03's measurements.\n\n    python benchmarks/x.py --out x.json")
    parser.add_argument("--level2", action="store_true")
    args = parser.parse_args(["--level2", "--out", "p.json"])
    assert args.level2 and args.out == Path("p.json")
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    shown = capsys.readouterr().out
    assert "--out PATH" in shown and "    python benchmarks/x.py --out x.json" in shown
    with pytest.raises(SystemExit):
        parser.parse_args(["--outfile"])


# the scripts -----------------------------------------------------------------------------------

@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_imports(script, monkeypatch):
    """Each script's module body runs here (torch, triton, its kernels defined), main() not."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))     # as `python benchmarks/NAME.py` has it
    namespace = runpy.run_path(str(script), run_name="imported")
    assert callable(namespace["main"])


@pytest.mark.parametrize("script", RECORDING, ids=lambda p: p.name)
def test_script_uses_the_record_module(script):
    """No script builds the header, its parser or its JSON file itself."""
    source = script.read_text()
    assert "from record import" in source and "--out" in source.split('"""')[1]
    for own in ("argparse.ArgumentParser(", "__version__", "json.dump(", "sm_clock_mhz()",
                "datetime.date.today()"):
        assert own not in source, f"{script.name} has {own} of its own: use record.py"


def test_issue_18s_record_runs_attention_then_the_capstone_and_writes_after_each_case(
        tmp_path, monkeypatch):
    """attention_and_capstone.py: attention_shapes' rows, then capstone's prompts and decoding
    cases, in one process and one record, which is on disk after every case (run 37 of
    2026-12-04 lost its whole record when the device's time ran out during its decoding)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import attention_and_capstone
    import attention_shapes
    import capstone
    out = tmp_path / "issue-18.json"
    on_disk = []

    def case(result):
        def run(*args):
            on_disk.append(json.loads(out.read_text()) if out.exists() else None)
            return result(*args)
        return run

    def attention_row(row, rec):
        on_disk.append(json.loads(out.read_text()) if out.exists() else None)
        rec.setdefault("forward", {})[str(row)] = "measured"
    monkeypatch.setattr(attention_shapes, "FORWARD", ["f1", "f2"])
    monkeypatch.setattr(attention_shapes, "BACKWARD", [])
    monkeypatch.setattr(attention_shapes, "compare_forward", attention_row)
    monkeypatch.setattr(capstone, "prefill", case(lambda b, s: {"prefill": [b, s]}))
    monkeypatch.setattr(capstone, "decode", case(lambda b, c: {"decode": [b, c]}))
    monkeypatch.setattr("sys.argv", ["attention_and_capstone.py", "--out", str(out)])
    attention_and_capstone.main()
    final = json.loads(out.read_text())
    assert final["forward"] == {"f1": "measured", "f2": "measured"}
    assert final["prefill"] == [{"prefill": list(p)} for p in capstone.PROMPTS]
    assert final["decode"] == [{"decode": list(d)} for d in capstone.DECODES]
    # each case found every case before it on disk
    assert on_disk[0] is None and on_disk[1]["forward"] == {"f1": "measured"}
    assert len(on_disk[3]["prefill"]) == 1 and "decode" not in on_disk[3]
    assert on_disk[-1]["decode"] == [{"decode": list(d)} for d in capstone.DECODES[:-1]]
    monkeypatch.setattr("sys.argv", ["attention_and_capstone.py", "--parts", "decode"])
    on_disk.clear()
    attention_and_capstone.main()
    assert len(on_disk) == len(capstone.DECODES)


@pytest.mark.skipif(device.ON_GPU, reason="checks the untimed defaults of interpreter mode; a GPU "
                    "is visible, where the tuner races")
def test_the_capstones_decoding_record_names_the_picks_of_the_problems_the_step_ran(monkeypatch):
    """capstone.decode_picks: each product of a decoding step (M x N x K) with the path and
    configuration shape_matmul runs, and flash decoding's configuration, asked for with the
    problems the reference kernels' step itself asked the tuner about (on a GPU, cache hits);
    in the interpreter the defaults, untimed."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import capstone
    from tilegym_edu.reference import flash_decode, llama, llama_kernels, split_k
    asked = {"matmul": [], "decode": []}

    def recording(kind, real):
        def autotune(kernel, problem, *args, **options):
            asked[kind].append(dict(problem))
            return real(kernel, problem, *args, **options)
        return autotune
    monkeypatch.setattr(split_k, "autotune", recording("matmul", split_k.autotune))
    monkeypatch.setattr(flash_decode, "autotune", recording("decode", flash_decode.autotune))
    cfg = llama.CPU_CONFIG
    model = llama.Llama(cfg, torch.float16)
    tokens = llama.random_tokens(cfg, 2, 21, torch.Generator().manual_seed(0))
    step = llama.repeatable_decode_step(model, llama_kernels.reference_ops(small_blocks=False),
                                        tokens, 20)
    asked["matmul"].clear(), asked["decode"].clear()       # the cache's prefill asked its own
    step()
    the_steps = {kind: list(problems) for kind, problems in asked.items()}
    asked["matmul"].clear(), asked["decode"].clear()
    picks = capstone.decode_picks(model, batch=2, context=20)
    assert asked["matmul"] and all(p in the_steps["matmul"] for p in asked["matmul"])
    assert asked["decode"] and all(p in the_steps["decode"] for p in asked["decode"])
    assert list(picks) == [
        f"qkv 2 x {(cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim} x {cfg.dim}",
        f"o 2 x {cfg.dim} x {cfg.n_heads * cfg.head_dim}",
        f"gate and up 2 x {2 * cfg.hidden} x {cfg.dim}", f"down 2 x {cfg.dim} x {cfg.hidden}",
        f"output 2 x {cfg.vocab} x {cfg.dim}", "attention over the cache"]
    assert all(picks[name] == dict(split_k.SHAPE_SPACE.default) for name in list(picks)[:5])
    assert picks["attention over the cache"] == dict(flash_decode.DECODE_SPACE.default)
