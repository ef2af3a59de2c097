"""The engine: producer and execute threads (or the caller's alone), and the consumer's iterator.

::

    source ──▶ producer thread ──▶ execute thread ──▶ consumer (caller's thread)
               check batch         compute waits h2d  waits d2h event,
               stage → pinned-in   run ORT (bound)    takes outputs out of
               h2d on copy stream  d2h waits run,     pinned-out, releases it
               record h2d event    copy → pinned-out

A run is a :class:`RunContext` (what its stages share) and the stage
objects made over it: ``Producer`` (with a ``DeviceFiller`` for batches
written on the device), ``Executor`` (with ``DataDependentOutputs``),
``Deliverer``, the ``StageThreads`` that call the first two from threads of
their own (NOTE [ threads are not stages ]), and the ``InlineIssuer`` that
calls them from the caller's thread (NOTE [ inline issue ]).  With
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

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from ..devices import Device
from ..session import OrtSession
from ..util.errors import PipelineClosedError, PipelineError
from .context import RunContext
from .delivery import Deliverer
from .device_filled import DeviceFill, DeviceFiller
from .dynamic import DataDependentOutputs
from .executing import Executor
from .hostcopy import HostCopier
from .inline import InlineIssuer, Stages
from .issuing import HandOverAdvisor
from .layout import InputChecker
from .producing import Producer
from .records import (
    BLOCKED_SOURCE,
    CLOSED,
    CLOSED_MID_RUN,
    END_OF_SOURCE,
    BatchTrace,
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
from .threads import StageThreads
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


class EngineRun(Iterable[T]):
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
        ctx = self._ctx = RunContext(
            parts.device,
            parts.streams,
            parts.session,
            parts.rings,
            parts.checker,
            config,
            HostCopier(config.copy_threads),
        )
        self._iterator = iter(batches.source)
        self._first_index = batches.first_index
        self._user_source = batches.user_source
        self._producer = self._producer_for(ctx, batches)
        data_dependent = DataDependentOutputs(parts.session)
        in_place = batches.in_place
        self._executor = Executor(ctx, data_dependent, None if in_place is None else in_place.outputs)
        self._deliverer = Deliverer(ctx, make_take, data_dependent, on_batch)
        self._threads = StageThreads(ctx, self._producer, self._executor)
        #: NOTE [ auto issuing ]: the front end's, shared by the runs of one map() (None: a new one)
        advisor = (advisor or HandOverAdvisor()) if config.stage_threads == "auto" else None
        stages = Stages(self._producer, self._executor, self._deliverer, self._threads)
        self._inline = InlineIssuer(ctx, stages, advisor, on_hand_over)
        #: set when the run ended at a batch its slots could not hold
        self.outgrown: Outgrown | None = None
        if config.stage_threads is True:
            self._threads.start(self._iterator, self._first_index)

    @staticmethod
    def _producer_for(ctx: RunContext, batches: RunInput) -> Producer:
        fill = batches.fill
        if fill is not None and batches.fill_on_device:
            return Producer(ctx, device_filler=DeviceFiller(ctx, fill))  # type: ignore[arg-type]
        windows = None if batches.in_place is None else batches.in_place.inputs
        return Producer(ctx, fill=fill, windows=windows)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[T]:
        return self.results()

    @property
    def threads_issue(self) -> bool:
        """Whether the stage threads issue this run's batches now (from the start, or since a hand-over)."""
        return self._threads.started

    @property
    def stopped_at(self) -> int | None:
        """The index of the first batch not taken, once the run stopped taking batches."""
        return self._producer.stopped_at

    def stop_taking(self) -> None:
        """End the run at a batch boundary: the batches taken so far are delivered,
        no more are taken from the source, and :attr:`stopped_at` says where to go
        on from (NOTE [ auto issuing ]: the stage threads handing back)."""
        self._producer.stop_taking = True

    # -- consumer -----------------------------------------------------------
    def results(self) -> Iterator[T]:
        """Outputs in submission order; raises the first failure after earlier results."""
        try:
            items = (
                self._inline.issued(self._iterator, self._first_index)
                if self._ctx.config.stage_threads is not True
                else self._threads.results()
            )
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
                yield self._deliverer.deliver(item)
            raise PipelineClosedError(CLOSED_MID_RUN)
        finally:
            self.close()

    # -- shutdown -----------------------------------------------------------
    def close(self) -> None:
        """Stop both threads, join them and the copy threads, and let in-flight device work finish."""
        ctx = self._ctx
        if not self._threads.stop():
            return
        ctx.result_q.put(CLOSED)  # a consumer waiting for a result wakes at once, whatever the source does
        # a re-sized run (NOTE [ free dims ]) and one that stopped taking batches (the caller's
        # thread goes on: NOTE [ auto issuing ]) leave the source to the next run
        if self.outgrown is None and self.stopped_at is None:
            interrupt_source(self._user_source)  # a producer waiting in a Feed wakes up
        alive = self._threads.join()
        ctx.copier.close()
        for stream in ctx.streams.all():
            stream.synchronize(timeout=10.0)
        ctx.rings.reset()
        if alive:
            raise PipelineError(f"threads still running after close: {alive}{BLOCKED_SOURCE}")
