"""Opening a job's source and sink from paths: which kind of input or output a path
is, the checks made before any work, and the options that apply to each kind."""

from __future__ import annotations

import dataclasses
import importlib
import shutil
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, BinaryIO

from .. import sources
from ..frontends.pipeline import Pipeline
from ..session import TensorSpec
from ..sinks import (
    ClassColumnsSink,
    JobRecord,
    RecordingSink,
    ReplacingSink,
    SinkError,
    finish_replacing,
    refuse_other_files,
    refuse_other_job,
    refuse_unrecorded,
    refuse_used_folder,
    replacement_of,
    replacement_under_way,
    staging_folder,
    writable,
    writable_folder,
)
from ..sinks.stored import StoredParquetSink
from ..sources import (
    ARCHIVE_SUFFIXES,
    IMAGE_SUFFIXES,
    PARQUET_SUFFIXES,
    VIDEO_SUFFIXES,
    CsvSource,
    JsonLinesSource,
    NpySource,
    ParquetDatasetSource,
    ParquetSource,
    SourceBatch,
    SourceError,
    hidden,
    holds_files,
    is_stream_url,
    stored_files_below,
    writers_name,
)
from ..sources.stored_arrays import StoredNpySource
from ..sources.stored_tables import StoredTableSource
from ..sources.table_formats import (
    DeltaTableSource,
    IcebergTableSource,
    format_of_names,
    refuse_table_folder,
    table_format,
)
from ..util.capabilities import HasOutputs
from ..util.storage import StoredPath, is_storage_url
from .sink_kinds import SINKS, SinkRequest
from .source_options import SourceOptions
from .stored_output import check_stored_output, open_stored_sink, stored_sink_kind
from .summary import Sink

if TYPE_CHECKING:
    from ..frontends.multi import MultiPipeline


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


def _stored_kind(url: str) -> str:
    """The kind of a storage URL: a table by its suffix, or a prefix of tables (read as a data set)."""
    suffix = PurePosixPath(url.split("?", 1)[0]).suffix.lower()
    kinds = {".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", **dict.fromkeys(PARQUET_SUFFIXES, "parquet")}
    if url.endswith("/") or not suffix:  # a prefix: tables (their files say their format), images or videos
        return _stored_prefix_kind(url)
    if suffix in kinds:
        return kinds[suffix]
    if suffix in VIDEO_SUFFIXES:  # a video object: read through a seekable file object of it
        return "video"
    if suffix == ".npy":
        return "npy"
    raise SourceError(
        f"{url!r}: tables (Parquet, CSV, JSON Lines), .npy arrays, videos and prefixes of images are read from "
        f"object storage; other inputs ({suffix}) are not yet: download it, or mount the bucket as a folder"
    )


def _stored_prefix_kind(url: str) -> str:
    """A prefix's kind: "parquet" where it holds tables (read as a data set, its files saying
    their format), else "images" or "videos" where it holds those (and not both)."""
    from ..sources.stored_tables import DATASET_FORMATS

    try:
        prefix = StoredPath.of(url)
        names = [entry.name for entry in prefix.iterdir()]
        fmt = format_of_names(names)
        if fmt is not None:  # NOTE [ a table format's folder ]
            raise refuse_table_folder(url, fmt, "a run from object storage")
        if any(PurePosixPath(name).suffix.lower() in DATASET_FORMATS for name in names):
            return "parquet"
        pictures = stored_files_below(prefix, (*IMAGE_SUFFIXES, *VIDEO_SUFFIXES))  # one listing for both
    except OSError as exc:
        raise SourceError(str(exc)) from exc
    suffixes = {PurePosixPath(url).suffix.lower() for url in pictures}
    images, videos = suffixes & set(IMAGE_SUFFIXES), suffixes & set(VIDEO_SUFFIXES)
    if images and videos:
        raise SourceError(f"{url!r} holds both images and videos: give a prefix of one or the other")
    return "images" if images else "videos" if videos else "parquet"  # nothing: the table's own message


def _path_kind(path: str | Path, video_format: str | None = None) -> str:
    if is_storage_url(path):  # object storage: tables (util.storage)
        return _stored_kind(str(path))
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
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix in VIDEO_SUFFIXES:
        return "video"
    if suffix in ARCHIVE_SUFFIXES:  # NOTE [ image archives ]
        return "images"
    if video_format is not None and path.exists() and not path.is_dir():  # raw frames, a named pipe: any name
        return "video"
    if not path.exists():
        raise SourceError(f"input not found: {str(path)!r}")
    raise SourceError(
        f"cannot tell what {str(path)!r} is: expected .npy, .parquet, .csv, .jsonl, "
        f"a video ({', '.join(VIDEO_SUFFIXES)}), a .tar of images or a folder of images"
    )


def _folder_kind(folder: Path) -> str:
    """What a folder holds at any depth: images before videos, both before tar archives of
    images (NOTE [ image archives ]), all before Parquet files (a folder of photos may
    hold a table of earlier results; img2dataset writes one beside each shard).  A Delta
    table's folder is "parquet", read by its log; an Iceberg table's is refused
    (NOTE [ a table format's folder ])."""
    fmt = table_format(folder)
    if fmt == "delta":
        return "parquet"
    if fmt == "iceberg":
        raise refuse_table_folder(str(folder), fmt, "ortpipe run")
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
        raise error(
            f"{what} needs the {module} package: pip install '.[{extra}]' in a checkout of ortpipe ({exc})"
        ) from exc


def open_source(
    path: str | Path,
    pipe: Pipeline | MultiPipeline,
    batch_size: int,
    options: SourceOptions | None = None,
    **choices: Any,
) -> Iterable[SourceBatch]:
    """The source of ``path`` (:func:`source_kind`) for ``pipe``'s inputs, read as
    ``options`` (or the same names as keywords: ``open_source(path, pipe, 8, every=30)``)
    say: a video's, or a folder of videos', ``every``-th frames only, or ``fps`` frames a
    second; the images a table's ``image_column`` (or ``video_column``) lists; images'
    JPEGs decoded at a fraction of their size with ``jpeg_draft`` and turned upright with
    ``exif_orientation``; frames and images made ``size`` as ``fit`` says (NOTE [ fitting ]);
    a folder's or a table's videos ``videos_at_once`` at a time (NOTE [ videos decoded at once ]);
    a video or stream opened with FFmpeg's demuxer ``video_format`` and ``video_options``
    (NOTE [ video streams ]), and a stream's URL opened again ``reconnect`` times in a row
    when it drops (NOTE [ reconnecting ]), given up on after ``stream_timeout_s`` without
    data (None: :data:`STREAM_TIMEOUT_S`); videos decoded on ``hwaccel``'s device
    (NOTE [ decoding on the GPU ]).  ``streams``: more live streams read with ``path`` at
    once, their frames batched as they come, a batch handed on ``batch_wait_s`` after its
    first frame at the latest (NOTE [ several streams ]).  ``archive_shard=(K, N)``: a
    folder of tar archives of images is read as the K-th of N groups of its files
    (NOTE [ image archives ]: the source's ``shard`` says so); any other input is sharded
    by its rows (:func:`shard_rows`), by whoever runs it, and ignores it.  An option
    for another kind of input than ``path``'s is refused, not ignored."""
    if options is None:
        options = SourceOptions(**choices)
    elif choices:
        raise TypeError(f"open_source: give either options or keywords, not both (got {sorted(choices)})")
    if options.input_format == "iceberg":  # NOTE [ a table format's folder ]: through its catalog
        options.refuse_for("parquet", path)
        columns, specs = dict(options.columns or {}), pipe.source_inputs
        return IcebergTableSource(str(path), batch_size, specs, columns, options.id_column, options.keep_columns,
                                  options.catalog, options.table_version)  # fmt: skip
    listed = options.image_column or options.video_column
    kind = "streams"
    if not options.streams:
        kind = source_kind(path, options.image_column, options.video_column, options.video_format)
    if listed is not None:
        _require("parquet", f"reading {str(path)!r}", SourceError)
        fmt = None if is_storage_url(path) else table_format(path)
        if fmt is not None:
            raise refuse_table_folder(str(path), fmt, "a table of images or videos")
        if options.columns:
            raise SourceError(
                f"input columns ({sorted(options.columns)}) map a table's numbers to model inputs; with a column "
                f"of paths ({listed!r}) the input is the files it lists"
            )
    _require(kind, f"reading {str(path)!r}", SourceError)
    options.refuse_for(kind, path)
    specs = pipe.source_inputs
    if kind == "npy":
        if is_storage_url(path):
            return StoredNpySource(str(path), batch_size, specs, options.input_name)
        return NpySource(path, batch_size, specs, options.input_name)
    if kind in ("parquet", "csv", "jsonl"):
        if is_storage_url(path):
            return StoredTableSource(
                str(path), batch_size, specs, dict(options.columns or {}), options.id_column, options.keep_columns
            )
        if Path(path).is_dir() and table_format(path) == "delta":
            return DeltaTableSource(path, batch_size, specs, dict(options.columns or {}), options.id_column,
                                    options.keep_columns, version=options.table_version)  # fmt: skip
        text = {"csv": CsvSource, "jsonl": JsonLinesSource}.get(kind)
        table = text or (ParquetDatasetSource if Path(path).is_dir() else ParquetSource)
        return table(path, batch_size, specs, dict(options.columns or {}), options.id_column, options.keep_columns)
    if kind in ("streams", "video", "videos"):
        return _video_source(kind, path, batch_size, specs, options)
    return _image_source(path, batch_size, specs, options)


def _image_source(
    path: str | Path, batch_size: int, specs: Sequence[TensorSpec], options: SourceOptions
) -> Iterable[SourceBatch]:
    """The images a table lists or holds, tar archives of them, or a folder of them."""
    image = options.image_decoding()
    if is_storage_url(path):  # a prefix of images in object storage
        from ..sources.stored_images import StoredImageFolderSource  # Pillow's, for images only

        return StoredImageFolderSource(str(path), batch_size, specs, options.input_name, decoding=image)
    if options.image_column is not None:
        column, name = options.image_column, options.input_name
        return sources.ImageTableSource(
            path, column, batch_size, specs, name, id_column=options.id_column, decoding=image
        )
    if _holds_archives(Path(path)):
        by_file = options.archive_shard if Path(path).is_dir() else None  # one archive is split by its rows
        return sources.ImageArchiveSource(path, batch_size, specs, options.input_name, shard=by_file, decoding=image)
    return sources.ImageFolderSource(path, batch_size, specs, options.input_name, decoding=image)


def _video_source(
    kind: str, path: str | Path, batch_size: int, specs: Sequence[TensorSpec], options: SourceOptions
) -> Iterable[SourceBatch]:
    """A video's, a stream's, several streams', a folder's or a table's videos' source, each
    taking what it uses of the decoding choices; one skipping unreadable videos or streams
    asks for several (open_source refuses the options a kind has no use for before this)."""
    video, name = options.video_decoding(), options.input_name
    if kind == "streams":
        wait_s = sources.BATCH_WAIT_S if options.batch_wait_s is None else options.batch_wait_s
        return sources.LiveStreamsSource(
            [path, *options.streams], batch_size, specs, name, batch_wait_s=wait_s, decoding=video
        )
    if kind == "video":
        return sources.VideoSource(
            path, batch_size, specs, name, decoding=dataclasses.replace(video, skip_unreadable=False)
        )
    if options.video_column is not None:
        return sources.VideoTableSource(
            path, options.video_column, batch_size, specs, name, id_column=options.id_column, decoding=video
        )
    return sources.VideoFolderSource(path, batch_size, specs, name, decoding=video)


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
    if stream_format == "delta" or (not is_storage_url(path) and table_format(path) == "delta"):
        return _delta_kind(path)
    if stream_format == "iceberg":  # NAMESPACE.TABLE in a catalog (NOTE [ parts appended as Iceberg snapshots ])
        return "iceberg table"
    if is_storage_url(path):  # NOTE [ stored outputs ] in sinks.stored
        return stored_sink_kind(str(path))
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


def _delta_kind(path: str | Path) -> str:
    """ "delta table": a local folder, made a table at its first commit where it is none yet."""
    if str(path) == STDOUT:
        raise SinkError("a Delta table is a folder: give its path, not - (standard output)")
    if is_storage_url(path):
        raise SinkError(
            f"{str(path)!r}: a Delta table in object storage is not written yet: write a Parquet data set there, "
            "or a local Delta table"
        )
    if Path(path).suffix.lower() in (".npy", ".csv", ".jsonl", ".ndjson", *PARQUET_SUFFIXES):
        raise SinkError(f"a Delta table is a folder: {str(path)!r} names a file")
    return "delta table"


def check_output(path: str | Path, resume: bool = False, overwrite: bool = False, output_format: str = "csv") -> None:
    """A SinkError now, before any work (a large model takes seconds to load),
    where :func:`open_sink` would refuse ``path``: it cannot be written, or it
    holds an earlier run's rows that a new run would replace or mix with (a
    file, a data set folder; ``overwrite``: they are to be replaced).  Files
    an output writes beside ``path`` (a multi-output .npy's) are known once the
    model's outputs are: :func:`refuse_replacing` checks the sink too."""
    kind = sink_kind(path, output_format)
    if kind == "delta table":  # its commits are checked when it is opened (NOTE [ parts committed to a Delta table ])
        writable_folder(path)
        return
    if kind == "iceberg table":  # its snapshots too (NOTE [ parts appended as Iceberg snapshots ])
        return
    if is_storage_url(path):
        check_stored_output(str(path), resume, overwrite)
        return
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
    record: JobRecord | None = None,
    catalog: str = "default",
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
    :func:`rows_after` them: NOTE [ resuming ] in sinks).  ``record``: the job writing it,
    kept beside the output from its first row on; a resume of another job's output is
    refused, naming both (NOTE [ who wrote it ] in sinks).  ``stream_format`` "delta" or
    "iceberg": a Delta table at ``path``, an Iceberg table ``NAMESPACE.TABLE`` of ``catalog``
    (NOTE [ parts committed to a Delta table ], NOTE [ parts appended as Iceberg snapshots ])."""
    kind = sink_kind(path, stream_format)
    unknown = sorted(set(data_dependent) - set(pipe.output_names))
    if unknown:
        raise SinkError(f"data-dependent output(s) {unknown} are not among the outputs written, {pipe.output_names}")
    named = frozenset(data_dependent)
    request = SinkRequest(list(pipe.output_names), lambda: named | pipe.data_dependent_outputs, part_rows,
                          part_seconds, compression, stream, record, catalog)  # fmt: skip
    if kind != "npy":
        _require(kind.split()[0], f"writing {str(path)!r}", SinkError)
    if kind.endswith(" stream"):
        check_output(path, resume)

    def made(at: str | Path, resume: bool, overwrite: bool) -> Sink:
        sink = SINKS[kind](at, resume, overwrite, request)
        # a table's columns a class, .npy keeps the [N, classes] array (NOTE [ class columns ])
        return ClassColumnsSink(sink, pipe.class_labels) if pipe.class_labels and kind != "npy" else sink

    if is_storage_url(path):
        return open_stored_sink(str(path), record, resume, overwrite, _stored(pipe, request))
    if kind not in REPLACED_WHEN_WHOLE:  # a stream, or a table whose commits name the job: no record beside it
        return made(path, resume, overwrite)
    return _replaced_when_whole(path, kind, resume, overwrite, _recorded(made, record, path))


def _stored(pipe: Pipeline | MultiPipeline, r: SinkRequest) -> Callable[[str, bool, bool, bool], Sink]:
    """What makes a stored output's sink (NOTE [ stored outputs ] in sinks.stored)."""

    def stored(url: str, data_set: bool, resume: bool, overwrite: bool) -> Sink:
        sink = StoredParquetSink(
            url, data_set, data_dependent=r.data_dependent, resume=resume, part_rows=r.part_rows,
            compression=r.compression, part_seconds=r.part_seconds,
        )  # fmt: skip
        return ClassColumnsSink(sink, pipe.class_labels) if pipe.class_labels else sink

    return stored


def _recorded(
    made: Callable[[str | Path, bool, bool], Sink], record: JobRecord | None, path: str | Path
) -> Callable[[str | Path, bool, bool], Sink]:
    """``made``, its sink recording the job that writes it (NOTE [ who wrote it ] in sinks)."""

    def recorded(at: str | Path, resume: bool, overwrite: bool) -> Sink:
        if record is None:
            return made(at, resume, overwrite)
        # before the sink looks at the rows: another job's are never kept
        kept_ours = refuse_other_job(at, record, shown=path) if resume else True
        sink = made(at, resume, overwrite)
        if resume:
            refuse_unrecorded(sink, kept_ours, path)
        return RecordingSink(sink, at, record)

    return recorded


#: the kinds of output that ``--overwrite`` writes beside the earlier one (NOTE [ replaced when whole ]): a
#: Parquet file too, whose journal is merged at every close, a stopped or failed run's included
REPLACED_WHEN_WHOLE = ("npy", "csv", "jsonl", "parquet", "parquet data set")


def _replaced_when_whole(
    path: str | Path, kind: str, resume: bool, overwrite: bool, made: Callable[[str | Path, bool, bool], Sink]
) -> Sink:
    """See NOTE [ replaced when whole ]: with ``overwrite``, the sink ``made`` in the
    staging folder beside ``path``, replacing it once whole; resumed there where an
    earlier ``--overwrite`` stopped; else ``made`` at ``path``."""
    finish_replacing(path)  # a whole replacement whose moves a kill cut short
    if not overwrite and not (resume and replacement_under_way(path)):
        return made(path, resume, False)
    if overwrite:
        if kind == "parquet data set":
            refuse_other_files(Path(path))  # the earlier folder is replaced whole: ortpipe's files only
        shutil.rmtree(staging_folder(path), ignore_errors=True)  # an earlier --overwrite that never ended
        staging_folder(path).mkdir()
    return ReplacingSink(made(replacement_of(path), resume, False), path)
