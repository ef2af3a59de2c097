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

With ``stage_threads="auto"`` the run measures its three sides of host work
as the engine does (NOTE [ auto issuing ]) and, when stage threads would pay,
ends at a batch boundary - nothing of it is in flight then - so that the
front end hands the rest of the source to the stage threads
(:attr:`DirectRun.handed_over_at`).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from ..devices import DeviceArray, typed_view
from ..session import OrtSession
from ..util.errors import DeviceError, ModelError, PipelineClosedError, PipelineInputError, PipelineStageError
from .hostcopy import HostCopier
from .issuing import HandOverAdvisor
from .layout import InputChecker, Layout, SlotsOutgrown
from .records import CLOSED_MID_RUN, BatchTiming, CopiedOutputs, MakeTake, compute_failed, interrupt_source

T = TypeVar("T")


class TimingSink(Protocol):
    """Where a direct run's batch timings go (``Stats``): several at once, and the
    perf_counter time its device clock starts at (a trace's time 0)."""

    device_origin: float | None

    def add_many(self, timings: list[BatchTiming]) -> None: ...


#: batches whose timings are handed to the stats at once
_RECORD_EVERY = 16


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
        self._take = make_take(self._copier)
        self._stats = stats
        self._timings: list[BatchTiming] = []
        self._index = first_index
        self._advisor = advisor
        #: set when "auto" issuing chose the stage threads: the index of the first batch not taken
        self.handed_over_at: int | None = None
        #: seconds from one batch to the next, every side of host work included (the
        #: median of the last window measured; NOTE [ auto issuing ])
        self.seconds_per_batch: float | None = None
        self._closed = False
        self._user_source = user_source
        self._run = self._run_call()
        self._names = session.output_names
        self._options = session.plain_run_options
        self._pads = layout is not None and layout.pad
        #: the input shapes of the last batch, and the probe's output shapes for them
        self._planned_for: tuple[tuple[str, tuple[int, ...]], ...] | None = None
        self._plan: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}
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
        while not self._closed:
            index = self._index
            t_ask = time.perf_counter()
            try:
                batch = next(self._source)
            except StopIteration:
                return
            except Exception as exc:
                raise PipelineStageError("source", index, exc) from exc
            result, sides = self._run_batch(index, batch, t_ask)
            self._index = index + 1
            t_yield = time.perf_counter()
            yield result
            advisor = self._advisor
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

    def _run_batch(self, index: int, batch: object, t_ask: float) -> tuple[T, tuple[float, float, float]]:
        """One batch checked, run and taken: its result, and its host seconds
        producing, executing and taking (the sides of NOTE [ auto issuing ])."""
        t_submit = time.perf_counter()
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
        if bound != rows or self._unusual(feeds):
            feeds = self._padded(feeds, bound)
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
        result = self._passed_on(index, rows, outputs) if self._passed_on else self._take(index, rows, outputs)
        t_done = time.perf_counter()
        # positional: a BatchTiming made by keyword costs twice as much, once a batch
        at = t_run - self._origin  # no copies: a zero-length h2d and d2h each side of the run
        timing = BatchTiming(index, rows, 0, 0, t_submit, t_done, 0.0, 0.0, t_run, t_submit - t_ask,
                             0.0, t_ran - t_run, 0.0, t_done - t_ran, at, at, t_ran - self._origin)  # fmt: skip
        self._timings.append(timing)
        if len(self._timings) >= _RECORD_EVERY:
            self._record()
        return result, (t_run - t_ask, t_ran - t_run, t_done - t_ran)

    @staticmethod
    def _unusual(feeds: Mapping[str, Any]) -> bool:
        """Whether a batch holds an array ORT cannot read where it lies: strided, of
        the other byte order, or a device array (NOTE [ device arrays ]: the host
        device's memory, which ORT reads as a numpy view of it)."""
        for value in feeds.values():
            if type(value) is DeviceArray or not (value.flags.c_contiguous and value.dtype.isnative):
                return True
        return False

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
        plan = self._plan
        changed = [name for name, value in outputs.items() if value.shape != plan[name][1]]
        if changed and not self._session.dynamic_outputs.issuperset(changed):
            self._session.note_dynamic(changed)

    def run_whole(self, arrays: dict[str, np.ndarray], batch_size: int) -> dict[str, np.ndarray]:
        """``Pipeline.run`` on the direct path: batches sliced off checked arrays (each
        slice needs no check of its own), ORT's outputs joined once at the end, as a
        loop over ``session.run`` would.  For a model that pads no batch."""
        run, names, options, constants = self._run, self._names, self._options, self._session.constants
        timings, kept = self._timings, [[] for _ in names]  # type: list[BatchTiming], list[list[np.ndarray]]
        if self._unusual(arrays):  # made readable once, not a batch at a time
            arrays = _as_host_arrays(arrays, 0)
        total = next(iter(arrays.values())).shape[0]
        for index, start in enumerate(range(0, total, batch_size), self._index):
            if self._closed:
                raise PipelineClosedError(CLOSED_MID_RUN)
            t_ask = time.perf_counter()
            feeds = {name: array[start : start + batch_size] for name, array in arrays.items()}
            if constants:
                feeds.update(constants)
            try:
                values = run(names, feeds, options)
            except Exception as exc:
                raise compute_failed(index, exc, min(batch_size, total - start), batch_size) from exc
            t_ran = time.perf_counter()
            rows = min(batch_size, total - start)
            for name, value, parts in zip(names, values, kept, strict=True):
                if value.ndim == 0 or value.shape[0] != rows:
                    raise not_per_row(name, index, [rows, "..."], value)
                parts.append(value)
            t_done = time.perf_counter()
            at, ran_at = t_ask - self._origin, t_ran - self._origin
            timings.append(BatchTiming(index, rows, 0, 0, t_ask, t_done, 0.0, 0.0, t_ask, 0.0,
                                       0.0, t_ran - t_ask, 0.0, t_done - t_ran, at, at, ran_at))  # fmt: skip
            if len(timings) >= _RECORD_EVERY:
                self._record()
        self._record()
        return joined_rows(dict(zip(names, kept, strict=True)))

    def _run_call(self) -> Callable[..., list[np.ndarray]]:
        """ORT's ``run(output names, feeds, run options)``: the binding's own, below
        ``InferenceSession.run``'s checks that its callers here made already (an
        input name it does not know, an OrtValue it would not own; a microsecond
        a batch, a tenth of a cheap model's run)."""
        session = self._session.session
        inner = getattr(session, "_sess", None)
        return inner.run if inner is not None and hasattr(inner, "run") else session.run

    def _record(self) -> None:
        """The batches' timings so far handed to the stats, several under one lock."""
        if self._timings:
            self._stats.add_many(self._timings)
            self._timings = []

    def _padded(self, feeds: dict[str, Any], bound: int) -> dict[str, np.ndarray]:
        """:func:`_as_host_arrays`; padding that does not fit in memory said as the model's doing where
        it fixes the batch dim (NOTE [ buffers that do not fit ])."""
        try:
            return _as_host_arrays(feeds, bound)
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


def _as_host_arrays(feeds: dict[str, Any], bound: int) -> dict[str, np.ndarray]:
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


def joined_rows(parts: Mapping[str, list[np.ndarray]]) -> dict[str, np.ndarray]:
    """Each output's batches joined along their rows; an output whose rows change shape
    from batch to batch (a shape that depends on the batch, not only its rows) refused."""
    for name, values in parts.items():
        first = values[0].shape[1:]
        for index, value in enumerate(values):
            if value.shape[1:] != first:
                raise not_per_row(name, index, [value.shape[0], *first], value)
    return {name: np.concatenate(values) for name, values in parts.items()}


def not_per_row(name: str, index: int, expected: list[object], value: np.ndarray) -> PipelineInputError:
    """``run()``'s refusal of an output that has no row per input row to join along."""
    return PipelineInputError(
        f"output {name!r} has no batch dim to concatenate along: run() joins outputs of one row per input "
        "row, and this one's shape is not that (it may depend on the data); use map() for this model",
        batch_index=index,
        expected=str(expected).replace("'", ""),
        got=list(value.shape),
    )
