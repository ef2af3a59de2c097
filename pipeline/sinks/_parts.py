"""Parquet files written in parts: codecs and column encodings, part files
closed and renamed into place, a folder's whole parts."""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..util.arrow import to_numpy
from ..util.errors import SinkError

#: Parquet's codecs, as ParquetSink's ``compression`` names them
PARQUET_CODECS = ("snappy", "zstd", "gzip", "brotli", "lz4", "none")


def parquet_codec(name: str) -> str:
    """``name`` if pyarrow can write Parquet with it, else a SinkError listing those it can."""
    import pyarrow as pa

    if name != "none" and (name not in PARQUET_CODECS or not pa.Codec.is_available(name)):
        usable = [c for c in PARQUET_CODECS if c == "none" or pa.Codec.is_available(c)]
        raise SinkError(f"Parquet compression {name!r} is not one this pyarrow writes: {usable}")
    return name


def parquet_writer(path: Path | str, schema: Any, compression: str, filesystem: Any = None) -> Any:
    """A ``ParquetWriter`` for ortpipe's outputs, each column encoded as suits it.

    NOTE [ Parquet encodings ]: pyarrow's default dictionary-encodes every
    column, which suits labels and paths but not what a model writes: a float
    output's values rarely repeat (the dictionary fills, then falls back to
    plain, after the work of both), and an id column counts up (a dictionary of
    every id).  Integer columns (ids, frame indices) are delta-encoded (far
    smaller and faster for counting ids), floats plain, the rest (strings,
    booleans, lists of ints) dictionary-encoded as before (docs/results.md)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    delta, dictionary = {}, []
    for field in schema:
        if pa.types.is_integer(field.type):
            delta[field.name] = "DELTA_BINARY_PACKED"
        elif not _floats(field.type):
            dictionary.append(field.name)
    return pq.ParquetWriter(
        path,
        schema,
        compression=compression,
        use_dictionary=dictionary,
        column_encoding=delta or None,
        filesystem=filesystem,
    )


def _floats(arrow_type: Any) -> bool:
    """Floats, or fixed-size lists of them (a vector output's rows)."""
    import pyarrow as pa

    while pa.types.is_fixed_size_list(arrow_type) or pa.types.is_list(arrow_type):
        arrow_type = arrow_type.value_type
    return bool(pa.types.is_floating(arrow_type))


class ParquetTableFile:
    """A Parquet file written in row groups of about ``row_group_rows``, each column
    chunk compressed with ``compression``: a part of a data set or of a journal; in an object
    store's ``filesystem`` (``path`` then its ``bucket/key``), an object that appears at the close."""

    def __init__(self, path: Path | str, row_group_rows: int, compression: str = "snappy", filesystem: Any = None):
        self.path = path
        self.row_group_rows = row_group_rows
        self.compression = compression
        self.filesystem = filesystem
        self._writer: Any = None
        self._pending: list[Any] = []
        self._pending_rows = 0

    def write(self, batch: Any) -> None:
        if self._writer is None:
            self._writer = parquet_writer(self.path, batch.schema, self.compression, self.filesystem)
        self._pending.append(batch)
        self._pending_rows += batch.num_rows
        if self._pending_rows >= self.row_group_rows:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        # Take the batches first: an interrupt landing after write_table returns
        # must not make close() write the same rows twice.
        pending, self._pending, self._pending_rows = self._pending, [], 0
        if pending:
            self._writer.write_table(pa.Table.from_batches(pending))

    @property
    def started(self) -> bool:
        """Whether its writer was made: the file, once closed, is a Parquet file."""
        return self._writer is not None

    def close(self) -> None:
        if self._writer is None:
            return
        try:
            self._flush()
        finally:
            self._writer.close()  # writes the footer: the file is readable
            self._writer = None

    def discard(self) -> None:
        """A file never started: removed where its opening had made it (an interrupt between
        the open and the writer's start leaves an empty file there, which no reader takes)."""
        if self.filesystem is None:
            Path(self.path).unlink(missing_ok=True)
            return
        with contextlib.suppress(OSError):  # FileNotFoundError included: an object that never appeared
            self.filesystem.delete_file(self.path)


def same_columns(path: object, earlier: Any, schema: Any) -> None:
    """Refuse to resume ``path``, whose rows have the ``earlier`` schema, with rows of another."""
    if not schema.equals(earlier):
        raise SinkError(
            f"cannot resume {str(path)!r}: its columns are {_columns(earlier)}, this run writes "
            f"{_columns(schema)}: the same model, outputs and input are needed"
        )


def _columns(schema: Any) -> str:
    return ", ".join(f"{field.name} ({field.type})" for field in schema)


def last_parquet_row(path: Path | str, filesystem: Any = None) -> dict[str, Any]:
    """The integer and text columns of a Parquet file's last row: what a resumed run's
    input is held against (``jobs.resumed``), read from its last row group alone -
    the outputs' columns, often most of the bytes, are left unread."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = filesystem.open_input_file(path) if filesystem is not None else path
    with pq.ParquetFile(source) as file:
        text = (pa.types.is_integer, pa.types.is_string, pa.types.is_large_string)
        keys = [f.name for f in file.schema_arrow if any(kind(f.type) for kind in text)]
        group = file.read_row_group(file.metadata.num_row_groups - 1, columns=keys)
    return group.slice(group.num_rows - 1).to_pylist()[0] if group.num_rows else {}  # type: ignore[no-any-return]


def parquet_columns(paths: Sequence[Path | str], names: Sequence[str], filesystem: Any = None) -> dict[str, np.ndarray]:
    """Those of the columns ``names`` that the Parquet files ``paths`` (of one schema) have,
    read alone and joined in order (a resumed run's check of the rows it keeps)."""
    import pyarrow.parquet as pq

    if not paths:
        return {}
    present = [name for name in names if name in pq.read_schema(paths[0], filesystem=filesystem).names]
    tables = [pq.read_table(path, columns=present, filesystem=filesystem) for path in paths]
    return {name: np.concatenate([to_numpy(table[name]) for table in tables]) for name in present}


#: a data set's part files: their names sort in the order they were written, and are read back in
PART = "part-{:05d}.parquet"

#: a part file's name, its number the group
PART_NAME = re.compile(r"part-(\d{5,})\.parquet")

#: a part while it is written: hidden (readers leave names starting with . out) until it is whole
_IN_PROGRESS = ".{}.inprogress"

#: a data set's part is closed once its rows hold this many bytes (arrow's, before compression)
DEFAULT_PART_BYTES = 256 << 20

#: the empty file that says a data set is complete (Spark's name; readers leave names starting with _ out)
SUCCESS = "_SUCCESS"
#: a run's first part closes after this many seconds at most, each next one after twice the
#: last, up to ``part_seconds``: an abort early in a run (a second Ctrl-C) loses at most the
#: rows of the last few seconds, not everything written before the first ``part_seconds``
EARLY_PART_S = 2.0


def durable(path: Path) -> None:
    """``path`` (a file, or a folder's entries) written through to the disk: a part's
    name says it is whole only once its bytes would survive the machine going down
    (a pre-empted VM, a power cut), not only the process.  A folder a file system
    cannot sync is left as it is."""
    folder = path.is_dir()
    try:
        descriptor = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if folder else 0))
    except OSError:
        if folder:
            return
        raise
    try:
        os.fsync(descriptor)
    except OSError:
        if not folder:
            raise
    finally:
        os.close(descriptor)


def whole_parts(folder: Path) -> list[Path]:
    """The whole part files of a data set folder ortpipe writes, in order."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if PART_NAME.fullmatch(p.name))


def parquet_rows(paths: Iterable[Path]) -> int:
    """The rows Parquet files hold, from their footers."""
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(path).num_rows for path in paths)


def clear_data_set(folder: Path) -> None:
    """Remove what ortpipe writes in a data set folder - whole and hidden parts, ``_SUCCESS`` -
    and nothing else (a folder holding other files is still refused)."""
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        ours = PART_NAME.fullmatch(path.name) or path.name == SUCCESS
        hidden_part = path.name.startswith(".part-") and path.name.endswith(".inprogress")
        if (ours or hidden_part) and path.is_file():
            path.unlink()


def refuse_used_folder(folder: Path) -> None:
    """A new data set's refusal of a folder that holds an earlier run's parts (they
    would be mixed) or files of other kinds (a data set has a folder of its own)."""
    parts = whole_parts(folder)
    if parts:
        raise SinkError(
            f"{str(folder)!r} holds {len(parts)} part file(s) of an earlier run: resume to go on from them "
            "(ortpipe run --resume), or replace them (--overwrite)"
        )
    refuse_other_files(folder)


def refuse_other_files(folder: Path) -> None:
    """A data set's refusal of a folder that holds files of other kinds than its own
    (visible ones: its hidden parts are its own)."""
    others = sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) if folder.is_dir() else []
    others = [name for name in others if not PART_NAME.fullmatch(name) and name != SUCCESS]
    if others:
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise SinkError(
            f"cannot write a data set into {str(folder)!r}: it holds other files ({shown}); a data set is written "
            "into a folder of its own: name a new one"
        )


class ParquetParts:
    """A Parquet data set written as a folder of part files (:data:`PART`), made
    at the first rows; a part is closed once it holds ``part_rows`` rows or
    ``part_bytes`` bytes, whichever comes first.  Each part is written under a
    hidden name and renamed when closed, so the folder only ever holds whole,
    readable parts, which Spark, pyarrow and :class:`sources.ParquetDatasetSource`
    read as one table, in order: a killed run loses only the part it was
    writing (NOTE [ resuming ])."""

    def __init__(
        self,
        folder: Path,
        file: Callable[[Path], ParquetTableFile],
        part_rows: int | None,
        part_bytes: int,
        part_seconds: float | None = None,
    ):
        self.folder = folder
        #: a part's file, written in row groups as the sink says
        self._file = file
        self.part_rows, self.part_bytes, self.part_seconds = part_rows, part_bytes, part_seconds
        self._part: ParquetTableFile | None = None
        self._number = 0
        self._rows = self._bytes = 0
        self._opened_at = 0.0
        self._closed_by_this_run = 0
        #: the earlier run's schema, when resuming a folder that holds parts (NOTE [ resuming ])
        self._earlier: Any = None

    def resume(self) -> int:
        """The rows of the whole parts an earlier run left, to be kept (the part it was
        writing when it was killed is left hidden, and written anew)."""
        parts = self._listed()
        numbers = [int(PART_NAME.fullmatch(p.name).group(1)) for p in parts]  # type: ignore[union-attr]
        if numbers != list(range(len(parts))):
            raise SinkError(
                f"cannot resume {str(self.folder)!r}: its parts are not numbered 0, 1, 2, ... as ortpipe writes them: "
                f"{[p.name for p in parts]}"
            )
        import pyarrow.parquet as pq

        rows = 0
        for part in parts:
            path, filesystem = self._located(part)
            try:
                metadata = pq.read_metadata(path, filesystem=filesystem)
            except Exception as exc:
                raise SinkError(f"cannot resume {str(self.folder)!r}: {str(part)!r} is not readable ({exc})") from exc
            rows += metadata.num_rows
            if self._earlier is None:
                self._earlier = metadata.schema.to_arrow_schema()
        self._number = len(parts)
        return rows

    def _listed(self) -> list[Any]:
        """The whole parts in the folder, in order."""
        return whole_parts(self.folder)

    def _located(self, part: Any) -> tuple[Any, Any]:
        """Where pyarrow reads a part: its path, and its filesystem (None: the local one)."""
        return part, None

    def last_row(self) -> dict[str, Any] | None:
        """The last row of the earlier run's last whole part (None when there is none)."""
        parts = self._listed() if self._earlier is not None else []
        return last_parquet_row(*self._located(parts[-1])) if parts else None

    def columns(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        """Those of the columns ``names`` the earlier run's whole parts have, whole, in order."""
        located = [self._located(part) for part in (self._listed() if self._earlier is not None else [])]
        return parquet_columns([path for path, _ in located], names, located[0][1] if located else None)

    def keep_parts(self, parts: int) -> None:
        """Go on after the first ``parts`` whole parts (a side output's, as many as its main
        table kept): any after them, from a run killed while it closed its parts, are removed."""
        whole = self._listed()
        if len(whole) < parts:
            raise SinkError(
                f"cannot resume {str(self.folder)!r}: it holds {len(whole)} part file(s), its main table {parts}"
            )
        for extra in whole[parts:]:
            extra.unlink(missing_ok=True)
        self._number = parts

    @property
    def parts(self) -> int:
        """Whole parts in the folder: kept, and closed by this run."""
        return self._number

    @property
    def full(self) -> bool:
        """The open part holds ``part_rows`` rows or ``part_bytes`` bytes, or was opened
        ``part_seconds`` ago (less for a run's first parts: :data:`EARLY_PART_S`): time to close it."""
        if self._part is None:
            return False
        if (self.part_rows is not None and self._rows >= self.part_rows) or self._bytes >= self.part_bytes:
            return True
        if self.part_seconds is None:
            return False
        limit = min(self.part_seconds, EARLY_PART_S * 2 ** min(self._closed_by_this_run, 30))
        return time.monotonic() - self._opened_at >= limit

    def write(self, batch: Any) -> None:
        if self._part is None:
            self._part = self._start(batch.schema)
            self._opened_at = time.monotonic()
        self._part.write(batch)
        self._rows += batch.num_rows
        self._bytes += batch.nbytes

    def _start(self, schema: Any) -> ParquetTableFile:
        if self._earlier is not None:  # this run's parts must be of the earlier run's columns
            same_columns(self.folder, self._earlier, schema)
        self.folder.mkdir(exist_ok=True)
        self._unmarked()
        # a killed run's part of this number, never renamed, is written over
        return self._file(self.folder / _IN_PROGRESS.format(PART.format(self._number)))

    def _unmarked(self) -> None:
        """Rows are being added: the folder's ``_SUCCESS`` removed until the job marks it
        whole again - before this run's first part only (only this run writes one, at its
        end; in object storage a removal is a request)."""
        if not self._closed_by_this_run:
            (self.folder / SUCCESS).unlink(missing_ok=True)

    def finish(self) -> None:
        """Close the open part (if any) and rename it into place."""
        if self._part is None:
            return
        part, self._part = self._part, None
        if not part.started:  # interrupted as it opened: no rows in it, and no part of the folder
            part.discard()
            self._rows = self._bytes = 0
            return
        part.close()  # a failure here leaves it hidden: the folder holds whole parts only
        self._commit(part)
        self._number += 1
        self._closed_by_this_run += 1
        self._rows = self._bytes = 0

    def _commit(self, part: ParquetTableFile) -> None:
        """A closed part given its name: on the disk first, then renamed into place."""
        durable(Path(part.path))  # on the disk before its name says it is whole
        os.replace(part.path, self.folder / PART.format(self._number))
        durable(self.folder)

    def close(self) -> None:
        self.finish()

    def mark_complete(self) -> None:
        """An empty ``_SUCCESS`` in the folder, where there is one: every row asked for is in it."""
        if self.folder.is_dir():
            (self.folder / SUCCESS).touch()
