"""CSV outputs: a file, and a stream (``--output -``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..util.arrow import to_numpy
from ..util.errors import SinkError
from ._base import DataDependent, after_last_line, value_columns
from ._table import Storage, StreamStorage, TableSink


class _CsvFile:
    """A CSV file streamed batch by batch (pyarrow's writer)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._writer: Any = None
        self._file: BinaryIO | None = None
        #: the earlier run's header, when resuming: rows are appended under it (NOTE [ resuming ])
        self._header: list[str] | None = None

    def resume(self) -> int:
        """The whole rows of the file an earlier run left (0 when there is none), to be
        kept; a line a kill cut short is cut off."""
        if not self.path.exists():
            return 0
        with self.path.open("r+b") as file:
            file.truncate(after_last_line(file))
        if not self.path.stat().st_size:
            return 0  # not even a whole header: written anew
        import pyarrow as pa
        import pyarrow.csv as pcsv

        try:
            with pcsv.open_csv(self.path) as reader:
                names = reader.schema.names
            # every column as text: only the rows are counted, and a later block need not parse as the first
            as_text = pcsv.ConvertOptions(column_types=dict.fromkeys(names, pa.string()), include_columns=names[:1])
            with pcsv.open_csv(self.path, convert_options=as_text) as reader:
                rows = sum(batch.num_rows for batch in reader)
        except (pa.ArrowInvalid, OSError) as exc:
            raise SinkError(f"cannot resume {str(self.path)!r}: not a CSV file ortpipe wrote ({exc})") from exc
        self._header = names
        return rows

    def last_row(self) -> dict[str, Any] | None:
        """The last whole line of the earlier run's file, column by column, as text (None when it has none)."""
        if self._header is None:
            return None
        import pyarrow as pa
        import pyarrow.csv as pcsv

        with self.path.open("rb") as file:
            header = file.readline()
            end = file.seek(0, 2)  # resume() left the file ending in a newline
            start = max(len(header), after_last_line(file, end - 1))
            file.seek(start)
            line = file.read(end - start)
        if not line.strip():
            return None
        as_text = pcsv.ConvertOptions(column_types=dict.fromkeys(self._header, pa.string()))
        table = pcsv.read_csv(pa.py_buffer(header + line), convert_options=as_text)
        return table.to_pylist()[0] if table.num_rows else None  # type: ignore[no-any-return]

    def columns(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        """Those of the columns ``names`` the earlier run's file has, whole, as text."""
        if self._header is None:
            return {}
        import pyarrow as pa
        import pyarrow.csv as pcsv

        present = [name for name in names if name in self._header]
        as_text = pcsv.ConvertOptions(column_types=dict.fromkeys(present, pa.string()), include_columns=present)
        table = pcsv.read_csv(self.path, convert_options=as_text)
        return {name: to_numpy(table[name]) for name in present}

    def write(self, batch: Any) -> None:
        if self._writer is None:
            self._writer = self._open_writer(batch.schema)
        self._writer.write_batch(batch)

    def _open_writer(self, schema: Any) -> Any:
        import pyarrow.csv as pcsv

        if self._header is None:
            return pcsv.CSVWriter(self.path, schema)
        if schema.names != self._header:
            raise SinkError(
                f"cannot resume {str(self.path)!r}: its columns are {self._header}, this run writes {schema.names}: "
                "the same model, outputs and input are needed"
            )
        self._file = self.path.open("ab")
        return pcsv.CSVWriter(self._file, schema, write_options=pcsv.WriteOptions(include_header=False))

    def close(self) -> None:
        try:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
        finally:
            if self._file is not None:
                self._file.close()


class CsvSink(TableSink):
    """A CSV file: the metadata columns, then the outputs, an output of several
    values a row as one column per value (``logits_0``, ``logits_1``, ...),
    streamed batch by batch."""

    def __init__(self, path: str | Path, data_dependent: DataDependent = (), resume: bool = False) -> None:
        super().__init__(path, Storage(_CsvFile, ".csv"), value_columns, data_dependent, resume)


class _CsvStream:
    """CSV written to an open binary stream, flushed after each batch (:class:`CsvStreamSink`)."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._writer: Any = None

    def resume(self) -> int:
        raise SinkError("a stream keeps nothing of an earlier run: --resume needs an output file")

    def write(self, batch: Any) -> None:
        import pyarrow.csv as pcsv

        if self._writer is None:
            self._writer = pcsv.CSVWriter(self._stream, batch.schema)  # the header first
        self._writer.write_batch(batch)
        self._stream.flush()  # a line a row for the reader now, not when a buffer fills

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()  # the stream stays open: it is not the sink's
            self._writer = None


class CsvStreamSink(TableSink):
    """:class:`CsvSink`'s CSV written to a stream as it comes (``--output -``; see
    :class:`StreamStorage`)."""

    def __init__(self, stream: BinaryIO | None = None, data_dependent: DataDependent = ()) -> None:
        super().__init__("-", StreamStorage(_CsvStream, stream, ".csv"), value_columns, data_dependent)
