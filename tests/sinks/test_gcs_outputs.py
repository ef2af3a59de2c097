"""Outputs and inputs in Google Cloud Storage, against a real GCS emulator (fake-gcs-server,
reached through ``STORAGE_EMULATOR_HOST``, NOTE [ GCS emulator ]), in what is GCS's own: a store
whose listing shows no prefix as a folder (NOTE [ prefixes as folders ]), a missing bucket, a bad
emulator address, a run killed at a random moment.  What GCS and Azure do alike (a data set, an
object, an input, an earlier output refused, resumed or replaced whole, the lock): ``test_stores``."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.cli import main
from pipeline.sinks.stored import MOVING, finish_stored_replacing
from pipeline.util.storage import StoredPath

from .stored_jobs import KILL_ROWS, argv_of, killed_mid_run, objects, only_whole_parts, scored

#: this module's bucket in the session's GCS emulator (``gcs``: tests/conftest.py)
BUCKET = "gcs-out"


def test_a_killed_overwrite_is_finished_from_its_staging_prefix(gcs):
    """``MOVING`` written, the copies cut short: the next open finishes them (the staging prefix
    holds the new data set as a prefix, which only a listing of everything under it shows)."""
    fs = gcs.filesystem()
    old = pa.table({"x": [1, 2]})
    new = pa.table({"x": [3, 4, 5]})
    pq.write_table(old, f"{BUCKET}/killed/part-00000.parquet", filesystem=fs)
    pq.write_table(old, f"{BUCKET}/killed/part-00001.parquet", filesystem=fs)
    staging = f"{BUCKET}/.ortpipe-overwrite.killed"
    pq.write_table(new, f"{staging}/killed/part-00000.parquet", filesystem=fs)
    with fs.open_output_stream(f"{staging}/killed/_SUCCESS"):
        pass
    with fs.open_output_stream(f"{staging}/{MOVING}"):
        pass
    target = StoredPath.of(f"gs://{BUCKET}/killed")
    assert [entry.name for entry in target.parent.iterdir() if entry.name.startswith(".ortpipe")] == [
        ".ortpipe-overwrite.killed"
    ]
    assert finish_stored_replacing(target)
    assert objects(gcs, f"{BUCKET}/killed") == [f"{BUCKET}/killed/_SUCCESS", f"{BUCKET}/killed/part-00000.parquet"]
    assert pq.read_table(f"{BUCKET}/killed", filesystem=fs).equals(new)
    assert not objects(gcs, staging)


def test_a_missing_bucket_and_a_bad_emulator_address_are_said_in_a_line(gcs, table, monkeypatch, capsys):
    capsys.readouterr()
    assert scored(table, "gs://nothere/set/") == 1
    said = capsys.readouterr().err
    assert "the bucket 'nothere' does not exist" in said and said.count("\n") == 1
    assert scored("gs://nothere/x.parquet", f"gs://{BUCKET}/from-nowhere/") == 1  # an input's missing bucket too
    assert "the bucket 'nothere' does not exist" in capsys.readouterr().err
    assert scored(f"gs://{BUCKET}/absent.parquet", f"gs://{BUCKET}/from-nothing/") == 1
    assert "nothing is stored there" in capsys.readouterr().err
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:1/some/path")
    assert scored(table, f"gs://{BUCKET}/bad/") == 1
    said = capsys.readouterr().err
    assert "STORAGE_EMULATOR_HOST='http://127.0.0.1:1/some/path': expected http://host:port" in said


def test_killed_at_a_random_moment_then_resumed_every_row_once(gcs, long_job):
    """A GCS upload never finalized is never seen: a killed run leaves whole parts only.  (One
    kill: the chain of kills and resumes, and an overwrite killed midway, are S3's tests - the
    sink's logic, the same on both stores; what is GCS's own, its listing of a staged data set,
    is tested above without a kill.)"""
    source, whole = long_job
    output = f"gs://{BUCKET}/killed-runs/"
    killed_mid_run(gcs, argv_of(source, output), f"{BUCKET}/killed-runs", np.random.default_rng())
    kept = only_whole_parts(gcs, f"{BUCKET}/killed-runs")
    assert kept % 2048 == 0 and kept < KILL_ROWS  # whole parts only, nothing half-written
    assert main(argv_of(source, output, "--resume")) == 0
    assert pq.read_table(f"{BUCKET}/killed-runs", filesystem=gcs.filesystem()).equals(whole)
