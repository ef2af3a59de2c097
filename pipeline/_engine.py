"""The engine: producer and execute threads (or the caller's alone), and the consumer's iterator.

::

    source ──▶ producer thread ──▶ execute thread ──▶ consumer (caller's thread)
               check batch         compute waits h2d  waits d2h event,
               stage → pinned-in   run ORT (bound)    takes outputs out of
               h2d on copy stream  d2h waits run,     pinned-out, releases it
               record h2d event    copy → pinned-out

NOTE [ threads are not stages ]: the d2h is enqueued by the execute thread
(its stream does the waiting), so a run needs two host threads beside the
consumer.  On CUDA both only enqueue; on the host device with no link model
their stream operations run inline, so the producer does the h2d memcpy and
the execute thread runs ORT and the d2h memcpy.  With ``stage_threads`` off
the same two steps (``_produce_one``, ``_execute_one``) are called by the
consumer's own thread instead (NOTE [ inline issue ]): the stages are the
same functions either way, only who calls them differs.  With
``stage_threads="auto"`` the consumer's thread starts and hands over to the
two threads mid-run once they would pay (NOTE [ auto issuing ]).

NOTE [ one error path ]: a failure anywhere travels down the same queues as
results, so the consumer first receives every earlier batch, then raises the
failure with its batch index and stage.  Only ``Exception`` is wrapped that
way: a KeyboardInterrupt or SystemExit (which reach a stage only when the
caller's thread issues it) propagates as it is.  Every blocking wait polls a stop
event; ``close()`` sets it, joins both threads and synchronizes the streams
so no in-flight copy still references a buffer.

NOTE [ inline h2d ]: pinned memory exists so that a copy engine can read
the batch while the host goes on.  A stream whose copies are done when
``copy_h2d`` returns (the host device's inline streams: the CPU backend) has
no such reader, so a batch bound at the slots' own shape, its arrays in C
order and native byte order, is copied straight from the caller's arrays into
the device slot: one host copy instead of two (its ``stage`` time is then 0,
the copy is all in ``h2d``).  The caller's arrays are not referenced once
``copy_h2d`` returns, before the source is asked for the next batch.  From
the caller's thread not even that copy is made (NOTE [ borrowed inputs ]).
Padded, free-shape, strided and byte-swapped batches, and every other
stream, are staged as usual.

NOTE [ borrowed inputs ]: on the CPU backend the device slot is host memory
too, and ORT reads a numpy array where it lies, so even that one copy is
skipped where nothing runs later than the caller's thread: the caller's
thread issues (``stage_threads`` False, or "auto" before it hands over) and
the streams are inline.  The run of such a batch binds the caller's arrays
themselves (``bind_cpu_input``: no copy), and happens before the source is
asked for the next batch, so a source that refills one array for every batch
still gets every batch right; the only code that runs between taking a
batch and its run is the caller's loop body, which must leave the source's
arrays alone (as it must anyway with stage threads).  Stage threads take
batches ahead of the run, so from a hand-over on batches are copied again,
and the one batch borrowed and not yet run is copied into its slot first.
Preprocessed inputs read the slot on the compute stream: they are copied.

NOTE [ filled slots ]: ``Pipeline.map_filled(fill)`` has no source of
arrays: ``fill(index, slot)`` writes batch ``index`` straight into the
page-locked arrays of its pinned-in slot (typed views of ``batch_size`` rows)
and returns how many rows it wrote.  It is called once that slot's last h2d
is done, the same host guard the staging copy waits on, so the batch skips a
host copy: a decoder or a feature computation writes where the copy engine
reads.  The time inside ``fill`` is the ``source`` stage; ``stage`` is 0.

NOTE [ data-dependent outputs ]: an output whose shape depends on the data
(a detector's boxes after NMS, NonZero) cannot be preallocated: a run into a
buffer of its probed shape fails once the data asks for another.  Such a
failure is retried at once with every output left for ORT to allocate; the
outputs whose shape then differs from the plan are remembered by the session
(``dynamic_outputs``) and from then on bound for ORT to allocate before every
run, while the others keep the slot's buffers.  The d2h copies those outputs
out of ORT's memory into the pinned-out slot (grown when they outgrow it),
and the batch keeps ORT's values alive until it is delivered.  The d2h needs
the run's shapes, which the execute thread has as soon as ``launch`` returns
on CUDA or an inline host stream; on a host stream with a worker it waits for
the run first, once any output is known to be dynamic.  The batch that finds
them there was already drained by the plan, so its outputs are read straight
from ORT's values when it is delivered.
"""

from __future__ import annotations

import collections
import operator
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar, cast

import numpy as np

from ._batching import InputChecker, Layout, RowShapes, SlotsOutgrown
from ._errors import ModelError, PipelineClosedError, PipelineError, PipelineInputError, PipelineStageError
from ._feed import interrupt_source
from ._hostcopy import HostCopier
from ._issuing import HandOverAdvisor
from ._rings import DeviceSlot, PinnedInSlot, PinnedOutSlot, Rings
from ._session import OrtSession, Shape, nbytes_of
from ._windows import HostWindows
from .devices import Device, DeviceArray, DeviceBuffer, Event, NormalizeOp, Stream, typed_view

T = TypeVar("T")
THREAD_PREFIX = "ortpipe-"
_JOIN_S = 2.0


@dataclass(frozen=True)
class Streams:
    h2d: Stream
    compute: Stream
    d2h: Stream

    def all(self) -> tuple[Stream, Stream, Stream]:
        return (self.h2d, self.compute, self.d2h)


@dataclass(eq=False, slots=True)
class BatchEvents:
    """The device-side marks of one batch (start marks only when timing is on)."""

    h2d_done: Event
    run_done: Event
    d2h_done: Event
    h2d_start: Event | None = None
    run_start: Event | None = None
    d2h_start: Event | None = None

    @classmethod
    def new(cls, device: Device, timing: bool) -> BatchEvents:
        make = device.event
        if not timing:
            return cls(make(False), make(False), make(False))
        return cls(make(), make(), make(), make(), make(), make())


@dataclass(eq=False, slots=True)
class BatchTrace:
    """One batch's marks: filled by the producer, completed by the consumer,
    then handed to the stats layer (``on_batch``)."""

    index: int
    rows: int
    bound_rows: int
    h2d_bytes: int
    t_submit: float  # perf_counter when the source produced it
    source_s: float  # time inside the source iterator's next()
    t_staged: float  # after the host copy into pinned-in
    stage_s: float  # host staging copy
    wait_in_s: float  # producer waiting for a free pinned-in / device slot
    events: BatchEvents
    d2h_bytes: int = 0  # set when the run is enqueued
    t_done: float = 0.0  # consumer has the outputs
    take_s: float = 0.0  # the consumer's take of them (a sink's write, map()'s copy out)


@dataclass(eq=False, slots=True)
class _Work:
    trace: BatchTrace
    slot: DeviceSlot
    out_layout: dict[str, tuple[np.dtype, Shape]] = field(default_factory=dict)
    #: bytes of each output the d2h copies, as planned when the run was enqueued
    #: (shared by the batches of one size: read, never changed)
    out_sizes: dict[str, int] | None = None
    pinned_out: PinnedOutSlot | None = None
    error: BaseException | None = None
    #: outputs ORT allocated in this run, by name (NOTE [ data-dependent outputs ])
    allocated: dict[str, Any] | None = None
    ran: bool = False  # the run has happened (it has on CUDA once launch returns)
    run_issued: bool = False  # the run is enqueued; the d2h may not be yet (NOTE [ inline issue ])
    #: host seconds enqueuing the run took, while the caller's thread measures (NOTE [ auto issuing ])
    run_issue_s: float = 0.0
    drained_allocated: bool = False  # the d2h copied ``allocated`` into pinned-out
    #: the batch's row shapes where they are not the slots' (NOTE [ free dims ]):
    #: bound at these, every output left for ORT to allocate
    row_shapes: RowShapes | None = None
    #: the batch's device arrays, referenced until it is delivered (NOTE [ device arrays ])
    device_feeds: dict[str, DeviceArray] | None = None
    #: the caller's arrays its run binds instead of the slot's inputs (NOTE [ borrowed inputs ])
    borrowed: dict[str, np.ndarray] | None = None


@dataclass(frozen=True)
class Outgrown:
    """The batch the slots could not hold, as the source gave it checked, and a
    layout that holds it: the run ends before it (NOTE [ free dims ])."""

    index: int
    feeds: dict[str, np.ndarray]
    layout: Layout


@dataclass(frozen=True)
class _Failure:
    error: BaseException


_GRAPH_RUN_FAILED = (
    "{} (with CUDA graphs every output is preallocated at the shape the probe run gave: a model whose "
    "output shapes depend on the data cannot run as a graph; run it with cuda_graph off)"
)
_END = object()
CLOSED_MID_RUN = "the pipeline was closed while this map() was running"

Take = Callable[[int, int, dict[str, np.ndarray]], T]
#: NOTE [ filled slots ]: ``fill(index, slot)`` writes batch ``index`` into the
#: pinned-in arrays of ``slot`` and returns the rows it wrote, or None at the end
Fill = Callable[[int, dict[str, np.ndarray]], int | None]
#: makes a run's ``take`` from the run's host copier (NOTE [ parallel host copies ])
MakeTake = Callable[[HostCopier], Take[T]]


def _as_laid_out(array: np.ndarray) -> bool:
    """The array's bytes are those of its slot: C order, native byte order (NOTE [ inline h2d ])."""
    return array.flags.c_contiguous and array.dtype.isnative


def _rows_written(value: object, index: int, batch_size: int) -> int:
    """What a ``fill`` returned, as rows (0: the end), or why it cannot be (NOTE [ filled slots ])."""
    if value is None:
        return 0
    try:
        rows = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        rows = -1
    if isinstance(value, bool) or not 0 <= rows <= batch_size:
        raise PipelineInputError(
            "fill() returns the rows it wrote into the slot, or None (or 0) when there are no more",
            batch_index=index,
            expected=f"an int in 0..{batch_size} or None",
            got=repr(value),
        )
    return rows


@dataclass(frozen=True)
class CopiedOutputs(Generic[T]):
    """A ``MakeTake`` whose take copies every output out of the slot, then hands
    ``then(index, rows, outputs)`` on (None: the outputs themselves).

    NOTE [ outputs handed over ]: a result must outlive its pinned-out slot,
    which the next batches' d2h write into, so it is copied out of it - a
    second pass over every output byte after the d2h's.  Where page-locked
    memory is as cheap as any (``Device.cheap_pinned``: the host device) the
    engine skips that copy for a take of this kind: it hands the slot's own
    arrays on and gives the slot new ones of the same sizes before it is
    reused (16 MB batches through identity on the CPU backend: 1.1 ms a batch
    less).  On CUDA, where ``cudaHostAlloc`` costs milliseconds, the copy
    stays.  An output that is not in the slot (one ORT allocated and the run
    found data-dependent) is copied as before."""

    then: Callable[[int, int, dict[str, np.ndarray]], T] | None = None

    def __call__(self, copier: HostCopier) -> Take[T]:
        copied = copier.copied

        def take(index: int, rows: int, views: dict[str, np.ndarray]) -> T:
            return self.passed_on(index, rows, {name: copied(view) for name, view in views.items()})

        return take

    def passed_on(self, index: int, rows: int, outputs: dict[str, np.ndarray]) -> T:
        """What the take gives for outputs that outlive their slot."""
        return cast(T, outputs) if self.then is None else self.then(index, rows, outputs)


#: the default ``take``: results that stay valid after the slot is reused
copy_outputs: CopiedOutputs[dict[str, np.ndarray]] = CopiedOutputs()


@dataclass(frozen=True)
class RunConfig:
    depth: int
    timing: bool
    poll_s: float
    #: False: the consumer's thread issues every stage (NOTE [ inline issue ]);
    #: "auto": it does until threads would pay (NOTE [ auto issuing ])
    stage_threads: bool | Literal["auto"] = True
    #: threads that share a large host copy (NOTE [ parallel host copies ])
    copy_threads: int = 1


class EngineRun(Generic[T]):
    """One pass of a source through the engine; iterate :meth:`results` once."""

    def __init__(
        self,
        *,
        device: Device,
        streams: Streams,
        session: OrtSession,
        rings: Rings,
        checker: InputChecker,
        source: Iterable[object],
        config: RunConfig,
        make_take: MakeTake[T],
        on_batch: Callable[[BatchTrace], None] | None = None,
        on_hand_over: Callable[[int], None] | None = None,
        first_index: int = 0,
        fill: Fill | None = None,
        user_source: object = None,
        windows: HostWindows | None = None,
    ) -> None:
        self._device = device
        self._streams = streams
        self._session = session
        self._rings = rings
        self._layout: Layout = rings.layout
        self._checker = checker
        self._iterator = iter(source)
        self._fill = fill  # NOTE [ filled slots ]: batches written into the slots, not taken from source
        #: NOTE [ registered windows ]: the source's batches lie in registered memory while it is live
        self._windows = windows
        #: the caller's own iterator, told when this run stops reading it (NOTE [ interrupted feed ])
        self._user_source = user_source
        self._config = config
        self._copier = HostCopier(config.copy_threads)
        self._h2d_inline = streams.h2d.copies_inline  # NOTE [ inline h2d ]
        #: NOTE [ borrowed inputs ]: inline batches are bound, not copied (until a hand-over)
        self._borrow = (
            streams.h2d.copies_inline
            and streams.compute.copies_inline
            and config.stage_threads is not True
            and not rings.layout.preprocess
        )
        self._take = make_take(self._copier)
        #: NOTE [ outputs handed over ]: the slot's arrays are the results, the slot gets new ones
        self._handing_outputs: CopiedOutputs[T] | None = (
            make_take if isinstance(make_take, CopiedOutputs) and device.cheap_pinned else None
        )
        self._on_batch = on_batch
        self._on_hand_over = on_hand_over
        self._advisor = HandOverAdvisor() if config.stage_threads == "auto" else None
        self._d2h_wait_s = 0.0  # the consumer's last wait for a d2h (no side of host work)
        self._stop = threading.Event()
        self._lifecycle = threading.Lock()  # orders starting threads against close()
        # Unbounded C queues are enough: the rings bound how far a stage can run
        # ahead (a batch needs a device slot to enter _work_q and a pinned-out
        # slot to enter _result_q), and SimpleQueue hands off several times
        # faster than queue.Queue.
        self._work_q: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._result_q: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._closed = False
        self._coefficients = {name: how.coefficients() for name, how, _ in rings.layout.preprocess}
        #: (rows, row shapes) -> (bytes per input, total)
        self._in_nbytes: dict[tuple[int, RowShapes | None], tuple[dict[str, int], int]] = {}
        self._out_plans: dict[int, tuple[dict[str, tuple[np.dtype, Shape]], dict[str, int], int]] = {}
        self._threads: list[threading.Thread] = []
        self._first_index = first_index
        #: the out_layout of a batch of free shape: every output, its shape to come
        self._all_outputs = frozenset(session.output_names)
        self._unplanned: dict[str, tuple[np.dtype, Shape]] = {spec.name: (spec.dtype, ()) for spec in session.outputs}
        #: set when the run ended at a batch its slots could not hold
        self.outgrown: Outgrown | None = None
        #: :meth:`stop_taking` was called: the producer takes no batch from the source
        self._stop_taking = False
        #: the index of the first batch not taken, once the run stopped taking batches
        self.stopped_at: int | None = None
        if config.stage_threads is True:
            self._start_stage_threads(self._iterator, first_index)

    # -- plumbing -----------------------------------------------------------
    def _start_stage_threads(self, iterator: Iterator[object], first_index: int) -> bool:
        """Start the producer and the execute thread; False if the run was closed first.

        Under the lock that ``close()`` sets the stop flag under, so a thread
        either starts before close() joins the threads or not at all."""
        with self._lifecycle:
            if self._stop.is_set():
                return False
            self._start_thread("producer", lambda: self._produce(iterator, first_index), "stage")
            self._start_thread("execute", self._execute, "compute")
            return True

    def _start_thread(self, name: str, loop: Callable[[], None], stage: str) -> None:
        thread = threading.Thread(target=self._guarded(loop, stage), name=THREAD_PREFIX + name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _guarded(self, loop: Callable[[], None], stage: str) -> Callable[[], None]:
        def run() -> None:
            try:
                self._device.activate()
                loop()
            except BaseException as exc:  # noqa: BLE001 - a bug in a loop still reaches the consumer
                self._put(self._result_q, _Failure(PipelineStageError(stage, None, exc)))

        return run

    def _put(self, target: queue.SimpleQueue[object], item: object) -> bool:
        if self._stop.is_set():
            return False
        target.put(item)
        return True

    def _get(self, source: queue.SimpleQueue[object]) -> object | None:
        while True:
            try:
                return source.get(timeout=self._config.poll_s)
            except queue.Empty:
                if self._stop.is_set():
                    return None

    def _wait_event(self, event: Event) -> bool:
        while not event.synchronize(self._config.poll_s):
            if self._stop.is_set():
                return False
        return True

    def stop_taking(self) -> None:
        """End the run at a batch boundary: the batches taken so far are delivered,
        no more are taken from the source, and :attr:`stopped_at` says where to go
        on from (NOTE [ auto issuing ]: the stage threads handing back)."""
        self._stop_taking = True

    # -- producer -----------------------------------------------------------
    def _produce(self, iterator: Iterator[object], index: int) -> None:
        while True:
            item = self._produce_one(iterator, index)
            if item is None or not self._put(self._work_q, item) or not isinstance(item, _Work):
                return
            index += 1

    def _produce_one(self, iterator: Iterator[object], index: int) -> object | None:
        """Batch ``index`` taken from the source, checked, staged and sent h2d:
        its ``_Work``, or ``_END``, a ``_Failure``, or None once stopped."""
        if self._stop.is_set():
            return None
        if self._stop_taking:
            self.stopped_at = index
            return _END
        if self._fill is not None:
            return self._produce_filled(index)
        t_ask = time.perf_counter()
        try:
            batch = next(iterator)
        except StopIteration:
            return _END
        except Exception as exc:  # noqa: BLE001 - the source's failure is the user's to see
            return _Failure(PipelineStageError("source", index, exc))
        if self._stop.is_set():  # closed while the source was busy: touch no buffer
            return None
        t_submit = time.perf_counter()
        try:
            feeds = self._checker.feeds(index, batch)
            rows, shapes = self._layout.rows_of(index, feeds)
        except PipelineInputError as exc:
            return _Failure(exc)
        except SlotsOutgrown as grown:
            return Outgrown(index, feeds, grown.layout)
        try:
            return self._stage_and_send(index, feeds, rows, shapes, t_submit, t_submit - t_ask)
        except Exception as exc:  # noqa: BLE001
            return _Failure(PipelineStageError("stage", index, exc))

    def _stage_and_send(
        self,
        index: int,
        feeds: dict[str, np.ndarray],
        rows: int,
        shapes: RowShapes | None,
        t_submit: float,
        source_s: float,
    ) -> _Work | None:
        bound = self._layout.bound_rows(rows)
        t_wait = time.perf_counter()
        on_device = None
        for value in feeds.values():
            if type(value) is DeviceArray:  # NOTE [ device arrays ]: copied device to device, not staged
                on_device = {name: v for name, v in feeds.items() if type(v) is DeviceArray}
                feeds = {name: v for name, v in feeds.items() if name not in on_device}
                break
        registered = self._windows is not None and self._windows.live and on_device is None
        if not feeds or (
            (self._h2d_inline or registered)
            and shapes is None
            and bound == rows
            and all(map(_as_laid_out, feeds.values()))
        ):
            # NOTE [ inline h2d ], NOTE [ registered windows ]: the copy reads the batch
            # itself (or no input is on the host)
            times = (t_submit, source_s, t_wait, 0.0, 0.0)
            work = self._send(index, feeds, None, rows, bound, shapes, times, on_device)
            if registered and work is not None:
                self._windows.copied(work.trace.events.h2d_done)  # type: ignore[union-attr]
            return work
        pinned = self._rings.pinned_in[index % len(self._rings.pinned_in)]
        if pinned.last_copy is not None and not self._wait_event(pinned.last_copy):
            return None
        t_stage = time.perf_counter()
        self._stage(pinned, feeds, rows, bound, shapes)
        t_staged = time.perf_counter()
        times = (t_submit, source_s, t_staged, t_staged - t_stage, t_stage - t_wait)
        return self._send(index, pinned.arrays, pinned, rows, bound, shapes, times, on_device)

    def _send(
        self,
        index: int,
        sources: dict[str, np.ndarray],
        pinned: PinnedInSlot | None,
        rows: int,
        bound: int,
        shapes: RowShapes | None,
        times: tuple[float, float, float, float, float],
        on_device: dict[str, DeviceArray] | None = None,
    ) -> _Work | None:
        """The h2d of a batch whose ``bound`` rows are in ``sources`` (a pinned-in
        slot's arrays, or the batch itself), once a device slot is free; its
        inputs ``on_device`` copied device to device (NOTE [ device arrays ]).
        ``times``: submitted, source seconds, staged, stage seconds, waits so far."""
        slot = self._rings.device_slots.acquire(self._stop, self._config.poll_s)
        if slot is None:
            return None
        t_slot = time.perf_counter()
        t_submit, source_s, t_staged, stage_s, wait_s = times
        events = BatchEvents.new(self._device, self._config.timing)
        link = self._streams.h2d
        nbytes, total_bytes = self._input_nbytes(bound, shapes)
        # the batch itself, not staged, on the CPU backend: its run reads it (NOTE [ borrowed inputs ])
        borrowed = sources if pinned is None and on_device is None and self._borrow else None
        with self._device.annotate("h2d", index):
            if slot.inputs_free is not None:
                link.wait_event(slot.inputs_free)
            if events.h2d_start is not None:
                events.h2d_start.record(link)
            if borrowed is not None:
                total_bytes = 0
            elif on_device is None:
                for name, size in nbytes.items():
                    link.copy_h2d(slot.inputs[name], sources[name], size)
            else:
                total_bytes = self._send_mixed(link, slot, sources, nbytes, on_device)
            events.h2d_done.record(link)
        if pinned is not None:
            pinned.last_copy = events.h2d_done
        trace = BatchTrace(
            index=index,
            rows=rows,
            bound_rows=bound,
            h2d_bytes=total_bytes,
            t_submit=t_submit,
            source_s=source_s,
            t_staged=t_staged,
            stage_s=stage_s,
            wait_in_s=wait_s + (t_slot - t_staged),
            events=events,
        )
        return _Work(trace=trace, slot=slot, row_shapes=shapes, device_feeds=on_device, borrowed=borrowed)

    @staticmethod
    def _send_mixed(
        link: Stream,
        slot: DeviceSlot,
        sources: dict[str, np.ndarray],
        nbytes: dict[str, int],
        on_device: dict[str, DeviceArray],
    ) -> int:
        """See NOTE [ device arrays ]: the host inputs copied h2d, the device ones
        device to device once their producers' streams are waited for, padding
        rows zeroed; the bytes that crossed the host link."""
        for stream in {array.stream for array in on_device.values()}:
            link.wait_producer(stream)
        crossed = 0
        for name, size in nbytes.items():
            array = on_device.get(name)
            if array is None:
                link.copy_h2d(slot.inputs[name], sources[name], size)
                crossed += size
                continue
            link.copy_d2d(slot.inputs[name], array, array.nbytes)
            if size > array.nbytes:
                link.zero(slot.inputs[name], array.nbytes, size - array.nbytes)
        return crossed

    def _produce_filled(self, index: int) -> object | None:
        """See NOTE [ filled slots ]: the user's ``fill`` writes batch ``index``
        straight into its pinned-in slot, once that slot's last h2d is done (the
        host guard of NOTE [ buffer reuse ]); then it is sent as if staged."""
        assert self._fill is not None
        layout = self._layout
        pinned = self._rings.pinned_in[index % len(self._rings.pinned_in)]
        t_wait = time.perf_counter()
        if pinned.last_copy is not None and not self._wait_event(pinned.last_copy):
            return None
        views = {name: pinned.view(name, dtype, (layout.batch_size, *row)) for name, dtype, row in layout.row_shapes}
        t_ask = time.perf_counter()
        try:
            rows = self._fill(index, views)
        except Exception as exc:  # noqa: BLE001 - the fill's failure is the user's to see
            return _Failure(PipelineStageError("source", index, exc))
        if self._stop.is_set():
            return None
        t_submit = time.perf_counter()
        try:
            rows = _rows_written(rows, index, layout.batch_size)
        except PipelineInputError as exc:
            return _Failure(exc)
        if rows == 0:
            return _END
        bound = layout.bound_rows(rows)
        if bound > rows:
            for view in views.values():
                view[rows:bound] = 0  # padding rows: a fixed batch dim, or static shapes
        times = (t_submit, t_submit - t_ask, t_submit, 0.0, t_ask - t_wait)
        try:
            return self._send(index, pinned.arrays, pinned, rows, bound, None, times)
        except Exception as exc:  # noqa: BLE001
            return _Failure(PipelineStageError("stage", index, exc))

    def _stage(
        self, pinned: PinnedInSlot, feeds: dict[str, np.ndarray], rows: int, bound: int, shapes: RowShapes | None
    ) -> None:
        """The host copy of a batch into its pinned-in slot, padding rows zeroed
        (``feeds``: its host inputs; NOTE [ device arrays ] are copied on the device)."""
        layout, copy = self._layout, self._copier.copy
        for name, dtype, row in layout.row_shapes if shapes is None else layout.rows_for(shapes):
            if name not in feeds:
                continue
            # a free shape may be seen once: its view is not cached
            view = (
                pinned.view(name, dtype, (bound, *row))
                if shapes is None
                else typed_view(pinned.arrays[name], dtype, (bound, *row))
            )
            if bound > rows:
                copy(view[:rows], feeds[name])
                view[rows:] = 0
            else:
                copy(view, feeds[name])

    def _input_nbytes(self, rows: int, shapes: RowShapes | None) -> tuple[dict[str, int], int]:
        key = (rows, shapes)
        found = self._in_nbytes.get(key)
        if found is None:
            sizes = self._layout.input_nbytes(rows, shapes)
            found = self._in_nbytes[key] = (sizes, sum(sizes.values()))
        return found

    # -- execute (compute + enqueue d2h) -----------------------------------
    def _execute(self) -> None:
        while True:
            item = self._get(self._work_q)
            if item is None:
                return
            if isinstance(item, _Work):
                item = self._execute_one(item)
                if item is None:
                    return
            # _END or a _Failure: passed on in order, and this thread is done
            if not self._put(self._result_q, item) or not isinstance(item, _Work):
                return

    def _execute_one(self, work: _Work) -> object | None:
        """Run (unless already enqueued) and d2h of one staged batch: the work,
        a ``_Failure``, or None once stopped."""
        try:  # one frame for both halves: this is the per-batch path
            if not work.run_issued:
                self._issue_run(work)
            return work if self._issue_drain(work) else None
        except Exception as exc:  # noqa: BLE001
            return _Failure(PipelineStageError("compute", work.trace.index, exc))

    def _run_one(self, work: _Work) -> object | None:
        """The run of one staged batch enqueued (its device slot handed back),
        its d2h left for later (NOTE [ inline issue ]): the work, or a ``_Failure``."""
        try:
            self._issue_run(work)
        except Exception as exc:  # noqa: BLE001
            return _Failure(PipelineStageError("compute", work.trace.index, exc))
        return work

    def _issue_run(self, work: _Work) -> None:
        slot, trace = work.slot, work.trace
        events = trace.events
        compute = self._streams.compute
        compute.wait_event(events.h2d_done)
        if slot.outputs_free is not None:
            compute.wait_event(slot.outputs_free)
        work.out_layout, work.out_sizes, trace.d2h_bytes = self._outputs_for(work)
        with self._device.annotate("run", trace.index):
            if events.run_start is not None:
                events.run_start.record(compute)
            self._preprocess(slot, trace.bound_rows, work.row_shapes)
            compute.launch(lambda: self._run_bound(slot, work))
            events.run_done.record(compute)
        work.run_issued = True
        slot.inputs_free = events.run_done
        # The copy stream waits on run_done before it writes the inputs again; the
        # outputs' guard (outputs_free) is set when this batch's d2h is enqueued,
        # which the caller's thread and the execute thread both do before they
        # enqueue the slot's next run.
        self._rings.device_slots.release(slot)

    def _issue_drain(self, work: _Work) -> bool:
        slot, trace = work.slot, work.trace
        events = trace.events
        out_sizes = work.out_sizes
        assert out_sizes is not None  # planned when the run was enqueued
        # the d2h needs this run's shapes (NOTE [ data-dependent outputs ])
        needs_shapes = not work.ran and (self._session.dynamic_outputs or work.row_shapes is not None)
        if needs_shapes and not self._wait_event(events.run_done):
            return False

        pinned_out = self._rings.pinned_out.acquire(self._stop, self._config.poll_s)
        if pinned_out is None:
            return False
        work.pinned_out = pinned_out
        sources: dict[str, DeviceBuffer] = slot.outputs
        if work.allocated is not None:
            out_sizes, sources = self._plan_allocated(work, pinned_out)
        drain = self._streams.d2h
        with self._device.annotate("d2h", trace.index):
            drain.wait_event(events.run_done)
            if events.d2h_start is not None:
                events.d2h_start.record(drain)
            for name, size in out_sizes.items():
                if size:
                    drain.copy_d2h(pinned_out.arrays[name], sources[name], size)
            events.d2h_done.record(drain)
        slot.outputs_free = events.d2h_done
        return True

    def _plan_allocated(self, work: _Work, pinned_out: PinnedOutSlot) -> tuple[dict[str, int], dict[str, DeviceBuffer]]:
        """Sizes and sources of the d2h when ORT allocated some outputs: their
        shapes are this run's, their memory ORT's; the pinned-out slot is
        grown to hold them."""
        assert work.allocated is not None
        slot = work.slot
        layout = dict(work.out_layout)  # the plan is shared by batches of this size: copy
        sizes: dict[str, int] = {}
        sources: dict[str, DeviceBuffer] = {}
        for name, (dtype, shape) in work.out_layout.items():
            value = work.allocated.get(name)
            if value is None:
                sizes[name], sources[name] = nbytes_of(dtype, shape), slot.outputs[name]
                continue
            shape = tuple(value.shape())
            layout[name] = (dtype, shape)
            sizes[name] = nbytes = nbytes_of(dtype, shape)
            sources[name] = self._device.ort_output_buffer(value, nbytes)
            pinned_out.fit(name, nbytes, self._device)
        work.out_layout = layout
        work.drained_allocated = True
        work.trace.d2h_bytes = sum(sizes.values())
        return sizes, sources

    def _preprocess(self, slot: DeviceSlot, rows: int, shapes: RowShapes | None) -> None:
        """Device-side conversion of sent inputs into the model's, on the compute stream."""
        if not self._layout.preprocess:
            return
        sent = self._layout.input_shapes(rows, shapes)
        model = self._layout.model_inputs(rows, shapes)
        for name, how, model_dtype in self._layout.preprocess:
            mul, add = self._coefficients[name]
            op = NormalizeOp(
                src=slot.inputs[name],
                src_dtype=np.dtype(how.source_dtype),
                src_shape=sent[name],
                dst=slot.model_inputs[name],
                dst_dtype=model_dtype,
                dst_shape=model[name][1],
                mul=mul,
                add=add,
                to_nchw=how.to_nchw,
            )
            self._device.normalize(self._streams.compute, op)

    def _outputs_for(self, work: _Work) -> tuple[dict[str, tuple[np.dtype, Shape]], dict[str, int], int]:
        """dtype and shape of every output at this batch's bound rows, their bytes and the total."""
        if work.row_shapes is not None:  # ORT allocates them all: shapes once it has run
            return self._unplanned, {}, 0
        rows = work.trace.bound_rows
        found = self._out_plans.get(rows)
        if found is not None:
            return found
        layout = (
            self._rings.output_layout
            if rows == self._layout.batch_size
            else self._session.output_layout(self._layout.model_shapes(rows))
        )
        sizes = {name: nbytes_of(dtype, shape) for name, (dtype, shape) in layout.items()}
        for name, need in sizes.items():
            have = work.slot.outputs[name].nbytes  # every slot holds a full batch
            if need > have:
                raise PipelineError(
                    f"output {name!r} for {rows} rows needs {need} bytes, more than the {have} "
                    f"of a full batch of {self._layout.batch_size}"
                )
        found = self._out_plans[rows] = (layout, sizes, sum(sizes.values()))
        return found

    def _bind(self, slot: DeviceSlot, work: _Work) -> None:
        shapes = work.row_shapes
        allocated = self._session.dynamic_outputs if shapes is None else self._all_outputs
        borrowed = work.borrowed
        key = (work.trace.bound_rows, shapes, allocated, borrowed is None)
        if slot.bound_key == key:
            if allocated:  # a fresh allocation at this run's shape (NOTE [ data-dependent outputs ])
                self._session.bind_allocated(slot.binding, allocated)
            if borrowed is not None:  # this batch's own arrays (NOTE [ borrowed inputs ])
                self._session.bind_host_inputs(slot.binding, borrowed)
            return  # steady state: same pointers, same shapes, no rebinding
        model = self._layout.model_inputs(work.trace.bound_rows, shapes)
        inputs = {
            name: (slot.model_inputs.get(name, slot.inputs[name]), dtype, shape)
            for name, (dtype, shape) in model.items()
        }
        inputs.update(self._rings.constants)
        outputs = {
            name: None if name in allocated else (slot.outputs[name], dtype, shape)
            for name, (dtype, shape) in work.out_layout.items()
        }
        slot.binding.clear_binding_inputs()
        slot.binding.clear_binding_outputs()
        self._session.bind(slot.binding, inputs, outputs)
        if borrowed is not None:
            self._session.bind_host_inputs(slot.binding, borrowed)
        slot.bound_key = key

    def _run_bound(self, slot: DeviceSlot, work: _Work) -> None:
        # Runs in the compute stream's order.
        # NOTE [ bind in stream order ]: the
        # binding is (re)pointed here, not by the enqueuing thread, because on a
        # host stream with a worker an earlier run of this slot may still be
        # queued and must see the shapes it was enqueued with.
        session = self._session
        try:
            self._bind(slot, work)
            try:
                session.run_bound(slot.binding, slot.run_options)
            except Exception as exc:
                if session.cuda_graph:  # NOTE [ CUDA graphs ]: no output ORT allocates
                    raise ModelError(_GRAPH_RUN_FAILED.format(exc)) from exc
                if work.row_shapes is not None:  # nothing was preallocated: nothing to retry
                    raise
                work.allocated = self._rerun_allocating(slot, work, exc)  # maybe a data-dependent shape
            else:
                if work.row_shapes is not None or session.dynamic_outputs:
                    work.allocated = self._allocated_values(slot, work)
        except Exception as exc:  # noqa: BLE001 - reported for this batch by the consumer
            work.error = exc
        finally:
            work.ran = True
            work.borrowed = None  # read: the caller's arrays are not held until delivery

    def _allocated_values(self, slot: DeviceSlot, work: _Work) -> dict[str, Any]:
        """ORT's values of the outputs it allocated in this run (all, for a free shape)."""
        values = self._session.bound_values(slot.binding)
        if work.row_shapes is not None:
            return values
        return {name: values[name] for name in self._session.dynamic_outputs}

    def _rerun_allocating(self, slot: DeviceSlot, work: _Work, error: Exception) -> dict[str, Any]:
        """See NOTE [ data-dependent outputs ]: after a failed run, the same run with
        every output allocated by ORT.  If it succeeds and some outputs came out
        in shapes other than planned, those are data-dependent; otherwise the
        first failure stands."""
        session = self._session
        names = session.output_names
        if session.dynamic_outputs.issuperset(names):
            raise error  # ORT allocated every output already: nothing to retry
        slot.binding.clear_binding_outputs()
        session.bind_allocated(slot.binding, names)
        slot.bound_key = None  # the slot's next batch binds its buffers again
        if not self._retried(slot):
            raise error
        values = session.bound_values(slot.binding)
        changed = [name for name in names if tuple(values[name].shape()) != work.out_layout[name][1]]
        if not changed:
            raise error
        session.note_dynamic(changed)
        return values

    def _retried(self, slot: DeviceSlot) -> bool:
        try:
            self._session.run_bound(slot.binding, slot.run_options)
        except Exception:  # noqa: BLE001 - the first failure is the one reported
            return False
        return True

    # -- consumer -----------------------------------------------------------
    def results(self) -> Iterator[T]:
        """Outputs in submission order; raises the first failure after earlier results."""
        try:
            items = self._issued_inline() if self._config.stage_threads is not True else self._from_threads()
            for item in items:
                if item is _END:
                    return
                if isinstance(item, _Failure):
                    raise item.error
                if isinstance(item, Outgrown):  # every earlier batch is delivered: the caller regrows
                    self.outgrown = item
                    return
                assert isinstance(item, _Work)
                yield self._deliver(item)
            raise PipelineClosedError(CLOSED_MID_RUN)
        finally:
            self.close()

    def _from_threads(self) -> Iterator[object]:
        while not self._closed:
            yield self._next_result()

    def _next_result(self) -> object:
        while True:
            try:
                return self._result_q.get(timeout=self._config.poll_s)
            except queue.Empty:
                if not any(thread.is_alive() for thread in self._threads) and self._result_q.empty():
                    raise PipelineError("the pipeline's threads ended without a result (internal error)") from None

    def _issued_inline(self) -> Iterator[object]:
        """The caller's thread issues every stage itself.

        NOTE [ inline issue ]: with no stage threads the caller's thread stages,
        runs and drains each batch itself, up to ``depth`` batches ahead of the
        one it delivers, and stages one batch more before it waits for that one,
        so the next h2d overlaps the wait (at depth 1 too, as with threads).  On
        a GPU every step only enqueues, so the streams still overlap; on the
        host device nothing overlaps, but no batch pays for a hand-off between
        threads.  The staged batch holds a pinned-in and a device slot, never a
        pinned-out one; at most ``depth - 1`` batches hold a pinned-out slot
        when the next is drained, so no acquire here waits on the consumer.

        Running ahead: where the streams work while the caller waits (CUDA, a
        host device with a link model), the staged batch's run is enqueued
        before the wait too, and one more batch is staged.  Its d2h waits for a
        pinned-out slot, so it is enqueued after the wait, when the oldest
        batch's slot is free: there is a run's time of slack before the d2h
        stream gets to it.  Without this, at depth 2 with balanced stages
        the next h2d and run were enqueued only once the oldest d2h was done,
        just when they should start, and every batch paid the caller's wake-up
        and host work on the streams' critical path (measured on the emulated
        link: 0.86 of the bound against 0.90 with stage threads).  At most one
        batch is run and not drained, and it is drained before any other batch
        is run, so a slot's next run is always enqueued after the d2h that
        guards its outputs.  On inline streams (the CPU backend) nothing
        overlaps the wait: running ahead would only keep results longer.  Nor
        at depth 1: there the single device slot's run already waits for the
        oldest batch's d2h, so the run ahead's d2h would be late instead of its
        run (measured: 2-6 % fewer items/s, twice the latency, copy-bound), and
        staging the batch after it waits on the host for the single pinned-in
        slot's h2d."""
        self._device.activate()
        iterator = self._iterator
        advisor = self._advisor
        run_ahead = self._config.depth > 1 and not self._streams.compute.copies_inline
        pending: collections.deque[object] = collections.deque()  # run and drained, or END / a failure
        staged: object | None = None  # produced (h2d enqueued), not yet run
        ran: _Work | None = None  # run enqueued, not yet drained (running ahead)
        index, ended = self._first_index, False
        while not self._closed:
            measuring = advisor is not None and advisor.measuring
            produce = self._produce_measured if measuring else self._produce_one
            execute = self._execute_measured if measuring else self._execute_one
            while not ended and len(pending) < self._config.depth:
                if ran is not None:
                    item, ran = execute(ran), None  # its run is enqueued: only the d2h is left
                else:
                    item = staged if staged is not None else produce(iterator, index)
                    staged = None
                    if isinstance(item, _Work):
                        item = execute(item)
                        index += 1
                if item is None:  # closed meanwhile
                    return
                ended = not isinstance(item, _Work)
                pending.append(item)
            if not pending:
                return
            if not ended and staged is None:
                staged = produce(iterator, index)
                if staged is None:
                    return
            if run_ahead and ran is None and isinstance(staged, _Work):
                item = self._run_measured(staged) if measuring else self._run_one(staged)
                staged = None
                index += 1
                if isinstance(item, _Work):
                    ran = item
                    staged = produce(iterator, index)
                    if staged is None:
                        return
                else:  # its failure, delivered after the batches before it
                    pending.append(item)
                    ended = True
            if not measuring:
                if advisor is not None:
                    advisor.rested()
                yield pending.popleft()
                continue
            assert advisor is not None
            if isinstance(staged, _Work) and advisor.hand_over():
                yield from self._hand_over([ran, staged] if ran is not None else [staged], pending)
                return
            t_yield = time.perf_counter()
            yield pending.popleft()
            advisor.add("consume", time.perf_counter() - t_yield - self._d2h_wait_s)

    def _hand_over(self, issued: list[_Work], pending: collections.deque[object]) -> Iterator[object]:
        """See NOTE [ auto issuing ]: the stage threads take over from the caller's
        thread.  The batches it issued but did not drain (one run ahead, if
        any, whose run the execute thread does not repeat, then the staged
        one) go first into the execute thread's queue and the producer
        resumes the source at the batch after them, so order holds; the
        batches already drained are delivered from ``pending``, then the rest
        comes from the threads.  The rings bound the threads as always: the
        execute thread waits for the pinned-out slots that ``pending`` holds
        until the consumer releases them."""
        self._borrow = False  # the producer thread takes batches ahead of their runs
        for work in issued:
            self._copy_borrowed(work)
            self._work_q.put(work)
        last = issued[-1].trace.index
        if not self._start_stage_threads(self._iterator, last + 1):
            return  # closed meanwhile: results() says so
        if self._on_hand_over is not None:
            self._on_hand_over(last)
        yield from pending
        yield from self._from_threads()

    def _copy_borrowed(self, work: _Work) -> None:
        """A batch that was to be bound where it lies copied into its slot after all
        (NOTE [ borrowed inputs ]): its run comes after the source is asked again."""
        if work.borrowed is None:
            return
        link = self._streams.h2d  # inline: the copy is done when it returns
        for name, array in work.borrowed.items():
            link.copy_h2d(work.slot.inputs[name], array, array.nbytes)
        work.trace.h2d_bytes = sum(array.nbytes for array in work.borrowed.values())
        work.borrowed = None

    def _produce_measured(self, iterator: Iterator[object], index: int) -> object | None:
        start = time.perf_counter()
        item = self._produce_one(iterator, index)
        spent = time.perf_counter() - start
        if isinstance(item, _Work):
            spent -= item.trace.wait_in_s  # waiting for a free buffer is no side of host work
        assert self._advisor is not None
        self._advisor.add("produce", spent)
        return item

    def _execute_measured(self, work: _Work) -> object | None:
        start = time.perf_counter()
        item = self._execute_one(work)
        assert self._advisor is not None
        # a batch run ahead paid for its run when it was enqueued: one batch, one figure
        self._advisor.add("execute", time.perf_counter() - start + work.run_issue_s)
        return item

    def _run_measured(self, work: _Work) -> object | None:
        start = time.perf_counter()
        item = self._run_one(work)
        work.run_issue_s = time.perf_counter() - start
        return item

    def _deliver(self, work: _Work) -> T:
        trace = work.trace
        t_wait = time.perf_counter()
        while not trace.events.d2h_done.synchronize(self._config.poll_s):
            # our own polled wait: the consumer is the thread the user can interrupt
            if self._closed:
                raise PipelineClosedError(CLOSED_MID_RUN)
        self._d2h_wait_s = time.perf_counter() - t_wait
        if work.error is not None:
            raise PipelineStageError("compute", trace.index, work.error) from work.error
        pinned_out = work.pinned_out
        assert pinned_out is not None
        if work.allocated is None:  # steady state: views made once per shape, padding cut off
            views = {}
            for name, (dtype, shape) in work.out_layout.items():
                view = pinned_out.view(name, dtype, shape)
                if trace.bound_rows != trace.rows and view.ndim and view.shape[0] == trace.bound_rows:
                    view = view[: trace.rows]
                views[name] = view
        else:
            views = self._allocated_views(work, pinned_out)
        t_take = time.perf_counter() if self._on_batch is not None else 0.0
        try:
            result: T
            if self._handing_outputs is not None:  # a CopiedOutputs' results, without its copies
                result = self._handing_outputs.passed_on(trace.index, trace.rows, self._handed_over(pinned_out, views))
            else:
                result = self._take(trace.index, trace.rows, views)
        finally:
            self._rings.pinned_out.release(pinned_out)
        if self._on_batch is not None:
            trace.t_done = time.perf_counter()
            trace.take_s = trace.t_done - t_take
            self._on_batch(trace)
        return result

    def _handed_over(self, pinned_out: PinnedOutSlot, views: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``views`` as results that outlive the slot (NOTE [ outputs handed over ]): those of
        the slot's arrays as they are, the slot given new arrays for them; any other copied."""
        results, handed = {}, []
        for name, view in views.items():
            if np.may_share_memory(view, pinned_out.arrays[name]):
                results[name] = view
                handed.append(name)
            else:  # in memory ORT allocated for this run
                results[name] = self._copier.copied(view)
        pinned_out.renew(handed, self._device)
        return results

    def _allocated_views(self, work: _Work, pinned_out: PinnedOutSlot) -> dict[str, np.ndarray]:
        """The outputs of a batch some of whose outputs ORT allocated: views of
        its pinned-out slot, padding rows cut off all but the data-dependent ones."""
        trace, allocated = work.trace, work.allocated
        assert allocated is not None
        dynamic = self._session.dynamic_outputs
        views = {}
        for name, (dtype, shape) in work.out_layout.items():
            if name not in allocated:
                view = pinned_out.view(name, dtype, shape)
            elif work.drained_allocated:
                view = typed_view(pinned_out.arrays[name], dtype, shape)  # a new shape each batch: not cached
            else:  # found dynamic in this very run, after its d2h was planned
                view = allocated[name].numpy()
            cut = trace.bound_rows != trace.rows and name not in dynamic
            if cut and view.ndim and view.shape[0] == trace.bound_rows:
                view = view[: trace.rows]  # padding rows of a fixed-batch model
            views[name] = view
        return views

    # -- shutdown -----------------------------------------------------------
    def close(self) -> None:
        """Stop both threads, join them and the copy threads, and let in-flight device work finish."""
        with self._lifecycle:
            if self._closed:
                return
            self._closed = True
            self._stop.set()
        if self.outgrown is None:  # a re-sized run goes on reading the source (NOTE [ free dims ])
            interrupt_source(self._user_source)  # a producer waiting in a Feed wakes up
        for thread in self._threads:
            thread.join(timeout=_JOIN_S)
        alive = [t.name for t in self._threads if t.is_alive()]
        self._copier.close()
        for stream in self._streams.all():
            stream.synchronize(timeout=10.0)
        self._rings.reset()
        if alive:
            raise PipelineError(f"threads still running after close: {alive} (is the source blocking?)")
