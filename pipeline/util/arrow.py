"""numpy columns from Arrow arrays and back, without pyarrow's pandas path.

pyarrow's ``Array.to_numpy`` and ``pa.array(ndarray)`` go through its pandas
conversion, which imports pandas (where it is installed) on first use: a
fifth of a second of a table's whole run (measured: docs/results.md,
"Reading and writing Parquet").  The columns a model reads and writes are
mostly numbers without nulls, whose Arrow buffer has numpy's layout: a view
each way does, and costs nothing a batch.  Anything else (nulls, booleans'
bits, strings, dates, lists) goes pyarrow's way.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def to_numpy(column: Any) -> np.ndarray:
    """An Arrow array or chunked array as numpy: a read-only view of its values
    where they are numbers without nulls, else pyarrow's conversion."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks != 1:
            parts = [to_numpy(chunk) for chunk in column.chunks]
            return np.concatenate(parts) if parts else column.to_numpy()
        column = column.chunk(0)
    view = _view(column)
    return view if view is not None else column.to_numpy(zero_copy_only=False)


def _view(array: Any) -> np.ndarray | None:
    import pyarrow as pa

    kind = array.type
    if array.null_count or not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        return None
    dtype = np.dtype(kind.to_pandas_dtype())  # a numpy type for numbers; pandas is not imported
    data = array.buffers()[1]
    if data is None:  # an empty array may have no buffer
        return np.empty(0, dtype)
    return np.frombuffer(data, dtype, count=len(array), offset=array.offset * dtype.itemsize)


def from_numpy(values: np.ndarray) -> Any:
    """A 1-D numpy array as an Arrow array: numbers share its memory (kept alive by
    the Arrow buffer), anything else is converted by pyarrow."""
    import pyarrow as pa

    if values.ndim != 1 or values.dtype.kind not in "iuf" or not values.dtype.isnative:
        return pa.array(values)
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def list_column(flat: np.ndarray) -> Any:
    """A 2-D numpy array as a fixed-size list array, one list a row."""
    import pyarrow as pa

    flat = np.ascontiguousarray(flat)
    return pa.FixedSizeListArray.from_arrays(from_numpy(flat.reshape(-1)), flat.shape[1])
