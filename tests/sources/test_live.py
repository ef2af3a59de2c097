"""NOTE [ several streams ]: live streams read at once, their frames batched as they come.

Real streams: MPEG-TS served over HTTP by a local server, and raw frames written
into real pipes by threads - one of which goes quiet while the others run.
"""

from __future__ import annotations

import functools
import threading
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipeline import TensorSpec
from pipeline.cli import main
from pipeline.sources import LiveStreamsSource, SourceError, VideoSource

from ..helpers import encode_video
from ..streaming import RAW_OPTIONS, SIZE, Quiet, dropping, piped, raw_frames, serving

av = pytest.importorskip("av", reason="video sources need PyAV: pip install '.[video]' in a checkout of ortpipe")


def _spec():
    return [TensorSpec("frames", np.dtype(np.uint8), ("N", SIZE, SIZE, 3))]


@pytest.fixture
def clips(tmp_path):
    """Three MPEG-TS clips of 30, 20 and 25 frames, each its own pattern, served over HTTP."""
    folder = tmp_path / "served"
    folder.mkdir()
    for name, frames in (("a", 30), ("b", 20), ("c", 25)):
        encode_video(folder / f"{name}.ts", "mpeg4", {"g": "6"}, frames, SIZE, container_format="mpegts")
    with serving(functools.partial(Quiet, directory=str(folder))) as base:  # type: ignore[arg-type]
        yield {f"{base}/{name}.ts": frames for name, frames in (("a", 30), ("b", 20), ("c", 25))}


def _read(source) -> tuple[list[int], dict[str, np.ndarray]]:
    sizes, metas = [], []
    for rows, meta in source.chunks():
        sizes.append(len(rows))
        metas.append(meta)
    return sizes, {name: np.concatenate([m[name] for m in metas]) for name in metas[0]}


def test_every_frame_of_every_stream_comes_each_stream_in_order(clips):
    started = time.time()
    source = LiveStreamsSource(list(clips), 8, _spec())
    sizes, meta = _read(source)
    assert all(size <= 8 for size in sizes) and sum(sizes) == sum(clips.values())
    assert source.frames_given == list(clips.values())
    for url, frames in clips.items():
        mine = meta["path"] == url
        assert meta["frame_index"][mine].tolist() == list(range(frames))
        received = meta["received"][mine]  # one clock for every stream, in each stream's order
        assert np.all(np.diff(received) >= 0) and started <= received[0] and received[-1] <= time.time()
    assert source.paths == list(clips) and source.row_shape == (SIZE, SIZE, 3)


def test_a_quiet_stream_does_not_hold_back_the_others_and_stop_reading_ends_it():
    """Pipe A sends 5 raw frames and goes quiet, its writer holding it open; pipe B sends 7
    and closes: all 12 come, in batches handed on ``batch_wait_s`` after their first
    frame, while A still waits; stop_reading (a job's Ctrl-C) then ends it."""
    frames = raw_frames()
    with piped(frames[:5].tobytes(), hold_open=True) as (quiet, _), piped(frames[5:12].tobytes()) as (ending, _):
        source = LiveStreamsSource(
            [quiet, ending], 64, _spec(), format="rawvideo", options=RAW_OPTIONS, batch_wait_s=0.05
        )
        got: list[tuple[str, int]] = []
        twelve = threading.Event()

        def read() -> None:
            for _, meta in source.chunks():
                got.extend(zip(meta["path"].tolist(), meta["frame_index"].tolist(), strict=True))
                if len(got) == 12:
                    twelve.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert twelve.wait(30), got  # a batch of 64 was not waited for
        assert reader.is_alive()  # the quiet pipe is still waited on
        source.stop_reading()
        reader.join(10)
        assert not reader.is_alive()
    assert sorted(index for path, index in got if path == quiet) == list(range(5))
    assert [index for path, index in got if path == ending] == list(range(7))


def test_a_failing_stream_ends_the_source_or_is_left_out_with_skip_unreadable(clips, tmp_path):
    ts = encode_video(tmp_path / "live.ts", "mpeg4", {"g": "6"}, 20, SIZE, container_format="mpegts").read_bytes()
    url, frames = next(iter(clips.items()))
    with serving(dropping(served=1), ts) as failing_base:  # its header is read, then it is gone (404)
        with pytest.raises(SourceError, match="404"):
            _read(LiveStreamsSource([f"{failing_base}/live.ts", url], 8, _spec()))
    with serving(dropping(served=1), ts) as failing_base:
        failing = f"{failing_base}/live.ts"
        source = LiveStreamsSource([failing, url], 8, _spec(), skip_unreadable=True)
        _, meta = _read(source)
    assert meta["frame_index"].tolist() == list(range(frames)) and set(meta["path"].tolist()) == {url}
    assert [path for path, _ in source.skipped] == [failing] and "404" in source.skipped[0][1]
    gone = f"{url.rsplit('/', 1)[0]}/no-such-camera.ts"  # cannot be opened at all
    with pytest.raises(SourceError, match="no-such-camera.ts' cannot be decoded as video"):
        LiveStreamsSource([gone, url], 8, _spec())
    source = LiveStreamsSource([gone, url], 8, _spec(), skip_unreadable=True)
    assert source.paths == [url] and [path for path, _ in source.skipped] == [gone]
    assert sum(_read(source)[0]) == frames


def test_what_cannot_be_read_at_once_is_refused(clips, tmp_path):
    file = encode_video(tmp_path / "file.mp4", "mpeg4", {}, 4, SIZE)
    urls = list(clips)
    with pytest.raises(SourceError, match=r"streams read at once are live ones .* is a file: read files one after"):
        LiveStreamsSource([urls[0], file], 8, _spec())
    with pytest.raises(SourceError, match=r"each read once: .*a.ts' is named twice"):
        LiveStreamsSource([urls[0], urls[1], urls[0]], 8, _spec())
    with pytest.raises(SourceError, match="several streams are two or more"):
        LiveStreamsSource(urls[:1], 8, _spec())
    with pytest.raises(SourceError, match="cannot be resumed, windowed or sharded"):
        LiveStreamsSource(urls[:2], 8, _spec()).after(3)
    bigger = tmp_path / "big.ts"
    encode_video(bigger, "mpeg4", {}, 4, SIZE * 2, container_format="mpegts")
    with serving(functools.partial(Quiet, directory=str(tmp_path))) as base:  # type: ignore[arg-type]
        with pytest.raises(SourceError, match=r"must be one size: .* is \(32, 32, 3\), .*big.ts' \(64, 64, 3\)"):
            LiveStreamsSource([urls[0], f"{base}/big.ts"], 8, _spec())
        resized = LiveStreamsSource([urls[0], f"{base}/big.ts"], 8, _spec(), size=(SIZE, SIZE))
        assert sum(_read(resized)[0]) == clips[urls[0]] + 4


def test_ending_early_stops_and_joins_every_reader(clips):
    """--limit's way out: the first batch, then the iteration closed (the thread check of
    conftest fails the test if a reader is left behind)."""
    chunks = LiveStreamsSource(list(clips), 4, _spec()).chunks()
    rows, _ = next(chunks)
    assert len(rows) <= 4
    started = time.monotonic()
    chunks.close()
    assert time.monotonic() - started < 30


def test_ortpipe_run_reads_streams_at_once(clips, tmp_path, capsys):
    urls = list(clips)
    argv = ["run", "convnet", "--batch-size", "8", "--no-progress", "--device", "cpu"]
    for url in urls:
        argv += ["--input", url]
    assert main([*argv, "--output", str(tmp_path / "frames.parquet")]) == 0
    out = capsys.readouterr().out
    assert "frames of 3 streams at once ->" in out and "issued by stage threads" in out
    assert "frames a stream: " + ", ".join(f"{url} {frames}" for url, frames in clips.items()) in out
    table = pq.read_table(tmp_path / "frames.parquet")
    paths, indices = np.asarray(table["path"].to_pylist()), np.asarray(table["frame_index"].to_pylist())
    for url, frames in clips.items():
        assert indices[paths == url].tolist() == list(range(frames))
    assert main([*argv, "--shard", "1/2", "--output", str(tmp_path / "no.parquet")]) == 1
    assert "is a stream: it is read from its first frame on, as it comes, so it cannot be sharded" in (
        capsys.readouterr().err
    )
    single = ["run", "convnet", "--no-progress", "--input", urls[0], "--batch-wait", "0.5"]
    assert main([*single, "--output", str(tmp_path / "no.parquet")]) == 1
    assert "a batch's wait for frames is for several streams read at once" in capsys.readouterr().err
    file = encode_video(tmp_path / "file.mp4", "mpeg4", {}, 4, SIZE)
    mixed = ["run", "convnet", "--no-progress", "--input", urls[0], "--input", str(file)]
    assert main([*mixed, "--output", str(tmp_path / "no.parquet")]) == 1
    assert "is a file: read files one after another" in capsys.readouterr().err


def test_a_single_stream_is_still_a_video_source(clips):
    assert isinstance(VideoSource(next(iter(clips)), 8, _spec()), VideoSource)


def test_streams_that_drop_are_reconnected_each_on_its_own(tmp_path, monkeypatch):
    from pipeline.sources import videos  # the waits between tries, shortened

    monkeypatch.setattr(videos, "_RECONNECT_FIRST_WAIT_S", 0.01)
    ts = encode_video(tmp_path / "live.ts", "mpeg4", {"g": "6"}, 40, SIZE, container_format="mpegts").read_bytes()
    with serving(dropping(served=3), ts) as one, serving(dropping(served=3), ts) as two:
        urls = [f"{one}/live.ts", f"{two}/live.ts"]
        source = LiveStreamsSource(urls, 8, _spec(), reconnect=1, skip_unreadable=True)
        _, meta = _read(source)
    for url in urls:  # each: two connections' frames, numbered on, then a try that found it gone
        mine = meta["path"] == url
        half = int((meta["connection"][mine] == 0).sum())
        assert meta["frame_index"][mine].tolist() == list(range(2 * half))
        assert meta["connection"][mine].tolist() == [0] * half + [1] * half
    assert sorted(why.split(": ")[0] for _, why in source.reconnections) == sorted(urls)
    assert sorted(path for path, _ in source.skipped) == sorted(urls)  # gone for good at last (404)
