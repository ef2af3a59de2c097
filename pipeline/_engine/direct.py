"""The direct path: the CPU backend issued from the caller's thread.

NOTE [ direct path ]: on the host device with no link model and no chaos,
every stream operation is done when it returns, so nothing the engine keeps
for a GPU (events, rings of slots, IOBinding, pinned copies) buys anything
there: it only costs host time a batch.  When the caller's thread issues
(``stage_threads`` False, or "auto" before it hands over), a batch is checked,
given to ORT's ``session.run`` where it lies (ORT wraps a C-ordered numpy
array of the input's dtype without copying it) and ORT's own output arrays
are the results: no copy in, none out.  ``session.run`` is also the cheaper
call of the two on the CPU EP (it costs less than binding the same arrays to
an IOBinding and running it bound), so this path is the loop a user would
write, plus the check, a few clock reads and one stats record a batch.

ORT allocates every output at the shape this run computes, so data-dependent
outputs and free dims need nothing special.  A model that fixes its batch dim
(or ``static_shapes``) gets a short batch padded with zero rows and its
outputs cut back.  Not taken with device-side preprocessing (the engine's
normalize step works on slots), an ``on_batch`` hook (it is given the engine's
traces), or filled slots.

NOTE [ steady batches ]: a stream of batches is mostly batches alike: the same
dtypes and shapes, one after another.  A batch that is exactly what the last
batch checked in full was (numpy arrays, C-ordered, of its dtypes and shapes,
under the same names) passes without the full check (names, ranks, fixed dims,
casts, padding, byte order), and its outputs are compared with the shapes the
plan gave for those inputs only, an output at a time.  Those checks were a third
of what a batch of a cheap model cost on this path (docs/results.md); the lane
costs a few attribute reads.  Any other batch (another shape, a cast, a strided
or device array, a short batch to pad) takes the full check, and becomes the
steady one where it ran unpadded as the caller's own arrays.

With ``stage_threads="auto"`` the run measures its three sides of host work
as the engine does (NOTE [ auto issuing ]) and, when stage threads would pay,
ends at a batch boundary - nothing of it is in flight then - so that the
front end hands the rest of the source to the stage threads
(:attr:`DirectRun.handed_over_at`).

NOTE [ measured in the lane ]: the steady lane reads the clock four times a
batch anyway (NOTE [ steady timings ]), and those reads are the three sides:
produce from the ask to the batch in hand, execute to ORT's return, consume
from there to the next ask (the result made, the caller's own work).  So the
lane measures the advisor's windows itself - the first one right after the
first batch, the run's first skipped ones included, and each after a rest -
instead of leaving them to the full path, whose checks and records make a
measured batch cost about twice a steady one, which showed in a whole
run's time (docs/results.md).  The full path measures only batches
unlike the steady one.  A window's reads start a block of their own, so
they are the lane's list and nothing else when it is judged; a window cut
short by an unlike batch is dropped, and the full path measures a whole one.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Generator, Iterator, Mapping
from typing import Any, Generic, Protocol, TypeVar, cast

import numpy as np

from ..devices import DeviceArray, typed_view
from ..session import OrtSession
from ..util.errors import DeviceError, ModelError, PipelineClosedError, PipelineStageError
from .hostcopy import HostCopier
from .issuing import HandOverAdvisor
from .layout import InputChecker, Layout, SlotsOutgrown
from .records import CLOSED_MID_RUN, BatchTiming, CopiedOutputs, MakeTake, compute_failed, interrupt_source
from .steady_timings import READS, SteadyTimings, direct_timing

T = TypeVar("T")


class TimingSink(Protocol):
    """Where a direct run's batch timings go (``Stats``): one, several at once, and the
    perf_counter time its device clock starts at (a trace's time 0)."""

    device_origin: float | None

    def add(self, timing: BatchTiming) -> None: ...

    def add_many(self, timings: list[BatchTiming]) -> None: ...

    def add_steady(self, block: SteadyTimings) -> None: ...


#: batches whose timings are handed to the stats at once
_RECORD_EVERY = 16
#: the steady lane's (NOTE [ steady timings ]: a block costs a lock and an object, its batches little)
_STEADY_RECORD_EVERY = 64
STEADY_READS_KEPT = _STEADY_RECORD_EVERY * READS


class DirectRun(Generic[T]):
    """One pass of a source straight through ``session.run``; iterate :meth:`results` once."""

    def __init__(
        self,
        *,
        session: OrtSession,
        checker: InputChecker,
        layout: Layout | None,
        source: Iterator[object],
        make_take: MakeTake[T],
        copy_threads: int,
        stats: TimingSink,
        first_index: int = 0,
        advisor: HandOverAdvisor | None = None,
        user_source: object = None,
    ) -> None:
        self._session = session
        self._checker = checker
        self._layout = layout
        #: the most rows a batch run so far had (a failure of a shorter one says what to try)
        self._most_rows = 0
        self._source = source
        self._copier = HostCopier(copy_threads)
        # results that outlive the run already: ORT's arrays are new every run
        self._passed_on = make_take.passed_on if isinstance(make_take, CopiedOutputs) else None
        #: ORT's outputs are the result itself (``map()``'s): no call a batch to say so
        self._as_is = isinstance(make_take, CopiedOutputs) and make_take.then is None
        self._take = make_take(self._copier)
        self._stats = stats
        #: the timings of the batches run and not yet handed to the stats (a few at a time)
        self._raw: list[BatchTiming] = []
        self._index = first_index
        self._advisor = advisor
        #: set when "auto" issuing chose the stage threads: the index of the first batch not taken
        self.handed_over_at: int | None = None
        #: seconds from one batch to the next, every side of host work included (the
        #: median of the last window measured; NOTE [ auto issuing ])
        self.seconds_per_batch: float | None = None
        self._closed = False
        self._user_source = user_source
        self._run = session.unchecked_run
        self._names = session.output_names
        self._options = session.plain_run_options
        self._pads = layout is not None and layout.pad
        #: the input shapes of the last batch, and the probe's output shapes for them
        self._planned_for: tuple[tuple[str, tuple[int, ...]], ...] | None = None
        self._plan: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}
        #: NOTE [ steady batches ]: (input, dtype, shape) of the last batch checked in full,
        #: its rows and its outputs' planned shapes; None until one ran unpadded
        self._steady: tuple[tuple[str, np.dtype, tuple[int, ...]], ...] | None = None
        self._steady_rows = 0
        self._steady_outputs: list[tuple[int, ...]] = []
        #: perf_counter at the start: the stats' device time 0 (their first run's, for traces)
        self._origin = time.perf_counter()
        if stats.device_origin is None:
            stats.device_origin = self._origin
        else:
            self._origin = stats.device_origin

    def results(self) -> Iterator[T]:
        """Outputs in order; a failure raised once the batches before it are delivered."""
        try:
            yield from self._loop()
        finally:
            self.close()

    def _loop(self) -> Iterator[T]:
        walls: list[float] = []  # seconds from one batch to the next, while measuring
        t_resume = time.perf_counter()
        unlike: tuple[object, float] | None = None  # a batch the steady lane asked for, and when
        while not self._closed:
            advisor = self._advisor
            if self._steady is not None and unlike is None:
                unlike = yield from self._steady_lane()
                if unlike is _SOURCE_ENDED or unlike is _HANDED_OVER:
                    return
                t_resume = time.perf_counter()
                continue
            index = self._index
            if unlike is None:
                t_ask = time.perf_counter()
                try:
                    batch = next(self._source)
                except StopIteration:
                    return
                except Exception as exc:
                    raise PipelineStageError("source", index, exc) from exc
            else:
                (batch, t_ask), unlike = unlike, None
            result, sides = self._run_batch(index, batch, t_ask)
            self._index = index + 1
            t_yield = time.perf_counter()
            yield result
            if advisor is None:
                continue
            t_back = time.perf_counter()
            walls.append(t_back - t_resume)
            t_resume = t_back
            if not advisor.measuring:
                advisor.rested()
                continue
            produce, execute, take = sides
            advisor.add("produce", produce)
            advisor.add("execute", execute)
            advisor.add("consume", take + t_back - t_yield)
            if len(walls) >= advisor.window:
                self.seconds_per_batch = statistics.median(walls[-advisor.window :])
                walls.clear()
            if advisor.hand_over():
                self.handed_over_at = self._index
                return
        raise PipelineClosedError(CLOSED_MID_RUN)

    def _steady_lane(self) -> Generator[T, None, tuple[object, float] | None]:
        """NOTE [ steady batches ]: batches alike run in a loop of their own; returns the
        first batch unlike the steady one with the time it was asked for, None when the
        run was closed, :data:`_SOURCE_ENDED` or :data:`_HANDED_OVER`.  With an advisor
        the lane measures its windows itself (NOTE [ measured in the lane ])."""
        steady, advisor, source = self._steady, self._advisor, self._source
        assert steady is not None
        names, options, run = self._names, self._options, self._run
        constants, as_is, planned = self._session.constants, self._as_is, self._steady_outputs
        rows, single = self._steady_rows, steady[0] if len(steady) == 1 else None
        # one output (most models): its dict and its shape's check without a zip (half a microsecond)
        only, only_planned = (names[0], planned[0]) if len(names) == 1 else (None, ())
        # batches until the advisor's rest is over, or its window measured in the lane (-1: never)
        left = advisor.rest_left if advisor is not None else -1
        # a window's reads fit in one block (a block handed on mid-window would take them away)
        assert advisor is None or advisor.window + advisor.skip_left < _STEADY_RECORD_EVERY
        measuring = False  # a window being measured (NOTE [ measured in the lane ])
        clock = time.perf_counter
        self._record()  # the full path's timings first: the stats keep them in the batches' order
        first, times = self._index, []  # type: int, list[float]  # NOTE [ steady timings ]: READS a batch, flat
        try:
            while not self._closed:
                if not left:  # an advisor's rest or window is over (never without one)
                    assert advisor is not None
                    if measuring:  # the window is in: hand over, or rest (twice as long as before)
                        if self._handed_over_in_lane(times, clock()):
                            return _HANDED_OVER
                        measuring, left = False, advisor.rest_left
                    else:  # measure the next batches: their reads first in a block of their own
                        advisor.rested(advisor.rest_left)
                        if times:
                            self._record_steady(first, rows, times)
                            first, times = self._index, []
                        measuring, left = True, advisor.window + advisor.skip_left
                index = self._index
                t_ask = clock()
                try:
                    batch = next(source)
                except StopIteration:
                    return _SOURCE_ENDED
                except Exception as exc:
                    raise PipelineStageError("source", index, exc) from exc
                t_submit = clock()
                if (
                    single is not None
                    and type(batch) is np.ndarray
                    and batch.shape == single[2]
                    and (batch.dtype is single[1] or batch.dtype == single[1])
                    and batch.flags.c_contiguous
                ):
                    feeds = {single[0]: batch}
                else:
                    alike = self._steady_feeds(batch)
                    if alike is None:
                        return batch, t_ask
                    feeds = alike
                try:
                    values = run(names, {**feeds, **constants} if constants else feeds, options)
                except Exception as exc:
                    raise compute_failed(index, exc, rows, self._most_rows) from exc
                t_ran = clock()
                if only is not None:
                    outputs = {only: values[0]}
                    if values[0].shape != only_planned:  # NOTE [ data-dependent outputs ]
                        self._note_changed(outputs)
                else:
                    # zip's strict= is a keyword parsed a call: a quarter of a microsecond, twice a batch
                    outputs = dict(zip(names, values))  # noqa: B905 - ORT: a value a name asked for
                    for value, shape in zip(values, planned):  # noqa: B905 - a shape a value, as planned
                        if value.shape != shape:  # NOTE [ data-dependent outputs ], as _note_dynamic says it
                            self._note_changed(outputs)
                            break
                # typing.cast would be a Python call a batch
                result: T = outputs if as_is else self._given(index, rows, outputs)  # type: ignore[assignment]
                times += (t_ask, t_submit, t_ran, clock())
                if len(times) >= STEADY_READS_KEPT:
                    self._record_steady(first, rows, times)
                    first, times = index + 1, []
                self._index = index + 1
                yield result
                left -= 1
            return None
        finally:
            if times:
                self._record_steady(first, rows, times)
            if advisor is not None and not measuring:  # the batches of its rest that went by
                advisor.rested(advisor.rest_left - left)
            # (a window cut short is dropped: the full path measures one whole)

    def _handed_over_in_lane(self, times: list[float], t_back: float) -> bool:
        """NOTE [ measured in the lane ]: the advisor's verdict on the window whose clock
        reads end ``times`` (which holds nothing before it but the skipped batches), its last
        batch's consumer back at ``t_back``."""
        advisor = self._advisor
        assert advisor is not None
        # plain lists: numpy's calls here, cold once in a thousand batches, cost several times these
        window = times[-advisor.window * READS :]  # the batches before it: the run's first, skipped
        asked, handed, ran = window[::READS], window[1::READS], window[2::READS]
        next_asked = [*asked[1:], t_back]
        self.seconds_per_batch = statistics.median(b - a for a, b in zip(asked, next_asked, strict=True))
        produce = [b - a for a, b in zip(asked, handed, strict=True)]
        execute = [b - a for a, b in zip(handed, ran, strict=True)]
        consume = [b - a for a, b in zip(ran, next_asked, strict=True)]
        if not advisor.judge(produce, execute, consume):
            return False
        self.handed_over_at = self._index
        return True

    def _record_steady(self, first: int, rows: int, times: list[float]) -> None:
        """NOTE [ steady timings ]: a steady lane's batches handed to the stats."""
        self._stats.add_steady(SteadyTimings(first, rows, self._origin, times))

    def _given(self, index: int, rows: int, outputs: dict[str, np.ndarray]) -> T:
        """The take's result for ORT's outputs."""
        return self._passed_on(index, rows, outputs) if self._passed_on else self._take(index, rows, outputs)

    def _run_batch(self, index: int, batch: object, t_ask: float) -> tuple[T, tuple[float, float, float]]:
        """One batch checked in full, run and taken: its result, and its host seconds
        producing, executing and taking (the sides of NOTE [ auto issuing ])."""
        t_submit = time.perf_counter()
        feeds, rows, bound = self._checked(index, batch)
        constants = self._session.constants
        t_run = time.perf_counter()
        try:
            values = self._run(self._names, {**feeds, **constants} if constants else feeds, self._options)
        except Exception as exc:
            raise compute_failed(index, exc, rows, self._most_rows) from exc
        self._most_rows = max(self._most_rows, rows)
        t_ran = time.perf_counter()
        outputs = dict(zip(self._names, values, strict=True))
        self._note_dynamic(feeds, outputs)
        if bound != rows:
            outputs = _cut(outputs, rows, bound)
        else:
            self._hold_steady(batch, feeds, rows)
        result = cast(T, outputs) if self._as_is else self._given(index, rows, outputs)
        t_done = time.perf_counter()
        self._raw.append(direct_timing(index, rows, t_ask, t_submit, t_run, t_ran, t_done, self._origin))
        if len(self._raw) >= _RECORD_EVERY:
            self._record()
        return result, (t_run - t_ask, t_ran - t_run, t_done - t_ran)

    def _checked(self, index: int, batch: object) -> tuple[dict[str, np.ndarray], int, int]:
        """A batch's feeds checked in full, padded where the layout pads, with its real
        rows and the rows it runs at."""
        feeds = self._checker.feeds(index, batch)
        rows = bound = next(iter(feeds.values())).shape[0]
        if self._pads:
            bound = self._bound_rows(index, feeds, rows)
            if bound != rows:  # NOTE [ rows that interact ]: a dict lookup once checked
                assert self._layout is not None  # a layout that pads
                shapes = {name: (bound, *value.shape[1:]) for name, value in feeds.items()}
                try:
                    self._session.check_padding(shapes, rows, *self._layout.padding_words())
                except ModelError as exc:  # the batch's compute refused, as the engine says it
                    raise compute_failed(index, exc, rows, None) from exc
        if bound != rows or unreadable_in_place(feeds):
            feeds = self._padded(feeds, bound)
        return feeds, rows, bound

    def _steady_feeds(self, batch: object) -> dict[str, np.ndarray] | None:
        """NOTE [ steady batches ]: a batch that is what the last one checked in full
        was - numpy arrays of the same dtypes and shapes, C-ordered - as feeds (a
        fraction of the full check's microseconds); None: check it in full."""
        steady = self._steady
        if steady is None:
            return None
        if type(batch) is np.ndarray:
            if len(steady) != 1:
                return None
            name, dtype, shape = steady[0]
            if batch.shape == shape and (batch.dtype is dtype or batch.dtype == dtype) and batch.flags.c_contiguous:
                return {name: batch}
            return None
        if type(batch) is not dict or len(batch) != len(steady):
            return None
        for name, dtype, shape in steady:
            value = batch.get(name)
            if (
                type(value) is not np.ndarray
                or value.shape != shape
                or not (value.dtype is dtype or value.dtype == dtype)
                or not value.flags.c_contiguous
            ):
                return None
        return batch

    def _hold_steady(self, batch: object, feeds: dict[str, np.ndarray], rows: int) -> None:
        """Remember a batch checked in full and run unpadded as the steady one, where its
        feeds are the caller's own arrays (not a cast, a copy or a device array's view)."""
        given = {next(iter(feeds)): batch} if type(batch) is np.ndarray else batch
        if not isinstance(given, dict) or any(given.get(name) is not value for name, value in feeds.items()):
            self._steady = None
            return
        self._steady = tuple((name, value.dtype, value.shape) for name, value in feeds.items())
        self._steady_rows = rows
        self._steady_outputs = [self._plan[name][1] for name in self._names]

    def _note_dynamic(self, feeds: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> None:
        """See NOTE [ data-dependent outputs ]: outputs whose shape is not the one the probe
        run gave for these input shapes are remembered by the session, as the engine does."""
        shapes = tuple((name, value.shape) for name, value in feeds.items())
        if shapes != self._planned_for:
            self._planned_for = shapes
            try:
                self._plan = self._session.output_layout(dict(shapes))
            except ModelError:  # no probe on zeros runs (a division by an input): this batch is the plan
                self._session.remember_layout(dict(shapes), outputs)
                self._plan = self._session.output_layout(dict(shapes))
        self._note_changed(outputs)

    def _note_changed(self, outputs: dict[str, np.ndarray]) -> None:
        """The outputs of another shape than the plan's remembered by the session."""
        plan = self._plan
        changed = [name for name, value in outputs.items() if value.shape != plan[name][1]]
        if changed and not self._session.dynamic_outputs.issuperset(changed):
            self._session.note_dynamic(changed)

    def _record(self) -> None:
        """The batches' timings so far handed to the stats, several under one lock."""
        if self._raw:  # emptied in place: the loops hold it by a name of their own
            self._stats.add_many(self._raw)  # its lists take the timings, not this list
            self._raw.clear()

    def _padded(self, feeds: dict[str, Any], bound: int) -> dict[str, np.ndarray]:
        """:func:`as_host_arrays`; padding that does not fit in memory said as the model's doing where
        it fixes the batch dim (NOTE [ buffers that do not fit ])."""
        try:
            return as_host_arrays(feeds, bound)
        except MemoryError as exc:
            fixed = self._layout is not None and self._layout.fixed
            what = f"the model fixes its batch dim at {bound:,}" if fixed else f"batches of {bound:,} rows"
            advice = (
                "export it with a free batch dim, or a smaller fixed one" if fixed else "choose a smaller batch size"
            )
            raise DeviceError(
                f"{what}, and a batch padded to it does not fit in the host's memory ({exc}): {advice}"
            ) from exc

    def _bound_rows(self, index: int, feeds: dict[str, np.ndarray], rows: int) -> int:
        """The rows a batch runs at where short batches are padded (a fixed batch dim, static shapes)."""
        assert self._layout is not None  # a layout that pads
        with contextlib.suppress(SlotsOutgrown):  # no slots here: a batch of other dims runs at its own shape
            self._layout.rows_of(index, feeds)  # a fixed batch dim's and static shapes' refusals
        return self._layout.bound_rows(rows)

    def close(self) -> None:
        """Stop taking batches and join the copy threads; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self.handed_over_at is None:  # else the stage threads go on reading the source
            interrupt_source(self._user_source)  # a caller's thread waiting in a Feed wakes up
        self._record()
        self._copier.close()


#: what the steady lane returns when the source has no more batches
_SOURCE_ENDED: Any = ("source ended", 0.0)
#: what it returns when its advisor measured that stage threads would pay (:attr:`DirectRun.handed_over_at`)
_HANDED_OVER: Any = ("handed over", 0.0)


def unreadable_in_place(feeds: Mapping[str, Any]) -> bool:
    """Whether a batch holds an array ORT cannot read where it lies: strided, of
    the other byte order, or a device array (NOTE [ device arrays ]: the host
    device's memory, which ORT reads as a numpy view of it)."""
    for value in feeds.values():
        if type(value) is DeviceArray or not (value.flags.c_contiguous and value.dtype.isnative):
            return True
    return False


def as_host_arrays(feeds: dict[str, Any], bound: int) -> dict[str, np.ndarray]:
    """Each input as a numpy array (a host device array's memory viewed as one), with
    zero rows added up to ``bound`` (a fixed batch dim, static shapes)."""
    arrays = {}
    for name, value in feeds.items():
        if type(value) is DeviceArray:
            array = typed_view(value.buffer.owner, value.dtype, value.shape)
        else:  # C order, native byte order: as ORT reads memory
            array = np.ascontiguousarray(value, value.dtype.newbyteorder("="))
        rows = array.shape[0]
        if rows < bound:  # zero rows; empty strings for strings (NOTE [ string tensors ])
            full = np.zeros((bound, *array.shape[1:]), array.dtype)
            if array.dtype.kind == "O":
                full[...] = ""
            full[:rows] = array
            array = full
        arrays[name] = array
    return arrays


def _cut(outputs: dict[str, np.ndarray], rows: int, bound: int) -> dict[str, np.ndarray]:
    """Outputs of a padded run without the padding rows' (those with one row per input row)."""
    return {name: value[:rows] if value.ndim and value.shape[0] == bound else value for name, value in outputs.items()}
