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
they are.  Its full batches run in a loop as lean as the steady lane's
(NOTE [ steady batches ]), each batch's timing its clock reads
(NOTE [ steady timings ]); the short last one, if any, runs on its own.  For a
model that pads no batch (a fixed batch dim or static shapes take the map's
way, which pads).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np

from ..session import OrtSession
from ..util.errors import PipelineClosedError, PipelineInputError
from .direct import STEADY_READS_KEPT, TimingSink, as_host_arrays, unreadable_in_place
from .records import CLOSED_MID_RUN, compute_failed
from .steady_timings import SteadyTimings, direct_timing


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
        names = self._session.output_names
        if unreadable_in_place(arrays):  # made readable once, not a batch at a time
            arrays = as_host_arrays(arrays, 0)
        total = next(iter(arrays.values())).shape[0]
        if total <= batch_size:  # one batch: the arrays themselves, ORT's outputs as they come
            # (zip's strict= is a keyword parsed a call: ORT gives a value a name asked for)
            return dict(zip(names, self._last(0, arrays, total, batch_size, names)))  # noqa: B905
        kept: list[list[np.ndarray]] = [[] for _ in names]
        full = total // batch_size
        self._full_batches(arrays, full, batch_size, names, kept)
        if total > full * batch_size:
            start = full * batch_size
            feeds = {name: array[start:] for name, array in arrays.items()}
            for value, parts in zip(self._last(full, feeds, total - start, batch_size, names), kept, strict=True):
                parts.append(value)
        return joined_rows(dict(zip(names, kept, strict=True)))

    def _full_batches(
        self,
        arrays: dict[str, np.ndarray],
        count: int,
        batch_size: int,
        names: list[str],
        kept: list[list[np.ndarray]],
    ) -> None:
        """The first ``count`` batches, each of ``batch_size`` rows, their outputs added to
        ``kept``: a loop of its own, as lean as the steady lane's (NOTE [ steady batches ]),
        each batch's timing its clock reads (NOTE [ steady timings ])."""
        session, clock = self._session, time.perf_counter
        run, options, constants = session.unchecked_run, session.plain_run_options, session.constants
        inputs, appends = list(arrays.items()), [parts.append for parts in kept]
        first, times = 0, []  # type: int, list[float]
        try:
            for index in range(count):
                if self._closed:
                    raise PipelineClosedError(CLOSED_MID_RUN)
                start = index * batch_size
                t_ask = clock()
                feeds = {name: array[start : start + batch_size] for name, array in inputs}
                if constants:
                    feeds.update(constants)
                try:
                    values = run(names, feeds, options)
                except Exception as exc:
                    raise compute_failed(index, exc, batch_size, batch_size) from exc
                t_ran = clock()
                # zip's strict= is a keyword parsed a call: ORT gives a value a name asked for
                for name, value, append in zip(names, values, appends):  # noqa: B905
                    if value.ndim == 0 or value.shape[0] != batch_size:
                        raise not_per_row(name, index, [batch_size, "..."], value)
                    append(value)
                times += (t_ask, t_ask, t_ran, clock())
                if len(times) >= STEADY_READS_KEPT:
                    self._stats.add_steady(SteadyTimings(first, batch_size, self._origin, times))
                    first, times = index + 1, []
        finally:  # the batches that ran are in the stats, a failure's too
            if times:
                self._stats.add_steady(SteadyTimings(first, batch_size, self._origin, times))

    def _last(
        self, index: int, feeds: dict[str, np.ndarray], rows: int, batch_size: int, names: list[str]
    ) -> list[np.ndarray]:
        """The run's last batch (or only one), of ``rows`` rows: its outputs, each checked to
        have a row per input row (``names``: the session's outputs), and its timing recorded."""
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
        for name, value in zip(names, values):  # noqa: B905 - ORT gives a value a name asked for
            if value.ndim == 0 or value.shape[0] != rows:
                raise not_per_row(name, index, [rows, "..."], value)
        self._stats.add(direct_timing(index, rows, t_ask, t_ask, t_ask, t_ran, time.perf_counter(), self._origin))
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
