"""Jobs whose source decodes straight into the pinned slots (NOTE [ sources that fill slots ]).

Each filled job is held against the same job with the source making arrays
of its own (``fill_slots=False``, the engine staging them), on every device:
chaos mode shows no slot is written while its last h2d may still read it.
"""

from __future__ import annotations

import re
import resource
import subprocess
import sys
import threading

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipeline import MultiPipeline, Pipeline, PipelineStageError, Preprocess, models
from pipeline.jobs import JobSummary, run_job
from pipeline.sinks import CallbackSink, NpySink, ParquetSink
from pipeline.sources import ImageFolderSource, SourceError, VideoSource

from ..conftest import wait_no_threads

SIZE = 16
NHWC = Preprocess(scale=1 / 255, layout="nhwc")


def _model(batch="N"):
    return models.convnet(batch=batch, height=SIZE, width=SIZE)  # H and W fixed: the slots are sized from it


def _job(pipe, source, path, fill_slots=True):
    summary = run_job(pipe, source, ParquetSink(path), fill_slots=fill_slots)
    return summary, pq.read_table(path)


@pytest.fixture
def video(tmp_path):
    av = pytest.importorskip("av", reason="video sources need PyAV: pip install '.[video]' in a checkout of ortpipe")
    path = tmp_path / "clip.mp4"
    rng = np.random.default_rng(0)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264" if "libx264" in av.codecs_available else "mpeg4", rate=30)
        stream.width = stream.height = 32
        stream.pix_fmt = "yuv420p"
        for _ in range(45):
            frame = av.VideoFrame.from_ndarray(rng.integers(0, 256, (32, 32, 3), np.uint8), format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return path


@pytest.fixture
def images(tmp_path):
    Image = pytest.importorskip(
        "PIL.Image", reason="image sources need Pillow: pip install '.[images]' in a checkout of ortpipe"
    )
    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for i in range(22):
        Image.fromarray(rng.integers(0, 256, (SIZE, SIZE, 3), np.uint8)).save(folder / f"im{i:02d}.png")
    return folder


def test_video_frames_decoded_into_the_slots_equal_the_staged_ones(tmp_path, video, device):
    with Pipeline(_model(), device="cpu", preprocess=NHWC) as pipe:
        staged, want = _job(
            pipe, VideoSource(video, 8, pipe.source_inputs, size=(SIZE, SIZE)), tmp_path / "a.parquet", False
        )
    with Pipeline(_model(), device=device, depth=2, preprocess=NHWC) as pipe:
        filled, got = _job(pipe, VideoSource(video, 8, pipe.source_inputs, size=(SIZE, SIZE)), tmp_path / "b.parquet")
    assert filled.filled and not staged.filled and "decoded into the pinned slots" in str(filled)
    assert filled.items == staged.items == 45 and filled.batches == 6  # the last batch 5 frames
    assert filled.stats["stage_ms"]["stage"] == 0.0  # no staging copy: the decoder wrote the slot
    assert got.column_names == want.column_names == ["frame_index", "timestamp", "logits"]
    np.testing.assert_array_equal(got["frame_index"].to_numpy(), want["frame_index"].to_numpy())
    exact = device.kind == "cpu"
    logits = [np.stack(table["logits"].to_numpy(zero_copy_only=False)) for table in (got, want)]
    np.testing.assert_allclose(*logits, rtol=0 if exact else 2e-3, atol=0 if exact else 2e-3)  # CUDA: TF32


@pytest.mark.parametrize("decode_threads", [1, 3])
def test_images_decoded_into_the_slots_skip_the_unreadable_ones(tmp_path, images, decode_threads):
    (images / "im05.png").write_bytes(b"not a png")
    for i in (8, 9, 10, 11):  # a whole batch of them: no batch for it
        (images / f"im{i:02d}.png").write_bytes(b"")

    def source(pipe):
        return ImageFolderSource(images, 4, pipe.source_inputs, decode_threads=decode_threads, skip_unreadable=True)

    with Pipeline(_model(), device="cpu", preprocess=NHWC) as pipe:
        _, want = _job(pipe, source(pipe), tmp_path / "a.parquet", fill_slots=False)
        filling = source(pipe)
        summary, got = _job(pipe, filling, tmp_path / "b.parquet")
    assert summary.filled and summary.items == 22 - 5 and summary.batches == 5  # files 0-3, 4-7, 12-15, 16-19, 20-21
    assert [path.rsplit("/", 1)[-1] for path, _ in filling.skipped] == [
        "im05.png",
        "im08.png",
        "im09.png",
        "im10.png",
        "im11.png",
    ]
    assert got["path"].to_pylist() == want["path"].to_pylist()
    assert got["logits"].to_pylist() == want["logits"].to_pylist()
    assert wait_no_threads() == []  # the decode threads end with the job


def test_a_frame_the_slot_cannot_hold_is_named_and_the_batches_before_it_are_kept(tmp_path, images):
    Image = pytest.importorskip("PIL.Image")
    for i in range(8, 12):
        Image.new("RGB", (SIZE + 4, SIZE)).save(images / f"im{i:02d}.png")
    output = tmp_path / "out.npy"
    with Pipeline(_model(), device="cpu", preprocess=NHWC) as pipe:
        source = ImageFolderSource(images, 4, pipe.source_inputs)
        with pytest.raises(PipelineStageError) as caught:
            run_job(pipe, source, NpySink(output, pipe.output_names))
    cause = caught.value.__cause__
    assert caught.value.batch_index == 2 and isinstance(cause, SourceError)
    assert "gives uint8[16, 20, 3] rows, input 'frames' takes uint8[16, 16, 3]: resize with size=(W, H)" in str(cause)
    assert np.load(output).shape == (8, 10)
    assert wait_no_threads() == []


def test_a_stopped_filled_job_writes_what_it_took_and_ends(tmp_path, video):
    stop = threading.Event()
    seen: list[int] = []

    def write(index, outputs, meta):
        seen.append(len(meta["frame_index"]))
        stop.set()

    with Pipeline(_model(), device="cpu", depth=2, preprocess=NHWC) as pipe:
        source = VideoSource(video, 8, pipe.source_inputs, size=(SIZE, SIZE))
        summary = run_job(pipe, source, CallbackSink(write), stop=stop)
    assert summary.filled and summary.interrupted
    assert 1 <= summary.batches < 6 and summary.items == sum(seen)
    assert wait_no_threads() == []


@pytest.mark.parametrize("size", [None, (24, 16)])
def test_a_model_with_free_dims_takes_the_video_frame_size(tmp_path, video, size):
    """H and W free in the model: the slots are sized by the frames the video makes (its own size, or size=)."""
    with Pipeline(models.convnet(), device="cpu", depth=2, preprocess=NHWC) as pipe:
        assert not pipe.fills_slots
        staged, want = _job(pipe, VideoSource(video, 8, pipe.source_inputs, size=size), tmp_path / "a.pq", False)
        filled, got = _job(pipe, VideoSource(video, 8, pipe.source_inputs, size=size), tmp_path / "b.pq")
    assert filled.filled and filled.items == staged.items == 45
    assert got["logits"].to_pylist() == want["logits"].to_pylist()


def test_sources_are_staged_where_the_slots_cannot_be_sized(tmp_path, images, video):
    with Pipeline(models.convnet(), device="cpu", preprocess=NHWC) as pipe:  # free dims, images of unknown size
        summary = run_job(pipe, ImageFolderSource(images, 8, pipe.source_inputs), ParquetSink(tmp_path / "a.pq"))
    assert not summary.filled and summary.items == 22
    with MultiPipeline(_model(), "cpu,cpu", preprocess=NHWC) as pipe:  # several devices: each has its own slots
        source = VideoSource(video, 8, pipe.source_inputs, size=(SIZE, SIZE))
        summary = run_job(pipe, source, ParquetSink(tmp_path / "b.pq"))
    assert not summary.filled and summary.items == 45


def test_ortpipe_run_decodes_images_into_the_slots_of_a_fixed_size_model(tmp_path, images, capsys):
    import onnx

    from pipeline.cli import main

    model = tmp_path / "fixed.onnx"
    onnx.save(_model(), str(model))
    output = tmp_path / "out.parquet"
    argv = ["run", str(model), "--input", str(images), "--output", str(output), "--batch-size", "8"]
    assert main([*argv, "--device", "cpu", "--no-progress"]) == 0
    assert "decoded into the pinned slots" in capsys.readouterr().out
    assert pq.read_table(output).num_rows == 22


def test_the_first_rows_of_a_video_still_fill_the_slots(tmp_path, video):
    from pipeline.jobs import first_rows

    with Pipeline(_model(), device="cpu", preprocess=NHWC) as pipe:
        _, want = _job(pipe, VideoSource(video, 8, pipe.source_inputs, size=(SIZE, SIZE)), tmp_path / "a.pq")
        first = first_rows(VideoSource(video, 8, pipe.source_inputs, size=(SIZE, SIZE)), 20)
        summary, got = _job(pipe, first, tmp_path / "b.pq")
    assert summary.filled and summary.items == 20 and summary.batches == 3  # 8 + 8 + 4
    assert got["frame_index"].to_pylist() == list(range(20))
    assert got["logits"].to_pylist() == want["logits"].to_pylist()[:20]
    assert wait_no_threads() == []


# An output that cannot be written (a full disk, a quota, a file size limit): said in a line, the rows kept


def _run_limited(argv: list[str], file_size_limit: int | None = None, stdout=None):
    """``ortpipe ARGV`` in a process whose files may not grow past ``file_size_limit`` bytes
    (RLIMIT_FSIZE: the kernel fails a write past it with EFBIG, as a full disk fails one with
    ENOSPC; Python ignores the SIGXFSZ it sends)."""

    def limit() -> None:
        if file_size_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    command = [sys.executable, "-m", "pipeline.cli", *argv, "--no-progress"]
    return subprocess.run(
        command, preexec_fn=limit, stdout=stdout or subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_an_output_that_cannot_grow_is_said_in_a_line_and_its_rows_resume(tmp_path):
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((600, 1024)).astype(np.float32))
    argv = ["run", "identity", "--input", str(tmp_path / "x.npy"), "--batch-size", "50"]
    whole = _run_limited([*argv, "--output", str(tmp_path / "whole.csv")])
    assert whole.returncode == 0, whole.stderr
    cut = _run_limited([*argv, "--output", str(tmp_path / "o.csv")], file_size_limit=1_500_000)
    assert cut.returncode == 1 and "Traceback" not in cut.stderr, cut.stderr
    written = re.search(
        r"batch (\d+): the output '.*o\.csv' cannot be written after (\d+) rows: \[Errno 27\] File too large",
        cut.stderr,
    )
    assert written, cut.stderr
    assert int(written[2]) == 50 * int(written[1]) > 0
    resumed = _run_limited([*argv, "--output", str(tmp_path / "o.csv"), "--resume"])  # the disk has room again
    assert resumed.returncode == 0, resumed.stderr
    assert (tmp_path / "o.csv").read_text() == (tmp_path / "whole.csv").read_text()


def test_an_output_that_cannot_be_closed_or_a_full_standard_output_is_said_in_a_line(tmp_path):
    np.save(tmp_path / "x.npy", np.random.default_rng(1).standard_normal((200, 1024)).astype(np.float32))
    argv = ["run", "identity", "--input", str(tmp_path / "x.npy")]
    parquet = _run_limited([*argv, "--output", str(tmp_path / "o.parquet")], file_size_limit=10_000)
    assert parquet.returncode == 1 and "Traceback" not in parquet.stderr, parquet.stderr
    assert re.search(
        r"the output '.*o\.parquet' cannot be (closed|written after \d+ rows): \[Errno 27\]", parquet.stderr
    )
    with open("/dev/full", "w") as full:  # every write fails with ENOSPC, as on a full disk
        stream = _run_limited([*argv, "--output", "-"], stdout=full)
    assert stream.returncode == 1 and "Traceback" not in stream.stderr, stream.stderr
    assert "standard output cannot be written after 0 rows: [Errno 28] No space left on device" in stream.stderr


def test_a_job_whose_writing_limits_it_says_so():
    """The sink's write is the stats' ``take`` stage: the summary names it in a job's words."""
    import time

    from pipeline.sources import SourceBatch

    def write_slowly(index, outputs, meta):  # a sink as slow as a slow disk
        time.sleep(0.004)

    batches = (SourceBatch({"x": np.zeros((8, 4), np.float32)}, {"row_id": np.arange(8)}) for _ in range(20))
    with Pipeline(models.identity(features=4), device="cpu", depth=2) as pipe:
        summary = run_job(pipe, batches, CallbackSink(write_slowly))
    assert summary.stats["bottleneck"] == "take"
    assert "bottleneck take (writing the output)" in str(summary)
    line = summary.stages_line()  # ortpipe run prints it under the summary
    assert line.startswith("time a batch, ms: source ") and line.endswith(
        f"take {summary.stats['stage_ms']['take']:.2f}"
    )
    assert float(line.rsplit(" ", 1)[1]) >= 4.0
    assert JobSummary().stages_line() is None  # no batch, no line
