"""Whether a table's columns fit the model's inputs, said before any batch is read:
the columns stacked for an input, against the values a row the model takes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..session import TensorSpec, castable, exact_cast_refusal, refused_at
from ..util.arrow import numpy_dtype_of, to_numpy
from ._base import SourceError


def check_widths(
    where: str,
    columns: Mapping[str, Sequence[str]],
    specs: Mapping[str, TensorSpec],
    schema: Any,
    chosen: bool,
) -> None:
    """A SourceError where the scalar columns stacked for an input are more or fewer than
    the values a row of it takes (a model that fixes them: ``[N, 8]``), naming the columns
    and what to do; ``chosen``: the columns were named (``--input-column``), not found."""
    for name, cols in columns.items():
        spec = specs[name]
        if spec.rank != 2 or not isinstance(spec.shape[1], int) or _any_list(schema, cols):
            continue
        width = spec.shape[1]
        if len(cols) == width:
            continue
        message = (
            f"{where!r}: input {name!r} takes rows of {width} values ({spec.describe_shape()}), but "
            f"{len(cols)} columns are stacked for it (dim 1): {list(cols)}"
        )
        if chosen:
            message += "; map the input's columns with --input-column (columns= in Python)"
        else:
            message += (
                "; map the input's columns with --input-column (columns= in Python), name the rows' id with "
                "--id-column, or write a column through with --keep"
            )
        raise SourceError(message)


def _any_list(schema: Any, columns: Sequence[str]) -> bool:
    import pyarrow as pa

    return any(
        pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
        for kind in (schema.field(c).type for c in columns)
    )


def check_footers(where: str, metadata: Any, columns: Mapping[str, np.dtype]) -> None:
    """A SourceError where a Parquet file's footer tells, before any batch, that a column an
    input reads holds nulls, or values its cast to the input's dtype would change (an integer
    past a float's exact ones, a float past a narrower float's largest: NOTE [ input dtypes ]),
    naming the rows of the row group; a file written without statistics is checked batch by batch."""
    first = 0
    for group_index in range(metadata.num_row_groups):
        group = metadata.row_group(group_index)
        for column_index in range(group.num_columns):
            chunk = group.column(column_index)
            stats = chunk.statistics
            if chunk.path_in_schema not in columns or stats is None:
                continue
            rows = f"rows {first:,} to {first + group.num_rows - 1:,} (row group {group_index}, as the file's footer "
            if stats.has_null_count and stats.null_count:
                raise SourceError(
                    f"{where!r}: column {chunk.path_in_schema!r} has {stats.null_count} null value(s) in {rows}"
                    "counts them): a model input takes values only; fill or drop them first "
                    "(pyarrow.compute.fill_null, or a filter)"
                )
            refused = _footer_range_refusal(stats, chunk.physical_type, columns[chunk.path_in_schema])
            if refused is not None:
                raise SourceError(
                    f"{where!r}: column {chunk.path_in_schema!r} cannot be cast in {rows}has its range): {refused}; "
                    "cast it yourself if meant"
                )
        first += group.num_rows


#: Parquet's physical types of numbers, as numpy's
_PHYSICAL: dict[str, np.dtype] = {
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FLOAT": np.dtype(np.float32),
    "DOUBLE": np.dtype(np.float64),
}


def _footer_range_refusal(stats: Any, physical: str, target: np.dtype) -> str | None:
    """Why a column chunk's min and max (of Parquet's ``physical`` type) cannot be cast to
    ``target`` exactly, None where they can or the footer cannot tell."""
    kind = _PHYSICAL.get(physical)
    if kind is None or not stats.has_min_max or not isinstance(stats.min, (int, float)):
        return None
    try:
        extremes = np.array([stats.min, stats.max], kind)
    except (OverflowError, ValueError):  # an unsigned logical type past int64's range
        return None
    return exact_cast_refusal(extremes, target)


def cast_columns(
    spec: TensorSpec, values: np.ndarray, columns: Sequence[str] = (), place: tuple[str, int] | None = None
) -> np.ndarray:
    """Stacked columns as the input's dtype, cast within their kind (NOTE [ input dtypes ]),
    else refused naming both - and, given the ``columns`` stacked and ``place`` (the file and
    the row the batch starts at), the column and row of the first value refused."""
    if values.dtype == spec.dtype:
        return values
    if not castable(values.dtype, spec.dtype):
        raise SourceError(f"columns for input {spec.name!r} are {values.dtype}; the model takes {spec.dtype}")
    inexact = exact_cast_refusal(values, spec.dtype)
    if inexact is not None:
        raise SourceError(f"{_cell(values, spec, columns, place)}cannot be cast: {inexact}; cast it yourself if meant")
    return values.astype(spec.dtype)


def _cell(values: np.ndarray, spec: TensorSpec, columns: Sequence[str], place: tuple[str, int] | None) -> str:
    """Where the first value refused a cast is: "'t.parquet': column 'x', row 12: ", or the input's columns."""
    at = refused_at(values, spec.dtype)
    if at is None or not columns:
        return f"columns for input {spec.name!r} "
    where, start = place if place is not None else ("", 0)
    column = columns[at[1]] if len(columns) > 1 and len(at) > 1 else columns[0]
    prefix = f"{where!r}: " if where else ""
    return f"{prefix}column {column!r}, row {start + at[0]:,}: "


def column_casts(schema: Any, columns: Mapping[str, Sequence[str]], specs: Mapping[str, TensorSpec]) -> dict[str, str]:
    """The inputs whose columns are cast to the model's dtype (NOTE [ input dtypes ]),
    each as "float64 -> float32"; what cannot be cast is refused at the first batch."""
    casts = {}
    for name, cols in columns.items():
        kinds = [element_type(schema.field(c).type) for c in cols]
        got = sorted({numpy_dtype_of(kind).name for kind in kinds if kind is not None})
        want = specs[name].dtype
        if got and got != [want.name] and all(castable(np.dtype(g), want) for g in got):
            casts[name] = f"{'/'.join(got)} -> {want.name}"
    return casts


def is_list(kind: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind))


def element_type(kind: Any) -> Any:
    """The numeric type of a column's values (a list column's items), or None."""
    import pyarrow as pa

    kind = kind.value_type if is_list(kind) else kind
    numeric = pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)
    return kind if numeric else None


def is_text(arrow_type: Any) -> bool:
    """Whether a column holds strings (NOTE [ string tensors ])."""
    import pyarrow as pa

    return bool(pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type))


def is_numeric(arrow_type: Any) -> bool:
    import pyarrow as pa

    if pa.types.is_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        return is_numeric(arrow_type.value_type)
    return pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type)


def record_column(record: Any, name: str) -> Any:
    return record.column(record.schema.get_field_index(name))


def numeric_column(name: str, column: Any, place: tuple[str, int] | None = None) -> np.ndarray:
    """A numeric column as an array: a list column's rows as a 2-D one.  ``place``: the
    file and the row its first value is, for a message that names the first null."""
    import pyarrow as pa

    kind = column.type
    listed = is_list(kind)
    text = is_text(kind)
    if not (listed or text or pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
        raise SourceError(f"column {name!r} has type {kind}: not numbers, bools or strings")
    if column.null_count:
        raise _nulls(name, column, place)
    if text:  # NOTE [ string tensors ]: a numpy object array of str, as ORT takes them
        return np.asarray(column.to_numpy(zero_copy_only=False), dtype=object)
    if not listed:
        return to_numpy(column)
    if pa.types.is_fixed_size_list(kind):
        width = kind.list_size
    else:
        lengths = set(column.value_lengths().to_pylist())
        if len(lengths) != 1:
            raise SourceError(f"column {name!r}: list lengths differ ({sorted(lengths)[:5]}...): cannot stack rows")
        width = lengths.pop()
    return to_numpy(column.flatten()).reshape(len(column), width)


def _nulls(name: str, column: Any, place: tuple[str, int] | None) -> SourceError:
    count = f"column {name!r} has {column.null_count} null value(s)"
    if place is None:
        return SourceError(f"{count} in a batch")
    where, start = place
    first = start + int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
    return SourceError(
        f"{where!r}: {count} in the rows from {start:,}, the first at row {first:,}: a model input takes numbers "
        "only; fill or drop them first (pyarrow.compute.fill_null, or a filter)"
    )
