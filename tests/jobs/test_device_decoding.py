"""NOTE [ NV12 on the device ] through a job: ``run_job`` decodes a video into the device's
memory and converts it there where asked (the host device models it), writing the same
metadata as the CPU path; where it cannot, the frames go the CPU way and the summary says why."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipeline import ChaosOptions, HostDevice, Pipeline
from pipeline.jobs import run_job
from pipeline.sinks import ParquetSink
from pipeline.sources import VideoFolderSource, VideoSource, VideoTableSource

from ..helpers import frames_model, ramps_video

av = pytest.importorskip("av", reason="video sources need PyAV: pip install '.[video]' in a checkout of ortpipe")
SIZE = 40  # the clip's own: no resize, so the two paths differ only in colour conversion


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return ramps_video(tmp_path_factory.mktemp("clip") / "clip.mp4", 21, SIZE)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("videos")
    for number, frames in enumerate((7, 12, 5)):
        ramps_video(folder / f"v{number}.mp4", frames, SIZE, shift=number * 20)
    return folder


def _job(device, clip, path, decode_on_device, **video):
    with Pipeline(frames_model(SIZE, SIZE), device=device, depth=2) as pipe:
        source = VideoSource(clip, 8, pipe.source_inputs, size=(SIZE, SIZE), **video)
        summary = run_job(pipe, source, ParquetSink(path), decode_on_device=decode_on_device)
    return summary, pq.read_table(path)


def _seen(table) -> np.ndarray:
    return np.stack([np.asarray(row, np.int16) for row in table["seen"].to_numpy(zero_copy_only=False)])


@pytest.mark.parametrize("video", [{}, {"every": 3, "fit": "pad:7", "pix_fmt": "bgr24"}], ids=["plain", "chosen"])
def test_a_video_converted_on_the_device_has_the_cpu_paths_rows_within_a_level_or_two(tmp_path, clip, video):
    device = HostDevice(link_gbps=20.0)
    try:
        on_device, got = _job(device, clip, tmp_path / "a.parquet", True, **video)
        on_cpu, want = _job(device, clip, tmp_path / "b.parquet", False, **video)
    finally:
        device.close()
    assert on_device.decoding == "frames decoded into the device's memory and converted there"
    assert "converted there" in str(on_device) and on_cpu.decoding is None and not on_device.filled
    assert on_device.items == on_cpu.items == len(want) and on_device.stats["link_gbps"]["h2d"] in (0.0, None)
    assert got.column_names == want.column_names  # the same metadata: frame_index, timestamp, fit columns
    for column in want.column_names[:-1]:
        np.testing.assert_array_equal(got[column].to_numpy(), want[column].to_numpy())
    # FFmpeg's fixed-point conversion and nearest chroma against the kernel's float and bilinear
    # chroma (measured: mean 1.4 levels, at most 5): close, not equal
    difference = np.abs(_seen(got) - _seen(want))
    assert np.median(difference) <= 1 and difference.max() <= 6, (np.median(difference), difference.max())


def _folder_job(device, source_of, path, decode_on_device):
    with Pipeline(frames_model(SIZE, SIZE), device=device, depth=3) as pipe:
        summary = run_job(pipe, source_of(pipe), ParquetSink(path), decode_on_device=decode_on_device)
    return summary, pq.read_table(path)


@pytest.mark.parametrize("kind", ["folder", "table"])
def test_several_videos_decoded_at_once_convert_on_the_device_in_order(tmp_path, folder, kind):
    """A folder's (or a table's) videos, two decoded at once by threads of their own (a GPU's
    several decoders), batches across their ends, each row with its video's columns."""
    import pyarrow as pa

    table = tmp_path / "videos.parquet"
    pq.write_table(pa.table({"video": [f"v{n}.mp4" for n in (2, 0, 1)], "id": [30, 10, 20]}), table)
    (tmp_path / "v0.mp4").symlink_to(folder / "v0.mp4")
    (tmp_path / "v1.mp4").symlink_to(folder / "v1.mp4")
    (tmp_path / "v2.mp4").symlink_to(folder / "v2.mp4")

    def source_of(pipe):
        if kind == "folder":
            return VideoFolderSource(folder, 8, pipe.source_inputs, size=(SIZE, SIZE), videos_at_once=2)
        return VideoTableSource(
            table, "video", 8, pipe.source_inputs, size=(SIZE, SIZE), id_column="id", videos_at_once=2
        )

    device = HostDevice(chaos=ChaosOptions(probability=0.5, max_delay_s=2e-4, seed=9), decoder_surfaces=6)
    try:
        on_device, got = _folder_job(device, source_of, tmp_path / "a.parquet", True)
        on_cpu, want = _folder_job(device, source_of, tmp_path / "b.parquet", False)
    finally:
        device.close()
    assert on_device.decoding == "frames decoded into the device's memory and converted there"
    assert on_device.items == on_cpu.items == 24 and got.column_names == want.column_names
    for column in want.column_names[:-1]:
        np.testing.assert_array_equal(got[column].to_numpy(), want[column].to_numpy())
    difference = np.abs(_seen(got) - _seen(want))
    assert np.median(difference) <= 1 and difference.max() <= 6, (np.median(difference), difference.max())


def test_a_windowed_video_goes_the_cpu_way_and_says_why(tmp_path, clip):
    device = HostDevice()
    try:
        with Pipeline(frames_model(SIZE, SIZE), device=device) as pipe:
            source = VideoSource(clip, 8, pipe.source_inputs, size=(SIZE, SIZE)).between(4, 12)
            summary = run_job(pipe, source, ParquetSink(tmp_path / "w.parquet"), decode_on_device=True)
    finally:
        device.close()
    assert summary.items == 8 and summary.decoding == (
        "frames converted on the CPU: a resumed, windowed or sharded run seeks in the video, which the device "
        "path does not"
    )


def test_by_default_only_a_gpu_decoder_takes_the_device_path(tmp_path, clip):
    device = HostDevice()
    try:
        summary, _ = _job(device, clip, tmp_path / "d.parquet", None)
    finally:
        device.close()
    assert summary.decoding is None and summary.filled  # the CPU decoder into the pinned slots, as ever


@pytest.mark.cuda
def test_ortpipe_run_hwaccel_cuda_converts_nvdecs_frames_on_the_gpu(tmp_path, clip):
    import subprocess
    import sys

    import onnx

    from pipeline.sources import device_decoding_unavailable
    from pipeline.sources._opening import hw_device_unusable

    from ..conftest import make_device

    device = make_device("cuda")
    unusable = hw_device_unusable("cuda") or device_decoding_unavailable(device, "cuda:0")
    device.close()
    if unusable is not None:
        pytest.skip(f"NVDEC's frames cannot be taken here: {unusable}")
    onnx.save(frames_model(SIZE, SIZE), tmp_path / "m.onnx")
    command = [sys.executable, "-m", "pipeline.cli", "run", str(tmp_path / "m.onnx"), "--input", str(clip)]
    done = subprocess.run(
        [*command, "--output", str(tmp_path / "o.parquet"), "--hwaccel", "cuda", "--device", "cuda", "--no-progress"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "frames decoded into the device's memory and converted there" in done.stderr + done.stdout


def test_a_job_stopped_midway_on_the_device_path_ends_cleanly(tmp_path, folder):
    """``stop`` set after the first batch: the batches in flight are written, the summary
    says interrupted, every decoding thread ends and no frame is left held."""
    import threading

    from ..conftest import wait_no_threads

    stop = threading.Event()
    written: list[int] = []

    class Stopping:
        def write(self, index, rows, outputs, meta):
            written.append(rows)
            stop.set()

        def close(self):
            pass

    device = HostDevice(chaos=ChaosOptions(probability=0.5, max_delay_s=2e-4, seed=2))
    try:
        with Pipeline(frames_model(SIZE, SIZE), device=device, depth=2) as pipe:
            source = VideoFolderSource(folder, 4, pipe.source_inputs, size=(SIZE, SIZE), videos_at_once=2)
            summary = run_job(pipe, source, Stopping(), stop=stop, decode_on_device=True)
    finally:
        device.close()
    assert summary.interrupted and 4 <= summary.items < 24 and summary.items == sum(written)
    assert summary.decoding == "frames decoded into the device's memory and converted there"
    assert wait_no_threads() == []
