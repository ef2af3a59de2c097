"""A sink that hands every call on to another: what a wrapper sink builds on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..util.capabilities import (
    Completable,
    HasOutputs,
    KeepsColumns,
    Restarts,
    WritesPerBatch,
    kept_rows,
    last_kept_row,
    notes,
)


class HandingOn:
    """Writes, closes and answers as ``sink`` does.  The capabilities are handed on
    member by member: protocols are checked on the class, and a ``__getattr__`` is
    not seen by ``isinstance`` on Python 3.12 and later."""

    def __init__(self, sink: Any) -> None:
        self._sink = sink

    def write(self, index: int, rows: int, outputs: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> None:
        self._sink.write(index, rows, outputs, meta)

    def close(self) -> None:
        self._sink.close()

    @property
    def kept_rows(self) -> int:
        return kept_rows(self._sink)

    def last_kept_row(self) -> Mapping[str, Any] | None:
        return last_kept_row(self._sink)

    def kept_columns(self, names: Sequence[str]) -> Mapping[str, Any]:
        return self._sink.kept_columns(names) if isinstance(self._sink, KeepsColumns) else {}

    def existing_outputs(self) -> list[Path]:
        return self._sink.existing_outputs() if isinstance(self._sink, HasOutputs) else []

    @property
    def per_batch_paths(self) -> Mapping[str, Any]:
        return self._sink.per_batch_paths if isinstance(self._sink, WritesPerBatch) else {}

    @property
    def restarted(self) -> list[str]:
        return self._sink.restarted if isinstance(self._sink, Restarts) else []

    def notes(self) -> list[str]:
        return notes(self._sink)

    def mark_complete(self) -> None:
        if isinstance(self._sink, Completable):
            self._sink.mark_complete()

    def __getattr__(self, name: str) -> Any:  # anything else the sink has (its path, for messages)
        if name == "_sink":  # not set yet (a copy being made): no sink to ask
            raise AttributeError(name)
        return getattr(self._sink, name)
