"""NOTE [ converting beside the decoder ]: a video's frames converted by a pool of
threads give the frames, the order and the metadata of the decoding thread's own
conversion, deliver what was decoded before a failure, and leave no thread."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from pipeline import TensorSpec
from pipeline.sources import SourceError, VideoSource
from pipeline.sources.videos import auto_convert_threads

from ..helpers import corrupt_frame, encode_video

av = pytest.importorskip("av", reason="video sources need PyAV: pip install '.[video]' in a checkout of ortpipe")

SPEC = [TensorSpec("frames", np.dtype(np.uint8), ("N", 16, 32, 3))]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
    return encode_video(tmp_path_factory.mktemp("convert") / "clip.mp4", codec, {"g": "5"}, frames=23, size=48)


def _read(source: VideoSource, threads: int) -> tuple[np.ndarray, dict[str, np.ndarray], list[int]]:
    source.convert_threads = threads
    chunks = list(source.chunks())
    frames = np.stack([row for rows, _ in chunks for row in rows])
    meta = {name: np.concatenate([m[name] for _, m in chunks]) for name in chunks[0][1]}
    return frames, meta, [len(rows) for rows, _ in chunks]


@pytest.mark.parametrize(("fit", "every"), [("pad:7", 1), ("crop", 2), ("stretch", 3)])
def test_frames_converted_by_threads_are_the_decoding_threads_own(clip, fit, every):
    inline = _read(VideoSource(clip, 4, SPEC, size=(32, 16), fit=fit, every=every), 0)
    threaded = _read(VideoSource(clip, 4, SPEC, size=(32, 16), fit=fit, every=every), 3)
    np.testing.assert_array_equal(threaded[0], inline[0])
    assert threaded[1].keys() == inline[1].keys()
    for name in inline[1]:
        np.testing.assert_array_equal(threaded[1][name], inline[1][name])
    assert threaded[2] == inline[2]  # the same chunks: batch_size frames each, the last short
    assert inline[1]["frame_index"].tolist() == list(range(0, 23, every))


def _convert_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("ortpipe-convert")]


def test_a_reader_that_stops_early_leaves_no_converting_thread(clip):
    source = VideoSource(clip, 4, SPEC, size=(32, 16))
    source.convert_threads = 2
    chunks = source.chunks()
    rows, meta = next(chunks)
    assert len(rows) == 4 and meta["frame_index"].tolist() == [0, 1, 2, 3]
    assert _convert_threads()
    chunks.close()
    deadline = time.monotonic() + 5
    while _convert_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _convert_threads() == []


def test_frames_decoded_before_a_failure_are_delivered_by_the_threads_too(tmp_path):
    """Frame 12 of an MPEG-4 clip is corrupt: the 12 before it come, converted, then the error."""
    clip = corrupt_frame(encode_video(tmp_path / "bad.mp4", "mpeg4", {"g": "12"}, 30, 48), 12)
    source = VideoSource(clip, 5, SPEC, size=(32, 16))
    source.convert_threads = 2
    got: list[int] = []
    with pytest.raises(SourceError, match="decoding failed after 12 frames"):
        for _, meta in source.chunks():
            got.extend(meta["frame_index"].tolist())
    assert got == list(range(12))
    assert _convert_threads() == []


@pytest.mark.parametrize(("cpus", "threads"), [(1, 0), (2, 1), (7, 1), (8, 2), (16, 4), (128, 4)])
def test_auto_convert_threads(cpus, threads):
    assert auto_convert_threads(cpus) == threads
