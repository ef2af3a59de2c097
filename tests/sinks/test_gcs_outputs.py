"""Outputs and inputs in Google Cloud Storage, against a real GCS emulator (fake-gcs-server,
reached through ``STORAGE_EMULATOR_HOST``, NOTE [ GCS emulator ]): what the S3 tests prove of a
data set, an object and the lock across machines (google-cloud-storage's conditional writes on
an object's generation), on a store whose listing shows no prefix as a folder
(NOTE [ prefixes as folders ])."""

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


def test_a_data_set_and_an_object_hold_what_a_local_run_writes(gcs, table, local, capsys):
    assert scored(table, f"gs://{BUCKET}/set/", "--part-rows", "300") == 0
    assert "no lock" not in capsys.readouterr().err  # locked, by google-cloud-storage's conditional writes
    assert scored(table, f"gs://{BUCKET}/one.parquet") == 0
    fs = gcs.filesystem()
    assert pq.read_table(f"{BUCKET}/set", filesystem=fs).equals(local)
    assert pq.read_table(f"{BUCKET}/one.parquet", filesystem=fs).equals(local)
    parts = [f"{BUCKET}/set/part-0000{i}.parquet" for i in range(4)]
    assert objects(gcs, f"{BUCKET}/set") == [f"{BUCKET}/set/_SUCCESS", *parts]
    assert not [name for name in objects(gcs, BUCKET) if name.endswith("ortpipe-lock")]  # released


def test_a_run_reads_its_input_from_gcs_too(gcs, table, local):
    pq.write_table(pq.read_table(table), f"{BUCKET}/input.parquet", filesystem=gcs.filesystem())
    assert scored(f"gs://{BUCKET}/input.parquet", f"gs://{BUCKET}/read/") == 0
    assert pq.read_table(f"{BUCKET}/read", filesystem=gcs.filesystem()).equals(local)


def test_an_earlier_output_is_refused_resumed_or_replaced_whole(gcs, table, local, capsys):
    """The overwrite is the case a listing without folders broke: its staging prefix holds the
    new data set as a prefix, which looked empty, so nothing was copied and the run said 0."""
    url = f"gs://{BUCKET}/again/"
    assert scored(table, url, "--part-rows", "300") == 0
    capsys.readouterr()
    assert scored(table, url) == 1
    assert "holds 4 part file(s) of an earlier run" in capsys.readouterr().err
    assert scored(table, url, "--resume") == 0  # every row there: nothing to add
    assert scored(table, url, "--overwrite", "--part-rows", "600", "--rows", "0:900") == 0
    names = objects(gcs, f"{BUCKET}/again")
    assert names == [
        f"{BUCKET}/again/_SUCCESS",
        f"{BUCKET}/again/part-00000.parquet",
        f"{BUCKET}/again/part-00001.parquet",
    ]
    assert pq.read_table(f"{BUCKET}/again", filesystem=gcs.filesystem()).equals(local.slice(0, 900))
    assert not objects(gcs, f"{BUCKET}/.ortpipe-overwrite.again")


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
