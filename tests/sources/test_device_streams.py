"""NOTE [ several streams ] on the device path (NOTE [ NV12 on the device ]): live streams
decoded into the device's memory, a reader a stream, batched as they arrive and converted
there - on the host device's model; real MPEG-TS streams served over HTTP."""

from __future__ import annotations

import functools

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipeline import ChaosOptions, HostDevice, Pipeline
from pipeline.jobs import run_job
from pipeline.sinks import ParquetSink
from pipeline.sources import LiveStreamsSource

from ..conftest import wait_no_threads
from ..helpers import frames_model, ramps_video
from ..streaming import RAW_OPTIONS, SIZE, Quiet, piped, raw_frames, serving

av = pytest.importorskip("av", reason="video sources need PyAV: pip install '.[video]' in a checkout of ortpipe")


@pytest.fixture
def streams(tmp_path):
    folder = tmp_path / "served"
    folder.mkdir()
    for name, frames, shift in (("a", 14, 0), ("b", 9, 30), ("c", 11, 60)):
        ramps_video(folder / f"{name}.ts", frames, SIZE, shift, 3, "mpeg4", "mpegts", {"g": "6"})
    with serving(functools.partial(Quiet, directory=str(folder))) as base:  # type: ignore[arg-type]
        yield [f"{base}/{name}.ts" for name in "abc"]


def _job(device, urls, path, on_device, **choices):
    with Pipeline(frames_model(SIZE, SIZE), device=device, depth=3) as pipe:
        source = LiveStreamsSource(urls, 8, pipe.source_inputs, **choices)
        summary = run_job(pipe, source, ParquetSink(path), decode_on_device=on_device)
    return summary, pq.read_table(path)


def _by_stream(table) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each stream's frame indices and frames, in its order (streams interleave as they arrive)."""
    paths = table["path"].to_numpy(zero_copy_only=False)
    seen = np.stack([np.asarray(row, np.int16) for row in table["seen"].to_numpy(zero_copy_only=False)])
    indices = table["frame_index"].to_numpy()
    return {str(url): (indices[paths == url], seen[paths == url]) for url in sorted(set(paths))}


@pytest.mark.parametrize("choices", [{}, {"every": 2, "fit": "pad:9", "size": (SIZE, SIZE)}], ids=["plain", "chosen"])
def test_streams_converted_on_the_device_give_the_cpu_paths_rows(tmp_path, streams, choices):
    device = HostDevice(chaos=ChaosOptions(probability=0.5, max_delay_s=2e-4, seed=6), decoder_surfaces=8)
    try:
        on_device, got = _job(device, streams, tmp_path / "a.parquet", True, **choices)
        on_cpu, want = _job(device, streams, tmp_path / "b.parquet", False, **choices)
    finally:
        device.close()
    assert on_device.decoding == "frames decoded into the device's memory and converted there"
    assert on_device.items == on_cpu.items and got.column_names == want.column_names
    mine, theirs = _by_stream(got), _by_stream(want)
    assert mine.keys() == theirs.keys() == set(streams)
    for url in streams:
        np.testing.assert_array_equal(mine[url][0], theirs[url][0])  # every frame, each stream in order
        difference = np.abs(mine[url][1] - theirs[url][1])
        # FFmpeg's nearest chroma against the kernel's bilinear, on ramps as steep as a 32-pixel frame's
        close = np.median(difference) <= 1 and np.percentile(difference, 99) <= 4 and difference.max() <= 10
        assert close, (url, np.median(difference), np.percentile(difference, 99), difference.max())
    assert wait_no_threads() == []


def test_piped_streams_go_the_cpu_way_and_say_why():
    frames = raw_frames()
    device = HostDevice()
    try:
        with piped(frames[:5].tobytes()) as (one, _), piped(frames[5:].tobytes()) as (other, _):
            with Pipeline(frames_model(SIZE, SIZE), device=device) as pipe:
                source = LiveStreamsSource([one, other], 4, pipe.source_inputs, format="rawvideo", options=RAW_OPTIONS)
                summary = run_job(pipe, source, _Discarding(), decode_on_device=True)
    finally:
        device.close()
    assert summary.items == len(frames)
    why = "a pipe is read once, and its header was read by the CPU path"
    assert summary.decoding == f"frames converted on the CPU: {why}"


class _Discarding:
    """A sink that keeps nothing: the summary alone is looked at."""

    def write(self, index, rows, outputs, meta):
        pass

    def close(self):
        pass


def test_one_stream_converts_on_the_device_opened_as_the_source_opens_it(tmp_path, streams):
    """One live stream (a URL, with its timeouts) on the device path, as a video file is."""
    from pipeline.sources import VideoSource

    device = HostDevice(link_gbps=20.0)
    try:
        with Pipeline(frames_model(SIZE, SIZE), device=device) as pipe:
            summary = run_job(
                pipe, VideoSource(streams[0], 4, pipe.source_inputs), _Discarding(), decode_on_device=True
            )
    finally:
        device.close()
    assert summary.items == 14 and summary.decoding == "frames decoded into the device's memory and converted there"
