"""Issue 40: tables read from a real S3-compatible server (SeaweedFS, started once for this module),
each run equal to the same run over the local file; a missing bucket and bad credentials said in a line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.cli import main

ROWS, FEATURES = 1200, 64


#: this module's bucket in the session's S3 server (``aws``: tests/conftest.py)
BUCKET = "tables"


@pytest.fixture(scope="module")
def table():
    x = np.random.default_rng(0).random((ROWS, FEATURES), np.float32)
    return pa.table({"id": np.arange(5000, 5000 + ROWS), **{f"f{i}": x[:, i] for i in range(FEATURES)}})


def _run(source, output, *more):
    argv = ["run", "mlp", "--input", str(source), "--output", str(output), "--id-column", "id"]
    return main([*argv, "--device", "cpu", "--no-progress", "--batch-size", "100", *more])


def test_a_parquet_object_and_a_prefix_of_csv_objects_run_as_their_local_files(aws, table, tmp_path):
    fs = aws.filesystem()
    pq.write_table(table, "tables/x.parquet", filesystem=fs, row_group_size=250)  # several row groups, streamed
    local = tmp_path / "x.parquet"
    pq.write_table(table, local)
    import pyarrow.csv as pacsv

    for part, rows in (("a", slice(0, 700)), ("b", slice(700, ROWS))):
        with fs.open_output_stream(f"tables/set/{part}.csv") as out:
            pacsv.write_csv(table.slice(rows.start, rows.stop - rows.start), out)
    assert _run(local, tmp_path / "local.parquet") == 0
    assert _run("s3://tables/x.parquet", tmp_path / "stored.parquet") == 0
    assert _run("s3://tables/set/", tmp_path / "prefix.parquet") == 0
    want = pq.read_table(tmp_path / "local.parquet")
    assert pq.read_table(tmp_path / "stored.parquet").equals(want)
    got = pq.read_table(tmp_path / "prefix.parquet")
    np.testing.assert_array_equal(got["id"].to_numpy(), want["id"].to_numpy())
    np.testing.assert_allclose(np.stack(got["scores"].to_numpy(zero_copy_only=False)),
                               np.stack(want["scores"].to_numpy(zero_copy_only=False)), rtol=1e-6)  # fmt: skip


def test_a_stored_table_resumes_and_takes_a_window_of_rows(aws, table, tmp_path):
    pq.write_table(table, "tables/w.parquet", filesystem=aws.filesystem(), row_group_size=250)
    output = tmp_path / "o.parquet"
    assert _run("s3://tables/w.parquet", output, "--limit", "450") == 0
    assert _run("s3://tables/w.parquet", output, "--resume") == 0
    ids = pq.read_table(output)["id"].to_numpy()
    np.testing.assert_array_equal(ids, np.arange(5000, 5000 + ROWS))
    assert _run("s3://tables/w.parquet", tmp_path / "window.parquet", "--rows", "333:777") == 0
    np.testing.assert_array_equal(pq.read_table(tmp_path / "window.parquet")["id"].to_numpy(), np.arange(5333, 5777))


def test_a_missing_bucket_or_object_and_bad_credentials_are_said_in_a_line(aws, table, tmp_path, capsys, monkeypatch):
    assert _run("s3://no-such-bucket/x.parquet", tmp_path / "o.parquet") == 1
    err = capsys.readouterr().err
    assert err.startswith("ortpipe: error: 's3://no-such-bucket/x.parquet'") and "Traceback" not in err
    assert _run("s3://tables/nothing-here.parquet", tmp_path / "o.parquet") == 1
    assert "'s3://tables/nothing-here.parquet': nothing is stored there" in capsys.readouterr().err
    pq.write_table(table, "tables/c.parquet", filesystem=aws.filesystem())
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    assert _run("s3://tables/c.parquet", tmp_path / "o.parquet") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'s3://tables/c.parquet'" in err and "Traceback" not in err


def test_texts_are_read_from_the_store(aws, tmp_path):
    pytest.importorskip("tokenizers")
    from ..text_models import alone, corpus, model_folder

    folder = model_folder(tmp_path / "encoder")
    texts = corpus(40, seed=4)
    pq.write_table(pa.table({"text": texts}), "tables/docs.parquet", filesystem=aws.filesystem())
    output = tmp_path / "emb.parquet"
    argv = ["run", str(folder), "--input", "s3://tables/docs.parquet", "--text-column", "text", "--output", str(output)]
    assert main([*argv, "--device", "cpu", "--no-progress"]) == 0
    vectors = np.stack(pq.read_table(output)["embedding"].to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(vectors, alone(folder, texts), rtol=1e-4, atol=1e-5)


def test_a_prefix_of_images_runs_as_a_local_folder_of_them_and_resumes(aws, tmp_path, capsys):
    import io

    from PIL import Image

    fs = aws.filesystem()
    rng = np.random.default_rng(3)
    local = tmp_path / "photos"
    for i in range(11):
        name = f"{'cats' if i % 2 else 'dogs'}/im{i:02d}.png"
        (local / name).parent.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)).save(buffer, format="PNG")
        (local / name).write_bytes(buffer.getvalue())
        with fs.open_output_stream(f"tables/photos/{name}") as out:
            out.write(buffer.getvalue())
    with fs.open_output_stream("tables/photos/.hidden.png") as out:  # left out, as a local folder's
        out.write(b"not an image")
    argv = ["run", "convnet", "--size", "16x16", "--batch-size", "4", "--device", "cpu", "--no-progress"]
    assert main([*argv, "--input", str(local), "--output", str(tmp_path / "local.parquet")]) == 0
    assert main([*argv, "--input", "s3://tables/photos/", "--output", str(tmp_path / "s3.parquet")]) == 0
    want, got = pq.read_table(tmp_path / "local.parquet"), pq.read_table(tmp_path / "s3.parquet")
    np.testing.assert_array_equal(np.stack(got["logits"].to_numpy(zero_copy_only=False)),
                                  np.stack(want["logits"].to_numpy(zero_copy_only=False)))  # fmt: skip
    assert got["path"].to_pylist() == [f"s3://tables/photos/{Path(p).relative_to(local).as_posix()}"
                                       for p in want["path"].to_pylist()]  # fmt: skip
    # a run of the first rows, resumed: the rest after the output's last path
    assert main([*argv, "--input", "s3://tables/photos/", "--output", str(tmp_path / "r.parquet"), "--limit", "5"]) == 0
    assert main([*argv, "--input", "s3://tables/photos/", "--output", str(tmp_path / "r.parquet"), "--resume"]) == 0
    assert pq.read_table(tmp_path / "r.parquet")["path"].to_pylist() == got["path"].to_pylist()


def test_a_video_object_runs_as_its_local_file_and_resumes_by_seeking(aws, tmp_path):
    from ..helpers import encode_video

    local = encode_video(tmp_path / "clip.mp4", "libx264", {"g": "12", "bf": "2"}, frames=60, size=32)
    fs = aws.filesystem()
    with fs.open_output_stream("tables/clip.mp4") as out:
        out.write(local.read_bytes())
    argv = ["run", "convnet", "--size", "16x16", "--batch-size", "8", "--device", "cpu", "--no-progress"]
    assert main([*argv, "--input", str(local), "--output", str(tmp_path / "local.parquet")]) == 0
    assert main([*argv, "--input", "s3://tables/clip.mp4", "--output", str(tmp_path / "s3.parquet")]) == 0
    want, got = pq.read_table(tmp_path / "local.parquet"), pq.read_table(tmp_path / "s3.parquet")
    assert got.drop_columns(["logits"]).equals(want.drop_columns(["logits"]))  # every frame, its index and time
    np.testing.assert_array_equal(np.stack(got["logits"].to_numpy(zero_copy_only=False)),
                                  np.stack(want["logits"].to_numpy(zero_copy_only=False)))  # fmt: skip
    stopped = tmp_path / "resumed.parquet"  # frames 0-23, then the rest: a seek into the object
    assert main([*argv, "--input", "s3://tables/clip.mp4", "--output", str(stopped), "--limit", "24"]) == 0
    assert main([*argv, "--input", "s3://tables/clip.mp4", "--output", str(stopped), "--resume"]) == 0
    assert pq.read_table(stopped).drop_columns(["logits"]).equals(want.drop_columns(["logits"]))


def test_a_npy_object_runs_as_its_local_file_in_blocks_and_resumes(aws, tmp_path, monkeypatch):
    from pipeline.sources import stored_arrays

    monkeypatch.setattr(stored_arrays, "BLOCK_BYTES", 300 * FEATURES * 4)  # several blocks, a short last one
    x = np.random.default_rng(4).random((ROWS, FEATURES), np.float32)
    np.save(tmp_path / "x.npy", x)
    with aws.filesystem().open_output_stream("tables/x.npy") as out:
        out.write((tmp_path / "x.npy").read_bytes())
    argv = ["run", "mlp", "--device", "cpu", "--no-progress", "--batch-size", "100"]
    assert main([*argv, "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "local.parquet")]) == 0
    assert main([*argv, "--input", "s3://tables/x.npy", "--output", str(tmp_path / "s3.parquet")]) == 0
    assert pq.read_table(tmp_path / "s3.parquet").equals(pq.read_table(tmp_path / "local.parquet"))
    stopped = tmp_path / "resumed.parquet"
    assert main([*argv, "--input", "s3://tables/x.npy", "--output", str(stopped), "--limit", "450"]) == 0
    assert main([*argv, "--input", "s3://tables/x.npy", "--output", str(stopped), "--resume"]) == 0
    assert pq.read_table(stopped).equals(pq.read_table(tmp_path / "local.parquet"))
    np.save(tmp_path / "f.npy", np.asfortranarray(x))
    with aws.filesystem().open_output_stream("tables/f.npy") as out:
        out.write((tmp_path / "f.npy").read_bytes())
    assert main([*argv, "--input", "s3://tables/f.npy", "--output", str(tmp_path / "f.parquet")]) == 1


def test_a_prefix_of_videos_runs_as_a_local_folder_of_them(aws, tmp_path):
    from ..helpers import encode_video

    local = tmp_path / "clips"
    local.mkdir()
    fs = aws.filesystem()
    for name, frames in (("a.mp4", 20), ("b/c.mkv", 13)):
        (local / name).parent.mkdir(exist_ok=True)
        encode_video(local / name, "libx264", {"g": "6"}, frames=frames, size=32)
        with fs.open_output_stream(f"tables/clips/{name}") as out:
            out.write((local / name).read_bytes())
    argv = ["run", "convnet", "--size", "16x16", "--batch-size", "8", "--device", "cpu", "--no-progress"]
    assert main([*argv, "--input", str(local), "--output", str(tmp_path / "local.parquet")]) == 0
    assert main([*argv, "--input", "s3://tables/clips/", "--output", str(tmp_path / "s3.parquet")]) == 0
    want, got = pq.read_table(tmp_path / "local.parquet"), pq.read_table(tmp_path / "s3.parquet")
    assert got["path"].to_pylist() == [f"s3://tables/clips/{Path(p).relative_to(local).as_posix()}"
                                       for p in want["path"].to_pylist()]  # fmt: skip
    assert got.drop_columns(["path"]).equals(want.drop_columns(["path"]))  # every frame, its index, time, scores


def test_a_window_of_a_stored_parquet_table_leaves_the_row_groups_before_it_unread(aws, table, tmp_path):
    from pipeline import Pipeline, models
    from pipeline.sources.stored_tables import StoredTableSource

    fs = aws.filesystem()
    pq.write_table(table.slice(0, 600), "tables/groups/a.parquet", filesystem=fs, row_group_size=250)
    pq.write_table(table.slice(600), "tables/groups/b.parquet", filesystem=fs, row_group_size=250)
    with Pipeline(models.mlp(), device="cpu") as pipe:
        source = StoredTableSource("s3://tables/groups/", 100, pipe.source_inputs, id_column="id")
    assert source._from_row(700)[1] == 600  # a's 600 rows unread: b's first group (600-849) holds row 700
    assert source._from_row(450)[1] == 250  # a's first group unread: its second (250-499) holds row 450
    assert source._from_row(0)[1] == 0
    local = tmp_path / "x.parquet"
    pq.write_table(table, local)
    assert _run(local, tmp_path / "local.parquet", "--rows", "700:1100") == 0
    assert _run("s3://tables/groups/", tmp_path / "window.parquet", "--rows", "700:1100") == 0
    assert pq.read_table(tmp_path / "window.parquet").equals(pq.read_table(tmp_path / "local.parquet"))


@pytest.mark.parametrize("text", [False, True])
def test_a_stored_delta_table_is_refused_not_read_as_loose_files(aws, tmp_path, capsys, text):
    """NOTE [ a table format's folder ]: a prefix holding ``_delta_log/`` holds every version's files."""
    deltalake = pytest.importorskip("deltalake", reason="needs deltalake: pip install 'ortpipe[tables]'")
    import pyarrow.fs as pafs

    local = tmp_path / "table"
    rows = pa.table({"id": np.arange(20), "text": [f"w{i} x" for i in range(20)]})
    deltalake.write_deltalake(local, rows)
    deltalake.write_deltalake(local, rows.slice(0, 5), mode="overwrite")
    prefix = f"tables/delta-{int(text)}"
    pafs.copy_files(
        str(local), prefix, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=aws.filesystem()
    )
    more = ["--text-column", "text"] if text else []
    if text:
        pytest.importorskip("tokenizers")
        from ..text_models import model_folder
    model = str(model_folder(tmp_path / "encoder")) if text else "mlp"
    argv = ["run", model, "--input", f"s3://{prefix}/", "--output", str(tmp_path / "o.parquet"), *more]
    assert main([*argv, "--device", "cpu", "--no-progress"]) != 0
    assert "is a Delta Lake table" in capsys.readouterr().err
    assert not (tmp_path / "o.parquet").exists()
