"""Arrays and tables: a ``.npy`` memory-mapped, a Parquet file, a folder of them (a
data set) and a CSV file read in record batches, columns mapped to model inputs."""

from __future__ import annotations

import collections
import copy
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..session import TensorSpec
from ..util.arrow import concatenated, exact_values, from_numpy, to_numpy
from ..util.capabilities import HasLength
from ..util.rows import drop_first, peel_first_row, recut
from ._base import ArrayRows, SourceBatch, SourceError, existing_path, fewer_rows, one_input
from .columns import cast_columns, check_footers, numeric_column, record_column
from .files import PARQUET_SUFFIXES, parquet_files
from .table_plan import first_non_number, plan_table, rows_id

if TYPE_CHECKING:
    from .table_filling import TableFiller


class NpySource(ArrayRows):
    """Rows of a ``.npy`` array (memory-mapped: only the rows of a batch are read)."""

    def __init__(self, path: str | Path, batch_size: int, inputs: Sequence[TensorSpec], input_name: str | None = None):
        self.path = existing_path(path, "input .npy file")
        try:
            self.array = np.load(self.path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise SourceError(f"{str(self.path)!r} is not a readable .npy array: {exc}") from exc
        self.spec = one_input(inputs, input_name, "a .npy source")
        if self.array.ndim == 0:
            raise SourceError(f"{str(self.path)!r} holds a scalar, not rows")
        self.batch_size = batch_size

    @property
    def all_rows(self) -> int:
        return int(self.array.shape[0])

    def __iter__(self) -> Iterator[SourceBatch]:
        for start in range(self.start, int(self.array.shape[0]), self.batch_size):
            rows = self.array[start : start + self.batch_size]
            yield SourceBatch({self.spec.name: rows}, self.meta_of(start - self.start, len(rows)))

    def arrays(self) -> dict[str, np.ndarray]:
        """The memory map from the first row read: a job hands it to the engine whole
        (``_capabilities.CutFromArrays``), which registers it in place where that pays."""
        return {self.spec.name: self.array[self.start :]}


class ColumnarSource:
    """A table read in record batches; columns become model inputs.

    ``columns`` maps an input to one list column (``{"x": ["features"]}``) or
    to scalar columns stacked in order (``{"x": ["f0", "f1", ...]}``); without
    it the plan's rules place them (NOTE [ the table plan ]: ``self.plan``).
    Each row keeps the id column's value exactly (``row_id``, or the column named
    like an id, where none is named), else its row number, and the
    ``keep_columns``.  Subclasses give the schema and the batches.
    """

    kind = "table"
    #: what the path is, for "... not found"
    what = "input table file"

    def __init__(
        self,
        path: str | Path,
        batch_size: int,
        inputs: Sequence[TensorSpec],
        columns: Mapping[str, Sequence[str]] | None = None,
        id_column: str | None = None,
        keep_columns: Sequence[str] = (),
    ):
        self.path = self._located(path)
        self.schema = self._read_schema()
        self.batch_size = batch_size
        #: rows of the table left out before the first batch (:meth:`after`)
        self.skip = 0
        #: which columns feed which input, the id, the kept columns (NOTE [ the table plan ])
        self.plan = plan_table(
            self.schema,
            inputs,
            columns=columns,
            id_column=id_column,
            keep_columns=keep_columns,
            where=str(self.path),
            first_non_number=self._first_non_number,
        )
        self.id_column = self.plan.id_column
        self.columns = self.plan.inputs
        self.specs = {spec.name: spec for spec in inputs}
        self._check_footers({c: self.specs[name].dtype for name, cols in self.columns.items() for c in cols})
        #: the inputs whose columns are cast to the model's dtype, "float64 -> float32" (NOTE [ input dtypes ])
        self.casts = self.plan.casts
        #: given the metadata of the last row left out, before the first batch (:meth:`checked_after`)
        self._check_before: Callable[[dict[str, np.ndarray]], None] | None = None

    def _first_non_number(self, column: str) -> tuple[int, str] | None:
        """The first row of text ``column`` whose value is not a number, and the value (a refusal's message)."""
        row = 0
        for record in self._blocks([column], 0):
            bad = first_non_number(record_column(record, column).to_pylist(), row)
            if bad is not None:
                return bad
            row += record.num_rows
        return None

    def _located(self, path: str | Path) -> Any:
        """The table's path, checked to be there (a storage URL's source finds its own)."""
        return existing_path(path, self.what)

    def _check_footers(self, columns: Mapping[str, np.dtype]) -> None:
        """Refuse, before any batch, what a format's footer already tells is wrong (Parquet's nulls,
        and values a cast to the input's dtype would change); ``columns``: each one read, its input's dtype."""

    def after(self, rows: int) -> ColumnarSource:
        """This table without its first ``rows`` rows, each later row keeping its id
        (a resumed run; whole row groups or files before them are not read)."""
        if isinstance(self, HasLength) and rows > len(self):  # a CSV's rows are known once read: its iteration checks
            raise fewer_rows(self.path, rows)(len(self))
        later = copy.copy(self)
        later.skip = self.skip + rows
        return later

    def _read_schema(self) -> Any:
        """The table's pyarrow schema, or a SourceError saying why the file cannot be read."""
        raise NotImplementedError

    #: the blocks of :meth:`_blocks` from the first row are ``batch_size`` rows each already
    _blocks_batched = False

    def _blocks(self, wanted: list[str], skip: int) -> Iterator[Any]:
        """pyarrow record batches of ``wanted`` columns from row ``skip`` on, of any sizes
        (the rows before left unread where the format allows)."""
        raise NotImplementedError

    def checked_after(self, rows: int, check: Callable[[dict[str, np.ndarray]], None]) -> ColumnarSource:
        """:meth:`after`, the last row left out (row ``rows - 1``) read on the way and its
        metadata given to ``check`` before the first batch: a resumed run's check of the
        input (``jobs.resumed``) costs no second read, where a CSV must be parsed through."""
        later = self.after(rows)
        if rows:
            later._check_before = check
        return later

    def _record_batches(self, wanted: list[str]) -> Iterator[Any]:
        """pyarrow record batches of ``wanted`` columns from row ``skip`` on, ``batch_size``
        rows each (the last shorter)."""
        check, skip = self._check_before, self.skip
        if check is None or not skip:
            blocks = self._blocks(wanted, skip)
        else:  # one row earlier, that row taken off and checked (checked_after)
            blocks = peel_first_row(
                self._blocks(wanted, skip - 1),
                _record_rows,
                _sliced_record,
                lambda row: check(self._meta(row, skip - 1)),
                lambda: fewer_rows(self.path, skip)(skip - 1),
            )
        return blocks if self._blocks_batched and not skip else rebatch(blocks, self.batch_size)

    def _wanted(self) -> list[str]:
        """The columns read: the mapped ones, sorted, then the id column and the kept ones."""
        wanted = sorted({c for cols in self.columns.values() for c in cols})
        for column in (self.id_column, *self.plan.kept):
            if column is not None and column not in wanted:
                wanted.append(column)
        return wanted

    def records(self) -> Generator[tuple[Any, dict[str, np.ndarray], int], None, None]:
        """Each pyarrow record batch of the columns read, ``batch_size`` rows (the last
        shorter), with its rows' metadata and the row of the table it starts at."""
        start = self.skip
        for record in self._record_batches(self._wanted()):
            yield record, self._meta(record, start), start
            start += record.num_rows

    def __iter__(self) -> Iterator[SourceBatch]:
        where = str(self.path)
        for record, meta, start in self.records():
            inputs = {
                name: cast_columns(
                    self.specs[name], stacked(record, cols, (where, start), self.specs[name].rank), cols, (where, start)
                )
                for name, cols in self.columns.items()
            }
            yield SourceBatch(inputs, meta)

    @property
    def filled_rows(self) -> dict[str, tuple[int, ...] | None]:
        """See NOTE [ tables fill slots ] in ``sources/table_filling``."""
        from .table_filling import filled_rows

        return filled_rows(self.schema, self.columns, self.specs)

    def filler(self, row_shapes: Mapping[str, tuple[int, ...]] | None = None) -> TableFiller:
        """A fresh reading of the table that writes each batch's columns into a slot."""
        from .table_filling import TableFiller

        return TableFiller(self, row_shapes)

    def _meta(self, record: Any, start: int) -> dict[str, np.ndarray]:
        """The rows' metadata: the id column's values exactly (else their row numbers from
        ``start``), then the kept columns'."""
        if self.id_column is None:
            return self._carried(record, {"row_id": np.arange(start, start + record.num_rows, dtype=np.int64)})
        return self._carried(record, {})

    def _carried(self, record: Any, meta: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``meta`` with the id column's values (where there is one) and the kept columns', exactly."""
        for column in (self.id_column, *self.plan.kept):
            if column is not None:
                meta[column] = exact_values(record_column(record, column))
        return meta


def stacked(record: Any, columns: Sequence[str], place: tuple[str, int] | None = None, rank: int = 2) -> np.ndarray:
    """``columns`` of ``record`` as one array a row: one list column's values, or
    scalar columns side by side in order (``place``: see :func:`numeric_column`); one
    scalar column for an input of ``rank`` 1 (``[N]``) as it is."""
    parts = [numeric_column(c, record_column(record, c), place) for c in columns]
    if len(parts) == 1 and (parts[0].ndim == 2 or rank == 1):
        return parts[0]
    return np.stack(parts, axis=1)


class ParquetSource(ColumnarSource):
    """A Parquet table read in record batches (see :class:`ColumnarSource` for the columns)."""

    kind = "Parquet"
    what = "input Parquet file"

    def _read_schema(self) -> Any:
        try:
            self.file = streamed_parquet(self.path)
        except Exception as exc:
            raise SourceError(f"{str(self.path)!r} is not a readable Parquet file: {exc}") from exc
        return self.file.schema_arrow

    def __len__(self) -> int:
        return max(0, int(self.file.metadata.num_rows) - self.skip)

    def _check_footers(self, columns: Mapping[str, np.dtype]) -> None:
        check_footers(str(self.path), self.file.metadata, columns)

    _blocks_batched = True  # from the first row; from a later one the first is cut, so they are re-cut

    def _blocks(self, wanted: list[str], skip: int) -> Iterator[Any]:
        return _file_named(self.path, _parquet_batches(self.path, self.file, self.batch_size, wanted, skip))


#: bytes read at a time from each column of a Parquet file (see :func:`streamed_parquet`)
STREAM_BUFFER = 1 << 16


def streamed_parquet(path: Path) -> Any:
    """A Parquet file opened to be read in order, a buffer of each column's pages at a time.

    By default pyarrow reads a row group's whole column chunks into fresh memory
    before its first record batch; for a local file read through once, that is
    the row group's size in page faults and the first batch's wait.  Streamed,
    the pages are read as they are decoded, into memory the pool reuses
    (measured: docs/results.md, "Reading Parquet")."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(path, pre_buffer=False, buffer_size=STREAM_BUFFER)


def _file_named(path: Path, batches: Iterator[Any]) -> Iterator[Any]:
    """``batches``, a failure to read them naming the file (bytes overwritten, a file cut short)."""
    import pyarrow as pa

    try:
        yield from batches
    except (OSError, pa.ArrowException) as exc:
        raise SourceError(
            f"{str(path)!r} cannot be read: {exc} (is the file damaged: cut short, or overwritten?)"
        ) from exc


def _parquet_batches(path: Path, file: Any, batch_size: int, columns: list[str], skip: int = 0) -> Iterator[Any]:
    """A Parquet file's record batches from row ``skip`` on: the row groups wholly
    before it are not read (their sizes are in the footer), the one it lies in is cut."""
    if not skip:
        return file.iter_batches(batch_size=batch_size, columns=columns)  # type: ignore[no-any-return]
    first_group, first_row = 0, 0
    groups = file.metadata.num_row_groups
    while first_group < groups and first_row + file.metadata.row_group(first_group).num_rows <= skip:
        first_row += file.metadata.row_group(first_group).num_rows
        first_group += 1
    if first_group == groups:
        return iter(())
    batches = file.iter_batches(batch_size=batch_size, columns=columns, row_groups=list(range(first_group, groups)))
    return drop_first(batches, skip - first_row, _record_rows, _sliced_record, fewer_rows(path, skip))


def _record_rows(record: Any) -> int:
    return int(record.num_rows)


def _sliced_record(record: Any, rows: slice) -> Any:
    return record[rows]


#: the dataset source's own columns, carried through re-batching beside the wanted ones
_FILE_NUMBER, _FILE_ROW = "\x00ortpipe file", "\x00ortpipe row"


@dataclass(frozen=True)
class _Part:
    path: Path
    #: its path below the dataset's folder, as the ``file`` column gives it
    name: str
    rows: int
    schema: Any
    #: its footer (row groups, statistics)
    metadata: Any


class ParquetDatasetSource(ColumnarSource):
    """A folder of Parquet files (a partitioned data set, as Spark, Dask or
    pyarrow write it) read as one table, file after file in path order
    (:func:`parquet_files`), batches running across file boundaries.

    The columns are mapped as for one file, from the first file's schema;
    every file must have the mapped columns, of the same types (checked from
    the footers before any batch is read, the file named when one differs).
    Each row's metadata is ``file`` (its path below the folder) and its
    ``row_id`` in that file, or the id column's value: a result joins back to
    its row whatever the files hold.  Footers are read when the source is
    made (the length for the progress bar, the checks); one file is open at a
    time while it is read.
    """

    kind = "Parquet dataset"
    what = "input folder of Parquet files"

    def describe(self) -> str:
        """What a run says it reads: a data set, and how many files it holds."""
        return f"parquet data set of {len(self.parts)} files"

    def __init__(
        self,
        path: str | Path,
        batch_size: int,
        inputs: Sequence[TensorSpec],
        columns: Mapping[str, Sequence[str]] | None = None,
        id_column: str | None = None,
        keep_columns: Sequence[str] = (),
    ):
        super().__init__(path, batch_size, inputs, columns, id_column, keep_columns)
        self.file_column = "ortpipe_file" if self.id_column == "file" else "file"
        self._check_parts()
        self._names = np.asarray([part.name for part in self.parts])

    def _read_schema(self) -> Any:
        import pyarrow.parquet as pq

        if not self.path.is_dir():
            raise SourceError(f"{str(self.path)!r} is not a folder")
        self.parts: list[_Part] = []
        for file in self._files():
            try:
                metadata = pq.read_metadata(file)
                schema = metadata.schema.to_arrow_schema()
            except Exception as exc:
                raise SourceError(f"{str(file)!r} is not a readable Parquet file: {exc}") from exc
            self.parts.append(_Part(file, file.relative_to(self.path).as_posix(), metadata.num_rows, schema, metadata))
        return self.parts[0].schema

    def _files(self) -> list[Path]:
        """The data set's files, in the order their rows are read."""
        files = parquet_files(self.path)
        if not files:
            raise SourceError(f"no Parquet files ({', '.join(PARQUET_SUFFIXES)}) in {str(self.path)!r}")
        return files

    def _check_parts(self) -> None:
        """Every file has the columns read, of the first file's types."""
        first = self.parts[0]
        wanted = set(self._wanted())
        for part in self.parts[1:]:
            for name in sorted(wanted):
                expected = first.schema.field(name).type
                index = part.schema.get_field_index(name)
                if index < 0:
                    raise SourceError(
                        f"{str(part.path)!r} has no column {name!r} (the first file, {first.name!r}, has): "
                        f"columns {part.schema.names}"
                    )
                got = part.schema.field(index).type
                if got != expected:
                    raise SourceError(
                        f"column {name!r} is {got} in {str(part.path)!r} but {expected} in the first file, "
                        f"{first.name!r}: every file of a data set needs the same types"
                    )

    def __len__(self) -> int:
        return max(0, sum(part.rows for part in self.parts) - self.skip)

    def _check_footers(self, columns: Mapping[str, np.dtype]) -> None:
        for part in self.parts:
            check_footers(str(part.path), part.metadata, columns)

    def _blocks(self, wanted: list[str], skip: int) -> Iterator[Any]:
        """Each file's record batches from row ``skip`` of the data set on, its number and
        row numbers added as columns (so they travel with their rows through re-batching);
        whole files before it are not opened."""
        import pyarrow as pa

        names = [*wanted, _FILE_NUMBER, _FILE_ROW]
        for number, part in enumerate(self.parts):
            if skip >= part.rows:
                skip -= part.rows
                continue
            start, skip = skip, 0
            try:
                with streamed_parquet(part.path) as file:
                    for record in _parquet_batches(part.path, file, self.batch_size, wanted, start):
                        rows = record.num_rows
                        arrays = [record_column(record, name) for name in wanted]
                        arrays.append(from_numpy(np.full(rows, number, np.int32)))
                        arrays.append(from_numpy(np.arange(start, start + rows, dtype=np.int64)))
                        # rebuilt from the arrays: files whose fields differ only in nullability combine
                        yield pa.RecordBatch.from_arrays(arrays, names=names)
                        start += rows
            except (OSError, pa.ArrowException) as exc:
                raise SourceError(f"{str(part.path)!r} cannot be read: {exc}") from exc

    def _meta(self, record: Any, start: int) -> dict[str, np.ndarray]:
        numbers = to_numpy(record_column(record, _FILE_NUMBER))
        meta = {self.file_column: self._names[numbers]}
        if self.id_column is None:
            meta["row_id"] = to_numpy(record_column(record, _FILE_ROW))
        return self._carried(record, meta)


class CsvSource(ColumnarSource):
    """A CSV file streamed block by block (pyarrow's reader, types inferred from
    the first block) and cut into batches of ``batch_size`` rows; columns as
    for :class:`ParquetSource`.  Its length is not known before it is read:
    ``rows_hint`` estimates it from the first block."""

    kind = "CSV"
    what = "input CSV file"
    #: about how many rows the file holds (for a progress bar): its size over the bytes a row of the first block
    rows_hint = 0

    def _read_schema(self) -> Any:
        import pyarrow.csv as pcsv

        with self._open() as reader:
            try:
                first = reader.read_next_batch().num_rows
            except StopIteration:
                first = 0
            size = self.path.stat().st_size
            # pyarrow's blocks are block_size bytes of the file, the last one shorter
            self.rows_hint = round(first * size / max(1, min(size, pcsv.ReadOptions().block_size)))
            return reader.schema

    def _open(self, wanted: list[str] | None = None) -> Any:
        import pyarrow as pa
        import pyarrow.csv as pcsv

        try:
            convert = pcsv.ConvertOptions(include_columns=wanted) if wanted else None
            return pcsv.open_csv(self.path, convert_options=convert)
        except (pa.ArrowInvalid, OSError) as exc:
            raise SourceError(f"{str(self.path)!r} is not a readable CSV file: {exc}") from exc

    def _blocks(self, wanted: list[str], skip: int) -> Iterator[Any]:
        with self._open(wanted) as reader:
            blocks = self._read_blocks(reader)
            if skip:  # read through: a CSV's rows can only be found by parsing it
                blocks = drop_first(blocks, skip, _record_rows, _sliced_record, fewer_rows(self.path, skip))
            yield from blocks

    def _read_blocks(self, reader: Any) -> Iterator[Any]:
        import pyarrow as pa

        while True:
            try:
                yield reader.read_next_batch()
            except StopIteration:
                return
            except pa.ArrowInvalid as exc:  # a later block that does not parse as the first did
                raise SourceError(f"{str(self.path)!r}: {exc}") from exc


class JsonLinesSource(CsvSource):
    """A JSON Lines file (an object a line) streamed block by block with pyarrow's reader,
    types inferred from the first block; otherwise as :class:`CsvSource` (its length
    estimated, its rows found by reading through)."""

    kind = "JSON Lines"
    what = "input JSON Lines file"

    def _open(self, wanted: list[str] | None = None) -> Any:
        import pyarrow as pa
        import pyarrow.json as pjson

        try:
            return _Selecting(pjson.open_json(self.path), wanted)
        except (pa.ArrowInvalid, OSError) as exc:
            raise SourceError(f"{str(self.path)!r} is not a readable JSON Lines file: {exc}") from exc


class _Selecting:
    """A pyarrow streaming reader that gives the ``wanted`` columns only (pyarrow's JSON reader
    reads every field; CSV's reader takes ``include_columns``)."""

    def __init__(self, reader: Any, wanted: list[str] | None) -> None:
        self._reader, self._wanted = reader, wanted

    @property
    def schema(self) -> Any:
        return self._reader.schema

    def read_next_batch(self) -> Any:
        batch = self._reader.read_next_batch()
        return batch.select(self._wanted) if self._wanted else batch

    def __enter__(self) -> _Selecting:
        return self

    def __exit__(self, *exc: object) -> None:
        self._reader.close()


def rebatch(blocks: Iterable[Any], rows: int) -> Iterator[Any]:
    """pyarrow record batches of any sizes re-cut into batches of ``rows`` rows, in order
    (the last one shorter), each one contiguous; empty blocks are skipped.

    A batch that lies inside one block is a slice of it (no copy); only one
    that spans blocks is copied into one piece."""
    return recut(blocks, rows, _record_rows, _sliced_record, _joined)


def _joined(pieces: list[Any]) -> Any:
    """One record batch of the rows of ``pieces``, in order."""
    import pyarrow as pa

    (joined,) = pa.Table.from_batches(pieces).combine_chunks().to_batches()
    return joined


class PathTable:
    """A table that lists files (a manifest: a ``.parquet`` or ``.csv`` file whose
    ``column`` holds a path a row, relative to the table's folder or absolute):
    the paths as written (``names``, text), each row's id (``ids``, exactly: the
    ``id_column``'s values, else the table's ``row_id`` column, else the one column
    named like an id - NOTE [ the table plan ] - else the row's number; named
    ``id_name``) and the files they name (:meth:`file`)."""

    def __init__(self, path: Path, column: str, id_column: str | None, what: str) -> None:
        self.path, self.column = path, column
        table = self._read(what, id_column)
        names = table.column(column)
        if names.null_count:
            row = next(index for index, value in enumerate(names.is_null().to_pylist()) if value)
            raise SourceError(f"{str(path)!r}: row {row} has no {column!r} (an empty path)")
        if not table.num_rows:
            raise SourceError(f"{str(path)!r} lists no {what}s: it has no rows")
        #: the paths as the table writes them, text
        self.names = names.cast("string").combine_chunks()
        self.id_name = self._id or "row_id"
        self.ids = (
            exact_values(table.column(self.id_name))
            if self.id_name in table.column_names
            else np.arange(table.num_rows, dtype=np.int64)
        )

    def __len__(self) -> int:
        return len(self.names)

    def file(self, row: int) -> Path:
        """The file row ``row`` names (an absolute path stays itself)."""
        return self.path.parent / self.names[row].as_py()

    def _read(self, what: str, id_column: str | None) -> Any:
        """The table's path column and id column (and ``row_id``, where it has one)."""
        import pyarrow as pa
        import pyarrow.csv as pcsv
        import pyarrow.parquet as pq

        suffix = self.path.suffix.lower()
        if suffix not in (*PARQUET_SUFFIXES, ".csv"):
            raise SourceError(f"{str(self.path)!r}: a table of {what} paths is a .parquet or .csv file")
        try:
            names = pq.read_schema(self.path).names if suffix != ".csv" else pcsv.open_csv(self.path).schema.names
        except (pa.ArrowInvalid, OSError) as exc:
            raise SourceError(f"{str(self.path)!r} is not a readable table: {exc}") from exc
        for name, kind in ((self.column, f"{what} path"), (id_column, "id")):
            if name is not None and name not in names:
                raise SourceError(f"the {kind} column {name!r} is not in {str(self.path)!r}: columns {names}")
        #: the rows' id column, named or found (NOTE [ the table plan ]); None: none
        self._id = rows_id(names, id_column, {self.column}, where=str(self.path))[0]
        wanted = [name for name in (self.column, self._id) if name is not None]
        if suffix == ".csv":
            types = {self.column: pa.string()}  # a path is text, however it looks
            options = pcsv.ConvertOptions(include_columns=wanted, column_types=types)
            return pcsv.read_csv(self.path, convert_options=options)
        return pq.read_table(self.path, columns=wanted)


class ImageBytesTable:
    """Parquet files whose ``column`` holds the images themselves
    (NOTE [ images in a table ]): their encoded bytes (binary), or a struct whose ``bytes`` field holds
    them, as Hugging Face datasets write an ``Image`` feature (``{bytes, path}``),
    one file or the files of a data set (``files``, in order) read as one table.
    Each row's id as :class:`PathTable` gives it (``ids``, ``id_name``; in a data
    set, the row's in its file, and ``file_of(row)`` says which); a row's bytes
    (:meth:`image`) are read a row group at a time, the last two kept, so the
    table is never in memory whole; any thread may ask."""

    #: row groups kept read: the decode threads work on a batch and the next
    CACHED_GROUPS = 2

    def __init__(self, files: Sequence[Path], column: str, id_column: str | None) -> None:
        import pyarrow.parquet as pq

        self.files, self.column = list(files), column
        ids, sizes, rows = [], [], [0]
        #: the file and its row group of every row group, in order
        self._group_of: list[tuple[int, int]] = []
        for number, file in enumerate(self.files):
            with pq.ParquetFile(file) as parquet:  # its footer read once
                metadata, schema = parquet.metadata, parquet.schema_arrow
            if id_column is not None and id_column not in schema.names:
                raise SourceError(f"the id column {id_column!r} is not in {str(file)!r}: columns {schema.names}")
            if not number:  # the rows' id, named or found in the first file (NOTE [ the table plan ])
                self.id_name = rows_id(schema.names, id_column, {column}, where=str(file))[0] or "row_id"
            if not _holds_image_bytes(schema, column):
                raise SourceError(f"{str(file)!r}: its column {column!r} does not hold images (bytes)")
            ids.append(
                exact_values(pq.read_table(file, columns=[self.id_name]).column(0))
                if self.id_name in schema.names
                else np.arange(metadata.num_rows, dtype=np.int64)
            )
            self._group_of += [(number, group) for group in range(metadata.num_row_groups)]
            sizes += [metadata.row_group(group).num_rows for group in range(metadata.num_row_groups)]
            rows.append(rows[-1] + metadata.num_rows)
        if not rows[-1]:
            where = self.files[0] if len(self.files) == 1 else self.files[0].parent
            raise SourceError(f"{str(where)!r} holds no images: it has no rows")
        self.ids = concatenated(ids)
        self._file_starts = np.asarray(rows)  # each file's first row, then the end
        self._starts = np.cumsum([0, *sizes])  # each row group's first row, then the end
        self._groups: collections.OrderedDict[int, Any] = collections.OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def holds_images(path: Path, column: str) -> bool:
        """Whether ``column`` of the Parquet file ``path`` holds images' bytes (not their paths)."""
        import pyarrow.parquet as pq

        return _holds_image_bytes(pq.read_schema(path), column)

    def __len__(self) -> int:
        return len(self.ids)

    def file_of(self, row: int) -> int:
        """The number of the file row ``row`` is in."""
        return int(np.searchsorted(self._file_starts, row, side="right")) - 1

    def name(self, row: int) -> str:
        """Row ``row`` in messages: its file and its row there."""
        file = self.file_of(row)
        return f"{self.files[file]} row {row - int(self._file_starts[file])}"

    def image(self, row: int) -> bytes:
        """Row ``row``'s encoded image, or a SourceError where the row has none."""
        group = int(np.searchsorted(self._starts, row, side="right")) - 1
        value = self._group(group)[row - int(self._starts[group])].as_py()
        if not value:
            raise SourceError(f"{self.name(row)!r} has no image: its {self.column!r} is empty")
        return bytes(value)

    def _group(self, group: int) -> Any:
        """The image bytes of row group ``group``, read once while it is among the last used."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        with self._lock:
            found = self._groups.get(group)
            if found is None:
                file, own = self._group_of[group]
                with pq.ParquetFile(self.files[file]) as parquet:  # not held open between row groups
                    found = parquet.read_row_group(own, columns=[self.column]).column(0).combine_chunks()
                if pa.types.is_struct(found.type):
                    found = found.field("bytes")
                self._groups[group] = found
                while len(self._groups) > self.CACHED_GROUPS:
                    self._groups.popitem(last=False)
            self._groups.move_to_end(group)
            return found


def _holds_image_bytes(schema: Any, column: str) -> bool:
    """Whether ``column`` of an Arrow ``schema`` is binary, or a struct whose ``bytes`` field is."""
    import pyarrow as pa

    if column not in schema.names:
        return False
    kind = schema.field(column).type
    if pa.types.is_struct(kind):
        index = kind.get_field_index("bytes")
        kind = kind.field(index).type if index >= 0 else kind
    return bool(pa.types.is_binary(kind) or pa.types.is_large_binary(kind))
