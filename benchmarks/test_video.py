"""Decoding a video into batches: ``VideoSource`` against a plain PyAV loop.

150 frames of 854x480 H.264, converted to 224x224 RGB.  Both decode with
FFmpeg's threads; the plain loop calls ``frame.reformat`` per frame (a new
swscale context, and its threads, each time), ``VideoSource`` keeps one
context for the whole video.  No model runs: this is the source alone, the
part that bounds a video job once the model is fast.
"""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import Pipeline, Preprocess, models
from pipeline.sources import VideoSource

av = pytest.importorskip("av", reason="needs PyAV: pip install 'ortpipe[video]'")
FRAMES, WIDTH, HEIGHT, SIZE = 150, 854, 480, 224


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("video") / "clip.mp4"
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (HEIGHT // 8, WIDTH // 8, 3), dtype=np.uint8).repeat(8, 0).repeat(8, 1)
    with av.open(str(path), "w") as container:
        codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
        stream = container.add_stream(codec, rate=30)
        stream.width, stream.height, stream.pix_fmt = base.shape[1], base.shape[0], "yuv420p"
        for index in range(FRAMES):
            frame = av.VideoFrame.from_ndarray(np.roll(base, 3 * index, axis=1), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


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


@pytest.mark.parametrize("way", ["plain PyAV loop", "VideoSource"])
def test_video_decode_frames_per_s(benchmark, clip, way):
    with Pipeline(models.convnet(), device="cpu", preprocess=Preprocess(scale=1 / 255, layout="nhwc")) as pipe:
        inputs = pipe.source_inputs
    if way == "VideoSource":

        def decode() -> int:
            return sum(1 for _ in VideoSource(clip, 32, inputs, size=(SIZE, SIZE)))
    else:

        def decode() -> int:
            return _plain_loop(clip)

    decode()  # warm-up
    benchmark.pedantic(decode, rounds=3, iterations=1)
    best = FRAMES / benchmark.stats.stats.min
    benchmark.extra_info.update(frames_per_s=best)
    print(f"\n{way}: fastest {best:.0f} frames/s ({1e3 / best:.2f} ms a frame)", end="")
