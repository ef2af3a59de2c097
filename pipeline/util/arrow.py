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


def numpy_dtype_of(kind: Any) -> np.dtype:
    """The numpy dtype of an Arrow number, bool or timestamp (object for anything else), read off
    the type: pyarrow's conversions import pandas where it is installed (0.2 s), and its
    ``DataType.to_pandas_dtype`` needs pandas in some releases, which ortpipe does not."""
    import pyarrow as pa

    if pa.types.is_boolean(kind):
        return np.dtype(bool)
    if pa.types.is_integer(kind):
        return np.dtype(f"{'int' if pa.types.is_signed_integer(kind) else 'uint'}{kind.bit_width}")
    if pa.types.is_floating(kind):
        return np.dtype(f"float{kind.bit_width}")
    if pa.types.is_timestamp(kind):
        return np.dtype(f"datetime64[{kind.unit}]")
    return np.dtype(object)


def _view(array: Any) -> np.ndarray | None:
    import pyarrow as pa

    kind = array.type
    if array.null_count or not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        return None
    dtype = numpy_dtype_of(kind)
    data = array.buffers()[1]
    if data is None:  # an empty array may have no buffer
        return np.empty(0, dtype)
    return np.frombuffer(data, dtype, count=len(array), offset=array.offset * dtype.itemsize)


def carried_exactly(kind: Any) -> bool:
    """Whether a column of Arrow type ``kind`` comes back the same through :func:`exact_values`
    and :func:`from_numpy` (an id or a kept column, written back beside the outputs)."""
    import pyarrow as pa

    if pa.types.is_dictionary(kind):
        return carried_exactly(kind.value_type)
    if pa.types.is_timestamp(kind):
        return kind.tz is None
    return any(
        check(kind)
        for check in (
            pa.types.is_integer,
            pa.types.is_floating,
            pa.types.is_boolean,
            pa.types.is_string,
            pa.types.is_large_string,
            pa.types.is_binary,
            pa.types.is_date,
            pa.types.is_duration,
            pa.types.is_null,  # a column of nulls alone (a CSV's empty one): nulls it stays
        )
    )


def exact_values(column: Any) -> np.ndarray:
    """An id or kept column as numpy that :func:`from_numpy` turns back into the same Arrow
    column: numbers with nulls as a masked array (pyarrow's own conversion makes an int64
    with a null float64, which rounds ids above 2**53), a dictionary's values decoded."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    kind = column.type
    if column.null_count and (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
        filled = column.fill_null(False if pa.types.is_boolean(kind) else 0)
        mask = column.is_null().to_numpy(zero_copy_only=False)
        return np.ma.MaskedArray(filled.to_numpy(zero_copy_only=False), mask=mask)
    return to_numpy(column)


def concatenated(parts: list[np.ndarray]) -> np.ndarray:
    """Parts of a column as one; where one is a masked array (:func:`exact_values`), a masked
    array, whose mask ``np.concatenate`` would drop."""
    if any(isinstance(part, np.ma.MaskedArray) for part in parts):
        return np.ma.concatenate(parts)
    return np.concatenate(parts)


def from_numpy(values: np.ndarray) -> Any:
    """A 1-D numpy array as an Arrow array: numbers share its memory (kept alive by
    the Arrow buffer), a masked array's masked values are nulls (:func:`exact_values`),
    anything else is converted by pyarrow."""
    import pyarrow as pa

    if isinstance(values, np.ma.MaskedArray):
        kind = pa.from_numpy_dtype(values.dtype)
        return pa.array(np.ma.getdata(values), mask=np.ma.getmaskarray(values), type=kind)
    if values.ndim != 1 or values.dtype.kind not in "iuf" or not values.dtype.isnative:
        return pa.array(values)
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def list_column(flat: np.ndarray) -> Any:
    """A 2-D numpy array as a fixed-size list array, one list a row."""
    import pyarrow as pa

    flat = np.ascontiguousarray(flat)
    return pa.FixedSizeListArray.from_arrays(from_numpy(flat.reshape(-1)), flat.shape[1])
