"""What :func:`jobs.open_source` is asked for, as one value: ``SourceOptions``.

Each field is a choice of some kinds of input only (a table's columns, a
video's stride, an image's JPEG draft, a stream's reconnecting); an option
given for a kind that has no use for it is refused, not ignored
(:meth:`SourceOptions.refuse_for`).  The decoding choices become the
sources' own values once (:meth:`video_decoding`, :meth:`image_decoding`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..sources import STREAM_TIMEOUT_S, Fit, ImageDecoding, SourceError, VideoDecoding, is_pipe, is_stream_url
from ..sources.table_formats import table_format
from ..util.storage import is_storage_url


@dataclass(frozen=True)
class SourceOptions:
    """How an input is read (``open_source(path, pipe, batch_size, options)``, or the same
    names as keywords).  See :func:`jobs.open_source` for what each does."""

    #: the model input a one-input source (a .npy, video, images) feeds
    input_name: str | None = None
    #: a table's columns by model input (NOTE [ tables fill slots ])
    columns: Mapping[str, Sequence[str]] | None = None
    id_column: str | None = None
    #: a table's columns written through beside the outputs, unchanged (NOTE [ the table plan ])
    keep_columns: Sequence[str] = ()
    #: frames and images made this (width, height), as ``fit`` says (NOTE [ fitting ])
    size: tuple[int, int] | None = None
    pix_fmt: str = "rgb24"
    decode_threads: int | None = None
    skip_unreadable: bool = False
    #: a video's every N-th frame, or ``fps`` frames a second
    every: int = 1
    fps: float | None = None
    jpeg_draft: bool = False
    #: the column of a table that lists (or holds) images, or lists videos
    image_column: str | None = None
    video_column: str | None = None
    fit: str | Fit | None = None
    exif_orientation: bool = False
    #: videos of a folder or table decoded at once (NOTE [ videos decoded at once ])
    videos_at_once: int | None = None
    #: FFmpeg's demuxer and its options (NOTE [ video streams ])
    video_format: str | None = None
    video_options: Mapping[str, object] | None = None
    #: (K, N): the K-th of N groups of a folder of tar archives (NOTE [ image archives ])
    archive_shard: tuple[int, int] | None = None
    #: a stream's URL opened again this many times in a row when it drops (NOTE [ reconnecting ])
    reconnect: int = 0
    stream_timeout_s: float | None = None
    #: the device videos are decoded on (NOTE [ decoding on the GPU ])
    hwaccel: str | None = None
    #: more live streams read with the path at once (NOTE [ several streams ])
    streams: Sequence[str | Path] = field(default_factory=tuple)
    batch_wait_s: float | None = None
    #: the version of a Delta table read, or an Iceberg table's snapshot (None: the latest;
    #: NOTE [ a table format's folder ])
    table_version: int | None = None
    #: "iceberg": the path is ``NAMESPACE.TABLE`` of ``catalog`` (pyiceberg's configuration, ``util.iceberg``)
    input_format: str | None = None
    catalog: str = "default"

    def refuse_for(self, kind: str, path: str | Path) -> None:
        """A SourceError where an option was given that the ``kind`` of input at ``path`` has no use for."""
        if self.stream_timeout_s is not None and (not is_stream_url(path) or is_pipe(path)):
            raise SourceError(f"a stream's timeout is for a stream's URL (a pipe is waited on); {str(path)!r} is none")
        if self.input_format is not None and self.input_format != "iceberg":
            raise SourceError(f"input_format is 'iceberg' or None, got {self.input_format!r}")
        if self.input_format == "iceberg":
            return
        if self.table_version is not None and (is_storage_url(path) or table_format(path) != "delta"):
            raise SourceError(f"a version (--input-version) is for a Delta table's folder; {str(path)!r} is none")
        for given, kinds, what in self._uses():
            if given and kind not in kinds:
                raise SourceError(f"{what}; {str(path)!r} is a {kind} source")

    def _uses(self) -> list[tuple[bool, tuple[str, ...], str]]:
        """Each option given or not, the kinds of input it is for, and what it is."""
        videos = ("video", "videos", "streams")
        return [
            (
                bool(self.keep_columns),
                ("parquet", "csv", "jsonl"),
                "writing columns through (--keep) is for a table's rows",
            ),
            (self.every != 1 or self.fps is not None, videos, "taking every N-th frame is for videos"),
            (
                self.skip_unreadable,
                ("images", "videos", "streams"),
                "skipping unreadable files is for a folder of images or videos, or several streams",
            ),
            (self.jpeg_draft, ("images",), "decoding JPEGs in draft is for images"),
            (
                self.videos_at_once is not None,
                ("videos",),
                "decoding videos at once is for a folder or table of videos",
            ),
            (self.exif_orientation, ("images",), "turning pictures as their EXIF says is for images"),
            (
                self.video_format is not None or bool(self.video_options),
                ("video", "streams"),
                "FFmpeg's format and options for opening are for a video or streams",
            ),
            (bool(self.reconnect), ("video", "streams"), "reconnecting is for a stream's URL"),
            (self.hwaccel is not None, videos, "decoding on a GPU is for videos"),
            (
                self.batch_wait_s is not None,
                ("streams",),
                "a batch's wait for frames is for several streams read at once",
            ),
            (
                Fit.parse(self.fit).moves,
                ("video", "videos", "images", "streams"),
                "cropping or padding to a size is for video frames and images",
            ),
        ]

    def video_decoding(self) -> VideoDecoding:
        """The video sources' decoding choices."""
        return VideoDecoding(
            size=self.size,
            pix_fmt=self.pix_fmt,
            decode_threads=self.decode_threads,
            skip_unreadable=self.skip_unreadable,
            every=self.every,
            fps=self.fps,
            fit=self.fit,
            videos_at_once=self.videos_at_once,
            hwaccel=self.hwaccel,
            format=self.video_format,
            options=dict(self.video_options or {}),
            reconnect=self.reconnect,
            timeout_s=STREAM_TIMEOUT_S if self.stream_timeout_s is None else self.stream_timeout_s,
        )

    def image_decoding(self) -> ImageDecoding:
        """The image sources' decoding choices."""
        return ImageDecoding(
            size=self.size,
            decode_threads=self.decode_threads,
            skip_unreadable=self.skip_unreadable,
            jpeg_draft=self.jpeg_draft,
            fit=self.fit,
            exif_orientation=self.exif_orientation,
        )
