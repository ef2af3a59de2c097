"""A table's columns written straight into the pipeline's slots.

NOTE [ tables fill slots ]: iterated, a table source stacks each record
batch's columns into a matrix of its own (``np.stack``: a fresh array a batch,
its pages faulted in on first write), which the engine then runs or stages.
Written into the slot instead, column by column, the stacked matrix is never
made: the slot is memory the pipeline reuses, so a batch costs the Parquet
decoding and one strided write a column (measured: docs/results.md).  ``jobs.run_job``
takes this path (``Pipeline.map_filled``) wherever every source input of the
model is fed by the table with rows of the model's dims and a dtype the
iteration would cast too (``same_kind``); elsewhere it iterates the source, whose
checks say what does not fit.  The rows, their order and their metadata are
those of the iteration (the same :meth:`records`), resumed runs included.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ..session import TensorSpec, castable, exact_cast_refusal, refused_at
from ..util.arrow import numpy_dtype_of
from ._base import SourceError
from .columns import element_type, is_list, numeric_column, record_column


class RecordSource(Protocol):
    """What a filler reads of a table source (``ColumnarSource``): declared here, so that
    this module imports no source class."""

    path: Any
    batch_size: int

    @property
    def columns(self) -> Mapping[str, Sequence[str]]: ...

    def records(self) -> Generator[tuple[Any, dict[str, np.ndarray], int], None, None]:
        """Each record batch with its rows' metadata and the row of the table it starts at."""
        ...


def filled_rows(
    schema: Any, columns: Mapping[str, Sequence[str]], specs: Mapping[str, TensorSpec]
) -> dict[str, tuple[int, ...] | None]:
    """The inputs a table fills, each with its dims of a row where the schema fixes
    them (None: a list column whose length only its rows tell); empty where a column's
    type could not be written into its input's dtype as the iteration casts it."""
    rows: dict[str, tuple[int, ...] | None] = {}
    for name, cols in columns.items():
        kinds = [schema.field(c).type for c in cols]
        element = [element_type(kind) for kind in kinds]
        if any(kind is None for kind in element):
            return {}
        if not all(castable(numpy_dtype_of(kind), specs[name].dtype) for kind in element):
            return {}
        if len(kinds) > 1 and any(is_list(kind) for kind in kinds):
            return {}  # lists beside other columns: the iteration says what is wrong
        rows[name] = _row_of(kinds[0]) if len(kinds) == 1 else (len(kinds),)
    return rows


def _row_of(kind: Any) -> tuple[int, ...] | None:
    """The dims of a row of one column: a scalar's, a fixed-size list's, or None (a list's length varies)."""
    import pyarrow as pa

    if pa.types.is_fixed_size_list(kind):
        return (kind.list_size,)
    return None if is_list(kind) else (1,)


class TableFiller:
    """Writes a table source's record batches into slots, one per ``fill(slot)``
    (NOTE [ tables fill slots ]); ``close()`` ends the reading."""

    def __init__(self, source: RecordSource, row_shapes: Mapping[str, tuple[int, ...]] | None = None) -> None:
        self._records = source.records()
        self._columns = dict(source.columns)
        self._path = str(source.path)
        #: the most rows a batch has: the rows of a slot
        self.batch_size = source.batch_size
        #: ``map_filled``'s row_shapes: the dims of a row where the model leaves them free
        self.row_shapes = row_shapes

    def fill(self, slot: Mapping[str, np.ndarray]) -> tuple[int, dict[str, np.ndarray]] | None:
        """The next record batch's columns written into the first rows of each input's
        slot: (rows, metadata), or None at the end."""
        record, meta, start = next(self._records, (None, None, 0))
        if record is None or meta is None:
            return None
        rows = record.num_rows
        for name, cols in self._columns.items():
            target = slot[name]
            if rows > len(target):
                raise SourceError(f"{self._path!r}: a batch of {rows} rows does not fit a slot of {len(target)}")
            _write(record, cols, target[:rows], name, (self._path, start))
        return rows, meta

    def close(self) -> None:
        self._records.close()


def _write(record: Any, columns: Sequence[str], target: np.ndarray, name: str, place: tuple[str, int]) -> None:
    """``columns`` of ``record`` into ``target``, one row a row: one list column's
    values, or each scalar column into its own column of ``target`` (``place``: the
    file and the table's row the record starts at, for messages)."""
    path = place[0]
    if len(columns) == 1:
        values = numeric_column(columns[0], record_column(record, columns[0]), place)
        if values.ndim == 1 and target.ndim == 1:  # a 1-D input, [N]: one column
            target[...] = _exact(values, target.dtype, columns[0], place)
            return
        if values.ndim == 2:
            if values.shape[1:] != target.shape[1:]:
                raise SourceError(
                    f"{path!r}: column {columns[0]!r} holds lists of {values.shape[1]} values, input {name!r} "
                    f"takes rows of {list(target.shape[1:])}"
                )
            target[...] = _exact(values, target.dtype, columns[0], place)
            return
    if target.shape[1:] != (len(columns),):
        raise SourceError(
            f"{path!r}: input {name!r} takes rows of {list(target.shape[1:])}, but {len(columns)} columns are "
            f"stacked for it (dim 1): {list(columns)}; choose its columns with --input-column (columns= in Python), "
            "or name an id column with --id-column (id_column=)"
        )
    for index, column in enumerate(columns):
        target[:, index] = _exact(
            numeric_column(column, record_column(record, column), place), target.dtype, column, place
        )


def _exact(values: np.ndarray, dtype: np.dtype, column: str, place: tuple[str, int]) -> np.ndarray:
    """``values`` of ``column``, refused where their cast into the slot would change one (an
    integer past a float's, a float past a narrower float's), naming the row (NOTE [ input dtypes ])."""
    inexact = exact_cast_refusal(values, dtype)
    if inexact is not None:
        path, start = place
        row = start + (refused_at(values, dtype) or (0,))[0]
        raise SourceError(
            f"{path!r}: column {column!r}, row {row:,}: cannot be cast: {inexact}; cast it yourself if meant"
        )
    return values
