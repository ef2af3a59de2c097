"""Parquet outputs: a file (journaled) and a data set (a folder of parts)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._base import DataDependent, as_list_columns, writable, writable_folder
from ._parts import (
    DEFAULT_PART_BYTES,
    ParquetParts,
    ParquetTableFile,
    clear_data_set,
    durable,
    parquet_codec,
    refuse_used_folder,
    whole_parts,
)
from ._table import OpenTable, Storage, TableSink
from .journal import JOURNAL_PART_BYTES, JOURNAL_PART_SECONDS, MERGED, Journal, journal_of, remove_journal


def _checked_parts(part_rows: int | None, part_seconds: float | None) -> None:
    if part_rows is not None and part_rows < 1:
        raise ValueError(f"part_rows must be >= 1 or None, got {part_rows}")
    if part_seconds is not None and not part_seconds > 0:
        raise ValueError(f"part_seconds must be > 0 or None, got {part_seconds}")


class PartsStorage(Storage):
    """A folder of Parquet parts a table (a data set), each part closed once it holds
    ``part_rows`` rows or about ``part_bytes`` bytes (or was opened ``part_seconds``
    ago) and renamed into place only then; every output's part closes at the same
    batch as the main table's, the sides' first.  ``fresh``: the folder must hold no
    parts (``overwrite``: ortpipe's own files are removed first)."""

    def __init__(
        self,
        open_file: OpenTable,
        part_rows: int | None,
        part_bytes: int,
        part_seconds: float | None,
        fresh: bool,
        overwrite: bool = False,
    ) -> None:
        _checked_parts(part_rows, part_seconds)
        super().__init__(open_file, "")
        self.part_rows, self.part_bytes, self.part_seconds = part_rows, part_bytes, part_seconds
        self.fresh, self.overwrite = fresh, overwrite

    def checked(self, path: Path) -> Path:
        return writable_folder(path)

    def open(self, path: Path) -> Any:
        if self.overwrite:
            clear_data_set(path)
        if self.fresh:
            refuse_used_folder(path)
        return ParquetParts(path, self.open_table, self.part_rows, self.part_bytes, self.part_seconds)

    def written(self, main: Any, sides: Sequence[Any]) -> None:
        if main.full:  # every output's part closes at the same batch as the main table's: the sides first
            for side in sides:
                side.finish()
            main.finish()

    def resume_side(self, side: Any, main: Any, path: Path) -> None:
        side.resume()
        side.keep_parts(main.parts)  # a run killed while closing its parts may have closed a side's more

    def restart_side(self, side: Any) -> None:
        side.keep_parts(0)  # a side part closed before the main table's first one is of no kept batch

    def complete(self, main: Any, sides: Sequence[Any]) -> None:
        """The job wrote every row (``mark_complete``): a ``_SUCCESS`` in each folder."""
        for parts in (main, *sides):
            parts.mark_complete()


class JournalStorage(PartsStorage):
    """One Parquet file a table, written as a journal of parts beside it until it is
    closed (NOTE [ journaled Parquet ]): parts as a data set's, merged into the file at
    the close; a file has no ``_SUCCESS`` (it is there, whole, once closed)."""

    def __init__(
        self, open_file: OpenTable, part_rows: int | None, part_bytes: int, part_seconds: float | None, fresh: bool
    ) -> None:
        super().__init__(open_file, part_rows, part_bytes, part_seconds, fresh)
        self.suffix = ".parquet"

    def checked(self, path: Path) -> Path:
        return writable(path)

    def open(self, path: Path) -> Journal:
        return Journal(path, self.open_table, self.part_rows, self.part_bytes, self.part_seconds, self.fresh)

    def existing(self, path: Path) -> list[Path]:
        """The file, if it holds an earlier run's rows, or its journal, if a killed run left one."""
        journal = journal_of(path)
        return Storage.existing(self, path) + ([journal] if whole_parts(journal) else [])

    def side_written(self, path: Path) -> bool:
        return path.exists() or journal_of(path).is_dir()

    def restart_side(self, side: Any) -> None:
        side.restart()

    def complete(self, main: Any, sides: Sequence[Any]) -> None:
        """A file has no ``_SUCCESS``: it is there, whole, once closed."""

    def close(self, main: Any, sides: Sequence[Any], path: Path) -> None:
        journals = [*sides, main]
        try:
            super().close(main, sides, path)  # every part closed: a failure leaves the journals, to resume from
            journals = [journal for journal in journals if journal.folder.is_dir()]
            merged = [(journal, journal.merge()) for journal in journals]
        except BaseException:
            for journal in journals:
                journal.abandon()
            raise
        moves = [(journal, file) for journal, file in merged if file is not None]
        if moves:
            main.folder.mkdir(exist_ok=True)
            for _, file in moves:
                durable(file)
            marker = [[journal.folder.name, journal.path.name] for journal, _ in moves]
            (main.folder / MERGED).write_text(json.dumps(marker))
            durable(main.folder / MERGED)
            for journal, file in moves:
                os.replace(file, journal.path)
            durable(path.parent)
        for journal in journals:  # the main table's last: its marker says what was moved
            remove_journal(journal.folder)


class ParquetTables(TableSink):
    """What a Parquet file and a data set share: row groups of about ``row_group_rows``
    compressed with ``compression``, a list column for an output of several values a row."""

    def mark_complete(self) -> None:
        """Called once the job wrote every row it was asked for, after ``close`` (a data set's ``_SUCCESS``)."""
        self._storage.complete(self._main, list(self._sides.values()))

    def _parquet_file(self, row_group_rows: int, compression: str) -> OpenTable:
        self.row_group_rows, self.compression = row_group_rows, parquet_codec(compression)
        return lambda path: ParquetTableFile(path, self.row_group_rows, self.compression)


class ParquetDatasetSink(ParquetTables):
    """The table of :class:`ParquetSink` as a folder of Parquet files, a data set
    (``part-00000.parquet``, ``part-00001.parquet``, ...), each part closed once it
    holds ``part_rows`` rows or about ``part_bytes`` bytes (or was opened
    ``part_seconds`` ago) and renamed into place
    only then: a run that is killed leaves every part it closed, whole and
    readable, and a resumed run goes on after them (NOTE [ resuming ]).  A new
    run refuses a folder that holds parts already, unless told to ``overwrite``
    them (ortpipe's own files are removed, no others).  An output written per
    batch goes to a data set of its own beside the folder, ``<folder>.<output>``.
    Once the job wrote every row (``mark_complete``, after ``close``), an empty
    ``_SUCCESS`` in each folder written, as Spark leaves one, for whatever waits on
    the data set to know that it is whole (a stopped or failed run leaves none, and
    adding rows to a data set removes it until then)."""

    def __init__(
        self,
        path: str | Path,
        row_group_rows: int = 65536,
        data_dependent: DataDependent = (),
        resume: bool = False,
        part_rows: int | None = None,
        part_bytes: int = DEFAULT_PART_BYTES,
        compression: str = "snappy",
        overwrite: bool = False,
        part_seconds: float | None = None,
    ) -> None:
        if resume and overwrite:
            raise ValueError("a data set is either resumed or overwritten, not both")
        file = self._parquet_file(row_group_rows, compression)
        parts = PartsStorage(file, part_rows, part_bytes, part_seconds, fresh=not resume, overwrite=overwrite)
        self.part_rows, self.part_bytes, self.part_seconds = part_rows, part_bytes, part_seconds
        super().__init__(path, parts, as_list_columns, data_dependent, resume)


class ParquetSink(ParquetTables):
    """Metadata columns, then one column per output (a list column when a row holds
    several values), in row groups of about ``row_group_rows``, compressed with
    ``compression`` (one of :data:`PARQUET_CODECS`; pyarrow's default, snappy), in
    one file - written as a journal of parts beside it until it is closed, so a
    killed run keeps every part it closed (NOTE [ journaled Parquet ]: one every
    ``part_seconds`` or ``part_bytes``, or ``part_rows`` rows where given)."""

    def __init__(
        self,
        path: str | Path,
        row_group_rows: int = 65536,
        data_dependent: DataDependent = (),
        resume: bool = False,
        compression: str = "snappy",
        part_rows: int | None = None,
        part_bytes: int = JOURNAL_PART_BYTES,
        part_seconds: float | None = JOURNAL_PART_SECONDS,
    ) -> None:
        file = self._parquet_file(row_group_rows, compression)
        journal = JournalStorage(file, part_rows, part_bytes, part_seconds, fresh=not resume)
        self.part_rows, self.part_bytes, self.part_seconds = part_rows, part_bytes, part_seconds
        super().__init__(path, journal, as_list_columns, data_dependent, resume)
