"""Jobs: a source through a pipeline into a sink, with progress and a summary.

The sink writes from the consumer side as each result arrives (the pinned
output views, no extra copy) while the engine keeps the next batches moving,
so writing overlaps inference.  The sink is closed whatever happens, so an
interrupted job leaves a readable file with every row delivered so far.
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import os
import threading
import time
from collections.abc import Callable, Collection, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import numpy as np

from ._capabilities import (
    ChecksOnTheWay,
    Completable,
    HasOutputs,
    HasWindows,
    Locates,
    SkipsRows,
    kept_rows,
    last_kept_row,
    where,
)
from ._engine import row_shape_fits
from ._multi import MultiPipeline
from ._output_lock import output_lock as output_lock  # public here: one writer an output (NOTE [ one writer ])
from ._pipeline import Pipeline
from ._progress import Progress
from ._rows import close_iteration, drop_first, peel_first_row, take_first
from .sinks import (
    JOURNAL_PART_SECONDS,
    CsvSink,
    CsvStreamSink,
    JsonLinesSink,
    JsonLinesStreamSink,
    NpySink,
    ParquetDatasetSink,
    ParquetSink,
    SinkError,
    refuse_used_folder,
    writable,
    writable_folder,
)
from .sources import (
    ARCHIVE_SUFFIXES,
    BATCH_WAIT_S,
    IMAGE_SUFFIXES,
    PARQUET_SUFFIXES,
    STREAM_TIMEOUT_S,
    VIDEO_SUFFIXES,
    Chunk,
    CsvSource,
    Fit,
    ImageArchiveSource,
    ImageFolderSource,
    ImageTableSource,
    LiveStreamsSource,
    NpySource,
    ParquetDatasetSource,
    ParquetSource,
    RowSource,
    SlotFiller,
    SourceBatch,
    SourceError,
    VideoFolderSource,
    VideoSource,
    VideoTableSource,
    chunk_rows,
    fewer_rows,
    hidden,
    holds_files,
    is_pipe,
    is_stream_url,
    sliced_chunk,
    writers_name,
)


class Sink(Protocol):
    """Where a job's results go (``pipeline.sinks``).  A sink may also have
    ``mark_complete()``, which :func:`run_job` calls after ``close()`` when the job
    wrote every row of its source (a data set's ``_SUCCESS``)."""

    def write(self, index: int, rows: int, outputs: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> None: ...

    def close(self) -> None: ...


#: what a job's bottleneck stage is, where its name alone does not say (the stats' names)
_BOTTLENECKS_SAID = {"source": "source (reading the input)", "take": "take (writing the output)"}


@dataclass
class JobSummary:
    items: int = 0
    batches: int = 0
    seconds: float = 0.0
    interrupted: bool = False
    #: the source decoded straight into the pinned slots (NOTE [ sources that fill slots ])
    filled: bool = False
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def items_per_s(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else float("nan")

    def __str__(self) -> str:
        text = f"{self.items} items in {self.batches} batches, {self.seconds:.2f} s: {self.items_per_s:,.1f} items/s"
        if self.stats.get("batches"):
            bottleneck = self.stats["bottleneck"]
            said = _BOTTLENECKS_SAID.get(bottleneck, bottleneck)
            text += f"; efficiency {self.stats['efficiency']:.2f}, bottleneck {said}"
            if self.stats.get("issuing"):
                text += f"; issued by {self.stats['issuing']}"
        if self.filled:
            text += "; decoded into the pinned slots"
        return text + (" (interrupted)" if self.interrupted else "")

    def stages_line(self) -> str | None:
        """Where a batch's time went, stage by stage (the stats' means; the stages timed
        only), or None when no batch was: ``time a batch, ms: source 0.41, ..., take 3.20``."""
        means = self.stats.get("stage_ms") or {}
        timed = [f"{stage} {ms:.2f}" for stage, ms in means.items() if ms is not None]
        return f"time a batch, ms: {', '.join(timed)}" if self.stats.get("batches") and timed else None


def source_kind(
    path: str | Path,
    image_column: str | None = None,
    video_column: str | None = None,
    video_format: str | None = None,
) -> str:
    """ "npy", "parquet", "csv", "video", "images" or "videos" from a path, or a SourceError.

    A folder is "images" when it holds images, else "videos" when it holds
    videos, else "parquet" when Parquet files lie below it (a data set,
    :class:`ParquetDatasetSource`).  A URL (``rtsp://``, ``http://``) is a
    "video" stream (NOTE [ video streams ] in sources).  A ``.parquet`` or
    ``.csv`` file with an ``image_column`` is "images": the images it lists
    (:class:`ImageTableSource`), as is a folder of Parquet files whose column
    holds them (NOTE [ images in a table ]); with a ``video_column``, "videos"
    (:class:`VideoTableSource`).  A file in a ``video_format`` FFmpeg is told
    (raw frames, an elementary stream) is a "video" whatever its name, unless
    the name says it is something else."""
    kind = _path_kind(path, video_format)
    if image_column is None and video_column is None:
        return kind
    if image_column is not None and video_column is not None:
        raise SourceError("a table lists images or videos: give a column of image paths or one of video paths")
    what = "image" if image_column is not None else "video"
    held = what == "image" and kind == "parquet" and Path(path).is_dir()  # a data set holding its images
    if kind not in ("parquet", "csv") or (Path(path).is_dir() and not held):
        raise SourceError(
            f"a column of {what} paths is read from a table, a .parquet or .csv file; {str(path)!r} is "
            f"{'a folder' if Path(path).is_dir() else 'a ' + kind + ' source'}"
        )
    return what + "s"


def _path_kind(path: str | Path, video_format: str | None = None) -> str:
    if is_stream_url(path):
        table = Path(str(path).split("?", 1)[0]).suffix.lower()
        if table in (".npy", ".csv", *PARQUET_SUFFIXES):
            raise SourceError(
                f"{str(path)!r}: a URL is read as a video stream; tables and arrays are read from local files "
                "(download it, or mount the bucket as a folder)"
            )
        return "video"
    path = Path(path)
    if path.is_dir():
        return _folder_kind(path)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return "npy"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    if suffix == ".csv":
        return "csv"
    if suffix in VIDEO_SUFFIXES:
        return "video"
    if suffix in ARCHIVE_SUFFIXES:  # NOTE [ image archives ]
        return "images"
    if video_format is not None and path.exists() and not path.is_dir():  # raw frames, a named pipe: any name
        return "video"
    if not path.exists():
        raise SourceError(f"input not found: {str(path)!r}")
    raise SourceError(
        f"cannot tell what {str(path)!r} is: expected .npy, .parquet, .csv, a video ({', '.join(VIDEO_SUFFIXES)}), "
        "a .tar of images or a folder of images"
    )


def _folder_kind(folder: Path) -> str:
    """What a folder holds at any depth: images before videos, both before tar archives of
    images (NOTE [ image archives ]), all before Parquet files (a folder of photos may
    hold a table of earlier results; img2dataset writes one beside each shard)."""
    if holds_files(folder, IMAGE_SUFFIXES, hidden):
        return "images"
    if holds_files(folder, VIDEO_SUFFIXES, hidden):
        return "videos"
    if holds_files(folder, ARCHIVE_SUFFIXES, hidden):
        return "images"
    if holds_files(folder, PARQUET_SUFFIXES, writers_name):
        return "parquet"
    raise SourceError(
        f"{str(folder)!r} holds no images ({', '.join(IMAGE_SUFFIXES)}), videos ({', '.join(VIDEO_SUFFIXES)}), "
        f"tar archives of images nor Parquet files ({', '.join(PARQUET_SUFFIXES)}), at any depth"
    )


#: the optional package each kind of file needs, and the extra that installs it
_NEEDS = {
    "parquet": ("pyarrow", "parquet"),
    "csv": ("pyarrow", "parquet"),
    "jsonl": ("pyarrow", "parquet"),
    "video": ("av", "video"),
    "videos": ("av", "video"),
    "streams": ("av", "video"),
    "images": ("PIL", "images"),
}


def _require(kind: str, what: str, error: type[Exception]) -> None:
    """``error`` naming the package and the extra to install, instead of an ImportError mid-job."""
    needed = _NEEDS.get(kind)
    if needed is None:
        return
    module, extra = needed
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise error(f"{what} needs the {module} package: pip install 'ortpipe[{extra}]' ({exc})") from exc


def open_source(
    path: str | Path,
    pipe: Pipeline | MultiPipeline,
    batch_size: int,
    *,
    input_name: str | None = None,
    columns: dict[str, Sequence[str]] | None = None,
    id_column: str | None = None,
    size: tuple[int, int] | None = None,
    pix_fmt: str = "rgb24",
    decode_threads: int | None = None,
    skip_unreadable: bool = False,
    every: int = 1,
    fps: float | None = None,
    jpeg_draft: bool = False,
    image_column: str | None = None,
    video_column: str | None = None,
    fit: str | Fit | None = None,
    exif_orientation: bool = False,
    videos_at_once: int | None = None,
    video_format: str | None = None,
    video_options: Mapping[str, object] | None = None,
    archive_shard: tuple[int, int] | None = None,
    reconnect: int = 0,
    stream_timeout_s: float | None = None,
    hwaccel: str | None = None,
    streams: Sequence[str | Path] = (),
    batch_wait_s: float | None = None,
) -> Iterable[SourceBatch]:
    """The source of ``path`` (:func:`source_kind`) for ``pipe``'s inputs; a video's, or a
    folder of videos', ``every``-th frames only, or ``fps`` frames a second; the images a
    table's ``image_column`` (or ``video_column``) lists; images' JPEGs decoded at a
    fraction of their size with ``jpeg_draft`` and turned upright with ``exif_orientation``;
    frames and images made ``size`` as ``fit`` says (NOTE [ fitting ]); a folder's or a
    table's videos ``videos_at_once`` at a time (NOTE [ videos decoded at once ]); a
    video or stream opened with FFmpeg's demuxer ``video_format`` and ``video_options``
    (NOTE [ video streams ]), and a stream's URL opened again ``reconnect`` times in a row
    when it drops (NOTE [ reconnecting ]), given up on after ``stream_timeout_s`` without
    data (None: :data:`STREAM_TIMEOUT_S`); videos decoded on ``hwaccel``'s device (NOTE
    [ decoding on the GPU ]).  ``streams``: more live streams read with ``path`` at once,
    their frames batched as they come, a batch handed on ``batch_wait_s`` after its
    first frame at the latest (NOTE [ several streams ]).  ``archive_shard=(K, N)``: a
    folder of tar archives of images is read as the K-th of N groups of its files (NOTE
    [ image archives ]: the source's ``shard`` says so); any other input is sharded by
    its rows (:func:`shard_rows`), by whoever runs it, and ignores it."""
    kind = "streams" if streams else source_kind(path, image_column, video_column, video_format)
    listed = image_column or video_column
    if listed is not None:
        _require("parquet", f"reading {str(path)!r}", SourceError)
        if columns:
            raise SourceError(
                f"input columns ({sorted(columns)}) map a table's numbers to model inputs; with a column of paths "
                f"({listed!r}) the input is the files it lists"
            )
    _require(kind, f"reading {str(path)!r}", SourceError)
    if stream_timeout_s is not None and (not is_stream_url(path) or is_pipe(path)):
        raise SourceError(f"a stream's timeout is for a stream's URL (a pipe is waited on); {str(path)!r} is none")
    for given, kinds, what in (
        (every != 1 or fps is not None, ("video", "videos", "streams"), "taking every N-th frame is for videos"),
        (
            skip_unreadable,
            ("images", "videos", "streams"),
            "skipping unreadable files is for a folder of images or videos, or several streams",
        ),
        (jpeg_draft, ("images",), "decoding JPEGs in draft is for images"),
        (videos_at_once is not None, ("videos",), "decoding videos at once is for a folder or table of videos"),
        (exif_orientation, ("images",), "turning pictures as their EXIF says is for images"),
        (
            video_format is not None or bool(video_options),
            ("video", "streams"),
            "FFmpeg's format and options for opening are for a video or streams",
        ),
        (bool(reconnect), ("video", "streams"), "reconnecting is for a stream's URL"),
        (hwaccel is not None, ("video", "videos", "streams"), "decoding on a GPU is for videos"),
        (batch_wait_s is not None, ("streams",), "a batch's wait for frames is for several streams read at once"),
        (
            Fit.parse(fit).moves,
            ("video", "videos", "images", "streams"),
            "cropping or padding to a size is for video frames and images",
        ),
    ):
        if given and kind not in kinds:  # an option of another kind of input: refused, not ignored
            raise SourceError(f"{what}; {str(path)!r} is a {kind} source")
    specs = pipe.source_inputs
    if kind == "npy":
        return NpySource(path, batch_size, specs, input_name)
    if kind == "parquet":
        table = ParquetDatasetSource if Path(path).is_dir() else ParquetSource
        return table(path, batch_size, specs, columns, id_column)
    if kind == "csv":
        return CsvSource(path, batch_size, specs, columns, id_column)
    frames = (size, pix_fmt, decode_threads)  # how every video's frames are decoded and made
    timeout_s = STREAM_TIMEOUT_S if stream_timeout_s is None else stream_timeout_s
    if kind == "streams":
        return LiveStreamsSource(
            [path, *streams],
            batch_size,
            specs,
            input_name,
            *frames,
            every,
            fps,
            fit,
            video_format,
            video_options,
            reconnect,
            timeout_s,
            hwaccel,
            skip_unreadable,
            BATCH_WAIT_S if batch_wait_s is None else batch_wait_s,
        )
    if kind == "video":
        return VideoSource(
            path,
            batch_size,
            specs,
            input_name,
            *frames,
            every=every,
            fps=fps,
            fit=fit,
            format=video_format,
            options=video_options,
            reconnect=reconnect,
            timeout_s=timeout_s,
            hwaccel=hwaccel,
        )
    if kind == "videos" and video_column is not None:
        return VideoTableSource(
            path,
            video_column,
            batch_size,
            specs,
            input_name,
            *frames,
            skip_unreadable,
            every=every,
            fps=fps,
            id_column=id_column,
            fit=fit,
            videos_at_once=videos_at_once,
            hwaccel=hwaccel,
        )
    if kind == "videos":
        return VideoFolderSource(
            path,
            batch_size,
            specs,
            input_name,
            *frames,
            skip_unreadable,
            every=every,
            fps=fps,
            fit=fit,
            videos_at_once=videos_at_once,
            hwaccel=hwaccel,
        )
    if image_column is not None:
        return ImageTableSource(
            path,
            image_column,
            batch_size,
            specs,
            input_name,
            size,
            decode_threads,
            skip_unreadable,
            jpeg_draft,
            id_column,
            fit,
            exif_orientation,
        )
    decoding = (size, decode_threads, skip_unreadable, jpeg_draft, fit, exif_orientation)
    if _holds_archives(Path(path)):
        by_file = archive_shard if Path(path).is_dir() else None  # one archive is split by its rows
        return ImageArchiveSource(path, batch_size, specs, input_name, *decoding, shard=by_file)
    return ImageFolderSource(path, batch_size, specs, input_name, *decoding)


def _holds_archives(path: Path) -> bool:
    """An "images" path that is a tar archive, or a folder of them (and no loose images)."""
    if path.is_dir():
        return not holds_files(path, IMAGE_SUFFIXES, hidden) and holds_files(path, ARCHIVE_SUFFIXES, hidden)
    return path.suffix.lower() in ARCHIVE_SUFFIXES


#: the output path that is standard output (``ortpipe run --output -``)
STDOUT = "-"
#: what standard output is written as (``--output-format``)
STREAM_FORMATS = ("csv", "jsonl")


def sink_kind(path: str | Path, stream_format: str = "csv") -> str:
    """ "npy", "parquet", "csv", "jsonl", "parquet data set" (a folder: a path with no
    suffix, or a folder named .parquet as Spark names them), or for :data:`STDOUT`
    ``stream_format`` and " stream" ("csv stream", "jsonl stream") from an output
    path, or a SinkError."""
    if str(path) == STDOUT:
        if stream_format not in STREAM_FORMATS:
            raise SinkError(f"standard output is written as {' or '.join(STREAM_FORMATS)}, not {stream_format!r}")
        return f"{stream_format} stream"
    path = Path(path)
    suffix = path.suffix.lower()
    if not suffix or (suffix in PARQUET_SUFFIXES and path.is_dir()):
        return "parquet data set"
    if suffix == ".npy":
        return "npy"
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    if suffix == ".csv":
        return "csv"
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    raise SinkError(
        f"cannot write {str(path)!r}: the output must end in .npy, .parquet, .csv or .jsonl, or be a folder (a path "
        "with no suffix: a Parquet data set), or be - (standard output)"
    )


def check_output(path: str | Path, resume: bool = False, overwrite: bool = False) -> None:
    """A SinkError now, before any work (a large model takes seconds to load),
    where :func:`open_sink` would refuse ``path``: it cannot be written, or it
    holds an earlier run's rows that a new run would replace or mix with (a
    file, a data set folder; ``overwrite``: they are to be replaced).  Files
    an output writes beside ``path`` (a multi-output .npy's) are known once the
    model's outputs are: :func:`refuse_replacing` checks the sink too."""
    kind = sink_kind(path)
    if kind.endswith(" stream"):
        if resume:
            raise SinkError("--resume goes on after the rows of an output file; standard output keeps none")
        return
    if kind != "parquet data set":
        file = writable(path)
        if not resume and not overwrite and file.is_file() and file.stat().st_size:
            _refuse_replacing([file])
        return
    folder = writable_folder(path)
    if not resume and not overwrite:
        refuse_used_folder(folder)


def refuse_replacing(sink: Sink) -> None:
    """A SinkError where ``sink`` would replace what an earlier run wrote (a long job's
    rows are not thrown away by a rerun that forgot ``--resume``)."""
    _refuse_replacing(sink.existing_outputs() if isinstance(sink, HasOutputs) else [])


def _refuse_replacing(existing: list[Path]) -> None:
    if existing:
        names = ", ".join(repr(str(path)) for path in existing)
        raise SinkError(f"{names} holds an earlier run's rows: --resume goes on after them, --overwrite replaces them")


def open_sink(
    path: str | Path,
    pipe: Pipeline | MultiPipeline,
    data_dependent: Collection[str] = (),
    resume: bool = False,
    part_rows: int | None = None,
    compression: str = "snappy",
    overwrite: bool = False,
    stream: BinaryIO | None = None,
    stream_format: str = "csv",
    part_seconds: float | None = None,
) -> Sink:
    """The sink of ``pipe``'s outputs for ``path``: by its suffix .npy, .parquet/.pq
    or .csv, and a folder (no suffix) as a Parquet data set of part files of
    at most ``part_rows`` rows (default: about 256 MB each; a Parquet file's
    journal's parts too: NOTE [ journaled Parquet ] in sinks), each closed
    ``part_seconds`` after it was opened where given (a file's journal's: 60 s
    by default); Parquet compressed
    with ``compression``; .jsonl as JSON Lines; :data:`STDOUT` as ``stream_format`` (CSV
    or JSON Lines) into ``stream`` (default: standard output's bytes), flushed each batch.

    The outputs named in ``data_dependent`` and those ``pipe`` finds to depend
    on the data by the first write are written per batch
    (NOTE [ per-batch outputs ] in sinks).  ``resume``: keep the rows an earlier run left in the
    file and write after them (``sink.kept_rows``; run the source
    :func:`rows_after` them: NOTE [ resuming ] in sinks)."""
    kind = sink_kind(path, stream_format)
    output_names = pipe.output_names
    unknown = sorted(set(data_dependent) - set(output_names))
    if unknown:
        raise SinkError(f"data-dependent output(s) {unknown} are not among the outputs written, {output_names}")
    named = frozenset(data_dependent)

    def known() -> frozenset[str]:
        return named | pipe.data_dependent_outputs

    if kind == "npy":
        return NpySink(path, output_names, known, resume)
    _require(kind.split()[0], f"writing {str(path)!r}", SinkError)
    if kind == "parquet":
        seconds = JOURNAL_PART_SECONDS if part_seconds is None else part_seconds
        return ParquetSink(
            path,
            data_dependent=known,
            resume=resume,
            compression=compression,
            part_rows=part_rows,
            part_seconds=seconds,
        )
    if kind == "csv":
        return CsvSink(path, known, resume)
    if kind == "jsonl":
        return JsonLinesSink(path, known, resume)
    if kind.endswith(" stream"):
        check_output(path, resume)
        return (CsvStreamSink if kind == "csv stream" else JsonLinesStreamSink)(stream, known)
    return ParquetDatasetSink(
        path,
        data_dependent=known,
        resume=resume,
        part_rows=part_rows,
        compression=compression,
        overwrite=overwrite,
        part_seconds=part_seconds,
    )


def first_rows(source: Iterable[SourceBatch], limit: int) -> Iterable[SourceBatch]:
    """The first ``limit`` rows of ``source``, its last batch cut to fit; no batch is read
    after them, and the source's iteration is closed when this one ends (its threads with it).
    A :class:`RowSource` stays one, so that it still fills the slots."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if isinstance(source, RowSource):
        return _RowsOf(source, lambda chunks: take_first(chunks, limit, chunk_rows, sliced_chunk))
    return take_first(iter(source), limit, _batch_rows, _sliced_batch)


def rows_after(source: Iterable[SourceBatch], skip: int) -> Iterable[SourceBatch]:
    """``source`` without its first ``skip`` rows (a resumed run: the rows already
    written; NOTE [ resuming ] in sinks), each row's metadata as the whole source
    gives it.  A source with an ``after(rows)`` of its own (every file source)
    leaves them unread or undecoded where it can; any other is read through
    them, the batch they end in cut.  A :class:`RowSource` stays one."""
    if skip < 0:
        raise ValueError(f"rows to skip must be >= 0, got {skip}")
    if skip == 0:
        return source
    if isinstance(source, SkipsRows):
        return source.after(skip)
    too_few = fewer_rows(where(source), skip)
    if isinstance(source, RowSource):
        return _RowsOf(source, lambda chunks: drop_first(chunks, skip, chunk_rows, sliced_chunk, too_few))
    return drop_first(iter(source), skip, _batch_rows, _sliced_batch, too_few)


def window(source: Iterable[SourceBatch], start: int, stop: int | None = None) -> Iterable[SourceBatch]:
    """Rows ``start`` to ``stop - 1`` of ``source`` (``stop`` None: to its end), each
    with its metadata as in the whole source: :func:`rows_after` then :func:`first_rows`,
    or the source's own ``between(start, stop)`` (an image folder's: files).
    A resumed run's window starts after the rows its output holds: :func:`resumed`."""
    if stop is not None and stop <= start:
        return ()
    if isinstance(source, HasWindows):
        return source.between(start, stop)
    later = rows_after(source, start)
    return later if stop is None else first_rows(later, stop - start)


def resumed(
    source: Iterable[SourceBatch], sink: Sink, start: int = 0, stop: int | None = None
) -> Iterable[SourceBatch]:
    """Rows ``start`` to ``stop - 1`` of ``source`` that ``sink`` (opened with
    ``resume=True``) does not hold yet: the window after its ``kept_rows``
    (NOTE [ resuming ] in sinks).

    Rows are counted, so the input must be the earlier run's.  Where the sink
    keeps metadata (a table: ids, file and row, path) that says more than a
    row's place, it is checked now, before any batch: the input's row before
    the first new one must have the integer and text metadata of the sink's
    last row, or the input is refused.  That row is read on the way to the
    first new one - a table's (``checked_after``: a CSV is parsed once) or a
    plain iteration's (taken off the rows from it on: a generator can be
    resumed) - or on its own where a row source reaches it (a seek, a file);
    the first batch is read now, and the batches keep their places, as in an
    uninterrupted run.
    Sources whose metadata are positions only (``positional_meta``: a
    ``.npy``'s row ids) have nothing to check (a video's frame indices are
    checked: a stride, ``every``, may have changed).  A source whose rows need
    not be its positions (an image folder that skips unreadable files, a folder
    of videos whose headers may count frames a video lacks) says where to go on
    instead, from what the sink kept: ``position_after(sink, start)``."""
    kept = kept_rows(sink)
    # a source whose rows need not be its positions says where
    position = source.position_after(sink, start) if kept and isinstance(source, Locates) else None
    if position is not None:
        return window(source, max(start, position), stop)
    expected = last_kept_row(sink)
    first = start + kept
    if expected is None or getattr(source, "positional_meta", False):
        return window(source, first, stop)

    def check(meta: dict[str, np.ndarray]) -> None:
        _check_meta(meta, expected, first - 1, source)

    if isinstance(source, RowSource) or (stop is not None and stop <= first):  # read on its own: a seek, a file
        meta = _first_meta(window(source, first - 1, first))
        if meta is None:  # the input ends before the output's last row
            raise SourceError(
                f"cannot resume: {where(source)!r} has no row {first - 1}, the output's last: the input is shorter "
                "than the one the output was made from"
            )
        check(meta)
        return window(source, first, stop)
    if isinstance(source, ChecksOnTheWay):  # a table: the row is read on the way (a CSV is parsed once)
        later = source.checked_after(first, check)
    else:  # a plain iteration, read once: the row is taken off the rows from it on
        too_few = fewer_rows(where(source), first)
        later = peel_first_row(
            iter(rows_after(source, first - 1)),
            _batch_rows,
            _sliced_batch,
            lambda row: check(row.meta),
            lambda: too_few(first - 1),
        )
    return _started(later if stop is None else first_rows(later, stop - first))


def _started(rows: Iterable[SourceBatch]) -> Iterator[SourceBatch]:
    """``rows`` with their first batch read now: a resumed run's check, made on the way
    to it, refuses the input before any batch runs."""
    items = iter(rows)
    try:
        first = next(items)
    except StopIteration:
        return iter(())
    except BaseException:
        close_iteration(items)
        raise
    return _chained(first, items)


def _chained(first: SourceBatch, rest: Iterator[SourceBatch]) -> Iterator[SourceBatch]:
    try:
        yield first
        yield from rest
    finally:
        close_iteration(rest)


def _check_meta(meta: dict[str, np.ndarray], expected: Mapping[str, Any], row: int, source: object) -> None:
    """Refuse the input when its row ``row`` (``meta``, the first row's metadata) does
    not have the integer and text metadata of ``expected``, the output's last row."""
    differ = {
        name: (expected[name], values[0].item())
        for name, values in meta.items()
        if name in expected and values.dtype.kind in "iuUSO" and str(values[0]) != str(expected[name])
    }
    if differ:
        said = "; ".join(f"{name} {got!r} where the output has {want!r}" for name, (want, got) in differ.items())
        raise SourceError(
            f"cannot resume: row {row} of {where(source)!r} is not the last row the output holds ({said}): the input "
            "is not the one the output was made from, or not in the same order"
        )


def _first_meta(rows: Iterable[SourceBatch]) -> dict[str, np.ndarray] | None:
    """The metadata of the first batch (or chunk, of a row source) of ``rows``, None when
    there is none; its iteration closed."""
    items: Iterator[Any] = rows.chunks() if isinstance(rows, RowSource) else iter(rows)
    try:
        first = next(items, None)
    finally:
        close_iteration(items)
    if first is None:
        return None
    return first[1] if isinstance(rows, RowSource) else first.meta  # type: ignore[no-any-return]


def shard_rows(size: int, shard: int, shards: int) -> tuple[int, int | None]:
    """Rows ``[start, stop)`` of the ``shard``-th (from 0) of ``shards`` contiguous windows of
    an input of about ``size`` rows, as even as whole rows allow.  The last one runs
    to the input's end (``stop`` None), so the windows cover every row once even
    where ``size`` is an estimate (a CSV's, a Matroska video's): every shard
    works the bounds out alike."""
    if shards < 1 or not 0 <= shard < shards:
        raise ValueError(f"shard must be K/N with 0 <= K < N, got {shard}/{shards}")
    size = max(0, size)
    return shard * size // shards, None if shard == shards - 1 else (shard + 1) * size // shards


class _RowsOf(RowSource):
    """A row source whose chunks pass through ``select`` (:func:`first_rows`, :func:`rows_after`)."""

    def __init__(self, source: RowSource, select: Callable[[Iterator[Chunk]], Iterator[Chunk]]) -> None:
        self.spec, self.batch_size, self.row_shape = source.spec, source.batch_size, source.row_shape
        self.path = where(source)
        self._source, self._select = source, select

    def chunks(self) -> Iterator[Chunk]:
        return self._select(self._source.chunks())


def _batch_rows(item: SourceBatch) -> int:
    return len(next(iter(item.inputs.values())))


def _sliced_batch(item: SourceBatch, rows: slice) -> SourceBatch:
    return SourceBatch(
        {name: values[rows] for name, values in item.inputs.items()},
        {name: values[rows] for name, values in item.meta.items()},
    )


def run_job(
    pipe: Pipeline | MultiPipeline,
    source: Iterable[SourceBatch],
    sink: Sink,
    progress: Progress | None = None,
    summary: JobSummary | None = None,
    stop: threading.Event | None = None,
    fill_slots: bool = True,
) -> JobSummary:
    """Every batch of ``source`` through ``pipe`` into ``sink``; the sink is always closed.

    Setting ``stop`` ends the job gracefully: no new batch is read, the ones in
    flight are delivered and written, and the summary says ``interrupted``.
    Pass your own ``summary`` to read how far a job got when it raised.  A
    source that makes its batches a row at a time (a video, an image folder)
    decodes straight into the pipeline's pinned slots where it can
    (``summary.filled``; NOTE [ sources that fill slots ]); ``fill_slots=False``
    has it make arrays of its own that the engine stages, as any source.
    A job that wrote every row of its source marks the sink complete
    (``mark_complete()``, where it has one: a data set's ``_SUCCESS``).
    """
    metas: collections.deque[dict[str, np.ndarray]] = collections.deque()  # results come back in this order
    summary = summary if summary is not None else JobSummary()

    def stopped() -> bool:
        if stop is not None and stop.is_set():
            summary.interrupted = True
        return summary.interrupted

    def take(index: int, rows: int, views: dict[str, np.ndarray]) -> None:
        try:
            sink.write(index, rows, views, metas.popleft())
        except BrokenPipeError:
            raise  # what reads the output went away: the CLI ends quietly (exit 141)
        except OSError as exc:  # a full disk, a quota, a file too large: said, not a traceback
            raise SinkError(
                f"batch {index}: {_output_of(sink)} cannot be written after {summary.items:,} rows: {_reason(exc)}"
            ) from exc
        summary.items += rows
        summary.batches += 1
        if progress is not None:
            progress.tick(rows)

    filler = _slot_filler(pipe, source) if fill_slots and isinstance(pipe, Pipeline) else None
    feed = _batches(source, metas, stopped)  # a generator: reads nothing unless the engine asks
    summary.filled = filler is not None
    start = time.perf_counter()
    failed = True  # until the loop ends without an exception
    try:  # the pipeline's refusals too (a closed pipeline, a batch size the model cannot take) close the sink
        if filler is not None and isinstance(pipe, Pipeline):
            fill = _fill_from(filler, metas, stopped)
            results = pipe.map_filled(fill, take, batch_size=filler.batch_size, row_shapes=filler.row_shapes)
        else:
            results = pipe.map_with(feed, take)
        for _ in results:
            pass
        stopped()  # a stop the source ended at (a pipe told to stop reading) is a stop too
        failed = False
    except KeyboardInterrupt:
        summary.interrupted = True
        raise
    finally:
        summary.seconds = time.perf_counter() - start
        with contextlib.suppress(ValueError):  # ValueError: still running in a thread that did not stop
            (filler or feed).close()  # the engine's threads are joined: end the source's iteration here
        summary.stats = pipe.stats.to_dict()
        try:
            _close(sink, failed)
        finally:
            if progress is not None:
                progress.close()
    if isinstance(sink, Completable) and not summary.interrupted:  # here only when nothing failed
        sink.mark_complete()
    return summary


def _close(sink: Sink, failed: bool) -> None:
    """Close ``sink``; where it cannot be (its last bytes find the disk full), say so - unless
    the job failed already, whose error is the one to tell (closing then is tidying up)."""
    try:
        sink.close()
    except BrokenPipeError:
        raise
    except OSError as exc:
        if not failed:
            raise SinkError(f"{_output_of(sink)} cannot be closed: {_reason(exc)}") from exc


def _output_of(sink: Sink) -> str:
    """How a message names the output ``sink`` writes."""
    path = getattr(sink, "path", None)
    if path is None:
        paths = getattr(sink, "paths", None)
        path = next(iter(paths.values()), None) if isinstance(paths, Mapping) else None
    if path is None:
        return "the output"
    return "standard output" if str(path) == STDOUT else f"the output {str(path)!r}"


def _reason(error: OSError) -> str:
    """An OSError as the system says it ("[Errno 28] No space left on device"), not as a
    library wraps it ("Error writing bytes to file. Detail: [errno 28] ...")."""
    return f"[Errno {error.errno}] {os.strerror(error.errno)}" if error.errno else str(error)


def _batches(
    source: Iterable[SourceBatch], metas: collections.deque[dict[str, np.ndarray]], stopped: Callable[[], bool]
) -> Generator[dict[str, np.ndarray], None, None]:
    """The source's batches' inputs, their metadata kept in ``metas``, until ``stopped()``."""
    items = iter(source)
    try:
        for item in items:
            if stopped():
                return
            metas.append(item.meta)
            yield item.inputs
    finally:
        close_iteration(items)  # a source's own threads (image decoding) end with the job


def _slot_filler(pipe: Pipeline, source: Iterable[SourceBatch]) -> SlotFiller | None:
    """The source's slot filler, where it has one and the slots can be sized: from
    the model, or from the rows the source says it makes (NOTE [ sources that fill slots ])."""
    if not isinstance(source, RowSource) or [spec.name for spec in pipe.source_inputs] != [source.spec.name]:
        return None  # a row source feeds one input: with others, the batches tell what is missing
    if pipe.fills_slots:
        return source.filler()
    spec, row = pipe.source_inputs[0], source.row_shape
    if row is not None and row_shape_fits(spec, row):
        return source.filler(row_shapes={spec.name: row})
    return None  # rows the model cannot take are staged: the batch's check says what is wrong


def _fill_from(
    filler: SlotFiller, metas: collections.deque[dict[str, np.ndarray]], stopped: Callable[[], bool]
) -> Callable[[int, dict[str, np.ndarray]], int | None]:
    """``map_filled``'s fill: the filler's next batch into the slot, its metadata kept in ``metas``."""

    def fill(index: int, slot: dict[str, np.ndarray]) -> int | None:
        if stopped():
            return None
        written = filler.fill(slot)
        if written is None:
            return None
        rows, meta = written
        metas.append(meta)
        return rows

    return fill
