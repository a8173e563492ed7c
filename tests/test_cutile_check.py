"""tilegym_edu.cutile_check: what the optional cuTile track needs, on made-up machines (the
facts of each case), and the doctor's line on this one."""
import pytest

from tilegym_edu import cli, cutile_check
from tilegym_edu.cutile_check import CutileFacts

GOOD_TOOLCHAIN = {name: "13.4.92" for name in cutile_check.TOOLCHAIN}
H200 = dict(compute_capability=(9, 0), driver="580.159.04")


def facts(cuda_tile="1.7.0", toolchain=None, **gpu):
    return CutileFacts(cuda_tile=cuda_tile, toolchain=toolchain or dict(GOOD_TOOLCHAIN),
                       **{**H200, **gpu})


def test_the_toolchain_that_ran_on_the_h200_has_no_problems():
    assert cutile_check.problems(facts()) == []
    assert cutile_check.status(facts()).startswith("cuda-tile 1.7.0; nvidia-cuda-tileiras 13.4.92")


def test_not_installed_is_not_a_problem_and_says_how_to_install():
    none = facts(cuda_tile=None, toolchain={n: None for n in cutile_check.TOOLCHAIN})
    assert cutile_check.problems(none) == []
    assert "not installed (optional" in cutile_check.status(none)
    assert "make cutile" in cutile_check.status(none)


@pytest.mark.parametrize("case, message", [
    (dict(compute_capability=None, driver=None), "no CPU interpreter"),
    (dict(compute_capability=(7, 5)), "this GPU is 7.5"),
    (dict(driver="570.86.10"), "r580 or later; this one is 570.86.10"),
    (dict(toolchain={**GOOD_TOOLCHAIN, "nvidia-nvvm": None}), "not installed: nvidia-nvvm"),
    (dict(toolchain={**GOOD_TOOLCHAIN, "nvidia-cuda-nvcc": "13.5.37"}),
     "share one major.minor version; installed: nvidia-cuda-tileiras 13.4.92, "
     "nvidia-cuda-nvcc 13.5.37"),
    (dict(toolchain={n: "13.2.51" for n in cutile_check.TOOLCHAIN}),
     "on Hopper tileiras fails with a toolchain older than 13.3"),
], ids=["no_gpu", "old_gpu", "old_driver", "missing_nvvm", "mixed_versions", "old_on_hopper"])
def test_each_problem_names_what_is_wrong_and_the_fix(case, message):
    found = cutile_check.problems(facts(**case))
    assert len(found) == 1 and message in found[0].summary, found
    assert found[0].fix


def test_an_old_toolchain_is_fine_off_hopper():
    old = {n: "13.2.51" for n in cutile_check.TOOLCHAIN}
    assert cutile_check.problems(facts(toolchain=old, compute_capability=(8, 9))) == []


def test_the_doctor_reports_cutile(capsys):
    assert cli.main(["doctor"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("cuTile"))
    assert line.split(None, 1)[1] == cutile_check.status(CutileFacts.of_this_machine())
