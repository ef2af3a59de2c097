"""The direct path's batch timings, and the compact form its steady lane keeps them in.

NOTE [ steady timings ]: on the direct path (NOTE [ direct path ]) a batch's
timing is four clock reads - asked of the source, handed to ORT, run, done -
and everything else in its :class:`BatchTiming` follows from them (no copies,
no device events).  Made whole a batch, a timing cost as much as the steady
lane's checks (a 17-field record, then folded field by field), on a batch of a
cheap model that costs ~10 us; and the records the stats keep whole (the first
20,000, for traces) were objects the garbage collector walks for as long as the
stats live (a tuple subclass is never untracked; a plain tuple of floats is).
So the lane keeps ``asked, submitted, ran, done`` a batch in a
:class:`SteadyTimings` - its batches are consecutive and of one row count - and
the stats fold its sums from those four numbers.  They lie flat, four floats a
batch in one list: a tuple a batch would be one more object a batch that outlives
it (the stats keep the first 20,000 batches), each one more for the collector to
count and walk while the caller holds its outputs.  It is a sequence of
:class:`BatchTiming`: a record is made only where one is read (a trace, the
percentiles' sample), the same record the full path makes (:func:`direct_timing`).
The percentiles' sample keeps a steady batch as a :data:`SteadyEntry` - its four
reads and where it stands, a plain tuple - made a record only when the sample is
read: its fill and Algorithm L's replacements take thousands of them over a long
run, a record made each time (two Python calls, a 17-field tuple).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

from .records import BatchTiming

#: a steady batch's clock reads, in its block's flat list: asked of the source, handed to ORT,
#: ORT returned, result made
READS = 4

#: a steady batch as the percentiles' sample holds it until read (:func:`steady_record`):
#: (index, rows, origin, asked, submitted, ran, done)
SteadyEntry = tuple[int, int, float, float, float, float, float]

#: a BatchTiming made from its every field in order, without the keyword handling
_new_timing = tuple.__new__


def direct_timing(index: int, rows: int, t_ask: float, t_submit: float, t_run: float, t_ran: float, t_done: float,
                  origin: float) -> BatchTiming:  # fmt: skip
    """A direct run's batch as the stats take it: no copies, a zero-length h2d and d2h each
    side of the run (``t_run`` after the batch's check, ``t_ran`` when ORT returned)."""
    at = t_run - origin
    return _new_timing(BatchTiming, (index, rows, 0, 0, t_submit, t_done, 0.0, 0.0, t_run, t_submit - t_ask,
                                     0.0, t_ran - t_run, 0.0, t_done - t_ran, at, at, t_ran - origin))  # fmt: skip


def steady_record(entry: SteadyEntry) -> BatchTiming:
    """The record of a steady batch the sample kept as its :data:`SteadyEntry`."""
    index, rows, origin, t_ask, t_submit, t_ran, t_done = entry
    return direct_timing(index, rows, t_ask, t_submit, t_submit, t_ran, t_done, origin)


class SteadyTimings(Sequence[BatchTiming]):
    """Consecutive batches of ``rows`` rows from ``first_index`` on, each as its
    :data:`READS` clock reads in the flat list ``times`` (NOTE [ steady timings ]); read
    as BatchTimings."""

    __slots__ = ("first_index", "origin", "rows", "times")

    def __init__(self, first_index: int, rows: int, origin: float, times: list[float]) -> None:
        self.first_index = first_index
        self.rows = rows
        self.origin = origin
        self.times = times

    def __len__(self) -> int:
        return len(self.times) // READS

    @overload
    def __getitem__(self, at: int) -> BatchTiming: ...

    @overload
    def __getitem__(self, at: slice) -> SteadyTimings: ...

    def __getitem__(self, at: int | slice) -> BatchTiming | SteadyTimings:
        if isinstance(at, slice):
            start, stop, step = at.indices(len(self))
            if step != 1:
                raise ValueError("steady timings are sliced in steps of one batch")
            return SteadyTimings(self.first_index + start, self.rows, self.origin,
                                 self.times[start * READS : stop * READS])  # fmt: skip
        position = range(len(self))[at]  # negative positions, and the IndexError
        t_ask, t_submit, t_ran, t_done = self.times[position * READS : (position + 1) * READS]
        return direct_timing(self.first_index + position, self.rows, t_ask, t_submit, t_submit, t_ran, t_done,
                             self.origin)  # fmt: skip

    def __iter__(self) -> Iterator[BatchTiming]:
        return (self[position] for position in range(len(self)))

    def entries(self, start: int, stop: int) -> list[SteadyEntry]:
        """The batches at positions ``start`` to ``stop`` as the sample keeps them."""
        first, rows, origin, times = self.first_index, self.rows, self.origin, self.times
        return [(first + p, rows, origin, *times[p * READS : (p + 1) * READS]) for p in range(start, stop)]  # type: ignore[misc]

    def entry(self, position: int) -> SteadyEntry:
        """The batch at ``position`` (from 0) as the sample keeps it."""
        at = position * READS
        return (self.first_index + position, self.rows, self.origin, *self.times[at : at + READS])  # type: ignore[return-value]

    def sums(self) -> tuple[float, float, float, float, float]:
        """Seconds in the source, in ORT's run and making the result, over every batch;
        the first batch's ask and the last one's end."""
        source = compute = take = 0.0
        reads = iter(self.times)
        for t_ask, t_submit, t_ran, t_done in zip(reads, reads, reads, reads):  # noqa: B905 - READS a batch
            source += t_submit - t_ask
            compute += t_ran - t_submit
            take += t_done - t_ran
        return source, compute, take, self.times[0], self.times[-1]
