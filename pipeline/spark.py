"""Spark: ortpipe's engine in each Python worker, fed by ``DataFrame.mapInArrow``.

::

    from pipeline.spark import output_schema, scorer

    fn = scorer("model.onnx", keep_columns=["id"], device="cpu")
    scored = df.mapInArrow(fn, output_schema("model.onnx", df.schema, keep_columns=["id"]))
    scored.write.parquet("scores/")

NOTE [ Spark workers ]: ``mapInArrow`` hands each partition's rows to a
Python worker as an iterator of Arrow record batches and takes an iterator
back.  The function :func:`scorer` returns makes its
:class:`~pipeline.Pipeline` the first time a worker process calls it and keeps
it in the process (Spark reuses its Python workers across partitions, so a
session is made once per worker, not per partition).  Each record batch is cut
into the pipeline's batches and handed in with ``Pipeline.submit``; up to
``WINDOW`` record batches are in flight, so reading the next one overlaps the
run of this one.  The columns are mapped, checked and cast as ``ortpipe run``'s
table sources do them (``_columnar``); an output of one value a row is a
column, several a row an array column; unsigned integers and float16, which
Spark has not, come back widened (uint8 as a short, float16 as a float).
"""

from __future__ import annotations

import collections
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .integrations.columnar import ArrowScorer, chunked, empty_outputs, joined
from .session import ModelSource
from .text.columns import TextOptions

#: record batches a worker has in the pipeline at once
WINDOW = 2

#: numpy dtypes Spark has no type for, and the one each is returned as
_WIDENED = {"uint8": "int16", "uint16": "int32", "uint32": "int64", "uint64": "int64", "float16": "float32"}

#: a record batch in the pipeline: the batch, its features, their chunks and the chunks' futures
_InFlight = tuple[Any, dict[str, np.ndarray], list[dict[str, np.ndarray]], list[Any]]

_ENGINES: dict[str, _Engine] = {}  # one per configuration, per worker process
_ENGINES_LOCK = threading.Lock()


def scorer(
    model: ModelSource,
    *,
    device: str = "auto",
    depth: int = 3,
    batch_size: int | None = None,
    input_columns: Mapping[str, str | Sequence[str]] | None = None,
    keep_columns: Sequence[str] = (),
    outputs: Sequence[str] | None = None,
    id_column: str | None = None,
    text: TextOptions | None = None,
    **options: Any,
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The function for ``df.mapInArrow(fn, output_schema(...))`` (NOTE [ Spark workers ]);
    the arguments are :class:`pipeline.ray.Predictor`'s (``text``: a column of texts, ``model``
    a model folder: docs/text.md)."""
    settings = {
        "text": text,
        "device": device,
        "depth": depth,
        "batch_size": batch_size,
        "input_columns": input_columns,
        "keep_columns": list(keep_columns),
        "outputs": None if outputs is None else list(outputs),
        "id_column": id_column,
        "options": dict(options),
    }
    # made here, in the driver, and carried by the function: the same key in every task of a worker
    name = str(model) if isinstance(model, str | Path) else uuid.uuid4().hex
    key = repr((name, sorted(settings.items(), key=lambda item: item[0])))

    def score(batches: Iterator[Any]) -> Iterator[Any]:
        engine = _engine(key, model, settings)
        yield from engine.score(batches)

    return score


def output_schema(
    model: ModelSource,
    input_schema: Any,
    keep_columns: Sequence[str] = (),
    outputs: Sequence[str] | None = None,
    text: TextOptions | None = None,
) -> Any:
    """The Spark schema of what :func:`scorer`'s function returns: the kept columns as
    ``input_schema`` (the DataFrame's) has them, then one field an output, from the
    model's declared outputs (read from the ONNX file: no session; ``text``: the model
    folder's, its pooling appended)."""
    from pyspark.sql import types as T

    from .session import declared_outputs, graph_of
    from .session.classifiers import declared_classes
    from .sinks import class_column_names

    spark_types = {
        "bool": T.BooleanType(),
        "int8": T.ByteType(),
        "int16": T.ShortType(),
        "int32": T.IntegerType(),
        "int64": T.LongType(),
        "float32": T.FloatType(),
        "float64": T.DoubleType(),
    }
    fields = [input_schema[name] for name in keep_columns]
    proto = graph_of(model if text is None else text.model(model)[0])
    classes = declared_classes(proto)  # NOTE [ class columns ]: a column a class
    chosen = [value for value in proto.graph.output if outputs is None or value.name in outputs]
    for value in chosen:
        if value.name in classes:
            for column in class_column_names(value.name, classes[value.name]):
                fields.append(T.StructField(column, T.FloatType(), nullable=False))
            continue
        spec = declared_outputs(proto, [value.name])[0]
        element = (
            T.StringType() if spec.dtype.kind == "O" else spark_types[_WIDENED.get(spec.dtype.name, spec.dtype.name)]
        )
        one_value = spec.rank <= 1 or all(dim == 1 for dim in spec.shape[1:])  # a plain column, as sinks write it
        kind = element if one_value else T.ArrayType(element, containsNull=False)
        name = f"output_{spec.name}" if spec.name in keep_columns else spec.name
        fields.append(T.StructField(name, kind, nullable=False))
    return T.StructType(fields)


class _Engine:
    """A worker's pipeline and the scoring of record batches through it."""

    def __init__(self, model: ModelSource, settings: Mapping[str, Any]) -> None:
        from .frontends.pipeline import Pipeline, PipelineOptions

        options = {"cast_inputs": True, **settings["options"]}
        text, encoder = settings["text"], None
        if text is not None:
            model, encoder = text.model(model)
        self.pipeline = Pipeline(
            model,
            device=settings["device"],
            depth=settings["depth"],
            outputs=settings["outputs"],
            options=PipelineOptions(**options),
        )
        self.batch_size = settings["batch_size"]
        features = () if text is not None else self.pipeline.source_inputs  # text: the tokens are TextColumns'
        self.scorer = ArrowScorer(features, settings["input_columns"], settings["keep_columns"], settings["id_column"])
        self.text = None if text is None else text.columns(encoder, self.pipeline)
        self._lock = threading.Lock()  # one partition at a time per engine (a worker runs one)

    def score(self, batches: Iterator[Any]) -> Iterator[Any]:
        with self._lock:
            pending: collections.deque[_InFlight] = collections.deque()
            try:
                for batch in batches:
                    features, chunks = self._chunks(batch)  # none for a batch of no rows
                    pending.append((batch, features, chunks, [self.pipeline.submit(chunk) for chunk in chunks]))
                    if len(pending) > WINDOW:
                        yield from self._finished(*pending.popleft())
                while pending:
                    yield from self._finished(*pending.popleft())
            finally:
                self.pipeline.drain()  # a partition that failed or was cut short leaves nothing running

    def _chunks(self, batch: Any) -> tuple[Any, list[dict[str, np.ndarray]]]:
        """The pipeline's batches of a record batch: cut by rows, or, for texts, by tokens
        (NOTE [ token batches ]; then the first is each token batch's places among the rows)."""
        if self.text is not None:
            return self.text.batches(batch, "a partition's rows")
        features = self.scorer.features(batch, "a partition's rows")
        return features, chunked(features, self.pipeline, self.batch_size)

    def _finished(
        self, batch: Any, features: Any, chunks: list[dict[str, np.ndarray]], futures: list[Any]
    ) -> Iterator[Any]:
        if self.text is not None:
            outputs = self.text.placed([future.result() for future in futures], features, batch.num_rows)
        elif futures:
            outputs = joined([future.result() for future in futures], chunks)
        else:  # a batch of no rows
            outputs = empty_outputs(self.pipeline, features)
        widened = {name: _widened(values) for name, values in outputs.items()}
        yield from _as_lists(self.scorer.table(batch, widened, self.pipeline.class_labels)).to_batches()


def _engine(key: str, model: ModelSource, settings: Mapping[str, Any]) -> _Engine:
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = _ENGINES[key] = _Engine(model, settings)
        return engine


def _widened(values: np.ndarray) -> np.ndarray:
    """Values of a dtype Spark has not as the one it has (uint8 -> int16, float16 -> float32)."""
    wider = _WIDENED.get(values.dtype.name)
    return values if wider is None else values.astype(wider)


def _as_lists(table: Any) -> Any:
    """Fixed-size list columns as lists: Spark's ArrayType."""
    import pyarrow as pa

    fields = [
        pa.field(field.name, pa.list_(field.type.value_type), nullable=field.nullable)
        if pa.types.is_fixed_size_list(field.type)
        else field
        for field in table.schema
    ]
    return table.cast(pa.schema(fields))
