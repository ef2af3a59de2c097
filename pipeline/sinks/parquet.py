"""Parquet outputs: a file (journaled) and a data set (a folder of parts)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from ._base import DataDependent, _list_column, _TableSink, writable, writable_folder
from ._parts import (
    DEFAULT_PART_BYTES,
    _ParquetFile,
    _ParquetParts,
    clear_data_set,
    durable,
    parquet_codec,
    refuse_used_folder,
    whole_parts,
)
from .journal import _MERGED, JOURNAL_PART_BYTES, JOURNAL_PART_SECONDS, _Journal, journal_of, remove_journal


class _ParquetTables(_TableSink):
    """What a Parquet file and a data set share: row groups of about ``row_group_rows``
    compressed with ``compression``, a list column for an output of several values a row."""

    def __init__(
        self,
        path: str | Path,
        row_group_rows: int = 65536,
        data_dependent: DataDependent = (),
        resume: bool = False,
        compression: str = "snappy",
    ) -> None:
        self.row_group_rows, self.compression = row_group_rows, parquet_codec(compression)
        super().__init__(path, data_dependent, resume)

    def _file(self, path: Path) -> _ParquetFile:
        return _ParquetFile(path, self.row_group_rows, self.compression)

    def _several(self, name: str, flat: np.ndarray) -> dict[str, Any]:
        return _list_column(name, flat)


class ParquetDatasetSink(_ParquetTables):
    """The table of :class:`ParquetSink` as a folder of Parquet files, a data set
    (``part-00000.parquet``, ``part-00001.parquet``, ...), each part closed once it
    holds ``part_rows`` rows or about ``part_bytes`` bytes (or was opened
    ``part_seconds`` ago) and renamed into place
    only then: a run that is killed leaves every part it closed, whole and
    readable, and a resumed run goes on after them (NOTE [ resuming ]).  A new
    run refuses a folder that holds parts already, unless told to ``overwrite``
    them (ortpipe's own files are removed, no others).  An output written per
    batch goes to a data set of its own beside the folder, ``<folder>.<output>``."""

    _suffix = ""

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
        if part_rows is not None and part_rows < 1:
            raise ValueError(f"part_rows must be >= 1 or None, got {part_rows}")
        if part_seconds is not None and not part_seconds > 0:
            raise ValueError(f"part_seconds must be > 0 or None, got {part_seconds}")
        if resume and overwrite:
            raise ValueError("a data set is either resumed or overwritten, not both")
        self.part_rows, self.part_bytes, self.part_seconds = part_rows, part_bytes, part_seconds
        self._resuming, self._overwrite = resume, overwrite
        super().__init__(path, row_group_rows, data_dependent, resume, compression)

    def _checked(self, path: Path) -> Path:
        return writable_folder(path)

    def write(self, index: int, rows: int, outputs: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> None:
        super().write(index, rows, outputs, meta)
        if self._main.full:  # every output's part closes at the same batch as the main table's: the sides first
            for side in self._sides.values():
                side.finish()
            self._main.finish()

    def _resume_side(self, side: Any) -> None:
        side.resume()
        side.keep_parts(self._main.parts)  # a run killed while closing its parts may have closed a side's more

    def _restart_side(self, side: Any) -> None:
        side.keep_parts(0)  # a side part closed before the main table's first one is of no kept batch

    def mark_complete(self) -> None:
        """Called once the job wrote every row it was asked for, after ``close``: an
        empty ``_SUCCESS`` in each folder written, as Spark leaves one, for whatever
        waits on the data set to know that it is whole (a stopped or failed run
        leaves none, and adding rows to a data set removes it until then)."""
        for parts in (self._main, *self._sides.values()):
            parts.mark_complete()

    def _open(self, path: Path) -> _ParquetParts:
        if self._overwrite:
            clear_data_set(path)
        if not self._resuming:
            refuse_used_folder(path)
        return _ParquetParts(path, self._file, self.part_rows, self.part_bytes, self.part_seconds)


class ParquetSink(ParquetDatasetSink):
    """Metadata columns, then one column per output (a list column when a row holds
    several values), in row groups of about ``row_group_rows``, compressed with
    ``compression`` (one of :data:`PARQUET_CODECS`; pyarrow's default, snappy), in
    one file - written as a journal of parts beside it until it is closed, so a
    killed run keeps every part it closed (NOTE [ journaled Parquet ]: one every
    ``part_seconds`` or ``part_bytes``, or ``part_rows`` rows where given)."""

    _suffix = ".parquet"

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
        super().__init__(
            path,
            row_group_rows,
            data_dependent,
            resume,
            part_rows=part_rows,
            part_bytes=part_bytes,
            compression=compression,
            part_seconds=part_seconds,
        )

    def _checked(self, path: Path) -> Path:
        return writable(path)

    def _open(self, path: Path) -> _Journal:  # type: ignore[override]
        return _Journal(path, self._file, self.part_rows, self.part_bytes, self.part_seconds, not self._resuming)

    def existing_outputs(self) -> list[Path]:
        """The file, if it holds an earlier run's rows, or its journal, if a killed run left one."""
        journal = journal_of(self.path)
        return super().existing_outputs() + ([journal] if whole_parts(journal) else [])

    def _side_written(self, path: Path) -> bool:
        return path.exists() or journal_of(path).is_dir()

    def _restart_side(self, side: Any) -> None:
        side.restart()

    def mark_complete(self) -> None:
        """A file has no ``_SUCCESS``: it is there, whole, once closed."""

    def close(self) -> None:
        journals = [*self._sides.values(), self._main]
        try:
            super().close()  # every part closed: a failure leaves the journals, to resume from
            journals = [journal for journal in journals if journal.folder.is_dir()]
            merged = [(journal, journal.merge()) for journal in journals]
        except BaseException:
            for journal in journals:
                journal.abandon()
            raise
        moves = [(journal, file) for journal, file in merged if file is not None]
        if moves:
            self._main.folder.mkdir(exist_ok=True)
            for _, file in moves:
                durable(file)
            marker = [[journal.folder.name, journal.path.name] for journal, _ in moves]
            (self._main.folder / _MERGED).write_text(json.dumps(marker))
            durable(self._main.folder / _MERGED)
            for journal, file in moves:
                os.replace(file, journal.path)
            durable(self.path.parent)
        for journal in journals:  # the main table's last: its marker says what was moved
            remove_journal(journal.folder)
