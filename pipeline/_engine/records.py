"""What a run passes between its parts: each batch's events, trace and work
record, the takes and fills, the run's configuration."""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, NamedTuple, TypeVar, cast

import numpy as np

from ..devices import Device, DeviceArray, Event, Stream
from ..session import Shape
from ..util.capabilities import Interruptible
from ..util.errors import PipelineInputError, PipelineStageError
from .hostcopy import HostCopier
from .layout import Layout, RowShapes
from .rings import DeviceSlot, PinnedOutSlot

T = TypeVar("T")


THREAD_PREFIX = "ortpipe-"


JOIN_S = 2.0


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
class Work:
    trace: BatchTrace
    slot: DeviceSlot
    out_layout: dict[str, tuple[np.dtype, Shape]] = field(default_factory=dict)
    #: bytes of each output the d2h copies, as planned when the run was enqueued
    #: (shared by the batches of one size: read, never changed)
    out_sizes: dict[str, int] | None = None
    pinned_out: PinnedOutSlot | None = None
    #: the rows of the whole outputs its d2h wrote, in place of the pinned-out slot (NOTE [ registered windows ])
    placed: dict[str, np.ndarray] | None = None
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
class Failure:
    error: BaseException


GRAPH_RUN_FAILED = (
    "{} (with CUDA graphs every output is preallocated at the shape the probe run gave: a model whose "
    "output shapes depend on the data cannot run as a graph; run it with cuda_graph off)"
)


END_OF_SOURCE = object()
#: put by ``close()``: a consumer waiting for a result learns the run was closed
CLOSED = object()


def source_failure(index: int, error: BaseException) -> Failure:
    """The source failed at batch ``index``: after every earlier batch, the consumer raises
    it wrapped with its stage and batch - or as it is, a KeyboardInterrupt or SystemExit
    (NOTE [ one error path ]: one raised in a stage thread is the consumer's too)."""
    return Failure(PipelineStageError("source", index, error) if isinstance(error, Exception) else error)


def compute_failed(index: int, error: BaseException, rows: int, full_rows: int | None) -> PipelineStageError:
    """The run of batch ``index`` failed.  Where it is a shorter batch after full ones
    (which ran: failures come in order), the likely cause is a model that takes only
    full batches - a state batched along another axis, as silero-vad's ``[2, B, 128]`` -
    and padding the last batch is what to try."""
    hint = None
    if index > 0 and full_rows is not None and 0 < rows < full_rows:
        hint = (
            f"only this batch of {rows} rows failed, after batches of {full_rows}: a model that takes only full "
            "batches runs with PipelineOptions(static_shapes=True) (ortpipe run --static-shapes), which pads "
            "the last batch"
        )
    return PipelineStageError("compute", index, error, hint=hint)


CLOSED_MID_RUN = "the pipeline was closed while this map() was running"


Take = Callable[[int, int, dict[str, np.ndarray]], T]


Fill = Callable[[int, dict[str, np.ndarray]], int | None]


MakeTake = Callable[[HostCopier], Take[T]]


def as_laid_out(array: np.ndarray) -> bool:
    """The array's bytes are those of its slot: C order, native byte order (NOTE [ inline h2d ])."""
    return array.flags.c_contiguous and array.dtype.isnative


def rows_written(value: object, index: int, batch_size: int) -> int:
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
    reused (a millisecond a 16 MB batch less on the CPU backend: docs/results.md).
    On CUDA, where ``cudaHostAlloc`` costs milliseconds, the copy stays.  An output
    that is not in the slot (one ORT allocated and the run found data-dependent) is
    copied as before."""

    then: Callable[[int, int, dict[str, np.ndarray]], T] | None = None

    def __call__(self, copier: HostCopier) -> Take[T]:
        copied = copier.copied

        def take(index: int, rows: int, views: dict[str, np.ndarray]) -> T:
            return self.passed_on(index, rows, {name: copied(view) for name, view in views.items()})

        return take

    def passed_on(self, index: int, rows: int, outputs: dict[str, np.ndarray]) -> T:
        """What the take gives for outputs that outlive their slot."""
        return cast(T, outputs) if self.then is None else self.then(index, rows, outputs)


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


#: a batch's stages in order: the source making it, the staging copy, the device's three,
#: and the consumer's take of its outputs (a sink's write, map()'s copy out, your take)
STAGES = ("source", "stage", "h2d", "compute", "d2h", "take")
#: the BatchTiming field that holds each stage's seconds
STAGE_FIELDS = {
    "source": "source_s",
    "stage": "stage_s",
    "h2d": "h2d_s",
    "compute": "compute_s",
    "d2h": "d2h_s",
    "take": "take_s",
}


class BatchTiming(NamedTuple):
    """One batch's timings, in seconds. Device durations are None when timing is off.

    A tuple: made once a batch (``tuple.__new__(BatchTiming, values)`` is the
    cheapest way, a fifth of a dataclass's keyword ``__init__``) and read by
    unpacking where every batch is folded into the stats.
    """

    index: int  # type: ignore[assignment]  # the batch's, over tuple.index: never searched
    rows: int
    h2d_bytes: int
    d2h_bytes: int
    submitted: float
    done: float
    stage_s: float
    wait_s: float
    #: perf_counter when the host staging copy ended (the h2d is enqueued right after)
    staged: float | None = None
    #: time inside the source iterator producing this batch (reading, decoding)
    source_s: float = 0.0
    h2d_s: float | None = None
    compute_s: float | None = None
    d2h_s: float | None = None
    #: the consumer's take of the outputs (a sink's write, map()'s copy out)
    take_s: float = 0.0
    #: device start times, seconds after the run's first h2d start (for traces)
    h2d_at: float | None = None
    compute_at: float | None = None
    d2h_at: float | None = None

    @property
    def latency_s(self) -> float:
        return self.done - self.submitted

    def stage_seconds(self, stage: str) -> float | None:
        return getattr(self, STAGE_FIELDS[stage])


#: what a close that found a thread still running says of the source it waits in
BLOCKED_SOURCE = (
    ": the source is blocked waiting for its next batch, and cannot be interrupted (only a source with an "
    "interrupt() method can: a Feed, ortpipe's pipe and stream sources); its thread ends when next() returns"
)


#: whether a source's type listens (:func:`interrupt_source`): ``isinstance`` against a
#: runtime-checkable protocol looks its members up each call, at every run's close (docs/results.md)
_LISTENS: dict[type, bool] = {}


def interrupt_source(source: object) -> None:
    """See NOTE [ interrupted feed ] (in ``frontends/feed.py``): tell a source that no more batches
    will be taken, if it listens (judged once a type)."""
    listens = _LISTENS.get(type(source))
    if listens is None:
        listens = _LISTENS[type(source)] = isinstance(source, Interruptible)
    if listens:
        cast(Interruptible, source).interrupt()
