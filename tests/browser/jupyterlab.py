"""What a learner does in JupyterLab, as Playwright steps: open a notebook, run its cells one
by one (Run All stops at the first exercise's NotImplementedError; a learner goes on), read
what the cells showed."""
import re
import time
from dataclasses import dataclass

PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"
#: errors a learner notebook is meant to show in interpreter mode: the exercises' placeholders,
#: the grading cells that call them, and the cells that can only be graded on a GPU
EXPECTED_ERRORS = ("NotImplementedError", "NeedsGPU")


@dataclass
class CellRun:
    index: int
    prompt: str          # e.g. "[12]:"
    errors: list[str]    # text of error and stderr outputs
    texts: list[str]     # text of every output
    images: int          # rendered images among the outputs (naturalWidth > 100)


#: true once the notebook's kernel is connected and idle. The execution indicator alone says
#: idle while the status bar still says "No Kernel | Initializing" (seen 2026-12-05: every
#: Shift+Enter after that ran nothing, and the lesson timed out), so the status bar must name
#: a kernel too, where it is there to read.
KERNEL_READY = """() => {
    const indicator = document.querySelector('.jp-Notebook-ExecutionIndicator');
    const bar = document.querySelector('#jp-main-statusbar');
    const text = bar ? bar.innerText : '';
    return indicator?.getAttribute('data-status') === 'idle'
        && (!bar || (text.includes('Idle') && !text.includes('No Kernel')));
}"""


def open_notebook(page, url: str, timeout_s: float = 90) -> None:
    page.goto(url)
    page.wait_for_selector(f"{PANEL} .jp-Cell", timeout=timeout_s * 1000)
    page.wait_for_function(KERNEL_READY, timeout=timeout_s * 1000)


def run_every_cell(page, total: int, on_output=None, timeout_s: float = 900) -> list[CellRun]:
    """Shift+Enter through the ``total`` cells from the first, waiting for each code cell to
    finish; ``on_output(run, cell)`` is called with each finished code cell while it is on
    screen. (Cells are found as the active one: JupyterLab renders only those near the
    viewport.)"""
    page.locator(f"{PANEL} .jp-Cell").first.click()
    page.keyboard.press("Escape")  # command mode: Shift+Enter runs and moves on
    runs = []
    deadline = time.monotonic() + timeout_s
    for i in range(total):
        cell = page.locator(f"{PANEL} .jp-Cell.jp-mod-active").element_handle()
        is_code = "jp-CodeCell" in (cell.get_attribute("class") or "")
        page.keyboard.press("Shift+Enter")
        if not is_code:
            continue
        prompt = ""
        while time.monotonic() < deadline:
            prompt = cell.query_selector(".jp-InputPrompt").inner_text().strip()
            if re.fullmatch(r"\[\d+\]:", prompt):
                break
            time.sleep(0.05)
        else:
            raise TimeoutError(f"cell {i} still running after {timeout_s} s (prompt {prompt!r})")
        cell.scroll_into_view_if_needed()
        errors = [e.inner_text() for e in cell.query_selector_all(
            ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")]
        texts = [o.inner_text() for o in cell.query_selector_all(".jp-OutputArea-output")]
        images = sum(1 for img in cell.query_selector_all(".jp-OutputArea-output img")
                     if img.evaluate("img => img.complete && img.naturalWidth > 100"))
        run = CellRun(i, prompt, errors, texts, images)
        if on_output:
            on_output(run, cell)
        runs.append(run)
    return runs


def unexpected_errors(runs: list[CellRun]) -> list[str]:
    return [f"cell {r.index}: {text[:600]}" for r in runs for text in r.errors
            if not any(name in text for name in EXPECTED_ERRORS)]
