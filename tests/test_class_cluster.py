"""grade-class on a Dask cluster (tilegym_edu.class_cluster): a local cluster of two worker
processes, each offering one unit of a "GPU" resource as a real deployment's would (interpreter
mode here: there is no GPU), grades the class into the rows and gradebook one local worker
writes; and a scheduler that does not answer is a one-line error."""
import csv
import shutil

import pytest

from tests.test_class_parallel import gradebook_points
from tests.test_classroom import SANDBOX_FLAG, class_of_three
from tilegym_edu import cli

distributed = pytest.importorskip(
    "distributed", reason="the cluster engine needs `distributed`: pip install -e '.[cluster]' "
                          "(make test installs it)")


@pytest.mark.slow
def test_a_cluster_grades_the_class_as_a_local_worker_does(tmp_path, monkeypatch, capfd):
    """The rows a local worker writes for this class (tests/test_classroom.py checks them),
    less bob (a wrong answer grades as ada's right one does), so that the two workers grade
    the two submissions at once."""
    root, folder, _ = class_of_three(tmp_path)
    shutil.rmtree(folder / "bob")
    monkeypatch.setenv("TILEGYM_COURSE_ROOT", str(root))
    out = tmp_path / "grades.csv"
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  resources={"GPU": 1}, dashboard_address=None) as cluster:
        assert cli.main(["grade-class", "tiny", str(folder), "--csv", str(out),
                         "--scheduler", cluster.scheduler_address, *SANDBOX_FLAG]) == 0
    rows = {r["student"]: r for r in csv.DictReader(out.open())}
    assert (rows["ada"]["points"], rows["ada"]["test_double"], rows["ada"]["problems"]) == (
        "2", "2", "")
    assert (rows["eve"]["problems"].startswith("not graded:")
            and "not a valid notebook" in rows["eve"]["problems"])
    assert float(rows["ada"]["seconds"]) > 0
    assert gradebook_points(root, "ada") == 2
    assert (root / ".grading" / "feedback" / "ada" / "tiny" / "tiny.html").is_file()
    assert not (root / ".grading-cluster").exists(), "the tasks' copies (or their folder) kept"
    assert "[2/2]" in capfd.readouterr().err


def test_a_scheduler_that_does_not_answer_says_what_to_start(tmp_path, monkeypatch, capsys):
    root, folder, _ = class_of_three(tmp_path)
    monkeypatch.setenv("TILEGYM_COURSE_ROOT", str(root))
    monkeypatch.setattr("tilegym_edu.class_cluster.CONNECT_TIMEOUT_S", 1)
    assert cli.main(["grade-class", "tiny", str(folder), "--scheduler", "tcp://127.0.0.1:9",
                     *SANDBOX_FLAG]) == 2
    err = capsys.readouterr().err
    assert "no Dask scheduler answered at tcp://127.0.0.1:9" in err and "dask worker" in err


def test_workers_and_a_scheduler_are_refused_together(tmp_path, monkeypatch, capsys):
    root, folder, _ = class_of_three(tmp_path)
    monkeypatch.setenv("TILEGYM_COURSE_ROOT", str(root))
    assert cli.main(["grade-class", "tiny", str(folder), "--workers", "2", "--scheduler",
                     "tcp://127.0.0.1:9", *SANDBOX_FLAG]) == 2
    assert "--workers and --scheduler" in capsys.readouterr().err
