"""What importing tilegym_edu spares every process that grades (each class worker among them)."""
import subprocess
import sys


def test_grading_starts_without_compiling_rfc3987_syntax_and_notebooks_still_validate():
    """tilegym_edu keeps jsonschema from importing rfc3987_syntax (seconds of grammar compiling
    at every grading process's start); nbformat's validation does not need it."""
    code = ("import sys, tilegym_edu, nbformat; "
            "nbformat.validate(nbformat.v4.new_notebook()); "
            "print(sys.modules.get('rfc3987_syntax', 'absent'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() in ("None", "absent")
