"""Sources: batches from files, without holding the whole input in memory.

Each source yields :class:`SourceBatch` items: the arrays the model (or its
preprocessing) takes, and per-row metadata that the sinks write beside the
outputs (a row id, or a frame's index and timestamp, or an image's path).

* :class:`NpySource` - a ``.npy`` array, memory-mapped;
* :class:`ParquetSource` - a Parquet table read in record batches (pyarrow),
  columns mapped to model inputs;
* :class:`ParquetDatasetSource` - a folder of Parquet files (a partitioned
  data set) read as one table, each row's file and row kept;
* :class:`CsvSource` - a CSV file streamed with pyarrow's reader, columns
  mapped the same way;
* :class:`VideoSource` - a video file decoded with PyAV into uint8 HWC frames;
* :class:`VideoFolderSource` - the videos below a folder, frame after frame;
* :class:`ImageFolderSource` - the images below a folder, read with Pillow;
* :class:`ImageTableSource` - the images a table's column of paths lists.

Errors name the file and what was wrong with it (:class:`SourceError`).

NOTE [ sources that fill slots ]: a video or an image folder makes its
batches a row at a time (a decoded frame, an image), which would then be
stacked into an array of the batch and copied again into page-locked memory
before the h2d - two host copies of every frame where one would do, each
at memory speed on one core (about half a millisecond a batch of 32 frames
at 224x224 here).  So these sources are
:class:`RowSource` s: ``jobs.run_job`` asks one for a :class:`SlotFiller` and
runs ``Pipeline.map_filled``, which hands it each pinned-in slot once its
last h2d is done; the rows are written straight there, and the copy engine
reads them from where they were written.  That needs one pipeline and slots
of a known size: from the model alone (``Pipeline.fills_slots``: every dim
beyond the batch dim fixed, as exported vision models have them), else from
the source's ``row_shape`` (a video knows its frame size before decoding;
images know theirs when resized to ``size``) where the model can take it.
Elsewhere - images of unknown size into free dims, several devices,
``fill_slots=False`` - the source is iterated and its batches staged as any
source's.  A row the slot cannot hold (another size, another dtype) fails
with both shapes named.
"""

from __future__ import annotations

import collections
import concurrent.futures
import copy
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ._cpus import usable_cpus
from ._errors import PipelineError
from ._frame_positions import FolderVideo, FramePositions
from ._rows import drop_first, peel_first_row, recut, take_first
from ._seeking import frame_pts
from ._session import TensorSpec


class SourceError(PipelineError):
    """A source file is missing, unreadable, or does not fit the model."""


@dataclass
class SourceBatch:
    inputs: dict[str, np.ndarray]
    meta: dict[str, np.ndarray] = field(default_factory=dict)


#: NOTE [ video streams ]: how long FFmpeg waits for a stream to open, and for its next data
STREAM_TIMEOUT_S = 10.0


def is_stream_url(path: str | Path) -> bool:
    """A URL FFmpeg reads (``rtsp://``, ``http://``, ``srt://``, ...), not a file path."""
    return isinstance(path, str) and re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", path) is not None


def _existing(path: str | Path, what: str) -> Path:
    path = Path(path)
    if not path.exists():
        raise SourceError(f"{what} not found: {str(path)!r}")
    return path


def fewer_rows(where: object, skip: int) -> Callable[[int], SourceError]:
    """The error of a source that ends before the rows to be left out of it
    end: those a resumed output holds (NOTE [ resuming ] in sinks), and those
    before a window of rows (``ortpipe run --rows/--shard``)."""

    def error(rows: int) -> SourceError:
        return SourceError(
            f"{str(where)!r} holds {rows} rows, fewer than the {skip} to leave out before its first batch (the rows "
            "a resumed output holds already, after where a window of rows starts): is this the input meant?"
        )

    return error


def _one_input(inputs: Sequence[TensorSpec], name: str | None, source: str) -> TensorSpec:
    if name is not None:
        for spec in inputs:
            if spec.name == name:
                return spec
        raise SourceError(f"{source}: {name!r} is not an input of the model: {[s.name for s in inputs]}")
    if len(inputs) != 1:
        raise SourceError(f"{source} feeds one input, but the model has {[s.name for s in inputs]}: name one")
    return inputs[0]


class NpySource:
    """Rows of a ``.npy`` array (memory-mapped: only the rows of a batch are read)."""

    #: its metadata, ``row_id``, is each row's place: nothing a resumed run could check (``jobs.resumed``)
    positional_meta = True

    def __init__(self, path: str | Path, batch_size: int, inputs: Sequence[TensorSpec], input_name: str | None = None):
        self.path = _existing(path, "input .npy file")
        try:
            self.array = np.load(self.path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise SourceError(f"{str(self.path)!r} is not a readable .npy array: {exc}") from exc
        self.spec = _one_input(inputs, input_name, "a .npy source")
        if self.array.ndim == 0:
            raise SourceError(f"{str(self.path)!r} holds a scalar, not rows")
        self.batch_size = batch_size
        #: the first row read (:meth:`after`)
        self.start = 0

    def __len__(self) -> int:
        return int(self.array.shape[0]) - self.start

    def __iter__(self) -> Iterator[SourceBatch]:
        for start in range(self.start, int(self.array.shape[0]), self.batch_size):
            rows = self.array[start : start + self.batch_size]
            ids = np.arange(start, start + len(rows), dtype=np.int64)
            yield SourceBatch({self.spec.name: rows}, {"row_id": ids})

    def after(self, rows: int) -> NpySource:
        """This source without its first ``rows`` rows (never read), ids as in the whole file."""
        if rows > len(self):
            raise fewer_rows(self.path, rows)(len(self))
        later = copy.copy(self)
        later.start = self.start + rows
        return later


def _numeric(name: str, column: Any) -> np.ndarray:
    import pyarrow as pa

    if pa.types.is_list(column.type) or pa.types.is_fixed_size_list(column.type) or pa.types.is_large_list(column.type):
        lengths = set(column.value_lengths().to_pylist())
        if len(lengths) != 1:
            raise SourceError(f"column {name!r}: list lengths differ ({sorted(lengths)[:5]}...): cannot stack rows")
        width = lengths.pop()
        return column.flatten().to_numpy(zero_copy_only=False).reshape(len(column), width)
    if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type) or pa.types.is_boolean(column.type)):
        raise SourceError(f"column {name!r} has type {column.type}: not numeric")
    if column.null_count:
        raise SourceError(f"column {name!r} has {column.null_count} null value(s) in a batch")
    return column.to_numpy(zero_copy_only=False)


class _ColumnarSource:
    """A table read in record batches; columns become model inputs.

    ``columns`` maps an input to one list column (``{"x": ["features"]}``) or
    to scalar columns stacked in order (``{"x": ["f0", "f1", ...]}``).  With
    no mapping, a one-input model takes every numeric column but the id column.
    Each row keeps the id column's value (default ``row_id`` when the table
    has one), else its row number.  Subclasses give the schema and the batches.
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
    ):
        self.path = _existing(path, self.what)
        self.schema = self._read_schema()
        names = self.schema.names
        self.id_column = id_column if id_column is not None else ("row_id" if "row_id" in names else None)
        if self.id_column is not None and self.id_column not in names:
            raise SourceError(f"id column {self.id_column!r} is not in {str(self.path)!r}: columns {names}")
        self.columns = self._map(dict(columns or {}), inputs, names)
        self.specs = {spec.name: spec for spec in inputs}
        self.batch_size = batch_size
        #: rows of the table left out before the first batch (:meth:`after`)
        self.skip = 0
        #: given the metadata of the last row left out, before the first batch (:meth:`checked_after`)
        self._check_before: Callable[[dict[str, np.ndarray]], None] | None = None

    def after(self, rows: int) -> _ColumnarSource:
        """This table without its first ``rows`` rows, each later row keeping its id
        (a resumed run; whole row groups or files before them are not read)."""
        if hasattr(self, "__len__") and rows > len(self):  # a CSV's rows are known once read: its iteration checks
            raise fewer_rows(self.path, rows)(len(self))
        later = copy.copy(self)
        later.skip = self.skip + rows
        return later

    def _map(self, given: dict[str, Sequence[str]], inputs: Sequence[TensorSpec], names: list[str]) -> dict:
        input_names = [spec.name for spec in inputs]
        if not given:
            spec = _one_input(inputs, None, f"a {self.kind} source without --input-column")
            numeric = [n for n in names if n != self.id_column and _is_numeric(self.schema.field(n).type)]
            if not numeric:
                raise SourceError(f"{str(self.path)!r} has no numeric columns for input {spec.name!r}: {names}")
            given = {spec.name: numeric}
        unknown_inputs = sorted(set(given) - set(input_names))
        if unknown_inputs:
            raise SourceError(f"--input-column names {unknown_inputs}, not inputs of the model: {input_names}")
        missing_inputs = [n for n in input_names if n not in given]
        if missing_inputs:
            raise SourceError(f"model input(s) {missing_inputs} have no columns: map them with --input-column")
        for name, cols in given.items():
            absent = [c for c in cols if c not in names]
            if absent:
                raise SourceError(f"columns {absent} for input {name!r} are not in {str(self.path)!r}: {names}")
        return given

    def _read_schema(self) -> Any:
        """The table's pyarrow schema, or a SourceError saying why the file cannot be read."""
        raise NotImplementedError

    #: the blocks of :meth:`_blocks` from the first row are ``batch_size`` rows each already
    _blocks_batched = False

    def _blocks(self, wanted: list[str], skip: int) -> Iterator[Any]:
        """pyarrow record batches of ``wanted`` columns from row ``skip`` on, of any sizes
        (the rows before left unread where the format allows)."""
        raise NotImplementedError

    def checked_after(self, rows: int, check: Callable[[dict[str, np.ndarray]], None]) -> _ColumnarSource:
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

    def __iter__(self) -> Iterator[SourceBatch]:
        wanted = sorted({c for cols in self.columns.values() for c in cols})
        if self.id_column is not None and self.id_column not in wanted:
            wanted.append(self.id_column)
        start = self.skip
        for record in self._record_batches(wanted):
            inputs = {}
            for name, cols in self.columns.items():
                parts = [_numeric(c, _column(record, c)) for c in cols]
                stacked = parts[0] if len(parts) == 1 and parts[0].ndim == 2 else np.stack(parts, axis=1)
                inputs[name] = self._cast(name, stacked)
            yield SourceBatch(inputs, self._meta(record, start))
            start += record.num_rows

    def _meta(self, record: Any, start: int) -> dict[str, np.ndarray]:
        """The rows' metadata: the id column's values, else their row numbers from ``start``."""
        if self.id_column is not None:
            return {self.id_column: _column(record, self.id_column).to_numpy(zero_copy_only=False)}
        return {"row_id": np.arange(start, start + record.num_rows, dtype=np.int64)}

    def _cast(self, name: str, values: np.ndarray) -> np.ndarray:
        dtype = self.specs[name].dtype
        if values.dtype == dtype:
            return values
        if not np.can_cast(values.dtype, dtype, casting="same_kind"):
            raise SourceError(f"columns for input {name!r} are {values.dtype}; the model takes {dtype}")
        return values.astype(dtype)


def _column(record: Any, name: str) -> Any:
    return record.column(record.schema.get_field_index(name))


class ParquetSource(_ColumnarSource):
    """A Parquet table read in record batches (see :class:`_ColumnarSource` for the columns)."""

    kind = "Parquet"
    what = "input Parquet file"

    def _read_schema(self) -> Any:
        import pyarrow.parquet as pq

        try:
            self.file = pq.ParquetFile(self.path)
        except Exception as exc:
            raise SourceError(f"{str(self.path)!r} is not a readable Parquet file: {exc}") from exc
        return self.file.schema_arrow

    def __len__(self) -> int:
        return max(0, int(self.file.metadata.num_rows) - self.skip)

    _blocks_batched = True  # from the first row; from a later one the first is cut, so they are re-cut

    def _blocks(self, wanted: list[str], skip: int) -> Iterator[Any]:
        return _parquet_batches(self.path, self.file, self.batch_size, wanted, skip)


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


PARQUET_SUFFIXES = (".parquet", ".pq")
#: the dataset source's own columns, carried through re-batching beside the wanted ones
_FILE_NUMBER, _FILE_ROW = "\x00ortpipe file", "\x00ortpipe row"


def files_below(folder: Path, suffixes: Sequence[str], left_out: Callable[[str], bool]) -> list[Path]:
    """The files below ``folder`` at any depth whose suffix is one of ``suffixes``, in
    order of their paths below it; a file or folder whose name is ``left_out`` is not
    looked into."""
    return [Path(path) for path in paths_below(folder, suffixes, left_out)]


def paths_below(folder: Path, suffixes: Sequence[str], left_out: Callable[[str], bool]) -> list[str]:
    """:func:`files_below` as text: a ``str`` takes less than half a ``Path``'s memory,
    which counts for a folder of a million images."""
    root = os.fspath(folder)
    return [os.path.join(root, relative) for relative in sorted(_below(folder, suffixes, left_out))]


def holds_files(folder: Path, suffixes: Sequence[str], left_out: Callable[[str], bool]) -> bool:
    """Whether :func:`files_below` would find any (stopping at the first)."""
    return next(_below(folder, suffixes, left_out), None) is not None


def _below(folder: Path, suffixes: Sequence[str], left_out: Callable[[str], bool]) -> Iterator[str]:
    """The paths below ``folder`` (as text, "/"-separated) of the files :func:`files_below` lists."""
    # os.walk reads each folder once (scandir: no stat a file) and leaves the folders
    # left out unread; text, not Path: 100,000 files in 100 folders listed here in
    # 0.23 s (0.29-0.31 s made Paths at the end), where rglob and is_file took 0.60 s
    # and Path arithmetic on each file 0.69 s
    root = len(os.fspath(folder)) + 1
    for where, folders, files in os.walk(folder):
        folders[:] = [name for name in folders if not left_out(name)]
        prefix = where[root:].replace(os.sep, "/") + "/" if len(where) >= root else ""
        for name in files:
            if os.path.splitext(name)[1].lower() in suffixes and not left_out(name):
                yield prefix + name


def parquet_files(folder: Path) -> list[Path]:
    """The Parquet files below ``folder``, at any depth (Hive partitions such as
    ``date=2026-12-03/``), in order of their paths; what writers keep beside
    them is left out: names starting with ``.`` or ``_`` at any level (Spark's
    ``_SUCCESS``, ``_temporary/``, ``.crc`` checksums, ``_metadata``)."""
    return files_below(folder, PARQUET_SUFFIXES, writers_name)


def writers_name(name: str) -> bool:
    """Whether a file or folder in a data set's folder is the writers', not the data set's."""
    return name.startswith((".", "_"))


def writers_own(relative: Path) -> bool:
    """Whether a path inside a data set's folder is left out of it (a name at any level starts with . or _)."""
    return any(writers_name(part) for part in relative.parts)


def hidden(name: str) -> bool:
    """Whether a file or folder in a folder of images or videos is left out of it: its
    name starts with ``.`` (macOS's ``._photo.jpg``, ``.ipynb_checkpoints/``) or is
    ``__MACOSX`` (what a zip made on a Mac holds beside the files)."""
    return name.startswith(".") or name == "__MACOSX"


def image_files(folder: Path) -> list[str]:
    """The paths of the images below ``folder`` at any depth (a class a folder, as
    ImageNet's), in order of their paths; hidden ones (:func:`hidden`) left out."""
    return paths_below(folder, IMAGE_SUFFIXES, hidden)


def video_files(folder: Path) -> list[Path]:
    """The videos below ``folder`` at any depth, in order of their paths; hidden ones left out."""
    return files_below(folder, VIDEO_SUFFIXES, hidden)


@dataclass(frozen=True)
class _Part:
    path: Path
    #: its path below the dataset's folder, as the ``file`` column gives it
    name: str
    rows: int
    schema: Any


class ParquetDatasetSource(_ColumnarSource):
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

    def __init__(
        self,
        path: str | Path,
        batch_size: int,
        inputs: Sequence[TensorSpec],
        columns: Mapping[str, Sequence[str]] | None = None,
        id_column: str | None = None,
    ):
        super().__init__(path, batch_size, inputs, columns, id_column)
        self.file_column = "ortpipe_file" if self.id_column == "file" else "file"
        self._check_parts()
        self._names = np.asarray([part.name for part in self.parts])

    def _read_schema(self) -> Any:
        import pyarrow.parquet as pq

        if not self.path.is_dir():
            raise SourceError(f"{str(self.path)!r} is not a folder")
        files = parquet_files(self.path)
        if not files:
            raise SourceError(f"no Parquet files ({', '.join(PARQUET_SUFFIXES)}) in {str(self.path)!r}")
        self.parts: list[_Part] = []
        for file in files:
            try:
                metadata = pq.read_metadata(file)
                schema = metadata.schema.to_arrow_schema()
            except Exception as exc:
                raise SourceError(f"{str(file)!r} is not a readable Parquet file: {exc}") from exc
            self.parts.append(_Part(file, file.relative_to(self.path).as_posix(), metadata.num_rows, schema))
        return self.parts[0].schema

    def _check_parts(self) -> None:
        """Every file has the columns read, of the first file's types."""
        first = self.parts[0]
        wanted = {c for cols in self.columns.values() for c in cols}
        if self.id_column is not None:
            wanted.add(self.id_column)
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

    def _blocks(self, wanted: list[str], skip: int) -> Iterator[Any]:
        """Each file's record batches from row ``skip`` of the data set on, its number and
        row numbers added as columns (so they travel with their rows through re-batching);
        whole files before it are not opened."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        names = [*wanted, _FILE_NUMBER, _FILE_ROW]
        for number, part in enumerate(self.parts):
            if skip >= part.rows:
                skip -= part.rows
                continue
            start, skip = skip, 0
            try:
                with pq.ParquetFile(part.path) as file:
                    for record in _parquet_batches(part.path, file, self.batch_size, wanted, start):
                        rows = record.num_rows
                        arrays = [_column(record, name) for name in wanted]
                        arrays.append(pa.array(np.full(rows, number, np.int32)))
                        arrays.append(pa.array(np.arange(start, start + rows, dtype=np.int64)))
                        # rebuilt from the arrays: files whose fields differ only in nullability combine
                        yield pa.RecordBatch.from_arrays(arrays, names=names)
                        start += rows
            except (OSError, pa.ArrowException) as exc:
                raise SourceError(f"{str(part.path)!r} cannot be read: {exc}") from exc

    def _meta(self, record: Any, start: int) -> dict[str, np.ndarray]:
        numbers = _column(record, _FILE_NUMBER).to_numpy()
        meta = {self.file_column: self._names[numbers]}
        if self.id_column is not None:
            meta[self.id_column] = _column(record, self.id_column).to_numpy(zero_copy_only=False)
        else:
            meta["row_id"] = _column(record, _FILE_ROW).to_numpy()
        return meta


class CsvSource(_ColumnarSource):
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


def _is_numeric(arrow_type: Any) -> bool:
    import pyarrow as pa

    if pa.types.is_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        return _is_numeric(arrow_type.value_type)
    return pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type)


#: a batch made a row at a time: its rows (one array each) and their metadata
Chunk = tuple[list[np.ndarray], dict[str, np.ndarray]]


def chunk_rows(chunk: Chunk) -> int:
    return len(chunk[0])


def sliced_chunk(chunk: Chunk, rows: slice) -> Chunk:
    frames, meta = chunk
    return frames[rows], {name: values[rows] for name, values in meta.items()}


class RowSource:
    """A source that makes its batches a row at a time - a decoded frame, an
    image - and can write them straight into the pipeline's pinned slots
    (NOTE [ sources that fill slots ]); iterated, it stacks each batch into an
    array of its own, as any source.

    Your own decoder (a camera, a codec of your own) is one too: set ``spec``
    (the input it feeds: ``pipe.source_inputs``) and ``batch_size``, and make
    :meth:`chunks` yield each batch's rows and metadata; ``run_job`` then
    writes its rows into the slots.
    """

    spec: TensorSpec
    batch_size: int
    #: the dims of every row, where known before decoding (a video's frame size): the slots of a
    #: model that leaves them free can be sized from it
    row_shape: tuple[int, ...] | None = None

    def chunks(self) -> Iterator[Chunk]:
        """Each batch, at most ``batch_size`` rows: (one array a row, {name: one value a row})."""
        raise NotImplementedError

    def __iter__(self) -> Iterator[SourceBatch]:
        for rows, meta in self.chunks():
            yield SourceBatch({self.spec.name: np.stack(rows)}, meta)

    def filler(self, row_shapes: Mapping[str, tuple[int, ...]] | None = None) -> SlotFiller:
        """A fresh iteration of the source that writes each batch into a slot
        (``row_shapes``: what the slots are to be sized by, where not by the model)."""
        return SlotFiller(self, row_shapes)


class SlotFiller:
    """Writes a :class:`RowSource`'s batches into pinned slots, one per
    ``fill(slot)``; ``close()`` ends the source's iteration (its threads)."""

    def __init__(self, source: RowSource, row_shapes: Mapping[str, tuple[int, ...]] | None = None) -> None:
        self._chunks = source.chunks()
        self.input_name = source.spec.name
        #: the most rows a batch has: the rows of a slot
        self.batch_size = source.batch_size
        #: ``map_filled``'s row_shapes: the dims of a row where the model leaves them free
        self.row_shapes = row_shapes
        self._where = str(getattr(source, "path", type(source).__name__))

    def fill(self, slot: Mapping[str, np.ndarray]) -> tuple[int, dict[str, np.ndarray]] | None:
        """The next batch written into ``slot[input_name]``'s first rows: (rows, metadata), or None at the end."""
        chunk = next(self._chunks, None)
        if chunk is None:
            return None
        rows, meta = chunk
        target = slot[self.input_name]
        if len(rows) > len(target):
            raise SourceError(f"{self._where!r}: a batch of {len(rows)} rows does not fit a slot of {len(target)}")
        for index, row in enumerate(rows):
            if row.shape != target.shape[1:] or row.dtype != target.dtype:
                raise SourceError(
                    f"{self._where!r} gives {row.dtype}{list(row.shape)} rows, input {self.input_name!r} takes "
                    f"{target.dtype}{list(target.shape[1:])}: resize with size=(W, H) (--size), or convert with "
                    "a preprocess (--preprocess)"
                )
            target[index] = row
        return len(rows), meta

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()


class VideoSource(RowSource):
    """Frames of a video decoded with PyAV: uint8 ``[N, H, W, 3]`` (``pix_fmt`` rgb24 or bgr24).

    ``size=(width, height)`` resizes while decoding.  Each frame keeps its index
    and its timestamp in seconds (``frame.time``).  ``every=N`` takes frames 0,
    N, 2N, ... (30 on a 30 frame/s video: a frame a second): the others are
    decoded, as a compressed stream must be, but neither converted nor run, and
    the rows (a window's, a resumed run's, ``len()``) are the frames taken.
    ``fps=F`` takes the stride from the video's frame rate: round(rate / F).  FFmpeg decodes with threads
    of its own: ``decode_threads`` of them (None: as many as FFmpeg picks).
    One swscale context converts every frame of an iteration: ``frame.reformat``
    would make a new one, and start its threads, for each frame (0.8 against
    0.35 ms a 480p frame to 224x224 on the project machine).

    NOTE [ video streams ]: ``path`` may be a URL FFmpeg reads (a camera's
    ``rtsp://``, ``http(s)://``, ``srt://``, ``udp://``): frames are taken as
    they come, for as long as the stream lasts (``--limit``, Ctrl-C or SIGTERM
    end a live one gracefully).  A stream may be live, with no frame N to go
    back to, so it cannot start past its first frame (:meth:`after` refuses:
    no resume, window or shard), and FFmpeg gives up on one that sends nothing
    for ``timeout_s`` (opening it too), instead of waiting forever.
    """

    def __init__(
        self,
        path: str | Path,
        batch_size: int,
        inputs: Sequence[TensorSpec],
        input_name: str | None = None,
        size: tuple[int, int] | None = None,
        pix_fmt: str = "rgb24",
        decode_threads: int | None = None,
        timeout_s: float = STREAM_TIMEOUT_S,
        every: int = 1,
        fps: float | None = None,
    ):
        import av

        if not (isinstance(every, int) and every >= 1):
            raise SourceError(f"every takes a whole number of frames >= 1, got {every!r}")
        if fps is not None and (every != 1 or not fps > 0):
            raise SourceError(f"fps takes frames a second > 0, instead of every, got fps={fps!r}, every={every!r}")

        #: a URL (NOTE [ video streams ]) or a file
        self.is_stream = is_stream_url(path)
        self.path: str | Path = str(path) if self.is_stream else _existing(path, "input video")
        self.timeout_s = timeout_s
        self.spec = _one_input(inputs, input_name, "a video source")
        self.batch_size, self.size, self.pix_fmt = batch_size, size, pix_fmt
        self.decode_threads = None if decode_threads is None else _decode_threads(decode_threads)
        try:
            with self._open() as container:
                if not container.streams.video:
                    raise SourceError(f"{str(self.path)!r} has no video stream")
                stream = container.streams.video[0]
                self.frames_hint, exact = _frame_count(container, stream)
                width, height = size or (stream.width, stream.height)
                if fps is not None:
                    every = self._stride_for(fps, stream.average_rate or stream.guessed_rate)
        except av.error.FFmpegError as exc:
            raise SourceError(f"{str(self.path)!r} cannot be decoded as video: {exc}") from exc
        #: the stride of the frames taken (frame 0, every, 2 * every, ...)
        self.every = every
        self.row_shape = (height, width, 3) if width and height else None  # rgb24 / bgr24: 3 bytes a pixel
        #: len() is worked out from the duration and frame rate (a Matroska or WebM file
        #: counts no frames in its header): a --shard's bounds, a progress bar's total
        self.length_estimated = not exact
        self._packets: int | None = None  # the frames counted from the packets (:meth:`counted_len`)
        #: frames decoded but not converted nor delivered before the first batch (:meth:`after`):
        #: a whole number of strides
        self.skip = 0
        #: the index of the first frame the latest iteration decoded: 0, or past it
        #: where seeking (NOTE [ seeking a video ]) let it start at a later key frame
        self.decoded_from = 0

    #: a frame's index says which stride made the rows (and an earlier run's may have had
    #: another): a resumed run reads the frame before its first and checks it, at the cost
    #: of one seek (NOTE [ seeking a video ])
    positional_meta = False

    def _stride_for(self, fps: float, rate: Any) -> int:
        """``fps`` frames a second as a stride of this video's frames: its frame rate over
        ``fps``, rounded, at least 1 (an average where the rate varies)."""
        if not rate:
            raise SourceError(
                f"{str(self.path)!r} states no frame rate to take {fps:g} frames a second from: use every"
            )
        return max(1, round(float(rate) / fps))

    def __len__(self) -> int:
        return -(-max(0, self.frames_hint - self.skip) // self.every)  # the frames taken: a stride's first each

    def counted_len(self) -> int:
        """``len()`` exact where it is an estimate: the frames counted from the packets
        (read, not decoded) once, and kept by this source and the windows made of it."""
        if not self.length_estimated:
            return len(self)
        if self._packets is None:
            self._packets = _packets_counted(self.path)
        return -(-max(0, self._packets - self.skip) // self.every)

    def _open(self) -> Any:
        """The video opened with PyAV; a stream with FFmpeg's timeouts (NOTE [ video streams ])."""
        import av

        if self.is_stream:
            return av.open(str(self.path), timeout=(self.timeout_s, self.timeout_s))
        return av.open(str(self.path))

    def after(self, rows: int) -> VideoSource:
        """This video without its first ``rows`` frames, each later one keeping its index
        and time.  Decoding starts at the key frame before the first one kept, found
        from the packets (NOTE [ seeking a video ]), or where a file's packets cannot
        be trusted to say which frame is which, at the first frame; the frames
        before the first kept are decoded, never resized nor converted.  A stream
        (a URL: NOTE [ video streams ]) is read from its first frame only."""
        if rows and self.is_stream:
            raise SourceError(
                f"{str(self.path)!r} is a stream: it is read from its first frame on, with no frame "
                f"{self.skip + rows * self.every} "
                "to start at (a live one has none to go back to), so it cannot be resumed, windowed or sharded; "
                "--limit takes its first frames"
            )
        later = copy.copy(self)
        later.skip = self.skip + rows * self.every
        return later

    def chunks(self) -> Iterator[Chunk]:
        target = self._seek_target()
        if target is not None:
            try:
                yield from self._decoded_chunks(target)
                return
            except _MissedSeek:  # raised before any frame was delivered: start over from the first
                pass
        yield from self._decoded_chunks(None)

    def _seek_target(self) -> int | None:
        """The pts of the first frame to deliver, where seeking to it can be trusted."""
        import av

        if not self.skip:
            return None
        try:
            with self._open() as container:
                return frame_pts(container, container.streams.video[0], self.skip)
        except av.error.FFmpegError:
            return None  # decoding from the start says what is wrong

    def _decoded_chunks(self, target: int | None) -> Iterator[Chunk]:
        import av
        from av.video.reformatter import VideoReformatter

        reformatter = VideoReformatter()  # its swscale context is kept from frame to frame
        frames: list[np.ndarray] = []
        indices: list[int] = []
        times: list[float] = []
        decoded = 0
        try:
            with self._open() as container:
                stream = container.streams.video[0]
                stream.thread_type = "AUTO"  # FFmpeg's own decode threads
                if self.decode_threads is not None:
                    stream.codec_context.thread_count = self.decode_threads
                for index, frame in self._numbered(container, stream, target):
                    decoded = index + 1
                    if index < self.skip or index % self.every:
                        continue
                    width, height = self.size or (frame.width, frame.height)
                    image = reformatter.reformat(frame, width=width, height=height, format=self.pix_fmt).to_ndarray()
                    frames.append(image)
                    indices.append(index)
                    times.append(float(frame.time) if frame.time is not None else float("nan"))
                    if len(frames) == self.batch_size:
                        yield self._chunk(frames, indices, times)
                        frames, indices, times = [], [], []
        except av.error.FFmpegError as exc:
            when = f"after {decoded} frames" if decoded or target is None else f"before frame {self.skip}"  # seeked
            failure = VideoDecodingFailed(f"{str(self.path)!r}: decoding failed {when}: {exc}")
            if frames:  # the frames decoded before it are delivered first: a stream cut off loses none
                yield self._chunk(frames, indices, times)
            raise failure from exc
        if decoded < self.skip:  # counted in rows: the frames a stride takes
            error = str(fewer_rows(self.path, self.skip // self.every)(-(-decoded // self.every)))
            if self.frames_hint > decoded:
                error += f" (it gave {decoded} frames where its header counts {self.frames_hint}: is it cut short?)"
            raise VideoEndedEarly(error)
        if frames:
            yield self._chunk(frames, indices, times)

    def _numbered(self, container: Any, stream: Any, target: int | None) -> Iterator[tuple[int, Any]]:
        """``(index, frame)`` of the frames decoded: every one from the first, or,
        seeked to the key frame before the one whose pts is ``target``, that one
        (frame ``self.skip``) and every one after it."""
        self.decoded_from = 0
        if target is None:
            yield from enumerate(container.decode(stream))
            return
        container.seek(target, stream=stream, backward=True, any_frame=False)
        dropped = 0
        frames = container.decode(stream)
        for frame in frames:
            if frame.pts is not None and frame.pts < target:
                dropped += 1
                continue
            if frame.pts != target:  # the packets said otherwise (NOTE [ seeking a video ])
                raise _MissedSeek(f"frame {self.skip} was to have pts {target}, the decoder gave {frame.pts}")
            self.decoded_from = self.skip - dropped
            yield self.skip, frame
            break
        else:  # the stream ended before any frame carried it
            raise _MissedSeek(f"no frame after the seek has pts {target} or later (frame {self.skip})")
        for index, frame in enumerate(frames, self.skip + 1):
            yield index, frame

    @staticmethod
    def _chunk(frames: list[np.ndarray], indices: list[int], times: list[float]) -> Chunk:
        return frames, {"frame_index": np.asarray(indices, np.int64), "timestamp": np.asarray(times, np.float64)}


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff")


#: ImageFolderSource's decode threads with decode_threads=None: one per CPU, at most this many
AUTO_DECODE_THREADS = 8


def _frame_count(container: Any, stream: Any) -> tuple[int, bool]:
    """A video stream's frames as its header counts them, and True; else its duration
    times its frame rate, and False (0 where neither is known)."""
    if stream.frames:
        return int(stream.frames), True
    rate = stream.average_rate or stream.guessed_rate
    if stream.duration is not None and stream.time_base is not None:
        seconds = float(stream.duration * stream.time_base)
    else:
        seconds = container.duration / 1e6 if container.duration else 0.0  # av.time_base: microseconds
    return (round(seconds * float(rate)) if rate and seconds > 0 else 0), False


def _packets_counted(path: str | Path) -> int:
    """The frames of a video's first video stream, counted from its packets (read,
    not decoded): one frame a packet that holds data and is not to be discarded."""
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return sum(1 for packet in container.demux(stream) if packet.size and not packet.is_discard)


VIDEO_SUFFIXES = (".mp4", ".mkv", ".avi", ".mov", ".webm", ".m4v", ".mpg", ".mpeg", ".ts")


class VideoFolderSource(RowSource):
    """The videos below a folder, at any depth (:func:`video_files`, in order of their
    paths), as one source, frame after frame: uint8 ``[N, H, W, 3]``, each row
    with its ``path`` (the video's), its
    ``frame_index`` in that video and its ``timestamp``.  Batches run across
    the videos' ends, so a folder of short clips costs no short batches.

    Every video gives frames of one size: ``size=(width, height)`` resizes
    them, and without it videos of different sizes are refused at once, naming
    two.  Windows and resumed runs place frames by the videos' headers (NOTE
    [ frame positions ]): a window (:meth:`between`, :meth:`after`) skips
    whole videos unopened, their frames counted from their headers (or, where
    a header counts none, as Matroska's, from their packets, read but not
    decoded), and seeks into the video it starts in (NOTE [ seeking a video
    ]); a video that gives fewer frames than its header counts leaves places
    no row has (``cut_short`` lists it), and a resumed run goes on after its
    output's last row (:meth:`position_after`), so a folder that changed is
    refused, not misread.

    ``every=N`` takes each video's frames 0, N, 2N, ... (:class:`VideoSource`);
    ``fps=F`` each video's stride from its own frame rate.

    A video that cannot be opened ends it with a :class:`SourceError` naming
    it, before any frame, and one whose decoding fails partway ends it there,
    after its frames before, unless ``skip_unreadable``: then the video, or
    its rest, is left out, and ``skipped`` lists ``(path, why)`` of each (a
    truncated download, a file that is not a video, a corrupt packet).  Which
    cannot be opened is settled before the first frame, and a video's frames
    keep their places whatever is left out, so every run over the same folder
    counts frames alike.
    """

    #: a row's path and frame index say which frame it is: a resumed run checks them
    positional_meta = False

    def __init__(
        self,
        path: str | Path,
        batch_size: int,
        inputs: Sequence[TensorSpec],
        input_name: str | None = None,
        size: tuple[int, int] | None = None,
        pix_fmt: str = "rgb24",
        decode_threads: int | None = None,
        skip_unreadable: bool = False,
        every: int = 1,
        fps: float | None = None,
    ):
        self.path = _existing(path, "video folder")
        if not self.path.is_dir():
            raise SourceError(f"{str(self.path)!r} is not a folder")
        files = video_files(self.path)
        if not files:
            raise SourceError(f"no videos ({', '.join(VIDEO_SUFFIXES)}) in {str(self.path)!r}, at any depth")
        #: (path, why) of the videos left out by ``skip_unreadable``, in file order: those that
        #: cannot be opened, and those whose decoding failed partway (their later frames)
        self.skipped: list[tuple[str, str]] = []
        self.skip_unreadable = skip_unreadable
        #: (path, rows given, rows its header counts) of each video that ended before the
        #: frames its header counts (a file cut short, a decoding failure that
        #: ``skip_unreadable`` passed over): found as the frames are decoded
        self.cut_short: list[tuple[str, int, int]] = []
        self.videos: list[VideoSource] = []
        for file in files:
            try:
                video = VideoSource(
                    file, batch_size, inputs, input_name, size, pix_fmt, decode_threads, every=every, fps=fps
                )
                self.videos.append(video)
            except SourceError as exc:
                if not skip_unreadable:
                    raise
                self.skipped.append((str(file), str(exc)))
        if not self.videos:
            raise SourceError(f"none of the {len(files)} videos in {str(self.path)!r} can be read")
        self.spec, self.batch_size = self.videos[0].spec, batch_size
        self.row_shape = self._one_frame_size(size)
        #: len() adds up estimates where a video's header counts no frames
        self.length_estimated = any(video.length_estimated for video in self.videos)
        #: the window of the folder's positions (NOTE [ frame positions ]) this source gives:
        #: from ``skip`` (:meth:`after`) to ``end`` (None: to the last video's end; :meth:`between`)
        self.skip: int = 0
        self.end: int | None = None

    def _one_frame_size(self, size: tuple[int, int] | None) -> tuple[int, ...] | None:
        shapes: dict[tuple[int, ...] | None, VideoSource] = {}
        for video in self.videos:
            shapes.setdefault(video.row_shape, video)  # the first video of each size
        if len(shapes) > 1 and size is None:
            (a, first), (b, second) = list(shapes.items())[:2]
            raise SourceError(
                f"the videos of {str(self.path)!r} differ in frame size: {str(first.path)!r} is "
                f"{_frame_size_text(a)}, {str(second.path)!r} {_frame_size_text(b)}; a batch holds frames of one "
                "size: resize them all with size=(W, H) (--size WxH)"
            )
        return next(iter(shapes))

    def __len__(self) -> int:
        total = sum(len(video) for video in self.videos)
        return max(0, (total if self.end is None else min(total, self.end)) - self.skip)

    def after(self, rows: int) -> VideoFolderSource:
        """This folder without its first ``rows`` frames (whole videos before them unopened)."""
        later = copy.copy(self)
        later.skip = self.skip + rows
        return later

    def between(self, start: int, stop: int | None) -> VideoFolderSource:
        """Frames ``start`` to ``stop - 1`` of this folder by their positions (NOTE [ frame
        positions ]), not by the rows given: where a video gives fewer frames than its header
        counts, windows that meet still hold every frame once (``jobs.window``)."""
        later = self.after(start)
        if stop is not None:
            end = self.skip + stop
            later.end = end if self.end is None else min(self.end, end)
        return later

    def chunks(self) -> Iterator[Chunk]:
        return recut(self._videos_chunks(), self.batch_size, chunk_rows, sliced_chunk, _joined_chunks)

    def _videos_chunks(self) -> Iterator[Chunk]:
        first = 0  # the position of the next video's first frame, where it is needed
        for video in self.videos:
            counted = self.skip > first or self.end is not None  # the window's bounds are placed by counts
            taken = video.counted_len() if counted else 0
            if counted and first + taken <= self.skip:
                first += taken  # wholly before the window: never opened
                continue
            if self.end is not None and first >= self.end:
                return
            into = max(0, self.skip - first)
            chunks = self._frames_of(video.after(into) if into else video)
            if self.end is not None and first + taken > self.end:  # the window ends in this video
                yield from take_first(chunks, self.end - first - into, chunk_rows, sliced_chunk)
                return
            yield from chunks
            first += taken
        if self.skip > first:
            raise fewer_rows(self.path, self.skip)(first)

    def _frames_of(self, video: VideoSource) -> Iterator[Chunk]:
        """The chunks of one video, each row with its path.  One that ends before the
        frames its header counts is listed in ``cut_short`` (its missing frames are
        positions no row has: NOTE [ frame positions ]); one whose decoding fails
        partway, with ``skip_unreadable``, ends there, listed in ``skipped``."""
        where = str(video.path)
        given = 0
        try:
            for rows, meta in video.chunks():
                given += len(rows)
                yield rows, {"path": np.full(len(rows), where), **meta}
        except VideoEndedEarly:  # before the frame the window starts at
            pass
        except VideoDecodingFailed as exc:
            if not self.skip_unreadable:
                raise
            self.skipped.append((where, f"{exc} (its frames before are written, its later ones left out)"))
        if not video.length_estimated and given < len(video):
            self.cut_short.append((where, given, len(video)))

    def position_after(self, sink: Any, start: int) -> int | None:
        """Where a resumed run goes on: after the frame the output's last row names
        (NOTE [ frame positions ]).  Where the output's rows are as many as the
        positions before it, the last row alone shows the output fits; where they are
        fewer (a video gave fewer frames than its header counts), every row is held
        against the folder first.  None for an output that keeps no path (a
        ``.npy``): its rows are counted (``jobs.resumed``)."""
        last = _last_kept_row(sink)
        if last is None or "path" not in last or "frame_index" not in last:
            return None
        positions = FramePositions(
            [FolderVideo(str(video.path), video.every, video.counted_len) for video in self.videos], str(self.path)
        )
        try:
            position = positions.after(last)
            if position != self.skip + start + sink.kept_rows:
                position = positions.check_rows(*_kept_frames(sink, str(self.path)), self.skip + start)
        except ValueError as exc:
            raise SourceError(str(exc)) from None
        return position - self.skip


def _last_kept_row(sink: Any) -> Mapping[str, Any] | None:
    """The last row a resumed sink kept (None where it keeps none, or no columns)."""
    last_kept_row = getattr(sink, "last_kept_row", None)
    return last_kept_row() if getattr(sink, "kept_rows", 0) and last_kept_row is not None else None


def _kept_frames(sink: Any, where: str) -> tuple[np.ndarray, np.ndarray]:
    """The path and frame_index columns of the rows a resumed sink kept."""
    kept_columns = getattr(sink, "kept_columns", None)
    columns = kept_columns(("path", "frame_index")) if kept_columns is not None else None
    if not columns or "path" not in columns or "frame_index" not in columns:
        raise ValueError(
            f"cannot resume from {where!r}: the output holds fewer rows than the frames before its last one, and its "
            "path and frame_index columns cannot be read to see why"
        )
    return columns["path"], columns["frame_index"]


def _frame_size_text(row_shape: tuple[int, ...] | None) -> str:
    return "of unknown size" if row_shape is None else f"{row_shape[1]}x{row_shape[0]}"


def _joined_chunks(chunks: list[Chunk]) -> Chunk:
    """One chunk of the rows of ``chunks``, in order."""
    rows = [row for chunk in chunks for row in chunk[0]]
    metas = [meta for _, meta in chunks]
    return rows, {name: np.concatenate([meta[name] for meta in metas]) for name in metas[0]}


class _MissedSeek(Exception):
    """Seeking did not land where the packets said: decode from the first frame."""


class VideoEndedEarly(SourceError):
    """A video ended before the frame it was to start at: it holds fewer frames than
    its header counts (cut short, or an edit list's).  In a folder it gives none
    (NOTE [ frame positions ])."""


class VideoDecodingFailed(SourceError):
    """A video's decoding failed partway, after its frames before were delivered."""


class _ImageFiles(RowSource):
    """Images read from files with Pillow as uint8 ``[N, H, W, 3]``, resized to
    ``size``: what a folder of images (:class:`ImageFolderSource`) and a table
    of image paths (:class:`ImageTableSource`) share.  A subclass says which
    file each of its rows is (``_file``) and what the rows' metadata are
    (``_meta``); the rows given are a window ``[lo, hi)`` of them.

    Decoding a JPEG costs milliseconds, more than a small model takes for it,
    so files are decoded by ``decode_threads`` threads at once (Pillow releases
    the GIL while it decodes and resizes; None: one per CPU, at most
    ``AUTO_DECODE_THREADS``), the next batch while the current one is sent on,
    and delivered in order.  The threads end with the iteration, however it
    ends (exhausted, a failure, or the iterator closed).

    A file that cannot be decoded ends the iteration with a
    :class:`SourceError` naming it, unless ``skip_unreadable``: then it is left
    out (a batch with it is that much shorter), and ``skipped`` lists
    ``(path, reason)`` of every file left out, in order — one corrupt JPEG
    among millions need not end a night's scoring.

    ``jpeg_draft=True`` (with a ``size``) decodes a JPEG at 1/2, 1/4 or 1/8 of
    its size where that is still at least ``size`` (JPEG's DCT scaling, Pillow's
    ``draft``), then resizes: a 12-megapixel photo to 224x224 decodes about 4x
    faster, its pixels within a few levels of a full decode's (not the same:
    off by default, where outputs must match a preprocessing done otherwise).
    """

    #: what the source is, in messages
    kind = "image"
    path: Path

    def _setup(
        self,
        rows: int,
        batch_size: int,
        inputs: Sequence[TensorSpec],
        input_name: str | None,
        size: tuple[int, int] | None,
        decode_threads: int | None,
        skip_unreadable: bool,
        jpeg_draft: bool,
    ) -> None:
        if jpeg_draft and size is None:
            raise SourceError(
                "jpeg_draft decodes a JPEG at a fraction of its size for a resize: give the size, size=(W, H) "
                "(--size WxH)"
            )
        self.jpeg_draft = jpeg_draft
        self.spec = _one_input(inputs, input_name, f"an {self.kind} source")
        self.batch_size, self.size = batch_size, size
        self.row_shape = None if size is None else (size[1], size[0], 3)
        self.decode_threads = _decode_threads(decode_threads)
        self.skip_unreadable = skip_unreadable
        #: (path, why) of the files left out by ``skip_unreadable``, in order
        self.skipped: list[tuple[str, str]] = []
        self._lo, self._hi = 0, rows  # the window of rows this source gives

    def _file(self, row: int) -> Path:
        """The file of row ``row`` (of all the rows, not of the window)."""
        raise NotImplementedError

    def _meta(self, rows: list[int]) -> dict[str, np.ndarray]:
        """The metadata of rows ``rows`` (of all the rows), in order."""
        raise NotImplementedError

    def __len__(self) -> int:
        return self._hi - self._lo

    def after(self, rows: int) -> _ImageFiles:
        """These images without the first ``rows`` (never decoded)."""
        return self.between(rows, None)

    def between(self, start: int, stop: int | None) -> _ImageFiles:
        """Rows ``start`` to ``stop - 1`` (``stop`` None: to the end), the others never
        decoded: windows are of files, also where unreadable ones are skipped and give
        no row (``jobs.window``)."""
        if start > len(self):
            raise fewer_rows(self.path, start)(len(self))
        later = copy.copy(self)
        later._lo = self._lo + start
        later._hi = self._hi if stop is None else min(self._hi, self._lo + stop)
        later.skipped = self.skipped  # one list of what was left out, whichever window left it
        return later

    def chunks(self) -> Iterator[Chunk]:
        starts = range(self._lo, self._hi, self.batch_size)
        if self.decode_threads == 1:
            for start in starts:
                rows = list(range(start, min(start + self.batch_size, self._hi)))
                chunk = self._chunk(rows, [self._load(self._file(row)) for row in rows])
                if chunk is not None:
                    yield chunk
            return
        pool = concurrent.futures.ThreadPoolExecutor(self.decode_threads, thread_name_prefix="ortpipe-decode")
        try:
            decoding: collections.deque[concurrent.futures.Future[np.ndarray | SourceError]] = collections.deque()
            submitted = self._lo
            for start in starts:
                # this batch and the next one in flight: bounded memory, threads kept busy
                ahead = min(self._hi, start + 2 * self.batch_size)
                for row in range(submitted, ahead):
                    decoding.append(pool.submit(self._load, self._file(row)))
                submitted = ahead
                rows = list(range(start, min(start + self.batch_size, self._hi)))
                chunk = self._chunk(rows, [decoding.popleft().result() for _ in rows])
                if chunk is not None:
                    yield chunk
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _load(self, file: Path) -> np.ndarray | SourceError:
        """The decoded image, or (to be raised or skipped in order) why it cannot be."""
        from PIL import Image, UnidentifiedImageError

        try:
            with Image.open(file) as image:
                if self.jpeg_draft:  # a JPEG decoded at 1/2, 1/4 or 1/8 of its size, still >= size
                    image.draft(None, self.size)
                rgb = image.convert("RGB")
                if self.size is not None:
                    rgb = rgb.resize(self.size)
                return np.asarray(rgb)
        except (UnidentifiedImageError, OSError, ValueError) as exc:  # ValueError: a truncated header
            return SourceError(f"{str(file)!r} cannot be read as an image: {exc}")

    def _chunk(self, rows: list[int], loaded: list[np.ndarray | SourceError]) -> Chunk | None:
        """The batch of the rows whose files decoded (None when none did and the failures are skipped)."""
        kept, images = [], []
        for row, image in zip(rows, loaded, strict=True):
            if isinstance(image, SourceError):
                if not self.skip_unreadable:
                    raise image
                self.skipped.append((str(self._file(row)), str(image)))
                continue
            kept.append(row)
            images.append(image)
        if not images:
            return None
        shapes = {a.shape for a in images}
        if len(shapes) > 1:
            raise SourceError(f"images of {str(self.path)!r} differ in size {sorted(shapes)}: pass size=(W, H)")
        return images, self._meta(kept)


class ImageFolderSource(_ImageFiles):
    """The images below a folder, at any depth (:func:`image_files`, in order of
    their paths): uint8 ``[N, H, W, 3]``, resized to ``size``, each row with its
    file's ``path``; decoding as :class:`_ImageFiles` says."""

    kind = "image folder"

    def __init__(
        self,
        path: str | Path,
        batch_size: int,
        inputs: Sequence[TensorSpec],
        input_name: str | None = None,
        size: tuple[int, int] | None = None,
        decode_threads: int | None = None,
        skip_unreadable: bool = False,
        jpeg_draft: bool = False,
    ):
        self.path = _existing(path, "image folder")
        if not self.path.is_dir():
            raise SourceError(f"{str(self.path)!r} is not a folder")
        self._files = image_files(self.path)
        if not self._files:
            raise SourceError(f"no images ({', '.join(IMAGE_SUFFIXES)}) in {str(self.path)!r}, at any depth")
        self._setup(len(self._files), batch_size, inputs, input_name, size, decode_threads, skip_unreadable, jpeg_draft)

    @property
    def files(self) -> list[Path]:
        """The files of the rows this source gives, in order."""
        return [Path(path) for path in self._files[self._lo : self._hi]]

    def _file(self, row: int) -> Path:
        return Path(self._files[row])

    def _meta(self, rows: list[int]) -> dict[str, np.ndarray]:
        return {"path": np.asarray([self._files[row] for row in rows])}

    def position_after(self, sink: Any, start: int) -> int | None:
        """Where a resumed run goes on when unreadable files are skipped (its rows are then
        fewer than its files, so they cannot be counted): after the file the last row
        ``sink`` kept names; None where rows are files, and counting them will do
        (``jobs.resumed``)."""
        if not self.skip_unreadable:
            return None
        row = _last_kept_row(sink)
        if row is None:
            raise SourceError(
                "cannot resume: a run that skips unreadable images has fewer rows than files, and only a table's "
                "path column says which file comes next: write its output as .parquet, .csv or a folder"
            )
        names = self._files[self._lo : self._hi]
        path = str(row.get("path", ""))
        if path not in names:
            raise SourceError(
                f"cannot resume: the output's last row names {path!r}, which is not an image of {str(self.path)!r} "
                "(the folder is not the one the output was made from)"
            )
        return names.index(path) + 1


class ImageTableSource(_ImageFiles):
    """The images a table lists (a manifest: a ``.parquet`` or ``.csv`` file whose
    ``column`` holds a path a row, relative to the table's folder or absolute), in
    the table's order: uint8 ``[N, H, W, 3]``, resized to ``size``, each row with
    the table's path as written and its id (the ``id_column``'s value, else
    ``row_id``: the table's own column of that name, or the row's number), so a
    result joins back to its row; decoding as :class:`_ImageFiles` says.  Rows
    are the table's: windows, shards and resumes count them, and a resumed run
    that skips unreadable images goes on after the id its output ends with."""

    kind = "image table"

    def __init__(
        self,
        path: str | Path,
        column: str,
        batch_size: int,
        inputs: Sequence[TensorSpec],
        input_name: str | None = None,
        size: tuple[int, int] | None = None,
        decode_threads: int | None = None,
        skip_unreadable: bool = False,
        jpeg_draft: bool = False,
        id_column: str | None = None,
    ):
        self.path = _existing(path, "input table file")
        self.column = column
        table = self._read(column, id_column)
        names = table.column(column)
        if names.null_count:
            row = next(index for index, value in enumerate(names.is_null().to_pylist()) if value)
            raise SourceError(f"{str(self.path)!r}: row {row} has no {column!r} (an empty path)")
        #: the paths as the table writes them, text
        self._names = names.cast("string").combine_chunks()
        self.id_column = id_column or ("row_id" if "row_id" in table.column_names else None)
        self._ids = (
            table.column(self.id_column).to_numpy(zero_copy_only=False)
            if self.id_column is not None
            else np.arange(table.num_rows, dtype=np.int64)
        )
        self._id_name = self.id_column or "row_id"
        self._folder = self.path.parent
        if not table.num_rows:
            raise SourceError(f"{str(self.path)!r} lists no images: it has no rows")
        self._setup(table.num_rows, batch_size, inputs, input_name, size, decode_threads, skip_unreadable, jpeg_draft)

    def _read(self, column: str, id_column: str | None) -> Any:
        """The table's path column and id column (and ``row_id``, where it has one)."""
        import pyarrow as pa
        import pyarrow.csv as pcsv
        import pyarrow.parquet as pq

        suffix = self.path.suffix.lower()
        if suffix not in (*PARQUET_SUFFIXES, ".csv"):
            raise SourceError(f"{str(self.path)!r}: a table of image paths is a .parquet or .csv file")
        try:
            names = pq.read_schema(self.path).names if suffix != ".csv" else pcsv.open_csv(self.path).schema.names
        except (pa.ArrowInvalid, OSError) as exc:
            raise SourceError(f"{str(self.path)!r} is not a readable table: {exc}") from exc
        wanted = [name for name in (column, id_column or "row_id") if name in names]
        for name, what in ((column, "image path"), (id_column, "id")):
            if name is not None and name not in names:
                raise SourceError(f"the {what} column {name!r} is not in {str(self.path)!r}: columns {names}")
        if suffix == ".csv":
            types = {column: pa.string()}  # a path is text, however it looks
            options = pcsv.ConvertOptions(include_columns=wanted, column_types=types)
            return pcsv.read_csv(self.path, convert_options=options)
        return pq.read_table(self.path, columns=wanted)

    def _file(self, row: int) -> Path:
        return self._folder / self._names[row].as_py()  # an absolute path stays itself

    def _meta(self, rows: list[int]) -> dict[str, np.ndarray]:
        return {
            self.column: self._names.take(rows).to_numpy(zero_copy_only=False).astype(str),
            self._id_name: self._ids[rows],
        }

    def position_after(self, sink: Any, start: int) -> int | None:
        """Where a resumed run goes on when unreadable images are skipped (its rows are
        then fewer than the table's): after the row whose id the output's last row has;
        None where rows are counted (``jobs.resumed``)."""
        if not self.skip_unreadable:
            return None
        row = _last_kept_row(sink)
        if row is None or self._id_name not in row:
            raise SourceError(
                f"cannot resume: a run that skips unreadable images has fewer rows than the table, and only the "
                f"output's {self._id_name!r} column says which row comes next: write it as .parquet, .csv or a folder"
            )
        matches = np.flatnonzero(self._ids.astype(str) == str(row[self._id_name]))
        if len(matches) != 1:
            how = "no row" if not len(matches) else f"{len(matches)} rows"
            raise SourceError(
                f"cannot resume: {how} of {str(self.path)!r} with {self._id_name} {row[self._id_name]!r}, the "
                "output's last, where one was to say which row comes next (ids must be unique to resume a run "
                "that skips unreadable images)"
            )
        return int(matches[0]) + 1 - self._lo


def _decode_threads(value: int | None) -> int:
    if value is None:
        return max(1, min(AUTO_DECODE_THREADS, usable_cpus()))
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"decode_threads must be an int >= 1 or None, got {value!r}")
    return value
