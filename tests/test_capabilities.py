"""The capabilities the job layer asks sources and sinks about, as protocols checked
with isinstance: each sink and source has the ones it implements, and no others."""

from __future__ import annotations

import numpy as np

from pipeline.session import TensorSpec
from pipeline.sinks import CallbackSink, CsvSink, LabelledSink, NpySink, ParquetDatasetSink, ParquetSink
from pipeline.sources import NpySource
from pipeline.util.capabilities import (
    Completable,
    HasOutputs,
    HasWindows,
    KeepsLastRow,
    KeepsRows,
    Named,
    SkipsRows,
    WritesPerBatch,
    kept_rows,
    last_kept_row,
    where,
)

SPEC = TensorSpec("x", np.dtype(np.float32), ("N", 4))


def _write(sink, rows=4):
    sink.write(0, rows, {"y": np.arange(rows, dtype=np.int64)}, {"row_id": np.arange(rows)})


def test_sinks_have_the_capabilities_they_implement(tmp_path):
    data_set, table, npy, csv = (
        ParquetDatasetSink(tmp_path / "set"),
        ParquetSink(tmp_path / "t.parquet"),
        NpySink(tmp_path / "o.npy", ["y"]),
        CsvSink(tmp_path / "o.csv"),
    )
    callback = CallbackSink(lambda *args: None)
    assert isinstance(data_set, Completable) and isinstance(table, Completable)
    assert not isinstance(npy, Completable) and not isinstance(csv, Completable)
    assert all(isinstance(sink, KeepsRows) for sink in (data_set, table, npy, csv))
    assert isinstance(table, KeepsLastRow) and not isinstance(npy, KeepsLastRow)  # a .npy keeps places only
    assert all(isinstance(sink, HasOutputs) for sink in (data_set, table, npy, csv))
    assert isinstance(npy, WritesPerBatch) and not isinstance(callback, (KeepsRows, Completable, HasOutputs))
    assert kept_rows(callback) == 0 and last_kept_row(callback) is None
    for sink in (data_set, table, npy, csv):
        sink.close()


def test_a_labelled_sink_hands_on_what_its_sink_can_do(tmp_path):
    table = ParquetSink(tmp_path / "t.parquet")
    _write(table)
    table.close()
    resumed = LabelledSink(ParquetSink(tmp_path / "t.parquet", resume=True), "y", ["a", "b", "c", "d"])
    assert isinstance(resumed, KeepsRows) and kept_rows(resumed) == 4
    assert last_kept_row(resumed)["row_id"] == 3
    resumed.mark_complete()  # a file has nothing to mark: handed on, a no-op
    resumed.close()
    over_npy = LabelledSink(NpySink(tmp_path / "o.npy", ["y"]), "y", ["a"])
    assert kept_rows(over_npy) == 0 and over_npy.existing_outputs() == []
    over_npy.mark_complete()  # NpySink has no mark_complete: nothing to hand on
    over_npy.close()


def test_sources_have_the_capabilities_they_implement(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((10, 4), np.float32))
    source = NpySource(tmp_path / "x.npy", 4, [SPEC])
    assert isinstance(source, (Named)) and isinstance(source, SkipsRows) and not isinstance(source, HasWindows)
    assert where(source) == str(tmp_path / "x.npy") and where(iter([])) == "list_iterator"
