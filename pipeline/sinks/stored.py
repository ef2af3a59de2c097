"""Outputs in object storage: a Parquet data set under a prefix, or one Parquet object.

NOTE [ stored outputs ]: an object store has no rename (S3's "move" is a copy,
then a delete), so the local outputs' hidden names renamed into place
(NOTE [ resuming ]) do not carry over.  What does, as the S3A and Spark
committers use it: an object appears whole or not at all - a PUT, or a
multipart upload, which no listing shows until it is completed at the close.
(Not on Azure through pyarrow, whose blob shows as it is opened: there a resume
removes the unfinished part a kill left, NOTE [ objects seen before they are whole ].)

* A data set (``s3://bucket/out/``): each part is written under its own name,
  ``part-NNNNN.parquet``, through pyarrow's output stream (one PUT at its close
  where it is smaller than a piece of about 10 MB,
  NOTE [ one request for a small object ]; else a multipart upload, its pieces
  uploaded in the background as the part fills; retried by the filesystem's own
  strategy: NOTE [ retries ]) and appears when the part closes, which waits for
  its last piece.  ``_SUCCESS`` is written last, once the job wrote every row,
  and removed when rows are added.  ``--resume`` goes on after the whole parts
  listed (numbered 0, 1, 2, ... as ortpipe writes them); the upload a killed
  run left unfinished is aborted first where the store says which
  (``util.conditions``: S3 through boto3), else left to the bucket's lifecycle
  rule (AbortIncompleteMultipartUpload), and never seen either way.
* ``--overwrite`` of a data set writes the new parts under
  ``.ortpipe-overwrite.<name>/<name>/`` beside it; once whole, a ``MOVING``
  object is written there, the earlier ``_SUCCESS`` removed, the new parts
  copied over the earlier ones by the store (no byte comes here), the earlier
  parts beyond them removed, ``_SUCCESS`` copied last, the staging prefix
  removed.  The earlier output is whole until ``MOVING`` is written, the new one
  is whole from then on in the staging prefix, and a run that finds
  ``MOVING`` (a kill during the copies) finishes them first.  A reader that
  waits for ``_SUCCESS`` never sees a mix.
* One file (``s3://bucket/out.parquet``): written as the hidden object
  ``.<name>.ortpipe-writing`` beside it, copied to its name by the store once
  the job wrote every row, then removed: a stopped or killed run, or an
  ``--overwrite``'s, never leaves a part of the rows under the output's name.
  An object cannot be appended to, so a file is not resumed: a data set is.
  (S3 copies up to 5 GB in one request; a larger object is copied in pieces through
  boto3, ``util.conditions.copy_object``.)

The job's record (NOTE [ who wrote it ]) is an object beside the output, as a
local one is a file beside it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..util.conditions import conditions_of, copy_object
from ..util.errors import SinkError
from ..util.storage import StoredPath
from ._base import DataDependent, as_list_columns
from ._handing_on import HandingOn
from ._parts import (
    DEFAULT_PART_BYTES,
    PART,
    PART_NAME,
    SUCCESS,
    ParquetParts,
    ParquetTableFile,
    same_columns,
)
from .parquet import ParquetTables, PartsStorage

#: in a staging prefix: its data set is whole and being copied over the earlier one
MOVING = "MOVING"
#: the hidden prefix beside a stored output that its replacement is written under
STAGING_PREFIX = ".ortpipe-overwrite."


def whole_stored_parts(folder: StoredPath) -> list[StoredPath]:
    """The parts of a stored data set, in order (every object listed is whole, but on a store
    that shows one before its close the last of a killed run's: :func:`drop_unfinished_part`)."""
    return [entry for entry in folder.iterdir() if PART_NAME.fullmatch(entry.name)]


def stored_staging(path: StoredPath) -> StoredPath:
    """The hidden prefix beside ``path`` that its replacement is written under."""
    return path.parent / f"{STAGING_PREFIX}{path.name}"


class StoredParts(ParquetParts):
    """A data set's parts under a prefix of an object store (NOTE [ stored outputs ]): a local
    folder's :class:`~pipeline.sinks._parts.ParquetParts`, each part written under its own
    name (it appears when its upload completes, at its close: nothing to rename), the parts
    listed from the store."""

    folder: StoredPath  # type: ignore[assignment]  # the prefix, as the local class's folder

    def __init__(
        self,
        folder: StoredPath,
        file: Callable[[StoredPath], ParquetTableFile],
        part_rows: int | None,
        part_bytes: int,
        part_seconds: float | None,
    ) -> None:
        super().__init__(folder, file, part_rows, part_bytes, part_seconds)  # type: ignore[arg-type]
        self._stored_file = file

    def resume(self) -> int:
        """The rows of the parts an earlier run left, kept; its unfinished upload aborted, or
        on a store that shows one (Azure), its unfinished part removed."""
        conditions = conditions_of(self.folder)
        if conditions is not None:
            conditions.abort_uploads(self.folder.key + "/")
        if self.folder.shows_unfinished:
            drop_unfinished_part(self.folder)
        return super().resume()

    def _listed(self) -> list[Any]:
        return whole_stored_parts(self.folder)

    def _located(self, part: Any) -> tuple[Any, Any]:
        return part.path, part.fs

    def _start(self, schema: Any) -> ParquetTableFile:
        if self._earlier is not None:  # this run's parts must be of the earlier run's columns
            same_columns(self.folder.url, self._earlier, schema)
        self._unmarked()
        return self._stored_file(self.folder / PART.format(self._number))

    def _commit(self, part: ParquetTableFile) -> None:
        """Nothing: the part's upload completed at its close, under its name."""

    def mark_complete(self) -> None:
        if self._number:
            (self.folder / SUCCESS).write_bytes(b"")


def drop_unfinished_part(folder: StoredPath) -> None:
    """The last part of ``folder`` removed where it is not whole (no Parquet footer): on a store
    that shows an object before its close, the part a killed run was writing
    (NOTE [ objects seen before they are whole ]).  Its rows are written again; the parts
    before it closed whole before it was opened."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = whole_stored_parts(folder)
    if not parts:
        return
    last = parts[-1]
    try:
        pq.read_metadata(last.path, filesystem=last.fs)
    except pa.ArrowInvalid:  # no footer, or no bytes at all (a failed read is an OSError: said by the resume)
        last.unlink(missing_ok=True)


class StoredFile:
    """One Parquet object, written aside and copied to its name once the job is whole."""

    def __init__(self, target: StoredPath, file: Callable[[StoredPath], ParquetTableFile]) -> None:
        self.target = target
        self.aside = target.parent / f".{target.name}.ortpipe-writing"
        self._file = file
        self._table: ParquetTableFile | None = None

    #: one object: closed once, at the end (a data set's parts close as they fill)
    full = False
    #: what a resume started again, and why
    restarted: list[str] = []  # noqa: RUF012 - set per instance by resume, never changed in place

    def resume(self) -> int:
        """Nothing kept: an object is written whole at the end, so a run stopped before it holds
        no rows there and starts again (said); one that ended is not appended to."""
        if self.target.is_file():
            refuse_file_resume(self.target)
        self.restarted = [
            f"nothing of {self.target.url!r} was committed before the stop (an object is written whole, at the "
            "end): it is written again from the first row"
        ]
        return 0

    def write(self, batch: Any) -> None:
        if self._table is None:
            self._table = self._file(self.aside)
        self._table.write(batch)

    def close(self) -> None:
        if self._table is not None:
            self._table.close()  # the hidden object is whole; the output's name is untouched

    def mark_complete(self) -> None:
        if self._table is None:  # no rows: an empty table has no schema to write
            return
        copy_object(self.aside, self.target)
        self.aside.unlink(missing_ok=True)


class StoredStorage(PartsStorage):
    """The tables of a sink in an object store (NOTE [ stored outputs ]): a data set's parts
    as a local folder's (:class:`~pipeline.sinks.parquet.PartsStorage`: when parts close,
    what a resume keeps, ``_SUCCESS``), or one object each.  The sink names its tables by
    local-looking paths of their ``bucket/key``; ``root`` gives them their store."""

    def __init__(
        self,
        root: StoredPath,
        open_table: Callable[[StoredPath], ParquetTableFile],
        data_set: bool,
        part_rows: int | None = None,
        part_bytes: int = DEFAULT_PART_BYTES,
        part_seconds: float | None = None,
        fresh: bool = True,
    ) -> None:
        super().__init__(lambda path: open_table(self.stored(path)), part_rows, part_bytes, part_seconds, fresh)
        self.open_stored = open_table
        self.root, self.data_set = root, data_set

    def stored(self, path: Path) -> StoredPath:
        return StoredPath(self.root.fs, str(path), self.root.scheme)

    def checked(self, path: Path) -> Path:
        return path

    def open(self, path: Path) -> Any:
        at = self.stored(path)
        if not self.data_set:
            return StoredFile(at, self.open_stored)
        if self.fresh:
            refuse_used_prefix(at)
        return StoredParts(at, self.open_stored, self.part_rows, self.part_bytes, self.part_seconds)

    def existing(self, path: Path) -> list[Any]:
        at = self.stored(path)
        if self.data_set:
            return [at] if whole_stored_parts(at) else []
        return [at] if at.is_file() else []

    def side_written(self, path: Path) -> bool:
        return self.stored(path).exists()


def refuse_file_resume(target: StoredPath) -> None:
    """A stored file is not resumed: an object cannot be appended to."""
    raise SinkError(
        f"cannot resume {target.url!r}: an object cannot be appended to; write a data set "
        f"({target.parent.url}/{Path(target.name).stem}/) to resume a long job"
    )


def refuse_used_prefix(folder: StoredPath) -> None:
    """A new data set's refusal of a prefix that holds an earlier run's parts or other objects."""
    entries = folder.iterdir()
    parts = [e for e in entries if PART_NAME.fullmatch(e.name)]
    if parts:
        raise SinkError(
            f"{folder.url!r} holds {len(parts)} part file(s) of an earlier run: resume to go on from them "
            "(ortpipe run --resume), or replace them (--overwrite)"
        )
    others = [e.name for e in entries if e.name != SUCCESS and not e.name.startswith(".")]
    if others:
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise SinkError(
            f"cannot write a data set under {folder.url!r}: it holds other objects ({shown}); a data set is written "
            "under a prefix of its own: name a new one"
        )


class StoredParquetSink(ParquetTables):
    """Parquet in an object store (NOTE [ stored outputs ]): a data set of parts under
    ``url`` (``data_set``), or one object; the columns as the local Parquet sinks write them."""

    def __init__(
        self,
        url: str,
        data_set: bool,
        row_group_rows: int = 65536,
        data_dependent: DataDependent = (),
        resume: bool = False,
        part_rows: int | None = None,
        part_bytes: int = DEFAULT_PART_BYTES,
        compression: str = "snappy",
        part_seconds: float | None = None,
    ) -> None:
        root = StoredPath.of(url)
        self._parquet_file(row_group_rows, compression)  # the codec checked, the row groups' size

        def table(at: StoredPath) -> ParquetTableFile:
            return ParquetTableFile(at.path, self.row_group_rows, self.compression, at.fs)

        storage = StoredStorage(root, table, data_set, part_rows, part_bytes, part_seconds, fresh=not resume)
        self.part_rows, self.part_bytes, self.part_seconds = part_rows, part_bytes, part_seconds
        super().__init__(Path(root.path), storage, as_list_columns, data_dependent, resume)
        self.url = root.url

    @property
    def restarted(self) -> list[str]:
        """What a resume started again (a single object whose run stopped before its end)."""
        return list(getattr(self._main, "restarted", []))


class StoredReplacingSink(HandingOn):
    """``sink``, writing under the staging prefix of ``target``, whose data set replaces
    the earlier one once the job wrote every row (NOTE [ stored outputs ])."""

    def __init__(self, sink: Any, target: StoredPath) -> None:
        super().__init__(sink)
        self.replaces = target
        self.url = target.url  # what the run writes, in its messages: not the staging prefix

    def mark_complete(self) -> None:
        super().mark_complete()
        move_up_stored(stored_staging(self.replaces))


def move_up_stored(staging: StoredPath) -> None:
    """Every data set and object under ``staging`` copied over its namesake beside it, then
    the staging prefix removed; ``MOVING`` first, so that a kill is finished by the next open."""
    (staging / MOVING).write_bytes(b"")
    beside = staging.parent
    for entry in staging.iterdir():
        if entry.name == MOVING:
            continue
        target = beside / entry.name
        if entry.is_dir():
            _replace_data_set(entry, target)
        else:
            copy_object(entry, target)
    for entry in staging.iterdir():  # MOVING last: until it goes, the copies are to be finished
        if entry.name != MOVING:
            entry.remove_tree() if entry.is_dir() else entry.unlink(missing_ok=True)
    (staging / MOVING).unlink(missing_ok=True)
    staging.remove_tree()  # a store with folders of its own (SeaweedFS's filer) keeps the empty prefix


def _replace_data_set(new: StoredPath, old: StoredPath) -> None:
    """``old``'s objects replaced by ``new``'s (ortpipe's parts, or Ray's files), ``_SUCCESS``
    removed first and copied last, the earlier objects of other names removed."""
    (old / SUCCESS).unlink(missing_ok=True)
    files = [entry for entry in new.iterdir() if entry.name != SUCCESS]
    for file in files:
        copy_object(file, old / file.name)
    kept = {file.name for file in files}
    for stale in old.iterdir():
        if stale.name not in kept and not stale.is_dir():
            stale.unlink(missing_ok=True)
    if (new / SUCCESS).is_file():
        (new / SUCCESS).copy_to(old / SUCCESS)


def finish_stored_replacing(target: StoredPath) -> bool:
    """Finish the copies of a whole replacement of ``target`` that a kill cut short; True when it did."""
    staging = stored_staging(target)
    if not (staging / MOVING).is_file():
        return False
    move_up_stored(staging)
    return True


def stored_replacement_under_way(target: StoredPath) -> bool:
    """Whether an ``--overwrite`` of ``target`` stopped before it was whole (its staging prefix holds objects)."""
    return stored_staging(target).is_dir()
