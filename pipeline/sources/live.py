"""Several live streams read at once, their frames batched as they come.

NOTE [ several streams ]: a GPU's batch of frames from one camera at 30
frame/s waits a second for 30 frames, and the GPU idles between batches;
sixteen cameras fill it sixteen times as fast.  :class:`LiveStreamsSource`
reads N streams (URLs, pipes: NOTE [ video streams ]) at once, a thread
each, and batches their frames in the order they arrive: a batch is handed
on when it is full, or ``batch_wait_s`` after its first frame came, which
bounds the latency a quiet moment of the cameras adds.  Each row says which
stream it is from (``path``, as a folder's rows do) with that stream's own
``frame_index`` and ``timestamp`` (and ``connection`` where reconnecting,
NOTE [ reconnecting ]), and when its frame was decoded, ``received`` (UNIX
seconds): the streams' own timestamps each start where their stream does,
so frames of several cameras are lined up by it.  One stream's frames keep
their order.  A stream that
ends leaves the others running; one that cannot be opened ends the source
before any frame, and one that fails ends it with its error after the
frames that came before it - or, with ``skip_unreadable``, either is listed
in ``skipped`` while the others go on.  :meth:`stop_reading` stops
every stream (a job's Ctrl-C); ending the iteration early (``--limit``) stops
the readers and joins their threads.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..session import TensorSpec
from ..util.rows import close_iteration
from ._base import Chunk, RowSource, SourceError
from ._opening import is_live
from ._prefetch import put_until_stopped
from .decoding import STREAMS_CHOICES, VideoDecoding, chosen, from_keywords
from .fitting import Fit
from .videos import STREAM_TIMEOUT_S, VideoSource

#: how long a batch waits for more frames after its first by default (NOTE [ several streams ])
BATCH_WAIT_S = 0.1
#: how often a blocked reader or the batcher looks whether it is to stop
_POLL_S = 0.1
#: what a stream's reader puts last: it ended (its error, or None)
_ENDED = object()


class LiveStreamsSource(RowSource):
    """Frames of several live streams at once, batched as they arrive
    (NOTE [ several streams ]): uint8 ``[N, H, W, 3]`` rows, each with its stream's ``path``,
    ``frame_index`` and ``timestamp``, and ``received``, when it was decoded.  Every stream is opened here (its header
    read), with the options :class:`VideoSource` takes; their frames must come
    out one size (give ``size``, or a model with fixed H and W)."""

    #: a stream is read from its first frame on, as it comes (NOTE [ video streams ])
    is_stream = True

    def __init__(
        self,
        paths: Sequence[str | Path],
        batch_size: int,
        inputs: Sequence[TensorSpec],
        input_name: str | None = None,
        size: tuple[int, int] | None = None,
        pix_fmt: str = "rgb24",
        decode_threads: int | None = None,
        every: int = 1,
        fps: float | None = None,
        fit: str | Fit | None = None,
        format: str | None = None,
        options: Mapping[str, object] | None = None,
        reconnect: int = 0,
        timeout_s: float = STREAM_TIMEOUT_S,
        hwaccel: str | None = None,
        skip_unreadable: bool = False,
        batch_wait_s: float = BATCH_WAIT_S,
        *,
        decoding: VideoDecoding | None = None,
    ):
        given = (size, pix_fmt, decode_threads, every, fps, fit, format, options or {}, reconnect, timeout_s)
        keywords = dict(zip(STREAMS_CHOICES, (*given, hwaccel, skip_unreadable), strict=True))
        decoding = from_keywords("LiveStreamsSource", decoding, keywords)
        (
            size,
            pix_fmt,
            decode_threads,
            every,
            fps,
            fit,
            format,
            options,
            reconnect,
            timeout_s,
            hwaccel,
            skip_unreadable,
        ) = chosen(decoding, STREAMS_CHOICES, "LiveStreamsSource")
        if len(paths) < 2:
            raise SourceError(f"several streams are two or more (one is a VideoSource), got {list(paths)}")
        named = [str(path) for path in paths]
        if len(set(named)) < len(named):
            twice = next(path for path in named if named.count(path) > 1)
            raise SourceError(f"streams read at once are each read once: {twice!r} is named twice")
        files = [str(path) for path in paths if not is_live(path)]
        if files:
            raise SourceError(
                f"streams read at once are live ones (URLs, pipes); {files[0]!r} is a file: read files one after "
                "another, as a folder or a table of videos"
            )
        if not batch_wait_s >= 0:
            raise SourceError(f"batch_wait_s is a wait in seconds >= 0, got {batch_wait_s!r}")
        each = VideoDecoding(  # one value, by name: no order of parameters to keep in step
            size=size,
            pix_fmt=pix_fmt,
            decode_threads=decode_threads,
            every=every,
            fps=fps,
            fit=fit,
            format=format,
            options=options or {},
            reconnect=reconnect,
            timeout_s=timeout_s,
            hwaccel=hwaccel,
        )
        self.skip_unreadable = skip_unreadable
        #: (stream, why) of each stream that could not be opened, or failed, left out by ``skip_unreadable``
        self.skipped: list[tuple[str, str]] = []
        #: the streams read, in the order given (those opened, with ``skip_unreadable``)
        self.streams: list[VideoSource] = []
        for path in paths:
            try:
                self.streams.append(VideoSource(path, 1, inputs, input_name, decoding=each))
            except SourceError as exc:
                if not skip_unreadable:
                    raise
                self.skipped.append((str(path), str(exc)))
        if not self.streams:
            raise SourceError(f"none of the {len(paths)} streams can be read: {[why for _, why in self.skipped]}")
        self.spec, self.batch_size, self.batch_wait_s = self.streams[0].spec, batch_size, batch_wait_s
        self.row_shape = self._one_frame_size()
        #: how many frames each stream gave the latest iteration, in the order of ``streams``
        self.frames_given = [0] * len(self.streams)

    @property
    def paths(self) -> list[str]:
        """The streams, in the order given."""
        return [str(stream.path) for stream in self.streams]

    @property
    def reconnections(self) -> list[tuple[int, str]]:
        """Each stream's reconnections (NOTE [ reconnecting ]): (its first frame, which stream and why)."""
        return [(first, f"{s.path}: {why}") for s in self.streams for first, why in s.reconnections]

    def _one_frame_size(self) -> tuple[int, ...] | None:
        shapes = {str(stream.path): stream.row_shape for stream in self.streams}
        if len(set(shapes.values())) > 1:
            (first, one), (second, other) = _two_that_differ(shapes)
            raise SourceError(
                f"streams read at once make one batch, so their frames must be one size: {str(first)!r} is "
                f"{one}, {str(second)!r} {other}; give a size (--size WxH) to resize them to"
            )
        return next(iter(shapes.values()))

    def after(self, rows: int) -> LiveStreamsSource:
        """This source, where ``rows`` is 0: streams are read from their first frame on
        (NOTE [ video streams ]), so a window or a resumed run is refused."""
        if rows:
            raise SourceError(
                f"streams {self.paths} are read from their first frames on, as they come: they cannot be "
                "resumed, windowed or sharded; --limit takes the first frames"
            )
        return self

    def stop_reading(self) -> None:
        """Stop every stream, each as :meth:`VideoSource.stop_reading` does."""
        for stream in self.streams:
            stream.stop_reading()

    def interrupt(self) -> None:
        """The pipeline takes no more batches (NOTE [ interrupted feed ]): stop every stream."""
        self.stop_reading()

    def describe(self) -> str:
        """What a run says it reads: frames, of several streams at once (NOTE [ several streams ])."""
        return "frames of"

    @property
    def hwaccel(self) -> str | None:
        """The device FFmpeg decodes the streams on, None: the CPU (NOTE [ decoding on the GPU ])."""
        return self.streams[0].hwaccel

    def device_fill(self, device: Any) -> Any:
        """NOTE [ NV12 on the device ]: ``sources.device_streams.streams_device_fill_of`` these streams."""
        from .device_streams import streams_device_fill_of

        return streams_device_fill_of(self, device)

    def chunks(self) -> Iterator[Chunk]:
        return self.arrivals(self._rows_of)

    def arrivals(
        self, frames_of: Callable[[int], Iterator[tuple[Any, dict[str, Any]]]]
    ) -> Iterator[tuple[list[Any], dict[str, np.ndarray]]]:
        """Batches of what ``frames_of(k)`` makes of stream ``k`` - (a frame, its row's metadata)
        each - as they arrive, a thread a stream (NOTE [ several streams ]): the decoded frames
        (:meth:`chunks`), or frames left in a device's memory (``device_streams``)."""
        self.frames_given = [0] * len(self.streams)
        arrivals: queue.Queue[tuple[int, Any, Any]] = queue.Queue(maxsize=4 * self.batch_size)
        done = threading.Event()  # the batches are no longer wanted: the readers stop
        readers = [
            threading.Thread(
                target=self._read, args=(k, arrivals, done, frames_of), name=f"ortpipe-stream-{k}", daemon=True
            )
            for k in range(len(self.streams))
        ]
        for reader in readers:
            reader.start()
        try:
            yield from self._batched(arrivals, len(readers))
        finally:
            done.set()
            self.stop_reading()
            for reader in readers:
                while reader.is_alive():  # a reader waiting to put is let go; one in a read ends with it
                    _drain(arrivals)
                    reader.join(_POLL_S)

    def _rows_of(self, k: int) -> Iterator[tuple[np.ndarray, dict[str, Any]]]:
        """Stream ``k``'s decoded frames, a row and its metadata at a time."""
        chunks = self.streams[k].chunks()
        try:
            for rows, meta in chunks:
                for row in range(len(rows)):
                    yield rows[row], {name: values[row] for name, values in meta.items()}
        finally:
            close_iteration(chunks)

    def _read(
        self,
        k: int,
        arrivals: queue.Queue[tuple[int, Any, Any]],
        done: threading.Event,
        frames_of: Callable[[int], Iterator[tuple[Any, dict[str, Any]]]],
    ) -> None:
        """Stream ``k``'s frames into ``arrivals``, one at a time, then :data:`_ENDED` and its error or None."""
        outcome: BaseException | None = None
        frames = frames_of(k)
        try:
            for frame, row_meta in frames:
                row_meta["received"] = time.time()  # one clock for every stream: their own timestamps are not
                if not put_until_stopped(arrivals, (k, frame, row_meta), done, _POLL_S):
                    return
        except Exception as exc:  # noqa: BLE001 - handed to the batcher, which raises or skips it
            outcome = exc
        finally:
            close_iteration(frames)
        put_until_stopped(arrivals, (k, _ENDED, outcome), done, _POLL_S)

    def _batched(self, arrivals: queue.Queue[tuple[int, Any, Any]], running: int) -> Iterator[Chunk]:
        """Batches of the frames as they arrive, each handed on when full or ``batch_wait_s``
        after its first frame; until every stream has ended."""
        frames: list[Any] = []
        metas: list[tuple[int, dict[str, Any]]] = []
        deadline: float | None = None
        while running:
            wait = _POLL_S if deadline is None else max(0.0, min(_POLL_S, deadline - time.monotonic()))
            try:
                k, frame, meta = arrivals.get(timeout=wait)
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    yield self._chunk(frames, metas)
                    frames, metas, deadline = [], [], None
                continue
            if frame is _ENDED:
                running -= 1
                if meta is not None:
                    if not self.skip_unreadable:
                        if frames:
                            yield self._chunk(frames, metas)
                        raise meta
                    self.skipped.append((self.paths[k], str(meta)))
                continue
            frames.append(frame)
            metas.append((k, meta))
            self.frames_given[k] += 1
            if deadline is None:
                deadline = time.monotonic() + self.batch_wait_s
            if len(frames) == self.batch_size:
                yield self._chunk(frames, metas)
                frames, metas, deadline = [], [], None
        if frames:
            yield self._chunk(frames, metas)

    def _chunk(self, frames: list[Any], metas: list[tuple[int, dict[str, Any]]]) -> Chunk:
        paths = self.paths
        meta = {"path": np.asarray([paths[k] for k, _ in metas])}
        for name in metas[0][1]:
            meta[name] = np.asarray([row[name] for _, row in metas])
        return frames, meta


def _two_that_differ(shapes: dict[str, Any]) -> tuple[tuple[str, Any], tuple[str, Any]]:
    """The first stream and the first whose frames are of another size."""
    first, *others = shapes.items()
    return first, next(item for item in others if item[1] != first[1])


def _drain(arrivals: queue.Queue[tuple[int, Any, Any]]) -> None:
    while True:
        try:
            arrivals.get_nowait()
        except queue.Empty:
            return
