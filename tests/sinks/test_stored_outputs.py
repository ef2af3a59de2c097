"""Issue 40: outputs in object storage, against a real S3-compatible server (SeaweedFS, started once
for this module): a data set under a prefix and one object, each equal to the same run written
locally; resumed, overwritten, locked across runs, refused in a line (NOTE [ stored outputs ])."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from pipeline.jobs import output_lock
from pipeline.jobs.output_lock import LEASE_S
from pipeline.sinks import SinkError
from pipeline.util.conditions import conditions_of
from pipeline.util.storage import StoredPath

from ..object_store import object_store

ROWS, FEATURES = 1200, 64


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with object_store(tmp_path_factory.mktemp("store")) as server:
        server.bucket("out")
        yield server


@pytest.fixture
def aws(store, monkeypatch):
    for name, value in store.environment.items():
        monkeypatch.setenv(name, value)
    return store


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    x = np.random.default_rng(0).random((ROWS, FEATURES), np.float32)
    path = tmp_path_factory.mktemp("in") / "x.parquet"
    pq.write_table(pa.table({"id": np.arange(5000, 5000 + ROWS), **{f"f{i}": x[:, i] for i in range(FEATURES)}}), path)
    return path


def _run(source, output, *more):
    argv = ["run", "mlp", "--input", str(source), "--output", str(output), "--id-column", "id"]
    return main([*argv, "--device", "cpu", "--no-progress", "--batch-size", "100", *more])


def _stored_table(store, path: str) -> pa.Table:
    return pq.read_table(path, filesystem=store.filesystem())


def _objects(store, prefix: str) -> list[str]:
    from pyarrow.fs import FileSelector

    infos = store.filesystem().get_file_info(FileSelector(prefix, allow_not_found=True, recursive=True))
    return sorted(info.path for info in infos)


def test_a_data_set_and_an_object_hold_what_a_local_run_writes(aws, table, tmp_path):
    assert _run(table, tmp_path / "local.parquet") == 0
    assert _run(table, "s3://out/set/", "--part-rows", "300") == 0
    assert _run(table, "s3://out/one.parquet") == 0
    want = pq.read_table(tmp_path / "local.parquet")
    assert _stored_table(aws, "out/set").equals(want)
    assert _stored_table(aws, "out/one.parquet").equals(want)
    assert _objects(aws, "out/set") == ["out/set/_SUCCESS"] + [f"out/set/part-0000{i}.parquet" for i in range(4)]
    beside = _objects(aws, "out")
    assert "out/.one.parquet.ortpipe-writing" not in beside  # copied to its name, then removed
    assert "out/.set.ortpipe-job.json" in beside and "out/.one.parquet.ortpipe-job.json" in beside
    assert not [name for name in beside if name.endswith("ortpipe-lock")]  # released


def test_a_stored_run_read_from_storage_too(aws, table, tmp_path):
    pq.write_table(pq.read_table(table), "out/input.parquet", filesystem=aws.filesystem())
    assert _run("s3://out/input.parquet", "s3://out/s2s/") == 0
    assert _run(table, tmp_path / "local.parquet") == 0
    assert _stored_table(aws, "out/s2s").equals(pq.read_table(tmp_path / "local.parquet"))


def _refused(capsys, *run) -> str:
    """The one line a refused run said (its exit status 1)."""
    capsys.readouterr()
    assert _run(*run) == 1
    said = capsys.readouterr().err
    assert said.startswith("ortpipe: error: ") and said.count("\n") == 1 and "Traceback" not in said
    return said


def test_an_earlier_output_is_refused_resumed_or_replaced_whole(aws, table, tmp_path, capsys):
    assert _run(table, "s3://out/again/", "--part-rows", "300") == 0
    assert "holds 4 part file(s) of an earlier run" in _refused(capsys, table, "s3://out/again/")
    assert _run(table, "s3://out/again/", "--resume") == 0  # every row there: nothing to add
    assert _stored_table(aws, "out/again").num_rows == ROWS
    assert _run(table, "s3://out/again/", "--overwrite", "--part-rows", "600", "--rows", "0:900") == 0
    assert _objects(aws, "out/again") == [
        "out/again/_SUCCESS",
        "out/again/part-00000.parquet",
        "out/again/part-00001.parquet",
    ]
    assert _stored_table(aws, "out/again").num_rows == 900
    assert not _objects(aws, "out/.ortpipe-overwrite.again")
    assert "an object cannot be appended to" in _refused(capsys, table, "s3://out/one-file.parquet", "--resume")


def test_missing_bucket_bad_credentials_and_other_formats_said_in_a_line(aws, table, monkeypatch, capsys):
    assert "the bucket 'nothere' does not exist" in _refused(capsys, table, "s3://nothere/set/")
    assert "outputs in object storage are Parquet" in _refused(capsys, table, "s3://out/x.csv")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    said = _refused(capsys, table, "s3://out/creds/")
    assert "'s3://out/creds/" in said or "'s3://out" in said
    assert "credentials were refused" in said or "access was denied" in said


def test_the_lock_refuses_a_second_writer_and_a_lapsed_one_is_taken_over(aws):
    url = "s3://out/locked/"
    with output_lock(url, SinkError):
        with pytest.raises(SinkError, match="being written by another ortpipe run"):
            with output_lock(url, SinkError):
                pass
    conditions = conditions_of(StoredPath.of(url))
    assert conditions is not None
    # a killed run's lock, last renewed longer ago than the lease: taken over
    stale = {"host": "gone", "pid": 1, "renewed": 0.0}
    conditions.create(".x.ortpipe-lock", json.dumps(stale).encode())
    with output_lock("s3://out/x/", SinkError):
        body, _ = conditions.read(".x.ortpipe-lock")
        assert json.loads(body)["pid"] != 1 and LEASE_S > 0
    assert conditions.read(".x.ortpipe-lock") is None  # released
