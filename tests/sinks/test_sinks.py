"""Sinks written batch by batch, per-row and per-batch outputs (NOTE [ per-batch outputs ]).

The end-to-end runs with a real detector model are in test_data_dependent;
here the sinks get hand-made batches, to pin down names, columns and errors.
"""

from __future__ import annotations

import io
import time
from pathlib import Path

import numpy as np
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from pipeline.sinks import (
    CsvSink,
    CsvStreamSink,
    JsonLinesSink,
    JsonLinesStreamSink,
    NpySink,
    ParquetDatasetSink,
    ParquetSink,
    SinkError,
    file_part,
    whole_parts,
)


def _write(sink, batches):
    try:
        for index, (rows, outputs, meta) in enumerate(batches):
            sink.write(index, rows, outputs, meta)
    finally:
        sink.close()


def test_file_part_keeps_a_name_readable_and_safe():
    assert file_part("boxes") == "boxes"
    assert file_part("det/boxes:0") == "det_boxes_0"
    assert file_part("") == "_"


def test_two_outputs_that_make_one_file_name_are_refused(tmp_path):
    with pytest.raises(SinkError, match=r"do not make distinct file names"):
        NpySink(tmp_path / "out.npy", ["det/boxes", "det_boxes"])


def test_a_named_output_is_written_per_batch_even_when_its_count_equals_the_rows(tmp_path):
    sink = NpySink(tmp_path / "out.npy", ["boxes", "score"], data_dependent=["boxes"])
    boxes = [np.arange(8, dtype=np.float32).reshape(2, 4), np.ones((5, 4), np.float32)]
    _write(
        sink, [(2, {"boxes": boxes[0], "score": np.zeros(2)}, {}), (2, {"boxes": boxes[1], "score": np.ones(2)}, {})]
    )
    np.testing.assert_array_equal(np.load(sink.paths["boxes"]), np.concatenate(boxes))
    assert np.load(sink.offsets_paths["boxes"]).tolist() == [0, 2, 7]
    assert np.load(sink.paths["score"]).tolist() == [0, 0, 1, 1]
    assert "score" not in sink.offsets_paths


def test_a_scalar_output_is_one_item_a_batch(tmp_path):
    sink = ParquetSink(tmp_path / "out.parquet")
    _write(sink, [(3, {"y": np.zeros(3), "count": np.int64(k)}, {"row_id": np.arange(3) + 3 * k}) for k in range(4)])
    assert sink.side_paths["count"].name == "out.count.parquet"
    counts = pq.read_table(sink.side_paths["count"])
    assert counts.column_names == ["batch", "count"]
    assert counts["count"].to_pylist() == [0, 1, 2, 3] and counts["batch"].to_pylist() == [0, 1, 2, 3]
    assert pq.read_table(sink.path).column_names == ["row_id", "batch", "y"]


def test_items_that_change_shape_are_refused_and_the_batch_is_not_written(tmp_path):
    sink = CsvSink(tmp_path / "out.csv")
    first = (1, {"y": np.zeros(1), "boxes": np.zeros((3, 4))}, {})
    second = (1, {"y": np.ones(1), "boxes": np.zeros((3, 5))}, {})
    with pytest.raises(SinkError, match=r"output 'boxes' of batch 1 has shape \[3, 5\], expected \[count, 4\]"):
        _write(sink, [first, second])
    assert pcsv.read_csv(sink.path)["y"].to_pylist() == [0.0]  # batch 0 only, and readable
    assert pcsv.read_csv(sink.side_paths["boxes"]).column_names == ["batch", "boxes_0", "boxes_1", "boxes_2", "boxes_3"]


def test_metadata_named_batch_keeps_its_name_and_the_index_goes_to_ortpipe_batch(tmp_path):
    sink = ParquetSink(tmp_path / "out.pq")
    _write(sink, [(2, {"y": np.zeros(2), "hits": np.zeros((0, 2))}, {"batch": np.array([7, 7])})])
    assert sink.side_paths["hits"].name == "out.hits.pq"
    assert pq.read_table(sink.path).column_names == ["batch", "ortpipe_batch", "y"]
    hits = pq.read_table(sink.side_paths["hits"])
    assert hits.column_names == ["ortpipe_batch", "hits"] and hits.num_rows == 0


def test_without_per_batch_outputs_the_table_has_no_batch_column(tmp_path):
    sink = CsvSink(tmp_path / "out.csv")
    _write(sink, [(2, {"logits": np.zeros((2, 3), np.float32)}, {"row_id": np.arange(2)})])
    assert pcsv.read_csv(sink.path).column_names == ["row_id", "logits_0", "logits_1", "logits_2"]
    assert sink.side_paths == {}


def test_the_one_output_of_a_model_keeps_the_path_and_its_offsets_go_beside_it(tmp_path):
    sink = NpySink(tmp_path / "boxes.npy", ["boxes"])
    counts = [3, 0, 5]
    _write(sink, [(2, {"boxes": np.full((n, 4), i, np.float32)}, {}) for i, n in enumerate(counts)])
    assert sink.paths["boxes"].name == "boxes.npy" and sink.offsets_paths["boxes"].name == "boxes.offsets.npy"
    assert np.load(tmp_path / "boxes.offsets.npy").tolist() == [0, 3, 3, 8]
    assert np.load(tmp_path / "boxes.npy")[:, 0].tolist() == [0, 0, 0, 2, 2, 2, 2, 2]
    assert sink.per_batch_paths == {"boxes": (tmp_path / "boxes.npy", tmp_path / "boxes.offsets.npy")}


def test_a_runs_first_parts_close_early_so_an_abort_loses_seconds_not_a_minute(tmp_path, monkeypatch):
    """Issue 26, item 2: with parts of 60 s, a run's first part closes after 2 s, the next after
    4, 8, ... up to 60: a second Ctrl-C early in a run costs the rows of the last few seconds."""
    from pipeline.sinks import _parts

    now = [1000.0]
    monkeypatch.setattr(_parts.time, "monotonic", lambda: now[0])
    sink = ParquetDatasetSink(tmp_path / "set", part_seconds=60.0)
    closed_after = []
    opened = now[0]
    for index in range(40):
        sink.write(index, 4, {"y": np.full((4, 2), index, np.float32)}, {"row_id": np.arange(4 * index, 4 * index + 4)})
        now[0] += 1.0  # a batch a second
        parts = len(whole_parts(tmp_path / "set"))
        if parts > len(closed_after):
            closed_after.append(now[0] - 1.0 - opened)
            opened = now[0] - 1.0
    sink.close()
    # a part's age is checked at each write: 2 s, then about 4, 8, 16 (a batch's second late)
    assert closed_after[:4] == [2.0, 5.0, 9.0, 17.0]
    assert pq.read_table(tmp_path / "set").num_rows == 160


@pytest.mark.parametrize("sink", [ParquetSink, ParquetDatasetSink])
def test_an_interrupt_as_a_part_opens_makes_no_part_of_its_empty_file(tmp_path, monkeypatch, sink):
    """A signal handled as a new part's file is opened - the file made, its writer not yet (seen
    when two signals stopped ``ortpipe run``): that file is no part; the close keeps the rows
    before it, readable, instead of failing on an empty Parquet file."""
    from pipeline.sinks import _parts

    real, opened = _parts.parquet_writer, []

    def interrupted_at_the_second_part(path, *args, **kwargs):
        opened.append(path)
        if len(opened) == 2:
            Path(path).touch()  # what the output stream's open has made when the interrupt lands
            raise KeyboardInterrupt
        return real(path, *args, **kwargs)

    monkeypatch.setattr(_parts, "parquet_writer", interrupted_at_the_second_part)
    out = tmp_path / ("out.parquet" if sink is ParquetSink else "out")
    made = sink(out, part_rows=4)
    made.write(0, 4, {"y": np.full((4, 2), 0, np.float32)}, {"row_id": np.arange(4)})
    with pytest.raises(KeyboardInterrupt):
        made.write(1, 4, {"y": np.full((4, 2), 1, np.float32)}, {"row_id": np.arange(4, 8)})
    made.close()
    assert pq.read_table(out).column("row_id").to_pylist() == [0, 1, 2, 3]
    assert not Path(opened[1]).exists()  # the empty file removed, not renamed into place


@pytest.mark.parametrize("sink", [NpySink, ParquetSink, CsvSink, ParquetDatasetSink])
def test_a_sink_that_wrote_nothing_leaves_no_file(tmp_path, sink):
    """An empty input, or a run that failed before its first write: no unreadable 0-byte file."""
    names = {NpySink: "out.npy", ParquetSink: "out.parquet", CsvSink: "out.csv", ParquetDatasetSink: "out"}
    path = tmp_path / names[sink]
    made = sink(path, ["y"]) if sink is NpySink else sink(path)
    assert not path.exists()  # the folder was checked, nothing created
    made.close()
    assert list(tmp_path.iterdir()) == []


def test_ortpipe_run_on_an_empty_input_says_nothing_was_written(tmp_path, capsys):
    from pipeline.cli import main

    np.save(tmp_path / "empty.npy", np.zeros((0, 64), np.float32))
    argv = ["run", "mlp", "--input", str(tmp_path / "empty.npy"), "--output", str(tmp_path / "out.npy")]
    assert main([*argv, "--device", "cpu", "--no-progress"]) == 0
    assert "is empty, so" in capsys.readouterr().err and not (tmp_path / "out.npy").exists()


@pytest.mark.parametrize("sink", [NpySink, ParquetSink, CsvSink])
def test_a_sink_that_wrote_nothing_leaves_an_existing_file_as_it_was(tmp_path, sink):
    path = tmp_path / {NpySink: "out.npy", ParquetSink: "out.parquet", CsvSink: "out.csv"}[sink]
    path.write_bytes(b"yesterday's results")
    (sink(path, ["y"]) if sink is NpySink else sink(path)).close()
    assert path.read_bytes() == b"yesterday's results"


# -- a Parquet data set: a folder of part files --------------------------------------------------------------------


def _scores(rows: int, size: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    scores = rng.random((rows, 3), np.float32)
    return [
        (
            min(size, rows - start),
            {"scores": scores[start : start + size]},
            {"row_id": np.arange(start, start + size)[: rows - start]},
        )
        for start in range(0, rows, size)
    ]


def test_a_data_set_is_the_table_of_one_file_cut_into_parts(tmp_path):
    from pipeline import TensorSpec
    from pipeline.sources import ParquetDatasetSource

    batches = _scores(100, 8)
    _write(ParquetSink(tmp_path / "one.parquet"), batches)
    _write(ParquetDatasetSink(tmp_path / "set", part_rows=30), batches)
    parts = sorted(p.name for p in (tmp_path / "set").iterdir())
    assert parts == [f"part-{i:05d}.parquet" for i in range(4)]  # a part closed at 32, 64, 96 rows, then the rest
    assert [pq.read_metadata(tmp_path / "set" / p).num_rows for p in parts] == [32, 32, 32, 4]
    assert pq.read_table(tmp_path / "set").equals(pq.read_table(tmp_path / "one.parquet"))  # pyarrow's reading
    ours = ParquetDatasetSource(
        tmp_path / "set", 16, [TensorSpec("x", np.dtype(np.float32), ("N", 3))], {"x": ["scores"]}
    )
    batches = list(ours)
    assert np.concatenate([batch.meta["row_id"] for batch in batches]).tolist() == list(range(100))  # in order
    files = np.concatenate([batch.meta["file"] for batch in batches])
    assert files.tolist() == [name for name, rows in zip(parts, (32, 32, 32, 4), strict=True) for _ in range(rows)]


def test_a_data_set_part_is_closed_at_its_size_in_bytes_too(tmp_path):
    _write(ParquetDatasetSink(tmp_path / "set", part_bytes=1000), _scores(200, 8))  # 8 rows: 8 * (12 + 8) bytes
    assert [pq.read_metadata(p).num_rows for p in sorted((tmp_path / "set").iterdir())] == [
        56,
        56,
        56,
        32,
    ]  # closed past 1000 bytes: 7 batches


def test_a_data_set_holds_only_whole_parts_while_it_is_written(tmp_path):
    sink = ParquetDatasetSink(tmp_path / "set", part_rows=16)
    for index, batch in enumerate(_scores(40, 8)[:3]):
        sink.write(index, *batch)  # 24 rows: one part closed, the next one open
    assert sorted(p.name for p in (tmp_path / "set").iterdir()) == [
        ".part-00001.parquet.inprogress",
        "part-00000.parquet",
    ]
    assert pq.read_table(tmp_path / "set").num_rows == 16  # readers leave the hidden part out
    sink.close()
    assert pq.read_table(tmp_path / "set").num_rows == 24


def test_a_new_data_set_is_not_mixed_with_an_earlier_one(tmp_path):
    _write(ParquetDatasetSink(tmp_path / "set", part_rows=8), _scores(20, 8))
    with pytest.raises(SinkError, match=r"holds 3 part file\(s\) of an earlier run: resume to go on from them"):
        ParquetDatasetSink(tmp_path / "set")
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "cat.jpg").write_bytes(b"")
    with pytest.raises(
        SinkError, match=r"holds other files \(cat.jpg\); a data set is written into a folder of its own"
    ):
        ParquetDatasetSink(tmp_path / "photos")
    (tmp_path / "empty").mkdir()
    ParquetDatasetSink(tmp_path / "empty").close()  # a folder made for it
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(SinkError, match="it is a file, not a folder"):
        ParquetDatasetSink(tmp_path / "file")
    with pytest.raises(SinkError, match="does not exist"):
        ParquetDatasetSink(tmp_path / "nowhere" / "set")
    with pytest.raises(ValueError, match="part_rows must be >= 1"):
        ParquetDatasetSink(tmp_path / "other", part_rows=0)


def test_a_data_set_marked_complete_has_a_success_file_until_rows_are_added(tmp_path):
    batches = _scores(40, 8)
    sink = ParquetDatasetSink(tmp_path / "set", part_rows=16)
    _write(sink, batches[:3])
    assert not (tmp_path / "set" / "_SUCCESS").exists()  # closed, not marked: a stopped run
    sink.mark_complete()
    assert (tmp_path / "set" / "_SUCCESS").read_bytes() == b""
    assert pq.read_table(tmp_path / "set").num_rows == 24  # readers leave it out
    resumed = ParquetDatasetSink(tmp_path / "set", part_rows=16, resume=True)
    resumed.write(0, *batches[3])
    assert not (tmp_path / "set" / "_SUCCESS").exists()  # rows being added: not complete
    resumed.close()
    resumed.mark_complete()
    assert (tmp_path / "set" / "_SUCCESS").exists()
    empty = ParquetDatasetSink(tmp_path / "empty")
    empty.close()
    empty.mark_complete()
    assert not (tmp_path / "empty").exists()  # nothing written: no folder made for the marker


def test_a_data_set_writes_per_batch_outputs_as_data_sets_beside_it(tmp_path):
    sink = ParquetDatasetSink(tmp_path / "dets", data_dependent=["boxes"])
    boxes = [np.ones((3, 4), np.float32), np.zeros((1, 4), np.float32)]
    _write(sink, [(2, {"boxes": b, "score": np.zeros(2, np.float32)}, {"frame": np.arange(2)}) for b in boxes])
    assert sink.per_batch_paths == {"boxes": (tmp_path / "dets.boxes",)}
    assert pq.read_table(tmp_path / "dets.boxes")["batch"].to_pylist() == [0, 0, 0, 1]
    assert pq.read_table(tmp_path / "dets").column_names == ["frame", "batch", "score"]


@pytest.mark.parametrize("codec", ["zstd", "gzip", "none"])
def test_parquet_outputs_are_compressed_with_the_codec_asked_for(tmp_path, codec):
    _write(ParquetSink(tmp_path / "one.parquet", compression=codec), _scores(40, 8))
    _write(ParquetDatasetSink(tmp_path / "set", part_rows=16, compression=codec), _scores(40, 8))
    files = [tmp_path / "one.parquet", *sorted((tmp_path / "set").glob("part-*.parquet"))]
    for file in files:
        metadata = pq.read_metadata(file)
        chunks = [metadata.row_group(g).column(c) for g in range(metadata.num_row_groups) for c in range(2)]
        assert {chunk.compression for chunk in chunks} == {"UNCOMPRESSED" if codec == "none" else codec.upper()}
    with pytest.raises(
        SinkError, match=r"Parquet compression 'zip' is not one this pyarrow writes: \['snappy', 'zstd'"
    ):
        ParquetSink(tmp_path / "x.parquet", compression="zip")


def test_ortpipe_run_compression_and_part_rows_are_for_parquet_outputs(tmp_path, capsys):
    from pipeline.cli import main

    np.save(tmp_path / "in.npy", np.zeros((10, 64), np.float32))
    argv = ["run", "mlp", "--input", str(tmp_path / "in.npy"), "--no-progress", "--output"]
    assert main([*argv, str(tmp_path / "o.parquet"), "--compression", "zstd"]) == 0
    assert pq.read_metadata(tmp_path / "o.parquet").row_group(0).column(0).compression == "ZSTD"
    assert main([*argv, str(tmp_path / "o.npy"), "--compression", "zstd"]) == 1
    assert "--compression is for a Parquet output; " in capsys.readouterr().err
    assert main([*argv, str(tmp_path / "o2.csv"), "--part-rows", "5"]) == 1
    assert "--part-rows is for a Parquet output (its parts)" in capsys.readouterr().err
    assert main([*argv, str(tmp_path / "o2.parquet"), "--part-rows", "5"]) == 0  # a file's journal's parts
    assert main([*argv, str(tmp_path / "o2.jsonl"), "--part-seconds", "5"]) == 1
    assert "--part-seconds is for a Parquet output (its parts)" in capsys.readouterr().err
    np.save(tmp_path / "in.npy", np.zeros((64, 64), np.float32))
    assert main([*argv, str(tmp_path / "set"), "--batch-size", "8", "--part-seconds", "1e-9"]) == 0
    assert len(whole_parts(tmp_path / "set")) == 8  # every batch found its part old enough: a part each


def test_parts_closed_by_time_keep_a_slow_jobs_rows(tmp_path):
    """--part-seconds: a part closes once it is that old, full or not (a camera's few rows a
    second would otherwise sit in one open part for hours)."""
    batches = [(i, 4, {"y": np.full((4, 2), i, np.float32)}, {"row_id": np.arange(4 * i, 4 * i + 4)}) for i in range(3)]
    sink = ParquetDatasetSink(tmp_path / "set", part_seconds=0.5)  # room for a slow first write
    for batch in batches:
        sink.write(*batch)
        time.sleep(0.6)  # the part is old enough at the next batch's end: batches 0-1, then 2
    assert [p.name for p in whole_parts(tmp_path / "set")] == ["part-00000.parquet"]
    sink.close()
    assert len(whole_parts(tmp_path / "set")) == 2 and pq.read_table(tmp_path / "set").num_rows == 12
    with pytest.raises(ValueError, match="part_seconds must be > 0"):
        ParquetDatasetSink(tmp_path / "other", part_seconds=0)


@pytest.mark.parametrize(
    "make",
    [
        lambda folder, resume: ParquetSink(folder / "t.parquet", resume=resume),
        lambda folder, resume: ParquetDatasetSink(folder / "set", part_rows=3, resume=resume),
        lambda folder, resume: CsvSink(folder / "t.csv", resume=resume),
        lambda folder, resume: JsonLinesSink(folder / "t.jsonl", resume=resume),
    ],
    ids=["parquet", "data set", "csv", "jsonl"],
)
def test_a_resumed_table_gives_the_columns_of_the_rows_it_kept(tmp_path, make):
    """What a folder of videos holds a resumed run against (NOTE [ frame positions ])."""
    assert make(tmp_path, True).kept_columns(["path"]) == {}  # nothing kept: nothing to give
    sink = make(tmp_path, False)
    for index, start in enumerate((0, 4)):
        meta = {"path": np.asarray(["a.mp4"] * 4), "frame_index": np.arange(start, start + 4)}
        sink.write(index, 4, {"score": np.ones((4, 2), np.float32)}, meta)
    sink.close()
    resumed = make(tmp_path, True)
    kept = resumed.kept_columns(["path", "frame_index", "timestamp"])  # no timestamp column: left out
    assert sorted(kept) == ["frame_index", "path"]
    assert list(kept["path"]) == ["a.mp4"] * resumed.kept_rows
    assert [int(value) for value in kept["frame_index"]] == list(range(resumed.kept_rows))  # a CSV's as text
    assert resumed.kept_rows == 8
    resumed.close()


def test_a_labelled_sink_writes_each_class_index_by_name_beside_it(tmp_path):
    import pyarrow.parquet as pq

    from pipeline.sinks import LabelledSink, ParquetSink, SinkError

    sink = LabelledSink(ParquetSink(tmp_path / "out.parquet"), "logits_top2_index", ["cat", "dog", "eel"])
    assert sink.label_output == "logits_top2_label" and sink.kept_rows == 0  # the rest is the wrapped sink's
    index = np.array([[2, 0], [1, 2]], np.int64)
    sink.write(0, 2, {"logits_top2_index": index}, {"row_id": np.arange(2)})
    with pytest.raises(SinkError, match=r"batch 1: class 3 of 'logits_top2_index' has no label: 3 labels are given"):
        sink.write(1, 1, {"logits_top2_index": np.array([[3, 0]])}, {"row_id": np.arange(1)})
    with pytest.raises(SinkError, match=r"labels name the classes of 'logits_top2_index', not an output written"):
        sink.write(1, 1, {"logits": np.zeros((1, 3))}, {"row_id": np.arange(1)})
    sink.close()
    table = pq.read_table(tmp_path / "out.parquet")
    assert table["logits_top2_label"].to_pylist() == [["eel", "cat"], ["dog", "eel"]]


@pytest.mark.parametrize(
    ("text", "words"),
    [("", "it is empty"), ("a\n\nb\n", "line 2 is empty"), ("\n\n", "it is empty"), (b"\xff\xfe", "as text")],
)
def test_a_labels_file_is_one_name_a_line(tmp_path, text, words):
    from pipeline.sinks import SinkError, read_labels

    path = tmp_path / "labels.txt"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(SinkError, match=words):
        read_labels(path)
    path.write_text("tench, Tinca tinca\ngoldfish\n\n")
    assert read_labels(path) == ["tench, Tinca tinca", "goldfish"]  # trailing blank lines left out


def test_labels_in_json_as_a_list_or_as_imagenets_class_index(tmp_path):
    import json

    from pipeline.sinks import SinkError, read_labels

    path = tmp_path / "labels.json"
    path.write_text(json.dumps(["tench", "goldfish"]))
    assert read_labels(path) == ["tench", "goldfish"]
    path.write_text(json.dumps({"1": ["n01443537", "goldfish"], "0": ["n01440764", "tench"]}))
    assert read_labels(path) == ["tench", "goldfish"]  # imagenet_class_index.json, in class order
    for bad, words in [
        ({"0": "tench", "2": "shark"}, r"its keys are to be the classes 0 to 1"),
        ([1, 2], "expected a list of names"),
        ([], "expected a list of names"),
        ("tench", "expected a list of names"),
    ]:
        path.write_text(json.dumps(bad))
        with pytest.raises(SinkError, match=words):
            read_labels(path)
    path.write_text("[tench")
    with pytest.raises(SinkError, match="is not JSON"):
        read_labels(path)


class _Flushes(io.BytesIO):
    """A binary stream that keeps what had been written at each flush."""

    def __init__(self) -> None:
        super().__init__()
        self.at_flush: list[bytes] = []

    def flush(self) -> None:
        self.at_flush.append(self.getvalue())


def test_a_csv_stream_is_the_csv_file_flushed_batch_by_batch(tmp_path):
    batches = [
        (2, {"y": np.arange(4, dtype=np.float32).reshape(2, 2)}, {"row_id": np.arange(2)}),
        (1, {"y": np.full((1, 2), 7, np.float32)}, {"row_id": np.array([2])}),
    ]
    _write(CsvSink(tmp_path / "out.csv"), batches)
    stream = _Flushes()
    _write(CsvStreamSink(stream), batches)
    whole = (tmp_path / "out.csv").read_bytes()
    assert stream.getvalue() == whole
    lines = whole.splitlines(keepends=True)
    assert stream.at_flush == [b"".join(lines[:3]), whole]  # the header and each batch's rows as they came
    assert not CsvStreamSink(stream).existing_outputs()


def test_a_csv_stream_refuses_outputs_written_per_batch_and_resuming(tmp_path):
    stream = _Flushes()
    sink = CsvStreamSink(stream, data_dependent=["boxes"])
    with pytest.raises(SinkError, match=r"\['boxes'\] have a count of their own each batch .* a stream has no beside"):
        _write(sink, [(1, {"y": np.zeros(1), "boxes": np.zeros((3, 4))}, {})])
    assert not stream.getvalue()
    from pipeline.jobs import check_output

    with pytest.raises(SinkError, match="--resume goes on after the rows of an output file; standard output keeps"):
        check_output("-", resume=True)


def test_ortpipe_run_writes_csv_to_standard_output_and_its_own_lines_to_standard_error(tmp_path, capsys):
    from pipeline.cli import main

    np.save(tmp_path / "in.npy", np.random.default_rng(0).random((10, 64), np.float32))
    argv = ["run", "mlp", "--input", str(tmp_path / "in.npy"), "--batch-size", "4", "--no-progress", "--output"]
    assert main([*argv, str(tmp_path / "o.csv")]) == 0
    capsys.readouterr()
    assert main([*argv, "-"]) == 0
    out, err = capsys.readouterr()
    assert out == (tmp_path / "o.csv").read_text()
    assert "-> standard output" in err and "10 items in 3 batches" in err
    assert main([*argv, "-", "--resume"]) == 1
    assert "standard output keeps none" in capsys.readouterr().err


def test_ortpipe_run_stops_quietly_when_the_reader_of_its_rows_goes_away(tmp_path):
    """``ortpipe run ... --output - | head -3``: exit 141 (a writer to a closed pipe), no traceback."""
    import os
    import subprocess
    import sys

    from ..helpers import ROOT

    np.save(tmp_path / "in.npy", np.zeros((20_000, 64), np.float32))
    argv = ["run", "mlp", "--input", str(tmp_path / "in.npy"), "--batch-size", "8", "--no-progress", "--output", "-"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        head = [process.stdout.readline() for _ in range(3)]
        process.stdout.close()
        err = process.stderr.read().decode()
        process.wait(60)
    finally:
        process.kill()
    assert head[0].startswith(b'"row_id","scores_0"') and head[2].startswith(b"1,")
    assert process.returncode == 141, err
    assert "Traceback" not in err and "Error" not in err, err


def _lines(data: bytes) -> list[dict]:
    import json

    return [json.loads(line) for line in data.decode().splitlines()]


def test_json_lines_hold_the_rows_of_the_parquet_table_with_lists_and_null_for_nan(tmp_path):
    scores = np.arange(6, dtype=np.float32).reshape(3, 2) / 4
    scores[1, 0] = np.nan
    batches = [
        (2, {"y": scores[:2], "label": np.asarray([3, 4])}, {"path": np.asarray(["a.jpg", "b.jpg"])}),
        (1, {"y": scores[2:], "label": np.asarray([5])}, {"path": np.asarray(["c.jpg"])}),
    ]
    _write(ParquetSink(tmp_path / "t.parquet"), batches)
    _write(JsonLinesSink(tmp_path / "t.jsonl"), batches)
    rows = _lines((tmp_path / "t.jsonl").read_bytes())
    assert rows[1] == {"path": "b.jpg", "y": [None, 0.75], "label": 4}  # JSON has no NaN: null
    expected = pq.read_table(tmp_path / "t.parquet").to_pylist()
    expected[1]["y"] = [None, 0.75]
    assert rows == expected
    stream = _Flushes()
    _write(JsonLinesStreamSink(stream), batches)
    assert _lines(stream.getvalue()) == rows and len(stream.at_flush) == 2  # each batch flushed as it came


def test_json_lines_resume_after_a_line_cut_short_and_write_per_batch_outputs_beside(tmp_path):
    path = tmp_path / "t.jsonl"
    rows = [(2, {"y": np.ones((2, 2), np.float32)}, {"row_id": np.arange(k * 2, k * 2 + 2)}) for k in range(3)]
    _write(JsonLinesSink(path), rows[:2])
    path.write_bytes(path.read_bytes() + b'{"row_id":4,"y":[1.0')  # a kill in the middle of a line
    resumed = JsonLinesSink(path, resume=True)
    assert resumed.kept_rows == 4 and resumed.last_kept_row() == {"row_id": 3, "y": [1.0, 1.0]}
    _write(resumed, rows[2:])
    assert [row["row_id"] for row in _lines(path.read_bytes())] == list(range(6))
    sink = JsonLinesSink(tmp_path / "d.jsonl", data_dependent=["boxes"])
    _write(sink, [(1, {"y": np.zeros(1), "boxes": np.zeros((3, 4))}, {})])
    assert sink.side_paths["boxes"].name == "d.boxes.jsonl"
    assert [row["batch"] for row in _lines(sink.side_paths["boxes"].read_bytes())] == [0, 0, 0]
    with pytest.raises(SinkError, match="a stream has no beside"):
        _write(JsonLinesStreamSink(_Flushes(), data_dependent=["boxes"]), [(1, {"boxes": np.zeros((3, 4))}, {})])


def test_ortpipe_run_writes_json_lines_to_a_file_or_standard_output(tmp_path, capsys):
    from pipeline.cli import main

    np.save(tmp_path / "in.npy", np.random.default_rng(0).random((10, 64), np.float32))
    argv = ["run", "mlp", "--input", str(tmp_path / "in.npy"), "--batch-size", "4", "--no-progress", "--output"]
    assert main([*argv, str(tmp_path / "o.jsonl"), "--limit", "6"]) == 0
    assert main([*argv, str(tmp_path / "o.jsonl"), "--resume"]) == 0  # goes on after its 6 lines
    capsys.readouterr()
    assert main([*argv, "-", "--output-format", "jsonl"]) == 0
    out = capsys.readouterr().out
    assert out == (tmp_path / "o.jsonl").read_text() and [row["row_id"] for row in _lines(out.encode())] == list(
        range(10)
    )
    assert main([*argv, str(tmp_path / "o.csv"), "--output-format", "jsonl"]) == 1
    assert "--output-format is for --output - (standard output)" in capsys.readouterr().err


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names a descriptor's file by /proc/self/fd")
def test_parts_and_merged_files_reach_the_disk_before_their_names_say_they_are_whole(tmp_path, monkeypatch):
    """A part is synced before it is renamed into place, the merged file and the marker before
    the move (NOTE [ journaled Parquet ]): after a machine goes down, a whole part's name never
    points at bytes that were still only in memory."""
    import os

    events: list[tuple[str, str]] = []
    fsync, replace = os.fsync, os.replace

    def recorded_fsync(descriptor):
        events.append(("sync", os.readlink(f"/proc/self/fd/{descriptor}")))
        fsync(descriptor)

    def recorded_replace(source, target):
        events.append(("rename", str(source)))
        replace(source, target)

    monkeypatch.setattr(os, "fsync", recorded_fsync)
    monkeypatch.setattr(os, "replace", recorded_replace)
    sink = ParquetSink(tmp_path / "out.parquet", part_rows=4)
    for index in range(3):
        sink.write(index, 4, {"y": np.full((4, 2), index, np.float32)}, {"row_id": np.arange(4 * index, 4 * index + 4)})
    sink.close()
    monkeypatch.undo()
    renamed = [path for kind, path in events if kind == "rename"]
    assert len(renamed) == 4  # three parts into place, the merged file into the output
    for path in renamed:
        assert ("sync", path) in events[: events.index(("rename", path))], path
    marker = str(tmp_path / ".out.parquet.parts" / "MERGED")
    assert events.index(("sync", marker)) < events.index(("rename", renamed[-1]))
    assert pq.read_table(tmp_path / "out.parquet").num_rows == 12
