"""A stopped or killed job goes on where its output ends (NOTE [ resuming ] in sinks).

Every source leaves out exactly the rows a resumed output holds, each later
row keeping its metadata; every sink keeps exactly the whole rows an earlier
run left; and ``ortpipe run --resume`` after a real SIGKILL or SIGTERM of a
running job leaves the file an uninterrupted run would have written.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from pipeline import Pipeline, models
from pipeline.cli import main
from pipeline.jobs import first_rows, open_sink, rows_after
from pipeline.sinks import (
    CsvSink,
    NpySink,
    ParquetDatasetSink,
    ParquetSink,
    ReplacingSink,
    SinkError,
    finish_replacing,
    journal_of,
    read_npy_header_rows,
    record_path,
    replacement_of,
    replacement_under_way,
    staging_folder,
    whole_parts,
)
from pipeline.sources import (
    CsvSource,
    ImageFolderSource,
    NpySource,
    ParquetDatasetSource,
    ParquetSource,
    RowSource,
    SourceBatch,
    SourceError,
    VideoSource,
)

from ..helpers import ROOT, load_module, recorded_as_this_job, stop_signals_handled


def _specs(features: int = 4):
    """The source inputs of a one-input model over ``[N, features]`` float32."""
    from pipeline import TensorSpec

    return [TensorSpec("x", np.dtype(np.float32), ("N", features))]


def _rows(batches) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Every batch of a source joined: its inputs' rows and each metadata column."""
    batches = list(batches)
    inputs = np.concatenate([b.inputs["x"] for b in batches]) if batches else np.empty((0,))
    meta = {name: np.concatenate([b.meta[name] for b in batches]) for name in (batches[0].meta if batches else {})}
    return inputs, meta


def _assert_tail(source, skip: int) -> None:
    """``rows_after(source, skip)`` gives exactly the rows after ``skip`` of the whole source, metadata kept."""
    whole, whole_meta = _rows(source)
    later, later_meta = _rows(rows_after(source, skip))
    if skip == len(whole):
        assert len(later) == 0
        return
    np.testing.assert_array_equal(later, whole[skip:])
    assert later_meta.keys() == whole_meta.keys()
    for name, values in whole_meta.items():
        np.testing.assert_array_equal(later_meta[name], values[skip:])


# -- the rows helpers --------------------------------------------------------------------------------------------


def _generator(batches: int = 5, rows: int = 4, read: list | None = None, closed: list | None = None):
    try:
        for i in range(batches):
            if read is not None:
                read.append(i)
            x = np.arange(i * rows, (i + 1) * rows, dtype=np.float32)[:, None]
            yield SourceBatch({"x": x}, {"row_id": np.arange(i * rows, (i + 1) * rows)})
    finally:
        if closed is not None:
            closed.append(True)


@pytest.mark.parametrize("skip", [0, 1, 4, 6, 19, 20])
def test_rows_after_a_plain_iteration_cuts_the_batch_the_skip_ends_in(skip):
    later = list(rows_after(_generator(), skip))
    assert sum(len(b.inputs["x"]) for b in later) == 20 - skip
    if skip % 4 and skip < 20:
        assert len(later[0].inputs["x"]) == 4 - skip % 4  # cut, not re-batched
    _, meta = _rows(later)
    assert meta.get("row_id", np.empty(0)).tolist() == list(range(skip, 20))


def test_rows_after_more_rows_than_the_source_has_is_refused_and_closes_it():
    closed = []
    with pytest.raises(SourceError, match="holds 20 rows, fewer than the 21 to leave out before its first batch"):
        list(rows_after(_generator(closed=closed), 21))
    assert closed == [True]
    with pytest.raises(ValueError, match="rows to skip must be >= 0"):
        rows_after(_generator(), -1)


def test_first_rows_after_rows_after_is_a_window_of_the_input():
    read = []
    window = list(first_rows(rows_after(_generator(read=read), 6), 5))
    assert _rows(window)[1]["row_id"].tolist() == [6, 7, 8, 9, 10]
    assert read == [0, 1, 2]  # no batch read after the window


class _Counting(RowSource):
    """A row source of its own (no ``after``): read through, and it stays a row source."""

    def __init__(self) -> None:
        self.spec, self.batch_size = _specs(2)[0], 3

    def chunks(self):
        for start in range(0, 10, 3):
            ids = np.arange(start, min(10, start + 3))
            yield [np.full(2, i, np.float32) for i in ids], {"row_id": ids}


def test_rows_after_keeps_a_row_source_one():
    later = rows_after(_Counting(), 4)
    assert isinstance(later, RowSource) and later.spec.name == "x"
    ids = np.concatenate([meta["row_id"] for _, meta in later.chunks()])
    assert ids.tolist() == [4, 5, 6, 7, 8, 9]
    with pytest.raises(SourceError, match="holds 10 rows, fewer than the 11"):
        list(rows_after(_Counting(), 11).chunks())


# -- the sources -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("skip", [0, 3, 8, 37, 40])
def test_npy_source_leaves_out_the_first_rows_unread(tmp_path, skip):
    path = tmp_path / "in.npy"
    np.save(path, np.arange(160, dtype=np.float32).reshape(40, 4))
    source = NpySource(path, 8, _specs())
    _assert_tail(source, skip)
    later = rows_after(source, skip)
    assert len(later) == 40 - skip and later.start == skip  # a slice of the memory map: nothing before it read
    with pytest.raises(SourceError, match="holds 40 rows, fewer than the 41"):
        rows_after(source, 41)


def _parquet(path: Path, rows: int = 100, row_group_size: int = 16, start: int = 0) -> Path:
    values = np.arange(start, start + rows, dtype=np.float32)
    pq.write_table(pa.table({"f0": values, "f1": -values}), path, row_group_size=row_group_size)
    return path


@pytest.mark.parametrize("skip", [0, 5, 16, 33, 99, 100])
def test_parquet_source_reads_no_row_group_before_the_skip(tmp_path, skip):
    source = ParquetSource(_parquet(tmp_path / "t.parquet"), 10, _specs(2))
    _assert_tail(source, skip)
    later = rows_after(source, skip)
    asked = []
    real = later.file.iter_batches

    def recording(**kwargs):
        asked.append(kwargs.get("row_groups"))
        return real(**kwargs)

    later.file = type("Recording", (), {"iter_batches": staticmethod(recording), "metadata": source.file.metadata})()
    batches = list(later)
    assert [len(b.inputs["x"]) for b in batches[:-1]] == [10] * (len(batches) - 1)  # re-cut to the batch size
    if 0 < skip < 100:
        assert asked == [list(range(skip // 16, 7))]  # 7 row groups of 16 rows; those wholly before it not read
    assert len(later) == 100 - skip
    with pytest.raises(SourceError, match="holds 100 rows, fewer than the 101"):
        rows_after(source, 101)


@pytest.mark.parametrize("skip", [0, 7, 30, 31, 55, 90])
def test_parquet_data_set_skips_whole_files_and_keeps_file_and_row(tmp_path, skip):
    folder = tmp_path / "set"
    (folder / "a").mkdir(parents=True)
    _parquet(folder / "a" / "part-0.parquet", rows=30, row_group_size=8)
    _parquet(folder / "a" / "part-1.parquet", rows=25, row_group_size=8, start=30)
    _parquet(folder / "part-2.parquet", rows=35, row_group_size=8, start=55)
    source = ParquetDatasetSource(folder, 16, _specs(2))
    _assert_tail(source, skip)
    if skip == 31:
        _, meta = _rows(rows_after(source, skip))
        assert (meta["file"][0], meta["row_id"][0]) == ("a/part-1.parquet", 1)
    assert len(rows_after(source, skip)) == 90 - skip


@pytest.mark.parametrize("skip", [0, 13, 1500, 2999, 3000])
def test_csv_source_is_read_through_the_skipped_rows_across_blocks(tmp_path, monkeypatch, skip):
    path = tmp_path / "in.csv"
    values = np.arange(3000, dtype=np.float32)
    pcsv.write_csv(pa.table({"f0": values, "f1": values * 2}), path)
    small_blocks = pcsv.ReadOptions(block_size=4096)  # several blocks: the skip crosses their edges
    monkeypatch.setattr(pcsv, "open_csv", functools.partial(pcsv.open_csv, read_options=small_blocks))
    source = CsvSource(path, 64, _specs(2))
    _assert_tail(source, skip)
    with pytest.raises(SourceError, match="holds 3000 rows, fewer than the 3001"):
        list(rows_after(source, 3001))


def test_video_source_skips_frames_without_converting_them(tmp_path):
    pytest.importorskip("av", reason="video sources need PyAV: pip install '.[video]' in a checkout of ortpipe")
    video = load_module("examples/video_frames.py").make_video(tmp_path / "clip.mp4", frames=40, size=32)
    source = VideoSource(video, 8, [_frames_spec()], size=(16, 16))
    whole = list(source.chunks())
    later = rows_after(source, 13)
    assert isinstance(later, VideoSource) and len(later) == len(source) - 13
    chunks = list(later.chunks())
    frames = [f for rows, _ in chunks for f in rows]
    np.testing.assert_array_equal(np.stack(frames), np.stack([f for rows, _ in whole for f in rows])[13:])
    for name in ("frame_index", "timestamp"):
        got = np.concatenate([meta[name] for _, meta in chunks])
        np.testing.assert_array_equal(got, np.concatenate([meta[name] for _, meta in whole])[13:])
    with pytest.raises(SourceError, match="holds 40 rows, fewer than the 41"):
        list(rows_after(source, 41).chunks())


def _frames_spec():
    from pipeline import TensorSpec

    return TensorSpec("frames", np.dtype(np.uint8), ("N", 16, 16, 3))


def test_image_folder_leaves_out_the_first_files_undecoded(tmp_path):
    Image = pytest.importorskip(
        "PIL.Image", reason="image sources need Pillow: pip install '.[images]' in a checkout of ortpipe"
    )
    folder = tmp_path / "images"
    folder.mkdir()
    for i in range(11):
        Image.fromarray(np.full((4, 4, 3), i, np.uint8)).save(folder / f"im{i:02d}.png")
    source = ImageFolderSource(folder, 4, [_frames_spec()], decode_threads=2)
    later = rows_after(source, 6)
    assert [f.name for f in later.files] == [f"im{i:02d}.png" for i in range(6, 11)]
    frames = [f for rows, _ in later.chunks() for f in rows]
    assert [int(f[0, 0, 0]) for f in frames] == list(range(6, 11))
    with pytest.raises(SourceError, match="holds 11 rows, fewer than the 12"):
        rows_after(source, 12)
    skipping = ImageFolderSource(folder, 4, [_frames_spec()], skip_unreadable=True)
    assert rows_after(skipping, 6).files == later.files  # a folder's positions are its files


# -- the sinks ---------------------------------------------------------------------------------------------------


def _batches(rows: int = 50, size: int = 8, seed: int = 0):
    """(index, rows, outputs, meta) of a two-output job's batches."""
    rng = np.random.default_rng(seed)
    scores = rng.random((rows, 3), np.float32)
    labels = rng.integers(0, 9, rows)
    for index, start in enumerate(range(0, rows, size)):
        stop = min(rows, start + size)
        outputs = {"scores": scores[start:stop], "label": labels[start:stop]}
        yield index, stop - start, outputs, {"row_id": np.arange(start, stop)}


def _write_all(sink, batches) -> None:
    for batch in batches:
        sink.write(*batch)
    sink.close()


def _rows_after_batches(batches, skip: int):
    """The batches a resumed job writes: the same rows after ``skip``, numbered anew."""
    out, index = [], 0
    for _, rows, outputs, meta in batches:
        start = max(0, skip)
        skip -= rows
        if start >= rows:
            continue
        cut = slice(start, None)
        out.append((index, rows - start, {n: v[cut] for n, v in outputs.items()}, {n: v[cut] for n, v in meta.items()}))
        index += 1
    return out


def _killed_npy(path: Path, whole_rows: int, row_bytes: int, extra: int) -> None:
    """What a killed writer leaves of a streamed .npy: the header still saying 0 rows, a row cut short."""
    data = bytearray(path.read_bytes())
    header = data[:128].decode("latin1").replace(f"({read_npy_header_rows(path)},", "(0,", 1)
    data[:128] = header.ljust(127).encode("latin1")[:127] + b"\n"
    path.write_bytes(bytes(data[: 128 + whole_rows * row_bytes + extra]))


def test_npy_sink_keeps_the_whole_rows_a_killed_run_left_and_appends(tmp_path):
    batches = list(_batches())
    _write_all(NpySink(tmp_path / "full.npy", ["scores", "label"]), batches)
    _write_all(NpySink(tmp_path / "part.npy", ["scores", "label"]), batches[:3])  # 24 rows
    _killed_npy(tmp_path / "part.scores.npy", 24, 12, 5)  # a kill cut the 25th row short, header unwritten
    _killed_npy(tmp_path / "part.label.npy", 20, 8, 0)  # and this file was 4 rows behind
    sink = NpySink(tmp_path / "part.npy", ["scores", "label"], resume=True)
    assert sink.kept_rows == 20  # rows every output holds
    _write_all(sink, _rows_after_batches(batches, 20))
    for name in ("scores", "label"):
        full, part = tmp_path / f"full.{name}.npy", tmp_path / f"part.{name}.npy"
        assert part.read_bytes() == full.read_bytes()


def test_npy_sink_resuming_nothing_starts_a_new_file_and_a_foreign_file_is_refused(tmp_path):
    sink = NpySink(tmp_path / "new.npy", ["scores"], resume=True)
    assert sink.kept_rows == 0
    sink.close()
    assert not (tmp_path / "new.npy").exists()
    (tmp_path / "other.npy").write_bytes(b"not a numpy file at all")
    with pytest.raises(SinkError, match="cannot resume .*other.npy.*not a .npy file ortpipe wrote"):
        NpySink(tmp_path / "other.npy", ["scores"], resume=True)
    np.save(tmp_path / "fortran.npy", np.asfortranarray(np.zeros((4, 3), np.float32)))
    with pytest.raises(SinkError, match="not a .npy file ortpipe wrote"):
        NpySink(tmp_path / "fortran.npy", ["scores"], resume=True)


@pytest.mark.parametrize("cut_at", [0, 1, 8, 9, 10, 64, 127])
def test_a_npy_file_killed_in_its_header_is_resumed_from_zero(tmp_path, cut_at):
    """Issue 26, item 7: a kill while the header is written leaves its first bytes alone:
    no rows, so the resumed run starts it again and says so."""
    batches = list(_batches())
    scores_only = [(index, rows, {"scores": outputs["scores"]}, meta) for index, rows, outputs, meta in batches]
    _write_all(NpySink(tmp_path / "full.npy", ["scores"]), scores_only)
    (tmp_path / "cut.npy").write_bytes((tmp_path / "full.npy").read_bytes()[:cut_at])
    sink = NpySink(tmp_path / "cut.npy", ["scores"], resume=True)
    assert sink.kept_rows == 0
    assert sink.restarted == [
        f"{str(tmp_path / 'cut.npy')!r} was cut short in its header: it held no rows, and is written anew"
    ]
    _write_all(sink, scores_only)
    assert (tmp_path / "cut.npy").read_bytes() == (tmp_path / "full.npy").read_bytes()


def test_npy_sink_refuses_other_rows_than_the_earlier_runs(tmp_path):
    batches = list(_batches())
    scores_only = [(index, rows, {"scores": outputs["scores"]}, meta) for index, rows, outputs, meta in batches]
    _write_all(NpySink(tmp_path / "out.npy", ["scores"]), scores_only)
    sink = NpySink(tmp_path / "out.npy", ["scores"], resume=True)
    with pytest.raises(SinkError, match="holds float32 rows; these are float64"):
        sink.write(0, 2, {"scores": np.zeros((2, 3))}, {})
    with pytest.raises(SinkError, match=r"has shape \[2, 4\], expected \[2, 3\]"):
        sink.write(0, 2, {"scores": np.zeros((2, 4), np.float32)}, {})
    sink.close()
    assert len(np.load(tmp_path / "out.npy")) == 50  # the kept rows, untouched


@pytest.mark.parametrize("sink_type", [ParquetSink, CsvSink])
def test_a_table_resumed_after_a_stop_equals_the_whole_run(tmp_path, sink_type):
    suffix = ".parquet" if sink_type is ParquetSink else ".csv"
    batches = list(_batches())
    _write_all(sink_type(tmp_path / f"full{suffix}"), batches)
    _write_all(sink_type(tmp_path / f"part{suffix}"), batches[:2])
    sink = sink_type(tmp_path / f"part{suffix}", resume=True)
    assert sink.kept_rows == 16
    _write_all(sink, _rows_after_batches(batches, 16))
    read = pq.read_table if sink_type is ParquetSink else pcsv.read_csv
    assert read(tmp_path / f"part{suffix}").equals(read(tmp_path / f"full{suffix}"))
    assert not list(tmp_path.glob("*.resuming"))


def test_a_csv_line_a_kill_cut_short_is_cut_off(tmp_path):
    batches = list(_batches())
    _write_all(CsvSink(tmp_path / "full.csv"), batches)
    _write_all(CsvSink(tmp_path / "part.csv"), batches[:3])
    text = (tmp_path / "part.csv").read_bytes()
    (tmp_path / "part.csv").write_bytes(text + b"24,0.5,0.2")  # half of row 24
    sink = CsvSink(tmp_path / "part.csv", resume=True)
    assert sink.kept_rows == 24
    _write_all(sink, _rows_after_batches(batches, 24))
    assert (tmp_path / "part.csv").read_bytes() == (tmp_path / "full.csv").read_bytes()
    (tmp_path / "header.csv").write_bytes(b"row_id,sco")  # killed while writing the header
    sink = CsvSink(tmp_path / "header.csv", resume=True)
    assert sink.kept_rows == 0
    _write_all(sink, batches)
    assert (tmp_path / "header.csv").read_bytes() == (tmp_path / "full.csv").read_bytes()


def test_a_damaged_parquet_file_is_refused_with_why(tmp_path):
    batches = list(_batches())
    _write_all(ParquetSink(tmp_path / "out.parquet"), batches)
    data = (tmp_path / "out.parquet").read_bytes()
    (tmp_path / "out.parquet").write_bytes(data[: len(data) // 2])  # no footer: what a killed writer leaves
    with pytest.raises(SinkError, match="not a readable Parquet file .*journal beside it until it is closed"):
        ParquetSink(tmp_path / "out.parquet", resume=True)


def test_a_parquet_file_killed_mid_run_keeps_its_journals_whole_parts(tmp_path):
    """NOTE [ journaled Parquet ]: the rows of every part closed before the kill are kept."""
    batches = list(_batches())
    _write_all(ParquetSink(tmp_path / "full.parquet"), batches)
    killed = ParquetSink(tmp_path / "out.parquet", part_rows=16)
    for batch in batches[:5]:
        killed.write(*batch)  # 40 rows: parts of 16 and 16 closed, 8 rows in the open one; never closed
    assert not (tmp_path / "out.parquet").exists()
    assert sorted(p.name for p in (tmp_path / ".out.parquet.parts").glob("part-*")) == [
        "part-00000.parquet",
        "part-00001.parquet",
    ]
    assert ParquetSink(tmp_path / "out.parquet").existing_outputs() == [tmp_path / ".out.parquet.parts"]
    sink = ParquetSink(tmp_path / "out.parquet", part_rows=16, resume=True)
    assert sink.kept_rows == 32 and sink.last_kept_row()["row_id"] == 31
    _write_all(sink, _rows_after_batches(batches, 32))
    assert pq.read_table(tmp_path / "out.parquet").equals(pq.read_table(tmp_path / "full.parquet"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full.parquet", "out.parquet"]  # no journal left
    assert pq.ParquetFile(tmp_path / "out.parquet").metadata.num_row_groups == 1  # re-joined to row_group_rows


def test_a_run_killed_while_resuming_parquet_keeps_the_earlier_file_and_its_own_parts(tmp_path):
    batches = list(_batches())
    _write_all(ParquetSink(tmp_path / "out.parquet"), batches[:2])
    killed = ParquetSink(tmp_path / "out.parquet", part_rows=16, resume=True)
    assert not (tmp_path / "out.parquet").exists()  # the closed file is the journal's part 0
    for batch in _rows_after_batches(batches, 16)[:3]:
        killed.write(*batch)  # a part of 16 rows closed, 8 in the open one: the process died
    sink = ParquetSink(tmp_path / "out.parquet", resume=True)
    assert sink.kept_rows == 32
    _write_all(sink, _rows_after_batches(batches, 32))
    _write_all(ParquetSink(tmp_path / "full.parquet"), batches)
    assert pq.read_table(tmp_path / "out.parquet").equals(pq.read_table(tmp_path / "full.parquet"))


def test_a_resumed_parquet_file_with_nothing_added_is_the_same_file(tmp_path):
    batches = list(_batches())
    _write_all(ParquetSink(tmp_path / "out.parquet"), batches[:2])
    before = (tmp_path / "out.parquet").read_bytes()
    ParquetSink(tmp_path / "out.parquet", resume=True).close()
    assert (tmp_path / "out.parquet").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.parquet"]


def test_a_new_run_replaces_a_killed_runs_journal_at_its_first_write(tmp_path):
    batches = list(_batches())
    killed = ParquetSink(tmp_path / "out.parquet", part_rows=8)
    for batch in batches[:3]:
        killed.write(*batch)
    sink = ParquetSink(tmp_path / "out.parquet")  # a rerun without --resume: the CLI asks for --overwrite first
    assert whole_parts(tmp_path / ".out.parquet.parts")  # not yet: nothing written
    _write_all(sink, batches[:1])
    assert pq.read_table(tmp_path / "out.parquet").num_rows == 8
    assert not (tmp_path / ".out.parquet.parts").exists()


def test_a_merge_that_fails_leaves_the_journal_to_resume_from(tmp_path, monkeypatch):
    """NOTE [ journaled Parquet ]: the parts are merged beside the job; a failure there (a full
    disk) is raised by close, and every part is still in the journal."""
    from pipeline.sinks import journal

    batches = list(_batches())
    _write_all(ParquetSink(tmp_path / "full.parquet"), batches)

    def disk_full(self, part):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(journal._Merger, "_append", disk_full)
    failing = ParquetSink(tmp_path / "out.parquet", part_rows=16)
    for batch in batches:
        failing.write(*batch)
    with pytest.raises(OSError, match="No space left on device"):
        failing.close()
    monkeypatch.undo()
    assert not (tmp_path / "out.parquet").exists() and len(whole_parts(journal_of(tmp_path / "out.parquet"))) == 4
    sink = ParquetSink(tmp_path / "out.parquet", resume=True)
    assert sink.kept_rows == 50  # every row: the last part was closed before the merge failed
    sink.close()
    assert pq.read_table(tmp_path / "out.parquet").equals(pq.read_table(tmp_path / "full.parquet"))


@pytest.mark.parametrize("cut_at", ["moving the main table", "removing its journal"])
def test_a_close_cut_short_after_the_merges_is_finished_by_the_resume(tmp_path, monkeypatch, cut_at):
    """The kill came after the side table was moved into place and its journal removed:
    before the main table was moved, or before its journal (which holds the marker) was removed."""
    from pipeline.sinks import journal, parquet

    batches = _detections()
    (tmp_path / "whole").mkdir()
    _write_all(ParquetSink(tmp_path / "whole" / "dets.parquet", data_dependent=["boxes"], part_rows=16), batches)
    killed = ParquetSink(tmp_path / "dets.parquet", data_dependent=["boxes"], part_rows=16)
    for batch in batches[:6]:
        killed.write(*batch)  # stopped there: closed, and the close cut short
    replace, remove = os.replace, journal.remove_journal

    def replace_until_the_main_table(source, target):
        if cut_at == "moving the main table" and Path(target).name == "dets.parquet":
            raise KeyboardInterrupt  # stands for the kill: nothing after it runs
        replace(source, target)

    def remove_until_the_main_journal(folder):
        if cut_at == "removing its journal" and folder.name == ".dets.parquet.parts":
            raise KeyboardInterrupt
        remove(folder)

    monkeypatch.setattr(os, "replace", replace_until_the_main_table)
    monkeypatch.setattr(parquet, "remove_journal", remove_until_the_main_journal)
    monkeypatch.setattr(journal, "remove_journal", remove_until_the_main_journal)
    with pytest.raises(KeyboardInterrupt):
        killed.close()
    monkeypatch.undo()
    assert (tmp_path / "dets.boxes.parquet").exists()
    assert (tmp_path / "dets.parquet").exists() == (cut_at == "removing its journal")
    sink = ParquetSink(tmp_path / "dets.parquet", data_dependent=["boxes"], resume=True)
    assert sink.kept_rows == 48
    _write_all(sink, _rows_after_batches(batches, 48))
    got, want = _detection_tables(tmp_path / "dets.parquet"), _detection_tables(tmp_path / "whole" / "dets.parquet")
    assert all(mine.equals(theirs) for mine, theirs in zip(got, want, strict=True))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dets.boxes.parquet", "dets.parquet", "whole"]


def test_a_data_set_killed_mid_part_keeps_its_whole_parts(tmp_path):
    batches = list(_batches())
    _write_all(ParquetSink(tmp_path / "full.parquet"), batches)
    killed = ParquetDatasetSink(tmp_path / "set", part_rows=16)
    for batch in batches[:5]:
        killed.write(*batch)  # 40 rows: parts of 16 and 16 closed, 8 rows in the open one; never closed
    sink = ParquetDatasetSink(tmp_path / "set", part_rows=16, resume=True)
    assert sink.kept_rows == 32
    _write_all(sink, _rows_after_batches(batches, 32))
    assert sorted(p.name for p in (tmp_path / "set").iterdir()) == [f"part-{i:05d}.parquet" for i in range(4)]
    assert pq.read_table(tmp_path / "set").equals(pq.read_table(tmp_path / "full.parquet"))


def test_a_data_set_whose_parts_are_not_ortpipes_is_not_resumed(tmp_path):
    _write_all(ParquetDatasetSink(tmp_path / "set", part_rows=8), list(_batches()))
    (tmp_path / "set" / "part-00002.parquet").unlink()
    with pytest.raises(SinkError, match="its parts are not numbered 0, 1, 2"):
        ParquetDatasetSink(tmp_path / "set", resume=True)


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ""])
def test_a_table_of_other_columns_is_not_resumed(tmp_path, suffix):
    sink_type = {".parquet": ParquetSink, ".csv": CsvSink, "": ParquetDatasetSink}[suffix]
    batches = list(_batches())
    _write_all(sink_type(tmp_path / f"out{suffix}"), batches[:2])
    before = _contents(tmp_path / f"out{suffix}")
    sink = sink_type(tmp_path / f"out{suffix}", resume=True)
    index, rows, outputs, meta = batches[2]
    with pytest.raises(SinkError, match="cannot resume .*: its columns are .*row_id.*this run writes .*logits"):
        sink.write(index, rows, {"logits": outputs["scores"]}, meta)
    sink.close()
    assert _contents(tmp_path / f"out{suffix}") == before


def _contents(path: Path) -> dict[str, bytes]:
    """Every file of an output, by name (a data set's parts, hidden ones too)."""
    files = sorted(path.iterdir()) if path.is_dir() else [path]
    return {file.name: file.read_bytes() for file in files}


@pytest.mark.parametrize("suffix", [".npy", ".csv"])
def test_per_batch_outputs_are_resumed_in_parquet_only(tmp_path, suffix):
    with Pipeline(models.detect(), device="cpu") as pipe:
        batch = models.example_batch("detect", 64)
        first = open_sink(tmp_path / f"hits{suffix}", pipe, ["hits", "hit_scores"])
        for _ in pipe.map_with([batch], lambda index, rows, views: first.write(index, rows, views, {})):
            pass
        first.close()
        with pytest.raises(SinkError, match="the run writes outputs per batch .*write Parquet .* to resume"):
            sink = open_sink(tmp_path / f"hits{suffix}", pipe, ["hits", "hit_scores"], resume=True)
            for _ in pipe.map_with([batch], lambda index, rows, views: sink.write(index, rows, views, {})):
                pass


def _detections(batches: int = 9, rows: int = 8):
    """(index, rows, outputs, meta) of a detector's batches: a score a frame, and a count of boxes of their own."""
    rng = np.random.default_rng(3)
    out = []
    for index in range(batches):
        boxes = rng.random((int(rng.integers(0, 5)), 4), np.float32)  # some batches find nothing
        score = rng.random(rows, np.float32)
        out.append(
            (index, rows, {"boxes": boxes, "score": score}, {"frame": np.arange(index * rows, (index + 1) * rows)})
        )
    return out


def _detection_tables(path: Path) -> tuple[pa.Table, pa.Table]:
    side = path.with_name(path.name.replace(".parquet", ".boxes.parquet")) if path.suffix else Path(f"{path}.boxes")
    return pq.read_table(path), pq.read_table(side)


@pytest.mark.parametrize("sink_type", [ParquetSink, ParquetDatasetSink])
def test_a_detectors_tables_resumed_equal_the_whole_run(tmp_path, sink_type):
    name = "dets.parquet" if sink_type is ParquetSink else "dets"
    options = {"part_rows": 16}
    batches = _detections()
    (tmp_path / "whole").mkdir()
    _write_all(sink_type(tmp_path / "whole" / name, data_dependent=["boxes"], **options), batches)
    stopped = sink_type(tmp_path / name, data_dependent=["boxes"], **options)
    for batch in batches[:5]:
        stopped.write(*batch)
    # killed: the file's journal and the data set keep the parts they closed (16 rows each: batches 0-3)
    sink = sink_type(tmp_path / name, data_dependent=["boxes"], resume=True, **options)
    assert sink.kept_rows == 32
    _write_all(sink, _rows_after_batches(batches, sink.kept_rows))
    for got, want in zip(_detection_tables(tmp_path / name), _detection_tables(tmp_path / "whole" / name), strict=True):
        assert got.equals(want)  # the rows, the boxes, and the batch numbers they join on
    assert not list(tmp_path.glob("*.resuming"))


def test_a_data_set_killed_while_closing_its_parts_drops_the_sides_extra_part(tmp_path):
    batches = _detections()
    _write_all(ParquetDatasetSink(tmp_path / "whole", data_dependent=["boxes"], part_rows=16), batches)
    killed = ParquetDatasetSink(tmp_path / "dets", data_dependent=["boxes"], part_rows=16)
    for batch in batches[:5]:
        killed.write(*batch)  # two parts of each output closed (batches 0-3), batch 4 in the third
    killed._sides["boxes"].finish()  # the kill came once the side's third part was closed, before the main's
    assert (
        len(list((tmp_path / "dets.boxes").glob("part-*"))) == 3 and len(list((tmp_path / "dets").glob("part-*"))) == 2
    )
    sink = ParquetDatasetSink(tmp_path / "dets", data_dependent=["boxes"], part_rows=16, resume=True)
    assert sink.kept_rows == 32
    rest = _rows_after_batches(batches, 32)
    sink.write(*rest[0])
    assert len(list((tmp_path / "dets.boxes").glob("part-*"))) == 2  # never a side's rows the main table lacks
    _write_all(sink, rest[1:])
    for got, want in zip(_detection_tables(tmp_path / "dets"), _detection_tables(tmp_path / "whole"), strict=True):
        assert got.equals(want)


def test_a_resumed_run_with_per_batch_outputs_the_earlier_had_not_is_refused(tmp_path):
    batches = _detections()
    _write_all(ParquetSink(tmp_path / "dets.parquet"), [(i, r, {"score": o["score"]}, m) for i, r, o, m in batches[:2]])
    sink = ParquetSink(tmp_path / "dets.parquet", data_dependent=["boxes"], resume=True)
    with pytest.raises(SinkError, match="the earlier run wrote no outputs per batch, this one writes \\['boxes'\\]"):
        sink.write(*batches[2])
    sink.close()
    _write_all(ParquetSink(tmp_path / "two.parquet", data_dependent=["boxes"]), batches[:2])
    (tmp_path / "two.boxes.parquet").unlink()
    sink = ParquetSink(tmp_path / "two.parquet", data_dependent=["boxes"], resume=True)
    with pytest.raises(SinkError, match="its per-batch output .*two.boxes.parquet' is missing"):
        sink.write(*batches[2])
    sink.close()


# -- ortpipe run --resume, after a real kill ---------------------------------------------------------------------

# a few tenths of a second's run here: the kill, sent once rows are written, lands mid-run
ROWS, FEATURES, LAYERS = 12_000, 64, 32


@pytest.fixture(scope="module")
def busy_job(tmp_path_factory):
    """The input, the model file, and what an uninterrupted run computes (ORT, one batch)."""
    folder = tmp_path_factory.mktemp("busy")
    data = np.random.default_rng(0).random((ROWS, FEATURES), np.float32)
    np.save(folder / "in.npy", data)
    model = folder / "busy.onnx"
    onnx.save(models.busy(features=FEATURES, layers=LAYERS), model)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return folder / "in.npy", model, session.run(None, {"x": data})[0]


def _argv(job, output: Path, *more: str) -> list[str]:
    data, model, _ = job
    parts = [] if output.suffix in (".npy", ".csv") else ["--part-rows", "4096"]  # Parquet: several parts in a run
    return ["run", str(model), "--input", str(data), "--output", str(output), "--batch-size", "8", "--threads", "1",
            "--device", "cpu", "--no-progress", *parts, *more]  # fmt: skip


def _stopped_mid_run(argv: list[str], output: Path, *signums: int) -> tuple[int, str]:
    """``ortpipe run argv`` in a process of its own, sent ``signums`` at once when it has written some
    rows into ``output`` (an --overwrite's into its replacement, not the earlier file beside it)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        preexec_fn=stop_signals_handled,  # a runner that ignores SIGINT does not pass that on
    )
    try:
        started = process.stdout.readline()  # "device: ...": the job is about to read its first batch
        assert started.startswith("device:"), started
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            if _has_written(replacement_of(output) if "--overwrite" in argv else output):
                break
            time.sleep(0.005)
        for signum in signums:
            process.send_signal(signum)
        rest, _ = process.communicate(timeout=60)
    finally:
        process.kill()
    return process.returncode, rest


def _has_written(output: Path) -> bool:
    """Whether a run has written rows into ``output``: .npy and CSV grow batch by batch; Parquet
    keeps its closed parts (a file's in its journal)."""
    parts = journal_of(output) if output.suffix == ".parquet" else output
    return (parts / "part-00000.parquet").exists() or (output.is_file() and output.stat().st_size > 64 * 1024)


def _written(output: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """The scores a run wrote and their row ids (None for .npy, which has no metadata)."""
    if output.suffix == ".npy":
        return np.load(output), None
    table = pcsv.read_csv(output) if output.suffix == ".csv" else pq.read_table(output)
    if output.suffix != ".csv":
        scores = np.stack(table["y"].to_numpy(zero_copy_only=False))
    else:
        scores = np.stack([table[f"y_{i}"].to_numpy() for i in range(FEATURES)], axis=1)
    return scores, table["row_id"].to_numpy()


def _kept(capsys) -> int:
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("resuming:"))
    return int(line.split(" holds ")[1].split()[0])


KILLED = -signal.SIGKILL  # Popen's returncode of a process a signal ended
TERMINATED = 128 + signal.SIGTERM  # ortpipe's own exit status after a graceful stop


@pytest.mark.parametrize(
    ("suffix", "signum", "status"),
    [
        (".npy", signal.SIGKILL, KILLED),
        (".csv", signal.SIGKILL, KILLED),
        (".parquet", signal.SIGTERM, TERMINATED),
        (".parquet", signal.SIGKILL, KILLED),
        ("", signal.SIGKILL, KILLED),
    ],
    ids=["npy-killed", "csv-killed", "parquet-terminated", "parquet-killed", "data-set-killed"],
)
def test_ortpipe_run_resumes_a_job_killed_mid_run(tmp_path, capsys, busy_job, suffix, signum, status):
    output = tmp_path / f"scores{suffix}"
    code, said = _stopped_mid_run(_argv(busy_job, output), output, signum)
    assert code == status, said
    if signum == signal.SIGTERM:
        assert "interrupted after" in said and "--resume goes on from there" in said
    assert not (output / "_SUCCESS").exists()  # a data set: not complete
    assert main(_argv(busy_job, output, "--resume")) == 0
    assert (output / "_SUCCESS").exists() == (suffix == "")
    kept = _kept(capsys)
    assert 0 < kept < ROWS  # the job had written some rows, not all: the resumed run ran the rest
    scores, ids = _written(output)
    np.testing.assert_allclose(scores, busy_job[2], rtol=1e-5, atol=1e-6)
    if ids is not None:
        np.testing.assert_array_equal(ids, np.arange(ROWS))


def test_a_terminal_that_closes_stops_the_job_gracefully_unless_told_to_ignore_it(tmp_path, capsys, busy_job):
    """SIGHUP (an ssh session dropped) as SIGTERM: the Parquet file closed, readable, resumable; under
    nohup, which ignores it, the job goes on to its end."""
    output = tmp_path / "scores.parquet"
    code, said = _stopped_mid_run(_argv(busy_job, output), output, signal.SIGHUP)
    assert code == 128 + signal.SIGHUP and "interrupted after" in said, said
    assert 0 < pq.read_metadata(output).num_rows < ROWS  # the footer written
    assert main(_argv(busy_job, output, "--resume")) == 0
    np.testing.assert_array_equal(_written(output)[1], np.arange(ROWS))
    nohup = tmp_path / "nohup.parquet"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", *_argv(busy_job, nohup)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),  # what nohup does
    )
    try:
        assert process.stdout.readline().startswith("device:")
        process.send_signal(signal.SIGHUP)
        rest, _ = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, rest
    assert pq.read_metadata(nohup).num_rows == ROWS


def test_a_second_signal_aborts_the_job_and_leaves_a_readable_output_that_resumes(tmp_path, capsys, busy_job):
    output = tmp_path / "scores.parquet"
    code, said = _stopped_mid_run(_argv(busy_job, output), output, signal.SIGTERM, signal.SIGINT)
    # the first signal handled stops the job and names the exit status, the second aborts it: which
    # is first depends on whether the interpreter looks for signals between their deliveries (when it
    # finds both pending it runs SIGINT's handler first)
    assert code in (128 + signal.SIGINT, 128 + signal.SIGTERM), said
    assert "Traceback" not in said
    assert "interrupted after" in said and "--resume goes on from there" in said
    # the rows kept: in the file, or in its journal where the abort cut its close short (a merge of
    # many parts takes a while: NOTE [ journaled Parquet ])
    kept = [output] if output.exists() and not whole_parts(journal_of(output)) else whole_parts(journal_of(output))
    on_disk = sum(pq.read_metadata(path).num_rows for path in kept)
    assert 0 < on_disk < ROWS
    # issue 26, item 2: it says it was an abort, and what the disk really holds
    assert "aborted by a second signal" in said, said
    claimed = re.search(r"(?:holds|hold) ([\d,]+) rows", said)
    assert claimed is not None and int(claimed.group(1).replace(",", "")) == on_disk, said
    assert main(_argv(busy_job, output, "--resume")) == 0
    scores, ids = _written(output)
    np.testing.assert_allclose(scores, busy_job[2], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(ids, np.arange(ROWS))


def test_a_detection_job_killed_mid_run_resumes_to_the_whole_runs_tables(tmp_path, capsys):
    data = tmp_path / "in.npy"
    np.save(data, np.random.default_rng(5).standard_normal((80_000, 64)).astype(np.float32))
    argv = ["run", "detect", "--input", str(data), "--batch-size", "8", "--device", "cpu", "--no-progress"]
    argv += ["--part-rows", "2048", "--output"]
    assert main([*argv, str(tmp_path / "whole")]) == 0
    code, said = _stopped_mid_run([*argv, str(tmp_path / "dets")], tmp_path / "dets", signal.SIGKILL)
    assert code == KILLED, said
    assert main([*argv, str(tmp_path / "dets"), "--resume"]) == 0
    kept = _kept(capsys)
    assert 0 < kept < 80_000 and kept % 2048 == 0  # whole parts, closed at batch boundaries
    for name in ("", ".hits", ".hit_scores"):
        got, want = pq.read_table(f"{tmp_path / 'dets'}{name}"), pq.read_table(f"{tmp_path / 'whole'}{name}")
        assert got.equals(want), name  # every frame, every hit, and the batch numbers they join on


def test_ortpipe_run_refuses_to_run_over_a_killed_parquet_files_journal(tmp_path, capsys, busy_job):
    output = tmp_path / "scores.parquet"
    code, _ = _stopped_mid_run(_argv(busy_job, output), output, signal.SIGKILL)
    assert code == -signal.SIGKILL
    assert main(_argv(busy_job, output)) == 1
    assert f"'{journal_of(output)}' holds an earlier run's rows: --resume goes on after them" in capsys.readouterr().err
    assert main(_argv(busy_job, output, "--overwrite")) == 0
    assert pq.read_metadata(output).num_rows == ROWS and not journal_of(output).exists()


def test_ortpipe_run_resume_with_limit_and_when_nothing_is_left(tmp_path, capsys):
    data = tmp_path / "in.npy"
    np.save(data, np.random.default_rng(1).random((100, 64), np.float32))
    output = tmp_path / "out.parquet"
    argv = ["run", "mlp", "--input", str(data), "--output", str(output), "--batch-size", "16", "--no-progress"]
    assert main([*argv, "--resume"]) == 0  # nothing to resume: a plain run
    assert "resuming" not in capsys.readouterr().out
    whole = pq.read_table(output)
    output.unlink()
    assert main([*argv, "--limit", "30"]) == 0
    assert main([*argv, "--limit", "70", "--resume"]) == 0
    out = capsys.readouterr().out
    assert "holds 30 rows of an earlier run" in out and "40 items in 3 batches" in out  # 16, 16 and 8
    assert main([*argv, "--limit", "60", "--resume"]) == 0
    assert "nothing left to run: " in capsys.readouterr().out
    assert main([*argv, "--resume"]) == 0
    assert pq.read_table(output).equals(whole)
    assert main([*argv, "--resume"]) == 0
    assert "already holds the 100 rows" in capsys.readouterr().out


def test_ortpipe_run_resume_of_another_input_is_refused_before_any_work(tmp_path, capsys):
    data, output = tmp_path / "in.npy", tmp_path / "out.npy"
    np.save(data, np.zeros((40, 64), np.float32))
    argv = ["run", "mlp", "--input", str(data), "--output", str(output), "--no-progress"]
    assert main(argv) == 0
    np.save(data, np.zeros((30, 64), np.float32))
    assert main([*argv, "--resume"]) == 1
    err = capsys.readouterr().err
    assert "was written by another job (this run / that one: input" in err and "7,808 bytes" in err
    recorded_as_this_job([*argv, "--resume"])  # the record agrees: the rows' own check
    assert main([*argv, "--resume"]) == 1
    assert "holds 30 rows, fewer than the 40 to leave out" in capsys.readouterr().err
    assert read_npy_header_rows(output) == 40 and len(np.load(output)) == 40


def test_ortpipe_run_into_a_data_set_folder_of_an_earlier_run_is_refused_before_any_work(tmp_path, capsys):
    data = tmp_path / "in.npy"
    np.save(data, np.zeros((40, 64), np.float32))
    argv = [
        "run",
        "mlp",
        "--input",
        str(data),
        "--output",
        str(tmp_path / "scores"),
        "--batch-size",
        "8",
        "--no-progress",
    ]
    assert main([*argv, "--part-rows", "16"]) == 0
    assert (tmp_path / "scores" / "_SUCCESS").exists()
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert "holds 3 part file(s) of an earlier run: resume to go on from them" in err
    assert "device:" not in out.split("40 items")[-1]  # refused before the pipeline was made
    assert main([*argv, "--resume"]) == 0
    assert "nothing left to run" in capsys.readouterr().out


def test_ortpipe_run_does_not_write_a_data_set_inside_the_one_it_reads(tmp_path, capsys):
    folder = tmp_path / "features"
    folder.mkdir()
    pq.write_table(pa.table({f"f{i}": np.zeros(8, np.float32) for i in range(64)}), folder / "a.parquet")
    argv = ["run", "mlp", "--input", str(folder), "--no-progress", "--output"]
    assert main([*argv, str(folder / "scores")]) == 1
    assert "is inside the data set" in capsys.readouterr().err
    assert main([*argv, str(folder / "_scores")]) == 0  # a name readers leave out
    assert pq.read_table(folder / "_scores").num_rows == 8


def test_a_stopped_job_leaves_its_data_set_unmarked_and_a_finished_one_marked(tmp_path):
    import threading

    from pipeline.jobs import run_job

    stop = threading.Event()

    def batches(count: int):
        for i in range(count):
            if i == 3:
                stop.set()  # as the first Ctrl-C or SIGTERM does
            yield SourceBatch({"x": np.full((8, 64), i, np.float32)}, {"row_id": np.arange(8 * i, 8 * i + 8)})

    with Pipeline(models.mlp(), device="cpu") as pipe:
        summary = run_job(pipe, batches(10), ParquetDatasetSink(tmp_path / "stopped", part_rows=8), stop=stop)
        assert summary.interrupted and 0 < pq.read_table(tmp_path / "stopped").num_rows < 80
        assert not (tmp_path / "stopped" / "_SUCCESS").exists()
        summary = run_job(pipe, batches(2), ParquetDatasetSink(tmp_path / "done", part_rows=8))
        assert not summary.interrupted and (tmp_path / "done" / "_SUCCESS").exists()


# -- the input checked against the output's last row ------------------------------------------------------------


def _table_with_ids(path: Path, ids) -> Path:
    values = np.arange(len(ids) * 64, dtype=np.float32).reshape(len(ids), 64)
    table = {"id": np.asarray(ids, np.int64), **{f"f{i}": values[:, i] for i in range(64)}}
    pq.write_table(pa.table(table), path, row_group_size=16)
    return path


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ""])
def test_resuming_from_another_input_is_refused_where_the_output_keeps_ids(tmp_path, capsys, suffix):
    data, output = tmp_path / "in.parquet", tmp_path / f"out{suffix}"
    argv = ["run", "mlp", "--input", str(data), "--output", str(output), "--id-column", "id", "--batch-size", "8"]
    argv += ["--no-progress"]
    _table_with_ids(data, range(1000, 1100))
    assert main([*argv, "--limit", "30"]) == 0
    _table_with_ids(data, range(2000, 2100))  # regenerated: as many rows, other ids
    assert main([*argv, "--resume"]) == 1
    assert "was written by another job (this run / that one: input" in capsys.readouterr().err
    recorded_as_this_job([*argv, "--resume"])  # the record agrees: the rows' own check
    assert main([*argv, "--resume"]) == 1
    err = capsys.readouterr().err
    assert "cannot resume: row 29 of" in err and "(id 2029 where the output has " in err
    _table_with_ids(data, range(1000, 1100))  # the input it was made from: resumed
    recorded_as_this_job([*argv, "--resume"])
    assert main([*argv, "--resume"]) == 0
    ids = (pcsv.read_csv(output) if suffix == ".csv" else pq.read_table(output))["id"].to_pylist()
    assert ids == list(range(1000, 1100))


def test_resuming_after_files_were_added_to_the_data_set_is_refused(tmp_path, capsys):
    folder = tmp_path / "features"
    folder.mkdir()
    for name in ("b.parquet", "c.parquet"):
        _table_with_ids(folder / name, range(20))
    argv = ["run", "mlp", "--input", str(folder), "--output", str(tmp_path / "scores"), "--batch-size", "8"]
    argv += ["--no-progress", "--input-column", "x=" + ",".join(f"f{i}" for i in range(64))]
    assert main([*argv, "--limit", "25"]) == 0
    _table_with_ids(folder / "a.parquet", range(20))  # sorts first: every row after it moves
    assert main([*argv, "--resume"]) == 1
    assert "file 'b.parquet' where the output has 'c.parquet'" in capsys.readouterr().err


def test_resuming_after_images_were_added_is_refused(tmp_path, capsys):
    Image = pytest.importorskip(
        "PIL.Image", reason="image sources need Pillow: pip install '.[images]' in a checkout of ortpipe"
    )
    folder = tmp_path / "images"
    folder.mkdir()
    for i in range(1, 12):
        Image.fromarray(np.full((16, 16, 3), i, np.uint8)).save(folder / f"im{i:02d}.png")
    argv = ["run", "convnet", "--input", str(folder), "--output", str(tmp_path / "tags.parquet"), "--size", "16x16"]
    argv += ["--batch-size", "4", "--no-progress"]
    assert main([*argv, "--limit", "6"]) == 0
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(folder / "im00.png")
    assert main([*argv, "--resume"]) == 1
    assert "im05.png' where the output has " in capsys.readouterr().err
    (folder / "im00.png").unlink()
    assert main([*argv, "--resume"]) == 0  # decoded into the slots, the check row left out
    paths = pq.read_table(tmp_path / "tags.parquet")["path"].to_pylist()
    assert [Path(p).name for p in paths] == [f"im{i:02d}.png" for i in range(1, 12)]
    (folder / "im11.png").unlink()  # the input now ends before the output's last row
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 1
    assert "has no row 10, the output's last: the input is shorter than the one the output" in capsys.readouterr().err


def test_resumed_checks_the_row_before_and_leaves_it_out_of_a_python_job(tmp_path):
    from pipeline.jobs import resumed, run_job

    data = _table_with_ids(tmp_path / "in.parquet", range(500, 540))
    with Pipeline(models.mlp(), device="cpu") as pipe:
        source = ParquetSource(data, 8, pipe.source_inputs, {"x": [f"f{i}" for i in range(64)]}, "id")
        run_job(pipe, first_rows(source, 13), ParquetSink(tmp_path / "o.parquet"))
        sink = ParquetSink(tmp_path / "o.parquet", resume=True)
        assert sink.kept_rows == 13 and sink.last_kept_row()["id"] == 512
        summary = run_job(pipe, resumed(source, sink), sink)
    assert summary.items == 27
    assert pq.read_table(tmp_path / "o.parquet")["id"].to_pylist() == list(range(500, 540))


def _ids_sink(path: Path, ids: range) -> ParquetSink:
    """An output an earlier run left holding the rows of ``ids``, opened to resume."""
    sink = ParquetSink(path)
    sink.write(0, len(ids), {"y": np.ones((len(ids), 1), np.float32)}, {"id": np.asarray(ids)})
    sink.close()
    return ParquetSink(path, resume=True)


def _generated(ids: range, batch: int = 4):
    for start in range(ids.start, ids.stop, batch):
        rows = np.arange(start, min(start + batch, ids.stop))
        yield SourceBatch({"x": rows[:, None].astype(np.float32)}, {"id": rows})


@pytest.mark.parametrize("kept", [1, 8, 9, 19, 20])
def test_a_generator_is_resumed_reading_it_once_the_row_before_checked_on_the_way(tmp_path, kept):
    from pipeline.jobs import resumed

    sink = _ids_sink(tmp_path / "o.parquet", range(100, 100 + kept))
    rest = list(resumed(_generated(range(100, 120)), sink))
    assert [int(i) for b in rest for i in b.meta["id"]] == list(range(100 + kept, 120))
    assert [len(b.meta["id"]) for b in rest][1:] == [4] * (len(rest) - 1)  # the batches after it keep their places
    with pytest.raises(SourceError, match=f"row {kept - 1} of 'generator' is not the last row the output holds"):
        resumed(_generated(range(200, 220)), sink)  # refused at once, before any batch
    with pytest.raises(SourceError, match=f"holds {kept - 1} rows, fewer than the {kept} to leave out"):
        resumed(_generated(range(100, 100 + kept - 1)), sink)
    sink.close()


@pytest.mark.parametrize("kept", [7, 8, 2999, 3000])
def test_a_resumed_csv_is_parsed_once_its_row_before_checked_on_the_way(tmp_path, monkeypatch, kept):
    from pipeline.jobs import resumed

    path = tmp_path / "in.csv"
    ids = np.arange(1000, 4000)
    pcsv.write_csv(pa.table({"id": ids, "f0": ids.astype(np.float32)}), path)
    source = CsvSource(path, 8, _specs(1), id_column="id")
    sink = _ids_sink(tmp_path / "o.parquet", range(1000, 1000 + kept))
    opened = []
    open_csv = pcsv.open_csv
    monkeypatch.setattr(pcsv, "open_csv", lambda *a, **k: opened.append(a) or open_csv(*a, **k))
    rest = list(resumed(source, sink))
    assert len(opened) == 1  # read once: the check on the way, not a read of its own first
    assert [int(i) for b in rest for i in b.meta["id"]] == list(range(1000 + kept, 4000))
    assert all(len(b.meta["id"]) == 8 for b in rest[:-1])  # whole batches from the first new row
    assert list(resumed(source, sink, 0, kept)) == []  # nothing left in the window: the row checked on its own
    stopped = list(resumed(source, sink, 0, kept + 5))  # a window's end: as many rows as it leaves
    assert [int(i) for b in stopped for i in b.meta["id"]] == list(range(1000 + kept, min(4000, 1005 + kept)))
    other = tmp_path / "other.csv"
    pcsv.write_csv(pa.table({"id": ids + 1, "f0": ids.astype(np.float32)}), other)
    with pytest.raises(SourceError, match=f"row {kept - 1} of .*other.csv' is not the last row the output holds"):
        resumed(CsvSource(other, 8, _specs(1), id_column="id"), sink)
    sink.close()


# -- a folder whose unreadable images are skipped: files, not rows ------------------------------------------------


@pytest.fixture
def photos_with_broken_ones(tmp_path):
    Image = pytest.importorskip(
        "PIL.Image", reason="image sources need Pillow: pip install '.[images]' in a checkout of ortpipe"
    )
    folder = tmp_path / "photos"
    folder.mkdir()
    for i in range(20):
        if i in (3, 11, 12):
            (folder / f"im{i:02d}.png").write_bytes(b"not an image")
        else:
            Image.fromarray(np.full((16, 16, 3), i, np.uint8)).save(folder / f"im{i:02d}.png")
    return folder


def _paths(path: Path) -> list[str]:
    table = pcsv.read_csv(path) if path.suffix == ".csv" else pq.read_table(path)
    return [Path(p).name for p in table["path"].to_pylist()]


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ""])
def test_a_run_skipping_unreadable_images_resumes_after_the_last_file_written(
    tmp_path, capsys, photos_with_broken_ones, suffix
):
    argv = ["run", "convnet", "--input", str(photos_with_broken_ones), "--size", "16x16", "--batch-size", "4"]
    argv += ["--skip-unreadable", "--no-progress", "--output"]
    assert main([*argv, str(tmp_path / "whole.parquet")]) == 0
    output = str(tmp_path / f"part{suffix}")
    assert main([*argv, output, "--limit", "13"]) == 0  # 13 files: 10 images, 3 unreadable
    assert main([*argv, output, "--resume"]) == 0
    assert "holds 10 rows of an earlier run" in capsys.readouterr().out
    assert (
        _paths(Path(output))
        == _paths(tmp_path / "whole.parquet")
        == [f"im{i:02d}.png" for i in range(20) if i not in (3, 11, 12)]
    )


def test_a_run_skipping_unreadable_images_is_not_resumed_into_npy_or_from_another_folder(
    tmp_path, capsys, photos_with_broken_ones
):
    argv = ["run", "convnet", "--input", str(photos_with_broken_ones), "--size", "16x16", "--batch-size", "4"]
    argv += ["--skip-unreadable", "--no-progress", "--output"]
    assert main([*argv, str(tmp_path / "part.npy"), "--limit", "8"]) == 0
    assert main([*argv, str(tmp_path / "part.npy"), "--resume"]) == 1
    assert "only a table's path column says which file comes next" in capsys.readouterr().err
    assert main([*argv, str(tmp_path / "part.parquet"), "--limit", "8"]) == 0
    (photos_with_broken_ones / "im07.png").rename(photos_with_broken_ones / "im07b.png")
    assert main([*argv, str(tmp_path / "part.parquet"), "--resume"]) == 1
    assert "which is not an image of" in capsys.readouterr().err


def test_shards_of_a_folder_with_unreadable_images_are_windows_of_its_files(tmp_path, capsys, photos_with_broken_ones):
    argv = ["run", "convnet", "--input", str(photos_with_broken_ones), "--size", "16x16", "--batch-size", "4"]
    argv += ["--skip-unreadable", "--no-progress", "--output"]
    for shard in range(3):
        assert main([*argv, str(tmp_path / f"s{shard}.parquet"), "--shard", f"{shard}/3"]) == 0
    err = capsys.readouterr().err
    assert all(f"im{i:02d}.png" in err for i in (3, 11, 12))  # each listed by the shard that met it
    names = [name for shard in range(3) for name in _paths(tmp_path / f"s{shard}.parquet")]
    assert names == [f"im{i:02d}.png" for i in range(20) if i not in (3, 11, 12)]


# -- a rerun that forgot --resume does not throw a long job's rows away -------------------------------------------


@pytest.mark.parametrize("output", ["out.parquet", "out.csv", "out.npy"])
def test_an_output_of_an_earlier_run_is_refused_unless_resumed_or_overwritten(tmp_path, capsys, output):
    data = tmp_path / "in.npy"
    np.save(data, np.random.default_rng(2).random((40, 64), np.float32))
    argv = ["run", "mlp", "--input", str(data), "--output", str(tmp_path / output), "--no-progress"]
    assert main(argv) == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("out")}
    assert main(argv) == 1
    assert "holds an earlier run's rows: --resume goes on after them, --overwrite replaces them" in (
        capsys.readouterr().err
    )
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("out")} == before
    assert main([*argv, "--overwrite"]) == 0
    assert main([*argv, "--resume", "--overwrite"]) == 1
    assert "choose one" in capsys.readouterr().err


def test_an_earlier_output_is_refused_before_the_model_is_loaded(tmp_path, capsys):
    """A large model takes seconds to load (minutes onto a GPU with TensorRT):
    a rerun that forgot --resume hears so first.  The model here cannot load at all."""
    np.save(tmp_path / "in.npy", np.zeros((4, 64), np.float32))
    (tmp_path / "out.parquet").write_bytes(b"an earlier run's table")
    (tmp_path / "broken.onnx").write_bytes(b"not a model")
    argv = ["run", str(tmp_path / "broken.onnx"), "--input", str(tmp_path / "in.npy"), "--no-progress", "--output"]
    assert main([*argv, str(tmp_path / "out.parquet")]) == 1
    assert "out.parquet' holds an earlier run's rows" in capsys.readouterr().err
    assert main([*argv, str(tmp_path / "new.parquet")]) == 2  # a new output: the model's failure, 2 as in bench
    assert "broken.onnx" in capsys.readouterr().err


def test_the_files_beside_a_multi_output_npy_count_as_its_output(tmp_path, capsys):
    batch = models.example_batch("identity", 8)
    np.save(tmp_path / "in.npy", batch["x"])
    argv = [
        "run",
        "identity",
        "--input",
        str(tmp_path / "in.npy"),
        "--output",
        str(tmp_path / "o.npy"),
        "--no-progress",
    ]
    with Pipeline(models.identity(), device="cpu") as pipe:
        sink = NpySink(tmp_path / "o.npy", pipe.output_names)
        assert sink.existing_outputs() == []
    (tmp_path / "o.npy").write_bytes(b"")  # an empty file holds nothing: not refused
    assert main(argv) == 0
    assert main(argv) == 1
    assert "o.npy' holds an earlier run's rows" in capsys.readouterr().err
    two = NpySink(tmp_path / "two.npy", ["a", "b"])
    np.save(tmp_path / "two.b.npy", np.zeros(3))
    assert two.existing_outputs() == [tmp_path / "two.b.npy"]


def test_overwriting_a_data_set_removes_ortpipes_files_and_nothing_else(tmp_path, capsys):
    data = tmp_path / "in.npy"
    np.save(data, np.random.default_rng(2).random((40, 64), np.float32))
    argv = ["run", "detect", "--input", str(data), "--output", str(tmp_path / "dets"), "--batch-size", "8"]
    argv += ["--part-rows", "16", "--no-progress"]
    assert main(argv) == 0
    first = pq.read_table(tmp_path / "dets.hits")
    (tmp_path / "dets" / ".part-00009.parquet.inprogress").write_bytes(b"a killed run's")
    assert main(argv) == 1  # refused: parts of an earlier run
    assert main([*argv, "--overwrite"]) == 0
    assert pq.read_table(tmp_path / "dets.hits").equals(first)  # the side data set rewritten, not added to
    assert not (tmp_path / "dets" / ".part-00009.parquet.inprogress").exists()
    (tmp_path / "dets" / "notes.txt").write_text("mine")
    assert main([*argv, "--overwrite"]) == 1
    assert "it holds other files (notes.txt" in capsys.readouterr().err
    assert (tmp_path / "dets" / "notes.txt").read_text() == "mine"


def test_a_stopped_run_is_told_whether_resume_would_take_it(tmp_path):
    import argparse

    from pipeline.cli._run_reports import resume_hint as _resume_hint

    batch = _detections()[0]
    hints = {}
    for name, sink in [
        ("d.npy", NpySink(tmp_path / "d.npy", ["boxes", "score"], data_dependent=["boxes"])),
        ("d.csv", CsvSink(tmp_path / "d.csv", data_dependent=["boxes"])),
        ("d.parquet", ParquetSink(tmp_path / "d.parquet", data_dependent=["boxes"])),
    ]:
        sink.write(*batch)
        sink.close()
        hints[name] = _resume_hint(argparse.Namespace(output=tmp_path / name, skip_unreadable=False), sink, "npy")
    assert hints["d.parquet"] == "--resume goes on from there"
    assert (
        "cannot be resumed (outputs written per batch are kept in step with the rows in Parquet, not npy)"
        in (hints["d.npy"])
    )
    assert "not csv" in hints["d.csv"]
    plain = NpySink(tmp_path / "p.npy", ["score"])
    skipping = argparse.Namespace(output=tmp_path / "p.npy", skip_unreadable=True)
    assert "needs a table's path column" in _resume_hint(skipping, plain, "images")
    assert _resume_hint(skipping, plain, "videos") == "--resume goes on from there"  # frames are counted
    came_short = argparse.Namespace(cut_short=[("clips/a.avi", 12, 30)])  # a folder of videos, one cut short
    assert "needs a table's path and frame_index columns" in _resume_hint(skipping, plain, "videos", came_short)
    stream = argparse.Namespace(output=tmp_path / "p.npy", skip_unreadable=False, input="rtsp://cam/1")
    assert "a stream is read from its first frame, so it cannot be resumed" in _resume_hint(stream, plain, "video")


def test_a_data_set_killed_before_its_first_main_part_resumes_with_no_stale_side_part(tmp_path):
    batches = _detections()
    _write_all(ParquetDatasetSink(tmp_path / "whole", data_dependent=["boxes"], part_rows=16), batches)
    killed = ParquetDatasetSink(tmp_path / "dets", data_dependent=["boxes"], part_rows=16)
    killed.write(*batches[0])
    killed._sides["boxes"].finish()  # killed once the side's first part was closed, before the main's
    sink = ParquetDatasetSink(tmp_path / "dets", data_dependent=["boxes"], part_rows=16, resume=True)
    assert sink.kept_rows == 0
    sink.write(*batches[0])
    assert list((tmp_path / "dets.boxes").glob("part-*")) == []  # never a side's rows the main table lacks
    _write_all(sink, batches[1:])
    for got, want in zip(_detection_tables(tmp_path / "dets"), _detection_tables(tmp_path / "whole"), strict=True):
        assert got.equals(want)


def _killed_when(argv: list[str], written: Callable[[], bool]) -> None:
    """``ortpipe`` with ``argv`` in a process of its own, killed (SIGKILL) once ``written()``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    try:
        deadline = time.monotonic() + 60
        while not written() and time.monotonic() < deadline:
            assert process.poll() is None, "the run ended before it was killed"
            time.sleep(0.005)
        process.kill()
        process.wait(timeout=60)
    finally:
        process.kill()


def test_a_killed_overwrite_leaves_the_earlier_parquet_file_whole(tmp_path, capsys, busy_job):
    """Issue 26, item 4 (a Parquet file): --overwrite writes the new rows into the journal beside
    the earlier file and replaces it only at close, so a kill leaves the earlier file whole; a
    resumed run finishes the new one and replaces it then."""
    output = tmp_path / "scores.parquet"
    earlier = tmp_path / "earlier.parquet"
    assert main(_argv(busy_job, output, "--limit", "1000")) == 0
    shutil.copyfile(output, earlier)
    # killed once the new run has closed a part into its journal: it has written rows
    journal = journal_of(replacement_of(output))  # NOTE [ replaced when whole ]: the journal is the replacement's
    _killed_when(_argv(busy_job, output, "--overwrite"), lambda: (journal / "part-00000.parquet").exists())
    assert whole_parts(journal)  # the new run's rows, in its journal
    assert pq.read_table(output).equals(pq.read_table(earlier))  # the earlier rows, whole and readable
    assert main(_argv(busy_job, output, "--resume")) == 0
    scores, ids = _written(output)
    np.testing.assert_allclose(scores, busy_job[2], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(ids, np.arange(ROWS))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_overwrite_of_a_parquet_file_keeps_the_earlier_one(tmp_path, busy_job, signum):
    """Issue 34, item 1: a graceful stop closes the new file - in its staging folder, not over the
    earlier one, which stays whole; the stop says where the new rows are, and --resume finishes them."""
    output = tmp_path / "scores.parquet"
    assert main(_argv(busy_job, output, "--limit", "1000")) == 0
    earlier = pq.read_table(output)
    code, said = _stopped_mid_run(_argv(busy_job, output, "--overwrite"), output, signum)
    assert code == 128 + signum and "interrupted after" in said, said
    assert str(replacement_of(output)) in said and "the earlier" in said and "is kept whole" in said
    assert pq.read_table(output).equals(earlier)
    assert replacement_of(output).exists(), said
    assert 0 < pq.read_metadata(replacement_of(output)).num_rows < ROWS
    assert main(_argv(busy_job, output, "--resume")) == 0
    np.testing.assert_array_equal(_written(output)[1], np.arange(ROWS))
    assert not replacement_under_way(output)


def test_an_overwrite_whose_input_fails_partway_keeps_the_earlier_parquet_file(tmp_path, capsys):
    """Issue 34, item 1: an input that fails after some batches were written (a CSV's bad value
    near its end) leaves the earlier file as it was; the new rows stay in the replacement."""
    rows = np.random.default_rng(0).random((20_000, 64)).astype(np.float32)
    lines = [",".join(f"f{i}" for i in range(64))] + [",".join(f"{v:.4f}" for v in row) for row in rows]
    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    good.write_text("\n".join(lines) + "\n")
    lines[19_000] = "oops" + lines[19_000][lines[19_000].index(",") :]
    bad.write_text("\n".join(lines) + "\n")
    output = tmp_path / "scores.parquet"
    argv = ["run", "mlp", "--output", str(output), "--batch-size", "100", "--part-rows", "500", "--no-progress"]
    assert main([*argv, "--input", str(good)]) == 0
    earlier = pq.read_table(output)
    assert main([*argv, "--input", str(bad), "--overwrite"]) == 1
    assert "invalid value 'oops'" in capsys.readouterr().err
    assert pq.read_table(output).equals(earlier)
    assert 0 < pq.read_metadata(replacement_of(output)).num_rows < 19_000  # the new rows, closed beside it
    assert main([*argv, "--input", str(good), "--overwrite"]) == 0  # a new --overwrite starts afresh
    assert pq.read_table(output).equals(earlier) and not replacement_under_way(output)


def test_an_overwrite_removes_the_journal_a_killed_run_left_beside_the_earlier_file(tmp_path):
    """A journal beside the replaced file belongs to it: left there, a later --resume would go on
    from another run's parts."""
    batches = _batches()
    output = tmp_path / "o.parquet"
    _write_all(ParquetSink(output), batches)
    stale = journal_of(output)
    stale.mkdir()
    (stale / "part-00000.parquet").write_bytes(output.read_bytes())
    with Pipeline(models.identity(features=FEATURES), device="cpu") as pipe:
        sink = open_sink(output, pipe, overwrite=True)
        sink.write(0, 2, {"y": np.zeros((2, FEATURES), np.float32)}, {"row_id": np.arange(2)})
        sink.close()
        sink.mark_complete()
    assert not stale.exists() and pq.read_metadata(output).num_rows == 2


def _holds_new_rows(output: Path) -> bool:
    """Whether the replacement an --overwrite run writes beside ``output`` holds rows yet."""
    staged = replacement_of(output)
    if not output.suffix:
        return (staged / "part-00000.parquet").exists()
    return staged.exists() and staged.stat().st_size > 64 << 10


@pytest.mark.parametrize("name", ["scores.csv", "scores.npy", "scores"], ids=["csv", "npy", "data set"])
def test_a_killed_overwrite_leaves_the_earlier_output_whole_and_resume_finishes_the_new(tmp_path, busy_job, name):
    """Issue 26, item 4 (NOTE [ replaced when whole ]): --overwrite of a CSV, a .npy or a data set
    writes the new output in a hidden folder beside the earlier one and moves it over the earlier
    only once whole; a kill leaves the earlier output as it was, and --resume finishes the new one."""
    output = tmp_path / name
    assert main(_argv(busy_job, output, "--limit", "1000")) == 0
    earlier = tmp_path / f"earlier-{name}"
    (shutil.copytree if output.is_dir() else shutil.copyfile)(output, earlier)
    _killed_when(_argv(busy_job, output, "--overwrite"), lambda: _holds_new_rows(output))
    assert replacement_under_way(output)
    before, now = _written(earlier), _written(output)
    np.testing.assert_array_equal(now[0], before[0])  # the earlier rows, whole and readable
    assert len(now[0]) == 1000
    assert main(_argv(busy_job, output, "--resume")) == 0
    scores, ids = _written(output)
    np.testing.assert_allclose(scores, busy_job[2], rtol=1e-5, atol=1e-6)
    if ids is not None:
        np.testing.assert_array_equal(ids, np.arange(ROWS))
    assert not replacement_under_way(output) and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [name, earlier.name, record_path(output).name]
    )


def test_a_stopped_overwrite_keeps_the_earlier_file_and_a_whole_one_replaces_it(tmp_path):
    """A graceful stop (or a failure) closes the new output where it is written; only a job
    that wrote every row moves it into place."""
    pipe_rows = np.random.default_rng(4).random((64, FEATURES), np.float32)
    with Pipeline(models.identity(features=FEATURES), device="cpu") as pipe:
        output = tmp_path / "o.csv"
        whole = open_sink(output, pipe)
        whole.write(0, 2, {"y": pipe_rows[:2]}, {"row_id": np.arange(2)})
        whole.close()
        earlier = output.read_bytes()
        stopped = open_sink(output, pipe, overwrite=True)
        assert isinstance(stopped, ReplacingSink) and stopped.path == replacement_of(output)
        stopped.write(0, 5, {"y": pipe_rows[:5]}, {"row_id": np.arange(5)})
        stopped.close()  # no mark_complete: the job did not write every row
        assert output.read_bytes() == earlier and replacement_under_way(output)
        resumed = open_sink(output, pipe, resume=True)
        assert resumed.kept_rows == 5
        resumed.write(0, 3, {"y": pipe_rows[5:8]}, {"row_id": np.arange(5, 8)})
        resumed.close()
        resumed.mark_complete()
    assert not replacement_under_way(output)
    assert pcsv.read_csv(output)["row_id"].to_pylist() == list(range(8))


def test_moves_a_kill_cut_short_are_finished_at_the_next_open(tmp_path):
    folder = staging_folder(tmp_path / "d")
    (folder / "d").mkdir(parents=True)
    (folder / "d" / "part-00000.parquet").write_bytes(b"new")
    (folder / "d.boxes").mkdir()
    (folder / "MOVING").touch()  # the replacement was whole: its moves had begun
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "part-00000.parquet").write_bytes(b"old")
    (tmp_path / "d" / "part-00001.parquet").write_bytes(b"old")
    assert finish_replacing(tmp_path / "d")
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["part-00000.parquet"]
    assert (tmp_path / "d" / "part-00000.parquet").read_bytes() == b"new" and (tmp_path / "d.boxes").is_dir()
    assert not folder.exists() and not finish_replacing(tmp_path / "d")
