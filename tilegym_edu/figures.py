"""The figures a graded check measured, from the test cell to the grade report.

A graded check (``tilegym_edu.grading``) reports what it measured as it decides: a speed ratio
and the threshold it needed, or the largest error of a correctness check and the tolerance. In
a Jupyter kernel the figure is a display output with two forms: a line of text (what the
notebook and the feedback HTML show) and a JSON form under :data:`MIME`, which
:mod:`tilegym_edu.grade_report` reads back from the autograded notebook for the grade table and
``--json``. The points never depend on a figure: nbgrader scores a cell by whether it raised.

Figure forms (``kind``):

* ``"ratio"``: ``value`` the measured ratio, ``needs`` the threshold, ``versus`` what it was
  measured against (``"cuDNN"``), ``name`` the threshold's row in thresholds.toml;
* ``"error"``: ``value`` the largest relative error, ``tolerance`` its dtype's tolerance,
  ``checks`` how many outputs were compared;
* ``"bytes"``: ``value`` the bytes a kernel loaded, ``budget`` the most it may load (0: no
  budget), ``stored`` and ``output`` the bytes it stored and its output holds.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

#: the display output's data type for a figure
MIME = "application/vnd.tilegym.figure+json"


def ratio(value: float, needs: float, versus: str, name: str) -> dict:
    """A speed figure: ``value`` x ``versus``, needing at least ``needs``."""
    return {"kind": "ratio", "value": value, "needs": needs, "versus": versus, "name": name,
            "text": f"{value:.2f}x {versus} (needs {needs:.2f})"}


def error(value: float, tolerance: float, checks: int) -> dict:
    """A correctness figure: the largest relative error of ``checks`` compared outputs."""
    return {"kind": "error", "value": value, "tolerance": tolerance, "checks": checks,
            "text": f"largest error {value:.2g} (tolerance {tolerance:.2g}, "
                    f"{checks} check{'' if checks == 1 else 's'})"}


def traffic(loaded: int, budget: float, stored: int, output: int) -> dict:
    """A memory-traffic figure, counted in the interpreter (tilegym_edu.traffic)."""
    loads = f"loaded {loaded / budget:.2f} of its budget" if budget else f"loaded {loaded:,} bytes"
    stores = ("stored the output once" if stored == output else
              f"stored {stored / output:.2f}x the output" if output else f"stored {stored:,} bytes")
    return {"kind": "bytes", "value": loaded, "budget": budget, "stored": stored, "output": output,
            "text": f"{loads}, {stores}"}


def emit(figure: dict, shown: str | None = None) -> None:
    """Show ``figure`` as ``shown`` (default: its line of text): in a Jupyter kernel as a
    display output the grader reads, elsewhere (a script, pytest) as printed text."""
    shown = figure["text"] if shown is None else shown
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        get_ipython = None
    shell = get_ipython() if get_ipython else None
    if shell is None or not hasattr(shell, "kernel"):
        print(shown)
        return
    display({MIME: figure, "text/plain": shown}, raw=True)


def read(cell: Any) -> list[dict]:
    """The figures in one executed cell's outputs, in order, rebuilt from their numbers (the
    kernel's JSON turns NaN and inf into strings); anything that cannot be rebuilt into a
    figure is left out, whatever is wrong with it: the report must not fail on it."""
    found = []
    for output in cell.get("outputs", []):
        data = (output.get("data", {}).get(MIME)
                if output.get("output_type") == "display_data" else None)
        if data is None:
            continue
        try:
            figure = _rebuilt(data)
            _margin(figure)
        except Exception:  # noqa: BLE001  (a cell may hold anything there)
            continue
        found.append(figure)
    return found


def _rebuilt(data: dict) -> dict:
    if data["kind"] == "ratio":
        return ratio(float(data["value"]), float(data["needs"]), str(data["versus"]),
                     str(data["name"]))
    if data["kind"] == "error":
        return error(float(data["value"]), float(data["tolerance"]), int(data["checks"]))
    if data["kind"] == "bytes":
        return traffic(int(data["value"]), float(data["budget"]), int(data["stored"]),
                       int(data["output"]))
    raise ValueError(f"no figure of kind {data['kind']!r}")


def _margin(figure: dict) -> float:
    """How far a figure is from failing: below 1 it failed (NaN counts as failed). An exact
    (tolerance 0) check that matched is as far as can be."""
    value = figure["value"]
    if math.isnan(value):
        return 0.0
    if figure["kind"] == "bytes":
        loads = figure["budget"] / value if figure["budget"] and value else float("inf")
        return loads if figure["stored"] == figure["output"] else 0.0
    if figure["kind"] == "ratio":
        return value / figure["needs"] if figure["needs"] else float("inf")
    if figure["tolerance"]:
        return figure["tolerance"] / value if value else float("inf")
    return float("inf") if value == 0 else 0.0


def closest(figures: Iterable[dict]) -> dict:
    """The figure closest to failing (see ``_margin``): the slowest layer, the largest error."""
    return min(figures, key=_margin)


def summary(figures: Iterable[dict]) -> str:
    """One line for the grade table: per kind, the figure closest to failing (the slowest
    layer, the largest error counting the checks of every error figure, the most traffic), e.g.
    ``0.80x cuDNN (needs 0.50)``."""
    figures = list(figures)
    shown = []
    for kind in ("ratio", "error", "bytes"):
        of_kind = [f for f in figures if f["kind"] == kind]
        if of_kind:
            nearest = closest(of_kind)
            if kind == "error":
                nearest = error(nearest["value"], nearest["tolerance"],
                                sum(f["checks"] for f in of_kind))
            shown.append(nearest["text"])
    return "; ".join(shown)
