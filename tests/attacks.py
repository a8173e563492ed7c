"""The public corpus of attacks on the grade: what a learner's cell could try, by family (issue
"A grade that cannot be forged"), each with the audit rule that must refuse it. ``{fn}`` is
the exercise's function, so every attack is tried against every kernel exercise
(tests/test_audit.py). Families 4 (timed runs that differ from the checked one) and 6 (the
notebook's structure, a dying or stubborn kernel) are run, not read: tests/gpu/ and
tests/test_structure.py."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Attack:
    family: int
    name: str
    code: str      # statements appended to the exercise's solution cell
    rule: str      # the audit rule that refuses them

    @property
    def id(self) -> str:
        return f"{self.family}-{self.name}"


ATTACKS = [
    # 1. change what later test cells run
    Attack(1, "patch_grader", "grading.assert_correct = lambda *a, **k: None", "assign"),
    Attack(1, "patch_checker", "check.compare_output = lambda *a, **k: (True, 0.0, '')", "assign"),
    Attack(1, "patch_torch", "torch.equal = lambda *a, **k: True", "assign"),
    Attack(1, "patch_generator", "torch.Generator.manual_seed = lambda self, seed: self", "assign"),
    Attack(1, "setattr", "setattr(torch, 'isfinite', lambda t: t == t)", "name"),
    Attack(1, "builtins", "import builtins\nbuiltins.len = lambda x: 0", "import"),
    Attack(1, "shadow_builtin", "range = lambda *a: []", "lesson name"),
    Attack(1, "input_transformer",
           "get_ipython().input_transformers_cleanup.append(lambda lines: [])", "name"),
    Attack(1, "tensor_subclass", "class Agreeable(torch.Tensor):\n    pass", "class"),
    Attack(1, "own_equality", "class Equal:\n    def __eq__(self, other):\n        return True",
           "class"),
    Attack(1, "metaclass", "class Sneaky(metaclass=type):\n    pass", "class"),
    Attack(5, "html_in_the_feedback", "class Banner:\n    def _repr_html_(self):\n"
                                      "        return '<script>document.title = 1</script>'",
           "class"),
    # the red team of 2026-12-05: a module passed on (then `m.sys.modules` reaches anything),
    # a module's table changed, a loop writing an attribute, the guard's names shadowed
    Attack(1, "module_behind_a_parameter",
           "def modules_of(m):\n    return m.sys.modules\n"
           "found = modules_of(torch.nn.functional.torch)",
           "attribute"),
    Attack(1, "module_table", "from tilegym_edu import check\n"
                              "check.TOLERANCES[torch.float16] = 1.0", "assign"),
    Attack(1, "imported_table", "from tilegym_edu.check import TOLERANCES\n"
                                "TOLERANCES.update({{torch.float16: 1.0}})", "assign"),
    Attack(1, "loop_target_attribute", "def f(self):\n    for self.equal in [1]:\n        pass",
           "assign"),
    Attack(1, "shadow_the_write_guard", "def f(__tilegym_setattr__):\n    return 1", "name"),
    Attack(1, "the_shell_by_attribute", "def shell_of(m):\n    return m.get_ipython()",
           "attribute"),
    # round 2: a kernel whose source, read again by Triton's interpreter, runs other code; a
    # kernel writing an attribute; a name the interpreter puts in the notebook; classes made
    # by a function; attributes read by a class pattern, by getmembers, the interpreter's cache
    Attack(1, "kernel_source_read_again",
           "@triton.jit\ndef other_kernel(x_ptr):\n    notes = \"\"\"\ndef other_kernel(x_ptr):\n"
           "    pass\n    #\"\"\"", "kernel"),
    Attack(1, "kernel_writes_an_attribute", "@triton.jit\ndef other_kernel(self, v):\n"
                                            "    self.x = v", "kernel"),
    Attack(3, "interpreter_name", "def data_of(t):\n    return np.asarray(t)", "name"),
    Attack(1, "make_dataclass",
           "import dataclasses\nMade = dataclasses.make_dataclass('M', [], bases=(torch.Tensor,))",
           "attribute"),
    Attack(3, "class_pattern", "match print:\n    case object(__doc__=text):\n        pass",
           "syntax"),
    Attack(3, "getmembers", "def members(m):\n    return m.getmembers(m)", "attribute"),
    Attack(3, "interpreter_cache", "def cache_of(k):\n    return k.rewritten_fn", "attribute"),
    # round 4: attributes written by name, namespaces and modules as a call's value, setters
    # called directly, a forbidden part of torch re-exported, a dunder named by a string
    Attack(1, "update_wrapper", "import functools\n"
                                "functools.update_wrapper(print, print, (), ())", "attribute"),
    Attack(1, "global_enum", "import enum\nput_in_module = enum.global_enum", "import"),
    Attack(1, "property_setter", "def setter_of(p):\n    return p.fset", "attribute"),
    Attack(1, "reexported_part", "allocate = torch.cuda.change_current_allocator", "attribute"),
    Attack(3, "capture_scope", "def scope_of(f):\n    return f.get_capture_scope()", "attribute"),
    Attack(3, "device_module", "def module_of():\n    return torch.get_device_module('cuda')",
           "attribute"),
    Attack(3, "dunder_string", "def builtins_of(namespace):\n    return namespace['__builtins__']",
           "name"),
    # round 5: a method read from its class, given a class as self (`type` came back); a
    # finalizer writing the answer after the guarded call is in tests/test_defenses.py
    # round 8: a kernel keeping what it loaded in a Python dict between programs (the traffic
    # count, in the interpreter, missed the loads it saved)
    Attack(2, "kernel_keeps_tiles", "SAVED = {{}}\n@triton.jit\ndef keeper_kernel(x_ptr):\n"
                                    "    SAVED[0] = 1", "kernel"),
    # round 18: a kernel object's `kwargs` dict kept tiles between programs (`kept |= {...}`),
    # and a function taken out of it ran PyTorch's im2col in the middle of a launch
    Attack(2, "kernel_object_attribute", "@triton.jit\ndef box_kernel(x_ptr):\n    pass\n"
           "@triton.jit\ndef keeper_kernel(x_ptr):\n    kept = box_kernel.kwargs", "kernel"),
    Attack(2, "kernel_calls_what_it_took", "@triton.jit\ndef caller_kernel(x_ptr):\n"
           "    work = x_ptr.get(0)\n    work()", "kernel"),
    # round 19: a list Triton's dtype class shares across the process kept tiles between
    # programs; PyTorch's copies called from a kernel
    Attack(2, "shared_triton_list", "box = tl.dtype.OTHER_TYPES", "attribute"),
    Attack(2, "kernel_keeps_in_triton_s_list", "@triton.jit\ndef keeper_kernel(x_ptr):\n"
           "    box = x_ptr.dtype.FP_TYPES", "attribute"),
    Attack(2, "kernel_calls_pytorch", "@triton.jit\ndef copier_kernel(x_ptr):\n"
           "    torch.zeros(4)", "kernel"),
    # round 20: round 18's kernel object reached through a local alias, and its dict directly
    Attack(2, "kernel_held_in_a_local", "@triton.jit\ndef box_kernel(x_ptr):\n    pass\n"
           "@triton.jit\ndef keeper_kernel(x_ptr):\n    holder = box_kernel", "kernel"),
    Attack(2, "tl_function_held_in_a_local", "@triton.jit\ndef keeper_kernel(x_ptr):\n"
           "    f = tl.cdiv", "kernel"),
    Attack(2, "kernel_object_dict", "@triton.jit\ndef keeper_kernel(x_ptr):\n"
           "    store = x_ptr.kwargs", "kernel"),
    # round 21: the list inside a Triton tuple (a descriptor's shape), one for every program
    Attack(2, "kernel_keeps_in_a_tuple_s_list", "@triton.jit\ndef keeper_kernel(x_ptr):\n"
           "    store = x_ptr.shape.values", "kernel"),
    # round 23: enum's functional API made a class whose dunders were the learner's lambdas
    # (no constant spelt a dunder): an answer equal to anything
    Attack(1, "enum_functional_api", "import enum\nU = '_' * 2\n"
           "Anything = enum.Enum('Anything', [(U + 'eq' + U, lambda s, o: True), ('a', 1)])",
           "import"),
    # round 24: a generator's finally ran when the graph holding it was freed, in the lesson
    # model's own code (where the model may add and index), and did the learner's SwiGLU there
    Attack(1, "generator_cleanup", "def later(out):\n    try:\n        yield\n    finally:\n"
           "        out.zero_()", "generator"),
    # round 25: a dataclass's generated repr read a property, whose getter ran the learner's
    # code when the grader formatted an exception that held the object
    Attack(1, "property_getter", "class Note:\n    text = property(lambda self: 'x')", "name"),
    Attack(1, "cached_property", "import functools\nlater = functools.cached_property",
           "attribute"),
    # round 30: an argument's type differs between Triton's compiler (a float is an fp32
    # tensor) and its interpreter (a Python float), so `isinstance` hid from the compile check
    # (tilegym_edu/kernel_compiles.py) a branch that only the interpreter ran
    Attack(2, "kernel_tells_compiler_from_interpreter",
           "@triton.jit\ndef two_faced_kernel(x_ptr, scale):\n"
           "    if isinstance(scale, float):\n        tl.store(x_ptr, 0)", "kernel"),
    # round 32: a tl.constexpr is a Python value to the compiler, an object to the interpreter
    Attack(2, "kernel_is_on_a_constant",
           "@triton.jit\ndef two_faced_kernel(x_ptr):\n"
           "    if tl.arange(0, 16).shape[0] is 16:\n        tl.store(x_ptr, 0)", "kernel"),
    Attack(2, "kernel_asks_hasattr",
           "@triton.jit\ndef two_faced_kernel(x_ptr, t):\n"
           "    if hasattr(t, 'dtype'):\n        tl.store(x_ptr, 0)", "kernel"),
    # round 9: Triton's interpreter ran a plain function again from its text, unguarded
    Attack(1, "jit_called_on_a_function", "def poke(self, value):\n    self.passed = value\n"
                                          "poked = triton.jit(poke)", "kernel"),
    Attack(1, "jit_stored", "make_kernel = triton.jit", "kernel"),
    # round 15: a tensor's copy_ bound inside a kernel (the tensor passed as a constexpr), and a
    # kernel launched from a kernel (its stores were credited to the inner launch)
    Attack(2, "kernel_binds_a_tensor_method", "@triton.jit\ndef filler_kernel(T: tl.constexpr):\n"
                                              "    put = T.copy_\n    put(T)", "kernel"),
    # round 16: a kernel calling a function it was given (PyTorch's copies, or loaded values
    # kept in a dict, in the middle of the launch)
    Attack(2, "kernel_calls_its_argument", "@triton.jit\ndef caller_kernel(WORK: tl.constexpr):\n"
                                           "    WORK()", "kernel"),
    # round 17: the same function kept in a @triton.heuristics kernel's `values`
    Attack(2, "kernel_calls_a_stored_function", "@triton.jit\ndef caller_kernel(H: tl.constexpr):\n"
                                                "    H.values['KEEP']()", "kernel"),
    Attack(2, "kernel_launches_a_kernel", "@triton.jit\ndef inner_kernel(x_ptr):\n    pass\n"
                                          "@triton.jit\ndef outer_kernel(x_ptr):\n"
                                          "    inner_kernel[(1,)](x_ptr)", "kernel"),
    Attack(1, "jit_imported_as", "from triton import jit as make_kernel", "import"),
    Attack(1, "jit_function_class", "def carrier():\n    pass\n"
                                    "made = triton.JITFunction(carrier)", "attribute"),
    Attack(1, "dataclass_on_a_grader_class", "import dataclasses\nfrom tilegym_edu import check\n"
                                             "remade = dataclasses.dataclass(check.CaseResult)",
           "class"),
    Attack(1, "dataclass_imported_as", "from dataclasses import dataclass as remake", "import"),
    # round 10: a kernel nested in a function (its enclosing names become globals when the
    # interpreter runs its text again), decorators below jit (Triton compiles what they
    # return), a name the interpreter's rewritten kernels look up
    Attack(1, "kernel_in_a_function", "def outer(exec):\n    @triton.jit\n"
                                      "    def inner(x_ptr):\n        exec('1')\n    return inner",
           "kernel"),
    Attack(1, "decorator_below_jit", "import torch\n@triton.jit\n@torch.no_grad()\n"
                                     "def wrapped_kernel(x_ptr):\n    pass", "kernel"),
    Attack(2, "kernel_calls_python", "SAVED = {{}}\ndef keep(store, key, value):\n"
                                     "    store[key] = value\n@triton.jit\n"
                                     "def keeper_kernel(x_ptr):\n    keep(SAVED, 0, 1)", "kernel"),
    Attack(2, "kernel_keeps_tiles_in_a_default", "@triton.jit\n"
                                                 "def keeper_kernel(x_ptr, TILES={{}}):\n"
                                                 "    TILES |= {{0: 1}}", "kernel"),
    Attack(1, "interpreter_name_bound", "class interpreter_semantic:\n    pass", "lesson name"),
    Attack(1, "type_from_typing", "import typing\nmaker = typing.get_origin(typing.Type)",
           "attribute"),
    Attack(1, "method_from_its_class", "import collections\n"
                                       "maker = collections.Counter.copy(collections.Counter)",
           "attribute"),
    # 2. escape the shortcut guard
    Attack(2, "dispatch_off",
           "from torch.utils._python_dispatch import _disable_current_modes", "import"),
    Attack(2, "dispatch_off_by_attribute",
           "def {fn}(*args, **kwargs):\n"
           "    with torch.utils._python_dispatch._disable_current_modes():\n"
           "        return args[0]", "attribute"),
    Attack(2, "numpy", "import numpy as np", "import"),
    Attack(2, "python_lists", "def {fn}(*args, **kwargs):\n"
                              "    return torch.tensor([v for v in args[0].tolist()])",
           "attribute"),
    Attack(2, "item", "def {fn}(*args, **kwargs):\n    return args[0].item()", "attribute"),
    Attack(2, "torch_function_off", "def {fn}(*args, **kwargs):\n"
                                    "    with torch._C.DisableTorchFunction():\n"
                                    "        return args[0]", "attribute"),
    Attack(2, "apply_in_python", "def {fn}(*args, **kwargs):\n"
                                 "    return args[0].apply_(lambda v: v * 2)", "attribute"),
    Attack(2, "reexported_module", "saver = check.torch.save", "attribute"),
    # 3. read what it must not
    Attack(3, "caller_frames", "def {fn}(*args, **kwargs):\n"
                               "    probe = (i for i in [0])\n"
                               "    return probe.gi_frame.f_back.f_locals['ref']", "attribute"),
    Attack(3, "format_fields", "leak = '{{0.__globals__}}'.format(print)", "attribute"),
    Attack(3, "solutions_on_disk", "answer = open('../solutions/lesson.ipynb').read()", "name"),
    Attack(3, "reference_import", "from tilegym_edu.reference import matmul as mine", "import"),
    Attack(3, "reference_attribute", "kernel = tilegym_edu.reference.matmul.tiled_matmul_kernel",
           "attribute"),
    Attack(3, "inspect", "import inspect", "import"),
    Attack(3, "unwrapped", "raw = print.__wrapped__", "attribute"),
    Attack(3, "kernel_globals", "def globals_of(kernel):\n    return kernel.used_global_vals",
           "attribute"),
    # a compiled kernel's launcher called by hand, passing no launch hook: lesson 07 refuses
    # Triton launches in its graded calls from that hook
    Attack(3, "launch_without_hooks",
           "def relaunch(compiled, *args):\n"
           "    compiled.run(1, 1, 1, 0, compiled.function, compiled.packed_metadata, None, None,"
           " None, *args)", "attribute"),
    # 5. write what it must not (a measured figure in the grade table included)
    Attack(5, "forged_figure",
           "tilegym_edu.figures.emit(tilegym_edu.figures.ratio(9.0, 0.5, 'x', 'y'))", "attribute"),
    Attack(5, "forged_figure_import", "from tilegym_edu.figures import emit", "import"),
    Attack(5, "gradebook", "import sqlite3", "import"),
    Attack(5, "torch_save", "torch.save([99], '.grading/gradebook.db')", "attribute"),
    Attack(5, "os", "import os\nos.remove('notebooks')", "import"),
    Attack(5, "os_through_a_course_module", "check.torch.serialization.save([1], 'x')",
           "attribute"),
    Attack(5, "dunder_import", "__import__('os').system('true')", "name"),
    # round 14: a benchmark report writes results.html (and a CSV of the learner's strings)
    # wherever save_path says
    Attack(5, "perf_report_writes", "import triton.testing\n"
                                    "triton.testing.perf_report(None)(print).run(save_path='x')",
           "attribute"),
    Attack(5, "perf_report_imported", "from triton.testing import perf_report", "import"),
    Attack(5, "eval", "eval(\"__import__('os')\")", "name"),
    Attack(5, "exec", "exec('x = 1')", "name"),
    Attack(5, "string_annotation", "import typing\n"
                                   "def payload(x: \"(exec('x = 1'), int)[1]\"):\n    return x\n"
                                   "typing.get_type_hints(payload)", "annotation"),
    # 6. the kernel: dying or refusing to stop (these are also run, in tests/test_structure.py)
    Attack(6, "exit", "exit()", "name"),
    Attack(6, "ignores_interrupts", "try:\n    pass\nexcept KeyboardInterrupt:\n    pass",
           "except"),
    Attack(6, "bare_except", "try:\n    pass\nexcept:\n    pass", "except"),
    Attack(6, "signals", "import signal", "import"),
    Attack(6, "magic", "%time x = 1", "syntax"),
    Attack(6, "shell", "!rm -rf .grading", "syntax"),
    # 7. watch the checks as they run
    Attack(7, "input_history", "seen = In[-1]", "name"),
    Attack(7, "hidden_history", "seen = _ih", "name"),
    Attack(7, "trace", "import sys\nsys.settrace(lambda *a: None)", "import"),
    Attack(7, "gc_callbacks", "import gc", "import"),
    Attack(7, "threads", "import threading", "import"),
    Attack(7, "profiler", "watcher = torch.profiler.profile()", "attribute"),
    Attack(7, "autograd_hooks", "hooks = torch.autograd.graph.saved_tensors_hooks", "attribute"),
    Attack(7, "post_run_cell", "get_ipython().events.register('post_run_cell', print)", "name"),
    Attack(7, "module_hooks", "torch.nn.modules.module.register_module_forward_hook(print)",
           "attribute"),
]
