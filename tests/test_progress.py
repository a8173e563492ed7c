"""tilegym_edu.progress: one redrawn line, closed with a message; disabled means silent."""
import io

from tilegym_edu import progress


def test_bar_redraws_one_line_and_closes_it():
    out = io.StringIO()
    bar = progress.ProgressBar("tuning", stream=out)
    bar.show(0, 4)
    bar.show(2, 4, "racing")
    bar.close("best of 4")
    text = out.getvalue()
    assert text.count("\r") == 3 and text.endswith("\n") and text.count("\n") == 1
    assert "[" + "#" * 15 + "." * 15 + "] 2/4 racing" in text
    assert text.rstrip().endswith("tuning: best of 4")


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
