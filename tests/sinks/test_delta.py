"""A Delta Lake table as the output (NOTE [ parts committed to a Delta table ]): each part one
commit carrying the job's transaction; a resume goes on after the job's committed parts, a
kill leaves nothing a reader sees but whole parts; the table's columns, an overwrite and
time travel.  Tables are read by the files their log names (``DeltaTable.file_uris``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from pipeline.sinks.delta import uncommitted_files

from ..helpers import linear_model, linear_scores

deltalake = pytest.importorskip("deltalake", reason="needs deltalake: pip install 'ortpipe[tables]'")

WIDTH, ROWS = 3, 1000


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("delta") / "m.onnx"
    path.write_bytes(linear_model(WIDTH).SerializeToString())
    return path


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    rng = np.random.default_rng(0)
    table = pa.table({"id": np.arange(ROWS) * 7, **{f"f{i}": rng.standard_normal(ROWS) for i in range(WIDTH)}})
    path = tmp_path_factory.mktemp("delta") / "rows.parquet"
    pq.write_table(table, path)
    return path


def _read(table_path, version=None) -> pa.Table:
    """The rows a reader of the table sees: the files its log names for ``version``."""
    files = deltalake.DeltaTable(str(table_path), version=version).file_uris()
    return pq.read_table(files) if files else pa.table({})


def _scored(table_path) -> dict[int, float]:
    table = _read(table_path)
    ids = table["id"].to_pylist()
    assert len(ids) == len(set(ids)), "a row committed twice"
    values = np.asarray(table["y"].to_pylist(), np.float64).reshape(len(ids), -1)[:, 0]
    return dict(zip(ids, values.tolist(), strict=True))


def _run(model, source, output, *more):
    argv = ["run", str(model), "--input", str(source), "--output", str(output), "--no-progress", "--batch-size", "50"]
    return main([*argv, "--output-format", "delta", "--part-rows", "200", *more])


def test_each_part_is_a_commit_of_the_job_and_the_rows_are_session_runs(tmp_path, model, source, capsys):
    out = tmp_path / "scores"
    assert _run(model, source, out) == 0
    table = deltalake.DeltaTable(str(out))
    assert table.version() == 4  # five parts of 200 rows: five commits
    jobs = {commit.get("ortpipe.job") for commit in table.history()}
    (job,) = jobs
    assert table.transaction_version(job) == 4
    got, want = _scored(out), linear_scores(model, pq.read_table(source))
    assert got.keys() == want.keys()
    np.testing.assert_allclose([got[k] for k in want], list(want.values()), rtol=1e-6)
    # the same job again is refused, the table untouched; --resume finds nothing left to do
    assert _run(model, source, out) != 0
    assert "holds 1,000 rows of this job already (5 commits): --resume" in capsys.readouterr().err
    assert deltalake.DeltaTable(str(out)).version() == 4
    assert _run(model, source, out, "--resume") == 0
    assert deltalake.DeltaTable(str(out)).version() == 4


def test_a_resume_goes_on_after_the_jobs_committed_parts(tmp_path, model, source):
    out = tmp_path / "scores"
    assert _run(model, source, out, "--limit", "400") == 0
    assert len(_scored(out)) == 400
    assert _run(model, source, out, "--resume") == 0
    got, want = _scored(out), linear_scores(model, pq.read_table(source))
    assert got.keys() == want.keys()
    np.testing.assert_allclose([got[k] for k in want], list(want.values()), rtol=1e-6)


def test_a_killed_run_leaves_whole_parts_only_and_its_resume_commits_every_row_once(tmp_path, model, capsys):
    """Killed (SIGKILL) at a random moment after its first commit; readers see whole parts; resumed."""
    rng = np.random.default_rng(1)
    rows = 60_000
    table = pa.table({"id": np.arange(rows), **{f"f{i}": rng.standard_normal(rows) for i in range(WIDTH)}})
    source = tmp_path / "rows.parquet"
    pq.write_table(table, source, row_group_size=1000)
    out = tmp_path / "scores"
    argv = [sys.executable, "-m", "pipeline.cli", "run", str(model), "--input", str(source), "--output", str(out),
            "--output-format", "delta", "--part-rows", "2000", "--batch-size", "100", "--no-progress"]  # fmt: skip
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = out / "_delta_log"
    deadline = time.monotonic() + 120
    while not (log.is_dir() and len(list(log.glob("*.json"))) >= 1 + int(rng.integers(0, 4))):
        assert child.poll() is None, "the run ended before it was killed"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(float(rng.uniform(0, 0.05)))
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    seen = _read(out)
    assert seen.num_rows % 2000 == 0 and seen.num_rows < rows  # whole parts, and not all of them
    assert len(set(seen["id"].to_pylist())) == seen.num_rows
    job = {commit.get("ortpipe.job") for commit in deltalake.DeltaTable(str(out)).history()} - {None}
    left = uncommitted_files(out, job.pop())  # the part the kill cut short, if it had begun one
    assert main([*argv[3:], "--resume"]) == 0
    got = _read(out)
    assert sorted(got["id"].to_pylist()) == list(range(rows))
    said = capsys.readouterr().out
    assert ("file(s) of this job that no commit names" in said) == bool(left), said


def test_a_table_of_other_columns_is_refused_before_a_row_is_committed(tmp_path, model, source, capsys):
    out = tmp_path / "scores"
    deltalake.write_deltalake(out, pa.table({"id": [1, 2], "score": [0.5, 0.25]}))
    assert _run(model, source, out) != 0
    err = capsys.readouterr().err
    assert "the Delta table's columns are not this run's" in err
    assert "missing ['score'], new ['y']" in err
    assert deltalake.DeltaTable(str(out)).version() == 0


def test_another_jobs_rows_stay_and_overwrite_keeps_them_for_time_travel(tmp_path, model, source):
    out = tmp_path / "scores"
    assert _run(model, source, out, "--limit", "200") == 0  # another job: a row option differs below
    assert _run(model, source, out, "--rows", "200:400") == 0
    assert sorted(_scored(out)) == sorted(list(linear_scores(model, pq.read_table(source)))[:400])
    before = deltalake.DeltaTable(str(out)).version()
    assert _run(model, source, out, "--rows", "600:800", "--overwrite") == 0
    assert sorted(_scored(out)) == sorted(list(linear_scores(model, pq.read_table(source)))[600:800])
    assert _read(out, version=before).num_rows == 400  # the replaced rows, by time travel


def test_a_resume_reads_the_delta_input_version_its_first_parts_were_made_from(tmp_path, model):
    table = tmp_path / "input"
    rng = np.random.default_rng(2)
    first = pa.table({"id": np.arange(600), **{f"f{i}": rng.standard_normal(600) for i in range(WIDTH)}})
    deltalake.write_deltalake(table, first)
    out = tmp_path / "scores"
    assert _run(model, table, out, "--limit", "200") == 0
    more = pa.table({"id": np.arange(600, 700), **{f"f{i}": rng.standard_normal(100) for i in range(WIDTH)}})
    deltalake.write_deltalake(table, more, mode="append")
    assert _run(model, table, out, "--resume") == 0
    assert sorted(_scored(out)) == list(range(600))


def test_a_delta_output_is_a_local_folder(tmp_path, model, source, capsys):
    assert _run(model, source, "s3://bucket/scores") != 0
    assert "a Delta table in object storage is not written yet" in capsys.readouterr().err
    assert _run(model, source, tmp_path / "scores.csv") != 0
    assert "a Delta table is a folder" in capsys.readouterr().err


def test_two_runs_at_once_the_second_waits_its_turn_and_every_row_lands_once(tmp_path, model, source):
    """Two ortpipe jobs into one local Delta table at once: ortpipe's own lock (NOTE [ one writer ])
    refuses the second before it reads a row, in one line; run again, it appends beside the first's
    rows (writers of other engines meet Delta's own conflict rules)."""
    out = tmp_path / "scores"
    base = [sys.executable, "-m", "pipeline.cli", "run", str(model), "--input", str(source), "--output", str(out),
            "--output-format", "delta", "--part-rows", "50", "--batch-size", "50", "--no-progress"]  # fmt: skip
    jobs = [[*base, "--rows", "0:500"], [*base, "--rows", "500:1000"]]
    runs = [subprocess.Popen(job, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for job in jobs]
    said = [run.communicate(timeout=300)[1] for run in runs]
    for job, run, err in zip(jobs, runs, said, strict=True):
        if run.returncode != 0:
            assert "is being written by another ortpipe run" in err and len(err.strip().splitlines()) == 1, err
            assert main(job[3:]) == 0
    assert sorted(_scored(out)) == sorted(linear_scores(model, pq.read_table(source)))
