"""Ray Data: one ortpipe engine per actor of a ``map_batches`` pool, Ray's
scheduler for the rest (reading, the actor pool, back-pressure, retries, writing).

::

    import ray
    from pipeline.ray import Predictor

    ds = ray.data.read_parquet("features/")
    scored = ds.map_batches(
        Predictor,
        fn_constructor_args=("model.onnx",),
        fn_constructor_kwargs={"keep_columns": ["id"]},
        batch_size=16384,
        compute=ray.data.ActorPoolStrategy(size=2),
        num_gpus=1,                    # or num_cpus=... on CPUs
        batch_format="pyarrow",        # or "numpy"
    )
    scored.write_parquet("scores/")

:func:`predict` builds that call from the arguments ``ortpipe run`` takes, and
checks the columns against the data set's schema before the job starts.

NOTE [ Ray actors ]: each actor makes its :class:`~pipeline.Pipeline` once
and keeps it for every batch Ray sends it.  ``__call__`` is a coroutine, so
Ray runs up to four of an actor's batches at once: each is cut into the
pipeline's batches and handed in with ``Pipeline.submit``, so consecutive
Ray batches overlap in the engine (the next one's h2d under this one's run)
instead of waiting for each other.  The first batch warms the pipeline up
(the others wait for it).  A failure that leaves the device unusable by the
process (a CUDA error that poisons the context: ``Device.context_lost``) ends
the actor's process, so that Ray starts a new actor and retries its tasks;
any other failure is the batch's, raised with ortpipe's message.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .integrations.columnar import ArrowScorer, chunked, empty_outputs, joined
from .session import ModelSource, Preprocess
from .text.columns import TextOptions
from .util.errors import SourceError


class Predictor:
    """A callable class for ``Dataset.map_batches`` (NOTE [ Ray actors ]).

    ``input_columns`` maps each model input to a column or to columns stacked in
    order (by default the plan ``ortpipe run`` makes: NOTE [ the table plan ]); the
    batch returned holds the ``keep_columns`` and one column per output (a vector
    a row as a fixed-size list, or a 2-D array in numpy batches).  ``image_column``: a column of pictures (Ray's
    ``read_images``, numpy batches) that is the model's one input, made the
    model's on the device by ``preprocess`` (``Preprocess(scale=1/255,
    layout="nhwc")``: uint8 HWC to float NCHW).  ``batch_size``: the rows of the
    pipeline's own batches (None: picked for the bytes of a row,
    NOTE [ picked batch size ]); ``options`` are :class:`~pipeline.PipelineOptions` fields.
    ``text``: a column of texts and how they are scored (:class:`TextOptions`; ``model`` is then a
    model folder, docs/text.md): the batch's texts tokenized, sorted by length and cut under a token
    budget, the pooled vector a row (``embedding``) put back in the batch's order."""

    def __init__(
        self,
        model: ModelSource,
        *,
        device: str = "auto",
        depth: int = 3,
        batch_size: int | None = None,
        input_columns: Mapping[str, str | Sequence[str]] | None = None,
        keep_columns: Sequence[str] = (),
        outputs: Sequence[str] | None = None,
        id_column: str | None = None,
        image_column: str | None = None,
        preprocess: Preprocess | str | None = None,
        text: TextOptions | None = None,
        **options: Any,
    ) -> None:
        from .frontends.pipeline import Pipeline, PipelineOptions

        options.setdefault("cast_inputs", True)
        encoder = None
        if text is not None:
            model, encoder = text.model(model)
        self.pipeline = Pipeline(
            model,
            device=device,
            depth=depth,
            outputs=outputs,
            preprocess=preprocess,
            options=PipelineOptions(**options),
        )
        self._batch_size = batch_size
        features = () if text is not None else self.pipeline.source_inputs  # text: the tokens are TextColumns'
        scorer = ArrowScorer(features, input_columns, keep_columns, id_column, image_column)
        self._scorer = scorer
        self._text = None if text is None or encoder is None else text.columns(encoder, self.pipeline)
        self._warming = asyncio.Lock()
        self._warm = False

    async def __call__(self, batch: Any) -> Any:
        try:
            if self._text is not None:
                outputs = await self._text_outputs(batch)
            else:
                outputs = await self._outputs(self._scorer.features(batch))
            return self._scorer.table(batch, outputs, self.pipeline.class_labels)
        except BaseException as exc:
            self._end_if_lost(exc)
            raise

    async def _outputs(self, features: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if not len(next(iter(features.values()))):
            return await asyncio.to_thread(empty_outputs, self.pipeline, features)
        chunks = chunked(features, self.pipeline, self._batch_size)
        await self._warmed(chunks[0])
        futures = [asyncio.wrap_future(await self._submitted(chunk)) for chunk in chunks]
        return joined(await asyncio.gather(*futures), chunks)

    async def _text_outputs(self, batch: Any) -> dict[str, np.ndarray]:
        """The batch's texts as token batches (NOTE [ token batches ]), their outputs in the batch's order."""
        assert self._text is not None
        places, chunks = self._text.batches(batch)
        if not chunks:
            return {}
        await self._warmed(chunks[0])
        futures = [asyncio.wrap_future(await self._submitted(chunk)) for chunk in chunks]
        rows = sum(len(where) for where in places)
        return self._text.placed(await asyncio.gather(*futures), places, rows)

    async def _warmed(self, chunk: dict[str, np.ndarray]) -> None:
        """The first batch's warm-up (cuDNN's search, ORT's arena), once; the others wait for it."""
        async with self._warming:
            if not self._warm:
                await asyncio.to_thread(self.pipeline.warm_up, chunk, 1)
                self._warm = True

    async def _submitted(self, chunk: dict[str, np.ndarray]) -> Any:
        """``chunk`` handed in: at once where there is room, else waiting off the event loop."""
        try:
            return self.pipeline.submit(chunk, timeout=0)
        except TimeoutError:
            return await asyncio.to_thread(self.pipeline.submit, chunk)

    def close(self) -> None:
        """The pipeline closed (an actor's ends with its process; a caller of its own closes it)."""
        self.pipeline.close()

    def _end_if_lost(self, error: BaseException) -> None:
        """See NOTE [ Ray actors ]: a device this process can no longer use ends the process."""
        if self.pipeline.device.context_lost(error):
            print(
                f"ortpipe: the device is lost to this process ({error}); ending it for Ray to restart", file=sys.stderr
            )
            sys.stderr.flush()
            os._exit(70)  # EX_SOFTWARE: Ray restarts the actor and retries its tasks


def predict(
    dataset: Any,
    model: ModelSource,
    *,
    workers: int = 1,
    gpus_per_worker: float = 0,
    cpus_per_worker: float | None = None,
    batch_size: int | None = None,
    batch_format: str = "pyarrow",
    input_columns: Mapping[str, str | Sequence[str]] | None = None,
    keep_columns: Sequence[str] = (),
    id_column: str | None = None,
    image_column: str | None = None,
    **predictor_kwargs: Any,
) -> Any:
    """``dataset.map_batches`` with a :class:`Predictor` on a pool of ``workers`` actors,
    each with ``gpus_per_worker`` GPUs (device "cuda") or ``cpus_per_worker`` CPUs (its
    ORT threads; None: a share of the cluster's CPUs that leaves one for Ray's reading
    tasks, at most 1 each - actors that took every CPU would leave the reads none), in
    Ray batches of ``batch_size`` rows (None: picked for a row's bytes as the pipeline
    picks its own).  The columns are checked against the data set's schema first: a
    bad name fails here, with ortpipe's message, not in an actor.  ``image_column``:
    a column of pictures that is the model's one input (see :class:`Predictor`; the
    batches are numpy's then)."""
    import ray
    import ray.data

    from ._engine import picked_batch_size
    from .session import declared_inputs

    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    schema = dataset.schema()
    text = predictor_kwargs.get("text")
    specs = () if text is not None else declared_inputs(model)
    scorer = ArrowScorer(specs, input_columns, keep_columns, id_column)
    if text is not None:  # a Ray batch of texts, cut by tokens in the actor (NOTE [ token batches ])
        names = [] if schema is None else list(schema.names)
        absent = [
            c for c in (text.column, text.pair_column, *keep_columns) if c is not None and names and c not in names
        ]
        if absent:
            raise SourceError(f"columns {absent} are not in the data set: columns {names}")
        row_nbytes = 0
    elif image_column is not None:
        batch_format = "numpy"
        row_nbytes = _picture_nbytes(specs, schema, image_column)
    elif schema is not None:
        columns = scorer.columns(_arrow_schema(schema), "the data set")
        row_nbytes = sum(_row_nbytes(spec, len(columns[spec.name])) for spec in specs)
    else:
        row_nbytes = 0
    if batch_size is None:
        batch_size = picked_batch_size(row_nbytes, (32 << 20) if gpus_per_worker else (2 << 20)) if row_nbytes else 4096
    batch_size = batch_size if text is None else min(batch_size, 4096)  # a window of texts sorted together
    kwargs: dict[str, Any] = {
        "input_columns": input_columns,
        "keep_columns": list(keep_columns),
        "id_column": id_column,
        "image_column": image_column,
    }
    kwargs.update(predictor_kwargs)
    kwargs.setdefault("device", "cuda" if gpus_per_worker else "cpu")
    if cpus_per_worker is None:
        cpus = float(ray.cluster_resources().get("CPU", 1.0))
        cpus_per_worker = max(0.25, min(1.0, (cpus - 1) / workers))
    if not gpus_per_worker:
        kwargs.setdefault("intra_op_threads", max(1, int(cpus_per_worker)))
    resources = {"num_gpus": gpus_per_worker} if gpus_per_worker else {"num_cpus": cpus_per_worker}
    return dataset.map_batches(
        Predictor,
        fn_constructor_args=(model,),
        fn_constructor_kwargs=kwargs,
        batch_size=batch_size,
        compute=ray.data.ActorPoolStrategy(size=workers),
        batch_format=batch_format,
        **resources,
    )


def _picture_nbytes(specs: Sequence[Any], schema: Any, image_column: str) -> int:
    """The bytes of one picture of ``image_column`` (uint8): from the data set's schema, else the
    model's fixed dims; 0 where neither tells."""
    if schema is not None and image_column not in schema.names:
        raise SourceError(f"the image column {image_column!r} is not in the data set: columns {schema.names}")
    kind = None if schema is None else schema.types[schema.names.index(image_column)]
    shape = getattr(kind, "shape", None)
    if shape and all(isinstance(dim, int) for dim in shape):
        return int(np.prod(shape))
    fixed = [dim for dim in specs[0].shape[1:] if isinstance(dim, int)] if len(specs) == 1 else []
    return int(np.prod(fixed)) if fixed and len(fixed) == specs[0].rank - 1 else 0


def _arrow_schema(schema: Any) -> Any:
    """Ray's ``Dataset.schema()`` as a pyarrow schema."""
    import pyarrow as pa

    base = getattr(schema, "base_schema", schema)
    if isinstance(base, pa.Schema):
        return base
    return pa.schema(list(zip(schema.names, schema.types, strict=True)))


def _row_nbytes(spec: Any, columns: int) -> int:
    """The bytes of one row of an input: its fixed dims, else one value a column."""
    fixed = [dim for dim in spec.shape[1:] if isinstance(dim, int)]
    values = int(np.prod(fixed)) if len(fixed) == spec.rank - 1 else columns
    return int(values * spec.dtype.itemsize)
