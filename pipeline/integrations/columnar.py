"""Scoring Arrow tables: what Ray Data and Spark hand a worker, a batch of rows as
a pyarrow table (or Ray's dict of numpy columns), turned into the model's inputs
and back into a table of the kept columns and the outputs.

The columns an input takes, their checks and messages are those of ``ortpipe
run``'s table sources, by one planner (NOTE [ the table plan ]): ``input_columns``
maps an input to one list column or to scalar columns stacked in order; without
it, the inputs' names or the width of a one-input model place them, or the batch
is refused naming the column.  Columns are cast
to the model's dtype within their kind (NOTE [ input dtypes ]).  The outputs
are named as ``ortpipe run`` writes them: one column each, a vector a row as a
fixed-size list (numpy batches: a 2-D array), ``output_<name>`` where a kept
column has the name.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..session import TensorSpec
from ..sources.table_plan import TablePlan, first_non_number, plan_table
from ..util.arrow import from_numpy, list_column
from ..util.errors import SourceError


class ArrowScorer:
    """The inputs of the model from a batch of rows, and the rows' table of results."""

    def __init__(
        self,
        inputs: Sequence[TensorSpec],
        input_columns: Mapping[str, str | Sequence[str]] | None = None,
        keep_columns: Sequence[str] = (),
        id_column: str | None = None,
        image_column: str | None = None,
    ) -> None:
        self.inputs = tuple(inputs)
        #: a column of pictures (Ray's ``read_images``: uint8, a row an H x W x C array) that is the
        #: model's one input as it is, made the model's on the device (``Pipeline(preprocess=...)``)
        self.image_column = image_column
        self.given = {
            name: [cols] if isinstance(cols, str) else list(cols) for name, cols in (input_columns or {}).items()
        }
        self.keep_columns = list(keep_columns)
        self.id_column = id_column
        self._mapped: tuple[Any, TablePlan] | None = None  # (schema, plan), for the last schema

    def columns(self, schema: Any, where: str = "the batch", record: Any = None) -> dict[str, Sequence[str]]:
        """Each input's columns in a table of ``schema``, by the plan ``ortpipe run`` makes
        (NOTE [ the table plan ]), made once a schema; ``record``: the batch, whose bad cell
        a refusal names."""
        return dict(self.plan(schema, where, record).inputs)

    def plan(self, schema: Any, where: str = "the batch", record: Any = None) -> TablePlan:
        """The table plan of ``schema`` (NOTE [ the table plan ]), made once a schema."""
        if self._mapped is not None and self._mapped[0].equals(schema):
            return self._mapped[1]
        plan = plan_table(
            schema,
            self.inputs,
            columns=self.given,
            id_column=self.id_column,
            keep_columns=self.keep_columns,
            where=where,
            first_non_number=None if record is None else functools.partial(_first_non_number, record),
        )
        self._mapped = (schema, plan)
        return plan

    def features(self, batch: Any, where: str = "the batch") -> dict[str, np.ndarray]:
        """The model's inputs from a pyarrow table or record batch, or a dict of numpy columns."""
        if self.image_column is not None:
            return self._pictures(batch, where)
        if isinstance(batch, Mapping):
            return self._from_numpy(batch, where)
        from ..sources.columns import cast_columns
        from ..sources.tables import stacked

        record = _one_record(batch)
        columns = self.columns(record.schema, where, record)
        return {
            spec.name: cast_columns(
                spec, stacked(record, columns[spec.name], (where, 0), spec.rank), columns[spec.name], (where, 0)
            )
            for spec in self.inputs
        }

    def _pictures(self, batch: Any, where: str) -> dict[str, np.ndarray]:
        """The image column as the model's one input, as it is (the pipeline's preprocessing makes it the model's)."""
        if not isinstance(batch, Mapping):
            raise SourceError(f"a column of images comes in numpy batches (batch_format='numpy'), not {where}'s")
        if self.image_column not in batch:
            raise SourceError(f"the image column {self.image_column!r} is not in {where}: columns {sorted(batch)}")
        if len(self.inputs) != 1:
            names = [spec.name for spec in self.inputs]
            raise SourceError(f"a column of images feeds a model of one input; this one takes {names}")
        return {self.inputs[0].name: np.ascontiguousarray(batch[self.image_column])}

    def _from_numpy(self, batch: Mapping[str, np.ndarray], where: str) -> dict[str, np.ndarray]:
        import pyarrow as pa

        from ..sources.columns import cast_columns

        schema = pa.schema([(name, _arrow_type(np.asarray(values))) for name, values in batch.items()])
        columns = self.columns(schema, where)
        features = {}
        for spec in self.inputs:
            parts = [np.asarray(batch[c]) for c in columns[spec.name]]
            one = len(parts) == 1 and (parts[0].ndim == 2 or spec.rank == 1)  # as ``stacked`` takes them
            features[spec.name] = cast_columns(spec, parts[0] if one else np.stack(parts, axis=1))
        return features

    def table(
        self, batch: Any, outputs: Mapping[str, np.ndarray], labels: Mapping[str, Sequence[int | str]] | None = None
    ) -> Any:
        """The kept columns of ``batch`` and one column an output, in ``batch``'s format, as a
        sink writes them: a classifier's probabilities a column a class (``labels``:
        NOTE [ class columns ]), one value a row a plain column."""
        if labels:
            from ..sinks import class_columns

            outputs = class_columns(outputs, labels)
        outputs = {name: _one_value_a_row(values) for name, values in outputs.items()}
        if isinstance(batch, Mapping):
            kept = {name: np.asarray(batch[name]) for name in self.keep_columns}
            return {**kept, **{_output_name(name, kept): values for name, values in outputs.items()}}
        import pyarrow as pa

        record = _one_record(batch)
        arrays = {name: record.column(record.schema.get_field_index(name)) for name in self.keep_columns}
        for name, values in outputs.items():
            arrays[_output_name(name, arrays)] = _arrow_column(values)
        return pa.table(arrays)


def _first_non_number(record: Any, column: str) -> tuple[int, str] | None:
    return first_non_number(record.column(record.schema.get_field_index(column)).to_pylist())


def chunked(features: dict[str, np.ndarray], pipe: Any, batch_size: int | None) -> list[dict[str, np.ndarray]]:
    """A batch of rows cut into the pipeline's batches (``batch_size``, else picked for a row's bytes)."""
    rows = len(next(iter(features.values())))
    row_nbytes = sum(values.nbytes // max(rows, 1) for values in features.values())
    size = pipe.rows_per_batch(batch_size, row_nbytes)
    return [{name: values[start : start + size] for name, values in features.items()} for start in range(0, rows, size)]


def empty_outputs(pipe: Any, features: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The outputs of a batch of no rows: one zero row run, none kept (a filtered block
    reaches a worker empty; the outputs' dtypes and row shapes are the run's)."""
    one = {name: np.zeros((1, *values.shape[1:]), values.dtype) for name, values in features.items()}
    return {name: values[:0] for name, values in pipe.submit(one).result().items()}


def joined(
    results: Sequence[Mapping[str, np.ndarray]], chunks: Sequence[Mapping[str, np.ndarray]]
) -> dict[str, np.ndarray]:
    """The chunks' outputs as the batch's: each output one row per input row."""
    rows = len(next(iter(chunks[0].values())))
    for name, values in results[0].items():
        if len(values) != rows:
            raise SourceError(
                f"output {name!r} has {len(values)} rows for a batch of {rows}: an output that is not one row "
                "per input row cannot be a column of the rows; leave it out with outputs="
            )
    if len(results) == 1:
        return dict(results[0])
    return {name: np.concatenate([result[name] for result in results]) for name in results[0]}


def _one_record(batch: Any) -> Any:
    """A pyarrow table or record batch as one record batch."""
    import pyarrow as pa

    if isinstance(batch, pa.RecordBatch):
        return batch
    if isinstance(batch, pa.Table):
        records = batch.combine_chunks().to_batches()
        if len(records) == 1:
            return records[0]
        return pa.RecordBatch.from_pylist([], schema=batch.schema) if not records else pa.concat_batches(records)
    raise SourceError(f"a batch of rows is a pyarrow table or a dict of numpy columns, got {type(batch).__name__}")


def _arrow_type(values: np.ndarray) -> Any:
    """The Arrow type a numpy column stands for (a 2-D one: a fixed-size list)."""
    import pyarrow as pa

    if values.dtype == object:
        return pa.string()
    element = pa.from_numpy_dtype(values.dtype)
    return pa.list_(element, values.shape[1]) if values.ndim == 2 else element


def _one_value_a_row(values: np.ndarray) -> np.ndarray:
    """``[N, 1]`` (or ``[N, 1, 1]``) as ``[N]``: a plain column, not a one-element list."""
    return values.reshape(len(values)) if values.ndim > 1 and values.size == len(values) else values


def _arrow_column(values: np.ndarray) -> Any:
    """An output as a column: one value a row, or a fixed-size list of the row's values."""

    if values.ndim == 1:
        return from_numpy(values)
    return list_column(np.ascontiguousarray(values).reshape(len(values), int(np.prod(values.shape[1:]))))


def _output_name(name: str, taken: Mapping[str, Any]) -> str:
    return f"output_{name}" if name in taken else name
