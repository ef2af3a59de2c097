"""Sinks: where a run's outputs go, written as results arrive.

A sink's ``write(index, rows, outputs, meta)`` is called by the consumer with
views of the pinned output slot (valid during the call), so writing overlaps
inference: the engine keeps copying and running the next batches meanwhile,
and no extra copy is made before the write.  ``close()`` always runs - also
after an error or Ctrl-C - and leaves a readable file with every row written
so far.

* :class:`NpySink` - one ``.npy`` per output, streamed (the header's row count
  is rewritten on close);
* :class:`ParquetSink` - one table: the metadata columns (row id, or frame
  index and timestamp, or path) next to one column per output;
* :class:`CsvSink` - the same as CSV, an output of several values a row
  spread over one column per value;
* :class:`CallbackSink` - your function.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ._errors import PipelineError


class SinkError(PipelineError):
    """An output path cannot be written."""


def check_rows(
    name: str, index: int, rows: int, values: np.ndarray, row_shape: tuple[int, ...] | None
) -> tuple[int, ...]:
    """The shape of one row of output ``name``, after checking that batch ``index``
    has ``rows`` of them and, once ``row_shape`` is known, that rows keep it."""
    if values.ndim == 0 or values.shape[0] != rows or (row_shape is not None and values.shape[1:] != row_shape):
        expected = f"[{rows}, ...]" if row_shape is None else str([rows, *row_shape])
        raise SinkError(
            f"output {name!r} of batch {index} has shape {list(values.shape)}, expected {expected}: this sink "
            "writes one row per input row, and this output's shape depends on the data, not on the rows; "
            "write it with a CallbackSink or take it from Pipeline.map()"
        )
    return values.shape[1:]


def _output_rows(
    index: int,
    rows: int,
    outputs: dict[str, np.ndarray],
    taken: Mapping[str, Any],
    row_shapes: dict[str, tuple[int, ...]],
) -> Iterator[tuple[str, np.ndarray, bool]]:
    """Each output of a batch as (column name, ``[rows, values a row]`` copy, one scalar a row?),
    checked to be one row per input row; a name the metadata ``taken`` is prefixed ``output_``."""
    for name, values in outputs.items():
        row_shapes[name] = check_rows(name, index, rows, values, row_shapes.get(name))
        # A copy: pyarrow wraps numpy memory without copying, and ``values``
        # is a view of a pinned slot that the engine reuses after this call.
        flat = np.array(values, copy=True).reshape(rows, -1)
        yield (f"output_{name}" if name in taken else name), flat, flat.shape[1] == 1 and values.ndim <= 1


def _record_batch(
    index: int,
    rows: int,
    outputs: dict[str, np.ndarray],
    meta: dict[str, np.ndarray],
    row_shapes: dict[str, tuple[int, ...]],
    several: Callable[[str, np.ndarray], dict[str, Any]],
) -> Any:
    """A pyarrow record batch of the metadata columns, then the outputs: one
    value a row as a column, several as the columns ``several(name, flat)`` makes."""
    import pyarrow as pa

    columns: dict[str, Any] = {name: pa.array(values) for name, values in meta.items()}
    for name, flat, scalar in _output_rows(index, rows, outputs, columns, row_shapes):
        if scalar:
            columns[name] = pa.array(flat[:, 0])
        else:
            columns.update(several(name, flat))
    return pa.record_batch(columns)


def writable(path: str | Path) -> Path:
    """The path, after checking that its folder exists and can be written."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise SinkError(f"cannot write {str(path)!r}: folder {str(folder)!r} does not exist")
    if path.is_dir():
        raise SinkError(f"cannot write {str(path)!r}: it is a folder")
    try:
        with path.open("ab"):
            pass
    except OSError as exc:
        raise SinkError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from exc
    return path


class _NpyStream:
    """A .npy file written row by row; the header is fixed up on close."""

    _HEADER_BYTES = 128  # magic + version + length + dict, padded: room for any row count

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file: BinaryIO = path.open("wb")
        self.dtype: np.dtype | None = None
        self.row_shape: tuple[int, ...] = ()
        self.rows = 0

    def append(self, values: np.ndarray) -> None:
        if self.dtype is None:
            self.dtype, self.row_shape = values.dtype, values.shape[1:]
            self._write_header(0)
        self.file.write(np.ascontiguousarray(values, dtype=self.dtype).tobytes())
        self.rows += len(values)

    def _write_header(self, rows: int) -> None:
        assert self.dtype is not None
        header = repr(
            {
                "descr": np.lib.format.dtype_to_descr(self.dtype),
                "fortran_order": False,
                "shape": (rows, *self.row_shape),
            }
        )
        body_len = self._HEADER_BYTES - 10
        text = header.ljust(body_len - 1) + "\n"
        if len(text) != body_len:
            raise SinkError(f"{self.path}: .npy header too long for shape {(rows, *self.row_shape)}")
        self.file.seek(0)
        self.file.write(b"\x93NUMPY\x01\x00" + body_len.to_bytes(2, "little") + text.encode("latin1"))
        self.file.seek(0, 2)

    def close(self) -> None:
        if self.file.closed:
            return
        if self.dtype is not None:
            self._write_header(self.rows)
        self.file.close()


class NpySink:
    """``path`` for a one-output model; ``<stem>.<output>.npy`` beside it for several."""

    def __init__(self, path: str | Path, output_names: list[str]) -> None:
        base = writable(path)
        if len(output_names) == 1:
            self.paths = {output_names[0]: base}
        else:
            stem = base.name[: -len(".npy")] if base.name.endswith(".npy") else base.name
            self.paths = {name: writable(base.with_name(f"{stem}.{name}.npy")) for name in output_names}
        self._streams = {name: _NpyStream(p) for name, p in self.paths.items()}

    def write(self, index: int, rows: int, outputs: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> None:
        for name, values in outputs.items():
            stream = self._streams[name]
            check_rows(name, index, rows, values, stream.row_shape if stream.dtype is not None else None)
            stream.append(values)

    def close(self) -> None:
        for stream in self._streams.values():
            stream.close()


def _list_column(name: str, flat: np.ndarray) -> dict[str, Any]:
    """Several values a row as one fixed-size list column."""
    import pyarrow as pa

    return {name: pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), flat.shape[1])}


class ParquetSink:
    """Metadata columns, then one column per output (a list column when a row holds several values)."""

    def __init__(self, path: str | Path, row_group_rows: int = 65536) -> None:
        self.path = writable(path)
        self.row_group_rows = row_group_rows
        self._writer: Any = None
        self._pending: list[Any] = []
        self._pending_rows = 0
        self._row_shapes: dict[str, tuple[int, ...]] = {}

    def write(self, index: int, rows: int, outputs: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> None:
        batch = _record_batch(index, rows, outputs, meta, self._row_shapes, _list_column)
        if self._writer is None:
            import pyarrow.parquet as pq

            self._writer = pq.ParquetWriter(self.path, batch.schema)
        self._pending.append(batch)
        self._pending_rows += rows
        if self._pending_rows >= self.row_group_rows:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        # Take the batches first: an interrupt landing after write_table returns
        # must not make close() write the same rows twice.
        pending, self._pending, self._pending_rows = self._pending, [], 0
        if pending:
            self._writer.write_table(pa.Table.from_batches(pending))

    def close(self) -> None:
        if self._writer is None:
            return
        try:
            self._flush()
        finally:
            self._writer.close()  # writes the footer: the file is readable
            self._writer = None


def _value_columns(name: str, flat: np.ndarray) -> dict[str, Any]:
    """Several values a row as one CSV column each: ``name_0``, ``name_1``, ..."""
    import pyarrow as pa

    return {f"{name}_{i}": pa.array(flat[:, i]) for i in range(flat.shape[1])}


class CsvSink:
    """A CSV file: the metadata columns, then the outputs, an output of several
    values a row as one column per value (``logits_0``, ``logits_1``, ...),
    streamed batch by batch (pyarrow's writer)."""

    def __init__(self, path: str | Path) -> None:
        self.path = writable(path)
        self._writer: Any = None
        self._row_shapes: dict[str, tuple[int, ...]] = {}

    def write(self, index: int, rows: int, outputs: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> None:
        batch = _record_batch(index, rows, outputs, meta, self._row_shapes, _value_columns)
        if self._writer is None:
            import pyarrow.csv as pcsv

            self._writer = pcsv.CSVWriter(self.path, batch.schema)
        self._writer.write_batch(batch)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class CallbackSink:
    """Calls ``fn(index, outputs, meta)`` per batch; the arrays are copies you may keep."""

    def __init__(self, fn: Callable[[int, dict[str, np.ndarray], dict[str, np.ndarray]], None]) -> None:
        self.fn = fn

    def write(self, index: int, rows: int, outputs: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> None:
        self.fn(index, {name: values.copy() for name, values in outputs.items()}, meta)

    def close(self) -> None:
        pass


def read_npy_header_rows(path: str | Path) -> int:
    """Rows a streamed .npy declares (tests and tools)."""
    with Path(path).open("rb") as file:
        file.read(8)
        length = int.from_bytes(file.read(2), "little")
        return int(ast.literal_eval(file.read(length).decode("latin1"))["shape"][0])
