"""JSON Lines outputs: a file, and a stream."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..util.errors import SinkError
from ._base import DataDependent, after_last_line, as_list_columns
from ._json_text import infinities, json_lines
from ._table import Storage, StreamStorage, TableSink


class _JsonLines:
    """JSON Lines written batch by batch: an object a row, the outputs of several values a
    row as lists (:class:`JsonLinesSink`), to a file (``path``) or an open ``stream``,
    flushed after each batch, the text made a column at a time (:mod:`._json_text`:
    a float32 as float32's shortest text; NaN, which JSON lacks, as ``null``, and
    infinities as ``Infinity`` and ``-Infinity``, counted and said once: :meth:`notes`)."""

    def __init__(self, path: Path | None = None, stream: BinaryIO | None = None) -> None:
        self.path, self._stream = path, stream
        self._file: BinaryIO | None = None
        #: the whole lines an earlier run left, kept when resuming (NOTE [ resuming ])
        self._kept = 0
        #: values written as Infinity or -Infinity
        self.infinities = 0

    def resume(self) -> int:
        """The whole lines of the file an earlier run left (0 when there is none), to be kept;
        a line a kill cut short is cut off."""
        if self.path is None:
            raise SinkError("a stream keeps nothing of an earlier run: --resume needs an output file")
        if not self.path.exists():
            return 0
        with self.path.open("r+b") as file:
            file.truncate(after_last_line(file))
            file.seek(0)
            self._kept = sum(1 for _ in file)
        return self._kept

    def last_row(self) -> dict[str, Any] | None:
        """The last line of the earlier run's file, as read back (None when it has none)."""
        if not self._kept or self.path is None:
            return None
        with self.path.open("rb") as file:
            end = file.seek(0, 2)
            file.seek(after_last_line(file, end - 1))
            return json.loads(file.read())  # type: ignore[no-any-return]

    def columns(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        """Those of the columns ``names`` the earlier run's lines have, whole."""
        if not self._kept or self.path is None:
            return {}
        with self.path.open("rb") as file:
            rows = [json.loads(line) for line in file]
        return {name: np.asarray([row[name] for row in rows]) for name in names if name in rows[0]}

    def write(self, batch: Any) -> None:
        if self._file is None:
            self._file = self._stream if self._stream is not None else self._open()
        self._file.write(json_lines(batch))
        self._file.flush()  # a line a row for whatever reads it now
        self.infinities += infinities(batch)

    def notes(self) -> list[str]:
        if not self.infinities:
            return []
        return [
            f"{self.infinities:,} value(s) were +inf or -inf: written to JSON Lines as Infinity and -Infinity, "
            "as Python's json, pandas and pyarrow read them (a strict JSON parser refuses them; NaN is null)"
        ]

    def _open(self) -> BinaryIO:
        assert self.path is not None
        return self.path.open("ab" if self._kept else "wb")

    def close(self) -> None:
        if self._file is not None and self._file is not self._stream:
            self._file.close()
        self._file = None


class JsonLinesSink(TableSink):
    """JSON Lines (``.jsonl``): an object a row, the metadata (row id, or frame index and
    timestamp, or path) then the outputs, an output of several values a row as a list;
    written batch by batch, resumable as a CSV is (a line a row).  Outputs written per
    batch go to ``<stem>.<output>.jsonl`` beside it."""

    def __init__(self, path: str | Path, data_dependent: DataDependent = (), resume: bool = False) -> None:
        super().__init__(path, Storage(_JsonLines, ".jsonl"), as_list_columns, data_dependent, resume)


class JsonLinesStreamSink(TableSink):
    """:class:`JsonLinesSink`'s lines written to a stream as they come (``ortpipe run
    --output - --output-format jsonl``; see :class:`StreamStorage`)."""

    def __init__(self, stream: BinaryIO | None = None, data_dependent: DataDependent = ()) -> None:
        opened = StreamStorage(lambda stream: _JsonLines(stream=stream), stream, ".jsonl")
        super().__init__("-", opened, as_list_columns, data_dependent)
