"""Issue 40: outputs in object storage, against a real S3-compatible server (SeaweedFS, started once
for this module): a data set under a prefix and one object, each equal to the same run written
locally; resumed, overwritten, locked across runs, refused in a line (NOTE [ stored outputs ])."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from pipeline.jobs import output_lock
from pipeline.jobs.output_lock import LEASE_S, LOCK_TAKEN_EXIT
from pipeline.sinks import SinkError
from pipeline.util.conditions import Refused, conditions_of
from pipeline.util.storage import StoredPath

from ..object_store import READER_KEY, READER_SECRET
from .stored_jobs import KILL_ROWS, argv_of, killed_mid_run, objects, only_whole_parts, scored, table_in

ROOT = Path(__file__).resolve().parents[2]

ROWS = 1200


#: this module's bucket in the session's S3 server (``aws``: tests/conftest.py)
BUCKET = "out"


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    return table_in(tmp_path_factory.mktemp("in"), ROWS, seed=0, first_id=5000)


def _stored_table(store, path: str) -> pa.Table:
    return pq.read_table(path, filesystem=store.filesystem())


def test_a_data_set_and_an_object_hold_what_a_local_run_writes(aws, table, tmp_path):
    assert scored(table, tmp_path / "local.parquet") == 0
    assert scored(table, "s3://out/set/", "--part-rows", "300") == 0
    assert scored(table, "s3://out/one.parquet") == 0
    want = pq.read_table(tmp_path / "local.parquet")
    assert _stored_table(aws, "out/set").equals(want)
    assert _stored_table(aws, "out/one.parquet").equals(want)
    assert objects(aws, "out/set") == ["out/set/_SUCCESS"] + [f"out/set/part-0000{i}.parquet" for i in range(4)]
    beside = objects(aws, "out")
    assert "out/.one.parquet.ortpipe-writing" not in beside  # copied to its name, then removed
    assert "out/.set.ortpipe-job.json" in beside and "out/.one.parquet.ortpipe-job.json" in beside
    assert not [name for name in beside if name.endswith("ortpipe-lock")]  # released


def test_a_stored_run_read_from_storage_too(aws, table, tmp_path):
    pq.write_table(pq.read_table(table), "out/input.parquet", filesystem=aws.filesystem())
    assert scored("s3://out/input.parquet", "s3://out/s2s/") == 0
    assert scored(table, tmp_path / "local.parquet") == 0
    assert _stored_table(aws, "out/s2s").equals(pq.read_table(tmp_path / "local.parquet"))


def _refused(capsys, *run) -> str:
    """The one line a refused run said (its exit status 1)."""
    capsys.readouterr()
    assert scored(*run) == 1
    said = capsys.readouterr().err
    assert said.startswith("ortpipe: error: ") and said.count("\n") == 1 and "Traceback" not in said
    return said


def test_an_earlier_output_is_refused_resumed_or_replaced_whole(aws, table, tmp_path, capsys):
    assert scored(table, "s3://out/again/", "--part-rows", "300") == 0
    assert "holds 4 part file(s) of an earlier run" in _refused(capsys, table, "s3://out/again/")
    assert scored(table, "s3://out/again/", "--resume") == 0  # every row there: nothing to add
    assert _stored_table(aws, "out/again").num_rows == ROWS
    assert scored(table, "s3://out/again/", "--overwrite", "--part-rows", "600", "--rows", "0:900") == 0
    assert objects(aws, "out/again") == [
        "out/again/_SUCCESS",
        "out/again/part-00000.parquet",
        "out/again/part-00001.parquet",
    ]
    assert _stored_table(aws, "out/again").num_rows == 900
    assert not objects(aws, "out/.ortpipe-overwrite.again")
    assert scored(table, "s3://out/one-file.parquet") == 0
    assert "an object cannot be appended to" in _refused(capsys, table, "s3://out/one-file.parquet", "--resume")


def test_a_single_object_stopped_before_its_end_is_written_again_on_resume(aws, table, capsys):
    """Issue 56: an object is written whole at the end, so a run stopped before it committed
    nothing; its --resume starts again from the first row, and says so, instead of refusing."""
    capsys.readouterr()
    assert scored(table, "s3://out/never-ended.parquet", "--resume") == 0
    said = capsys.readouterr().out
    assert "nothing of 's3://out/never-ended.parquet' was committed before the stop" in said
    assert _stored_table(aws, "out/never-ended.parquet").num_rows == ROWS


def test_missing_bucket_bad_credentials_and_other_formats_said_in_a_line(aws, table, monkeypatch, capsys):
    assert "the bucket 'nothere' does not exist" in _refused(capsys, table, "s3://nothere/set/")
    assert "outputs in object storage are Parquet" in _refused(capsys, table, "s3://out/x.csv")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", READER_KEY)  # may read and list, not write
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", READER_SECRET)
    said = _refused(capsys, table, "s3://out/denied/")
    assert "'s3://out" in said and "access was denied" in said
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


def test_killed_at_random_moments_then_resumed_every_row_once(aws, long_job):
    source, whole = long_job
    rng = np.random.default_rng()  # random moments: each run of the suite kills elsewhere
    output = "s3://out/killed/"
    kept = []
    for attempt in range(2):  # killed, then its resume killed too
        killed_mid_run(aws, argv_of(source, output, *(["--resume"] if attempt else [])), "out/killed", rng)
        kept.append(only_whole_parts(aws, "out/killed"))
        assert kept[-1] % 2048 == 0 and kept[-1] < KILL_ROWS  # whole parts only, nothing half-written
    assert kept == sorted(kept)  # each resumed run went on after the last
    assert main(argv_of(source, output, "--resume")) == 0
    got = _stored_table(aws, "out/killed")
    assert got.equals(whole)  # every row once, in order, as a whole run writes them
    conditions = conditions_of(StoredPath.of(output))
    assert conditions is not None and conditions.abort_uploads("killed/") == 0  # none left unfinished


def test_an_overwrite_killed_midway_leaves_the_earlier_output_whole(aws, long_job):
    source, whole = long_job
    output = "s3://out/replaced/"
    assert main(argv_of(source, output, "--rows", "0:4096")) == 0
    earlier = _stored_table(aws, "out/replaced")
    killed_mid_run(
        aws, argv_of(source, output, "--overwrite"), "out/.ortpipe-overwrite.replaced", np.random.default_rng()
    )
    assert _stored_table(aws, "out/replaced").equals(earlier)  # whole, its _SUCCESS there
    assert "out/replaced/_SUCCESS" in objects(aws, "out/replaced")
    assert main(argv_of(source, output, "--resume")) == 0  # goes on with the replacement, which then replaces it
    assert _stored_table(aws, "out/replaced").equals(whole)
    assert not objects(aws, "out/.ortpipe-overwrite.replaced")


def test_a_resume_aborts_the_upload_a_killed_run_left_unfinished(aws, table):
    assert scored(table, "s3://out/unfinished/", "--part-rows", "300", "--rows", "0:600") == 0
    conditions = conditions_of(StoredPath.of("s3://out/unfinished/"))
    assert conditions is not None
    client = conditions._client  # as a killed run leaves it: the next part's upload begun, never completed
    client.create_multipart_upload(Bucket="out", Key="unfinished/part-00002.parquet")
    assert client.list_multipart_uploads(Bucket="out", Prefix="unfinished/").get("Uploads")
    assert scored(table, "s3://out/unfinished/", "--part-rows", "300", "--resume") == 0
    assert not client.list_multipart_uploads(Bucket="out", Prefix="unfinished/").get("Uploads")
    assert _stored_table(aws, "out/unfinished").num_rows == ROWS


def test_a_lock_left_by_a_run_of_this_machine_that_ended_is_taken_at_once(aws):
    import socket

    conditions = conditions_of(StoredPath.of("s3://out/y/"))
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    holder = {"host": socket.gethostname(), "pid": int(ended.stdout), "renewed": time.time()}
    conditions.create(".y.ortpipe-lock", json.dumps(holder).encode())
    with output_lock("s3://out/y/", SinkError):  # not lapsed, but its process has ended
        pass
    holder["pid"] = os.getpid()  # a live one is refused
    conditions.create(".y.ortpipe-lock", json.dumps(holder).encode())
    with pytest.raises(SinkError, match=f"process {os.getpid()}"):
        with output_lock("s3://out/y/", SinkError):
            pass


def test_a_stored_data_set_of_a_detector_has_the_local_layout_its_per_batch_outputs_beside_it(aws, tmp_path):
    data = tmp_path / "in.npy"
    np.save(data, np.random.default_rng(5).standard_normal((96, 64)).astype(np.float32))
    argv = ["run", "detect", "--input", str(data), "--batch-size", "8", "--device", "cpu", "--no-progress"]
    assert main([*argv, "--part-rows", "32", "--output", str(tmp_path / "dets")]) == 0
    assert main([*argv, "--part-rows", "32", "--output", "s3://out/dets/"]) == 0
    for name in ("", ".hits", ".hit_scores"):  # <output>.<name> beside the main data set, as locally
        assert _stored_table(aws, f"out/dets{name}").equals(pq.read_table(f"{tmp_path / 'dets'}{name}")), name
        assert f"out/dets{name}/_SUCCESS" in objects(aws, f"out/dets{name}")


def test_a_large_part_goes_up_as_a_multipart_upload_unseen_until_it_closes(aws):
    from pipeline.sinks.stored import StoredParquetSink

    conditions = conditions_of(StoredPath.of("s3://out/large/"))
    client = conditions._client
    sink = StoredParquetSink("s3://out/large/", data_set=True, row_group_rows=16_384, compression="none")
    rng = np.random.default_rng(6)
    for index in range(8):  # 8 x 16,384 rows x 64 float32: 32 MiB, one part
        rows = rng.random((16_384, 64), np.float32)
        sink.write(index, len(rows), {"y": rows}, {"row_id": np.arange(index * 16_384, (index + 1) * 16_384)})
    uploads = client.list_multipart_uploads(Bucket="out", Prefix="large/").get("Uploads", [])
    assert [upload["Key"] for upload in uploads] == ["large/part-00000.parquet"]  # under way, in pieces
    assert objects(aws, "out/large") == []  # and nothing of it visible
    sink.close()
    sink.mark_complete()
    assert not client.list_multipart_uploads(Bucket="out", Prefix="large/").get("Uploads")
    assert objects(aws, "out/large") == ["out/large/_SUCCESS", "out/large/part-00000.parquet"]
    assert _stored_table(aws, "out/large").num_rows == 8 * 16_384


def test_an_object_over_what_the_store_copies_at_once_is_copied_in_pieces(aws, tmp_path, monkeypatch, capsys):
    """S3 copies up to 5 GB in one request: a larger output object is copied by the store in
    pieces (UploadPartCopy, through boto3).  The limit made 5 MiB here, the output 8 MiB."""
    import sys

    from pipeline.util import conditions

    monkeypatch.setattr(conditions, "ONE_COPY_BYTES", 5 << 20)
    x = np.random.default_rng(8).random((2048, 1024), np.float32)
    np.save(tmp_path / "x.npy", x)
    argv = ["run", "identity", "--input", str(tmp_path / "x.npy"), "--output", "s3://out/big.parquet"]
    argv += ["--device", "cpu", "--no-progress", "--compression", "none"]
    assert main(argv) == 0
    client = conditions_of(StoredPath.of("s3://out/big.parquet"))._client
    head = client.head_object(Bucket="out", Key="big.parquet")
    assert head["ContentLength"] > 5 << 20 and "-" in head["ETag"], head  # a multipart ETag: copied in pieces
    got = pq.read_table("out/big.parquet", filesystem=aws.filesystem())
    np.testing.assert_array_equal(np.stack(got.column("y").to_numpy(zero_copy_only=False)), x)
    assert "out/.big.parquet.ortpipe-writing" not in objects(aws, "out")

    monkeypatch.setitem(sys.modules, "boto3", None)  # no boto3: refused in a line, the earlier output whole
    capsys.readouterr()
    assert main([*argv, "--overwrite"]) != 0
    err = capsys.readouterr().err
    assert "more than the store copies in one request" in err and "Traceback" not in err, err
    assert pq.read_table("out/big.parquet", filesystem=aws.filesystem()).num_rows == 2048


def test_a_run_whose_lock_another_run_takes_over_ends_at_once_as_if_killed(aws, long_job):
    """NOTE [ a lock taken over ]: the lock rewritten by another run (as one that found it
    lapsed does) while a run writes: at its next renewal that run ends at once with its own
    exit status and a line that names the taker, and the output holds whole parts only."""
    source, _ = long_job
    renew_fast = (  # the module, not the function that pipeline.jobs names after it
        "import sys; import pipeline.jobs.output_lock; sys.modules['pipeline.jobs.output_lock'].RENEW_S = 0.2; "
        "from pipeline.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    env = {**os.environ, **aws.environment, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    argv = argv_of(source, "s3://out/taken/")
    process = subprocess.Popen(
        [sys.executable, "-c", renew_fast, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
    )
    conditions = conditions_of(StoredPath.of("s3://out/taken/"))
    assert conditions is not None
    taker = json.dumps({"host": "elsewhere", "pid": 4242, "renewed": time.time()}).encode()
    try:
        deadline = time.monotonic() + 60
        while not objects(aws, "out/taken") and time.monotonic() < deadline:  # writing: its first part is up
            time.sleep(0.01)
        for _ in range(50):  # as a taker does: a conditional write on the ETag it read
            found = conditions.read(".taken.ortpipe-lock")
            assert found is not None, "the run holds its lock while it writes"
            try:
                conditions.replace(".taken.ortpipe-lock", taker, found[1])
                break
            except Refused:  # renewed between the read and the write: again
                continue
        said, _ = process.communicate(timeout=60)
    finally:
        process.kill()
    said = said.decode()
    assert process.returncode == LOCK_TAKEN_EXIT, said
    assert "was taken by another run (host elsewhere, process 4242)" in said and "Traceback" not in said, said
    assert 0 < only_whole_parts(aws, "out/taken") < KILL_ROWS  # stopped midway, whole parts only
    body, _ = conditions.read(".taken.ortpipe-lock")
    assert json.loads(body)["host"] == "elsewhere"  # the taker's lock, left to it
