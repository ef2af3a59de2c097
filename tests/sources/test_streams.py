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
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipeline import TensorSpec
from pipeline.cli import main
from pipeline.cli.run import input_path
from pipeline.jobs import source_kind
from pipeline.sources import STDIN, SourceError, VideoSource, is_live, is_pipe, is_stream_url

from ..helpers import ROOT, encode_video, stop_signals_handled
from ..streaming import RAW, RAW_OPTIONS, SIZE, Quiet, dropping, piped, raw_frames, serving

av = pytest.importorskip("av", reason="video sources need PyAV: pip install '.[video]' in a checkout of ortpipe")

FRAMES = 40


@pytest.fixture
def clip(tmp_path):
    codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
    return encode_video(tmp_path / "clip.mp4", codec, {"g": "12"}, FRAMES, SIZE)


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
    with pytest.raises(SourceError, match="a URL is read as a video stream; tables and arrays are read from"):
        source_kind("https://host/rows.npy?sig=1")
    # object storage (issue 40): a table, an array or a video object by its suffix (a prefix by what
    # it holds: tests/sources/test_stored_tables.py), not read as a stream
    assert source_kind("s3://bucket/scores.parquet") == "parquet" and source_kind("gs://b/t.CSV") == "csv"
    assert source_kind("s3://bucket/rows.npy") == "npy" and source_kind("s3://bucket/clip.mp4") == "video"
    with pytest.raises(SourceError, match="other inputs .* are not yet"):
        source_kind("s3://bucket/notes.txt")


def test_a_served_video_gives_the_files_frames_from_its_first(clip):
    handler = functools.partial(Quiet, directory=str(clip.parent))
    with serving(handler) as base:  # type: ignore[arg-type]
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
    handler = functools.partial(Quiet, directory=str(clip.parent))
    with serving(handler) as base:  # type: ignore[arg-type]
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


class _HalfThenStall(Quiet):
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
    with serving(_Silent) as base:
        box = _in_thread(lambda: VideoSource(f"{base}/live", 8, _spec(), timeout_s=1.0))
    error = box.get("error")
    assert isinstance(error, SourceError) and "cannot be decoded as video" in str(error), box


def test_a_stream_that_stops_sending_ends_with_an_error_after_its_frames(tmp_path):
    """MPEG-TS, as live streams are sent: decodable from its first bytes (an MP4's index may come last)."""
    codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
    ts = encode_video(tmp_path / "live.ts", codec, {"g": "12"}, 120, SIZE, container_format="mpegts")
    with serving(_HalfThenStall, ts.read_bytes()) as base:

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


# NOTE [ video streams ]: pipes, raw frames, FFmpeg's format and options


def test_a_pipe_is_a_stream_and_pipe_n_names_a_descriptor():
    for name in ("pipe:", "pipe:0", "pipe:7"):
        assert is_pipe(name) and is_stream_url(name) and source_kind(name) == "video"
    for name in ("pipe:x", "pipes:0", "pipe", "mypipe:0"):
        assert not is_pipe(name)
    assert input_path("-") == STDIN == "pipe:0"
    with pytest.raises(SourceError, match=r"'pipe:987': file descriptor 987 is not open"):
        VideoSource("pipe:987", 4, _spec())
    import pty

    terminal, other = pty.openpty()  # ortpipe run --input - with nothing piped in: stdin is the terminal
    try:
        with pytest.raises(SourceError, match=rf"'pipe:{other}' is a terminal, not a pipe: pipe a video in"):
            VideoSource(f"pipe:{other}", 4, _spec())
    finally:
        os.close(terminal)
        os.close(other)


def test_raw_frames_are_read_as_the_bytes_written(tmp_path):
    frames = raw_frames()
    raw = tmp_path / "frames.rgb"
    raw.write_bytes(frames.tobytes())
    source = VideoSource(raw, 5, _spec(), format="rawvideo", options=RAW_OPTIONS)
    assert source.row_shape == (SIZE, SIZE, 3) and len(source) == RAW
    got, indices = _frames(source)
    np.testing.assert_array_equal(got, frames)
    np.testing.assert_array_equal(indices, np.arange(RAW))
    with piped(frames.tobytes()) as (pipe, _):  # the same through a pipe
        through = VideoSource(pipe, 5, _spec(), format="rawvideo", options=RAW_OPTIONS)
        np.testing.assert_array_equal(_frames(through)[0], frames)


def test_ffmpegs_format_and_options_are_checked(tmp_path):
    raw = tmp_path / "frames.rgb"
    raw.write_bytes(raw_frames().tobytes())
    with pytest.raises(SourceError, match="raw frames need the options video_size=WxH and pixel_format"):
        VideoSource(raw, 4, _spec(), format="rawvideo")
    with pytest.raises(SourceError, match="'yuv4mpeg3' is not a format FFmpeg reads"):
        VideoSource(raw, 4, _spec(), format="yuv4mpeg3")
    for options in ({"": "1"}, {"video_size": b"32x32"}, {"video_size": None}):
        with pytest.raises(SourceError, match="an FFmpeg option is a name and a string or number"):
            VideoSource(raw, 4, _spec(), format="rawvideo", options=options)


def test_a_pipe_is_read_once_by_the_iteration_after_its_header(clip, tmp_path):
    """What FFmpeg read to find the pipe's streams is gone from it: the container opened then is
    the one the iteration decodes (a second open would miss the start), and only one can."""
    ts = encode_video(tmp_path / "clip.ts", "mpeg4", {"g": "12"}, FRAMES, SIZE, container_format="mpegts")
    with piped(ts.read_bytes()) as (pipe, _):
        source = VideoSource(pipe, 8, _spec())
        assert source.is_stream and source.length_estimated
        window = source.after(0)  # the container goes with the one reader
        frames, indices = _frames(window)
        np.testing.assert_array_equal(indices, np.arange(FRAMES))
        np.testing.assert_array_equal(frames, _frames(VideoSource(ts, 8, _spec()))[0])
        for again in (window, source):
            with pytest.raises(SourceError, match="is a pipe: what was read from it is gone, so it is read once"):
                list(again.chunks())


def test_stop_reading_ends_a_pipe_whose_writer_holds_it_open():
    """A writer gone quiet: the iteration waits for it, and stop_reading (a job's first Ctrl-C)
    ends it as a closed pipe would, after the frames written before."""
    frames = raw_frames()
    with piped(frames[:5].tobytes(), hold_open=True) as (pipe, _):
        source = VideoSource(pipe, 1, _spec(), format="rawvideo", options=RAW_OPTIONS)
        got: list[np.ndarray] = []
        five = threading.Event()

        def read() -> int:
            for rows, _ in source.chunks():
                got.extend(rows)
                if len(got) == 5:
                    five.set()
            return len(got)

        box: dict[str, object] = {}
        reader = threading.Thread(target=lambda: box.update(result=read()), daemon=True)
        reader.start()
        assert five.wait(30)
        reader.join(0.5)
        assert reader.is_alive()  # waiting for a sixth frame the writer may still send
        source.stop_reading()
        reader.join(10)
        assert not reader.is_alive() and box == {"result": 5}
        np.testing.assert_array_equal(np.stack(got), frames[:5])


def test_ortpipe_run_takes_ffmpegs_format_and_options_for_one_video_only(tmp_path, capsys):
    """Raw frames from a file FFmpeg is told the format of, and from a pipe, alike."""
    frames = raw_frames()
    raw = tmp_path / "frames.rgb"  # a name FFmpeg cannot tell the format from: --video-format does
    raw.write_bytes(frames.tobytes())
    options = [item for key, value in RAW_OPTIONS.items() for item in ("--video-option", f"{key}={value}")]
    argv = ["run", "convnet", "--batch-size", "5", "--no-progress", "--video-format", "rawvideo", *options]
    assert main([*argv, "--input", str(raw), "--output", str(tmp_path / "file.parquet")]) == 0
    with piped(frames.tobytes()) as (pipe, _):
        assert main([*argv, "--input", pipe, "--output", str(tmp_path / "pipe.parquet")]) == 0
    from_file, from_pipe = pq.read_table(tmp_path / "file.parquet"), pq.read_table(tmp_path / "pipe.parquet")
    assert from_file["frame_index"].to_pylist() == list(range(RAW)) and from_file.equals(from_pipe)
    capsys.readouterr()
    np.save(tmp_path / "x.npy", frames)
    (tmp_path / "videos").mkdir()
    (tmp_path / "out").mkdir()
    encode_video(tmp_path / "videos" / "a.mp4", "mpeg4", {}, 4, SIZE)
    for refused in (tmp_path / "x.npy", tmp_path / "videos"):  # refused, not ignored
        assert main([*argv, "--input", str(refused), "--output", str(tmp_path / "out" / "no.parquet")]) == 1
        assert "FFmpeg's format and options for opening are for a video or streams" in capsys.readouterr().err
    plain = ["run", "convnet", "--no-progress", "--input", str(raw), "--output", str(tmp_path / "out" / "no.parquet")]
    assert main(plain) == 1  # without --video-format a .rgb file is not a video it can tell
    assert "cannot tell what" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--video-option", "video_size", "--input", str(raw), "--output", str(tmp_path / "no.parquet")])
    assert exited.value.code == 2
    assert "--video-option takes KEY=VALUE, e.g. rtsp_transport=tcp, got 'video_size'" in capsys.readouterr().err


def _ortpipe(argv: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=stop_signals_handled,
    )


def test_ortpipe_run_reads_a_video_piped_into_it(tmp_path):
    """``ffmpeg ... -f mpegts - | ortpipe run ... --input -``: a real pipe between two processes."""
    ts = encode_video(tmp_path / "clip.ts", "mpeg4", {"g": "12"}, FRAMES, SIZE, container_format="mpegts")
    argv = ["run", "convnet", "--batch-size", "8", "--no-progress", "--device", "cpu", "--output"]
    assert main([*argv, str(tmp_path / "file.parquet"), "--input", str(ts)]) == 0
    process = _ortpipe([*argv, str(tmp_path / "piped.parquet"), "--input", "-"])
    try:
        out, err = process.communicate(ts.read_bytes(), timeout=120)
    finally:
        process.kill()
    assert process.returncode == 0, err.decode()
    assert "video from standard input ->" in out.decode() and "issued by stage threads" in out.decode()
    assert pq.read_table(tmp_path / "piped.parquet").equals(pq.read_table(tmp_path / "file.parquet"))


def test_ctrl_c_ends_a_run_waiting_on_a_quiet_pipe_gracefully(tmp_path):
    """FFmpeg's blocking read of a pipe ignores a graceful Ctrl-C; ortpipe's reader does not."""
    output = tmp_path / "scores"  # a data set: a part file shows that rows were written
    argv = ["run", "convnet", "--batch-size", "4", "--part-rows", "4", "--no-progress", "--device", "cpu"]
    options = [item for key, value in RAW_OPTIONS.items() for item in ("--video-option", f"{key}={value}")]
    process = _ortpipe([*argv, "--video-format", "rawvideo", *options, "--input", "-", "--output", str(output)])
    try:
        process.stdin.write(raw_frames()[:8].tobytes())  # two batches, and the writer goes quiet
        process.stdin.flush()
        assert process.stdout.readline().startswith(b"preprocess:")
        assert process.stdout.readline().startswith(b"device:")
        deadline = time.monotonic() + 60  # a stream's results are written as they are ready (stage threads)
        while not (output / "part-00001.parquet").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        process.send_signal(signal.SIGINT)
        process.wait(30)  # the pipe held open and quiet: only the reader's stop ends the run
        err = process.stderr.read().decode()
    finally:
        process.kill()
        process.stdin.close()
    assert process.returncode == 128 + signal.SIGINT, err
    assert pq.read_table(output)["frame_index"].to_pylist() == list(range(8))  # stage threads wrote both
    assert "interrupted after 8 items" in err


def _noise_mp4(path, movflags: str | None = None):
    """An MP4 of 30 frames of noise, larger (34 KB) than the buffer FFmpeg reads a pipe into."""
    rng = np.random.default_rng(3)
    with av.open(str(path), "w", options={"movflags": movflags} if movflags else {}) as container:
        stream = container.add_stream("mpeg4", rate=30, options={"qscale": "1"})
        stream.width = stream.height = SIZE * 2
        stream.pix_fmt = "yuv420p"
        for _ in range(30):
            image = rng.integers(0, 256, (SIZE * 2, SIZE * 2, 3), dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def test_an_mp4_whose_index_comes_last_cannot_be_piped_and_the_error_says_what_can(tmp_path):
    spec = [TensorSpec("frames", np.dtype(np.uint8), ("N", SIZE * 2, SIZE * 2, 3))]
    with piped(_noise_mp4(tmp_path / "plain.mp4").read_bytes()) as (pipe, _):
        source = VideoSource(pipe, 8, spec)
        with pytest.raises(SourceError, match="an MP4 whose index comes last cannot be read from one; write NUT"):
            list(source.chunks())
    fragmented = _noise_mp4(tmp_path / "fragmented.mp4", "frag_keyframe+empty_moov")
    with piped(fragmented.read_bytes()) as (pipe, _):
        assert sum(len(rows) for rows, _ in VideoSource(pipe, 8, spec).chunks()) == 30


# NOTE [ reconnecting ]


@pytest.fixture
def live_ts(tmp_path, monkeypatch):
    """An MPEG-TS to serve, and retries 0.01 s apart instead of 0.5 s and more."""
    from pipeline.sources import videos

    monkeypatch.setattr(videos, "_RECONNECT_FIRST_WAIT_S", 0.01)
    return encode_video(tmp_path / "live.ts", "mpeg4", {"g": "6"}, 60, SIZE, container_format="mpegts").read_bytes()


def _delivered(source: VideoSource) -> tuple[list[dict[str, np.ndarray]], SourceError | None]:
    delivered = []
    try:
        for _, meta in source.chunks():
            delivered.append(meta)
    except SourceError as exc:
        return delivered, exc
    return delivered, None


def test_a_dropped_stream_is_opened_again_and_its_frames_numbered_on(live_ts):
    with serving(dropping(served=3), live_ts) as base:  # the header's read, then two that give frames
        source = VideoSource(f"{base}/live.ts", 8, _spec(), reconnect=2)
        delivered, error = _delivered(source)
    indices = np.concatenate([m["frame_index"] for m in delivered])
    connections = np.concatenate([m["connection"] for m in delivered])
    half = int((connections == 0).sum())
    assert half > 0 and len(indices) == 2 * half  # each connection gave the same first half
    np.testing.assert_array_equal(indices, np.arange(2 * half))  # numbered on across the drop
    np.testing.assert_array_equal(connections, np.repeat([0, 1], half))
    assert [first for first, _ in source.reconnections] == [half]
    # then two tries in a row gave no frame (404): the last failure ends it, after every frame
    assert error is not None and f"decoding failed after {2 * half} frames" in str(error) and "404" in str(error)


def test_without_reconnect_a_dropped_stream_ends_and_a_file_or_pipe_cannot_reconnect(live_ts, tmp_path, clip):
    with serving(dropping(served=3), live_ts) as base:
        delivered, _ = _delivered(VideoSource(f"{base}/live.ts", 8, _spec()))
    assert "connection" not in delivered[0]
    with pytest.raises(SourceError, match="reconnecting is for a stream's URL .* a file ends where it ends"):
        VideoSource(clip, 8, _spec(), reconnect=1)
    with piped(live_ts) as (pipe, _), pytest.raises(SourceError, match="a pipe cannot be opened again"):
        VideoSource(pipe, 8, _spec(), reconnect=1)
    with pytest.raises(SourceError, match="reconnect takes a number of tries >= 0"):
        VideoSource(clip, 8, _spec(), reconnect=-1)


def test_stop_reading_ends_the_waits_between_tries(live_ts, monkeypatch):
    from pipeline.sources import videos

    monkeypatch.setattr(videos, "_RECONNECT_FIRST_WAIT_S", 30.0)  # a wait no test would sit out
    with serving(dropping(served=2), live_ts) as base:
        source = VideoSource(f"{base}/live.ts", 8, _spec(), reconnect=sys.maxsize)
        box: dict[str, object] = {}
        reader = threading.Thread(target=lambda: box.update(result=_delivered(source)), daemon=True)
        reader.start()
        reader.join(1.5)  # the one connection's frames, then a wait of 30 s before the next try
        assert reader.is_alive()
        source.stop_reading()
        reader.join(10)
    assert not reader.is_alive()
    delivered, error = box["result"]  # type: ignore[misc]
    assert error is None and delivered and source.reconnections == []


def test_ortpipe_run_reconnects_and_says_so(live_ts, tmp_path, capsys):
    with serving(dropping(served=3), live_ts) as base:
        argv = ["run", "convnet", "--input", f"{base}/live.ts", "--batch-size", "8", "--no-progress"]
        code = main([*argv, "--reconnect", "1", "--output", str(tmp_path / "frames.parquet")])
    err = capsys.readouterr().err
    assert code == 1 and "decoding failed after" in err  # the try after the second connection failed
    table = pq.read_table(tmp_path / "frames.parquet")
    connections = table["connection"].to_pylist()
    assert table["frame_index"].to_pylist() == list(range(len(connections))) and set(connections) == {0, 1}
    assert f"reconnected to '{base}/live.ts' 1 time(s); the rows' connection column says which:" in err
    assert f"  before frame {connections.index(1)}: " in err
    for bad in ("-1", "often"):
        with pytest.raises(SystemExit):
            main([*argv, "--reconnect", bad, "--output", str(tmp_path / "no.parquet")])
        assert "--reconnect takes a number of tries >= 0 or 'always'" in capsys.readouterr().err


def test_ortpipe_run_gives_up_on_a_silent_stream_after_its_timeout(tmp_path, capsys, clip):
    argv = ["run", "convnet", "--no-progress", "--stream-timeout", "1", "--output", str(tmp_path / "o.parquet")]
    with serving(_Silent) as base:
        started = time.monotonic()
        assert main([*argv, "--input", f"{base}/live"]) == 1
        assert time.monotonic() - started < 9  # given up after 1 s, not the default 10
    assert "cannot be decoded as video" in capsys.readouterr().err
    for not_a_url in (str(clip), "-"):
        assert main([*argv, "--input", not_a_url]) == 1
        assert "a stream's timeout is for a stream's URL (a pipe is waited on)" in capsys.readouterr().err


@contextlib.contextmanager
def _fifo(path, data: bytes) -> Iterator[None]:
    """A named pipe at ``path`` that a thread writes ``data`` into (once a reader opens it), then closes."""
    os.mkfifo(path)

    def write() -> None:
        with contextlib.suppress(OSError), open(path, "wb") as pipe:  # waits for the reader, as a writer does
            pipe.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        yield
    finally:
        if writer.is_alive():  # no reader came: let the writer's open return
            with contextlib.suppress(OSError):
                os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        writer.join(10)


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open descriptors in /proc")
def test_a_named_pipe_is_read_once_as_a_pipe_and_its_descriptor_closed(tmp_path):
    import gc

    ts = encode_video(tmp_path / "clip.ts", "mpeg4", {"g": "12"}, FRAMES, SIZE, container_format="mpegts")
    gc.collect()  # earlier tests' garbage closes its files now, not within this count
    before = _open_descriptors()
    with _fifo(tmp_path / "camera", ts.read_bytes()):
        source = VideoSource(tmp_path / "camera", 8, _spec(), format="mpegts")
        assert source.is_pipe and source.is_stream and is_live(tmp_path / "camera")
        frames, indices = _frames(source)
        np.testing.assert_array_equal(frames, _frames(VideoSource(ts, 8, _spec()))[0])
        np.testing.assert_array_equal(indices, np.arange(FRAMES))
        with pytest.raises(SourceError, match="is a pipe: what was read from it is gone, so it is read once"):
            list(source.chunks())
    del source
    gc.collect()
    assert _open_descriptors() == before  # the descriptor ortpipe opened went with its reader
    assert not is_live(ts) and not is_pipe(str(tmp_path / "camera"))


def test_ortpipe_run_reads_a_named_pipe_given_its_format(tmp_path, capsys):
    ts = encode_video(tmp_path / "clip.ts", "mpeg4", {"g": "12"}, FRAMES, SIZE, container_format="mpegts")
    argv = ["run", "convnet", "--batch-size", "8", "--no-progress", "--device", "cpu", "--output"]
    assert main([*argv, str(tmp_path / "file.parquet"), "--input", str(ts)]) == 0
    capsys.readouterr()
    with _fifo(tmp_path / "camera", ts.read_bytes()):  # a name that says nothing: --video-format does
        fifo = ["--input", str(tmp_path / "camera"), "--video-format", "mpegts"]
        assert main([*argv, str(tmp_path / "fifo.parquet"), *fifo]) == 0
    assert "issued by stage threads" in capsys.readouterr().out
    assert pq.read_table(tmp_path / "fifo.parquet").equals(pq.read_table(tmp_path / "file.parquet"))


# NOTE [ decoding on the GPU ]: where there is none, the errors (tests/test_cuda.py decodes on one)


def test_decoding_on_a_device_with_a_pyav_that_cannot_says_which_can(clip, monkeypatch, capsys):
    import av.codec

    monkeypatch.setitem(sys.modules, "av.codec.hwaccel", None)  # an import of it fails, as before PyAV 14.1
    monkeypatch.delattr(av.codec, "hwaccel", raising=False)
    with pytest.raises(SourceError, match=r"decoding on a GPU needs PyAV 14.2 or later .* PyAV [0-9.]+ is installed"):
        VideoSource(clip, 8, _spec(), hwaccel="cuda")
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "video decoding on a GPU (--hwaccel cuda): no: decoding on a GPU needs PyAV 14.2 or later" in out


def test_decoding_on_a_device_names_what_ffmpeg_has_and_what_it_cannot_open(clip, tmp_path, capsys):
    hwdevices_available = pytest.importorskip("av.codec.hwaccel", reason="PyAV before 14.1").hwdevices_available

    with pytest.raises(SourceError, match=r"hwaccel 'nvdec' is no device FFmpeg decodes on; it has .*cuda:N for"):
        VideoSource(clip, 8, _spec(), hwaccel="nvdec")
    from pipeline import Pipeline, models
    from pipeline.cli.run import _decoding_device

    with Pipeline(models.mlp(), device="cpu") as pipe:  # the model on no GPU: cuda stays GPU 0
        assert _decoding_device("cuda", pipe) == "cuda" and _decoding_device("cuda:1", pipe) == "cuda:1"
    if "cuda" not in hwdevices_available():
        pytest.skip("this FFmpeg decodes on no CUDA device at all")
    from pipeline.sources._opening import hw_device_unusable

    if hw_device_unusable("cuda") is None:
        pytest.skip("FFmpeg can decode on a CUDA device here: tests/test_cuda.py does")
    with pytest.raises(SourceError, match=r"FFmpeg cannot open the device 'cuda:0' to decode on: .* with its driver"):
        VideoSource(clip, 8, _spec(), hwaccel="cuda:0")
    (tmp_path / "clips").mkdir()
    encode_video(tmp_path / "clips" / "a.mp4", "mpeg4", {}, 4, SIZE)
    argv = ["run", "convnet", "--no-progress", "--hwaccel", "cuda", "--output", str(tmp_path / "o.parquet")]
    assert main([*argv, "--input", str(tmp_path / "clips"), "--skip-unreadable"]) == 1  # not a reason to skip each
    assert "FFmpeg cannot open the device 'cuda' to decode on" in capsys.readouterr().err
    np.save(tmp_path / "x.npy", np.zeros((4, SIZE, SIZE, 3), np.uint8))
    assert main([*argv, "--input", str(tmp_path / "x.npy")]) == 1
    assert "decoding on a GPU is for videos" in capsys.readouterr().err
