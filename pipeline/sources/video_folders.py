"""The videos below a folder, or those a table lists, as one source: each
decoded by a :class:`~.videos.VideoSource`, several at once, their frames in
order (:class:`VideoFolderSource`, :class:`VideoTableSource`)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..session import TensorSpec
from ..util.arrow import concatenated
from ..util.capabilities import KeepsColumns, last_kept_row
from ..util.cpus import usable_cpus
from ..util.rows import close_iteration, recut, take_first
from ..util.storage import StoredPath, is_storage_url
from ._base import Chunk, RowSource, SourceError, chunk_rows, existing_path, fewer_rows, sliced_chunk
from ._frame_positions import FolderVideo, FramePositions
from ._opening import checked_hwaccel
from ._prefetch import in_order
from .decoding import VIDEOS_CHOICES, VideoDecoding, chosen, from_keywords
from .files import VIDEO_SUFFIXES, stored_files_below, video_files
from .fitting import Fit
from .tables import PathTable
from .videos import VideoDecodingFailed, VideoSource


def _videos_decoding(decoding: VideoDecoding | None, source: str, given: tuple[Any, ...]) -> VideoDecoding:
    """What a folder's or a table's videos are decoded with: ``decoding`` where given (one
    value for every choice: it counts; a choice they have no use for is refused), else the
    deprecated keywords ``given``, in :data:`VIDEOS_CHOICES`' order (:func:`from_keywords`)."""
    decoding = from_keywords(source, decoding, dict(zip(VIDEOS_CHOICES, given, strict=True)))
    chosen(decoding, VIDEOS_CHOICES, source)
    return decoding


class VideoFolderSource(RowSource):
    """The videos below a folder, at any depth (:func:`video_files`, in order of their
    paths), as one source, frame after frame: uint8 ``[N, H, W, 3]``, each row
    with its ``path`` (the video's), its
    ``frame_index`` in that video and its ``timestamp``.  Batches run across
    the videos' ends, so a folder of short clips costs no short batches.

    Every video gives frames of one size: ``size=(width, height)`` resizes
    them, and without it videos of different sizes are refused at once, naming
    two.  Windows and resumed runs place frames by the videos' headers (NOTE
    [ frame positions ]): a window (:meth:`between`, :meth:`after`) skips
    whole videos unopened, their frames counted from their headers (or, where
    a header counts none, as Matroska's, from their packets, read but not
    decoded), and seeks into the video it starts in
    (NOTE [ seeking a video ]); a video that gives fewer frames than its header counts leaves places
    no row has (``cut_short`` lists it), and a resumed run goes on after its
    output's last row (:meth:`position_after`), so a folder that changed is
    refused, not misread.

    ``every=N`` takes each video's frames 0, N, 2N, ... (:class:`VideoSource`);
    ``fps=F`` each video's stride from its own frame rate.

    A video that cannot be opened ends it with a :class:`SourceError` naming
    it, before any frame, and one whose decoding fails partway ends it there,
    after its frames before, unless ``skip_unreadable``: then the video, or
    its rest, is left out, and ``skipped`` lists ``(path, why)`` of each (a
    truncated download, a file that is not a video, a corrupt packet).  Which
    cannot be opened is settled before the first frame, and a video's frames
    keep their places whatever is left out, so every run over the same folder
    counts frames alike.

    ``videos_at_once`` videos are decoded at once, each by a thread of its own,
    and their frames given in order as one at a time gives them
    (NOTE [ videos decoded at once ]; None: one more than the CPUs, at most 4; 1: no thread).
    """

    #: a row's path and frame index say which frame it is: a resumed run checks them
    positional_meta = False

    def __init__(
        self,
        path: str | Path,
        batch_size: int,
        inputs: Sequence[TensorSpec],
        input_name: str | None = None,
        size: tuple[int, int] | None = None,
        pix_fmt: str = "rgb24",
        decode_threads: int | None = None,
        skip_unreadable: bool = False,
        every: int = 1,
        fps: float | None = None,
        fit: str | Fit | None = None,
        videos_at_once: int | None = None,
        hwaccel: str | None = None,
        *,
        decoding: VideoDecoding | None = None,
    ):
        given = (size, pix_fmt, decode_threads, skip_unreadable, every, fps, fit, videos_at_once, hwaccel)
        video = _videos_decoding(decoding, "VideoFolderSource", given)
        if is_storage_url(path):  # a prefix of video objects: each read as VideoSource reads one
            self.path: str | Path = str(path)
            files: Sequence[str | Path] = stored_files_below(StoredPath.of(str(path)), VIDEO_SUFFIXES)
        else:
            self.path = existing_path(path, "video folder")
            if not self.path.is_dir():
                raise SourceError(f"{str(self.path)!r} is not a folder")
            files = video_files(self.path)
        if not files:
            raise SourceError(f"no videos ({', '.join(VIDEO_SUFFIXES)}) in {str(self.path)!r}, at any depth")
        self._open_videos(files, batch_size, inputs, input_name, video)

    def _open_videos(
        self,
        files: Sequence[str | Path],
        batch_size: int,
        inputs: Sequence[TensorSpec],
        input_name: str | None,
        decoding: VideoDecoding,
    ) -> None:
        """Each of ``files`` opened (its header read), in order; ``opened`` says which."""
        checked_hwaccel(decoding.hwaccel, self.path)  # once, not as a reason to skip every video
        #: videos decoded at once by threads of their own (NOTE [ videos decoded at once ])
        self.videos_at_once = videos_at_once_of(decoding.videos_at_once)
        skip_unreadable = decoding.skip_unreadable
        # each video's own choices: skipping and decoding at once are the folder's
        each = dataclasses.replace(decoding, skip_unreadable=False, videos_at_once=None)
        #: (path, why) of the videos left out by ``skip_unreadable``, in file order: those that
        #: cannot be opened, and those whose decoding failed partway (their later frames)
        self.skipped: list[tuple[str, str]] = []
        self.skip_unreadable = skip_unreadable
        #: (path, rows given, rows its header counts) of each video that ended before the
        #: frames its header counts (a file cut short, a decoding failure that
        #: ``skip_unreadable`` passed over): found as the frames are decoded
        self.cut_short: list[tuple[str, int, int]] = []
        self.videos: list[VideoSource] = []
        #: the index in ``files`` of each video opened
        self.opened: list[int] = []
        for number, file in enumerate(files):
            try:
                video = VideoSource(file, batch_size, inputs, input_name, decoding=each)
                if self.videos_at_once > 1:
                    # videos decoded at once keep the CPUs busy: conversion threads of their own
                    # would crowd them (NOTE [ converting beside the decoder ])
                    video.convert_threads = 0
                self.videos.append(video)
                self.opened.append(number)
            except SourceError as exc:
                if not skip_unreadable:
                    raise
                self.skipped.append((str(file), str(exc)))
        if not self.videos:
            raise SourceError(f"none of the {len(files)} videos in {str(self.path)!r} can be read")
        self.spec, self.batch_size = self.videos[0].spec, batch_size
        self.row_shape = self._one_frame_size(decoding.size)
        #: len() adds up estimates where a video's header counts no frames
        self.length_estimated = any(video.length_estimated for video in self.videos)
        #: the window of the folder's positions (NOTE [ frame positions ]) this source gives:
        #: from ``skip`` (:meth:`after`) to ``end`` (None: to the last video's end; :meth:`between`)
        self.skip: int = 0
        self.end: int | None = None

    #: the column whose value says which video a row is from (``_key``): a resumed run's check
    key_name = "path"

    def _key(self, number: int) -> str:
        """What the output's ``key_name`` column holds for the rows of video ``number``."""
        return str(self.videos[number].path)

    def video_meta(self, number: int, rows: int) -> dict[str, np.ndarray]:
        """The metadata of ``rows`` rows of video ``number`` beside their frame's own."""
        return {"path": np.full(rows, str(self.videos[number].path))}

    def _one_frame_size(self, size: tuple[int, int] | None) -> tuple[int, ...] | None:
        shapes: dict[tuple[int, ...] | None, VideoSource] = {}
        for video in self.videos:
            shapes.setdefault(video.row_shape, video)  # the first video of each size
        if len(shapes) > 1 and size is None:
            (a, first), (b, second) = list(shapes.items())[:2]
            raise SourceError(
                f"the videos of {str(self.path)!r} differ in frame size: {str(first.path)!r} is "
                f"{_frame_size_text(a)}, {str(second.path)!r} {_frame_size_text(b)}; a batch holds frames of one "
                "size: resize them all with size=(W, H) (--size WxH)"
            )
        return next(iter(shapes))

    def __len__(self) -> int:
        total = sum(len(video) for video in self.videos)
        return max(0, (total if self.end is None else min(total, self.end)) - self.skip)

    def after(self, rows: int) -> VideoFolderSource:
        """This folder without its first ``rows`` frames (whole videos before them unopened)."""
        later = copy.copy(self)
        later.skip = self.skip + rows
        return later

    def between(self, start: int, stop: int | None) -> VideoFolderSource:
        """Frames ``start`` to ``stop - 1`` of this folder by their positions
        (NOTE [ frame positions ]), not by the rows given: where a video gives fewer frames than its header
        counts, windows that meet still hold every frame once (``jobs.window``)."""
        later = self.after(start)
        if stop is not None:
            end = self.skip + stop
            later.end = end if self.end is None else min(self.end, end)
        return later

    @property
    def hwaccel(self) -> str | None:
        """The device FFmpeg decodes the videos on, None: the CPU (NOTE [ decoding on the GPU ])."""
        return self.videos[0].hwaccel

    def device_fill(self, device: Any) -> Any:
        """NOTE [ NV12 on the device ]: ``sources.device_video.folder_device_fill_of`` these videos."""
        from .device_video import folder_device_fill_of

        return folder_device_fill_of(self, device)

    def chunks(self) -> Iterator[Chunk]:
        return recut(self._videos_chunks(), self.batch_size, chunk_rows, sliced_chunk, _joined_chunks)

    def _videos_chunks(self) -> Iterator[Chunk]:
        plans = in_order(self._plans(), lambda plan: plan.video.chunks(), self.videos_at_once)
        try:
            for plan, decoded in plans:
                chunks = self._frames_of(plan, decoded)
                if plan.limit is not None:  # the window ends in this video
                    yield from take_first(chunks, plan.limit, chunk_rows, sliced_chunk)
                    return
                yield from chunks
        finally:  # the decoding threads end with the iteration, also when it fails
            close_iteration(plans)

    def _plans(self) -> Iterator[_Plan]:
        """The videos of the window, each as the window takes it: the frames it starts
        at (whole videos before it never opened) and, in the last, where it ends."""
        first = 0  # the position of the next video's first frame, where it is needed
        for number, video in enumerate(self.videos):
            counted = self.skip > first or self.end is not None  # the window's bounds are placed by counts
            taken = video.counted_len() if counted else 0
            if counted and first + taken <= self.skip:
                first += taken  # wholly before the window: never opened
                continue
            if self.end is not None and first >= self.end:
                return
            into = max(0, self.skip - first)
            windowed = video.between(into, None) if into else copy.copy(video)
            windowed.cut_short = []  # this iteration's: joined to the folder's in order (_frames_of)
            if self.end is not None and first + taken > self.end:
                yield _Plan(number, windowed, self.end - first - into)
                return
            yield _Plan(number, windowed, None)
            first += taken
        if self.skip > first:
            raise fewer_rows(self.path, self.skip)(first)

    def _frames_of(self, plan: _Plan, decoded: Iterator[Chunk]) -> Iterator[Chunk]:
        """The chunks of a video, each row with its path.  One that ends before the
        frames its header counts lists itself in ``cut_short`` (its missing frames are
        positions no row has: NOTE [ frame positions ]); one whose decoding fails
        partway, with ``skip_unreadable``, ends there, listed in ``skipped``: both as
        its chunks end here, in the videos' order, however many are decoded at once."""
        where = str(plan.video.path)
        try:
            for rows, meta in decoded:
                yield rows, {**self.video_meta(plan.number, len(rows)), **meta}
        except VideoDecodingFailed as exc:
            self.cut_short.extend(plan.video.cut_short)
            if not self.skip_unreadable:
                raise
            self.skipped.append((where, f"{exc} (its frames before are written, its later ones left out)"))
            return
        self.cut_short.extend(plan.video.cut_short)

    def position_after(self, sink: Any, start: int) -> int | None:
        """Where a resumed run goes on: after the frame the output's last row names
        (NOTE [ frame positions ]).  Where the output's rows are as many as the
        positions before it, the last row alone shows the output fits; where they are
        fewer (a video gave fewer frames than its header counts), every row is held
        against the folder first.  None for an output that keeps no path (a
        ``.npy``): its rows are counted (``jobs.resumed``)."""
        last = last_kept_row(sink)
        if last is None or self.key_name not in last or "frame_index" not in last:
            return None
        videos = [
            FolderVideo(self._key(number), video.every, video.counted_len) for number, video in enumerate(self.videos)
        ]
        positions = FramePositions(videos, str(self.path))
        try:
            position = positions.after({"path": last[self.key_name], "frame_index": last["frame_index"]})
            if position != self.skip + start + sink.kept_rows:
                kept = _kept_frames(sink, str(self.path), self.key_name)
                position = positions.check_rows(*kept, self.skip + start)
        except ValueError as exc:
            raise SourceError(str(exc)) from None
        return position - self.skip


class VideoTableSource(VideoFolderSource):
    """The videos a table lists (a manifest: a ``.parquet`` or ``.csv`` file whose
    ``column`` holds a path a row, relative to the table's folder or absolute;
    :class:`~pipeline.sources.tables.PathTable`), in the table's order, frame
    after frame as a folder's (:class:`VideoFolderSource`: windows, shards and
    resumes by the headers' places): each row with the table's path as written,
    the listing row's id (``id_column``, else ``row_id``) and its frame's
    ``frame_index`` and ``timestamp``.  A video may be listed more than once
    (each listing is run); a resumed run finds the video a row is from by its
    id, so the ids must be unique."""

    def __init__(
        self,
        path: str | Path,
        column: str,
        batch_size: int,
        inputs: Sequence[TensorSpec],
        input_name: str | None = None,
        size: tuple[int, int] | None = None,
        pix_fmt: str = "rgb24",
        decode_threads: int | None = None,
        skip_unreadable: bool = False,
        every: int = 1,
        fps: float | None = None,
        id_column: str | None = None,
        fit: str | Fit | None = None,
        videos_at_once: int | None = None,
        hwaccel: str | None = None,
        *,
        decoding: VideoDecoding | None = None,
    ):
        given = (size, pix_fmt, decode_threads, skip_unreadable, every, fps, fit, videos_at_once, hwaccel)
        video = _videos_decoding(decoding, "VideoTableSource", given)
        self.path = existing_path(path, "input table file")
        self.column = column
        self._table = PathTable(self.path, column, id_column, "video")
        keys = self._table.ids.astype(str)
        if len(set(keys.tolist())) < len(keys):
            repeated = next(str(key) for key in keys if (keys == key).sum() > 1)
            raise SourceError(
                f"{str(self.path)!r}: the id {repeated!r} ({self._table.id_name}) is on more than one row; each video "
                "listed needs an id of its own, to say which one a row of the results is from"
            )
        self.key_name = self._table.id_name
        files = [self._table.file(row) for row in range(len(self._table))]
        self._open_videos(files, batch_size, inputs, input_name, video)

    def _key(self, number: int) -> str:
        return str(self._table.ids[self.opened[number]])

    def video_meta(self, number: int, rows: int) -> dict[str, np.ndarray]:
        row = self.opened[number]
        return {
            self.column: np.full(rows, self._table.names[row].as_py()),
            self.key_name: np.full(rows, self._table.ids[row]),
        }

    def describe(self) -> str:
        """What a run says it reads: the frames of the videos the table lists, and its column."""
        return f"{len(self)} frames of {len(self.videos)} videos listed in column {self.column!r} of"


@dataclass(frozen=True)
class _Plan:
    """A video of a folder's window: its number, the video as the window takes it, and
    the rows it gives where the window ends in it."""

    number: int
    video: VideoSource
    limit: int | None


#: a folder's videos decoded at once with videos_at_once=None: one more than the CPUs, at most
#: this many (on 2 vCPUs three beat two: a clip's decoder idles as it starts and ends)
AUTO_VIDEOS_AT_ONCE = 4


def videos_at_once_of(value: int | None) -> int:
    """``videos_at_once`` checked; None: one more than the CPUs, at most ``AUTO_VIDEOS_AT_ONCE``."""
    if value is None:
        return min(AUTO_VIDEOS_AT_ONCE, usable_cpus() + 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"videos_at_once must be an int >= 1 or None, got {value!r}")
    return value


def _kept_frames(sink: Any, where: str, key_name: str) -> tuple[np.ndarray, np.ndarray]:
    """The ``key_name`` (which video) and frame_index columns of the rows a resumed sink kept."""
    columns = sink.kept_columns((key_name, "frame_index")) if isinstance(sink, KeepsColumns) else None
    if not columns or key_name not in columns or "frame_index" not in columns:
        raise ValueError(
            f"cannot resume from {where!r}: the output holds fewer rows than the frames before its last one, and its "
            f"{key_name} and frame_index columns cannot be read to see why"
        )
    return columns[key_name], columns["frame_index"]


def _frame_size_text(row_shape: tuple[int, ...] | None) -> str:
    return "of unknown size" if row_shape is None else f"{row_shape[1]}x{row_shape[0]}"


def _joined_chunks(chunks: list[Chunk]) -> Chunk:
    """One chunk of the rows of ``chunks``, in order."""
    rows = [row for chunk in chunks for row in chunk[0]]
    metas = [meta for _, meta in chunks]
    return rows, {name: concatenated([meta[name] for meta in metas]) for name in metas[0]}
