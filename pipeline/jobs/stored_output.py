"""An output URL (``s3://bucket/out/``, ``s3://bucket/out.parquet``): its kind, the checks made
before any work, and its sink, recorded and replaced when whole as a local output's
(NOTE [ stored outputs ] in ``sinks.stored``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

from ..sinks import JobRecord, RecordingSink, SinkError, refuse_other_job, refuse_unrecorded
from ..sinks.stored import (
    StoredReplacingSink,
    finish_stored_replacing,
    refuse_file_resume,
    refuse_used_prefix,
    stored_replacement_under_way,
    stored_staging,
)
from ..sources import PARQUET_SUFFIXES
from ..util.storage import StoredPath


def stored_sink_kind(url: str) -> str:
    """ "parquet data set" (a prefix: a trailing / or no suffix) or "parquet" (one object)."""
    suffix = PurePosixPath(url).suffix.lower()
    if url.endswith("/") or not suffix:
        return "parquet data set"
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    raise SinkError(
        f"cannot write {url!r}: outputs in object storage are Parquet, a data set (a prefix: s3://bucket/out/) or "
        f"one object (.parquet); write {suffix} files locally and copy them up"
    )


def check_stored_output(url: str, resume: bool, overwrite: bool) -> None:
    """A SinkError now, before any work, where :func:`open_stored_sink` would refuse ``url``:
    no such bucket, credentials refused, a file to resume, an earlier output not to replace."""
    kind = stored_sink_kind(url)
    try:
        target = StoredPath.of(url)
        finish_stored_replacing(target)  # a whole replacement whose copies a kill cut short
        target.check_bucket()
        if kind == "parquet":
            if resume and target.is_file():  # nothing committed: the sink starts it again, and says so
                refuse_file_resume(target)
            if not overwrite and target.is_file():
                raise SinkError(f"{url!r} holds an earlier run's rows: --overwrite replaces them")
        elif not resume and not overwrite:
            refuse_used_prefix(target)
    except OSError as exc:
        raise SinkError(str(exc)) from exc


def open_stored_sink(
    url: str,
    record: JobRecord | None,
    resume: bool,
    overwrite: bool,
    made: Callable[[str, bool, bool, bool], Any],
) -> Any:
    """The sink of ``url``: ``made(url, data_set, resume, overwrite)`` at it, or under its
    staging prefix where an overwrite replaces a data set once whole (or such a
    replacement stopped halfway is resumed); recorded by ``record``'s job."""
    data_set = stored_sink_kind(url) == "parquet data set"
    try:
        target = StoredPath.of(url)
        finish_stored_replacing(target)
        staged = data_set and (overwrite or (resume and stored_replacement_under_way(target)))
        if staged:
            if overwrite:
                stored_staging(target).remove_tree()  # an earlier --overwrite that never ended
            at = stored_staging(target) / target.name
        else:
            at = target
        recorded = True
        if record is not None and resume:
            recorded = refuse_other_job(at, record, shown=url)
        sink = made(at.url, data_set, resume, False)
        if record is not None and resume:
            refuse_unrecorded(sink, recorded, url)
    except OSError as exc:
        raise SinkError(str(exc)) from exc
    if record is not None:
        sink = RecordingSink(sink, at, record)
    return StoredReplacingSink(sink, target) if staged else sink
