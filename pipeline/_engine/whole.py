"""``Pipeline.run`` on the direct path: whole arrays sliced into batches, each through ``session.run``.

NOTE [ whole arrays run direct ]: ``run()`` on the direct path
(NOTE [ direct path ]) needs none of what a map's run holds.  Its arrays are
checked once, as a whole, so a batch is a slice that needs no check of its
own; there is no source to ask, nothing to copy in or out, and no result to
hand over before the end.  So it is a run of its own, :class:`WholeRun`, made
at each call from what the session already holds: a map's
:class:`~pipeline._engine.DirectRun` (its copier, its steady lane's state, its
advisor) cost more to make and to close than a batch of a few rows costs to
run, and a server that answers each request with a ``run()`` paid that a call
(docs/results.md).  ORT's outputs are joined once at the end, as a loop over
``session.run`` would join them; a run of one batch returns ORT's arrays as
they are.  For a model that pads no batch (a fixed batch dim or static shapes
take the map's way, which pads).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np

from ..session import OrtSession
from ..util.errors import PipelineClosedError, PipelineInputError
from .direct import RECORD_EVERY, TimingSink, as_host_arrays, unreadable_in_place
from .records import CLOSED_MID_RUN, BatchTiming, compute_failed
from .steady_timings import direct_timing


class WholeRun:
    """One ``Pipeline.run`` of checked arrays on the direct path; :meth:`close` (from any
    thread) stops it before its next batch."""

    def __init__(self, session: OrtSession, stats: TimingSink) -> None:
        self._session = session
        self._stats = stats
        self._closed = False
        origin = stats.device_origin
        if origin is None:  # the stats' device time 0: this run's start
            origin = stats.device_origin = time.perf_counter()
        self._origin = origin

    def run(self, arrays: dict[str, np.ndarray], batch_size: int) -> dict[str, np.ndarray]:
        """``arrays`` (checked: names, dtypes, fixed dims, rows alike) in batches of
        ``batch_size`` rows; every output's batches joined."""
        raw: list[BatchTiming] = []
        try:
            return self._run(arrays, batch_size, raw)
        finally:  # the batches that ran are in the stats, a failure's too
            if raw:
                self._stats.add_many(raw)

    def _run(self, arrays: dict[str, np.ndarray], batch_size: int, raw: list[BatchTiming]) -> dict[str, np.ndarray]:
        names = self._session.output_names
        if unreadable_in_place(arrays):  # made readable once, not a batch at a time
            arrays = as_host_arrays(arrays, 0)
        total = next(iter(arrays.values())).shape[0]
        if total <= batch_size:  # one batch: the arrays themselves, ORT's outputs as they come
            return dict(zip(names, self._batch(0, arrays, total, batch_size, names, raw), strict=True))
        kept: list[list[np.ndarray]] = [[] for _ in names]
        for index, start in enumerate(range(0, total, batch_size)):
            feeds = {name: array[start : start + batch_size] for name, array in arrays.items()}
            values = self._batch(index, feeds, min(batch_size, total - start), batch_size, names, raw)
            for value, parts in zip(values, kept, strict=True):
                parts.append(value)
            if len(raw) >= RECORD_EVERY:
                self._stats.add_many(raw)  # its lists take the timings, not this list
                raw.clear()
        return joined_rows(dict(zip(names, kept, strict=True)))

    def _batch(
        self,
        index: int,
        feeds: dict[str, np.ndarray],
        rows: int,
        batch_size: int,
        names: list[str],
        raw: list[BatchTiming],
    ) -> list[np.ndarray]:
        """One batch through ``session.run``: its outputs, each checked to have a row per
        input row (``names``: the session's outputs), and its timing added to ``raw``."""
        if self._closed:
            raise PipelineClosedError(CLOSED_MID_RUN)
        session = self._session
        t_ask = time.perf_counter()
        if session.constants:
            feeds = {**feeds, **session.constants}
        try:
            values: list[np.ndarray] = session.unchecked_run(names, feeds, session.plain_run_options)
        except Exception as exc:
            raise compute_failed(index, exc, rows, batch_size) from exc
        t_ran = time.perf_counter()
        for name, value in zip(names, values, strict=True):
            if value.ndim == 0 or value.shape[0] != rows:
                raise not_per_row(name, index, [rows, "..."], value)
        raw.append(direct_timing(index, rows, t_ask, t_ask, t_ask, t_ran, time.perf_counter(), self._origin))
        return values

    def close(self) -> None:
        """Stop before the next batch; safe to call twice, and from another thread."""
        self._closed = True


def joined_rows(parts: Mapping[str, list[np.ndarray]]) -> dict[str, np.ndarray]:
    """Each output's batches joined along their rows; an output whose rows change shape
    from batch to batch (a shape that depends on the batch, not only its rows) refused."""
    for name, values in parts.items():
        first = values[0].shape[1:]
        for index, value in enumerate(values):
            if value.shape[1:] != first:
                raise not_per_row(name, index, [value.shape[0], *first], value)
    # one batch's outputs are ORT's own new arrays: joined by nothing, not copied
    return {name: values[0] if len(values) == 1 else np.concatenate(values) for name, values in parts.items()}


def not_per_row(name: str, index: int, expected: list[object], value: np.ndarray) -> PipelineInputError:
    """``run()``'s refusal of an output that has no row per input row to join along."""
    return PipelineInputError(
        f"output {name!r} has no batch dim to concatenate along: run() joins outputs of one row per input "
        "row, and this one's shape is not that (it may depend on the data); use map() for this model",
        batch_index=index,
        expected=str(expected).replace("'", ""),
        got=list(value.shape),
    )
