"""NOTE [ video streams ]: a video read from a URL, served here over HTTP by a real server.

The servers are local threads: one that serves a file (as a camera's or a
media server's stream is read), one that never answers, one that stops
sending halfway.  FFmpeg's timeouts turn the last two into errors, never a
hang.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import threading
from collections.abc import Iterator

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipeline import TensorSpec
from pipeline.cli import main
from pipeline.jobs import source_kind
from pipeline.sources import SourceError, VideoSource, is_stream_url

from .helpers import encode_video

av = pytest.importorskip("av", reason="video sources need PyAV: pip install 'ortpipe[video]'")

FRAMES, SIZE = 40, 32


@pytest.fixture
def clip(tmp_path):
    codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
    return encode_video(tmp_path / "clip.mp4", codec, {"g": "12"}, FRAMES, SIZE)


@contextlib.contextmanager
def _serving(handler, payload: bytes = b"") -> Iterator[str]:
    """An HTTP server on a free local port, its address; its handlers find ``payload``
    and a ``quit`` event (set on the way out, so no handler outlives the test) on it."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.payload, server.quit = payload, threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.quit.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()
        thread.join(5)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def _spec():
    return [TensorSpec("frames", np.dtype(np.uint8), ("N", SIZE, SIZE, 3))]


def _frames(source: VideoSource) -> tuple[np.ndarray, np.ndarray]:
    chunks = list(source.chunks())
    return np.stack([f for rows, _ in chunks for f in rows]), np.concatenate([m["frame_index"] for _, m in chunks])


def test_a_url_is_a_stream_whatever_its_scheme():
    for url in ("rtsp://camera.local/live", "http://host:8080/clip.mp4", "srt://1.2.3.4:9000", "udp://@:1234"):
        assert is_stream_url(url) and source_kind(url) == "video"
    for path in ("clip.mp4", "/data/clip.mp4", "C:/videos/clip.mp4"):
        assert not is_stream_url(path)
    for table in ("s3://bucket/scores.parquet", "https://host/rows.npy?sig=1", "gs://b/t.CSV"):
        with pytest.raises(SourceError, match="a URL is read as a video stream; tables and arrays are read from"):
            source_kind(table)


def test_a_served_video_gives_the_files_frames_from_its_first(clip):
    handler = functools.partial(_Quiet, directory=str(clip.parent))
    with _serving(handler) as base:  # type: ignore[arg-type]
        url = f"{base}/{clip.name}"
        stream = VideoSource(url, 8, _spec())
        assert stream.is_stream and len(stream) == FRAMES
        frames, indices = _frames(stream)
        np.testing.assert_array_equal(frames, _frames(VideoSource(clip, 8, _spec()))[0])
        np.testing.assert_array_equal(indices, np.arange(FRAMES))
        assert stream.after(0) is not None
        with pytest.raises(SourceError, match="is a stream: it is read from its first frame on, with no frame 5"):
            stream.after(5)


def test_ortpipe_run_reads_a_stream_and_refuses_to_start_past_its_first_frame(clip, tmp_path, capsys):
    handler = functools.partial(_Quiet, directory=str(clip.parent))
    with _serving(handler) as base:  # type: ignore[arg-type]
        url = f"{base}/{clip.name}"
        argv = ["run", "convnet", "--input", url, "--batch-size", "8", "--no-progress", "--output"]
        assert main([*argv, str(tmp_path / "a.parquet"), "--limit", "20"]) == 0
        assert pq.read_table(tmp_path / "a.parquet")["frame_index"].to_pylist() == list(range(20))
        capsys.readouterr()
        for refused in (["--shard", "1/2"], ["--rows", "10:"], ["--resume"]):
            output = "a.parquet" if refused == ["--resume"] else "b.parquet"
            assert main([*argv, str(tmp_path / output), *refused]) == 1, refused
            assert "is a stream: it is read from its first frame on" in capsys.readouterr().err


class _Silent(http.server.BaseHTTPRequestHandler):
    """Takes the request and never answers."""

    def do_GET(self) -> None:
        self.server.quit.wait(30)  # type: ignore[attr-defined]


class _HalfThenStall(_Quiet):
    """Sends the first half of the file, then nothing."""

    def do_GET(self) -> None:
        data = self.server.payload  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "video/mp4")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(OSError):
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
        self.server.quit.wait(30)  # type: ignore[attr-defined]


def _in_thread(work, limit_s: float = 60.0):
    """``work()``'s exception or result, from a thread that must end within ``limit_s`` (a hang fails)."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["result"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), f"still waiting after {limit_s} s: the stream's timeout did not end it"
    return box


def test_a_stream_that_never_answers_is_given_up_not_waited_on_forever():
    with _serving(_Silent) as base:
        box = _in_thread(lambda: VideoSource(f"{base}/live", 8, _spec(), timeout_s=1.0))
    error = box.get("error")
    assert isinstance(error, SourceError) and "cannot be decoded as video" in str(error), box


def test_a_stream_that_stops_sending_ends_with_an_error_after_its_frames(tmp_path):
    """MPEG-TS, as live streams are sent: decodable from its first bytes (an MP4's index may come last)."""
    codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
    ts = encode_video(tmp_path / "live.ts", codec, {"g": "12"}, 120, SIZE, container_format="mpegts")
    with _serving(_HalfThenStall, ts.read_bytes()) as base:

        def read() -> list[int]:
            source = VideoSource(f"{base}/live.ts", 8, _spec(), timeout_s=1.0)
            delivered: list[int] = []
            try:
                for _, meta in source.chunks():
                    delivered.extend(meta["frame_index"].tolist())
            except SourceError as exc:
                return [*delivered, -1, str(exc)]  # type: ignore[list-item]
            return delivered

        box = _in_thread(read)
    got = box.get("result")
    assert isinstance(got, list) and got[-2] == -1 and "decoding failed after" in got[-1], box
    # every frame decoded before it, in order: the last batch, short, too
    assert got[:-2] == list(range(len(got) - 2)) and f"decoding failed after {len(got) - 2} frames" in got[-1], got
