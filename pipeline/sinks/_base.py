"""What every sink shares: the kinds of outputs (NOTE [ per-batch outputs ]), checks of
what a batch writes, output paths, and how outputs become table columns.

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
with a message that says to name it."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..util.arrow import from_numpy, list_column
from ..util.errors import SinkError

PER_BATCH_RESUME = (
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


def flat_values(values: np.ndarray) -> tuple[np.ndarray, bool]:
    """``[rows, values a row]`` copy of ``values``, and whether a row is one scalar.

    A copy: pyarrow wraps numpy memory without copying, and ``values`` is a
    view of a pinned slot that the engine reuses after the write."""
    flat = np.array(values, copy=True).reshape(len(values), math.prod(values.shape[1:]))
    # one value a row, [N] or [N, 1] (a regressor's prediction, a binary probability): a plain
    # column named after the output, in every format - not a one-element list
    return flat, flat.shape[1] == 1


#: how an output of several values a row becomes columns: ``several(name, flat)``
Several = Callable[[str, np.ndarray], dict[str, Any]]


def to_record_batch(columns: dict[str, Any], outputs: Iterable[tuple[str, np.ndarray, bool]], several: Several) -> Any:
    """A pyarrow record batch of ``columns`` (numpy or pyarrow arrays), then the
    outputs: one value a row as a column, several as the columns ``several(name, flat)``
    makes; an output whose name a column has is prefixed ``output_``."""
    import pyarrow as pa

    arrays: dict[str, Any] = {name: from_numpy(values) for name, values in columns.items()}
    for name, flat, scalar in list(outputs):
        name = f"output_{name}" if name in arrays else name
        if scalar:
            arrays[name] = from_numpy(flat[:, 0])
        else:
            arrays.update(several(name, flat))
    return pa.record_batch(arrays)


def file_part(name: str) -> str:
    """An output name as part of a file name (``/`` and other odd characters as ``_``)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) or "_"


def beside_path(
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


def after_last_line(file: BinaryIO, end: int | None = None, block: int = 1 << 16) -> int:
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


def portable_schema(schema: Any) -> Any:
    """``schema`` in the types the table formats have (Delta's, Iceberg's): fixed-size lists made
    lists, unsigned integers the next wider signed ones (a 64-bit one a decimal of 20 digits),
    float16 float32; every value kept exactly."""
    import pyarrow as pa

    def fitted(kind: Any) -> Any:
        if pa.types.is_fixed_size_list(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind):
            return pa.list_(fitted(kind.value_type))
        if pa.types.is_unsigned_integer(kind):
            return {8: pa.int16(), 16: pa.int32(), 32: pa.int64()}.get(kind.bit_width, pa.decimal128(20, 0))
        if pa.types.is_float16(kind):
            return pa.float32()
        return kind

    return pa.schema([field.with_type(fitted(field.type)) for field in schema])


def refuse_other_columns(where: str, theirs: Any, ours: Any) -> None:
    """A SinkError where a table (``where``: "'path': the Delta table") has other columns than
    the run writes: names and types, a list's element type compared without its field's name
    (Iceberg names it "element", pyarrow "item"); the missing, new and changed ones named."""
    if [(f.name, _said_type(f.type)) for f in theirs] == [(f.name, _said_type(f.type)) for f in ours]:
        return
    missing = [f.name for f in theirs if f.name not in ours.names]
    extra = [f.name for f in ours if f.name not in theirs.names]
    differ = [
        f.name for f in ours if f.name in theirs.names and _said_type(theirs.field(f.name).type) != _said_type(f.type)
    ]
    raise SinkError(
        f"{where}'s columns are not this run's (the table has {_said_columns(theirs)}; the run writes "
        f"{_said_columns(ours)}): missing {missing or 'none'}, new {extra or 'none'}, of other types "
        f"{differ or 'none'}; write to a new table (an overwrite replaces the rows, not the columns)"
    )


def _said_type(kind: Any) -> str:
    import pyarrow as pa

    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return f"list<{_said_type(kind.value_type)}>"
    return str(kind)


def _said_columns(schema: Any) -> str:
    return ", ".join(f"{field.name} ({_said_type(field.type)})" for field in schema)


def as_list_columns(name: str, flat: np.ndarray) -> dict[str, Any]:
    """Several values a row as one fixed-size list column."""

    return {name: list_column(flat)}


def value_columns(name: str, flat: np.ndarray) -> dict[str, Any]:
    """Several values a row as one CSV column each: ``name_0``, ``name_1``, ..."""

    return {f"{name}_{i}": from_numpy(flat[:, i]) for i in range(flat.shape[1])}
