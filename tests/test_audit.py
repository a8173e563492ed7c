"""The audit of a learner's code (tilegym_edu.audit), and what the grader builds from a
submission (tilegym_edu.submission): every attack of the public corpus (tests/attacks.py),
put into every kernel exercise's solution cell after the honest code, is refused by its rule,
and the honest statements of the cell still run (the graded notebook is built for each attack
in one of the exercises, all of them in turn: building it takes most of the time). The honest
solutions and the blank exercises pass the audit untouched."""
from __future__ import annotations

import copy
import functools
import importlib
import re
import tempfile
import types
from pathlib import Path

import nbformat
import pytest

from tests.attacks import ATTACKS
from tests.conftest import REPO
from tilegym_edu import audit, submission, write_guard

pytestmark = pytest.mark.beside

LESSONS = sorted(p.name for p in (REPO / "solutions").iterdir() if p.is_dir())
#: (lesson, learner function) of every graded kernel exercise
KERNEL_EXERCISES = [
    ("00_getting_started", "silu_mul"), ("01_naive_matmul", "naive_matmul"),
    ("02_tiled_matmul", "tiled_matmul"), ("02_tiled_matmul", "matmul_bias_relu"),
    ("02_tiled_matmul", "bmm"), ("03_software_pipelining", "matmul"),
    ("03_software_pipelining", "persistent_matmul"), ("04_flash_attention", "softmax"),
    ("04_flash_attention", "flash_attention"), ("05_convolution", "conv2d"),
    ("05_convolution", "im2col_source"), ("06_capstone", "rmsnorm"), ("06_capstone", "rope_"),
    ("06_capstone", "swiglu"), ("07_cutile", "matmul"),
]


def notebook(folder: str, lesson: str) -> nbformat.NotebookNode:
    return nbformat.read(REPO / folder / lesson / f"{lesson}.ipynb", as_version=4)


@functools.cache
def trusted_names(lesson: str) -> audit.LessonNames:
    nb = notebook("notebooks", lesson)
    return audit.lesson_names([c.source for c in nb.cells if c.cell_type == "code"
                               and not submission.is_solution(c) and not submission.is_graded(c)],
                              [c.source for c in notebook("solutions", lesson).cells
                               if submission.is_graded(c)])


def solution_cell_defining(nb: nbformat.NotebookNode, function: str) -> nbformat.NotebookNode:
    [cell] = [c for c in nb.cells if submission.is_solution(c)
              and re.search(rf"^def {re.escape(function)}\(", c.source, re.M)]
    return cell


@pytest.mark.parametrize("lesson", LESSONS)
@pytest.mark.parametrize("folder", ["solutions", "notebooks"])
def test_the_honest_solutions_and_the_blank_exercises_pass_the_audit(folder, lesson):
    names = trusted_names(lesson)
    for cell in notebook(folder, lesson).cells:
        if submission.is_solution(cell):
            assert audit.audit(cell.source, names) == [], (
                cell.metadata.nbgrader.grade_id, audit.describe(audit.audit(cell.source, names)))


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.id)
@pytest.mark.parametrize("lesson, function", KERNEL_EXERCISES, ids=[f for _, f in KERNEL_EXERCISES])
def test_every_attack_is_refused_and_the_honest_code_of_its_cell_still_runs(
        lesson, function, attack):
    solved = notebook("solutions", lesson)
    cell = solution_cell_defining(solved, function)
    honest = cell.source
    cell.source = honest + "\n\n" + attack.code.format(fn=function) + "\n"
    refusals = audit.audit(cell.source, trusted_names(lesson))
    assert attack.rule in {r.rule for r in refusals}, audit.describe(refusals, 10)
    if (lesson, function) != KERNEL_EXERCISES[ATTACKS.index(attack) % len(KERNEL_EXERCISES)]:
        return   # the notebook the grader builds: each attack in one exercise, all in turn
    prepared = submission.prepare(notebook("notebooks", lesson), solved)
    [graded] = [c for c in prepared.notebook.cells
                if c.metadata.get("nbgrader", {}).get("grade_id")
                == cell.metadata.nbgrader.grade_id]
    ran = graded.source.removesuffix(write_guard.mark(""))    # the cell, less the guard's marker
    assert ran.rstrip().endswith(")") and "raise SubmissionRefused(" in ran
    if attack.rule != "syntax":          # a cell that is not Python runs nothing of itself
        assert graded.source.startswith(honest), "the honest statements were left out too"
    assert prepared.refused


ALLOWED = {
    "comprehension variables shadowing lesson data":
        "def f(xs):\n    return [bm * 2 for bm in xs]",
    "a local named like lesson data": "def f(cases):\n    cases = list(cases)\n    return cases",
    "an autograd function writing its context":
        "class Op(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n"
        "        ctx.scale = 2\n        return x\n",
    "a class writing self": "class Box:\n    def __init__(self, v):\n        self.v = v",
    "a dataclass": "from dataclasses import dataclass\n@dataclass\nclass C:\n    a: int = 1",
    "f-strings": "def f(x):\n    return f'{x.shape} {x.dtype}'",
    "kernel annotations":
        "@triton.jit\ndef k(x_ptr, BLOCK: tl.constexpr):\n    pid = tl.program_id(0)",
    "importing a module again": "import torch\nimport triton.language as tl",
    "an import inside a function":
        "def f():\n    from triton.tools.tensor_descriptor import TensorDescriptor\n    return 1",
    "catching Exception": "try:\n    x = 1\nexcept (ValueError, Exception) as error:\n    x = 2",
    "a private helper of one's own": "def _helper(n):\n    return n + 1",
    "reading lesson data": "def f(problem):\n    return ELEMENT_BYTES[problem['dtype']]",
}


@pytest.mark.parametrize("name", list(ALLOWED))
def test_what_kernel_code_needs_is_allowed(name):
    names = audit.lesson_names(["import torch\nimport triton\nimport triton.language as tl\n"
                                "ELEMENT_BYTES = {'float16': 2}\nbm = 1\ncases = []"])
    assert audit.audit(ALLOWED[name], names) == [], (
        audit.describe(audit.audit(ALLOWED[name], names)))


def test_lesson_data_may_be_read_but_not_changed_or_handed_on():
    names = audit.lesson_names(["CASES = [1, 2]\nimport torch"])
    for code in ("CASES.append(3)", "CASES[0] = 9", "def f(x):\n    x.clear()\nf(CASES)",
                 "CASES = []", "del CASES", "torch = None"):
        assert {r.rule for r in audit.audit(code, names)} >= {"lesson name"}, code
    assert audit.audit("n = len(CASES) + CASES[0]", names) == []


def test_a_refusal_names_the_line_and_the_rule():
    [refusal] = audit.audit("x = 1\ny = 2\nz = open('f')", audit.lesson_names([]))
    assert refusal.line == 3 and refusal.rule == "name" and refusal.statement == (3, 3)
    assert refusal.describe().startswith("line 3: `open` is not allowed")


def test_only_the_refused_statements_are_left_out():
    source = "a = 1\n@functools.cache\ndef f():\n    return open('x')\nb = 2"
    refusals = audit.audit(source, audit.lesson_names(["import functools"]))
    kept = audit.without_refused(source, refusals).splitlines()
    assert kept[0] == "a = 1" and kept[4] == "b = 2"
    assert all(line.startswith("# refused by the grader: ") for line in kept[1:4])


@pytest.mark.parametrize("body, problem", [
    ("int i = 0;", None),
    ("} int evil() { return 0; } void f() {", "closes a brace"),
    ("#include <cstdlib>", "may not contain `#`"),
    ("asm(\"trap;\");", "may not contain `asm`"),
    ("%> int x; <%", "may not contain"),
    ("if (1) {", "leaves 1 brace(s) open"),
])
def test_a_cuda_body_must_stay_inside_its_kernel(body, problem):
    found = audit.cuda_body_problem(body)
    assert (found is None) if problem is None else (problem in found), found


def test_an_edited_lesson_cell_runs_after_the_lessons_own_version():
    release = notebook("notebooks", "00_getting_started")
    theirs = notebook("solutions", "00_getting_started")
    demo = next(c for c in theirs.cells if c.get("id") == "cell-06")
    original = demo.source
    demo.source = original + "\nprint('mine')"
    cells = submission.prepare(release, theirs).notebook.cells
    at = next(i for i, c in enumerate(cells) if c.get("id") == "cell-06")
    assert cells[at].source == original and submission.learner_label(cells[at]) is None
    assert "\nprint('mine')\n" in cells[at + 1].source        # audited like any code of theirs
    assert submission.learner_label(cells[at + 1]) == "your edit of lesson cell cell-06"


def test_structure_deleted_duplicated_and_added_graded_cells():
    release = notebook("notebooks", "00_getting_started")
    theirs = notebook("solutions", "00_getting_started")
    test_bytes = next(c for c in theirs.cells
                      if c.metadata.get("nbgrader", {}).get("grade_id") == "test_bytes")
    theirs.cells.remove(test_bytes)
    solution = next(c for c in theirs.cells
                    if c.metadata.get("nbgrader", {}).get("grade_id") == "silu_mul_solution")
    theirs.cells.append(copy.deepcopy(solution))
    extra = nbformat.v4.new_code_cell("x = 1")
    extra.metadata["nbgrader"] = {"grade": True, "grade_id": "my_bonus", "points": 10,
                                  "solution": False, "locked": True, "schema_version": 3}
    theirs.cells.append(extra)
    prepared = submission.prepare(release, theirs)
    assert prepared.missing == {"test_bytes"}
    assert any("`silu_mul_solution` appears 2 times" in n for n in prepared.notes)
    assert any("`my_bonus` is not part of the lesson" in n for n in prepared.notes)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in prepared.notebook.cells]
    kept = [c for c in release.cells if not submission.is_demonstration(c)]
    assert len(prepared.notebook.cells) == len(kept) + 2     # + the extra cell, the guard's
    assert ids.count("silu_mul_solution") == 1 and "my_bonus" not in ids and "test_bytes" in ids
    assert sum(1 for c in prepared.notebook.cells if submission.is_graded(c)) == 3


def test_the_known_wrong_submissions_are_wrong_in_kernel_code_not_refused_by_the_audit():
    """tests/submissions/ must test the checks, so none of them may trip the audit (a
    refused cell would lose its points for another reason than the one it is about)."""
    for lesson in LESSONS:
        module = importlib.import_module(f"tests.submissions.lesson{lesson[:2]}")
        release, names = notebook("notebooks", lesson), trusted_names(lesson)
        for sub in module.SUBMISSIONS:
            with tempfile.TemporaryDirectory() as folder:
                path = sub.write(REPO / "solutions" / lesson / f"{lesson}.ipynb", Path(folder))
                theirs = nbformat.read(path / f"{lesson}.ipynb", as_version=4)
            prepared = submission.prepare(release, theirs)
            assert not prepared.refused, (lesson, sub.name, prepared.refused)
        assert names


def test_every_module_of_the_package_a_learner_may_not_import_is_also_out_of_reach():
    """A new module of the course glue (say, grade-class's workers) is unreachable through
    `tilegym_edu.<module>` too, not only by import: each module of the package is either one a
    learner may import or a forbidden module part."""
    from pathlib import Path

    import tilegym_edu
    package = Path(tilegym_edu.__file__).parent
    names = [p.stem for p in package.glob("*.py") if p.stem != "__init__"]
    names += [p.name for p in package.iterdir() if (p / "__init__.py").is_file()]
    missing = [name for name in names
               if f"tilegym_edu.{name}" not in audit.ALLOWED_IMPORTS
               and f"tilegym_edu.{name}" not in audit.FORBIDDEN_MODULE_PARTS]
    assert not missing, f"add to audit.FORBIDDEN_MODULE_PARTS (or ALLOWED_IMPORTS): {missing}"


def test_the_modules_a_learner_may_import_hold_no_table_their_code_could_change():
    """The audit refuses `check.TOLERANCES[...] = ...` as written; a table passed on first
    (`t = check.TOLERANCES; t[...] = ...`) is stopped by the table itself, read-only: the red
    team of 2026-12-05 found the tolerances writable, which let any wrong kernel pass."""
    writable = []
    for name in sorted(m for m in audit.ALLOWED_IMPORTS if m.startswith("tilegym_edu.")):
        module = importlib.import_module(name)
        for attribute in vars(module):
            value = getattr(module, attribute)
            if attribute.startswith("_") or isinstance(value, (type, types.ModuleType)):
                continue
            if isinstance(value, (set, bytearray)) or hasattr(type(value), "__setitem__"):
                writable.append(f"{name}.{attribute}")
    assert not writable, f"make these read-only (types.MappingProxyType, tuple): {writable}"


#: round 3 of the red team (2026-12-05): cells IPython would run differently from how they
#: read. A `...:` prompt on a cell's second line makes IPython strip it from every line (a
#: kernel's string then held a second `def` line for Triton's interpreter); one `>>>` line
#: turns on doctest mode, which dedents stretches of lines (a function's body ran at the top
#: level, where its parameter `getattr` was the builtin)
IPYTHON_REWRITES = {
    "continuation_prompts": 'notes = """\n...: IPython strips this from every line\n"""\n'
                            "@triton.jit\ndef k(x_ptr):\n"
                            '    more = """\n    ...: def k(x_ptr):\n    ...:     pass\n    #"""\n',
    "doctest_prompts": "prompt = 'one line \\\n>>> '\n\n\ndef helper(getattr):\n"
                       '    """IPython dedents the body."""\n    ...\n    getattr(helper, "x")\n'
                       '"""A top-level string ends the stretch."""\n',
}


@pytest.mark.parametrize("source", IPYTHON_REWRITES.values(), ids=IPYTHON_REWRITES.keys())
def test_a_cell_ipython_would_rewrite_is_refused(source):
    assert not audit.runs_as_written(source)
    refusals = audit.audit(source, audit.lesson_names(["import torch, triton"]))
    assert [r.rule for r in refusals] == ["syntax"] and "IPython would run" in refusals[0].message


@pytest.mark.parametrize("cleanup", ["try:\n        yield 1\n    finally:\n        done()",
                                     "with lock:\n        yield 1",
                                     "try:\n        yield 1\n    except ValueError:\n"
                                     "        done()"], ids=["finally", "with", "except"])
def test_a_generator_may_not_clean_up(cleanup):
    """Round 24 of the red team: a generator's finally ran when the graph that held it was
    freed, inside the lesson's model, and did the learner's work there."""
    source = f"def later():\n    {cleanup}\n"
    refused = audit.audit(source, audit.lesson_names(["import torch"]))
    assert [r.rule for r in refused] == ["generator"], audit.describe(refused)
    plain = ("def rows(n):\n    for i in range(n):\n        yield i\n"
             "def safe():\n    try:\n        return 1\n    finally:\n        pass\n"
             "def outer():\n    def inner():\n        yield 1\n    try:\n        return inner\n"
             "    finally:\n        pass\n")
    assert audit.audit(plain, audit.lesson_names(["import torch"])) == []


def test_every_name_a_test_cell_binds_is_the_tests_own():
    """Round 8 of the red team returned a hidden test's own `rules(...)` from the learner's
    function; round 22 read the test loop's matrix `x` and the hidden expected value `counted`,
    names a lesson cell also binds. Every name a test cell binds (hidden tests included, from
    the lesson's source), imports aside, is refused in learner code."""
    names = audit.lesson_names(["shared = 1"],
                               ["import math\ndef rules(n):\n    return n\nshared = 2"])
    assert names.tests == {"rules", "shared"}
    refused = audit.audit("def answer(n):\n    return rules(n) + shared + math.pi", names)
    assert [(r.rule, r.message.split("`")[1]) for r in refused] == [
        ("lesson name", "rules"), ("lesson name", "shared")]


#: what only the public API's list refuses (no forbidden name is in them): a standard module's
#: unlisted parts, and a kernel reading what is not Triton's or torch's
BEYOND_THE_PUBLIC_API = {
    "functools_part": ("import functools\nshow = functools.recursive_repr", "attribute"),
    "statistics_part": ("from statistics import NormalDist", "import"),
    "kernel_reads_an_internal":
        ("@triton.jit\ndef k(x_ptr):\n    n = x_ptr.arg_names\n", "kernel"),
}


@pytest.mark.parametrize("code, rule", BEYOND_THE_PUBLIC_API.values(),
                         ids=BEYOND_THE_PUBLIC_API.keys())
def test_names_outside_the_public_api_are_refused_where_the_audit_can_see_them(code, rule):
    refusals = audit.audit(code, audit.lesson_names(["import torch, triton\n"
                                                     "import triton.language as tl"]))
    assert [r.rule for r in refusals] == [rule], audit.describe(refusals)
    assert "names" in refusals[0].message


def test_what_the_lessons_own_cells_read_a_learner_may_read():
    """An attribute name the lesson's cells read (a model's layers) is allowed on any object,
    in a chain on a module too, besides the public API; forbidden names stay forbidden."""
    names = audit.lesson_names(["import torch\nq = model.self_attn.q_proj\n"
                                "b = torch.nn.attention.SDPBackend.FLASH_ATTENTION\n"
                                "g = model.__globals__"])
    assert {"self_attn", "q_proj", "FLASH_ATTENTION"} <= names.attributes
    assert "__globals__" not in names.attributes
    code = ("def f(layer):\n    return layer.self_attn.q_proj\n"
            "backend = torch.nn.attention.SDPBackend.FLASH_ATTENTION")
    assert audit.audit(code, names) == [], audit.describe(audit.audit(code, names))
    refused = audit.audit(code, audit.lesson_names(["import torch"]))
    assert [r.rule for r in refused] == ["attribute"]   # torch.nn.attention: not listed
