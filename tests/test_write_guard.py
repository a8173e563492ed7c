"""The run-time half of the audit (tilegym_edu.write_guard): a learner cell's attribute writes
reach only the learner's own objects. The rewriting is tested on plain Python here, and in a
real grading kernel (IPython, nbgrader) through a tiny lesson."""
import ast
import linecache

import nbformat
import pytest
import torch
import triton

from tests.test_structure import by_id, cell, hand_in, lesson
from tilegym_edu import api_names, autograde, write_guard
from tilegym_edu.grading import SubmissionRefused

pytestmark = pytest.mark.beside


def run_learner_cell(source: str, namespace: dict | None = None) -> dict:
    """``source`` run as a graded notebook runs a learner's cell (marked, rewritten), in
    ``namespace`` (a fresh one with the guard's names by default)."""
    namespace = namespace if namespace is not None else {**write_guard.GUARD_NAMES,
                                                         "torch": torch}
    tree = write_guard.rewrite(ast.parse(write_guard.mark(source)))
    exec(compile(tree, "<learner cell>", "exec"), namespace)   # noqa: S102 - the test's own code
    return namespace


OWN_CLASS = """
class Box:
    def __init__(self, value):
        self.value = value
        self.count: int = 0

    def bump(self, by):
        self.count += by
        self.a, (self.b, *self.rest) = 1, (2, 3, 4)
        del self.rest
        return self

box = Box(5).bump(2)
"""


def test_a_learner_writes_the_attributes_of_its_own_objects():
    box = run_learner_cell(OWN_CLASS)["box"]
    assert (box.value, box.count, box.a, box.b) == (5, 2, 1, 2) and not hasattr(box, "rest")


def test_an_autograd_function_writes_its_ctx():
    found = run_learner_cell(
        "class Scale(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, factor):\n"
        "        ctx.factor = factor\n"
        "        return x * factor\n"
        "    @staticmethod\n"
        "    def backward(ctx, grad):\n"
        "        return grad * ctx.factor, None\n"
        "x = torch.ones(3, requires_grad=True)\n"
        "Scale.apply(x, 3.0).sum().backward()\n"
        "grad = x.grad\n")
    assert torch.equal(found["grad"], torch.full((3,), 3.0))


@pytest.mark.parametrize("attack", [
    # a function with a parameter named self, given a library class (the red team's a1, a4)
    "def put(self, value):\n    self.equal = value\nput(torch.Tensor, lambda a, b: True)",
    # a method of the learner's class called unbound on someone else's object
    "class Box:\n    def put(self, value):\n        self.equal = value\n"
    "Box.put(torch.Tensor, lambda a, b: True)",
    "def drop(self):\n    del self.equal\ndrop(torch.Tensor)",
    "def grow(self):\n    self.equal += 1\ngrow(torch.Tensor)",
    # an autograd ctx that is not the learner's Function's
    "def put(ctx, value):\n    ctx.scale = value\n"
    "put((torch.ones(1, requires_grad=True) * 2).grad_fn, 0)",
], ids=["function", "unbound_method", "delete", "augmented", "foreign_ctx"])
def test_writes_to_anything_else_are_refused_as_they_run(attack):
    equal = torch.Tensor.equal
    with pytest.raises(SubmissionRefused, match="only attributes of your own classes"):
        run_learner_cell(attack)
    assert torch.Tensor.equal is equal


def test_registering_a_class_is_the_transformers_alone():
    with pytest.raises(ValueError, match="__tilegym"):
        run_learner_cell("x = '__tilegym_learner_class__'")
    with pytest.raises(ValueError, match="target of a for loop"):
        run_learner_cell("def f(self):\n    for self.i in range(2):\n        pass")


def test_cells_without_the_marker_are_not_rewritten():
    tree = ast.parse("torch.Tensor.size = 1")
    assert write_guard.rewrite(tree) is tree and ast.dump(tree) == ast.dump(
        ast.parse("torch.Tensor.size = 1"))


def test_in_a_grading_kernel_a_write_to_a_library_class_costs_only_its_cell(tmp_path):
    """The red team's way round the audit, in a real grading kernel: the write is refused
    when it runs, torch keeps its own Tensor.equal, the learner's other code still runs."""
    root = tmp_path / "course"
    nb = lesson(root, [
        cell("def double(x):\n    return 2 * x", "double"),
        cell("assert double(21) == 42", "test_double", 2),
        cell("import torch\nassert not torch.zeros(1).equal(torch.ones(1))", "test_torch", 1)])
    theirs = nbformat.from_dict(nb)
    theirs.cells[0].source = (
        "import torch\n"
        "def double(x):\n    return 2 * x\n"
        "class Box:\n    def __init__(self):\n        self.v = 1\n"
        "box = Box()\n"
        "def put(self, value):\n    self.equal = value\n"
        "put(torch.Tensor, lambda a, b: True)")
    report = autograde.grade("tiny", hand_in(tmp_path / "in", theirs), root=root,
                             student="guarded")
    results = by_id(report)
    assert results["test_double"].points == 2 and results["test_torch"].points == 1
    graded = nbformat.read(root / ".grading" / "autograded" / "guarded" / "tiny" / "tiny.ipynb",
                           as_version=4)
    errors = [o for c in graded.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert [o.ename for o in errors] == ["SubmissionRefused"], errors
    assert "writing `equal` of _TensorMeta" in errors[0].evalue


def test_html_a_cell_displays_reaches_the_feedback_without_its_scripts(tmp_path):
    """Feedback opens in a browser (the instructor's too, in the formgrader): displayed HTML
    is sanitized. A learner's class may not define `_repr_html_` (the audit's class rule);
    here a lesson cell displays it, which shows what sanitizing keeps and drops."""
    root = tmp_path / "course"
    show = nbformat.v4.new_code_cell(
        "class Shown:\n    def _repr_html_(self):\n"
        "        return '<b>kept</b><script>document.title = \"ran\"</script>'\nShown()")
    nb = lesson(root, [cell("def double(x):\n    return 2 * x", "double"), show,
                       cell("assert double(21) == 42", "test_double", 1)])
    report = autograde.grade("tiny", hand_in(tmp_path / "in", nbformat.from_dict(nb)),
                             root=root, student="shown")
    html = (root / ".grading" / "feedback" / "shown" / "tiny" / "tiny.html").read_text()
    assert by_id(report)["test_double"].points == 1
    assert "<b>kept</b>&lt;script&gt;" in html and "<script>document.title" not in html


def test_a_learner_reads_any_attribute_of_its_own_objects_and_named_tuples():
    found = run_learner_cell(
        "import collections\n"
        "class Tiles:\n"
        "    def __init__(self):\n"
        "        self.block_m_of_mine = 64\n"
        "    def twice_mine(self):\n"
        "        return 2 * self.block_m_of_mine\n"
        "Pair = collections.namedtuple('Pair', 'left_of_mine right')\n"
        "tiles = Tiles()\n"
        "seen = (tiles.block_m_of_mine, tiles.twice_mine(), Pair(1, 2).left_of_mine)\n",
        {**write_guard.GUARD_NAMES})
    assert found["seen"] == (64, 128, 1)


#: reads of names outside the public API from objects that are not the learner's: each a way
#: from a public object to the machinery behind it
FOREIGN_READS = {
    "a kernel's parameters": "@triton.jit\ndef k(x_ptr):\n    pass\nfound = k.params",
    "a property's getter": "class Box:\n    @property\n    def side(self):\n        return 1\n"
                           "found = Box.side.fget",
}


@pytest.mark.parametrize("source", FOREIGN_READS.values(), ids=FOREIGN_READS.keys())
def test_names_outside_the_public_api_are_read_only_from_the_learners_objects(source):
    namespace = {**write_guard.GUARD_NAMES, "triton": triton}
    with pytest.raises(SubmissionRefused, match="public names"):
        run_learner_cell(source, namespace)


def test_the_lessons_attribute_names_are_read_without_a_check():
    class Layer:   # the lesson's object, not the learner's
        q_proj_of_the_lesson = 3
    source = "found = layer.q_proj_of_the_lesson"
    tree = write_guard.rewrite(ast.parse(write_guard.mark(source)),
                               api_names.public_api() | {"q_proj_of_the_lesson"})
    namespace = {**write_guard.GUARD_NAMES, "layer": Layer()}
    exec(compile(tree, "<learner cell>", "exec"), namespace)   # noqa: S102 - the test's own code
    assert namespace["found"] == 3
    with pytest.raises(SubmissionRefused):
        run_learner_cell(source, {**write_guard.GUARD_NAMES, "layer": Layer()})


def learner_function(source: str, name: str, namespace: dict) -> object:
    """The function ``name`` of a learner cell ``source``, defined as the grading kernel
    defines it: rewritten, and its text in linecache (where IPython keeps a cell's), which is
    what Triton's interpreter reads to run it again."""
    text = write_guard.mark(source)
    filename = f"<learner cell {abs(hash(text))}>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    tree = write_guard.rewrite(ast.parse(text))
    exec(compile(tree, filename, "exec"), namespace)   # noqa: S102 - the test's own code
    return namespace[name]


@pytest.fixture
def guarded_interpreter(monkeypatch):
    """Triton's interpreter as the grading kernel patches it (undone after the test)."""
    from triton.runtime import interpreter
    rewriter = interpreter.FunctionRewriter
    for name in ("_find_def", "_transform_ast", "tilegym_guarded"):
        if name in vars(rewriter):
            monkeypatch.setattr(rewriter, name, vars(rewriter)[name])
    monkeypatch.setattr(rewriter, "tilegym_guarded", False, raising=False)
    write_guard.guard_interpreter(api_names.public_api() - api_names.file_system_names())
    return interpreter.InterpretedFunction


def test_triton_runs_a_learner_function_again_as_guarded_as_its_cell(guarded_interpreter):
    """Round 9: ``triton.jit(poke)(SomeGraderClass, value)`` ran ``poke`` again from its text,
    without the write guard, and set an attribute of the grader's result class."""
    class Foreign:
        passed = False
    namespace = {**write_guard.GUARD_NAMES, "tl": triton.language}
    poke = learner_function("def poke(self, value):\n    self.passed = value\n", "poke",
                            namespace)
    with pytest.raises(Exception, match="SubmissionRefused.*writing `passed`"):
        guarded_interpreter(poke)(Foreign, True)     # Triton wraps it in an InterpreterError
    assert Foreign.passed is False


def test_triton_runs_a_learner_function_from_its_own_def_line(guarded_interpreter):
    """Round 9: a line starting with `def ` inside a string was where Triton's interpreter
    started running (the last such line): code the audit had read as a string."""
    source = ('def carrier():\n'
              '    text = """\n'
              'def carrier():\n'
              '    return "the payload ran"\n'
              '    rest = \'\'\'"""\n'
              '    return "the function ran"  # \'\'\'\n')
    namespace = {**write_guard.GUARD_NAMES, "tl": triton.language}
    carrier = learner_function(source, "carrier", namespace)
    assert guarded_interpreter(carrier)() == "the function ran"


def test_a_path_from_the_course_cannot_touch_the_file_system(tmp_path):
    """Round 9 (no points, unsandboxed only): `device.cache_dir() / "/any/file"` then
    `.replace(...)` moved any file; `replace` is public (`str.replace`), so on a path the guard
    refuses it as it runs."""
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    namespace = {**write_guard.GUARD_NAMES, "here": tmp_path}
    with pytest.raises(SubmissionRefused, match="touches the file system"):
        run_learner_cell("(here / 'victim.txt').replace(here / 'moved.txt')", namespace)
    assert victim.exists()
    assert run_learner_cell("fixed = 'a-b'.replace('-', '_')", namespace)["fixed"] == "a_b"


def closure(namespace: dict) -> object:
    """A learner cell's closure over a parameter named `exec`."""
    return learner_function("def outer(exec):\n    def inner():\n        return exec\n"
                            "    return inner\nmade = outer(1)\n", "made", namespace)


def wrapper(namespace: dict) -> object:
    """A wrapper like torch.no_grad()'s (functools.wraps, which learner code may not read) of
    a learner cell's function, in the notebook's globals, where Triton finds `tl`."""
    learner_function("def plain():\n    return 1\n", "plain", namespace)
    exec("import functools\n@functools.wraps(plain)\ndef made():\n    return plain()",  # noqa: S102
         namespace)
    return namespace["made"]


@pytest.mark.parametrize("make", [closure, wrapper], ids=["a closure", "a wrapper"])
def test_triton_refuses_to_run_a_wrapper_or_a_closure_again(guarded_interpreter, make):
    """Round 10: Triton's interpreter runs a function's text at the top level of its module's
    globals: a closure's enclosing names (a parameter named `exec`) became the builtins there,
    and a wrapper's text was the wrapped learner function's, run in torch's globals."""
    made = make({**write_guard.GUARD_NAMES, "tl": triton.language})
    with pytest.raises(Exception, match="cannot run .*(wraps another|inside another)"):
        guarded_interpreter(made)()
