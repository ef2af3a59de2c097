"""A Delta Lake table as an output, each part one commit (deltalake, delta-rs's binding).

NOTE [ parts committed to a Delta table ]: a table format already is a commit protocol that
every engine of a data team reads, so a Delta output keeps no journal of its own.  Its parts
are cut as a data set's are (``part_rows``, ``part_bytes``, ``part_seconds``); each is
written as a Parquet file into the table's folder under a name of the job's, then appended
by one commit that carries a ``SetTransaction`` of the job's id (``app_id``, made from the
job's record: its input, model and row options) and the part's number (``version``), and
the version of a Delta input read (``ortpipe.input_version``, in the commit's metadata).
A reader sees a part once its commit is there, and nothing before.

* A resume asks the table for the job's last committed part (``transaction_version``) and
  counts the rows of the job's committed files; it goes on after them.  The same job run
  again without ``--resume`` is refused: its rows would be there twice.
* A killed run leaves at most a file that no commit names: deltalake's ``vacuum`` removes
  it once it is older than the table's retention (the resumed run's summary says so).
* ``overwrite``: the first part is an overwrite commit (the earlier rows stay readable by
  time travel until a vacuum), the later ones appends.
* Writing to a table whose columns are not the run's (names and types) is refused before
  the first row is written, naming them (an overwrite too: it replaces the rows, not the
  columns).  Two ortpipe runs into one local table: the second is refused at once by the
  output's lock (NOTE [ one writer ]); another engine writing it meanwhile meets Delta's own
  conflict rules (appends of two jobs both land; each job's parts carry its own id), and a
  second run that makes the table at the same moment appends to it instead.

Delta has no fixed-size lists, unsigned integers nor float16: such columns are written as
lists, the next wider signed integer and float32 (``_base.portable_schema``).  Outputs with a
count of their own each batch (a table beside the main one) are not written to a table.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..util.errors import SinkError
from ._base import as_list_columns, portable_schema, refuse_other_columns, writable_folder
from ._parts import DEFAULT_PART_BYTES, ParquetParts, ParquetTableFile
from .parquet import ParquetTables, PartsStorage

#: the commit metadata key of the Delta input's version a job read (a resume reads the same)
INPUT_VERSION_KEY = "ortpipe.input_version"


def _deltalake() -> Any:
    try:
        import deltalake
    except ImportError:
        raise SinkError("a Delta Lake output is written through deltalake: pip install 'ortpipe[tables]'") from None
    return deltalake


def open_table(path: str | Path) -> Any:
    """The Delta table at ``path``, None where there is none yet."""
    deltalake = _deltalake()
    if not deltalake.DeltaTable.is_deltatable(str(path)):
        return None
    try:
        return deltalake.DeltaTable(str(path))
    except Exception as exc:  # deltalake's DeltaError and its kinds: a broken log
        raise SinkError(f"{str(path)!r}: the Delta table cannot be read: {exc}") from exc


def _job_files(table: Any, app_id: str) -> list[tuple[str, int]]:
    """The job's committed files (path below the table, rows), in their parts' order."""
    import pyarrow as pa

    actions = pa.table(table.get_add_actions(flatten=True))
    paths = actions.column("path").to_pylist()
    rows = actions.column("num_records").to_pylist() if "num_records" in actions.column_names else [None] * len(paths)
    ours = sorted((path, count) for path, count in zip(paths, rows, strict=True) if path.startswith(app_id))
    uncounted = [path for path, count in ours if count is None]
    if uncounted:  # every part this job commits says its rows: a count never guessed
        raise SinkError(f"the Delta table's log holds no row count for this job's file {uncounted[0]!r}")
    return [(path, int(count)) for path, count in ours]


def committed_input_version(path: str | Path, app_id: str) -> int | None:
    """The Delta input version the job ``app_id`` read for the parts it committed to the table
    at ``path`` (None: no part, or no Delta input)."""
    table = open_table(path)
    if table is None or table.transaction_version(app_id) is None:
        return None
    for commit in table.history():
        if commit.get("ortpipe.job") == app_id and commit.get(INPUT_VERSION_KEY) is not None:
            return int(commit[INPUT_VERSION_KEY])
    return None


class DeltaParts(ParquetParts):
    """The parts of one job appended to a Delta table, each by a commit of its own
    (NOTE [ parts committed to a Delta table ])."""

    def __init__(
        self,
        folder: Path,
        file: Any,
        part_rows: int | None,
        part_bytes: int,
        part_seconds: float | None,
        app_id: str,
        overwrite: bool,
        input_version: int | None,
    ) -> None:
        super().__init__(folder, file, part_rows, part_bytes, part_seconds)
        self.app_id, self.overwrite, self.input_version = app_id, overwrite, input_version
        self._schema: Any = None
        self._files: list[str] = []
        #: this run's mark in its files' names: a rerun's part 0 never writes over a file an earlier version names
        self._run = uuid.uuid4().hex[:8]

    def refuse_rows_of_this_job(self) -> None:
        """A new run of a job whose parts the table holds: its rows would be there twice."""
        table = open_table(self.folder)
        files = [] if table is None or self.overwrite else _job_files(table, self.app_id)
        if files:
            rows = sum(count for _, count in files)
            raise SinkError(
                f"{str(self.folder)!r}: the Delta table holds {rows:,} rows of this job already ({len(files)} "
                "commits): --resume goes on after them, --overwrite replaces the table's rows"
            )

    def resume(self) -> int:
        table = open_table(self.folder)
        last = None if table is None else table.transaction_version(self.app_id)
        if last is None:
            return 0
        files = _job_files(table, self.app_id)
        if len(files) != last + 1:
            raise SinkError(
                f"cannot resume {str(self.folder)!r}: the table's log says this job committed {last + 1} parts, but "
                f"{len(files)} of its files are in the table now (another writer overwrote or deleted them): "
                "--overwrite starts the job again"
            )
        self._files = [name for name, _ in files]
        self._number = len(files)
        self._earlier = _arrow_schema(table)
        return sum(count for _, count in files)

    def _listed(self) -> list[Any]:
        return [self.folder / name for name in self._files]

    def write(self, batch: Any) -> None:
        if self._schema is None:
            self._schema = portable_schema(batch.schema)
        super().write(batch.cast(self._schema) if not batch.schema.equals(self._schema) else batch)

    def _start(self, schema: Any) -> ParquetTableFile:
        if not self._closed_by_this_run:  # before the first row; later parts are of the same columns
            self._check_table_columns()
        self.folder.mkdir(parents=True, exist_ok=True)
        # never committed if the run is killed: a vacuum removes it
        return self._file(self.folder / f"{self.app_id}-part-{self._number:05d}-{self._run}.parquet")

    def _check_table_columns(self) -> None:
        """The run's columns are the table's, where it has any."""
        table = open_table(self.folder)
        if table is not None:
            refuse_other_columns(f"{str(self.folder)!r}: the Delta table", _arrow_schema(table), self._schema)

    def _unmarked(self) -> None:
        """A table has no ``_SUCCESS``: its commits say what it holds."""

    def _commit(self, part: ParquetTableFile) -> None:
        deltalake = _deltalake()
        from deltalake.transaction import AddAction, CommitProperties, Transaction, create_table_with_add_actions

        path = Path(part.path)
        stat = path.stat()
        action = AddAction(
            path.name, stat.st_size, {}, int(stat.st_mtime * 1000), True, json.dumps({"numRecords": self._rows})
        )
        metadata = {"ortpipe.job": self.app_id, "ortpipe.part": str(self._number)}
        if self.input_version is not None:
            metadata[INPUT_VERSION_KEY] = str(self.input_version)
        properties = CommitProperties(
            app_transactions=[Transaction(self.app_id, self._number, int(time.time() * 1000))],
            custom_metadata=metadata,
        )
        mode = "overwrite" if self.overwrite and not self._closed_by_this_run else "append"
        schema, table = deltalake.Schema.from_arrow(self._schema), open_table(self.folder)
        try:
            if table is None:  # the first commit makes the table
                try:
                    create_table_with_add_actions(str(self.folder), schema, [action], commit_properties=properties)
                    self._files.append(path.name)
                    return
                except Exception:  # another writer made it first: append to it, its columns checked
                    table = open_table(self.folder)
                    if table is None:
                        raise
                    self._check_table_columns()
            table.create_write_transaction([action], mode, schema, commit_properties=properties)
        except SinkError:
            raise
        except Exception as exc:  # a conflict another writer won, a store that refuses the commit
            raise SinkError(f"{str(self.folder)!r}: the Delta commit of part {self._number} failed: {exc}") from exc
        self._files.append(path.name)

    def mark_complete(self) -> None:
        """Every row is committed: nothing else to mark."""


def _arrow_schema(table: Any) -> Any:
    import pyarrow as pa

    return pa.schema(table.schema().to_arrow())


class DeltaStorage(PartsStorage):
    """The storage of a :class:`DeltaSink`: one table, no tables beside it."""

    def __init__(
        self, open_file: Any, part_rows: int | None, part_bytes: int, part_seconds: float | None, fresh: bool,
        overwrite: bool, app_id: str, input_version: int | None,
    ) -> None:  # fmt: skip
        super().__init__(open_file, part_rows, part_bytes, part_seconds, fresh, overwrite)
        self.app_id, self.input_version = app_id, input_version

    def checked(self, path: Path) -> Path:
        return writable_folder(path)

    def open(self, path: Path) -> DeltaParts:
        parts = DeltaParts(
            path, self.open_table, self.part_rows, self.part_bytes, self.part_seconds, self.app_id, self.overwrite,
            self.input_version,
        )  # fmt: skip
        if self.fresh:
            parts.refuse_rows_of_this_job()
        return parts

    def existing(self, path: Path) -> list[Path]:
        return []  # appending to a table replaces nothing; the job's own rows are refused in open

    def allow_sides(self, names: list[str]) -> None:
        raise SinkError(
            f"output(s) {names} have a count of their own each batch (data-dependent), which a table beside the "
            "main one holds; a Delta output is one table: write a Parquet data set, or leave them out with "
            "--output-names"
        )


class DeltaSink(ParquetTables):
    """A job's rows appended to the Delta table at ``path`` (made at its first commit where there
    is none), part by part, each part a commit of the job ``app_id``
    (NOTE [ parts committed to a Delta table ]); ``resume`` goes on after the job's committed
    parts, ``overwrite`` replaces the table's rows by a commit (time travel keeps the earlier ones)."""

    def __init__(
        self,
        path: str | Path,
        app_id: str,
        row_group_rows: int = 65536,
        resume: bool = False,
        part_rows: int | None = None,
        part_bytes: int = DEFAULT_PART_BYTES,
        compression: str = "snappy",
        overwrite: bool = False,
        part_seconds: float | None = None,
        input_version: int | None = None,
    ) -> None:
        if resume and overwrite:
            raise ValueError("a Delta output is either resumed or overwritten, not both")
        file = self._parquet_file(row_group_rows, compression)
        storage = DeltaStorage(
            file, part_rows, part_bytes, part_seconds, not resume, overwrite, app_id, input_version
        )  # fmt: skip
        self.part_rows, self.part_bytes, self.part_seconds = part_rows, part_bytes, part_seconds
        super().__init__(path, storage, as_list_columns, (), resume)

    def notes(self) -> list[str]:
        storage = self._storage
        assert isinstance(storage, DeltaStorage)
        return [*super().notes(), *_vacuum_note(self.path, storage.app_id)]


def uncommitted_files(path: str | Path, app_id: str) -> list[Path]:
    """The job's files in the table's folder that its latest version does not name: a killed
    run's part, its vacuum's to remove (one of the job's committed parts that another writer's
    overwrite removed is one too, for time travel; a resume of that job is refused anyway)."""
    table = open_table(path)
    if table is None:
        return []
    named = {name for name, _ in _job_files(table, app_id)}
    return sorted(file for file in Path(path).glob(f"{app_id}-part-*.parquet") if file.name not in named)


def _vacuum_note(path: Path, app_id: str) -> Sequence[str]:
    left = uncommitted_files(path, app_id)
    if not left:
        return []
    return [
        f"the Delta table's folder holds {len(left)} file(s) of this job that no commit names (a stopped run's "
        "part): the table's vacuum removes them once older than its retention (DeltaTable(PATH)"
        ".vacuum(dry_run=False); 7 days by default)"
    ]
