"""tilegym_edu.progress: one redrawn line in a terminal or a Jupyter notebook, closed with a
message; a few plain lines anywhere else (log files, CI); disabled means silent."""
import io
import subprocess
import sys
import types

from tests.conftest import REPO
from tilegym_edu import progress


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_bar_redraws_one_line_and_closes_it():
    out = Terminal()
    bar = progress.ProgressBar("tuning", stream=out)
    bar.show(0, 4)
    bar.show(2, 4, "racing")
    bar.close("best of 4")
    text = out.getvalue()
    assert text.count("\r") == 3 and text.endswith("\n") and text.count("\n") == 1
    assert "[" + "#" * 15 + "." * 15 + "] 2/4 racing" in text
    assert text.rstrip().endswith("tuning: best of 4")


def test_bar_in_a_log_prints_plain_lines_at_each_quarter():
    out = io.StringIO()   # not a terminal: carriage returns would pile up in a log
    bar = progress.ProgressBar("grading", stream=out)
    for done in range(100):
        bar.show(done, 100, "cells")
    bar.close("100 cells run")
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert [line.split("] ")[1] for line in lines[:-1]] == [
        "0/100 cells", "25/100 cells", "50/100 cells", "75/100 cells"]
    assert lines[-1] == "grading: 100 cells run"


def test_bar_in_a_jupyter_kernel_redraws(monkeypatch):
    """A kernel's sys.stdout is no tty, but the notebook honours carriage returns."""
    iostream = types.ModuleType("ipykernel.iostream")
    iostream.OutStream = type("OutStream", (io.StringIO,), {})
    monkeypatch.setitem(sys.modules, "ipykernel.iostream", iostream)
    out = iostream.OutStream()
    bar = progress.ProgressBar("sweep", stream=out)
    bar.show(1, 2)
    bar.close("2 done")
    assert out.getvalue().count("\r") == 2


def test_progress_never_imports_ipykernel():
    code = ("import io, sys; from tilegym_edu import progress; "
            "progress.ProgressBar('x', stream=io.StringIO()).show(1, 2); "
            "print('ipykernel' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                            text=True, check=True)
    assert result.stdout.strip() == "False"


def test_disabled_bar_writes_nothing():
    out = io.StringIO()
    bar = progress.ProgressBar("x", enabled=False, stream=out)
    bar.show(1, 2)
    bar.close("done")
    assert out.getvalue() == ""


def test_track_yields_every_item_and_counts_them(capsys):
    assert list(progress.track([3, 1, 2], "sweep")) == [3, 1, 2]
    out = capsys.readouterr().out
    assert "3/3" in out and out.rstrip().endswith("sweep: 3 done")
