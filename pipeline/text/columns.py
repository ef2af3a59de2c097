"""A batch of rows' texts - what Ray Data and Spark hand a worker - as token batches, and their
outputs put back in the rows' order (NOTE [ token batches ] within the one batch of rows)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..session import ModelSource, TensorSpec
from ..util.errors import SourceError
from .batching import token_batches
from .source import text_inputs
from .tokens import TextEncoder, rows_of


class TextColumns:
    """``column`` (and ``pair_column``) of a batch of rows tokenized by ``encoder``, sorted by
    length and cut under ``max_tokens`` into the model's ``inputs``."""

    def __init__(
        self,
        encoder: TextEncoder,
        inputs: Sequence[TensorSpec],
        max_tokens: int,
        column: str,
        pair_column: str | None = None,
    ) -> None:
        self.encoder, self.max_tokens = encoder, max_tokens
        self.inputs = text_inputs(inputs)
        self.column, self.pair_column = column, pair_column

    def batches(self, rows: Any, where: str = "the batch") -> tuple[list[np.ndarray], list[dict[str, np.ndarray]]]:
        """Each token batch's rows (their places in ``rows``) and its feeds; ``rows``: a pyarrow
        table or record batch, or a dict of numpy columns."""
        texts = self._texts(rows, self.column, where)
        pairs = None if self.pair_column is None else self._texts(rows, self.pair_column, where)
        places = np.arange(len(texts), dtype=np.int64)
        made = token_batches(rows_of(self.encoder.encode(texts, pairs)), places, self.max_tokens, self.encoder.pad_id)
        return [batch.positions for batch in made], [batch.feeds(self.inputs) for batch in made]

    @staticmethod
    def placed(outputs: Iterable[Mapping[str, np.ndarray]], places: Sequence[np.ndarray], rows: int) -> dict[str, Any]:
        """The token batches' outputs (as they come) as one array an output, a row each in the rows' order."""
        whole: dict[str, np.ndarray] = {}
        for result, where in zip(outputs, places, strict=True):
            for name, values in result.items():
                if name not in whole:
                    whole[name] = np.empty((rows, *values.shape[1:]), values.dtype)
                whole[name][where] = values
        return whole

    def _texts(self, rows: Any, column: str, where: str) -> list[str]:
        if isinstance(rows, Mapping):
            if column not in rows:
                raise SourceError(f"text column {column!r} is not in {where}: columns {sorted(rows)}")
            values = list(np.asarray(rows[column], dtype=object))
        else:
            if column not in rows.schema.names:
                raise SourceError(f"text column {column!r} is not in {where}: columns {rows.schema.names}")
            values = rows.column(rows.schema.get_field_index(column)).to_pylist()
        for index, value in enumerate(values):
            if not isinstance(value, str):
                raise SourceError(
                    f"row {index} of {where}'s text column {column!r} is {value!r}, not a text: fill or drop it first"
                )
        return values


@dataclass(frozen=True)
class TextOptions:
    """How a column of texts is scored by Ray's :class:`Predictor` and Spark's ``scorer``
    (docs/text.md): the model is a folder of ``model.onnx`` and ``tokenizer.json``."""

    column: str
    pair_column: str | None = None
    tokenizer: str | None = None
    pooling: str | None = None
    normalize: bool | None = None
    max_length: int | None = None
    #: a token batch's rows times its padded length (None: 4,096 on the CPU, 65,536 on a GPU)
    max_batch_tokens: int | None = None

    def model(self, folder: ModelSource) -> tuple[Any, Any]:
        """The folder's model, its pooling appended, and its tokenizer."""
        from . import text_model

        if not isinstance(folder, str | Path):
            raise ValueError(f"a text model is a folder (or a file with its tokenizer), not {type(folder).__name__}")
        return text_model(
            folder, tokenizer=self.tokenizer, pooling=self.pooling, normalize=self.normalize, max_length=self.max_length
        )

    def columns(self, encoder: Any, pipeline: Any) -> Any:
        """The batches' texts as the pipeline's token batches."""
        from .source import DEFAULT_MAX_TOKENS

        budget = self.max_batch_tokens or DEFAULT_MAX_TOKENS.get(pipeline.device.kind, DEFAULT_MAX_TOKENS["host"])
        return TextColumns(encoder, pipeline.source_inputs, budget, self.column, self.pair_column)
