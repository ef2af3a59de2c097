"""``Pipeline.run`` on the direct path: whole arrays sliced into batches, each through ``session.run``.

NOTE [ whole arrays run direct ]: ``run()`` on the direct path
(NOTE [ direct path ]) needs none of what a map's run holds.  Its arrays are
checked once, as a whole, so a batch is a slice that needs no check of its
own; there is no source to ask, nothing to copy in or out, and no result to
hand over before the end.  So it has a runner of its own, :class:`WholeRunner`,
made once with the pipeline from what the session holds: a map's
:class:`~pipeline._engine.DirectRun` (its copier, its steady lane's state, its
advisor) cost more to make and to close than a batch of a few rows costs to
run, and a server that answers each request with a ``run()`` paid that a call
(docs/results.md).  ORT's outputs are joined once at the end, as a loop over
``session.run`` would join them.  Its full batches run in a loop as lean as the
steady lane's (NOTE [ steady batches ]), each batch's timing its clock reads
(NOTE [ steady timings ]); the short last one, if any, runs on its own.  For a
model that pads no batch (a fixed batch dim or static shapes take the map's
way, which pads).

NOTE [ a run of one batch ]: arrays of a batch or less - a server's request -
run as given and return ORT's arrays as they are, and the run's stats are made
when read: its clock reads are kept (:data:`OneBatchReads`) and
:func:`pipeline.stats.one_batch_stats` makes the ``Stats`` from them.  A
``Stats`` and its record cost more than a microsecond to make, a sixth of what
a cheap model's one-row ``session.run`` costs, and most calls' stats are never
read (docs/results.md).  On this path every check stays, and a step a call
would take is written inline where it is cheap (a Python call costs about a
tenth of a microsecond, and ten of them were a sixth of that ``session.run``):
:meth:`WholeRunner.one` is one frame, and the pipeline's ``run()`` calls only
what refuses or picks.  A strided array is left to ORT, which makes it
contiguous itself; an array of the other byte order, which ORT would misread,
and a device array are made host arrays first.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np

from ..devices import DeviceArray
from ..session import OrtSession
from ..util.errors import PipelineClosedError, PipelineInputError
from .direct import STEADY_READS_KEPT, TimingSink, as_host_arrays, unreadable_in_place
from .records import CLOSED_MID_RUN, compute_failed
from .steady_timings import SteadyTimings, direct_timing

#: a run of one batch as its stats are made from it (NOTE [ a run of one batch ]): its
#: rows (0: none ran), and the clock when it was asked for, when ORT returned, and when done
OneBatchReads = tuple[int, float, float, float]
#: the reads of a run whose batch has not run (yet, or failed)
NO_BATCH: OneBatchReads = (0, 0.0, 0.0, 0.0)


class WholeRunner:
    """A pipeline's ``run()`` of checked arrays on the direct path, one call at a time:
    :meth:`one` or :meth:`batches`.  Made once, with what it asks of the session each
    batch (fixed once the session's constants are set); :meth:`close` (from any thread,
    the pipeline's close) stops the run before its next batch, and every run after."""

    def __init__(self, session: OrtSession) -> None:
        self._run = session.unchecked_run
        self._names = session.output_names
        self._options = session.plain_run_options
        self._constants = session.constants
        #: the name of a model's only output (its outputs' dict made in one step), else None
        self._single = self._names[0] if len(self._names) == 1 else None
        self._closed = False

    def one(
        self, feeds: dict[str, np.ndarray], rows: int, batch_size: int, index: int = 0
    ) -> tuple[dict[str, np.ndarray], OneBatchReads]:
        """``feeds`` (checked: names, dtypes, fixed dims, ``rows`` rows each, at most
        ``batch_size``) run as batch ``index``: ORT's outputs as they come, each checked to
        have a row per input row, and the batch's reads to make its stats from.
        One frame, its steps inline: NOTE [ a run of one batch ]."""
        t_ask = time.perf_counter()
        if self._closed:
            raise PipelineClosedError(CLOSED_MID_RUN)
        for value in feeds.values():  # a strided array ORT copies itself, as as_host_arrays would
            if type(value) is DeviceArray or not value.dtype.isnative:
                feeds = as_host_arrays(feeds, 0)
                break
        if self._constants:
            feeds = {**feeds, **self._constants}
        names = self._names
        try:
            values: list[np.ndarray] = self._run(names, feeds, self._options)
        except Exception as exc:
            raise compute_failed(index, exc, rows, batch_size) from exc
        t_ran = time.perf_counter()
        single = self._single
        if single is not None:  # the commonest model's, in the fewest steps
            value = values[0]
            if value.shape[:1] != (rows,):  # a 0-d value's is ()
                raise not_per_row(single, index, [rows, "..."], value)
            return {single: value}, (rows, t_ask, t_ran, time.perf_counter())
        for name, value in zip(names, values, strict=True):
            if value.shape[:1] != (rows,):
                raise not_per_row(name, index, [rows, "..."], value)
        return dict(zip(names, values, strict=True)), (rows, t_ask, t_ran, time.perf_counter())

    def batches(
        self, arrays: dict[str, np.ndarray], rows: int, batch_size: int, stats: TimingSink
    ) -> dict[str, np.ndarray]:
        """``arrays`` (checked: names, dtypes, fixed dims, ``rows`` rows each) in batches of
        ``batch_size`` rows, their timings recorded in ``stats``; every output's batches joined."""
        origin = stats.device_origin
        if origin is None:  # the stats' device time 0: this run's start
            origin = stats.device_origin = time.perf_counter()
        names = self._names
        if unreadable_in_place(arrays):  # made readable once, not a batch at a time
            arrays = as_host_arrays(arrays, 0)
        kept: list[list[np.ndarray]] = [[] for _ in names]
        full = rows // batch_size
        self._full_batches(arrays, full, batch_size, kept, stats, origin)
        if rows > full * batch_size:
            start = full * batch_size
            feeds = {name: array[start:] for name, array in arrays.items()}
            outputs, (last, t_ask, t_ran, t_done) = self.one(feeds, rows - start, batch_size, full)
            stats.add(direct_timing(full, last, t_ask, t_ask, t_ask, t_ran, t_done, origin))
            for name, parts in zip(names, kept, strict=True):
                parts.append(outputs[name])
        return joined_rows(dict(zip(names, kept, strict=True)))

    def _full_batches(
        self,
        arrays: dict[str, np.ndarray],
        count: int,
        batch_size: int,
        kept: list[list[np.ndarray]],
        stats: TimingSink,
        origin: float,
    ) -> None:
        """The first ``count`` batches, each of ``batch_size`` rows, their outputs added to
        ``kept`` and their timings to ``stats`` (device time 0 at ``origin``): a loop of its
        own, as lean as the steady lane's (NOTE [ steady batches ]), each batch's timing its
        clock reads (NOTE [ steady timings ])."""
        clock, run, names, options, constants = (
            time.perf_counter,
            self._run,
            self._names,
            self._options,
            self._constants,
        )
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
                    stats.add_steady(SteadyTimings(first, batch_size, origin, times))
                    first, times = index + 1, []
        finally:  # the batches that ran are in the stats, a failure's too
            if times:
                stats.add_steady(SteadyTimings(first, batch_size, origin, times))

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
