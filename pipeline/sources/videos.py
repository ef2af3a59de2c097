"""Videos: one file or stream decoded with PyAV (:class:`VideoSource`); a folder's
or a table's videos as one source are in ``video_folders``."""

from __future__ import annotations

import concurrent.futures
import contextlib
import copy
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..session import TensorSpec
from ..util.cpus import usable_cpus
from ..util.rows import take_first
from ..util.storage import StoredPath, is_storage_url, said
from ._base import (
    Chunk,
    RowSource,
    SourceError,
    chunk_rows,
    decode_threads_of,
    existing_path,
    fewer_rows,
    one_input,
    sliced_chunk,
)
from ._opening import (
    STREAM_TIMEOUT_S,
    PipeReader,
    checked_hwaccel,
    demuxer,
    hw_decoding,
    is_fifo,
    is_pipe,
    is_stream_url,
    open_options,
    pipe_descriptor,
)
from ._seeking import frame_pts
from .decoding import VIDEO_CHOICES, VideoDecoding, chosen, from_keywords
from .fitting import Fit, Placement, check_fit, fit_columns

#: NOTE [ reconnecting ]: the wait before a stream's first try to open it again, doubled for
#: each try after, up to the second
_RECONNECT_FIRST_WAIT_S = 0.5
_RECONNECT_MAX_WAIT_S = 30.0


def _check_stride(every: int, fps: float | None) -> None:
    """A SourceError where the frames taken are asked for in a way that cannot be."""
    if not (isinstance(every, int) and every >= 1):
        raise SourceError(f"every takes a whole number of frames >= 1, got {every!r}")
    if fps is not None and (every != 1 or not fps > 0):
        raise SourceError(f"fps takes frames a second > 0, instead of every, got fps={fps!r}, every={every!r}")


class VideoSource(RowSource):
    """Frames of a video decoded with PyAV: uint8 ``[N, H, W, 3]`` (``pix_fmt`` rgb24 or bgr24).

    ``size=(width, height)`` resizes while decoding, stretched unless ``fit``
    says ``"crop"`` or ``"pad"`` (NOTE [ fitting ]: swscale resizes the whole
    frame, which is then cut or padded).  Each frame keeps its index
    and its timestamp in seconds (``frame.time``).  ``every=N`` takes frames 0,
    N, 2N, ... (30 on a 30 frame/s video: a frame a second): the others are
    decoded, as a compressed stream must be, but neither converted nor run, and
    the rows (a window's, a resumed run's, ``len()``) are the frames taken.
    ``fps=F`` takes the stride from the video's frame rate: round(rate / F).  FFmpeg decodes with threads
    of its own: ``decode_threads`` of them (None: as many as FFmpeg picks).
    One swscale context converts every frame of an iteration: ``frame.reformat``
    would make a new one, and start its threads, for each frame (docs/results.md:
    more than twice the time a frame).  Frames are
    converted beside the decoder by ``convert_threads`` threads (None: one per
    four CPUs, 1 to 4; 0: by the decoding thread), each with a swscale context
    of its own (NOTE [ converting beside the decoder ]).

    NOTE [ video streams ]: ``path`` may be a URL FFmpeg reads (a camera's
    ``rtsp://``, ``http(s)://``, ``srt://``, ``udp://``): frames are taken as
    they come, for as long as the stream lasts (``--limit``, Ctrl-C or SIGTERM
    end a live one gracefully).  A stream may be live, with no frame N to go
    back to, so it cannot start past its first frame (:meth:`after` refuses:
    no resume, window or shard), and FFmpeg gives up on one that sends nothing
    for ``timeout_s`` (opening it too), instead of waiting forever.

    A pipe (:data:`STDIN`, ``pipe:N``: ``ffmpeg ... -f nut - | ortpipe run
    --input -``, or a named pipe's path, ``mkfifo``) is such a stream that can be read only once: what FFmpeg
    read to find its streams is gone from the pipe, so the container opened
    to read its header is kept and decoded by the first iteration, and a
    second is refused.  A pipe is waited on for as long as its writer holds
    it open, and ends when the writer closes it, or when :meth:`stop_reading`
    says so: it is read by ortpipe (:class:`PipeReader`), not by FFmpeg,
    whose blocking read of a pipe neither times out nor ends at a graceful
    Ctrl-C (only the handler runs, and the read goes on).

    ``format`` names FFmpeg's demuxer where the input cannot say it
    (``rawvideo`` for raw frames, ``h264`` for an elementary stream, as
    ``ffmpeg -f``), ``options`` are FFmpeg's options for opening it
    (``rtsp_transport=tcp`` for a camera whose UDP packets are lost,
    ``video_size=640x480`` and ``pixel_format=rgb24`` for raw frames,
    ``probesize``); FFmpeg passes over a name that no part of it knows.

    NOTE [ decoding on the GPU ]: decoding is the bottleneck of most video jobs
    on the CPU (a 480p H.264 frame about 0.5 ms a core here), and an NVIDIA GPU
    has decoders of its own (NVDEC) beside its compute.  ``hwaccel="cuda"``
    (``"cuda:N"``: GPU N) has FFmpeg decode there; each frame is downloaded to
    host memory as it is decoded and converted as any other, so everything
    after decoding is unchanged.  A codec the device cannot decode is an
    error, not a quiet fall back to the CPU.  Each frame is downloaded and
    converted on the CPU, one at a time, so decoding there frees the CPU
    rather than outrunning it (docs/results.md, the H200 machine).

    NOTE [ reconnecting ]: a camera's stream drops - a network blip, the
    camera restarting - and a job that is to run for days should not end
    with it.  ``reconnect=N`` opens a stream's URL again when it ends or
    fails, waiting 0.5, 1, 2, ... up to 30 s between tries, until N tries
    in a row have given no frame (``sys.maxsize``: never give up); the
    first open is not retried, so a wrong address fails at once.  Frame
    indices go on across connections (the frames the outage lost are not
    counted), each row says which ``connection`` (0 the first) its frame
    came from, its ``timestamp`` being that connection's, and
    ``reconnections`` lists (first frame index, why the connection before
    ended) of each.  Only a URL: a file's end is its end, and a pipe cannot
    be opened again.  :meth:`stop_reading` also ends the waits and tries.
    """

    def __init__(
        self,
        path: str | Path,
        batch_size: int,
        inputs: Sequence[TensorSpec],
        input_name: str | None = None,
        size: tuple[int, int] | None = None,
        pix_fmt: str = "rgb24",
        decode_threads: int | None = None,
        timeout_s: float = STREAM_TIMEOUT_S,
        every: int = 1,
        fps: float | None = None,
        fit: str | Fit | None = None,
        format: str | None = None,
        options: Mapping[str, object] | None = None,
        reconnect: int = 0,
        hwaccel: str | None = None,
        *,
        decoding: VideoDecoding | None = None,
    ):
        given = (size, pix_fmt, decode_threads, timeout_s, every, fps, fit, format, options or {}, reconnect, hwaccel)
        decoding = from_keywords("VideoSource", decoding, dict(zip(VIDEO_CHOICES, given, strict=True)))
        (size, pix_fmt, decode_threads, timeout_s, every, fps, fit, format, options, reconnect, hwaccel) = chosen(
            decoding, VIDEO_CHOICES, "VideoSource"
        )
        _check_stride(every, fps)
        self._open_input(path, timeout_s, format, options, reconnect, hwaccel)
        self.spec = one_input(inputs, input_name, "a video source")
        self.batch_size, self.size, self.pix_fmt = batch_size, size, pix_fmt
        #: how a frame is made ``size`` (NOTE [ fitting ])
        self.fit = check_fit(fit, size, f"video {str(self.path)!r}")
        self._placements: dict[tuple[int, int], Placement] = {}
        self.decode_threads = None if decode_threads is None else decode_threads_of(decode_threads)
        #: threads converting frames beside the decoder; None: :func:`auto_convert_threads`
        #: (NOTE [ converting beside the decoder ])
        self.convert_threads: int | None = None
        width, height, every, exact = self._probe(size, every, fps)
        #: the stride of the frames taken (frame 0, every, 2 * every, ...)
        self.every = every
        self.row_shape = (height, width, 3) if width and height else None  # rgb24 / bgr24: 3 bytes a pixel
        #: len() is worked out from the duration and frame rate (a Matroska or WebM file
        #: counts no frames in its header): a --shard's bounds, a progress bar's total
        self.length_estimated = not exact
        self._packets: int | None = None  # the frames counted from the packets (:meth:`counted_len`)
        #: frames decoded but not converted nor delivered before the first batch (:meth:`after`):
        #: a whole number of strides
        self.skip = 0
        #: the index of the first frame the latest iteration decoded: 0, or past it
        #: where seeking (NOTE [ seeking a video ]) let it start at a later key frame
        self.decoded_from = 0
        #: (path, rows given, rows its header counts) where an iteration ended before the
        #: frames the header counts (NOTE [ frame positions ]); shared by the windows made of it
        self.cut_short: list[tuple[str, int, int]] = []
        #: a window (:meth:`between`): ending before its first frame gives no rows, and it
        #: gives at most ``_limit`` rows
        self._window = False
        self._limit: int | None = None

    def _open_input(
        self,
        path: str | Path,
        timeout_s: float,
        format: str | None,
        options: Mapping[str, object] | None,
        reconnect: int,
        hwaccel: str | None,
    ) -> None:
        """Where the video is read from and how FFmpeg opens it (NOTE [ video streams ])."""
        #: a video object in object storage (``s3://bucket/clip.mp4``): a file, read through
        #: pyarrow's filesystem as a seekable file object; else None
        self.stored = StoredPath.of(str(path)) if is_storage_url(path) else None
        self.path: str | Path = str(path) if is_stream_url(path) else existing_path(path, "input video")
        #: read once, as it comes: standard input, ``pipe:N``, a named pipe (NOTE [ video streams ])
        self.is_pipe = is_pipe(self.path) or is_fifo(self.path)
        #: a URL or a pipe (NOTE [ video streams ]), not a file
        self.is_stream = (is_stream_url(self.path) and self.stored is None) or self.is_pipe
        self.timeout_s = timeout_s
        #: FFmpeg's demuxer and options for opening the video (None, {}: as FFmpeg finds it)
        self.format = demuxer(format, self.path)
        self.options = open_options(options, f"video {str(self.path)!r}")
        #: a pipe's container, opened to read its header and kept for the one iteration a
        #: pipe can have (NOTE [ video streams ]); None once that has taken it
        self._held: Any = None
        #: set by :meth:`stop_reading`; shared with the windows made of this source
        self._stop_reading = threading.Event()
        if not (isinstance(reconnect, int) and reconnect >= 0):
            raise SourceError(f"reconnect takes a number of tries >= 0, got {reconnect!r}")
        if reconnect and (self.is_pipe or not self.is_stream):
            raise SourceError(
                f"{str(self.path)!r}: reconnecting is for a stream's URL (NOTE [ reconnecting ]); "
                f"{'a pipe cannot be opened again' if self.is_stream else 'a file ends where it ends'}"
            )
        #: tries in a row to open the stream again (NOTE [ reconnecting ])
        self.reconnect = reconnect
        #: the device FFmpeg decodes on, ``TYPE[:DEVICE]`` (NOTE [ decoding on the GPU ]), else None
        self.hwaccel = checked_hwaccel(hwaccel, self.path)
        #: (index of the first frame of a new connection, why the one before ended), in order
        self.reconnections: list[tuple[int, str]] = []

    def _probe(self, size: tuple[int, int] | None, every: int, fps: float | None) -> tuple[int, int, int, bool]:
        """The video's header read: (width, height) of the frames made, the stride taken
        (from ``fps`` where given), and whether the frame count is exact (``frames_hint``)."""
        import av

        try:
            container = self._opened(hw=self.is_pipe)  # a header needs no decoder; a pipe's is decoded after
            if self.is_pipe:  # what FFmpeg read of its header is gone from the pipe: keep it
                self._held = container
            with contextlib.nullcontext(container) if self.is_pipe else container:  # a pipe's is kept
                if not container.streams.video:
                    raise SourceError(f"{str(self.path)!r} has no video stream")
                stream = container.streams.video[0]
                self.frames_hint, exact = _frame_count(container, stream)
                width, height = size or (stream.width, stream.height)
                if fps is not None:
                    every = self._stride_for(fps, stream.average_rate or stream.guessed_rate)
        except av.error.FFmpegError as exc:
            why = f"{exc}{self._invalid_hint(exc)}"
            raise SourceError(f"{str(self.path)!r} cannot be decoded as video{self._hint()}: {why}") from exc
        return width, height, every, exact

    #: a frame's index says which stride made the rows (and an earlier run's may have had
    #: another): a resumed run reads the frame before its first and checks it, at the cost
    #: of one seek (NOTE [ seeking a video ])
    positional_meta = False

    def _stride_for(self, fps: float, rate: Any) -> int:
        """``fps`` frames a second as a stride of this video's frames: its frame rate over
        ``fps``, rounded, at least 1 (an average where the rate varies)."""
        if not rate:
            raise SourceError(
                f"{str(self.path)!r} states no frame rate to take {fps:g} frames a second from: use every"
            )
        return max(1, round(float(rate) / fps))

    def __len__(self) -> int:
        return -(-max(0, self.frames_hint - self.skip) // self.every)  # the frames taken: a stride's first each

    def counted_len(self) -> int:
        """``len()`` exact where it is an estimate: the frames counted from the packets
        (read, not decoded) once, and kept by this source and the windows made of it."""
        if not self.length_estimated:
            return len(self)
        if self._packets is None:
            with self._opened(hw=False) as container:
                self._packets = _packets_counted(container)
        return -(-max(0, self._packets - self.skip) // self.every)

    def _open(self) -> Any:
        """The video opened with PyAV for an iteration; a pipe's container, the one
        its header was read from, once (NOTE [ video streams ])."""
        if not self.is_pipe:
            return self._opened()
        container, self._held = self._held, None
        if container is None:
            raise SourceError(
                f"{str(self.path)!r} is a pipe: what was read from it is gone, so it is read once, by one "
                "iteration (write the video to a file to read it again)"
            )
        return container

    def opened_on(self, device: Any) -> Any:
        """NOTE [ NV12 on the device ]: the video opened as for an iteration, its frames left
        where ``device``'s decoder leaves them (NVDEC's in GPU memory; on the host device's
        model, the CPU decoder's)."""
        from .device_frames import device_opening

        return self._opened(hw=False, settings=device_opening(device, self.hwaccel or "cuda"))

    def _opened(self, hw: bool = True, settings: Mapping[str, Any] | None = None) -> Any:
        """The video newly opened as ``format`` and ``options`` say, to be decoded on
        ``hwaccel``'s device where one is named (and ``hw``: not for reading packets or a
        header), or as ``settings`` say; a stream with FFmpeg's timeouts, a pipe read by a
        :class:`PipeReader` (NOTE [ video streams ])."""
        import av

        opening: dict[str, Any] = {"format": self.format, "options": self.options or None, **(settings or {})}
        if self.hwaccel is not None and hw:
            opening["hwaccel"] = hw_decoding(self.hwaccel)
        try:
            if self.is_pipe:
                return av.open(self._pipe_reader(), **opening)
            if self.stored is not None:
                return _stored_container(self.stored, opening)
            timeout = (self.timeout_s, self.timeout_s) if self.is_stream else None
            return av.open(str(self.path), timeout=timeout, **opening)
        except RuntimeError as exc:  # PyAV: not one stream can be decoded on the device
            raise self._no_hw_decoder(str(exc)) from exc

    def _pipe_reader(self) -> PipeReader:
        """A reader of this pipe: ``pipe:N``'s descriptor as it is; a named pipe's opened for it
        (which waits for a writer, as cat's open does) and closed with it."""
        if is_pipe(self.path):
            return PipeReader(pipe_descriptor(str(self.path)), self._stop_reading)
        return PipeReader(os.open(self.path, os.O_RDONLY), self._stop_reading, owned=True)

    def stop_reading(self) -> None:
        """End a pipe as if its writer had closed it: an iteration blocked on it gives the
        frames decoded before and ends (a job's first Ctrl-C or SIGTERM calls this).  A
        file or URL needs no such thing: their reads end, or time out, by themselves."""
        self._stop_reading.set()

    def interrupt(self) -> None:
        """The pipeline takes no more batches (NOTE [ interrupted feed ]): stop reading, as
        :meth:`stop_reading` does, so that a close does not wait on a quiet pipe."""
        self.stop_reading()

    def _piped_hint(self, decoded: int) -> str:
        """Why a pipe may give no frame at all: a container that needs to seek."""
        if decoded or not self.is_pipe:
            return ""
        return (
            " (a pipe cannot be seeked: an MP4 whose index comes last cannot be read from one; write NUT, "
            "MPEG-TS or Matroska into it, or an MP4 with -movflags frag_keyframe+empty_moov)"
        )

    def _no_hw_decoder(self, codec: str) -> SourceError:
        return SourceError(
            f"{str(self.path)!r} cannot be decoded on {self.hwaccel}: FFmpeg has no hardware decoder there for its "
            f"codec ({codec}); leave hwaccel out to decode it on the CPU"
        )

    def _invalid_hint(self, error: Exception) -> str:
        """What FFmpeg's "Invalid data found" usually means for a file: one cut short."""
        import av

        if not isinstance(error, av.error.InvalidDataError) or self.is_pipe or self.is_stream:
            return ""
        if Path(self.path).suffix.lower() in (".mp4", ".mov", ".m4v"):
            return (
                " (an MP4 or MOV file cut short - a copy or a recording that did not finish - has lost its index, "
                "the 'moov' atom FFmpeg needs to open it: copy the whole file again; a recording that may be cut "
                "short is best written as MPEG-TS or Matroska, or as a fragmented MP4: -movflags frag_keyframe)"
            )
        return " (the file may be cut short, or not be a video: is it whole, and does ffprobe read it?)"

    def _hint(self) -> str:
        """What raw frames need, where they were asked for without it."""
        if self.format == "rawvideo" and not {"video_size", "pixel_format"} <= self.options.keys():
            return " (raw frames need the options video_size=WxH and pixel_format, e.g. rgb24)"
        return ""

    def after(self, rows: int) -> VideoSource:
        """This video without its first ``rows`` frames, each later one keeping its index
        and time.  Decoding starts at the key frame before the first one kept, found
        from the packets (NOTE [ seeking a video ]), or where a file's packets cannot
        be trusted to say which frame is which, at the first frame; the frames
        before the first kept are decoded, never resized nor converted.  A stream
        (a URL: NOTE [ video streams ]) is read from its first frame only."""
        if rows and self.is_stream:
            raise SourceError(
                f"{str(self.path)!r} is a stream: it is read from its first frame on, with no frame "
                f"{self.skip + rows * self.every} "
                "to start at (a live one has none to go back to), so it cannot be resumed, windowed or sharded; "
                "--limit takes its first frames"
            )
        later = copy.copy(self)
        later.skip = self.skip + rows * self.every
        self._held = None  # a pipe's container goes with its one reader (NOTE [ video streams ])
        return later

    def between(self, start: int, stop: int | None) -> VideoSource:
        """Frames ``start`` to ``stop - 1`` of those taken, by the places the header counts
        (``jobs.window``: ``--rows``, ``--shard``; NOTE [ frame positions ]): a window
        that lies past the end of a video cut short gives no rows, as a folder's does,
        and the video is listed in ``cut_short`` (:meth:`after`, a resumed run's, refuses)."""
        later = self.after(start)
        later._window = True
        limits = ([] if stop is None else [stop - start]) + ([] if self._limit is None else [self._limit - start])
        later._limit = max(0, min(limits)) if limits else None
        return later

    def device_fill(self, device: Any) -> Any:
        """NOTE [ NV12 on the device ]: ``sources.device_fill_of`` this video on ``device``."""
        from .device_video import device_fill_of

        return device_fill_of(self, device)

    @property
    def windowed(self) -> bool:
        """Whether it gives some of its frames only: resumed after a row, or a window (:meth:`between`)."""
        return bool(self.skip) or self._window or self._limit is not None

    def chunks(self) -> Iterator[Chunk]:
        chunks = self._counted(self._chunks())
        return chunks if self._limit is None else take_first(chunks, self._limit, chunk_rows, sliced_chunk)

    def _counted(self, chunks: Iterator[Chunk]) -> Iterator[Chunk]:
        """``chunks``, and this video in ``cut_short`` where they end (or fail) before the
        rows its header counts; a window's end before its first frame gives none."""
        given = 0
        try:
            for chunk in chunks:
                given += len(chunk[0])
                yield chunk
        except VideoEndedEarly:
            if not self._window:
                raise
        except VideoDecodingFailed:
            self._note_short(given)
            raise
        self._note_short(given)

    def _note_short(self, given: int) -> None:
        counted = len(self) if self._limit is None else min(len(self), self._limit)
        if not self.length_estimated and given < counted:
            self.cut_short.append((str(self.path), given, counted))

    def _chunks(self) -> Iterator[Chunk]:
        target = self._seek_target()
        if target is not None:
            try:
                yield from self._decoded_chunks(target)
                return
            except _MissedSeek:  # raised before any frame was delivered: start over from the first
                pass
        yield from self._decoded_chunks(None)

    def _seek_target(self) -> int | None:
        """The pts of the first frame to deliver, where seeking to it can be trusted."""
        import av

        if not self.skip:
            return None
        try:
            with self._opened(hw=False) as container:  # packets only: read, not decoded
                return frame_pts(container, container.streams.video[0], self.skip)
        except av.error.FFmpegError:
            return None  # decoding from the start says what is wrong

    def _decoded_chunks(self, target: int | None) -> Iterator[Chunk]:
        threads = auto_convert_threads() if self.convert_threads is None else self.convert_threads
        # a frame a chunk (a live stream's) is taken as soon as it is converted: nothing to overlap
        converter = _Converter(self._converted, threads if self.batch_size > 1 else 0)
        try:
            yield from self._converted_chunks(target, converter)
        finally:
            converter.close()

    def _converted_chunks(self, target: int | None, converter: _Converter) -> Iterator[Chunk]:
        import av

        frames: list[Any] = []  # each frame's conversion, under way
        indices: list[int] = []
        times: list[float] = []
        decoded = 0
        try:
            for index, frame in self._decoded_frames(target):
                decoded = index + 1
                if index < self.skip or index % self.every:
                    continue
                frames.append(converter.convert(frame))
                indices.append(index)
                times.append(float(frame.time) if frame.time is not None else float("nan"))
                if len(frames) == self.batch_size:
                    yield self._chunk(*converter.results(frames), indices, times)
                    frames, indices, times = [], [], []
        except av.error.FFmpegError as exc:
            when = f"after {decoded} frames" if decoded or target is None else f"before frame {self.skip}"  # seeked
            why = f"{exc}{self._piped_hint(decoded)}"
            failure = VideoDecodingFailed(f"{str(self.path)!r}: decoding failed {when}: {why}")
            if frames:  # the frames decoded before it are delivered first: a stream cut off loses none
                yield self._chunk(*converter.results(frames), indices, times)
            raise failure from exc
        if decoded < self.skip:  # counted in rows: the frames a stride takes
            error = str(fewer_rows(self.path, self.skip // self.every)(-(-decoded // self.every)))
            if self.frames_hint > decoded:
                error += f" (it gave {decoded} frames where its header counts {self.frames_hint}: is it cut short?)"
            raise VideoEndedEarly(error)
        if frames:
            yield self._chunk(*converter.results(frames), indices, times)

    def _decoded_frames(self, target: int | None) -> Iterator[tuple[int, Any]]:
        """``(index, frame)`` of the frames decoded (:meth:`_numbered`); a stream's across
        its connections where it is to reconnect (NOTE [ reconnecting ])."""
        if self.reconnect:
            yield from self._reconnected_frames()
            return
        with self._open() as container:
            yield from self._numbered(container, self._decoding(container), target)

    def _decoding(self, container: Any) -> Any:
        """The video stream of ``container``, set to decode with FFmpeg's threads."""
        stream = container.streams.video[0]
        if self.hwaccel is not None and not stream.codec_context.is_hwaccel:
            raise self._no_hw_decoder(stream.codec_context.name)
        stream.thread_type = "AUTO"  # FFmpeg's own decode threads
        if self.decode_threads is not None:
            stream.codec_context.thread_count = self.decode_threads
        return stream

    def _reconnected_frames(self) -> Iterator[tuple[int, Any]]:
        """A stream's frames, numbered on across its connections: opened again when it
        ends or fails, until ``reconnect`` tries in a row give no frame, or
        :meth:`stop_reading`; the last failure is raised then (NOTE [ reconnecting ]).
        A connection is listed in ``reconnections`` once it gives a frame."""
        import av

        index, misses = 0, 0
        ended: str | None = None  # why the last connection that gave frames ended
        while True:
            failure: av.error.FFmpegError | None = None
            try:
                with self._open() as container:
                    for frame in container.decode(self._decoding(container)):
                        if ended is not None:
                            self.reconnections.append((index, ended))
                            ended = None
                        misses = 0
                        yield index, frame
                        index += 1
            except av.error.FFmpegError as exc:
                failure = exc
            if ended is None:
                ended = "the stream ended" if failure is None else str(failure)
            misses += 1
            if self._stop_reading.is_set():
                return  # told to stop: whatever ended the connection is not the job's failure
            if misses > self.reconnect:
                if failure is not None:
                    raise failure
                return
            if self._stop_reading.wait(min(_RECONNECT_MAX_WAIT_S, _RECONNECT_FIRST_WAIT_S * 2 ** (misses - 1))):
                return

    def _converted(self, reformatter: Any, frame: Any) -> tuple[np.ndarray, Placement | None]:
        """``frame`` as the model's picture (``pix_fmt``, ``size`` as ``fit`` says), and its
        placement where it is cropped or padded."""
        width, height = self.size or (frame.width, frame.height)
        placement = self._placement(frame.width, frame.height) if self.fit.moves else None
        if placement is not None:
            width, height = placement.resized
        image: np.ndarray = reformatter.reformat(frame, width=width, height=height, format=self.pix_fmt).to_ndarray()
        return (image, None) if placement is None else (placement.place(image), placement)

    def _placement(self, width: int, height: int) -> Placement:
        """Where a ``width`` x ``height`` frame goes (NOTE [ fitting ]); worked out once a frame size."""
        found = self._placements.get((width, height))
        if found is None:  # a frame size seen first (a stream may change it)
            assert self.size is not None  # fit needs a size (check_fit)
            found = self._placements[(width, height)] = self.fit.placement(width, height, self.size)
        return found

    def _numbered(self, container: Any, stream: Any, target: int | None) -> Iterator[tuple[int, Any]]:
        """``(index, frame)`` of the frames decoded: every one from the first, or,
        seeked to the key frame before the one whose pts is ``target``, that one
        (frame ``self.skip``) and every one after it."""
        self.decoded_from = 0
        if target is None:
            yield from enumerate(container.decode(stream))
            return
        container.seek(target, stream=stream, backward=True, any_frame=False)
        dropped = 0
        frames = container.decode(stream)
        for frame in frames:
            if frame.pts is not None and frame.pts < target:
                dropped += 1
                continue
            if frame.pts != target:  # the packets said otherwise (NOTE [ seeking a video ])
                raise _MissedSeek(f"frame {self.skip} was to have pts {target}, the decoder gave {frame.pts}")
            self.decoded_from = self.skip - dropped
            yield self.skip, frame
            break
        else:  # the stream ended before any frame carried it
            raise _MissedSeek(f"no frame after the seek has pts {target} or later (frame {self.skip})")
        for index, frame in enumerate(frames, self.skip + 1):
            yield index, frame

    def _chunk(
        self, frames: list[np.ndarray], placed: list[Placement], indices: list[int], times: list[float]
    ) -> Chunk:
        meta = {"frame_index": np.asarray(indices, np.int64), "timestamp": np.asarray(times, np.float64)}
        if self.fit.moves:
            meta.update(fit_columns(placed))
        if self.reconnect:  # each frame's connection: how many began at or before it
            starts = np.asarray([start for start, _ in self.reconnections], np.int64)
            meta["connection"] = np.searchsorted(starts, meta["frame_index"], side="right").astype(np.int64)
        return frames, meta


def auto_convert_threads(cpus: int | None = None) -> int:
    """Threads converting a video's frames beside its decoder
    (NOTE [ converting beside the decoder ]) on a machine with ``cpus`` usable
    CPUs (default: this process's): none on one CPU, else one per four CPUs, 1 to 4."""
    cpus = usable_cpus() if cpus is None else cpus
    return 0 if cpus < 2 else max(1, min(4, cpus // 4))


class _Converter:
    """Decoded frames converted to RGB beside the decoder, in order.

    NOTE [ converting beside the decoder ]: each frame decoded is converted to the
    model's picture - swscale's colour conversion and resize, as long as FFmpeg's
    decoding of the frame (docs/results.md) - and the decoding thread did both in
    turn.  With ``threads`` > 0, each frame is handed to a pool of that many threads
    (PyAV releases the GIL in swscale; each thread keeps a swscale context of its
    own) as it is decoded, while the decoder goes on; a chunk takes its frames' pictures in order.  With 0, the caller's
    thread converts each frame as it comes, one swscale context for the iteration.
    One conversion thread beside the decoder reads a video faster than none, and a
    job through a model too (``benchmarks/test_video.py``; docs/results.md).  A folder
    decoding several videos at once has its parallelism already (a thread each
    made it slower there), so its videos convert in their own thread, as does a
    chunk of one frame (a live stream's: nothing to overlap)."""

    def __init__(self, convert: Callable[[Any, Any], tuple[np.ndarray, Placement | None]], threads: int) -> None:
        from av.video.reformatter import VideoReformatter

        self._convert, self._new_reformatter = convert, VideoReformatter
        self._reformatter = VideoReformatter()  # its swscale context is kept from frame to frame
        self._local = threading.local()
        self._pool = (
            concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="ortpipe-convert") if threads else None
        )

    def convert(self, frame: Any) -> Any:
        """The frame's conversion: its result, or (threads) its future."""
        if self._pool is None:
            return self._convert(self._reformatter, frame)
        return self._pool.submit(self._on_a_thread, frame)

    def _on_a_thread(self, frame: Any) -> tuple[np.ndarray, Placement | None]:
        reformatter = getattr(self._local, "reformatter", None)
        if reformatter is None:
            reformatter = self._local.reformatter = self._new_reformatter()
        return self._convert(reformatter, frame)

    def results(self, converting: list[Any]) -> tuple[list[np.ndarray], list[Placement]]:
        """The pictures of ``converting``'s frames, in order, and their placements."""
        done = [item.result() if self._pool is not None else item for item in converting]
        return [image for image, _ in done], [placement for _, placement in done if placement is not None]

    def close(self) -> None:
        """No thread left: those converting frames no chunk will take are cancelled or waited for."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


def _frame_count(container: Any, stream: Any) -> tuple[int, bool]:
    """A video stream's frames as its header counts them, and True; else its duration
    times its frame rate, and False (0 where neither is known)."""
    if stream.frames:
        return int(stream.frames), True
    rate = stream.average_rate or stream.guessed_rate
    if stream.duration is not None and stream.time_base is not None:
        seconds = float(stream.duration * stream.time_base)
    else:
        seconds = container.duration / 1e6 if container.duration else 0.0  # av.time_base: microseconds
    return (round(seconds * float(rate)) if rate and seconds > 0 else 0), False


def _packets_counted(container: Any) -> int:
    """The frames of an opened video's first video stream, counted from its packets (read,
    not decoded): one frame a packet that holds data and is not to be discarded."""
    stream = container.streams.video[0]
    return sum(1 for packet in container.demux(stream) if packet.size and not packet.is_discard)


class _MissedSeek(Exception):
    """Seeking did not land where the packets said: decode from the first frame."""


class VideoEndedEarly(SourceError):
    """A video ended before the frame it was to start at: it holds fewer frames than
    its header counts (cut short, or an edit list's).  In a folder it gives none
    (NOTE [ frame positions ])."""


class VideoDecodingFailed(SourceError):
    """A video's decoding failed partway, after its frames before were delivered."""


def _stored_container(stored: StoredPath, opening: dict[str, Any]) -> Any:
    """A video object opened with PyAV from pyarrow's seekable file of it (an input file holds
    no resource beyond its memory: it goes with the container that holds it)."""
    import av

    try:
        file = stored.fs.open_input_file(stored.path)
    except Exception as exc:
        raise SourceError(said(stored.url, exc)) from exc
    try:
        return av.open(file, **opening)
    except BaseException:
        file.close()
        raise
