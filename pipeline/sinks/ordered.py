"""Rows written in input order, whatever order their batches ran in.

NOTE [ rows put back in order ]: a source may run its rows in another order than the
input's - the text source sorts a window of rows by length (NOTE [ token batches ]) - and
says each row's place in the input in its metadata (``position``, counted from the run's
first row).  :class:`InputOrderSink` holds the rows that came early and hands ``sink`` the
rows in input order as soon as every row before them has come, without the ``position``
column.  So the output is always a prefix of the input in order - what resuming counts
(NOTE [ resuming ]) - and a kill loses only the rows held back, which a resumed run scores
again.  Only outputs with a row each can be put in order: a per-batch output is refused.
"""

from __future__ import annotations

import numpy as np

from ..util.errors import SinkError
from ._handing_on import HandingOn


class InputOrderSink(HandingOn):
    """Hands ``sink`` the rows in the order ``position`` (a metadata column) says."""

    def __init__(self, sink: object, position: str) -> None:
        super().__init__(sink)
        self.position = position
        self._next = 0  # the place of the next row to hand on
        self._held: dict[int, tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = {}  # place -> one row
        self._index = 0

    @property
    def held_rows(self) -> int:
        """Rows that came before a row ahead of them: held until it comes."""
        return len(self._held)

    def write(self, index: int, rows: int, outputs: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> None:
        places = np.asarray(meta[self.position], np.int64)
        rest = {name: values for name, values in meta.items() if name != self.position}
        for name, values in outputs.items():
            if values.ndim == 0 or values.shape[0] != rows:
                raise SinkError(
                    f"output {name!r} has no row each ({list(values.shape)} for {rows} rows): rows run out of "
                    "input order cannot be put back in it"
                )
        if len(places) and places[0] == self._next and np.array_equal(places, np.arange(self._next, self._next + rows)):
            self._hand_on(rows, outputs, rest)  # already in order: as it came
        else:
            # copies: ``outputs`` are views of a pinned slot, valid during this call only (sinks' NOTE)
            for row, place in enumerate(places.tolist()):
                self._held[place] = (
                    {name: values[row : row + 1].copy() for name, values in outputs.items()},
                    {name: values[row : row + 1].copy() for name, values in rest.items()},
                )
        self._release()

    def _release(self) -> None:
        """The held rows that are next in order, handed on as one batch."""
        taken: list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = []
        while self._next + len(taken) in self._held:
            taken.append(self._held.pop(self._next + len(taken)))
        if not taken:
            return
        outputs = {name: np.concatenate([row[0][name] for row in taken]) for name in taken[0][0]}
        meta = {name: np.concatenate([row[1][name] for row in taken]) for name in taken[0][1]}
        self._hand_on(len(taken), outputs, meta)

    def _hand_on(self, rows: int, outputs: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> None:
        self._sink.write(self._index, rows, outputs, meta)
        self._index += 1
        self._next += rows
