"""A Parquet file kept as a journal of parts beside it until it is closed, then merged."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..util.errors import SinkError
from ._parts import PART, ParquetParts, ParquetTableFile, clear_data_set, parquet_writer, whole_parts

#: the part closed last in a Parquet file's journal holds at most this many bytes (arrow's) ...
JOURNAL_PART_BYTES = 64 << 20

#: ... and rows of at most this many seconds: what a killed run can lose of a file
JOURNAL_PART_SECONDS = 60.0

#: a journal's parts merged into one file, before it is moved into place
_MERGING = ".merged.parquet"

#: in the main table's journal: every table was merged, and is being moved into place
MERGED = "MERGED"


def journal_of(path: Path) -> Path:
    """The hidden folder a Parquet file is written into as parts until it is closed
    (NOTE [ journaled Parquet ])."""
    return path.with_name(f".{path.name}.parts")


class Journal(ParquetParts):
    """A Parquet file written as a journal of parts, merged at the end.

    NOTE [ journaled Parquet ]: a Parquet file's footer, which says where every
    column chunk lies, is written at close: a killed writer leaves a file that
    nothing can read.  So a Parquet file is written as a data set in a hidden
    folder beside it, its journal (``.NAME.parquet.parts``), each part renamed
    into place when closed - every ``JOURNAL_PART_SECONDS`` or
    ``JOURNAL_PART_BYTES``, whichever comes first - and merged into the file,
    row groups re-joined to ``row_group_rows``: by a thread beside the job from
    the second part on (:class:`_Merger`), the rest at close; a journal of one
    part is moved into place, no copy.  The price (docs/results.md): a file of
    several parts is written at about half the rows/s of one part; the merged
    copy grows beside the parts, so the file needs up
    to twice its size on the disk until it is closed.  A killed run leaves
    the journal: resuming goes on after its whole parts.  A resumed file that
    was closed is moved into the journal as part 0 (and is the file again at
    close, moved back when nothing was added).  Every close merges, a stopped
    run's too: ``--overwrite`` writes its file in a folder of its own and moves it
    over the earlier one once whole (NOTE [ replaced when whole ]).  A close cut short while it
    moved the merged tables into place (:data:`MERGED` marks that every merge
    was done) is finished by the next resume."""

    def __init__(
        self,
        path: Path,
        file: Callable[[Path], ParquetTableFile],
        part_rows: int | None,
        part_bytes: int,
        part_seconds: float | None,
        fresh: bool,
    ) -> None:
        super().__init__(journal_of(path), file, part_rows, part_bytes, part_seconds)
        self.path = path
        #: a new run: an earlier run's journal and file are replaced at the first write
        self._fresh = fresh
        #: merges the whole parts as they close, once there are two (one is moved, not merged)
        self._merger: _Merger | None = None
        self._merging = 0

    def resume(self) -> int:
        """The rows of the file or the journal an earlier run left, to be kept."""
        finish_moving_merged(self.folder)
        if not self.folder.is_dir() and self.path.exists():
            import pyarrow.parquet as pq

            try:
                pq.read_metadata(self.path)
            except Exception as exc:
                raise SinkError(
                    f"cannot resume {str(self.path)!r}: it is not a readable Parquet file ({exc}); ortpipe writes a "
                    "Parquet file's rows into a journal beside it until it is closed, so this one was not written "
                    "by this ortpipe, or was damaged: remove it and start over"
                ) from exc
            self.folder.mkdir()
            os.replace(self.path, self.folder / PART.format(0))
        return super().resume()

    def restart(self) -> None:
        """A resumed run that kept no rows of the main table: this table starts anew."""
        self._fresh = True

    def _start(self, schema: Any) -> ParquetTableFile:
        if self._fresh:  # the earlier run's journal is replaced; its closed file stays until this
            self._fresh = False  # run's close moves the merged parts over it (--overwrite: never neither)
            remove_journal(self.folder)
        return super()._start(schema)

    def finish(self) -> None:
        super().finish()
        self._merge_ahead()

    def keep_parts(self, parts: int) -> None:
        super().keep_parts(parts)
        self._merge_ahead()

    def _merge_ahead(self) -> None:
        """Hand the parts closed since the last call to the merger (started at the second)."""
        if self._number < 2:
            return
        if self._merger is None:
            merged = self.folder / _MERGING
            merged.unlink(missing_ok=True)
            self._merger = _Merger(merged, self._file(merged))
        for number in range(self._merging, self._number):
            self._merger.add(self.folder / PART.format(number))
        self._merging = self._number

    def merge(self) -> Path | None:
        """The whole parts as one file in the journal (None when it has none): the
        merger's, or the one part linked (a part is the file already: no copy)."""
        if self._merger is None:
            parts = whole_parts(self.folder)
            if len(parts) < 2:
                return self._linked(parts[0]) if parts else None
            self._merge_ahead()  # the parts a resumed run kept and added none to: merged now
        assert self._merger is not None
        merger, self._merger = self._merger, None
        return merger.finish()

    def _linked(self, part: Path) -> Path:
        """The one part as the journal's merged file: a link (a part is the file already)."""
        merged = self.folder / _MERGING
        merged.unlink(missing_ok=True)
        try:
            os.link(part, merged)
        except OSError:  # a file system without hard links
            shutil.copyfile(part, merged)
        return merged

    def abandon(self) -> None:
        """Stop the merger, if any (a close that failed: the journal stays)."""
        if self._merger is not None:
            merger, self._merger = self._merger, None
            merger.abandon()


class _Merger:
    """A journal's whole parts appended, as they close, to one Parquet file, in row
    groups of about ``like.row_group_rows`` rows compressed as ``like``: the merge a
    close would make runs beside the job instead (a part's groups are read one at
    a time; pyarrow encodes without the GIL).  A thread appends the parts added
    and ends when there are none left (a sink never closed - a test's stand-in
    for a kill - leaves none behind); the next part added starts another.  The
    file is only the journal's copy until :meth:`finish` closes it: a kill
    leaves the parts."""

    def __init__(self, merged: Path, like: ParquetTableFile) -> None:
        self.merged, self._like = merged, like
        self._lock = threading.Lock()
        self._parts: list[Path] = []
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._writer: Any = None
        self._pending: list[Any] = []
        self._pending_rows = 0

    def add(self, part: Path) -> None:
        with self._lock:
            self._parts.append(part)
            if self._thread is None:
                self._thread = threading.Thread(target=self._drain, name="ortpipe-parquet-merge", daemon=True)
                self._thread.start()

    def finish(self) -> Path:
        """The merged file, closed, once every part added is in it (or the merge's failure)."""
        self._wait()
        try:
            if self._failure is not None:
                raise self._failure
            if self._pending:
                self._write_pending()
        finally:
            self._close_writer()
        return self.merged

    def abandon(self) -> None:
        """Stop merging: the file, never closed, is left to be removed with the journal."""
        with self._lock:
            self._parts.clear()
        self._wait()
        self._close_writer()

    def _wait(self) -> None:
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join()

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._parts or self._failure is not None:
                    self._thread = None
                    return
                part = self._parts.pop(0)
            try:
                self._append(part)
            except BaseException as exc:  # noqa: BLE001 - raised by finish(), in the sink's close
                self._failure = exc

    def _append(self, part: Path) -> None:
        import pyarrow.parquet as pq

        with pq.ParquetFile(part) as file:
            if self._writer is None:
                self._writer = parquet_writer(self.merged, file.schema_arrow, self._like.compression)
            for group in range(file.metadata.num_row_groups):
                table = file.read_row_group(group)
                self._pending.append(table)
                self._pending_rows += table.num_rows
                if self._pending_rows >= self._like.row_group_rows:
                    self._write_pending()

    def _write_pending(self) -> None:
        import pyarrow as pa

        pending, rows, self._pending, self._pending_rows = self._pending, self._pending_rows, [], 0
        self._writer.write_table(pa.concat_tables(pending), row_group_size=rows)

    def _close_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()


def remove_journal(folder: Path) -> None:
    """A journal's parts, merged file and marker, then the folder (the marker last)."""
    if not folder.is_dir():
        return
    clear_data_set(folder)
    (folder / _MERGING).unlink(missing_ok=True)
    (folder / MERGED).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # something not ortpipe's in it: left where it is
        folder.rmdir()


def finish_moving_merged(folder: Path) -> None:
    """Where a close was cut short after every table was merged (:data:`MERGED` in
    the main journal ``folder``), move what is left into place and remove the journals."""
    marker = folder / MERGED
    if not marker.is_file():
        return
    beside = folder.parent
    moves = json.loads(marker.read_text())
    for journal, final in moves:
        if (beside / journal / _MERGING).exists():
            os.replace(beside / journal / _MERGING, beside / final)
    for journal, _final in moves:
        if beside / journal != folder:
            remove_journal(beside / journal)
    remove_journal(folder)
