"""An Apache Iceberg table as the output (NOTE [ parts appended as Iceberg snapshots ]), in the
embedded SQLite catalog: each part one snapshot carrying the job's id; resume, a kill, the
table's columns, overwrite and time travel, and a catalog that is missing or cannot be opened."""

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

from ..helpers import linear_model, linear_scores

pytest.importorskip("pyiceberg", reason="needs pyiceberg: pip install 'ortpipe[tables]'")

WIDTH, ROWS = 3, 1000


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("ORTPIPE_ICEBERG_HOME", str(tmp_path / "iceberg"))
    return tmp_path / "iceberg"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("iceberg") / "m.onnx"
    path.write_bytes(linear_model(WIDTH).SerializeToString())
    return path


def _rows(count: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"id": np.arange(count) * 3, **{f"f{i}": rng.standard_normal(count) for i in range(WIDTH)}})


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    path = tmp_path_factory.mktemp("iceberg") / "rows.parquet"
    pq.write_table(_rows(ROWS, 0), path)
    return path


def _table(name="ns.scores"):
    from pipeline.sinks.iceberg import iceberg_catalog

    return iceberg_catalog().load_table(name)


def _scored(snapshot_id=None) -> dict[int, float]:
    rows = _table().scan(snapshot_id=snapshot_id).to_arrow()
    ids = rows["id"].to_pylist()
    assert len(ids) == len(set(ids)), "a row appended twice"
    values = np.asarray(rows["y"].to_pylist(), np.float64).reshape(len(ids), -1)[:, 0]
    return dict(zip(ids, values.tolist(), strict=True))


def _run(model, source, *more, output="ns.scores"):
    argv = ["run", str(model), "--input", str(source), "--output", output, "--no-progress", "--batch-size", "50"]
    return main([*argv, "--output-format", "iceberg", "--part-rows", "200", *more])


def test_each_part_is_a_snapshot_of_the_job_and_the_rows_are_session_runs(home, model, source, capsys):
    assert _run(model, source) == 0
    snapshots = _table().snapshots()
    assert [s.summary.get("ortpipe.part") for s in snapshots] == ["0", "1", "2", "3", "4"]
    assert len({s.summary.get("ortpipe.job") for s in snapshots}) == 1
    got, want = _scored(), linear_scores(model, pq.read_table(source))
    assert got.keys() == want.keys()
    np.testing.assert_allclose([got[k] for k in want], list(want.values()), rtol=1e-6)
    assert _run(model, source) != 0
    assert "holds 1,000 rows of this job already (5 snapshots): --resume" in capsys.readouterr().err
    assert len(_table().snapshots()) == 5


def test_a_resume_goes_on_after_the_jobs_snapshots(home, model, source):
    assert _run(model, source, "--limit", "400") == 0
    assert len(_scored()) == 400
    assert _run(model, source, "--resume") == 0
    assert _scored().keys() == linear_scores(model, pq.read_table(source)).keys()


def test_a_killed_run_leaves_whole_parts_only_and_its_resume_appends_every_row_once(home, tmp_path, model):
    rng = np.random.default_rng(1)
    rows = 40_000
    source = tmp_path / "rows.parquet"
    pq.write_table(_rows(rows, 1), source, row_group_size=1000)
    argv = [sys.executable, "-m", "pipeline.cli", "run", str(model), "--input", str(source), "--output", "ns.scores",
            "--output-format", "iceberg", "--part-rows", "2000", "--batch-size", "200", "--no-progress"]  # fmt: skip
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ))
    metadata = home / "warehouse" / "ns" / "scores" / "metadata"
    want = 2 + int(rng.integers(0, 3))  # the table's creation, then that many parts
    deadline = time.monotonic() + 120
    while not (metadata.is_dir() and len(list(metadata.glob("*.metadata.json"))) >= want):
        assert child.poll() is None, "the run ended before it was killed"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(float(rng.uniform(0, 0.1)))
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    seen = _table().scan().to_arrow()
    assert seen.num_rows % 2000 == 0 and seen.num_rows < rows
    assert main([*argv[3:], "--resume"]) == 0
    assert sorted(_table().scan().to_arrow()["id"].to_pylist()) == list(range(0, rows * 3, 3))


def test_a_table_of_other_columns_is_refused_and_an_overwrite_keeps_time_travel(home, model, source, capsys):
    from pipeline.sinks.iceberg import iceberg_catalog

    catalog = iceberg_catalog()
    catalog.create_namespace("ns")
    other = catalog.create_table("ns.scores", schema=pa.schema([("id", pa.int64()), ("score", pa.float64())]))
    other.append(pa.table({"id": [1, 2], "score": [0.5, 0.25]}))
    assert _run(model, source) != 0
    assert "missing ['score'], new ['y']" in capsys.readouterr().err
    assert len(_table().snapshots()) == 1
    assert _run(model, source, "--overwrite") != 0  # an overwrite replaces the rows, not the columns
    assert len(_table().snapshots()) == 1
    catalog.drop_table("ns.scores")
    assert _run(model, source, "--limit", "200") == 0
    before = _table().current_snapshot().snapshot_id
    assert _run(model, source, "--overwrite", "--rows", "400:600") == 0
    assert sorted(_scored()) == sorted(list(linear_scores(model, pq.read_table(source)))[400:600])
    assert len(_scored(before)) == 200  # time travel to the replaced rows


def test_a_catalog_that_is_missing_or_cannot_be_opened_is_said_in_a_line(home, model, source, capsys, monkeypatch):
    assert _run(model, source, "--catalog", "nowhere") != 0
    assert "no Iceberg catalog 'nowhere' is configured" in capsys.readouterr().err
    monkeypatch.setenv("PYICEBERG_CATALOG__BAD__TYPE", "sql")
    monkeypatch.setenv("PYICEBERG_CATALOG__BAD__URI", "sqlite:////no/such/folder/catalog.db")
    assert _run(model, source, "--catalog", "bad") != 0
    err = capsys.readouterr().err
    assert "the Iceberg catalog 'bad' cannot be opened" in err and len(err.strip().splitlines()) == 1
    assert _run(model, source, output="scores") != 0
    assert "an Iceberg table is named NAMESPACE.TABLE, got 'scores'" in capsys.readouterr().err


def test_an_iceberg_table_is_read_at_a_snapshot_and_a_resume_keeps_it(home, tmp_path, model, capsys):
    from pipeline.sinks.iceberg import iceberg_catalog

    catalog = iceberg_catalog()
    catalog.create_namespace("src")
    first = _rows(600, 5)
    table = catalog.create_table("src.features", schema=first.schema)
    table.append(first)
    old = table.current_snapshot().snapshot_id
    argv = ["run", str(model), "--input", "src.features", "--input-format", "iceberg", "--no-progress",
            "--batch-size", "50", "--part-rows", "100"]  # fmt: skip
    out = tmp_path / "scores"
    assert main([*argv, "--output", str(out), "--limit", "200"]) == 0
    table.append(_rows(700, 6).slice(600))  # a snapshot lands between the run and its resume
    assert main([*argv, "--output", str(out), "--resume"]) == 0
    assert f"at snapshot {old}" in capsys.readouterr().out
    got = pq.read_table(out)
    want = linear_scores(model, first)
    assert sorted(got["id"].to_pylist()) == sorted(want)
    np.testing.assert_allclose(got.sort_by("id")["y"].to_numpy(), [want[k] for k in sorted(want)], rtol=1e-6)
    # the current snapshot, and an old one by --input-version
    assert main([*argv, "--output", str(tmp_path / "now.parquet")]) == 0
    assert pq.read_table(tmp_path / "now.parquet").num_rows == 700
    assert main([*argv, "--output", str(tmp_path / "then.parquet"), "--input-version", str(old)]) == 0
    assert pq.read_table(tmp_path / "then.parquet").num_rows == 600
    assert main([*argv, "--output", str(tmp_path / "no.parquet"), "--input-version", "12345"]) != 0
    assert "has no snapshot 12345" in capsys.readouterr().err
    assert main(["run", str(model), "--input", "src.nothing", "--input-format", "iceberg", "--output",
                 str(tmp_path / "n.parquet")]) != 0  # fmt: skip
    assert "the Iceberg table 'src.nothing' cannot be read" in capsys.readouterr().err


def test_two_writers_at_once_each_finish_or_say_so_in_a_line_and_lose_nothing(home, tmp_path, model, source):
    """Two jobs (their rows' windows differ) append to one table at once, many small parts each:
    the catalog's commit decides between them; a loser exits with one line, its parts so far kept,
    and its --resume finishes; every row is in the table once."""
    from pipeline.sinks.iceberg import iceberg_catalog

    iceberg_catalog().create_namespace("ns")
    base = [sys.executable, "-m", "pipeline.cli", "run", str(model), "--input", str(source), "--output", "ns.scores",
            "--output-format", "iceberg", "--part-rows", "50", "--batch-size", "50", "--no-progress"]  # fmt: skip
    jobs = [[*base, "--rows", "0:500"], [*base, "--rows", "500:1000"]]
    runs = [subprocess.Popen(job, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for job in jobs]
    said = [run.communicate(timeout=300)[1] for run in runs]
    for job, run, err in zip(jobs, runs, said, strict=True):
        if run.returncode != 0:
            assert len(err.strip().splitlines()) == 1 and err.startswith("ortpipe: error: "), err
            assert main([*job[3:], "--resume"]) == 0
    ids = sorted(_table().scan().to_arrow()["id"].to_pylist())
    assert ids == sorted(linear_scores(model, pq.read_table(source)))
