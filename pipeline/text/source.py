"""A table's text column as batches of token ids (NOTE [ token batches ]).

:class:`TextSource` reads a Parquet file or data set, a CSV or a JSON Lines file through
pyarrow's datasets, a window of :data:`~.batching.SORT_WINDOW` rows at a time; tokenizes each
window (``tokens``) and cuts it into batches under the token budget (``batching``).  Each
batch feeds the model's ``input_ids``, ``attention_mask`` and, where the model has one,
``token_type_ids`` by name, in the model's dtypes, and each row carries its id (the
``id_column``'s value, else ``row_id``'s or the one column named like an id, as any table
finds it; else its row number) and its place in the input
(:data:`POSITION`), by which ``sinks.ordered`` puts the outputs back in input order.

Rows are the table's: a window of them (``between``: resumes, ``--rows``, shards) is read by
leaving out the rows before it, and sorted within itself.  A null text is refused, naming
its row; an empty text is scored as the tokenizer makes it (its special tokens alone).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..session import TensorSpec
from ..sources import SourceBatch
from ..sources.stored_tables import open_dataset
from ..sources.table_plan import rows_id
from ..util.arrow import exact_values
from ..util.errors import SourceError
from ..util.storage import is_storage_url
from .batching import SORT_WINDOW, token_batches
from .tokens import TEXT_INPUTS, TextEncoder, rows_of

#: the metadata that carries each row's place in the input: taken off before the rows are written
POSITION = "__position"
#: the token budget of a batch where none is given: a CPU's (small batches stay in its caches; the
#: measurement that chose it is in docs/results.md), and a GPU's
DEFAULT_MAX_TOKENS = {"host": 1024, "cuda": 65536}


@dataclass
class TokenCounts:
    """The tokens a run's batches held: real, padded (the padding's waste), and texts cut short."""

    real: int = 0
    padded: int = 0
    truncated: int = 0


class TextSource:
    """The texts of a table's ``column`` (and ``pair_column``'s, for a cross-encoder), tokenized
    and batched by tokens for a model whose inputs are ``inputs``."""

    kind = "text"

    def __init__(
        self,
        path: str | Path,
        column: str,
        encoder: TextEncoder,
        inputs: Sequence[TensorSpec],
        max_tokens: int,
        *,
        pair_column: str | None = None,
        id_column: str | None = None,
        keep_columns: Sequence[str] = (),
        start: int = 0,
        stop: int | None = None,
        counts: TokenCounts | None = None,
    ) -> None:
        #: a local path, or a storage URL (``util.storage``)
        self.path: Path | str = path if is_storage_url(path) else Path(path)
        self.column, self.pair_column, self.encoder = column, pair_column, encoder
        self.inputs = text_inputs(inputs)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise SourceError(f"the token budget of a batch must be an int >= 1, got {max_tokens!r}")
        self.max_tokens = max_tokens
        self._dataset = open_dataset(str(self.path))
        names = self._dataset.schema.names
        for name, what in (
            (column, "text"),
            (pair_column, "pair"),
            (id_column, "id"),
            *((k, "kept") for k in keep_columns),
        ):
            if name is not None and name not in names:
                raise SourceError(f"{what} column {name!r} is not in {str(self.path)!r}: columns {names}")
        # the id as any table finds it (NOTE [ the table plan ]): named, row_id, or the one named like an id
        texts = {column} | ({pair_column} if pair_column is not None else set())
        self.id_column = rows_id(names, id_column, texts, keep_columns, str(self.path))[0]
        #: columns written through beside the outputs, unchanged (NOTE [ the table plan ])
        self.keep = tuple(k for k in dict.fromkeys(keep_columns) if k != self.id_column)
        self.start, self.stop = start, stop
        #: the tokens its batches held, shared with its windows (:meth:`between`): what :meth:`notes` says
        self.counts = counts if counts is not None else TokenCounts()

    def __len__(self) -> int:
        total = self._dataset.count_rows()
        stop = total if self.stop is None else min(self.stop, total)
        return max(0, stop - self.start)

    def describe(self) -> str:
        pair = f" and {self.pair_column!r}" if self.pair_column else ""
        return f"texts of column {self.column!r}{pair}, tokenized by {self.encoder.path.name}, of"

    def between(self, start: int, stop: int | None) -> TextSource:
        """Rows ``start`` to ``stop - 1`` of this source (counted from its own first row)."""
        first = self.start + start
        last = None if stop is None else self.start + stop
        if self.stop is not None:
            last = self.stop if last is None else min(last, self.stop)
        return TextSource(
            self.path, self.column, self.encoder, self.inputs, self.max_tokens,
            pair_column=self.pair_column, id_column=self.id_column, keep_columns=self.keep, start=first, stop=last,
            counts=self.counts,
        )  # fmt: skip

    def notes(self) -> list[str]:
        """What the run says of its tokens: the real ones over the padded ones, and the texts cut short."""
        counts = self.counts
        if not counts.padded:
            return []
        said = [
            f"tokens: {counts.real:,} real of {counts.padded:,} padded ({counts.real / counts.padded:.0%}; "
            f"batches of at most {self.max_tokens:,} tokens, each padded to its longest text)"
        ]
        if counts.truncated:
            said.append(f"{counts.truncated:,} text(s) cut to {self.encoder.max_length} tokens")
        return said

    def __iter__(self) -> Iterator[SourceBatch]:
        for texts, pairs, meta, positions in self._windows():
            encodings = self.encoder.encode(texts, pairs)
            self.counts.truncated += sum(1 for e in encodings if e.overflowing)
            for batch in token_batches(rows_of(encodings), positions, self.max_tokens, self.encoder.pad_id):
                self.counts.real += batch.real_tokens
                self.counts.padded += batch.padded_tokens
                order = np.searchsorted(positions, batch.positions)
                rows = {name: values[order] for name, values in meta.items()}
                yield SourceBatch(batch.feeds(self.inputs), {**rows, POSITION: batch.positions})

    @property
    def _id_name(self) -> str:
        return self.id_column or "row_id"

    def _windows(self) -> Iterator[tuple[list[str], list[str] | None, dict[str, np.ndarray], np.ndarray]]:
        """The table's rows from ``start`` to ``stop``, a window at a time: texts, pairs, the
        rows' ids and kept columns (exactly: ``util.arrow.exact_values``), places."""
        carried = [c for c in (self.pair_column, self.id_column, *self.keep) if c is not None]
        columns = [self.column, *dict.fromkeys(c for c in carried if c != self.column)]
        row = 0
        for record in self._dataset.to_batches(columns=columns, batch_size=SORT_WINDOW):
            first, row = row, row + record.num_rows
            if row <= self.start:
                continue
            if self.stop is not None and first >= self.stop:
                return
            lo = max(0, self.start - first)
            hi = record.num_rows if self.stop is None else min(record.num_rows, self.stop - first)
            part = record.slice(lo, hi - lo)
            positions = np.arange(first + lo, first + hi, dtype=np.int64) - self.start
            texts = self._texts(part, self.column, first + lo)
            pairs = None if self.pair_column is None else self._texts(part, self.pair_column, first + lo)
            ids = positions + self.start if self.id_column is None else exact_values(part.column(self.id_column))
            meta = {self._id_name: ids, **{k: exact_values(part.column(k)) for k in self.keep}}
            yield texts, pairs, meta, positions

    def _texts(self, part: Any, column: str, first: int) -> list[str]:
        values = part.column(column)
        if values.null_count:
            row = first + next(i for i, valid in enumerate(values.is_valid().to_pylist()) if not valid)
            raise SourceError(
                f"{str(self.path)!r}: row {row} of text column {column!r} is null: fill or drop the empty rows "
                "first (an empty string is scored as an empty text)"
            )
        texts = values.to_pylist()
        if texts and not isinstance(texts[0], str):
            raise SourceError(
                f"{str(self.path)!r}: column {column!r} holds {values.type}, not text: --text-column names a column "
                "of strings"
            )
        return texts  # type: ignore[no-any-return]


def text_inputs(inputs: Sequence[TensorSpec]) -> tuple[TensorSpec, ...]:
    """The model's inputs, each one a text feeds (``input_ids``, ``attention_mask``, ``token_type_ids``)."""
    names = [spec.name for spec in inputs]
    other = [name for name in names if name not in TEXT_INPUTS]
    missing = [name for name in ("input_ids", "attention_mask") if name not in names]
    if other or missing:
        raise SourceError(
            f"a text feeds the inputs {list(TEXT_INPUTS[:2])} (and {TEXT_INPUTS[2]!r} where the model has it); "
            f"this model's are {names}" + (f": {other} cannot be made from text" if other else "")
        )
    return tuple(inputs)
