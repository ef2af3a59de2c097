"""Tables in object storage: a Parquet, CSV or JSON Lines object, or a prefix of them (``util.storage``).

:class:`StoredTableSource` is a :class:`~pipeline.sources.tables.ColumnarSource` whose record
batches come from pyarrow's dataset over the store's filesystem: streamed, a batch at a time
(a Parquet object by ranged requests for its row groups), so the first batch does not wait
for the whole object; the columns, ids, casts and windows are the local table's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

from ..session import TensorSpec
from ..util.errors import SourceError
from ..util.storage import StoredPath, filesystem_of, is_storage_url, said
from .table_formats import format_of_names, refuse_table_folder
from .tables import ColumnarSource

#: each format pyarrow's datasets read, by a file's suffix
DATASET_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".jsonl": "json", ".json": "json"}
#: the read's record batches, at most (the source rebatches them to its batch size)
_READ_ROWS = 65536


def open_dataset(location: str, where: str | None = None) -> Any:
    """pyarrow's dataset of a table at ``location``: a local path or a storage URL; a file of
    a format it reads by its suffix, or a folder (a prefix) of them."""
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    where = where or location
    if is_storage_url(location):
        try:
            filesystem, path = filesystem_of(location)
            info = filesystem.get_file_info(path)
        except OSError as exc:
            raise SourceError(said(location, exc)) from exc
    else:
        filesystem, path = pafs.LocalFileSystem(), location
        info = filesystem.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        if is_storage_url(location):  # a missing bucket said as such (a request only where nothing is found)
            try:
                StoredPath(filesystem, path, location.split("://", 1)[0]).check_bucket()
            except OSError as exc:
                raise SourceError(str(exc)) from exc
        raise SourceError(f"{where!r}: nothing is stored there (no such file, object or prefix)")
    fmt = _format(filesystem, path, info, where)
    try:
        return ds.dataset(path, filesystem=filesystem, format=fmt)
    except Exception as exc:
        raise SourceError(said(where, exc)) from exc


def _format(filesystem: Any, path: str, info: Any, where: str) -> str:
    """The format of a file by its suffix, or of a folder by its files' (one format a folder)."""
    import pyarrow.fs as pafs

    if info.type == pafs.FileType.Directory:
        files = filesystem.get_file_info(pafs.FileSelector(path, recursive=True))
        table = format_of_names([PurePosixPath(f.path).relative_to(path).parts[0] for f in files])
        if table is not None:  # NOTE [ a table format's folder ]
            raise refuse_table_folder(where, table, "a text run")
        suffixes = {PurePosixPath(f.path).suffix.lower() for f in files if f.type == pafs.FileType.File}
        found = {DATASET_FORMATS[suffix] for suffix in suffixes if suffix in DATASET_FORMATS}
        if len(found) != 1:
            raise SourceError(
                f"{where!r}: a folder of tables holds files of one format ({sorted(set(DATASET_FORMATS))}), "
                f"found {sorted(f for f in found if f) or 'none'}"
            )
        return str(found.pop())
    fmt = DATASET_FORMATS.get(PurePosixPath(path).suffix.lower())
    if fmt is None:
        raise SourceError(f"{where!r}: tables are read from {sorted(DATASET_FORMATS)} files, by the suffix")
    return fmt


class StoredTableSource(ColumnarSource):
    """A table at a storage URL (see the module), read as a local table is."""

    kind = "table"
    what = "input table"

    def __init__(
        self,
        url: str,
        batch_size: int,
        inputs: Sequence[TensorSpec],
        columns: Mapping[str, Sequence[str]] | None = None,
        id_column: str | None = None,
        keep_columns: Sequence[str] = (),
    ) -> None:
        self._dataset = open_dataset(url)
        super().__init__(url, batch_size, inputs, columns, id_column, keep_columns)

    def _located(self, path: Any) -> Any:
        return str(path)  # a URL: the dataset found it (open_dataset)

    def __len__(self) -> int:
        return int(self._dataset.count_rows())

    def _read_schema(self) -> Any:
        return self._dataset.schema

    def _blocks(self, wanted: list[str], skip: int) -> Iterator[Any]:
        """Record batches of ``wanted`` from row ``skip`` on, streamed and read ahead by pyarrow's
        threads; a Parquet data set's row groups before the one holding row ``skip`` left
        unread (their footers say how many rows they hold), the rows before read through else."""
        dataset, row = self._from_row(skip)
        for record in dataset.to_batches(columns=wanted, batch_size=_READ_ROWS):
            first, row = row, row + record.num_rows
            if row <= skip:
                continue
            yield record.slice(skip - first) if first < skip else record

    def _from_row(self, skip: int) -> tuple[Any, int]:
        """The dataset from the Parquet row group that holds row ``skip`` on, and the rows before
        it (a window of a shard, a resumed run: the groups before are never fetched); the whole
        dataset and 0 where it is not Parquet or ``skip`` is 0."""
        import pyarrow.dataset as ds

        dataset = self._dataset
        if not skip or not isinstance(dataset.format, ds.ParquetFileFormat):
            return dataset, 0
        fragments, row = list(dataset.get_fragments()), 0
        for number, fragment in enumerate(fragments):
            fragment.ensure_complete_metadata()
            groups = fragment.row_groups
            for index, group in enumerate(groups):
                if row + group.num_rows > skip:
                    rest = [fragment.subset(row_group_ids=list(range(index, len(groups)))), *fragments[number + 1 :]]
                    return ds.FileSystemDataset(rest, dataset.schema, dataset.format, dataset.filesystem), row
                row += group.num_rows
        return ds.FileSystemDataset([], dataset.schema, dataset.format, dataset.filesystem), row
