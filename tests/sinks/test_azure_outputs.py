"""Outputs in Azure blob storage (``abfs://``), against Azure's own emulator, Azurite, in what is
Azure's own: a part a kill cut short, and a run killed at a random moment, resumed to every row
once, a record replaced only once whole (NOTE [ objects seen before they are whole ]), reached as
Azure's tools reach an account (NOTE [ Azure connection string ]).  What GCS and Azure do alike,
their lock included: ``test_stores``."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from pipeline.cli import main
from pipeline.util.storage import StoredPath

from .stored_jobs import KILL_ROWS, argv_of, killed_mid_run, objects, scored

#: the container of this module's outputs
BUCKET = "azure-out"


def test_an_input_whose_url_names_its_account_as_azure_writes_it(azure, table, local):
    """``container@account.dfs.core.windows.net``: the account then the connection string's."""
    fs = azure.filesystem()
    pq.write_table(pq.read_table(table), f"{BUCKET}/input.parquet", filesystem=fs)
    url = f"abfs://{BUCKET}@devstoreaccount1.dfs.core.windows.net/input.parquet"
    assert scored(url, f"abfs://{BUCKET}/read/") == 0
    assert pq.read_table(f"{BUCKET}/read", filesystem=fs).equals(local)


def test_a_part_a_killed_run_left_unwritten_is_written_anew(azure, table, local):
    """Azure's blob appears, empty, as pyarrow opens it, and a kill leaves it so: the part being
    written, which the resume removes and writes again (NOTE [ objects seen before they are whole ])."""
    url = f"abfs://{BUCKET}/cut/"
    assert scored(table, url, "--part-rows", "300", "--rows", "0:600") == 0
    fs = azure.filesystem()
    (StoredPath.of(url) / "_SUCCESS").unlink()
    with fs.open_output_stream(f"{BUCKET}/cut/part-00002.parquet") as stream:
        stream.write(b"PAR1 cut short")  # neither empty nor whole: a flushed piece of a part
    assert scored(table, url, "--part-rows", "300", "--resume") == 0
    assert pq.read_table(f"{BUCKET}/cut", filesystem=fs).equals(local)


def test_a_missing_container_and_a_bad_connection_string_are_said_in_a_line(azure, table, monkeypatch, capsys):
    capsys.readouterr()
    assert scored(table, "abfs://nothere/set/") == 1
    said = capsys.readouterr().err
    assert "the bucket 'nothere' does not exist" in said and said.count("\n") == 1
    assert scored("abfs://nothere/x.parquet", f"abfs://{BUCKET}/from-nowhere/") == 1  # an input's too
    assert "the bucket 'nothere' does not exist" in capsys.readouterr().err
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", "AccountName=devstoreaccount1")
    assert scored(table, f"abfs://{BUCKET}/bad/") == 1
    said = capsys.readouterr().err
    assert "AZURE_STORAGE_CONNECTION_STRING: expected AccountName=...;AccountKey=..." in said
    assert said.count("\n") == 1


def test_killed_at_a_random_moment_then_resumed_every_row_once(azure, long_job):
    source, whole = long_job
    output = f"abfs://{BUCKET}/killed-runs/"
    killed_mid_run(azure, argv_of(source, output), f"{BUCKET}/killed-runs", np.random.default_rng())
    assert main(argv_of(source, output, "--resume")) == 0
    assert pq.read_table(f"{BUCKET}/killed-runs", filesystem=azure.filesystem()).equals(whole)
    assert len(whole) == KILL_ROWS


def test_an_object_written_whole_replaces_its_namesake_only_once_whole(azure, monkeypatch):
    """On Azure a blob shows as it is opened, empty (NOTE [ objects seen before they are whole ]):
    a job's record is written aside and copied to its name, which holds the earlier bytes until
    the copy; nothing is left aside.  An empty marker is whole from its start: written in place."""
    record = StoredPath.of(f"abfs://{BUCKET}/records/.job.json")
    assert record.shows_unfinished
    record.write_text('{"earlier": 1}')
    seen, copy = [], StoredPath.copy_to

    def copy_to(source, target):  # the store's own copy, the names as a reader sees them just before it
        seen.append((source.name, source.read_text(), target.read_text()))
        copy(source, target)

    monkeypatch.setattr(StoredPath, "copy_to", copy_to)
    record.write_text('{"later": 2}')
    assert seen == [("..job.json.ortpipe-writing", '{"later": 2}', '{"earlier": 1}')]
    assert record.read_text() == '{"later": 2}'
    (record.parent / "_SUCCESS").write_bytes(b"")
    assert len(seen) == 1 and (record.parent / "_SUCCESS").is_file()
    assert objects(azure, f"{BUCKET}/records") == [f"{BUCKET}/records/.job.json", f"{BUCKET}/records/_SUCCESS"]
