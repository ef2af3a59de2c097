"""A table format's folder (NOTE [ a table format's folder ]): a Delta table is read as the
version its log names, never as the loose Parquet files of all its versions; an Iceberg
table's folder, and a Delta one where a reader cannot follow its log, are refused."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.cli import main

from ..helpers import linear_model

deltalake = pytest.importorskip("deltalake", reason="needs deltalake: pip install 'ortpipe[tables]'")

WIDTH = 3


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("formats") / "m.onnx"
    path.write_bytes(linear_model(WIDTH).SerializeToString())
    return path


def _rows(first_id: int, count: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {"id": np.arange(first_id, first_id + count), **{f"f{i}": rng.standard_normal(count) for i in range(WIDTH)}}
    )


def _scores(model, table: pa.Table) -> dict[int, float]:
    x = np.stack([table[f"f{i}"].to_numpy() for i in range(WIDTH)], axis=1).astype(np.float32)
    y = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0][:, 0]
    return dict(zip(table["id"].to_pylist(), y.tolist(), strict=True))


def _scored(output) -> dict[int, float]:
    table = pq.read_table(output)
    ids = table["id"].to_pylist()
    assert len(ids) == len(set(ids)), "a row scored twice"
    scores = np.asarray(table["y"].to_pylist(), np.float64).reshape(len(ids), -1)[:, 0]
    return dict(zip(ids, scores.tolist(), strict=True))


def _run(model, source, output, *more):
    return main(["run", str(model), "--input", str(source), "--output", str(output), "--no-progress", *more])


def test_a_delta_table_overwritten_is_read_as_its_latest_version_not_as_loose_files(tmp_path, model, capsys):
    """The issue's case: written, then overwritten; the folder holds both versions' files."""
    table = tmp_path / "table"
    first, second = _rows(0, 500, seed=0), _rows(1000, 300, seed=1)
    deltalake.write_deltalake(table, first)
    deltalake.write_deltalake(table, second, mode="overwrite")
    assert len(list(table.glob("*.parquet"))) == 2  # the stale version's file is still there
    assert _run(model, table, tmp_path / "o.parquet", "--id-column", "id") == 0
    said = capsys.readouterr().out
    assert "Delta table version 1" in said
    got, want = _scored(tmp_path / "o.parquet"), _scores(model, second)
    assert got.keys() == want.keys()
    np.testing.assert_allclose([got[k] for k in want], list(want.values()), rtol=1e-6)


def test_an_earlier_version_is_read_by_input_version(tmp_path, model, capsys):
    table = tmp_path / "table"
    first = _rows(0, 200, seed=0)
    deltalake.write_deltalake(table, first)
    deltalake.write_deltalake(table, _rows(200, 100, seed=1), mode="append")
    assert _run(model, table, tmp_path / "v0.parquet", "--input-version", "0") == 0
    got, want = _scored(tmp_path / "v0.parquet"), _scores(model, first)
    assert got.keys() == want.keys()
    assert _run(model, table, tmp_path / "v9.parquet", "--input-version", "9") != 0
    assert "the Delta table cannot be read at version 9" in capsys.readouterr().err
    assert not (tmp_path / "v9.parquet").exists()


def test_a_resume_reads_the_version_its_first_run_read(tmp_path, model, capsys):
    """A commit lands between a run and its resume: the resume still reads the first run's version."""
    table, output = tmp_path / "table", tmp_path / "scores"
    first = _rows(0, 400, seed=0)
    deltalake.write_deltalake(table, first)
    common = ["--id-column", "id", "--batch-size", "50", "--part-rows", "100"]
    assert _run(model, table, output, *common, "--limit", "200") == 0
    deltalake.write_deltalake(table, _rows(400, 100, seed=1), mode="append")  # version 1
    assert _run(model, table, output, *common, "--resume") == 0
    assert "Delta table version 0" in capsys.readouterr().out
    got, want = _scored(output), _scores(model, first)
    assert got.keys() == want.keys()
    np.testing.assert_allclose([got[k] for k in want], list(want.values()), rtol=1e-6)


def test_a_version_for_anything_but_a_delta_table_is_refused(tmp_path, model, capsys):
    source = tmp_path / "t.parquet"
    pq.write_table(_rows(0, 10, seed=0), source)
    assert _run(model, source, tmp_path / "o.parquet", "--input-version", "0") != 0
    assert "a version (--input-version) is for a Delta table's folder" in capsys.readouterr().err


def test_a_partitioned_delta_table_is_refused_naming_its_partitions(tmp_path, model, capsys):
    table = tmp_path / "table"
    rows = _rows(0, 100, seed=0).append_column("day", pa.array(["a", "b"] * 50))
    deltalake.write_deltalake(table, rows, partition_by=["day"])
    assert _run(model, table, tmp_path / "o.parquet", "--input-column", "x=f0,f1,f2") != 0
    assert "partitioned by ['day']" in capsys.readouterr().err
    assert not (tmp_path / "o.parquet").exists()


def test_a_delta_table_with_deletion_vectors_is_refused(tmp_path, model, capsys):
    table = tmp_path / "table"
    deltalake.write_deltalake(table, _rows(0, 100, seed=0), configuration={"delta.enableDeletionVectors": "true"})
    assert _run(model, table, tmp_path / "o.parquet", "--id-column", "id") != 0
    assert "deletionVectors" in capsys.readouterr().err


def test_an_iceberg_table_folder_is_refused_not_read_as_loose_files(tmp_path, model, capsys):
    table = tmp_path / "table"
    (table / "metadata").mkdir(parents=True)
    (table / "data").mkdir()
    (table / "metadata" / "00001-a.metadata.json").write_text("{}")
    pq.write_table(_rows(0, 10, seed=0), table / "data" / "f.parquet")
    assert _run(model, table, tmp_path / "o.parquet") != 0
    assert "is an Apache Iceberg table" in capsys.readouterr().err


@pytest.mark.parametrize("how", ["text", "ray"])
def test_readers_that_cannot_follow_the_log_refuse_a_delta_table(tmp_path, how):
    """A text run and --ray read a folder through pyarrow's or Ray's datasets: refused, not loose."""
    from pipeline.cli.ray_run import _ray_input
    from pipeline.sources.stored_tables import open_dataset
    from pipeline.util.errors import SourceError

    table = tmp_path / "table"
    deltalake.write_deltalake(table, pa.table({"text": ["a b", "c"]}))
    deltalake.write_deltalake(table, pa.table({"text": ["d"]}), mode="overwrite")
    with pytest.raises(SourceError, match="is a Delta Lake table"):
        open_dataset(str(table)) if how == "text" else _ray_input(table)
