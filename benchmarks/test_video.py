"""Decoding a video into batches: ``VideoSource`` against a plain PyAV loop.

150 frames of 854x480 H.264, converted to 224x224 RGB.  Both decode with
FFmpeg's threads; the plain loop calls ``frame.reformat`` per frame (a new
swscale context, and its threads, each time), ``VideoSource`` keeps one
context for the whole video.  No model runs: this is the source alone, the
part that bounds a video job once the model is fast.  And a folder of short clips
by how many are decoded at once (NOTE [ videos decoded at once ]).
"""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import Pipeline, Preprocess, models
from pipeline.sources import VideoDecoding, VideoSource

av = pytest.importorskip("av", reason="needs PyAV: pip install 'ortpipe[video]'")
FRAMES, WIDTH, HEIGHT, SIZE = 150, 854, 480, 224


def _encode(path, frames: int, seed: int, x264_options: dict[str, str] | None = None):
    """A pattern of 8x8 blocks sliding 3 pixels a frame, H.264 (MPEG-4 part 2 without libx264)."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, (HEIGHT // 8, WIDTH // 8, 3), dtype=np.uint8).repeat(8, 0).repeat(8, 1)
    with av.open(str(path), "w") as container:
        codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
        options = (x264_options or {}) if codec == "libx264" else {}
        stream = container.add_stream(codec, rate=30, options=options)
        stream.width, stream.height, stream.pix_fmt = base.shape[1], base.shape[0], "yuv420p"
        for index in range(frames):
            frame = av.VideoFrame.from_ndarray(np.roll(base, 3 * index, axis=1), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return _encode(tmp_path_factory.mktemp("video") / "clip.mp4", FRAMES, seed=0)


def _plain_loop(path) -> int:
    """What a user's own loop does: decode, ``frame.reformat(...).to_ndarray()``, stack a batch."""
    frames, batches = [], 0
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        for frame in container.decode(stream):
            frames.append(frame.reformat(width=SIZE, height=SIZE, format="rgb24").to_ndarray())
            if len(frames) == 32:
                np.stack(frames)
                frames, batches = [], batches + 1
    return batches


@pytest.mark.parametrize("way", ["plain PyAV loop", "VideoSource", "VideoSource every 10th"])
def test_video_decode_frames_per_s(benchmark, clip, way):
    """Frames of the video gone through a second (every 10th: taken or not), so the ways compare."""
    with Pipeline(models.convnet(), device="cpu", preprocess=Preprocess(scale=1 / 255, layout="nhwc")) as pipe:
        inputs = pipe.source_inputs
    if way.startswith("VideoSource"):
        every = 10 if way.endswith("10th") else 1

        def decode() -> int:
            return sum(1 for _ in VideoSource(clip, 32, inputs, decoding=VideoDecoding(size=(SIZE, SIZE), every=every)))
    else:

        def decode() -> int:
            return _plain_loop(clip)

    decode()  # warm-up
    benchmark.pedantic(decode, rounds=3, iterations=1)
    best = FRAMES / benchmark.stats.stats.min
    benchmark.extra_info.update(frames_per_s=best)
    print(f"\n{way}: fastest {best:.0f} frames/s ({1e3 / best:.2f} ms a frame)", end="")


def _mean_colour(size: int):
    """A model that costs next to nothing: the mean of each colour plane of a
    fixed-size frame (H and W fixed, as exported vision models have them)."""
    from onnx import TensorProto, helper

    frames = helper.make_tensor_value_info("frames", TensorProto.FLOAT, ["N", 3, size, size])
    means = helper.make_tensor_value_info("means", TensorProto.FLOAT, ["N", 3])
    node = helper.make_node("ReduceMean", ["frames"], ["means"], axes=[2, 3], keepdims=0)
    graph = helper.make_graph([node], "mean_colour", [frames], [means])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=9)


@pytest.mark.parametrize("way", ["staged", "decoded into the slots"])
def test_video_job_frames_per_s(benchmark, clip, way):
    """A whole job, decode to results, with a model that costs next to nothing:
    the source decoding into the pinned slots (NOTE [ sources that fill slots ])
    against stacking each batch and staging it (``fill_slots=False``)."""
    from pipeline.jobs import run_job
    from pipeline.sinks import CallbackSink

    preprocess = Preprocess(scale=1 / 255, layout="nhwc")
    with Pipeline(_mean_colour(SIZE), device="cpu", depth=3, preprocess=preprocess) as pipe:

        def job() -> None:
            source = VideoSource(clip, 32, pipe.source_inputs, decoding=VideoDecoding(size=(SIZE, SIZE)))
            summary = run_job(pipe, source, CallbackSink(lambda *_: None), fill_slots=way != "staged")
            assert summary.items == FRAMES and summary.filled == (way != "staged")

        job()  # warm-up
        benchmark.pedantic(job, rounds=5, iterations=1)
    best = FRAMES / benchmark.stats.stats.min
    benchmark.extra_info.update(frames_per_s=best)
    print(f"\n{way}: fastest {best:.0f} frames/s ({1e3 / best:.2f} ms a frame)", end="")


LONG_FRAMES, KEY_EVERY = 1200, 120


@pytest.fixture(scope="module")
def long_clip(tmp_path_factory):
    """40 s at 30 frames/s, 854x480 H.264, a key frame every 4 s, B-frames (x264's
    veryfast keeps them): a camera's or an encoder's usual stream."""
    options = {"g": str(KEY_EVERY), "sc_threshold": "0", "preset": "veryfast"}
    return _encode(tmp_path_factory.mktemp("video") / "long.mp4", LONG_FRAMES, seed=1, x264_options=options)


@pytest.mark.parametrize("how", ["seeked to its key frame", "decoded through"])
def test_time_to_the_first_batch_far_into_a_video(time_first_batch, long_clip, how, monkeypatch):
    """NOTE [ seeking a video ]: a resumed run, a --rows window or a --shard
    starting at frame 1,140 of 1,200, halfway between two key frames (60
    frames to decode and drop after the seek); "decoded through" is what
    every start cost before (frame_pts made to say nothing)."""
    from pipeline import TensorSpec
    from pipeline.jobs import rows_after

    if how == "decoded through":
        monkeypatch.setattr("pipeline.sources.videos.frame_pts", lambda *args: None)
    skip = LONG_FRAMES - KEY_EVERY // 2
    spec = TensorSpec("frames", np.dtype(np.uint8), ("N", SIZE, SIZE, 3))

    def later():
        return rows_after(VideoSource(long_clip, 32, [spec], decoding=VideoDecoding(size=(SIZE, SIZE))), skip)

    batch, ms = time_first_batch(later)
    assert batch.meta["frame_index"][0] == skip
    print(f"\n{how}: first batch at frame {skip:,} of {LONG_FRAMES:,} in {ms:.1f} ms")


CLIPS, CLIP_FRAMES = 8, 60


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """A folder of 8 clips of 2 s (60 frames of 854x480 H.264): a data set of short clips."""
    folder = tmp_path_factory.mktemp("clips")
    for index in range(CLIPS):
        _encode(folder / f"clip{index}.mp4", CLIP_FRAMES, seed=index)
    return folder


@pytest.mark.parametrize("at_once", [1, 2, 3])
def test_folder_of_clips_by_videos_decoded_at_once(benchmark, clips, at_once):
    """NOTE [ videos decoded at once ]: the folder through the conv net at 64x64 (decoding
    is the cost), one clip at a time against two and three decoded at once."""
    from pipeline.jobs import run_job
    from pipeline.sinks import CallbackSink
    from pipeline.sources import VideoFolderSource

    frames = Preprocess(scale=1 / 255, layout="nhwc")
    with Pipeline(models.convnet(), device="cpu", depth=3, preprocess=frames) as pipe:

        def job() -> float:
            decoding = VideoDecoding(size=(64, 64), videos_at_once=at_once)
            source = VideoFolderSource(clips, 32, pipe.source_inputs, decoding=decoding)
            return run_job(pipe, source, CallbackSink(lambda *args: None)).items_per_s

        job()
        benchmark.pedantic(job, rounds=3, iterations=1)
    best = CLIPS * CLIP_FRAMES / benchmark.stats.stats.min
    benchmark.extra_info.update(videos_at_once=at_once, frames_per_s=best)
    print(f"\n{CLIPS} clips of {CLIP_FRAMES} frames, {at_once} decoded at once: fastest {best:.0f} frames/s", end="")


RAW_FRAMES = 1500  # 224x224 RGB: 226 MB of raw frames


@pytest.fixture(scope="module")
def raw_frames(tmp_path_factory):
    path = tmp_path_factory.mktemp("raw") / "frames.rgb"
    rng = np.random.default_rng(0)
    with path.open("wb") as file:
        for _ in range(RAW_FRAMES // 100):
            file.write(rng.integers(0, 256, (100, SIZE, SIZE, 3), dtype=np.uint8).tobytes())
    return path


@pytest.mark.parametrize("way", ["from the file", "through a pipe", "through a pipe, 64 KiB buffer"])
def test_raw_frames_through_a_pipe_frames_per_s(benchmark, raw_frames, way, monkeypatch):
    """``--input - --video-format rawvideo`` (NOTE [ video streams ]): raw frames that another
    process writes into a pipe (a thread here, writing the file in 1 MiB pieces), read by
    ortpipe's reader, against the same frames read from the file; and with Linux's default
    pipe buffer instead of the 1 MiB ortpipe asks for."""
    import os
    import threading

    from pipeline.sources import _opening

    if way.endswith("64 KiB buffer"):
        monkeypatch.setattr(_opening, "_widen_pipe", lambda descriptor: None)
    with Pipeline(models.convnet(), device="cpu", preprocess=Preprocess(scale=1 / 255, layout="nhwc")) as pipe:
        inputs = pipe.source_inputs
    options = {"video_size": f"{SIZE}x{SIZE}", "pixel_format": "rgb24"}

    def frames_of(path) -> int:
        source = VideoSource(path, 32, inputs, decoding=VideoDecoding(format="rawvideo", options=options))
        return sum(len(rows) for rows, _ in source.chunks())

    def read() -> int:
        if way == "from the file":
            return frames_of(raw_frames)
        read_end, write_end = os.pipe()

        def write() -> None:
            with raw_frames.open("rb") as file, os.fdopen(write_end, "wb") as pipe_in:
                while piece := file.read(1 << 20):
                    pipe_in.write(piece)

        writer = threading.Thread(target=write)
        writer.start()
        try:
            return frames_of(f"pipe:{read_end}")
        finally:
            writer.join()
            os.close(read_end)

    assert read() == RAW_FRAMES  # warm-up, and every frame came
    benchmark.pedantic(read, rounds=3, iterations=1)
    best = RAW_FRAMES / benchmark.stats.stats.min
    benchmark.extra_info.update(frames_per_s=best)
    print(f"\nraw 224x224 frames {way}: fastest {best:.0f} frames/s", end="")


@pytest.fixture(scope="module")
def served_streams(tmp_path_factory):
    """Three of the clips as MPEG-TS (as a live stream is sent), served over HTTP by a local server."""
    import functools
    import http.server
    import threading

    folder = tmp_path_factory.mktemp("streams")
    for index in range(3):
        _encode(folder / f"cam{index}.ts", CLIP_FRAMES * 2, seed=index)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield [f"http://127.0.0.1:{server.server_address[1]}/cam{index}.ts" for index in range(3)]
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.mark.parametrize("way", ["one after another", "at once"])
def test_streams_read_at_once_frames_per_s(benchmark, served_streams, way):
    """NOTE [ several streams ]: three streams (120 frames of 854x480 H.264 each) through the
    conv net at 64x64, one after another as three jobs against at once as one
    (``LiveStreamsSource``: a reader thread a stream, frames batched as they come)."""
    from pipeline import PipelineOptions
    from pipeline.jobs import run_job
    from pipeline.sinks import CallbackSink
    from pipeline.sources import LiveStreamsSource

    frames = Preprocess(scale=1 / 255, layout="nhwc")
    live = PipelineOptions(stage_threads=True)
    with Pipeline(models.convnet(), device="cpu", depth=3, preprocess=frames, options=live) as pipe:
        inputs = pipe.source_inputs

        def job() -> int:
            if way == "at once":
                source = LiveStreamsSource(served_streams, 32, inputs, decoding=VideoDecoding(size=(64, 64)))
                return run_job(pipe, source, CallbackSink(lambda *args: None)).items
            return sum(
                run_job(
                    pipe,
                    VideoSource(url, 32, inputs, decoding=VideoDecoding(size=(64, 64))),
                    CallbackSink(lambda *args: None),
                ).items
                for url in served_streams
            )

        assert job() == 3 * CLIP_FRAMES * 2
        benchmark.pedantic(job, rounds=3, iterations=1)
    best = 3 * CLIP_FRAMES * 2 / benchmark.stats.stats.min
    benchmark.extra_info.update(frames_per_s=best)
    print(f"\nthree streams {way}: fastest {best:.0f} frames/s", end="")
