"""nbgrader configuration of the course: the stock `nbgrader` commands, run from this folder,
see solutions/ as the source and keep their working state in .grading/ (tilegym_edu.course)."""
from pathlib import Path

from tilegym_edu.course import configure

c = get_config()  # noqa: F821  (provided by nbgrader when it loads this file)
configure(c, Path(__file__).resolve().parent)
