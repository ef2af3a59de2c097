"""Folders that a table format owns: Delta Lake's and Apache Iceberg's.

NOTE [ a table format's folder ]: a Delta table's folder holds the Parquet files
of every version it has had (an overwrite leaves the older files for time
travel until a vacuum removes them), and an Iceberg table's data folder the same.
Read as a loose folder of Parquet files, such a table gives its stale rows
beside its live ones, and the run exits 0.  So a folder is looked at for a
format's log before it is read as a data set: a Delta table (its
``_delta_log/``) is read as its log says, one version of it
(:class:`DeltaTableSource`: deltalake, delta-rs's binding, lists the version's
files; they are read as a data set's are), and every other reader (a text
table, ``--ray``, a prefix in object storage) refuses it, as it refuses an
Iceberg table (its ``metadata/*.metadata.json``), naming what to do instead.
A resumed run reads the version its job record names, so the rows do not shift
under it when the table gets a commit between the two runs.  An Iceberg table is read
through its catalog (``--input NAMESPACE.TABLE --input-format iceberg``,
:class:`IcebergTableSource`): the data files its snapshot names, never its folder.

deltalake is used, not our own reading of the log: the log's checkpoints,
protocol versions and features are its format, kept by its makers.  What a
table's files alone cannot say is refused, not guessed: deletion vectors (a
file's rows that a commit deleted), column mapping (a file's columns under other
names) and partition columns (values held in the log, not in the files).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..session import TensorSpec
from ..util.errors import SourceError
from .tables import ParquetDatasetSource

DELTA_LOG = "_delta_log"
#: the reader features of a Delta table whose Parquet files, listed by its log, are its rows as they are
_PLAIN_READER_FEATURES = frozenset({"timestampNtz", "v2Checkpoint", "vacuumProtocolCheck"})


def table_format(folder: str | Path) -> str | None:
    """ "delta" or "iceberg" where ``folder`` (a local path) is such a table's, else None."""
    path = Path(folder)
    if (path / DELTA_LOG).is_dir():
        return "delta"
    metadata = path / "metadata"
    if metadata.is_dir() and any(metadata.glob("*.metadata.json")):
        return "iceberg"
    return None


def format_of_names(names: Sequence[str]) -> str | None:
    """:func:`table_format` of a folder or a prefix in object storage by the names it holds
    (an Iceberg table by its ``metadata`` and ``data`` folders: a listing does not look inside them)."""
    if DELTA_LOG in names:
        return "delta"
    return "iceberg" if {"metadata", "data"} <= set(names) else None


def refuse_table_folder(where: str, fmt: str, reader: str) -> SourceError:
    """The error of a ``reader`` (what reads it: "a text run", "--ray") given a table format's folder."""
    name = "a Delta Lake table" if fmt == "delta" else "an Apache Iceberg table"
    instead = (
        "a table run (ortpipe run MODEL --input FOLDER) reads a local Delta table by its log"
        if fmt == "delta"
        else "Iceberg tables are not read yet"
    )
    return SourceError(
        f"{where!r} is {name}: its folder holds files of earlier versions, so it is not read as loose Parquet "
        f"files; {reader} does not read it as the table yet ({instead}; or write the version you want to a "
        "Parquet file first)"
    )


def delta_version(path: str | Path, version: int | None = None) -> int:
    """The version of the Delta table at ``path`` that a run reads: ``version``, checked, or its latest."""
    return _snapshot(path, version).version()


def _snapshot(path: str | Path, version: int | None) -> Any:
    try:
        from deltalake import DeltaTable
    except ImportError:
        raise SourceError(
            f"{str(path)!r} is a Delta Lake table, read through deltalake: pip install 'ortpipe[tables]'"
        ) from None
    try:
        return DeltaTable(str(path), version=version)
    except Exception as exc:  # deltalake's DeltaError and its kinds: a version it does not have, a broken log
        at = "" if version is None else f" at version {version}"
        raise SourceError(f"{str(path)!r}: the Delta table cannot be read{at}: {exc}") from exc


def _refuse_what_files_cannot_say(path: str | Path, table: Any) -> None:
    protocol, metadata = table.protocol(), table.metadata()
    features = set(protocol.reader_features or ())
    mapping = metadata.configuration.get("delta.columnMapping.mode", "none")
    unread = sorted(features - _PLAIN_READER_FEATURES) + ([f"columnMapping ({mapping})"] if mapping != "none" else [])
    if protocol.min_reader_version > 3 or unread:
        raise SourceError(
            f"{str(path)!r}: the Delta table needs reader features ortpipe does not apply to its files "
            f"({', '.join(unread) or f'reader version {protocol.min_reader_version}'}): deletion vectors would "
            "leave deleted rows in, mapped columns under their files' names; write the version to Parquet "
            "first (DeltaTable(...).to_pyarrow_table())"
        )
    if metadata.partition_columns:
        raise SourceError(
            f"{str(path)!r}: the Delta table is partitioned by {list(metadata.partition_columns)}, whose values "
            "its log holds, not its files; partitioned tables are not read yet: write the version to Parquet "
            "first (DeltaTable(...).to_pyarrow_table())"
        )


def _relative_files(table: Any) -> list[str]:
    """The version's files, by their paths below the table's folder (its log's ``add`` actions), sorted."""
    import pyarrow as pa

    return sorted(pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist())


class DeltaTableSource(ParquetDatasetSource):
    """One version of a local Delta Lake table (``version``, else its latest), read as a
    Parquet data set of the files its log lists for that version
    (NOTE [ a table format's folder ]); columns, ids, windows and resuming as a data set's, ``file``
    naming each row's file below the table's folder."""

    kind = "Delta table"
    what = "input Delta table"

    def __init__(
        self,
        path: str | Path,
        batch_size: int,
        inputs: Sequence[TensorSpec],
        columns: Mapping[str, Sequence[str]] | None = None,
        id_column: str | None = None,
        keep_columns: Sequence[str] = (),
        version: int | None = None,
    ):
        table = _snapshot(path, version)
        _refuse_what_files_cannot_say(path, table)
        #: the version read
        self.version: int = table.version()
        self._files_of_version = [Path(path) / name for name in _relative_files(table)]
        super().__init__(path, batch_size, inputs, columns, id_column, keep_columns)

    def describe(self) -> str:
        return f"Delta table version {self.version}, {len(self.parts)} files"

    def _files(self) -> list[Path]:
        if not self._files_of_version:
            raise SourceError(f"{str(self.path)!r}: version {self.version} of the Delta table holds no files")
        return self._files_of_version


def iceberg_snapshot(identifier: str, catalog: str = "default", snapshot_id: int | None = None) -> int:
    """The snapshot of the Iceberg table ``identifier`` that a run reads: ``snapshot_id``, checked,
    or its current one."""
    table = _iceberg_table(identifier, catalog)
    snapshot = table.current_snapshot() if snapshot_id is None else table.snapshot_by_id(snapshot_id)
    if snapshot is None:
        said = "has no snapshot (no rows yet)" if snapshot_id is None else f"has no snapshot {snapshot_id}"
        raise SourceError(f"the Iceberg table {identifier!r} {said}")
    return int(snapshot.snapshot_id)


def _iceberg_table(identifier: str, catalog: str) -> Any:
    from ..util.iceberg import iceberg_catalog

    try:
        return iceberg_catalog(catalog, SourceError).load_table(identifier)
    except SourceError:
        raise
    except Exception as exc:  # pyiceberg's NoSuchTableError, NoSuchNamespaceError, a catalog it cannot reach
        raise SourceError(f"the Iceberg table {identifier!r} cannot be read from catalog {catalog!r}: {exc}") from exc


class IcebergTableSource(ParquetDatasetSource):
    """One snapshot of an Iceberg table (``snapshot_id``, else its current one), read as a Parquet
    data set of the data files the snapshot names, in their paths' order, never the table's
    folder (NOTE [ a table format's folder ]); a table with delete files, or in a warehouse
    other than a local one, is refused."""

    kind = "Iceberg table"
    what = "input Iceberg table"

    def __init__(
        self,
        identifier: str,
        batch_size: int,
        inputs: Sequence[TensorSpec],
        columns: Mapping[str, Sequence[str]] | None = None,
        id_column: str | None = None,
        keep_columns: Sequence[str] = (),
        catalog: str = "default",
        snapshot_id: int | None = None,
    ):
        table = _iceberg_table(identifier, catalog)
        #: the snapshot read
        self.version = iceberg_snapshot(identifier, catalog, snapshot_id)
        tasks = list(table.scan(snapshot_id=self.version).plan_files())
        deletes = sum(len(task.delete_files) for task in tasks)
        if deletes:
            raise SourceError(
                f"the Iceberg table {identifier!r} has {deletes} delete file(s) at snapshot {self.version}: rows its "
                "data files still hold are deleted; not read yet (compact the table, or read it with pyiceberg's "
                "scan().to_arrow() into a Parquet file first)"
            )
        uris = sorted(task.file.file_path for task in tasks)
        elsewhere = [uri for uri in uris if not uri.startswith(("file:", "/"))]
        if elsewhere:
            raise SourceError(
                f"the Iceberg table {identifier!r} keeps its files in object storage ({elsewhere[0]!r}): only a "
                "local warehouse is read yet"
            )
        self._files_of_version = [Path(uri.removeprefix("file://")) for uri in uris]
        self.identifier = identifier
        root = Path(os.path.commonpath([str(f.parent) for f in self._files_of_version])) if uris else Path(".")
        super().__init__(root, batch_size, inputs, columns, id_column, keep_columns)

    def describe(self) -> str:
        return f"Iceberg table {self.identifier} at snapshot {self.version}, {len(self.parts)} files"

    def _files(self) -> list[Path]:
        if not self._files_of_version:
            raise SourceError(f"the Iceberg table {self.identifier!r} holds no rows at snapshot {self.version}")
        return self._files_of_version
