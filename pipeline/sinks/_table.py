"""The table sinks' one base, and the storage each holds.

A table sink writes one table of the metadata columns and the per-row
outputs, and one table beside it for each per-batch output
(NOTE [ per-batch outputs ]).  What differs between the formats is how a table is written (a
CSV file, JSON Lines, Parquet row groups: the ``open_table`` a storage is
given) and how several values a row become columns (``several``); what
differs between the kinds of output is where the tables go and what that
means for resuming and closing - one file a table, a stream, a data set's
parts, a journal's - which is a :class:`Storage` the sink holds, not a class
it inherits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..util.capabilities import notes
from ..util.closing import close_all
from ..util.errors import SinkError
from ._base import (
    PER_BATCH_RESUME,
    DataDependent,
    OutputKinds,
    Several,
    beside_path,
    check_items,
    check_rows,
    flat_values,
    to_record_batch,
    writable,
)

#: a table of the storage's format opened at a path (a file, a journal's or data set's folder)
OpenTable = Callable[[Path], Any]


class Storage:
    """One file a table (a CSV, a JSON Lines file): written over unless resumed, and
    nothing to do at the end but close.  Other storages change what differs."""

    def __init__(self, open_table: OpenTable, suffix: str) -> None:
        self.open_table = open_table
        #: the suffix of the main table's name, kept by the tables beside it
        self.suffix = suffix

    def checked(self, path: Path) -> Path:
        """``path`` after checking that it can be written."""
        return writable(path)

    def open(self, path: Path) -> Any:
        return self.open_table(path)

    def existing(self, path: Path) -> list[Path]:
        """What an earlier run left at ``path`` that writing would replace."""
        return [path] if path.is_file() and path.stat().st_size else []

    def allow_sides(self, names: list[str]) -> None:
        """Refuse per-batch outputs where the storage cannot hold a table beside the main one."""

    def side_written(self, path: Path) -> bool:
        """An earlier run wrote the per-batch output's table ``path``."""
        return path.exists()

    def resume_side(self, side: Any, main: Any, path: Path) -> None:
        """Keep the rows of a per-batch output's table that the main table's kept rows go with."""
        raise SinkError(PER_BATCH_RESUME.format(path=str(path), kind=f"a {self.suffix} table"))

    def restart_side(self, side: Any) -> None:
        """A resumed run that kept no rows: a per-batch output's table starts anew (a file is written over)."""

    def written(self, main: Any, sides: Sequence[Any]) -> None:
        """After each batch's tables were written."""

    def complete(self, main: Any, sides: Sequence[Any]) -> None:
        """The job wrote every row (``mark_complete``)."""

    def close(self, main: Any, sides: Sequence[Any], path: Path) -> None:
        close_all([*sides, main])  # the sides first, as each batch is written


class StreamStorage(Storage):
    """A table written to an open binary ``stream`` (default: standard output's bytes) as it
    comes, each batch flushed (``ortpipe run --output -``), for a program that reads the
    rows from a pipe.  There is no file: nothing to resume or to refuse replacing, and no
    outputs written per batch (they need a table of their own beside the main one: write
    them to a file, or leave them out with ``--output-names``)."""

    def __init__(self, open_stream: Callable[[BinaryIO], Any], stream: BinaryIO | None, suffix: str) -> None:
        import sys

        self.stream = stream if stream is not None else sys.stdout.buffer
        super().__init__(lambda path: open_stream(self.stream), suffix)

    def checked(self, path: Path) -> Path:
        return path  # no file to check

    def existing(self, path: Path) -> list[Path]:
        return []

    def allow_sides(self, names: list[str]) -> None:
        raise SinkError(
            f"output(s) {names} have a count of their own each batch (data-dependent), which a table beside the "
            "main one holds; a stream has no beside: write to a file, or leave them out with --output-names"
        )


class TableSink:
    """One table of the metadata columns and the per-row outputs, and one table
    beside it for each per-batch output (NOTE [ per-batch outputs ]):
    ``<stem>.<output><suffix>``, a ``batch`` column then the output's items.
    The main table gets the ``batch`` column too when there are such outputs
    (``ortpipe_batch`` when the metadata has a ``batch`` already).  Its tables go
    where ``storage`` puts them; ``several`` makes an output of several values a
    row into columns."""

    def __init__(
        self,
        path: str | Path,
        storage: Storage,
        several: Several,
        data_dependent: DataDependent = (),
        resume: bool = False,
    ) -> None:
        self._storage, self._several = storage, several
        self.path = storage.checked(Path(path))
        #: the table of each per-batch output, once the first batch has told which they are
        self.side_paths: dict[str, Path] = {}
        self._kinds = OutputKinds(data_dependent)
        self._main = storage.open(self.path)
        #: rows an earlier run left in the table, kept (NOTE [ resuming ])
        self.kept_rows = self._main.resume() if resume else 0
        self._resume = resume
        self._sides: dict[str, Any] = {}
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._batch_column = "batch"
        #: the batches of the run being resumed: this run's are numbered after them
        self._batches_before = 0

    def existing_outputs(self) -> list[Path]:
        """What an earlier run left that writing would replace: the table (a file's journal too)."""
        return self._storage.existing(self.path)

    def last_kept_row(self) -> dict[str, Any] | None:
        """The last of the rows kept from an earlier run, column by column (a CSV's as
        text), for ``jobs.resumed`` to hold the input's row against; None when none was kept."""
        return self._main.last_row() if self.kept_rows else None  # type: ignore[no-any-return]

    def kept_columns(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        """Those of the columns ``names`` the rows kept from an earlier run have, whole (a
        CSV's as text): what a resumed folder of videos holds the input against when it
        cannot count (NOTE [ frame positions ])."""
        return self._main.columns(names) if self.kept_rows else {}  # type: ignore[no-any-return]

    def write(self, index: int, rows: int, outputs: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> None:
        per_row, per_batch = self._kinds.split(rows, outputs)
        if not self._sides and per_batch:
            self._open_sides(list(per_batch), meta)
        index += self._batches_before
        columns: dict[str, Any] = dict(meta)
        if per_batch:
            columns[self._batch_column] = np.full(rows, index, np.int64)
        main = to_record_batch(columns, self._per_row(index, rows, per_row), self._several)
        sides = {name: self._items(index, name, values) for name, values in per_batch.items()}
        for name, side in sides.items():  # the sides first: the main table is never ahead of them
            self._sides[name].write(side)
        self._main.write(main)
        self._storage.written(self._main, list(self._sides.values()))

    def _per_row(self, index: int, rows: int, outputs: dict[str, np.ndarray]) -> list[tuple[str, np.ndarray, bool]]:
        checked = []
        for name, values in outputs.items():
            self._shapes[name] = check_rows(name, index, rows, values, self._shapes.get(name))
            checked.append((name, *flat_values(values)))
        return checked

    def _items(self, index: int, name: str, values: np.ndarray) -> Any:
        """Batch ``index``'s items of a per-batch output as a record batch of its table."""
        items = check_items(name, index, values, self._shapes.get(name))
        self._shapes[name] = items.shape[1:]
        batch = {self._batch_column: np.full(len(items), index, np.int64)}
        return to_record_batch(batch, [(name, *flat_values(items))], self._several)

    def _open_sides(self, names: list[str], meta: Mapping[str, np.ndarray]) -> None:
        self._storage.allow_sides(names)
        if "batch" in meta:
            self._batch_column = "ortpipe_batch"
        self.side_paths = beside_path(self.path, self.path.suffix or self._storage.suffix, names, self._storage.checked)
        self._sides = {name: self._storage.open(path) for name, path in self.side_paths.items()}
        if self.kept_rows:
            self._resume_sides()
        elif self._resume:  # nothing kept of the main table: nothing of its sides either
            for side in self._sides.values():
                self._storage.restart_side(side)

    def _resume_sides(self) -> None:
        """The per-batch outputs of the run being resumed, kept as far as its main
        table goes (NOTE [ resuming ]); this run's batches numbered after its."""
        last = self.last_kept_row() or {}
        if self._batch_column not in last:
            raise SinkError(
                f"cannot resume {str(self.path)!r}: the earlier run wrote no outputs per batch, this one writes "
                f"{sorted(self._sides)}"
            )
        self._batches_before = int(last[self._batch_column]) + 1
        for path, side in zip(self.side_paths.values(), self._sides.values(), strict=True):
            if not self._storage.side_written(path):
                raise SinkError(f"cannot resume {str(self.path)!r}: its per-batch output {str(path)!r} is missing")
            self._storage.resume_side(side, self._main, self.path)

    @property
    def per_batch_paths(self) -> dict[str, tuple[Path, ...]]:
        """Each output written per batch: (its table,)."""
        return {name: (path,) for name, path in self.side_paths.items()}

    def notes(self) -> list[str]:
        """What the table's files say once about what they hold (JSON Lines' infinities)."""
        return [note for table in (self._main, *self._sides.values()) for note in notes(table)]

    def close(self) -> None:
        self._storage.close(self._main, list(self._sides.values()), self.path)
