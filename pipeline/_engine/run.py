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
way: a KeyboardInterrupt or SystemExit propagates as it is - from the
caller's thread issuing, and from a source or fill that raises one in a stage
thread (after the batches before it, as any failure).  Every blocking wait polls a stop
event; ``close()`` sets it, joins both threads and synchronizes the streams
so no in-flight copy still references a buffer."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from ..devices import Device
from ..session import OrtSession, Shape
from ..util.errors import PipelineClosedError, PipelineError, PipelineStageError
from .delivery import Delivering
from .device_filled import DeviceFill, DeviceFilling
from .dynamic import DataDependent
from .executing import Executing
from .hostcopy import HostCopier
from .inline import InlineIssuing
from .issuing import HandOverAdvisor
from .layout import InputChecker, Layout, RowShapes
from .producing import Producing
from .records import (
    BLOCKED_SOURCE,
    CLOSED,
    CLOSED_MID_RUN,
    END_OF_SOURCE,
    JOIN_S,
    THREAD_PREFIX,
    BatchTrace,
    CopiedOutputs,
    Failure,
    Fill,
    MakeTake,
    Outgrown,
    RunConfig,
    Streams,
    T,
    Work,
    interrupt_source,
)
from .rings import Rings
from .windows import InPlace


@dataclass(frozen=True)
class EngineParts:
    """What a pipeline holds across its runs, and each run uses."""

    device: Device
    streams: Streams
    session: OrtSession
    rings: Rings
    checker: InputChecker


@dataclass(frozen=True)
class RunInput:
    """Where a run's batches come from."""

    source: Iterable[object]
    #: the index of the source's first batch (a run that goes on from another's)
    first_index: int = 0
    #: NOTE [ filled slots ]: batches written into the slots, not taken from ``source``
    fill: Fill | DeviceFill | None = None
    #: ``fill`` writes the device slots, not the pinned ones (NOTE [ device-filled slots ])
    fill_on_device: bool = False
    #: the caller's own iterator, told when the run stops reading it (NOTE [ interrupted feed ])
    user_source: object = None
    #: NOTE [ registered windows ]: ``run()``'s inputs and outputs registered in place
    in_place: InPlace | None = None


class EngineRun(Producing[T], DeviceFilling[T], Executing[T], DataDependent[T], InlineIssuing[T], Delivering[T]):
    """One pass of a source through the engine; iterate :meth:`results` once."""

    def __init__(
        self,
        parts: EngineParts,
        batches: RunInput,
        config: RunConfig,
        make_take: MakeTake[T],
        *,
        on_batch: Callable[[BatchTrace], None] | None = None,
        on_hand_over: Callable[[int], None] | None = None,
        advisor: HandOverAdvisor | None = None,
    ) -> None:
        self._device, self._streams, self._session = parts.device, parts.streams, parts.session
        self._rings, self._checker = parts.rings, parts.checker
        self._layout: Layout = parts.rings.layout
        self._take_input(batches)
        self._config = config
        self._copier = HostCopier(config.copy_threads)
        self._h2d_inline = parts.streams.h2d.copies_inline  # NOTE [ inline h2d ]
        #: NOTE [ borrowed inputs ]: inline batches are bound, not copied (until a hand-over)
        self._borrow = (
            parts.streams.h2d.copies_inline
            and parts.streams.compute.copies_inline
            and config.stage_threads is not True
            and not self._layout.preprocess
        )
        self._take = make_take(self._copier)
        #: NOTE [ outputs handed over ]: the slot's arrays are the results, the slot gets new ones
        self._handing_outputs: CopiedOutputs[T] | None = (
            make_take if isinstance(make_take, CopiedOutputs) and parts.device.cheap_pinned else None
        )
        self._on_batch = on_batch
        self._on_hand_over = on_hand_over
        #: NOTE [ auto issuing ]: the front end's, shared by the runs of one map() (None: a new one)
        self._advisor = (advisor or HandOverAdvisor()) if config.stage_threads == "auto" else None
        self._start_plumbing()
        self._plan_outputs()
        if config.stage_threads is True:
            self._start_stage_threads(self._iterator, self._first_index)

    def _take_input(self, batches: RunInput) -> None:
        self._iterator = iter(batches.source)
        self._first_index = batches.first_index
        self._fill = batches.fill
        self._fill_on_device = batches.fill_on_device
        self._user_source = batches.user_source
        in_place = batches.in_place
        #: the source's batches lie in registered memory while it is live; the outputs'
        #: d2h writes into registered result arrays where they allow it
        self._windows = None if in_place is None else in_place.inputs
        self._results = None if in_place is None else in_place.outputs

    def _start_plumbing(self) -> None:
        """The queues, flags and locks the stages share."""
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
        self._threads: list[threading.Thread] = []
        #: set when the run ended at a batch its slots could not hold
        self.outgrown: Outgrown | None = None
        #: :meth:`stop_taking` was called: the producer takes no batch from the source
        self._stop_taking = False
        #: the index of the first batch not taken, once the run stopped taking batches
        self.stopped_at: int | None = None

    def _plan_outputs(self) -> None:
        """The per-size plans the stages fill as batches come."""
        session = self._session
        self._coefficients = {name: how.coefficients() for name, how, _ in self._layout.preprocess}
        #: (rows, row shapes) -> (bytes per input, total)
        self._in_nbytes: dict[tuple[int, RowShapes | None], tuple[dict[str, int], int]] = {}
        self._out_plans: dict[int, tuple[dict[str, tuple[np.dtype, Shape]], dict[str, int], int]] = {}
        #: the out_layout of a batch of free shape: every output, its shape to come
        self._all_outputs = frozenset(session.output_names)
        self._unplanned: dict[str, tuple[np.dtype, Shape]] = {spec.name: (spec.dtype, ()) for spec in session.outputs}

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
            except Exception as exc:  # noqa: BLE001 - a bug in a loop still reaches the consumer
                self._put(self._result_q, Failure(PipelineStageError(stage, None, exc)))
            except BaseException as exc:  # noqa: BLE001 - NOTE [ one error path ]: raised as it is
                self._put(self._result_q, Failure(exc))

        return run

    @property
    def threads_issue(self) -> bool:
        """Whether the stage threads issue this run's batches now (from the start, or since a hand-over)."""
        return bool(self._threads)

    def stop_taking(self) -> None:
        """End the run at a batch boundary: the batches taken so far are delivered,
        no more are taken from the source, and :attr:`stopped_at` says where to go
        on from (NOTE [ auto issuing ]: the stage threads handing back)."""
        self._stop_taking = True

    # -- consumer -----------------------------------------------------------
    def results(self) -> Iterator[T]:
        """Outputs in submission order; raises the first failure after earlier results."""
        try:
            items = self._issued_inline() if self._config.stage_threads is not True else self._from_threads()
            for item in items:
                if item is END_OF_SOURCE:
                    return
                if item is CLOSED:
                    break
                if isinstance(item, Failure):
                    raise item.error
                if isinstance(item, Outgrown):  # every earlier batch is delivered: the caller regrows
                    self.outgrown = item
                    return
                assert isinstance(item, Work)
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

    # -- shutdown -----------------------------------------------------------
    def close(self) -> None:
        """Stop both threads, join them and the copy threads, and let in-flight device work finish."""
        with self._lifecycle:
            if self._closed:
                return
            self._closed = True
            self._stop.set()
        self._result_q.put(CLOSED)  # a consumer waiting for a result wakes at once, whatever the source does
        # a re-sized run (NOTE [ free dims ]) and one that stopped taking batches (the caller's
        # thread goes on: NOTE [ auto issuing ]) leave the source to the next run
        if self.outgrown is None and self.stopped_at is None:
            interrupt_source(self._user_source)  # a producer waiting in a Feed wakes up
        for thread in self._threads:
            thread.join(timeout=JOIN_S)
        alive = [t.name for t in self._threads if t.is_alive()]
        self._copier.close()
        for stream in self._streams.all():
            stream.synchronize(timeout=10.0)
        self._rings.reset()
        if alive:
            raise PipelineError(f"threads still running after close: {alive}{BLOCKED_SOURCE}")
