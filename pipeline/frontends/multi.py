"""``MultiPipeline``: one model on several devices, results in submission order.

::

    with MultiPipeline("model.onnx", devices="cuda:0,cuda:1", depth=3) as pipe:
        for out in pipe.map(batches):      # in order, whichever device ran each
            ...

NOTE [ several devices ]: every device gets a :class:`Pipeline` of its own
(session, streams, rings) and a driver thread that iterates its ``map()``:
the driver is that pipeline's "caller", so with the default issuing each
device costs one host thread, and ``PipelineOptions`` apply per device as
they do alone.  Batches are not dealt out in turn: a device takes the next
batch of the source when its pipeline asks for one (under one lock, which
also numbers the batches), so a faster device, or one whose batches happen
to be cheaper, takes more of them, and a stalled one holds up no other.
The consumer puts the results back in submission order.

Memory stays bounded: a device may hold at most ``2 * depth + 2`` batches
that the consumer has not yet been given (tickets, handed back as each of
its results is delivered).  A pipeline on the caller's thread asks for at
most ``depth + 2`` batches beyond the one it delivers next (``depth`` run,
one run ahead, one staged, one being asked for: NOTE [ inline issue ]), so a
device can always finish the batch the consumer waits for; the rest of the
margin lets a fast device run on while the consumer waits for a slower one's
batch.

Each device reads its batch while the source makes the next, so a source
must not refill one array for every batch here (a single ``Pipeline`` reads
each batch before it asks for the next; several devices cannot).

NOTE [ one error path ] holds across devices: a failure stops the source
(no device takes a batch after it), every batch before it is delivered, then
it is raised with its index in the whole run and the device it happened on.
"""

from __future__ import annotations

import collections
import dataclasses
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._engine import (
    BLOCKED_SOURCE,
    THREAD_PREFIX,
    CopiedOutputs,
    auto_copy_threads,
    interrupt_source,
    split_rows,
)
from ..devices import Device, device_specs
from ..session import ModelSource, OrtSession, Preprocess, TensorSpec
from ..stats import Delivered, MultiStats, Stats
from ..util.closing import close_all
from ..util.cpus import usable_cpus
from ..util.errors import PipelineClosedError, PipelineError, renumbered
from .gather import Gather
from .lifecycle import ANOTHER_RUN, OneRunAtATime
from .pipeline import Batch, Pipeline, PipelineOptions

JOIN_S = 5.0

#: ``take(index, rows, outputs)`` of :meth:`MultiPipeline.map_with`
Take = Callable[[int, int, dict[str, np.ndarray]], Any]


def tickets_per_device(depth: int) -> int:
    """Batches a device may hold that the consumer has not yet been given (NOTE [ several devices ])."""
    return 2 * depth + 2


def _shared_copy_threads(options: PipelineOptions, pipelines: int) -> PipelineOptions:
    """Each pipeline's options: ``copy_threads="auto"`` counts the CPUs a pipeline has, its
    share of them, so that N pipelines copying at once have no more threads than one would
    on the whole machine (NOTE [ parallel host copies ])."""
    if options.copy_threads != "auto" or pipelines < 2:
        return options
    return dataclasses.replace(options, copy_threads=auto_copy_threads(usable_cpus() // pipelines))


class MultiPipeline(OneRunAtATime):
    """One model on several devices: batches go to whichever asks first, results come back in order.

    ``devices`` is a list of names or :class:`Device` objects, or one string:
    ``"cuda:0,cuda:1"``, ``"cuda:all"``.  A name given twice makes two
    pipelines on one device (two sessions on two compute streams: ORT runs of
    a small model overlap, like Triton's instance count).  The other
    arguments are :class:`Pipeline`'s, the same for every device."""

    def __init__(
        self,
        model: ModelSource,
        devices: str | Sequence[str | Device],
        depth: int = 3,
        batch_size: int | None = None,
        *,
        preprocess: Preprocess | str | Sequence[Preprocess | str] | None = None,
        constants: Mapping[str, object] | None = None,
        outputs: Sequence[str] | None = None,
        options: PipelineOptions | None = None,
    ) -> None:
        self.options = options or PipelineOptions()
        self.depth = depth
        self.batch_size = batch_size
        self.pipelines: list[Pipeline] = []
        specs = device_specs(devices)
        if self.options.cuda_graph and len(specs) > 1:
            raise ValueError(
                "cuda_graph runs one pipeline at a time in a process: ORT captures a graph in CUDA's global mode, "
                "when no other thread may call CUDA (and several pipelines have a thread each)"
            )
        each = _shared_copy_threads(self.options, len(specs))
        try:
            for spec in specs:
                self.pipelines.append(
                    Pipeline(
                        model,
                        spec,
                        depth,
                        batch_size,
                        preprocess=preprocess,
                        constants=constants,
                        outputs=outputs,
                        options=each,
                    )
                )
        except BaseException:
            self._close_pipelines()  # a device that failed to start leaves the others closed
            raise
        self._stats = MultiStats(self._per_device)
        self._start_lifecycle()

    # -- lifecycle (the rest in OneRunAtATime) -------------------------------
    def _release(self) -> None:
        self._close_pipelines()

    def _close_pipelines(self) -> None:
        close_all(self.pipelines)  # every device's, then the first failure

    # -- what the pipelines share ------------------------------------------
    @property
    def session(self) -> OrtSession:
        """The first device's session (every device runs the same model)."""
        return self.pipelines[0].session

    @property
    def source_inputs(self) -> tuple[TensorSpec, ...]:
        return self.pipelines[0].source_inputs

    @property
    def input_names(self) -> list[str]:
        return self.pipelines[0].input_names

    @property
    def output_names(self) -> list[str]:
        return self.pipelines[0].output_names

    @property
    def class_labels(self) -> dict[str, tuple[int | str, ...]]:
        """See :attr:`Pipeline.class_labels`."""
        return self.pipelines[0].class_labels

    @property
    def unstated_classes(self) -> tuple[str, ...]:
        """See :attr:`Pipeline.unstated_classes`."""
        return self.pipelines[0].unstated_classes

    @property
    def data_dependent_outputs(self) -> frozenset[str]:
        """The outputs any device has found to depend on the data (each finds its own)."""
        return frozenset().union(*(pipe.data_dependent_outputs for pipe in self.pipelines))

    @property
    def devices(self) -> list[Device]:
        return [pipe.device for pipe in self.pipelines]

    @property
    def stats(self) -> MultiStats:
        """Figures of the running (or last) ``map()``/``run()``: the whole run's and each device's."""
        return self._stats

    def _per_device(self) -> list[tuple[str, Stats]]:
        return [(pipe.device.name, pipe.stats) for pipe in self.pipelines]

    def memory(self) -> dict[str, int] | None:
        """Bytes of every device's buffers together (see :meth:`Pipeline.memory`)."""
        found = [memory for pipe in self.pipelines if (memory := pipe.memory()) is not None]
        if not found:
            return None
        return {key: sum(memory[key] for memory in found) for key in found[0]}

    # -- the API ------------------------------------------------------------
    def map(self, batches: Iterable[Batch]) -> Iterator[dict[str, np.ndarray]]:
        """Outputs ``{name: ndarray}`` for each batch, in submission order."""
        return self._iterate(iter(batches), lambda index, rows, outputs: outputs)

    def map_with(self, batches: Iterable[Batch], take: Take) -> Iterator[Any]:
        """Like :meth:`map`, but yields ``take(index, rows, outputs)``, called
        on the consumer's thread in submission order; ``index`` counts the
        whole run's batches and ``outputs`` are arrays of their own (each
        device's thread copied them out of its pinned slots)."""
        return self._iterate(iter(batches), take)

    def rows_per_batch(self, batch_size: int | None = None, row_nbytes: int | None = None) -> int:
        """:meth:`Pipeline.rows_per_batch` (every device's pipeline has the same batch size and model)."""
        return self.pipelines[0].rows_per_batch(batch_size, row_nbytes)

    def warm_up(self, batch: Batch, runs_per_slot: int = 3) -> float:
        """:meth:`Pipeline.warm_up` on every device in turn (shared batches
        might leave one cold); the seconds it took in all."""
        return sum(pipe.warm_up(batch, runs_per_slot) for pipe in self.pipelines)

    def run(self, inputs: Batch, batch_size: int | None = None) -> dict[str, np.ndarray]:
        """Whole arrays in, whole arrays out: split into batches shared by the devices, outputs concatenated."""
        self._check_open()
        self.session.check_cut_alike()
        feeds = self.pipelines[0].checker.feeds(None, inputs)
        total = next(iter(feeds.values())).shape[0]
        size = self.rows_per_batch(batch_size, sum(array.nbytes // max(1, total) for array in feeds.values()))
        gathered = Gather(total)
        for _ in self._iterate(split_rows(feeds, size), gathered.take):
            pass
        return gathered.arrays

    def _iterate(self, iterator: Iterator[Batch], take: Take) -> Iterator[Any]:
        self._check_open()
        return self._results(iterator, take)

    def _results(self, iterator: Iterator[Batch], take: Take) -> Iterator[Any]:
        # a generator: the devices' threads start when the first result is asked for
        with self._lock:
            self._check_open()
            if self._active is not None:
                raise PipelineError(ANOTHER_RUN)
            run = self._active = _MultiRun(self.pipelines, iterator, self.depth, self.options.poll_s)
        self._stats = MultiStats(self._per_device, run.delivered)
        try:
            for index, rows, outputs in run.results():
                yield take(index, rows, outputs)
        finally:
            run.close()
            with self._lock:
                if self._active is run:
                    self._active = None

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        names = [pipe.device.name for pipe in self.pipelines]
        return f"MultiPipeline(devices={names}, depth={self.depth}, {state})"


class _SharedSource:
    """The run's source, shared by the devices: one lock takes and numbers each batch."""

    def __init__(self, iterator: Iterator[Batch]) -> None:
        self.iterator = iterator
        self._lock = threading.Lock()
        self._next_index = 0
        self._ended = False

    def take(self, indices: collections.deque[int]) -> Batch | None:
        """The next batch, its index appended to ``indices``; None once the source ended or was ended."""
        with self._lock:
            if self._ended:
                return None
            index = self._next_index
            indices.append(index)  # before next(): a failing source's batch has its index too
            self._next_index += 1
            try:
                return next(self.iterator)
            except StopIteration:
                indices.pop()
                self._next_index -= 1
                self._ended = True
                return None
            except BaseException:
                self._ended = True  # the device that took it reports the failure; no device takes another
                raise

    def end(self) -> None:
        """No device takes another batch (a failure, or the consumer stopped)."""
        self._ended = True  # a bool: read under the lock, set without it

    @property
    def taken(self) -> int:
        return self._next_index


class _DeviceFeed:
    """One device's share of the shared source, as the iterator its pipeline's ``map()`` reads."""

    def __init__(self, source: _SharedSource, tickets: int, stop: threading.Event, poll_s: float) -> None:
        self._source = source
        self._tickets = threading.Semaphore(tickets)
        self._stop = stop
        self._poll_s = poll_s
        #: run-wide index of each batch this device took and has not delivered, oldest first
        self.indices: collections.deque[int] = collections.deque()
        self._delivered = 0  # batches of this device delivered (its pipeline's index of indices[0])

    def __iter__(self) -> _DeviceFeed:
        return self

    def __next__(self) -> Batch:
        while not self._tickets.acquire(timeout=self._poll_s):
            if self._stop.is_set():
                raise StopIteration
        if self._stop.is_set():
            self._tickets.release()
            raise StopIteration
        try:
            batch = self._source.take(self.indices)
        except BaseException:
            self._tickets.release()
            raise
        if batch is None:
            self._tickets.release()
            raise StopIteration
        return batch

    def run_index(self, device_index: int | None) -> int | None:
        """The run-wide index of this device's batch ``device_index`` (its pipeline counts its own)."""
        if device_index is None:
            return None
        position = device_index - self._delivered
        return self.indices[position] if 0 <= position < len(self.indices) else None

    def delivered(self) -> int:
        """The oldest batch's run-wide index, as its result leaves the device."""
        self._delivered += 1
        return self.indices.popleft()

    def hand_back(self) -> None:
        """A ticket back: the consumer was given one of this device's results."""
        self._tickets.release()


@dataclass(frozen=True)
class _Result:
    index: int
    device: int
    rows: int
    outputs: dict[str, np.ndarray]


@dataclass(frozen=True)
class _Failed:
    index: int | None  # None: not one batch's failure (raised once the devices are done)
    device: int
    error: BaseException


@dataclass(frozen=True)
class _Done:
    device: int


#: a device pipeline's ``take``: its rows and outputs that outlive the pinned slot
_keep_outputs: CopiedOutputs[tuple[int, dict[str, np.ndarray]]] = CopiedOutputs(
    lambda index, rows, outputs: (rows, outputs)
)


class _MultiRun:
    """One ``map()`` over several devices: a driver thread each, and the consumer's reordering."""

    def __init__(self, pipelines: list[Pipeline], iterator: Iterator[Batch], depth: int, poll_s: float) -> None:
        self._pipelines = pipelines
        self._poll_s = poll_s
        self._stop = threading.Event()
        self._source = _SharedSource(iterator)
        self._feeds = [_DeviceFeed(self._source, tickets_per_device(depth), self._stop, poll_s) for _ in pipelines]
        self._queue: queue.SimpleQueue[_Result | _Failed | _Done] = queue.SimpleQueue()
        self.delivered = Delivered(len(pipelines))
        self._threads = [
            threading.Thread(target=self._drive, args=(k,), name=f"{THREAD_PREFIX}device-{k}", daemon=True)
            for k in range(len(pipelines))
        ]
        for thread in self._threads:
            thread.start()

    # -- a device's driver thread ---------------------------------------------
    def _drive(self, k: int) -> None:
        pipe, feed = self._pipelines[k], self._feeds[k]
        results = pipe._iterate(feed, _keep_outputs)
        try:
            try:
                for rows, outputs in results:
                    self._queue.put(_Result(feed.delivered(), k, rows, outputs))
                    if self._stop.is_set():
                        return
            finally:
                results.close()  # this pipeline's run ends on this thread, which issued it
        except BaseException as exc:  # noqa: BLE001 - every failure reaches the consumer
            index = feed.run_index(getattr(exc, "batch_index", None))
            self._source.end()
            self._queue.put(_Failed(index, k, renumbered(exc, index, pipe.device.name)))
        finally:
            self._queue.put(_Done(k))

    # -- the consumer -----------------------------------------------------------
    def results(self) -> Iterator[tuple[int, int, dict[str, np.ndarray]]]:
        """(run-wide index, rows, outputs) in submission order; raises the first failure after the batches before it."""
        ready: dict[int, _Result] = {}
        failure: _Failed | None = None
        running = len(self._pipelines)
        next_index = 0
        while True:
            found = ready.pop(next_index, None)
            if found is not None:
                self._feeds[found.device].hand_back()
                self.delivered.add(found.device, found.rows)
                yield found.index, found.rows, found.outputs
                next_index += 1
                continue
            if failure is not None and (failure.index == next_index or running == 0):
                raise failure.error
            if running == 0:
                if self._stop.is_set():
                    raise PipelineClosedError("the pipeline was closed while this map() was running")
                if ready or next_index != self._source.taken:
                    missing = f"batches {sorted(ready)} came back without batch {next_index}"
                    raise PipelineError(f"{missing} (internal error)")
                return
            item = self._next_item()
            if isinstance(item, _Result):
                ready[item.index] = item
            elif isinstance(item, _Done):
                running -= 1
            elif failure is None or _earlier(item, failure):
                failure = item

    def _next_item(self) -> _Result | _Failed | _Done:
        while True:
            try:
                return self._queue.get(timeout=self._poll_s)
            except queue.Empty:
                if not any(thread.is_alive() for thread in self._threads) and self._queue.empty():
                    raise PipelineError("the device threads ended without a result (internal error)") from None

    def close(self) -> None:
        """Stop taking batches, let every device's run end on its own thread, join them."""
        self._stop.set()
        self._source.end()
        interrupt_source(self._source.iterator)  # NOTE [ interrupted feed ]: a device may wait in it
        for thread in self._threads:
            thread.join(timeout=JOIN_S)
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            raise PipelineError(f"device threads still running after close: {alive}{BLOCKED_SOURCE}")


def _earlier(new: _Failed, old: _Failed) -> bool:
    """The failure to raise is the earliest batch's; one that names no batch comes last."""
    if new.index is None:
        return False
    return old.index is None or new.index < old.index
