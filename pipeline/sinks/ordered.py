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

from ..util.arrow import concatenated
from ..util.errors import SinkError
from ._handing_on import HandingOn


class InputOrderSink(HandingOn):
    """Hands ``sink`` the rows in the order ``position`` (a metadata column) says."""

    def __init__(self, sink: object, position: str) -> None:
        super().__init__(sink)
        self.position = position
        self._next = 0  # the place of the next row to hand on
        #: rows that came before a row ahead of them, as one part: their places, outputs, metadata
        self._held: tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]] | None = None
        self._index = 0

    @property
    def held_rows(self) -> int:
        """Rows that came before a row ahead of them: held until it comes."""
        return 0 if self._held is None else len(self._held[0])

    def write(self, index: int, rows: int, outputs: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> None:
        places = np.asarray(meta[self.position], np.int64)
        rest = {name: values for name, values in meta.items() if name != self.position}
        for name, values in outputs.items():
            if values.ndim == 0 or values.shape[0] != rows:
                raise SinkError(
                    f"output {name!r} has no row each ({list(values.shape)} for {rows} rows): rows run out of "
                    "input order cannot be put back in it"
                )
        in_order = len(places) and places[0] == self._next and (np.diff(places) == 1).all()
        if self._held is None and in_order:
            self._hand_on(rows, outputs, rest)  # already in order: as it came
            return
        # copies: ``outputs`` are views of a pinned slot, valid during this call only (sinks' NOTE)
        part = (places, {n: v.copy() for n, v in outputs.items()}, {n: v.copy() for n, v in rest.items()})
        self._held = part if self._held is None else _joined(self._held, part)
        self._release()

    def _release(self) -> None:
        """The held rows that are next in order, handed on as one batch; the others kept."""
        assert self._held is not None
        places, outputs, meta = self._held
        order = np.argsort(places, kind="stable")
        ahead = places[order] != np.arange(self._next, self._next + len(places))
        run = int(np.argmax(ahead)) if ahead.any() else len(places)
        if run == 0:
            return
        taken, kept = order[:run], order[run:]
        self._hand_on(run, {n: v[taken] for n, v in outputs.items()}, {n: v[taken] for n, v in meta.items()})
        held = (places[kept], {n: v[kept] for n, v in outputs.items()}, {n: v[kept] for n, v in meta.items()})
        self._held = held if len(kept) else None

    def _hand_on(self, rows: int, outputs: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> None:
        self._sink.write(self._index, rows, outputs, meta)
        self._index += 1
        self._next += rows


Part = tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]


def _joined(held: Part, part: Part) -> Part:
    """Two parts of held rows as one."""
    return (
        np.concatenate([held[0], part[0]]),
        {name: np.concatenate([values, part[1][name]]) for name, values in held[1].items()},
        {name: concatenated([values, part[2][name]]) for name, values in held[2].items()},
    )
