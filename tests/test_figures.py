"""tilegym_edu.figures: what a graded check measured, carried from the test cell to the table."""
import nbformat

from tilegym_edu import figures


def _cell(*datas):
    return nbformat.v4.new_code_cell(outputs=[
        nbformat.v4.new_output("display_data", data=data) for data in datas])


def test_figures_read_back_from_a_cell_rebuilt_from_their_numbers():
    speed = figures.ratio(0.8, 0.5, "cuDNN", "05_convolution.conv_vs_cudnn")
    assert speed["text"] == "0.80x cuDNN (needs 0.50)"
    err = figures.error(float("nan"), 3e-3, 12)
    as_kernel_sends = {**err, "value": "nan"}           # the kernel's JSON has no NaN
    forged = {**speed, "value": 9.0, "text": "9.00x cuDNN (needs 0.50)"}
    cell = _cell({figures.MIME: speed, "text/plain": speed["text"]},
                 {figures.MIME: as_kernel_sends}, {"text/plain": "not a figure"},
                 {figures.MIME: {"kind": "ratio", "value": "fast"}}, {figures.MIME: forged})
    found = figures.read(cell)
    assert [f["kind"] for f in found] == ["ratio", "error", "ratio"]
    assert found[0] == speed and found[2]["text"] == "9.00x cuDNN (needs 0.50)"
    assert str(found[1]["value"]) == "nan"


def test_summary_shows_per_kind_the_figure_closest_to_failing():
    layers = [figures.ratio(0.96, 0.5, "cuDNN", "x"), figures.ratio(0.76, 0.5, "cuDNN", "x"),
              figures.ratio(0.77, 0.5, "cuDNN", "x")]
    errors = [figures.error(1e-4, 3e-3, 4), figures.error(1e-3, 2e-2, 4),
              figures.error(0.0, 0.0, 2)]
    assert figures.summary(layers) == "0.76x cuDNN (needs 0.50)"
    # the largest error is 1/20 of the tolerance
    assert figures.summary(errors) == "largest error 0.001 (tolerance 0.02, 10 checks)"
    assert figures.summary([*errors, figures.error(float("nan"), 3e-3, 1)]).startswith(
        "largest error nan")
    assert figures.summary(layers + errors[:1]) == (  # one of each kind
        "0.76x cuDNN (needs 0.50); largest error 0.0001 (tolerance 0.003, 4 checks)")
    assert figures.error(0.0, 0.0, 1)["text"].endswith("1 check)")
    assert figures.summary([]) == ""


def test_outside_a_kernel_a_figure_is_a_printed_line(capsys):
    figures.emit(figures.ratio(1.2, 1.0, "eager PyTorch", "x"))
    assert capsys.readouterr().out == "1.20x eager PyTorch (needs 1.00)\n"


def test_a_traffic_figure_says_how_much_of_its_budget_it_loaded():
    within = figures.traffic(600, 1000, 64, 64)
    assert within["text"] == "loaded 0.60 of its budget, stored the output once"
    no_budget = figures.traffic(600, 0, 128, 64)
    assert no_budget["text"] == "loaded 600 bytes, stored 2.00x the output"
    assert figures.summary([within, figures.traffic(900, 1000, 64, 64)]).startswith("loaded 0.90")
    assert figures.summary([within, no_budget]) == no_budget["text"]   # stored too much: failing
    cell = _cell({figures.MIME: within})
    assert figures.read(cell) == [within]


def test_malformed_figures_are_left_out_never_fatal():
    bad = [{"kind": "bytes", "value": 1, "budget": 0, "stored": 1, "output": 0},   # rebuilt fine
           {"kind": "bytes", "value": "9" * 400, "budget": 3, "stored": 1, "output": 1},
           {"kind": "ratio", "value": 10 ** 400, "needs": 0.5, "versus": "x", "name": "y"},
           {"kind": "nope"}, "not even a dict", None]
    found = figures.read(_cell(*({figures.MIME: b} for b in bad)))
    assert [f["text"] for f in found] == ["loaded 1 bytes, stored 1 bytes"]
    assert figures.summary(found)
