"""Sinks: where a run's outputs go, written as results arrive.

A sink's ``write(index, rows, outputs, meta)`` is called by the consumer with
views of the pinned output slot (valid during the call), so writing overlaps
inference: the engine keeps copying and running the next batches meanwhile,
and no extra copy is made before the write.  ``close()`` always runs - also
after an error or Ctrl-C - and leaves a readable file with every row written
so far; a sink that wrote nothing (an empty input, a run that failed first)
leaves no file rather than an empty, unreadable one.

* :class:`NpySink` - one ``.npy`` per output, streamed (the header's row count
  is rewritten on close);
* :class:`ParquetSink` - one table: the metadata columns (row id, or frame
  index and timestamp, or path) next to one column per output, written as
  parts in a journal beside the file until it is closed, so a killed run
  keeps every part it closed;
* :class:`ParquetDatasetSink` - the same table as a folder of Parquet files
  (a data set, as Spark writes one), each part renamed into place when
  closed, so a killed run loses only the part it was writing, and a
  ``_SUCCESS`` file once the job ran to its end;
* :class:`CsvSink` - the same as CSV, an output of several values a row
  spread over one column per value;
* :class:`CsvStreamSink` - the same CSV written to a stream as it comes
  (``ortpipe run --output -``: standard output, for whatever reads the pipe);
* :class:`JsonLinesSink` - JSON Lines, an object a row, an output of several
  values a row as a list; :class:`JsonLinesStreamSink` the same to a stream;
* :class:`CallbackSink` - your function.

NOTE [ per-batch outputs ]: most outputs hold one row per input row and are
written next to that row's metadata.  A detector's boxes after NMS or a
NonZero hold a count of their own each batch (NOTE [ data-dependent outputs ]
in the engine), so they cannot share a row with anything: such an output is
written per batch, its items one after another, tied to their batch by index
- in a table of its own beside the main one (``<stem>.<output>.parquet``, a
``batch`` column then the items), the main table getting a ``batch`` column
to join on; in ``.npy``, the items concatenated and ``<stem>.offsets.npy``
saying where each batch's begin (CSR offsets).  Which outputs are written so
is decided at the first write, and kept (:class:`OutputKinds`): those named
``data_dependent`` (``jobs.open_sink`` adds what the pipeline has found by
then), scalars, and any whose first dim is not the batch's rows.  An output
whose count happened to equal the rows in the first batch is refused later
with a message that says to name it.

NOTE [ resuming ]: a long job that stopped - Ctrl-C, a scheduler's SIGTERM,
or killed outright - goes on where it ended: its sink, opened with
``resume=True``, keeps the whole rows the earlier run left in its file(s)
(``kept_rows``), cutting off a partial row a kill left behind, and the job
leaves out as many rows of its source (``jobs.resumed``: unread where the
format allows) and appends the rest, so the file ends as one uninterrupted
run would have left it. Rows are counted, so the input must be the same, in
the same order; where the output keeps metadata (a table: ids, file and row,
path), ``jobs.resumed`` holds the input's row before the first new one
against the output's last row and refuses an input that differs there (a
source whose rows need not be its places - a folder of images that skips
files, a folder of videos - says where to go on from the last row, or from
``kept_columns``: NOTE [ frame positions ]). What
each format keeps of a run that was killed: a ``.npy`` every whole row
(found from the file's size: the header says 0 until the file is closed); a
CSV every whole line; a Parquet data set every part it had closed, and a
Parquet file the same, since it is written as a data set in a journal
beside it until it is closed (NOTE [ journaled Parquet ]); a resumed file
that was closed becomes its journal's part 0. Outputs written per
batch (a detector's boxes) are resumed in Parquet: each batch writes them
before its main table row, and a data set closes their parts with the main
table's, at the same batch, theirs first - so after a kill they are never
behind it, and the parts they have beyond it are dropped; this run's batches
are numbered after the last one the main table holds, so the tables join as
one run's would. ``.npy`` and CSV do not keep them in step with the rows:
such a run is refused at its first write.
"""

from __future__ import annotations

import ast
import contextlib
import json
import math
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ._closing import close_all
from ._errors import SinkError
from ._jsonl import json_lines

_PER_BATCH_RESUME = (
    "cannot resume {path!r}: the run writes outputs per batch (a count of their own each batch), which {kind} "
    "does not keep in step with the rows; write Parquet (a file or a folder) to resume such a run, or start over"
)


#: names of the outputs known to be data-dependent, or a function that tells them when asked
DataDependent = Collection[str] | Callable[[], Collection[str]]


class OutputKinds:
    """Which outputs hold one row per input row and which a count of their own
    each batch (a detector's boxes after NMS, NonZero): NOTE [ per-batch outputs ].

    An output's kind is decided the first time it is written and kept: per
    batch when it is named in ``data_dependent`` (names, or a function asked
    then: ``lambda: pipe.data_dependent_outputs``), when it is a scalar, or when
    its first dim is not the batch's rows; one row per input row otherwise.
    """

    def __init__(self, data_dependent: DataDependent = ()) -> None:
        self._data_dependent = data_dependent
        self._per_batch: dict[str, bool] = {}

    def _known(self) -> Collection[str]:
        known = self._data_dependent
        return known() if callable(known) else known

    def split(
        self, rows: int, outputs: Mapping[str, np.ndarray]
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """``outputs`` as (one row per input row, per batch)."""
        per_row: dict[str, np.ndarray] = {}
        per_batch: dict[str, np.ndarray] = {}
        for name, values in outputs.items():
            kind = self._per_batch.get(name)
            if kind is None:
                kind = self._per_batch[name] = values.ndim == 0 or values.shape[0] != rows or name in self._known()
            (per_batch if kind else per_row)[name] = values
        return per_row, per_batch


def check_rows(
    name: str, index: int, rows: int, values: np.ndarray, row_shape: tuple[int, ...] | None
) -> tuple[int, ...]:
    """The shape of one row of output ``name``, after checking that batch ``index``
    has ``rows`` of them and, once ``row_shape`` is known, that rows keep it."""
    if values.ndim == 0 or values.shape[0] != rows or (row_shape is not None and values.shape[1:] != row_shape):
        expected = f"[{rows}, ...]" if row_shape is None else str([rows, *row_shape])
        raise SinkError(
            f"output {name!r} of batch {index} has shape {list(values.shape)}, expected {expected}: it held one "
            "row per input row in the first batch, so this sink writes it so; if its shape depends on the data, "
            "name it in the sink's data_dependent (ortpipe run --data-dependent NAME) to write it per batch"
        )
    return values.shape[1:]


def check_items(name: str, index: int, values: np.ndarray, item_shape: tuple[int, ...] | None) -> np.ndarray:
    """A per-batch output of batch ``index`` as ``[count, ...]`` (a scalar is one item),
    after checking that its items keep the shape of the first batch's."""
    items = values.reshape(1) if values.ndim == 0 else values
    if item_shape is not None and items.shape[1:] != item_shape:
        raise SinkError(
            f"output {name!r} of batch {index} has shape {list(values.shape)}, expected [count, "
            f"{', '.join(map(str, item_shape))}]: a per-batch output may change its count, not the shape of its items"
        )
    return items


def _flat(values: np.ndarray) -> tuple[np.ndarray, bool]:
    """``[rows, values a row]`` copy of ``values``, and whether a row is one scalar.

    A copy: pyarrow wraps numpy memory without copying, and ``values`` is a
    view of a pinned slot that the engine reuses after the write."""
    flat = np.array(values, copy=True).reshape(len(values), math.prod(values.shape[1:]))
    return flat, flat.shape[1] == 1 and values.ndim <= 1


#: how an output of several values a row becomes columns: ``several(name, flat)``
Several = Callable[[str, np.ndarray], dict[str, Any]]


def _record_batch(columns: dict[str, Any], outputs: Iterable[tuple[str, np.ndarray, bool]], several: Several) -> Any:
    """A pyarrow record batch of ``columns`` (numpy or pyarrow arrays), then the
    outputs: one value a row as a column, several as the columns ``several(name, flat)``
    makes; an output whose name a column has is prefixed ``output_``."""
    import pyarrow as pa

    arrays: dict[str, Any] = {name: pa.array(values) for name, values in columns.items()}
    for name, flat, scalar in list(outputs):
        name = f"output_{name}" if name in arrays else name
        if scalar:
            arrays[name] = pa.array(flat[:, 0])
        else:
            arrays.update(several(name, flat))
    return pa.record_batch(arrays)


def file_part(name: str) -> str:
    """An output name as part of a file name (``/`` and other odd characters as ``_``)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "_"


def _beside(
    base: Path, suffix: str, names: Iterable[str], check: Callable[[Path], Path] | None = None
) -> dict[str, Path]:
    """``<stem>.<name><suffix>`` beside ``base`` for each name, each checked writable
    (``check``: :func:`writable`); two names that become one file name are refused."""
    stem = base.name[: -len(suffix)] if suffix and base.name.endswith(suffix) else base.name
    paths = {name: base.with_name(f"{stem}.{file_part(name)}{suffix}") for name in names}
    if len(set(paths.values())) != len(paths):
        raise SinkError(f"outputs {sorted(paths)} do not make distinct file names beside {str(base)!r}")
    return {name: (check or writable)(path) for name, path in paths.items()}


def writable(path: str | Path) -> Path:
    """The path, after checking that its folder exists and can be written (a file
    that was not there is not left behind)."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise SinkError(f"cannot write {str(path)!r}: folder {str(folder)!r} does not exist")
    if path.is_dir():
        raise SinkError(f"cannot write {str(path)!r}: it is a folder")
    existed = path.exists()
    try:
        with path.open("ab"):
            pass
    except OSError as exc:
        raise SinkError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from exc
    if not existed:  # only a probe: a run that fails before its first write leaves no empty file
        path.unlink()
    return path


def writable_folder(path: str | Path) -> Path:
    """The path of a folder to write files into (made at the first file), after
    checking that its parent exists and that it is not a file."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise SinkError(f"cannot write {str(path)!r}: folder {str(parent)!r} does not exist")
    if path.exists() and not path.is_dir():
        raise SinkError(f"cannot write a data set into {str(path)!r}: it is a file, not a folder")
    if not os.access(path if path.exists() else parent, os.W_OK | os.X_OK):
        raise SinkError(f"cannot write {str(path)!r}: permission denied")
    return path


class _NpyStream:
    """A .npy file written row by row, made at the first rows (their dtype is
    the header's); the header's row count is fixed up on close."""

    _HEADER_BYTES = 128  # magic + version + length + dict, padded: room for any row count

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file: BinaryIO | None = None
        self.dtype: np.dtype | None = None
        self.row_shape: tuple[int, ...] = ()
        self.rows = 0

    def append(self, values: np.ndarray) -> None:
        if self.file is None:
            self.file = self.path.open("wb")
            self.dtype, self.row_shape = values.dtype, values.shape[1:]
            self._write_header(0)
        elif values.dtype != self.dtype:
            raise SinkError(f"{str(self.path)!r} holds {self.dtype} rows; these are {values.dtype}")
        self.file.write(np.ascontiguousarray(values).tobytes())
        self.rows += len(values)

    def rows_on_disk(self) -> int:
        """Whole rows in the file left by an earlier run (0 when there is none), found
        from its size: the header of a run that was killed, not stopped, says 0."""
        if not self.path.exists():
            return 0
        with self.path.open("rb") as file:
            try:
                version = np.lib.format.read_magic(file)
                if version != (1, 0):
                    raise ValueError(f".npy format version {version}")
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(file)
            except ValueError as exc:
                raise SinkError(f"cannot resume {str(self.path)!r}: not a .npy file ortpipe wrote ({exc})") from exc
            if file.tell() != self._HEADER_BYTES or fortran or not shape:
                raise SinkError(f"cannot resume {str(self.path)!r}: not a .npy file ortpipe wrote")
        self.dtype, self.row_shape = dtype, tuple(shape[1:])
        row_bytes = dtype.itemsize * math.prod(self.row_shape)
        if not row_bytes:
            return int(shape[0])
        return (self.path.stat().st_size - self._HEADER_BYTES) // row_bytes

    def keep(self, rows: int) -> None:
        """Go on after the first ``rows`` rows of the earlier run's file (any after them cut off)."""
        if self.dtype is None:
            return  # no file: one is made at the first rows
        self.file = self.path.open("r+b")
        self.file.truncate(self._HEADER_BYTES + rows * self.dtype.itemsize * math.prod(self.row_shape))
        self.rows = rows
        self._write_header(rows)

    def _write_header(self, rows: int) -> None:
        assert self.dtype is not None and self.file is not None
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
        """The header's final row count, the file closed; nothing written, no file
        (there is no dtype to declare: none rather than an unreadable one)."""
        if self.file is None or self.file.closed:
            return
        try:
            self._write_header(self.rows)
        finally:
            self.file.close()


class NpySink:
    """``path`` for a one-output model; ``<stem>.<output>.npy`` beside it for several.

    An output written per batch (NOTE [ per-batch outputs ]) holds every
    batch's items one after another, and ``offsets_paths[name]``
    (``<its stem>.offsets.npy``, int64) says where each batch's are: batch
    ``i``'s are rows ``offsets[i]:offsets[i + 1]``.
    """

    def __init__(
        self, path: str | Path, output_names: list[str], data_dependent: DataDependent = (), resume: bool = False
    ) -> None:
        base = writable(path)
        self.paths = {output_names[0]: base} if len(output_names) == 1 else _beside(base, ".npy", output_names)
        self.offsets_paths: dict[str, Path] = {}
        self._kinds = OutputKinds(data_dependent)
        self._streams = {name: _NpyStream(p) for name, p in self.paths.items()}
        self._offsets: dict[str, _NpyStream] = {}
        #: rows an earlier run left in the files, kept (NOTE [ resuming ])
        self.kept_rows = self._resume() if resume else 0

    def _resume(self) -> int:
        """The rows every output's file holds (a kill may have left one further than
        another), each file cut to them."""
        for path in self.paths.values():
            offsets = _beside(path, ".npy", ["offsets"])["offsets"]
            if offsets.exists() and offsets not in self.paths.values():
                raise SinkError(_PER_BATCH_RESUME.format(path=str(path), kind=".npy"))
        kept = min(stream.rows_on_disk() for stream in self._streams.values())
        for stream in self._streams.values():
            stream.keep(kept)
        return kept

    def write(self, index: int, rows: int, outputs: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> None:
        per_row, per_batch = self._kinds.split(rows, outputs)
        if per_batch and self.kept_rows:
            raise SinkError(_PER_BATCH_RESUME.format(path=str(next(iter(self.paths.values()))), kind=".npy"))
        items = {name: check_items(name, index, values, self._known_shape(name)) for name, values in per_batch.items()}
        for name, values in per_row.items():
            check_rows(name, index, rows, values, self._known_shape(name))
        for name, values in per_row.items():
            self._streams[name].append(values)
        for name, values in items.items():
            stream = self._streams[name]
            stream.append(values)
            self._offsets_stream(name).append(np.array([stream.rows], np.int64))

    def _known_shape(self, name: str) -> tuple[int, ...] | None:
        stream = self._streams[name]
        return stream.row_shape if stream.dtype is not None else None

    def _offsets_stream(self, name: str) -> _NpyStream:
        stream = self._offsets.get(name)
        if stream is None:
            path = _beside(self.paths[name], ".npy", ["offsets"])["offsets"]
            if path in self.paths.values():
                raise SinkError(f"the offsets of output {name!r} would overwrite {str(path)!r}, another output's file")
            stream = self._offsets[name] = _NpyStream(path)
            self.offsets_paths[name] = path
            stream.append(np.zeros(1, np.int64))  # batch 0 starts at item 0
        return stream

    def existing_outputs(self) -> list[Path]:
        """This sink's files that hold something already (an earlier run's), which writing would replace."""
        return [path for path in self.paths.values() if path.exists() and path.stat().st_size]

    @property
    def per_batch_paths(self) -> dict[str, tuple[Path, ...]]:
        """Each output written per batch: (its values, its offsets)."""
        return {name: (self.paths[name], path) for name, path in self.offsets_paths.items()}

    def close(self) -> None:
        close_all([*self._streams.values(), *self._offsets.values()])


#: Parquet's codecs, as ParquetSink's ``compression`` names them
PARQUET_CODECS = ("snappy", "zstd", "gzip", "brotli", "lz4", "none")


def parquet_codec(name: str) -> str:
    """``name`` if pyarrow can write Parquet with it, else a SinkError listing those it can."""
    import pyarrow as pa

    if name != "none" and (name not in PARQUET_CODECS or not pa.Codec.is_available(name)):
        usable = [c for c in PARQUET_CODECS if c == "none" or pa.Codec.is_available(c)]
        raise SinkError(f"Parquet compression {name!r} is not one this pyarrow writes: {usable}")
    return name


def parquet_writer(path: Path, schema: Any, compression: str) -> Any:
    """A ``ParquetWriter`` for ortpipe's outputs, each column encoded as suits it.

    NOTE [ Parquet encodings ]: pyarrow's default dictionary-encodes every
    column, which suits labels and paths but not what a model writes: a float
    output's values rarely repeat (the dictionary fills, then falls back to
    plain, after the work of both), and an id column counts up (a dictionary of
    every id).  Integer columns (ids, frame indices) are delta-encoded (a
    million row ids: 8 KB against 6 MB, and written 5x faster), floats plain,
    the rest (strings, booleans, lists of ints) dictionary-encoded as before.
    Measured, 1,000,000 rows of a row id and one float32 output in 16 row
    groups: 27 ms against 94 (docs/results.md)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    delta, dictionary = {}, []
    for field in schema:
        if pa.types.is_integer(field.type):
            delta[field.name] = "DELTA_BINARY_PACKED"
        elif not _floats(field.type):
            dictionary.append(field.name)
    return pq.ParquetWriter(
        path, schema, compression=compression, use_dictionary=dictionary, column_encoding=delta or None
    )


def _floats(arrow_type: Any) -> bool:
    """Floats, or fixed-size lists of them (a vector output's rows)."""
    import pyarrow as pa

    while pa.types.is_fixed_size_list(arrow_type) or pa.types.is_list(arrow_type):
        arrow_type = arrow_type.value_type
    return bool(pa.types.is_floating(arrow_type))


class _ParquetFile:
    """A Parquet file written in row groups of about ``row_group_rows``, each column
    chunk compressed with ``compression``: a part of a data set or of a journal."""

    def __init__(self, path: Path, row_group_rows: int, compression: str = "snappy") -> None:
        self.path = path
        self.row_group_rows = row_group_rows
        self.compression = compression
        self._writer: Any = None
        self._pending: list[Any] = []
        self._pending_rows = 0

    def write(self, batch: Any) -> None:
        if self._writer is None:
            self._writer = parquet_writer(self.path, batch.schema, self.compression)
        self._pending.append(batch)
        self._pending_rows += batch.num_rows
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


def _same_columns(path: Path, earlier: Any, schema: Any) -> None:
    """Refuse to resume ``path``, whose rows have the ``earlier`` schema, with rows of another."""
    if not schema.equals(earlier):
        raise SinkError(
            f"cannot resume {str(path)!r}: its columns are {_columns(earlier)}, this run writes "
            f"{_columns(schema)}: the same model, outputs and input are needed"
        )


def _columns(schema: Any) -> str:
    return ", ".join(f"{field.name} ({field.type})" for field in schema)


def _last_parquet_row(path: Path) -> dict[str, Any]:
    """The integer and text columns of a Parquet file's last row: what a resumed run's
    input is held against (``jobs.resumed``), read from its last row group alone -
    the outputs' columns, often most of the bytes, are left unread."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as file:
        text = (pa.types.is_integer, pa.types.is_string, pa.types.is_large_string)
        keys = [f.name for f in file.schema_arrow if any(kind(f.type) for kind in text)]
        group = file.read_row_group(file.metadata.num_row_groups - 1, columns=keys)
    return group.slice(group.num_rows - 1).to_pylist()[0] if group.num_rows else {}  # type: ignore[no-any-return]


def _parquet_columns(paths: Sequence[Path], names: Sequence[str]) -> dict[str, np.ndarray]:
    """Those of the columns ``names`` that the Parquet files ``paths`` (of one schema) have,
    read alone and joined in order (a resumed run's check of the rows it keeps)."""
    import pyarrow.parquet as pq

    if not paths:
        return {}
    present = [name for name in names if name in pq.read_schema(paths[0]).names]
    tables = [pq.read_table(path, columns=present) for path in paths]
    return {name: np.concatenate([table[name].to_numpy(zero_copy_only=False) for table in tables]) for name in present}


#: a data set's part files: their names sort in the order they were written, and are read back in
_PART = "part-{:05d}.parquet"
_PART_NAME = re.compile(r"part-(\d{5,})\.parquet")
#: a part while it is written: hidden (readers leave names starting with . out) until it is whole
_IN_PROGRESS = ".{}.inprogress"
#: a data set's part is closed once its rows hold this many bytes (arrow's, before compression)
DEFAULT_PART_BYTES = 256 << 20
#: the empty file that says a data set is complete (Spark's name; readers leave names starting with _ out)
SUCCESS = "_SUCCESS"


def durable(path: Path) -> None:
    """``path`` (a file, or a folder's entries) written through to the disk: a part's
    name says it is whole only once its bytes would survive the machine going down
    (a pre-empted VM, a power cut), not only the process.  A folder a file system
    cannot sync is left as it is."""
    folder = path.is_dir()
    try:
        descriptor = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if folder else 0))
    except OSError:
        if folder:
            return
        raise
    try:
        os.fsync(descriptor)
    except OSError:
        if not folder:
            raise
    finally:
        os.close(descriptor)


def whole_parts(folder: Path) -> list[Path]:
    """The whole part files of a data set folder ortpipe writes, in order."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if _PART_NAME.fullmatch(p.name))


def clear_data_set(folder: Path) -> None:
    """Remove what ortpipe writes in a data set folder - whole and hidden parts, ``_SUCCESS`` -
    and nothing else (a folder holding other files is still refused)."""
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        ours = _PART_NAME.fullmatch(path.name) or path.name == SUCCESS
        hidden_part = path.name.startswith(".part-") and path.name.endswith(".inprogress")
        if (ours or hidden_part) and path.is_file():
            path.unlink()


def refuse_used_folder(folder: Path) -> None:
    """A new data set's refusal of a folder that holds an earlier run's parts (they
    would be mixed) or files of other kinds (a data set has a folder of its own)."""
    parts = whole_parts(folder)
    if parts:
        raise SinkError(
            f"{str(folder)!r} holds {len(parts)} part file(s) of an earlier run: resume to go on from them "
            "(ortpipe run --resume), or replace them (--overwrite)"
        )
    others = sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) if folder.is_dir() else []
    if others:
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise SinkError(
            f"cannot write a data set into {str(folder)!r}: it holds other files ({shown}); a data set is written "
            "into a folder of its own: name a new one"
        )


class _ParquetParts:
    """A Parquet data set written as a folder of part files (:data:`_PART`), made
    at the first rows; a part is closed once it holds ``part_rows`` rows or
    ``part_bytes`` bytes, whichever comes first.  Each part is written under a
    hidden name and renamed when closed, so the folder only ever holds whole,
    readable parts, which Spark, pyarrow and :class:`sources.ParquetDatasetSource`
    read as one table, in order: a killed run loses only the part it was
    writing (NOTE [ resuming ])."""

    def __init__(
        self,
        folder: Path,
        file: Callable[[Path], _ParquetFile],
        part_rows: int | None,
        part_bytes: int,
        part_seconds: float | None = None,
    ):
        self.folder = folder
        #: a part's file, written in row groups as the sink says
        self._file = file
        self.part_rows, self.part_bytes, self.part_seconds = part_rows, part_bytes, part_seconds
        self._part: _ParquetFile | None = None
        self._number = 0
        self._rows = self._bytes = 0
        self._opened_at = 0.0
        #: the earlier run's schema, when resuming a folder that holds parts (NOTE [ resuming ])
        self._earlier: Any = None

    def resume(self) -> int:
        """The rows of the whole parts an earlier run left, to be kept (the part it was
        writing when it was killed is left hidden, and written anew)."""
        parts = whole_parts(self.folder)
        numbers = [int(_PART_NAME.fullmatch(p.name).group(1)) for p in parts]  # type: ignore[union-attr]
        if numbers != list(range(len(parts))):
            raise SinkError(
                f"cannot resume {str(self.folder)!r}: its parts are not numbered 0, 1, 2, ... as ortpipe writes them: "
                f"{[p.name for p in parts]}"
            )
        import pyarrow.parquet as pq

        rows = 0
        for part in parts:
            try:
                metadata = pq.read_metadata(part)
            except Exception as exc:
                raise SinkError(f"cannot resume {str(self.folder)!r}: {str(part)!r} is not readable ({exc})") from exc
            rows += metadata.num_rows
            if self._earlier is None:
                self._earlier = metadata.schema.to_arrow_schema()
        self._number = len(parts)
        return rows

    def last_row(self) -> dict[str, Any] | None:
        """The last row of the earlier run's last whole part (None when there is none)."""
        parts = whole_parts(self.folder) if self._earlier is not None else []
        return _last_parquet_row(parts[-1]) if parts else None

    def columns(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        """Those of the columns ``names`` the earlier run's whole parts have, whole, in order."""
        return _parquet_columns(whole_parts(self.folder) if self._earlier is not None else [], names)

    def keep_parts(self, parts: int) -> None:
        """Go on after the first ``parts`` whole parts (a side output's, as many as its main
        table kept): any after them, from a run killed while it closed its parts, are removed."""
        whole = whole_parts(self.folder)
        if len(whole) < parts:
            raise SinkError(
                f"cannot resume {str(self.folder)!r}: it holds {len(whole)} part file(s), its main table {parts}"
            )
        for extra in whole[parts:]:
            extra.unlink()
        self._number = parts

    @property
    def parts(self) -> int:
        """Whole parts in the folder: kept, and closed by this run."""
        return self._number

    @property
    def full(self) -> bool:
        """The open part holds ``part_rows`` rows or ``part_bytes`` bytes, or was opened
        ``part_seconds`` ago: time to close it."""
        if self._part is None:
            return False
        if (self.part_rows is not None and self._rows >= self.part_rows) or self._bytes >= self.part_bytes:
            return True
        return self.part_seconds is not None and time.monotonic() - self._opened_at >= self.part_seconds

    def write(self, batch: Any) -> None:
        if self._part is None:
            self._part = self._start(batch.schema)
            self._opened_at = time.monotonic()
        self._part.write(batch)
        self._rows += batch.num_rows
        self._bytes += batch.nbytes

    def _start(self, schema: Any) -> _ParquetFile:
        if self._earlier is not None:  # this run's parts must be of the earlier run's columns
            _same_columns(self.folder, self._earlier, schema)
        self.folder.mkdir(exist_ok=True)
        (self.folder / SUCCESS).unlink(missing_ok=True)  # rows are being added: not complete until marked again
        # a killed run's part of this number, never renamed, is written over
        return self._file(self.folder / _IN_PROGRESS.format(_PART.format(self._number)))

    def finish(self) -> None:
        """Close the open part (if any) and rename it into place."""
        if self._part is None:
            return
        part, self._part = self._part, None
        part.close()  # a failure here leaves it hidden: the folder holds whole parts only
        durable(part.path)  # on the disk before its name says it is whole
        os.replace(part.path, self.folder / _PART.format(self._number))
        durable(self.folder)
        self._number += 1
        self._rows = self._bytes = 0

    def close(self) -> None:
        self.finish()

    def mark_complete(self) -> None:
        """An empty ``_SUCCESS`` in the folder, where there is one: every row asked for is in it."""
        if self.folder.is_dir():
            (self.folder / SUCCESS).touch()


#: the part closed last in a Parquet file's journal holds at most this many bytes (arrow's) ...
JOURNAL_PART_BYTES = 64 << 20
#: ... and rows of at most this many seconds: what a killed run can lose of a file
JOURNAL_PART_SECONDS = 60.0
#: a journal's parts merged into one file, before it is moved into place
_MERGING = ".merged.parquet"
#: in the main table's journal: every table was merged, and is being moved into place
_MERGED = "_MERGED"


def journal_of(path: Path) -> Path:
    """The hidden folder a Parquet file is written into as parts until it is closed
    (NOTE [ journaled Parquet ])."""
    return path.with_name(f".{path.name}.parts")


class _Journal(_ParquetParts):
    """A Parquet file written as a journal of parts, merged at the end.

    NOTE [ journaled Parquet ]: a Parquet file's footer, which says where every
    column chunk lies, is written at close: a killed writer leaves a file that
    nothing can read.  So a Parquet file is written as a data set in a hidden
    folder beside it, its journal (``.NAME.parquet.parts``), each part renamed
    into place when closed - every ``JOURNAL_PART_SECONDS`` or
    ``JOURNAL_PART_BYTES``, whichever comes first - and merged into the file,
    row groups re-joined to ``row_group_rows``: by a thread beside the job from
    the second part on (:class:`_Merger`), the rest at close; a journal of one
    part is moved into place, no copy.  The price, measured (2 vCPUs, 400,000
    rows of 16 float32 a row, snappy): one part 2.0-2.3M rows/s written and
    closed, six parts 1.1-1.2M rows/s (0.78-0.80M when all of the merge waited
    for the close); the merged copy grows beside the parts, so the file needs up
    to twice its size on the disk until it is closed.  A killed run leaves
    the journal: resuming goes on after its whole parts.  A resumed file that
    was closed is moved into the journal as part 0 (and is the file again at
    close, moved back when nothing was added).  A close cut short while it
    moved the merged tables into place (:data:`_MERGED` marks that every merge
    was done) is finished by the next resume."""

    def __init__(
        self,
        path: Path,
        file: Callable[[Path], _ParquetFile],
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
            os.replace(self.path, self.folder / _PART.format(0))
        return super().resume()

    def restart(self) -> None:
        """A resumed run that kept no rows of the main table: this table starts anew."""
        self._fresh = True

    def _start(self, schema: Any) -> _ParquetFile:
        if self._fresh:  # the earlier run's rows of this table are replaced: gone at the first write, as a file's
            self._fresh = False
            remove_journal(self.folder)
            self.path.unlink(missing_ok=True)
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
            self._merger.add(self.folder / _PART.format(number))
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

    def __init__(self, merged: Path, like: _ParquetFile) -> None:
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
    (folder / _MERGED).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # something not ortpipe's in it: left where it is
        folder.rmdir()


def finish_moving_merged(folder: Path) -> None:
    """Where a close was cut short after every table was merged (:data:`_MERGED` in
    the main journal ``folder``), move what is left into place and remove the journals."""
    marker = folder / _MERGED
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
            file.truncate(_after_last_line(file))
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
            start = max(len(header), _after_last_line(file, end - 1))
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
        return {name: table[name].to_numpy(zero_copy_only=False) for name in present}

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


def _after_last_line(file: BinaryIO, end: int | None = None, block: int = 1 << 16) -> int:
    """The offset just after the last newline before ``end`` (default: the file's
    end; 0 when there is none), read backwards a block at a time."""
    end = file.seek(0, 2) if end is None else end
    while end > 0:
        start = max(0, end - block)
        file.seek(start)
        newline = file.read(end - start).rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0


class _TableSink:
    """One table of the metadata columns and the per-row outputs, and one table
    beside it for each per-batch output (NOTE [ per-batch outputs ]):
    ``<stem>.<output><suffix>``, a ``batch`` column then the output's items.
    The main table gets the ``batch`` column too when there are such outputs
    (``ortpipe_batch`` when the metadata has a ``batch`` already)."""

    _suffix = ""

    def __init__(self, path: str | Path, data_dependent: DataDependent = (), resume: bool = False) -> None:
        self.path = self._checked(Path(path))
        #: the table of each per-batch output, once the first batch has told which they are
        self.side_paths: dict[str, Path] = {}
        self._kinds = OutputKinds(data_dependent)
        self._main = self._open(self.path)
        #: rows an earlier run left in the table, kept (NOTE [ resuming ])
        self.kept_rows = self._main.resume() if resume else 0
        self._resume = resume
        self._sides: dict[str, Any] = {}
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._batch_column = "batch"
        #: the batches of the run being resumed: this run's are numbered after them
        self._batches_before = 0

    def existing_outputs(self) -> list[Path]:
        """This sink's table if it holds something already (an earlier run's), which writing would replace."""
        return [self.path] if self.path.is_file() and self.path.stat().st_size else []

    def last_kept_row(self) -> dict[str, Any] | None:
        """The last of the rows kept from an earlier run, column by column (a CSV's as
        text), for ``jobs.resumed`` to hold the input's row against; None when none was kept."""
        return self._main.last_row() if self.kept_rows else None

    def kept_columns(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        """Those of the columns ``names`` the rows kept from an earlier run have, whole (a
        CSV's as text): what a resumed folder of videos holds the input against when it
        cannot count (NOTE [ frame positions ])."""
        return self._main.columns(names) if self.kept_rows else {}

    def _checked(self, path: Path) -> Path:
        """``path`` after checking that it can be written."""
        return writable(path)

    def _open(self, path: Path) -> Any:
        raise NotImplementedError

    def _several(self, name: str, flat: np.ndarray) -> dict[str, Any]:
        raise NotImplementedError

    def write(self, index: int, rows: int, outputs: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> None:
        per_row, per_batch = self._kinds.split(rows, outputs)
        if not self._sides and per_batch:
            self._open_sides(list(per_batch), meta)
        index += self._batches_before
        columns: dict[str, Any] = dict(meta)
        if per_batch:
            columns[self._batch_column] = np.full(rows, index, np.int64)
        main = _record_batch(columns, self._per_row(index, rows, per_row), self._several)
        sides = {name: self._items(index, name, values) for name, values in per_batch.items()}
        for name, side in sides.items():  # the sides first: the main table is never ahead of them
            self._sides[name].write(side)
        self._main.write(main)

    def _per_row(self, index: int, rows: int, outputs: dict[str, np.ndarray]) -> list[tuple[str, np.ndarray, bool]]:
        checked = []
        for name, values in outputs.items():
            self._shapes[name] = check_rows(name, index, rows, values, self._shapes.get(name))
            checked.append((name, *_flat(values)))
        return checked

    def _items(self, index: int, name: str, values: np.ndarray) -> Any:
        """Batch ``index``'s items of a per-batch output as a record batch of its table."""
        items = check_items(name, index, values, self._shapes.get(name))
        self._shapes[name] = items.shape[1:]
        batch = {self._batch_column: np.full(len(items), index, np.int64)}
        return _record_batch(batch, [(name, *_flat(items))], self._several)

    def _open_sides(self, names: list[str], meta: Mapping[str, np.ndarray]) -> None:
        if "batch" in meta:
            self._batch_column = "ortpipe_batch"
        self.side_paths = _beside(self.path, self.path.suffix or self._suffix, names, self._checked)
        self._sides = {name: self._open(path) for name, path in self.side_paths.items()}
        if self.kept_rows:
            self._resume_sides()
        elif self._resume:  # nothing kept of the main table: nothing of its sides either
            for side in self._sides.values():
                self._restart_side(side)

    def _resume_sides(self) -> None:
        """The per-batch outputs of the run being resumed, kept as far as its main
        table goes (NOTE [ resuming ]); this run's batches numbered after its."""
        last = self.last_kept_row() or {}
        if self._batch_column not in last:
            raise SinkError(
                f"cannot resume {str(self.path)!r}: the earlier run wrote no outputs per batch, this one writes "
                f"{sorted(self._sides)}"
            )
        self._batches_before = int(last[self._batch_column]) + 1
        for path, side in zip(self.side_paths.values(), self._sides.values(), strict=True):
            if not self._side_written(path):
                raise SinkError(f"cannot resume {str(self.path)!r}: its per-batch output {str(path)!r} is missing")
            self._resume_side(side)

    def _side_written(self, path: Path) -> bool:
        """An earlier run wrote the per-batch output's table ``path``."""
        return path.exists()

    def _resume_side(self, side: Any) -> None:
        """Keep the rows of a per-batch output's table that the main table's kept rows go with."""
        raise SinkError(_PER_BATCH_RESUME.format(path=str(self.path), kind=f"a {self._suffix} table"))

    def _restart_side(self, side: Any) -> None:
        """A resumed run that kept no rows: a per-batch output's table starts anew (a file is written over)."""

    @property
    def per_batch_paths(self) -> dict[str, tuple[Path, ...]]:
        """Each output written per batch: (its table,)."""
        return {name: (path,) for name, path in self.side_paths.items()}

    def close(self) -> None:
        close_all([*self._sides.values(), self._main])  # the sides first, as each batch is written


def _list_column(name: str, flat: np.ndarray) -> dict[str, Any]:
    """Several values a row as one fixed-size list column."""
    import pyarrow as pa

    return {name: pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), flat.shape[1])}


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


def _value_columns(name: str, flat: np.ndarray) -> dict[str, Any]:
    """Several values a row as one CSV column each: ``name_0``, ``name_1``, ..."""
    import pyarrow as pa

    return {f"{name}_{i}": pa.array(flat[:, i]) for i in range(flat.shape[1])}


class CsvSink(_TableSink):
    """A CSV file: the metadata columns, then the outputs, an output of several
    values a row as one column per value (``logits_0``, ``logits_1``, ...),
    streamed batch by batch."""

    _suffix = ".csv"

    def _open(self, path: Path) -> _CsvFile:
        return _CsvFile(path)

    def _several(self, name: str, flat: np.ndarray) -> dict[str, Any]:
        return _value_columns(name, flat)


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


class _ToStream(_TableSink):
    """A table written to an open binary ``stream`` (default: standard output's bytes) as it
    comes, each batch flushed (``ortpipe run --output -``), for a program that reads the
    rows from a pipe.  There is no file: nothing to resume or to refuse replacing, and no
    outputs written per batch (they need a table of their own beside the main one: write
    them to a file, or leave them out with ``--output-names``)."""

    def __init__(self, stream: BinaryIO | None = None, data_dependent: DataDependent = ()) -> None:
        self._stream = stream if stream is not None else sys.stdout.buffer
        super().__init__("-", data_dependent)

    def _checked(self, path: Path) -> Path:
        return path  # no file to check

    def existing_outputs(self) -> list[Path]:
        return []

    def _open_sides(self, names: list[str], meta: Mapping[str, np.ndarray]) -> None:
        raise _no_beside(names)


class CsvStreamSink(_ToStream, CsvSink):
    """:class:`CsvSink`'s CSV written to a stream as it comes (:class:`_ToStream`)."""

    def _open(self, path: Path) -> Any:  # a _CsvStream, which is no file
        return _CsvStream(self._stream)


def _no_beside(names: list[str]) -> SinkError:
    """Why a stream cannot take outputs written per batch (NOTE [ per-batch outputs ])."""
    return SinkError(
        f"output(s) {names} have a count of their own each batch (data-dependent), which a table beside the "
        "main one holds; a stream has no beside: write to a file, or leave them out with --output-names"
    )


class _JsonLines:
    """JSON Lines written batch by batch: an object a row, the outputs of several values a
    row as lists (:class:`JsonLinesSink`), to a file (``path``) or an open ``stream``,
    flushed after each batch, the text made a column at a time (:mod:`pipeline._jsonl`:
    a float32 as float32's shortest text; NaN and infinities, which JSON lacks, as
    ``null``, so that any JSON reader reads every line)."""

    def __init__(self, path: Path | None = None, stream: BinaryIO | None = None) -> None:
        self.path, self._stream = path, stream
        self._file: BinaryIO | None = None
        #: the whole lines an earlier run left, kept when resuming (NOTE [ resuming ])
        self._kept = 0

    def resume(self) -> int:
        """The whole lines of the file an earlier run left (0 when there is none), to be kept;
        a line a kill cut short is cut off."""
        if self.path is None:
            raise SinkError("a stream keeps nothing of an earlier run: --resume needs an output file")
        if not self.path.exists():
            return 0
        with self.path.open("r+b") as file:
            file.truncate(_after_last_line(file))
            file.seek(0)
            self._kept = sum(1 for _ in file)
        return self._kept

    def last_row(self) -> dict[str, Any] | None:
        """The last line of the earlier run's file, as read back (None when it has none)."""
        if not self._kept or self.path is None:
            return None
        with self.path.open("rb") as file:
            end = file.seek(0, 2)
            file.seek(_after_last_line(file, end - 1))
            return json.loads(file.read())  # type: ignore[no-any-return]

    def columns(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        """Those of the columns ``names`` the earlier run's lines have, whole."""
        if not self._kept or self.path is None:
            return {}
        with self.path.open("rb") as file:
            rows = [json.loads(line) for line in file]
        return {name: np.asarray([row[name] for row in rows]) for name in names if name in rows[0]}

    def write(self, batch: Any) -> None:
        if self._file is None:
            self._file = self._stream if self._stream is not None else self._open()
        self._file.write(json_lines(batch))
        self._file.flush()  # a line a row for whatever reads it now

    def _open(self) -> BinaryIO:
        assert self.path is not None
        return self.path.open("ab" if self._kept else "wb")

    def close(self) -> None:
        if self._file is not None and self._file is not self._stream:
            self._file.close()
        self._file = None


class JsonLinesSink(_TableSink):
    """JSON Lines (``.jsonl``): an object a row, the metadata (row id, or frame index and
    timestamp, or path) then the outputs, an output of several values a row as a list;
    written batch by batch, resumable as a CSV is (a line a row).  Outputs written per
    batch go to ``<stem>.<output>.jsonl`` beside it."""

    _suffix = ".jsonl"

    def _open(self, path: Path) -> Any:  # a _JsonLines
        return _JsonLines(path)

    def _several(self, name: str, flat: np.ndarray) -> dict[str, Any]:
        return _list_column(name, flat)


class JsonLinesStreamSink(_ToStream, JsonLinesSink):
    """:class:`JsonLinesSink`'s lines written to a stream as they come (:class:`_ToStream`;
    ``ortpipe run --output - --output-format jsonl``)."""

    def _open(self, path: Path) -> Any:
        return _JsonLines(stream=self._stream)


class CallbackSink:
    """Calls ``fn(index, outputs, meta)`` per batch; the arrays are copies you may keep."""

    def __init__(self, fn: Callable[[int, dict[str, np.ndarray], dict[str, np.ndarray]], None]) -> None:
        self.fn = fn

    def write(self, index: int, rows: int, outputs: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> None:
        self.fn(index, {name: values.copy() for name, values in outputs.items()}, meta)

    def close(self) -> None:
        pass


class LabelledSink:
    """Writes into ``sink`` each batch's class indices (``index_output``: the
    ``..._index`` output of ``--top-k``, :func:`pipeline.heads.with_top_k`) and
    beside them their names, ``labels[index]``, as ``label_output`` (default:
    ``..._label`` in place of ``..._index``): a table says ``tabby cat``, not
    281.  Everything else is ``sink``'s (resuming, completion, closing)."""

    def __init__(self, sink: Any, index_output: str, labels: Sequence[str], label_output: str | None = None) -> None:
        if not labels:
            raise SinkError("labels: none given, one name a class is needed")
        self._sink = sink
        self.index_output = index_output
        self.label_output = label_output or f"{index_output.removesuffix('_index')}_label"
        self.labels = np.asarray([str(label) for label in labels])

    def write(self, index: int, rows: int, outputs: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> None:
        classes = outputs.get(self.index_output)
        if classes is None:
            written = sorted(outputs)
            raise SinkError(f"labels name the classes of {self.index_output!r}, not an output written: {written}")
        unnamed = classes[(classes < 0) | (classes >= len(self.labels))]
        if unnamed.size:
            raise SinkError(
                f"batch {index}: class {int(unnamed[0])} of {self.index_output!r} has no label: "
                f"{len(self.labels)} labels are given, for classes 0 to {len(self.labels) - 1}"
            )
        self._sink.write(index, rows, {**outputs, self.label_output: self.labels[classes]}, meta)

    def close(self) -> None:
        self._sink.close()

    def __getattr__(self, name: str) -> Any:  # kept_rows, last_kept_row, mark_complete, ...: the sink's
        return getattr(self._sink, name)


def read_labels(path: str | Path) -> list[str]:
    """A labels file: text, one class name a line, the first line naming class 0 (the
    last line's newline optional; a line of its own may not be empty); or JSON
    (``.json``): a list of names, or an object of class numbers ``"0"``.. ``"N-1"``,
    where a name may come as ``[id, name]`` (ImageNet's ``imagenet_class_index.json``)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SinkError(f"labels {str(path)!r} cannot be read as text: {exc}") from exc
    if path.suffix.lower() == ".json":
        return _json_labels(path, text)
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    empty = [number for number, line in enumerate(lines) if not line.strip()]
    if not lines or empty:
        where = f"line {empty[0] + 1} is empty" if empty else "it is empty"
        raise SinkError(f"labels {str(path)!r}: one class name a line, line N naming class N-1; {where}")
    return [line.strip() for line in lines]


def _json_labels(path: Path, text: str) -> list[str]:
    """The class names of a JSON labels file (:func:`read_labels`)."""
    expected = 'a list of names, or {"0": name, "1": name, ...}, a name or [id, name] each'
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SinkError(f"labels {str(path)!r} is not JSON: {exc}") from exc
    if isinstance(value, dict):
        numbers = sorted(value, key=lambda key: int(key) if str(key).isdigit() else -1)
        if numbers != [str(number) for number in range(len(value))]:
            raise SinkError(f"labels {str(path)!r}: its keys are to be the classes 0 to {len(value) - 1}; {expected}")
        value = [value[number] for number in numbers]
    names = [item[-1] if isinstance(item, list) and item else item for item in value] if isinstance(value, list) else []
    if not names or not all(isinstance(name, str) and name.strip() for name in names):
        raise SinkError(f"labels {str(path)!r}: expected {expected}")
    return [name.strip() for name in names]


def read_npy_header_rows(path: str | Path) -> int:
    """Rows a streamed .npy declares (tests and tools)."""
    with Path(path).open("rb") as file:
        file.read(8)
        length = int.from_bytes(file.read(2), "little")
        return int(ast.literal_eval(file.read(length).decode("latin1"))["shape"][0])
