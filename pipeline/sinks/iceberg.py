"""An Apache Iceberg table as an output, each part one snapshot (pyiceberg).

NOTE [ parts appended as Iceberg snapshots ]: as a Delta output's parts are commits
(NOTE [ parts committed to a Delta table ]), an Iceberg output's are appends: each part, cut as a
data set's are, is appended by pyiceberg as one snapshot whose summary holds the job's id
(``ortpipe.job``), the part's number (``ortpipe.part``) and the version of a Delta input read.
A reader sees a part once its snapshot is the table's current one, and nothing before.

* A resume walks the current snapshot's ancestry for the job's snapshots and counts the
  rows they added (``added-records``); it goes on after them.  The same job run again
  without ``--resume`` is refused.
* A killed run leaves at most data files no snapshot names (pyiceberg writes them before
  it commits); the table's orphan-file clean-up removes them.
* ``overwrite``: the first part is an overwrite snapshot (the earlier snapshots stay for
  time travel until they expire), the later ones appends.
* A table of other columns is refused before the first row is written, naming them (an
  overwrite too: it replaces the rows, not the columns); a missing table (and its
  namespace) is made from the run's columns.  Two writers: the catalog's commit decides,
  and the loser's commit fails with one line.

The catalog is pyiceberg's own configuration's (``.pyiceberg.yaml``,
``PYICEBERG_CATALOG__<NAME>__*``), by ``--catalog NAME``; where ``default`` is not
configured, an embedded SQL catalog on SQLite, its database and warehouse in
``$ORTPIPE_ICEBERG_HOME`` (default ``~/.ortpipe/iceberg``): for one machine, and the tests.
Rows are held in memory until their part is appended: parts are at most
:data:`ICEBERG_PART_BYTES` by default.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..util.errors import SinkError
from ..util.iceberg import iceberg_catalog as _catalog
from ._base import as_list_columns, portable_schema, refuse_other_columns
from .parquet import ParquetTables, PartsStorage


def iceberg_catalog(name: str = "default") -> Any:
    """The catalog ``name`` (``util.iceberg``), a SinkError where it cannot be had."""
    return _catalog(name, SinkError)


#: an Iceberg part's rows are held in memory until appended: about this many bytes at most
ICEBERG_PART_BYTES = 64 << 20
#: the summary keys of a part's snapshot
JOB_KEY, PART_KEY, INPUT_VERSION_KEY = "ortpipe.job", "ortpipe.part", "ortpipe.input_version"


def _identifier(name: str) -> tuple[str, str]:
    parts = name.rsplit(".", 1)
    if len(parts) != 2 or not all(parts):
        raise SinkError(f"an Iceberg table is named NAMESPACE.TABLE, got {name!r}")
    return parts[0], parts[1]


class IcebergParts:
    """The parts of one job appended to an Iceberg table, a snapshot each
    (NOTE [ parts appended as Iceberg snapshots ])."""

    def __init__(
        self, identifier: str, catalog: Any, app_id: str, part_rows: int | None, part_bytes: int,
        part_seconds: float | None, overwrite: bool, input_version: int | None,
    ) -> None:  # fmt: skip
        self.identifier, self.catalog, self.app_id = identifier, catalog, app_id
        self.part_rows, self.part_bytes, self.part_seconds = part_rows, part_bytes, part_seconds
        self.overwrite, self.input_version = overwrite, input_version
        self._batches: list[Any] = []
        self._rows = self._bytes = 0
        self._opened_at = 0.0
        self._number = 0
        self._appended_by_this_run = 0
        self._schema: Any = None

    def _table(self) -> Any:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.load_table(self.identifier)
        except NoSuchTableError:
            return None
        except Exception as exc:  # a catalog that cannot be reached, a broken metadata file
            raise SinkError(f"the Iceberg table {self.identifier!r} cannot be read: {exc}") from exc

    def _ours(self, table: Any) -> list[Any]:
        """The job's snapshots in the current snapshot's ancestry, oldest first."""
        from pyiceberg.table.snapshots import ancestors_of

        current = table.current_snapshot()
        lineage = list(ancestors_of(current, table.metadata)) if current is not None else []
        return [s for s in reversed(lineage) if s.summary is not None and s.summary.get(JOB_KEY) == self.app_id]

    def refuse_rows_of_this_job(self) -> None:
        table = self._table()
        ours = [] if table is None or self.overwrite else self._ours(table)
        if ours:
            rows = sum(int(s.summary.get("added-records", 0)) for s in ours)
            raise SinkError(
                f"the Iceberg table {self.identifier!r} holds {rows:,} rows of this job already ({len(ours)} "
                "snapshots): --resume goes on after them, --overwrite replaces the table's rows"
            )

    def resume(self) -> int:
        table = self._table()
        ours = [] if table is None else self._ours(table)
        numbers = [int(s.summary.get(PART_KEY, -1)) for s in ours]
        if numbers != list(range(len(ours))):
            raise SinkError(
                f"cannot resume the Iceberg table {self.identifier!r}: this job's snapshots hold parts {numbers}, "
                "not 0, 1, 2, ...: --overwrite starts the job again"
            )
        self._number = len(ours)
        return sum(int(s.summary.get("added-records", 0)) for s in ours)

    def last_row(self) -> None:
        """None: a resume is held to the job's id, which names its input (NOTE [ who wrote it ])."""
        return None

    def columns(self, names: Any) -> dict[str, Any]:
        return {}

    @property
    def parts(self) -> int:
        return self._number

    @property
    def full(self) -> bool:
        if not self._batches:
            return False
        if (self.part_rows is not None and self._rows >= self.part_rows) or self._bytes >= self.part_bytes:
            return True
        return self.part_seconds is not None and time.monotonic() - self._opened_at >= self.part_seconds

    def write(self, batch: Any) -> None:
        if self._schema is None:
            self._schema = portable_schema(batch.schema)
            self._check_columns()
        if not self._batches:
            self._opened_at = time.monotonic()
        self._batches.append(batch.cast(self._schema) if not batch.schema.equals(self._schema) else batch)
        self._rows += batch.num_rows
        self._bytes += batch.nbytes

    def _check_columns(self) -> None:
        table = self._table()
        if table is not None:
            refuse_other_columns(f"{self.identifier!r}: the Iceberg table", table.schema().as_arrow(), self._schema)

    def finish(self) -> None:
        """The open part appended as one snapshot."""
        if not self._batches:
            return
        import pyarrow as pa

        rows = pa.Table.from_batches(self._batches, schema=self._schema)
        properties = {JOB_KEY: self.app_id, PART_KEY: str(self._number)}
        if self.input_version is not None:
            properties[INPUT_VERSION_KEY] = str(self.input_version)
        try:
            table = self._table() or self._created()
            if self.overwrite and not self._appended_by_this_run:
                table.overwrite(rows, snapshot_properties=properties)
            else:
                table.append(rows, snapshot_properties=properties)
        except SinkError:
            raise
        except Exception as exc:  # a commit another writer won (CommitFailedException), a store's refusal
            raise SinkError(f"the Iceberg append of part {self._number} to {self.identifier!r} failed: {exc}") from exc
        self._batches, self._rows, self._bytes = [], 0, 0
        self._number += 1
        self._appended_by_this_run += 1

    def _created(self) -> Any:
        namespace, _ = _identifier(self.identifier)
        self.catalog.create_namespace_if_not_exists(namespace)
        return self.catalog.create_table_if_not_exists(self.identifier, schema=self._schema)

    def close(self) -> None:
        self.finish()

    def mark_complete(self) -> None:
        """Every row is appended: nothing else to mark."""


def committed_input_version(identifier: str, catalog: str, app_id: str) -> int | None:
    """The Delta input version the job ``app_id`` read for the parts it appended (None: none)."""
    parts = IcebergParts(identifier, iceberg_catalog(catalog), app_id, None, ICEBERG_PART_BYTES, None, False, None)
    table = parts._table()
    read = [s.summary.get(INPUT_VERSION_KEY) for s in (parts._ours(table) if table is not None else [])]
    return int(read[0]) if read and read[0] is not None else None


class IcebergStorage(PartsStorage):
    """The storage of an :class:`IcebergSink`: one table in a catalog, no tables beside it."""

    def __init__(
        self, catalog: str, app_id: str, part_rows: int | None, part_bytes: int, part_seconds: float | None,
        fresh: bool, overwrite: bool, input_version: int | None,
    ) -> None:  # fmt: skip
        super().__init__(lambda path: None, part_rows, part_bytes, part_seconds, fresh, overwrite)
        self.catalog_name, self.app_id, self.input_version = catalog, app_id, input_version

    def checked(self, path: Path) -> Path:
        _identifier(str(path))
        return path

    def open(self, path: Path) -> IcebergParts:
        parts = IcebergParts(
            str(path), iceberg_catalog(self.catalog_name), self.app_id, self.part_rows, self.part_bytes,
            self.part_seconds, self.overwrite, self.input_version,
        )  # fmt: skip
        if self.fresh:
            parts.refuse_rows_of_this_job()
        return parts

    def existing(self, path: Path) -> list[Path]:
        return []

    def allow_sides(self, names: list[str]) -> None:
        raise SinkError(
            f"output(s) {names} have a count of their own each batch (data-dependent), which a table beside the "
            "main one holds; an Iceberg output is one table: leave them out with --output-names"
        )


class IcebergSink(ParquetTables):
    """A job's rows appended to the Iceberg table ``identifier`` (``NAMESPACE.TABLE``) of the
    catalog ``catalog``, part by part, each a snapshot of the job ``app_id``
    (NOTE [ parts appended as Iceberg snapshots ])."""

    def __init__(
        self,
        identifier: str,
        app_id: str,
        catalog: str = "default",
        resume: bool = False,
        part_rows: int | None = None,
        part_bytes: int = ICEBERG_PART_BYTES,
        overwrite: bool = False,
        part_seconds: float | None = None,
        input_version: int | None = None,
    ) -> None:
        if resume and overwrite:
            raise ValueError("an Iceberg output is either resumed or overwritten, not both")
        storage = IcebergStorage(catalog, app_id, part_rows, part_bytes, part_seconds, not resume, overwrite,
                                 input_version)  # fmt: skip
        self.part_rows, self.part_bytes, self.part_seconds = part_rows, part_bytes, part_seconds
        super().__init__(identifier, storage, as_list_columns, (), resume)
