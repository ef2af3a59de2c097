"""Batches by tokens, not rows.

NOTE [ token batches ]: a corpus's texts differ in length tenfold and more; batches of a fixed number of rows padded
to their longest would spend most of the model's work on padding.  As sentence-transformers'
``encode`` does, the rows of a window (:data:`SORT_WINDOW` of them) are sorted by length, and,
as Hugging Face's text-embeddings-inference does, cut into batches under a token budget: a
batch takes rows while its rows times its padded length stay within ``max_tokens``.  Each
batch is padded to its longest row, rounded up to a multiple of :data:`PAD_MULTIPLE`, so that
the number of shapes (cuDNN's searches, the engine's slot sizes) stays small.  Each row keeps
its place in the input: the outputs are put back in input order before they are written
(``sinks.ordered``).  The real tokens and the padded ones are counted: the padding's waste.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..session import TensorSpec

#: rows sorted together: longer windows pad less, and hold more outputs back until written
SORT_WINDOW = 4096
#: a batch's padded length is a multiple of this
PAD_MULTIPLE = 8


@dataclass(frozen=True)
class TokenBatch:
    """One batch: its rows' places in the input, their ids, mask and token types, padded alike."""

    positions: np.ndarray
    ids: np.ndarray
    mask: np.ndarray
    types: np.ndarray

    @property
    def real_tokens(self) -> int:
        return int(self.mask.sum())

    @property
    def padded_tokens(self) -> int:
        return int(self.mask.size)

    def feeds(self, inputs: Sequence[TensorSpec]) -> dict[str, np.ndarray]:
        """The batch as the feeds of the model's text ``inputs`` (by name), each in its dtype."""
        arrays = {"input_ids": self.ids, "attention_mask": self.mask, "token_type_ids": self.types}
        return {spec.name: arrays[spec.name].astype(spec.dtype, copy=False) for spec in inputs}


def padded_length(longest: int, multiple: int = PAD_MULTIPLE) -> int:
    """``longest`` rounded up to a multiple of ``multiple`` (at least one token)."""
    return max(multiple, -(-longest // multiple) * multiple)


def cuts(lengths: Sequence[int], max_tokens: int, multiple: int = PAD_MULTIPLE) -> list[tuple[int, int]]:
    """``(start, stop)`` of each batch over rows sorted by length, shortest first: a batch takes
    rows while its rows times its padded length stay within ``max_tokens`` (a row longer than
    that alone is a batch of its own)."""
    spans, start = [], 0
    for index, length in enumerate(lengths):
        rows = index - start + 1
        if rows > 1 and rows * padded_length(length, multiple) > max_tokens:
            spans.append((start, index))
            start = index
    if start < len(lengths):
        spans.append((start, len(lengths)))
    return spans


def token_batches(
    rows: Sequence[tuple[np.ndarray, np.ndarray]],
    positions: np.ndarray,
    max_tokens: int,
    pad_id: int,
    multiple: int = PAD_MULTIPLE,
) -> list[TokenBatch]:
    """One window's rows (ids and token types each) sorted by length and cut under ``max_tokens``;
    ``positions``: each row's place in the input."""
    lengths = np.fromiter((len(ids) for ids, _ in rows), np.int64, len(rows))
    order = np.argsort(lengths, kind="stable")
    batches = []
    for start, stop in cuts(lengths[order].tolist(), max_tokens, multiple):
        taken = order[start:stop]
        width = padded_length(int(lengths[taken].max()), multiple)
        ids = np.full((len(taken), width), pad_id, np.int64)
        mask = np.zeros((len(taken), width), np.int64)
        types = np.zeros((len(taken), width), np.int64)
        for row, source in enumerate(taken):
            token_ids, token_types = rows[source]
            ids[row, : len(token_ids)] = token_ids
            mask[row, : len(token_ids)] = 1
            types[row, : len(token_types)] = token_types
        batches.append(TokenBatch(positions[taken], ids, mask, types))
    return batches
