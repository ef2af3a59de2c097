"""Sinks written batch by batch, per-row and per-batch outputs (NOTE [ per-batch outputs ]).

The end-to-end runs with a real detector model are in test_data_dependent;
here the sinks get hand-made batches, to pin down names, columns and errors.
"""

from __future__ import annotations

import numpy as np
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from pipeline.sinks import CsvSink, NpySink, ParquetSink, SinkError, file_part


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


@pytest.mark.parametrize("sink", [NpySink, ParquetSink, CsvSink])
def test_a_sink_that_wrote_nothing_leaves_no_file(tmp_path, sink):
    """An empty input, or a run that failed before its first write: no unreadable 0-byte file."""
    path = tmp_path / {NpySink: "out.npy", ParquetSink: "out.parquet", CsvSink: "out.csv"}[sink]
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
