"""``Pipeline.submit``: batches handed in one at a time, from any thread, each
answered by a ``concurrent.futures.Future``.

NOTE [ submitted batches ]: ``submit(batch)`` puts the batch into a
:class:`~pipeline.Feed` that one ``map()`` of the pipeline reads, run by a
thread of its own (``ortpipe-submit``), started by the first submit after the
pipeline was idle.  That thread resolves the futures in submission order,
each with the batch's outputs (copies, as ``map()`` gives them), so batches
submitted back to back overlap as a ``map()``'s do.  A full feed blocks the
submitter (back-pressure; ``timeout=`` raises TimeoutError instead).  A failure
is set on the future of the batch it happened at (its index: its place among
the batches since the map started); every later one fails with an error that
names that batch, and a batch submitted once the failure happened starts
a new map (one bad batch does not fail a server's later, unrelated ones).
The engine's stage threads run the map (its caller's thread, issuing ahead,
would hold a result until the next batch came); the CPU backend's direct
path gives each result before taking the next batch anyway.

NOTE [ submitted batches run inline ]: on the direct path (the CPU backend,
NOTE [ direct path ]) those two hand-offs between threads a batch - the
batch to the map's thread, its result back - cost two to three times what a
cheap model's batch costs (docs/results.md).  So there a submit runs its
batch itself, in the submitting thread, through a map of submitted batches
that it drives one ``next()`` at a time (:class:`InlineSubmitter`), and
returns its future done (NOTE [ futures born done ]: a plain Future's making
cost as much as the batch): the map's checks, steady lane and stats (handed to
``pipe.stats`` a block of batches at a time, as a map's, the rest by ``drain()``), no thread.
Concurrent submitters take turns under one lock (submission order is the
order they take it; ``timeout`` bounds the wait for it), each running while
the others, ORT having left the GIL, go on with their own work.  What is lost
is the overlap of one submitter's own work with its batch's run, which only
pays where both are long: once a window of batches shows runs longer than
:data:`INLINE_MAX_S` and, between one submit's return and the next submit,
more of the submitter's own work than the threads' hand-offs cost
(``HAND_OVER_GAIN_S``, NOTE [ auto issuing ]), the inline map ends (between
batches: nothing is in flight) and the next submit starts the threaded one.
Long runs submitted back to back stay inline: there is nothing to overlap
them with, and the hand-offs would only add to each (docs/results.md).  ``drain()`` waits
for every batch submitted and ends the map (the pipeline is then free for
``map()``/``run()``); ``close()`` stops it, failing what was not run with
:class:`PipelineClosedError`.  The batch is the pipeline's until its future
is done: the CPU backend may run it where it lies (NOTE [ borrowed inputs ]).
"""

from __future__ import annotations

import collections
import itertools
import statistics
import threading
import time
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Future
from typing import Any

import numpy as np

from .._engine import HAND_OVER_GAIN_S, THREAD_PREFIX
from ..util.errors import PipelineClosedError, PipelineError, PipelineStageError
from .done_future import done_future
from .feed import Feed, FeedClosed

#: batches submitted and waiting for the map to take them, at most
SUBMIT_QUEUE = 8

#: how long a submit that found the map's feed closed waits for the map's thread to end
_ENDING_S = 10.0

#: NOTE [ submitted batches run inline ]: runs this long (median of a window) are worth a
#: thread's overlap: its two hand-offs a batch cost well under a tenth of them
INLINE_MAX_S = 1e-3
#: batches inline before the runs' lengths are judged
INLINE_WINDOW = 8


class Submitter:
    """One map over submitted batches (NOTE [ submitted batches ])."""

    def __init__(self, start_map: Callable[[Feed], Iterator[dict[str, np.ndarray]]], maxsize: int) -> None:
        self._feed = Feed(maxsize)
        self._futures: collections.deque[Future[dict[str, np.ndarray]]] = collections.deque()
        self._lock = threading.Lock()  # a future queued and its batch put, in one order for every thread
        self._ended: BaseException | None = None
        self._closing = False  # the pipeline is being closed: what was not run says so
        self._results = start_map(self._feed)
        self._thread = threading.Thread(target=self._resolve, name=THREAD_PREFIX + "submit", daemon=True)
        self._thread.start()

    @property
    def ended(self) -> bool:
        return self._ended is not None or not self._thread.is_alive()

    def submit(self, batch: Any, timeout: float | None) -> Future[dict[str, np.ndarray]]:
        """``batch`` put into the map's feed, its future queued; a PipelineError once the map
        has ended - said only after its thread has recorded why (:attr:`ended`), so that the
        pipeline starts a new map for the batch instead of refusing it."""
        future: Future[dict[str, np.ndarray]] = Future()
        with self._lock:
            if self._ended is not None:
                raise PipelineError(f"this map of submitted batches has ended: {self._ended}")
            self._futures.append(future)
            try:
                self._feed.put(batch, timeout)
                return future
            except (TimeoutError, FeedClosed) as exc:
                if self._futures and self._futures[-1] is future:
                    self._futures.pop()
                if isinstance(exc, TimeoutError):
                    raise TimeoutError(f"submit: the pipeline stayed full for {timeout} s") from None
                closed = exc
        # the engine stopped taking batches (a failure, a close) before the map's thread said so:
        # wait for it outside the lock, which its last steps take
        self._thread.join(_ENDING_S)
        raise PipelineError(f"submit: the map of submitted batches ended: {self._ended}") from closed

    def drain(self, timeout: float | None) -> None:
        """Every batch submitted run and its future done; the map ended."""
        self._feed.close()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"drain: batches still running after {timeout} s")

    def join(self, timeout: float = 5.0) -> None:
        """After the pipeline stopped the map (close): the thread's end."""
        self._closing = True
        self._feed.interrupt()
        self._thread.join(timeout)

    def _resolve(self) -> None:
        index = 0
        try:
            for outputs in self._results:
                future = self._futures.popleft()
                future.set_result(outputs)
                index += 1
        except BaseException as exc:  # noqa: BLE001 - each future says what happened to its batch
            self._fail_from(index, exc)
        else:  # drained (a batch submitted as the map ended is refused, not lost), or closed before it began
            ended = (
                PipelineClosedError("the pipeline was closed before this batch ran")
                if self._closing
                else PipelineError("the map of submitted batches was drained before this batch")
            )
            self._fail_from(index, ended)

    def _fail_from(self, index: int, error: BaseException) -> None:
        """The batch at ``index`` gets ``error``; the later ones an error naming it."""
        self._ended = error
        self._feed.interrupt()  # a submitter blocked on a full feed gets FeedClosed
        first = True
        while True:
            with self._lock:
                if not self._futures:
                    return
                future = self._futures.popleft()
            future.set_exception(error if first else _after(index, error))
            first = False


def _after(index: int, error: BaseException) -> PipelineError:
    """The error of a batch submitted after the one that failed, which it names."""
    if isinstance(error, PipelineClosedError):
        return PipelineClosedError(f"not run: {error}")
    failed = error.batch_index if isinstance(error, PipelineStageError) else index
    return PipelineError(f"not run: batch {failed}, submitted before this one, failed: {error}")


def _failed(error: BaseException) -> Future[dict[str, np.ndarray]]:
    future: Future[dict[str, np.ndarray]] = Future()
    future.set_exception(error)
    return future


class InlineSubmitter:
    """One map of submitted batches driven by the submitting threads themselves, one batch
    a submit (NOTE [ submitted batches run inline ]); :class:`Submitter`'s interface."""

    def __init__(self, start_map: Callable[[Iterator[Any]], Generator[dict[str, np.ndarray], None, None]]) -> None:
        #: the batch the submit driving the map just handed in: the map's source pops it (a
        #: list's pop called by ``map`` - no Python frame a batch - and asked only after a batch
        #: was put: an empty list's IndexError never comes, as the submits drive it)
        self._handed: list[Any] = []
        self._results = start_map(map(self._handed.pop, itertools.repeat(-1)))
        self._lock = threading.Lock()
        self._ended: BaseException | None = None
        self._seconds: list[float] = []  # each judged batch's run
        self._own: list[float] = []  # the submitters' own time before each judged batch but the first
        self._returned_at: float | None = None  # when the last judged submit returned
        self._judging = True  # until a window of runs is judged
        #: the runs were long enough that the threaded map's overlap pays: the next map is that one
        self.threads_pay = False

    @property
    def ended(self) -> bool:
        return self._ended is not None

    def submit(self, batch: Any, timeout: float | None) -> Future[dict[str, np.ndarray]]:
        """The batch run in this thread, under the lock: its future, done.  (One call a
        batch, positional arguments: each call and keyword is a tenth of a microsecond
        of what a cheap model's batch costs.)"""
        lock = self._lock
        # acquire() without arguments where it can: parsing them is a cost a batch
        if not (lock.acquire() if timeout is None else lock.acquire(True, timeout)):
            raise TimeoutError(f"submit: the pipeline stayed full for {timeout} s")
        try:
            if self._ended is not None:
                raise PipelineError(f"this map of submitted batches has ended: {self._ended}")
            self._handed.append(batch)
            judging = self._judging
            started = time.perf_counter() if judging else 0.0
            try:
                outputs = next(self._results)
            except StopIteration:  # the map was closed from outside (the pipeline's close)
                self._ended = PipelineClosedError("the pipeline was closed before this batch ran")
                return _failed(self._ended)
            except BaseException as exc:  # noqa: BLE001 - the batch's failure is its future's
                self._ended = exc
                return _failed(exc)
            if judging:
                self._judge(started, time.perf_counter())
            return done_future(outputs)  # NOTE [ futures born done ]
        finally:
            lock.release()

    def _judge(self, started: float, ended: float) -> None:
        """After a window of batches: where their runs and the submitters' own work between
        them were both long, end for the threaded map."""
        if self._returned_at is not None:
            self._own.append(started - self._returned_at)
        self._returned_at = ended
        self._seconds.append(ended - started)
        if len(self._seconds) < INLINE_WINDOW:
            return
        self._judging = False
        if statistics.median(self._seconds) > INLINE_MAX_S and statistics.median(self._own) > HAND_OVER_GAIN_S:
            self.threads_pay = True
            self._finish(PipelineError("its runs and the work between them were long enough for a thread to pay"))

    def _finish(self, why: BaseException) -> None:
        """The map closed (its run's end: stats recorded, nothing left open), saying why."""
        self._ended = self._ended or why
        self._results.close()

    def drain(self, timeout: float | None) -> None:
        """Every batch submitted has run already: the map ends."""
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            raise TimeoutError(f"drain: batches still running after {timeout} s")
        try:
            self._finish(PipelineError("the map of submitted batches was drained"))
        finally:
            self._lock.release()

    def join(self, timeout: float = 5.0) -> None:
        """After the pipeline stopped the map (close): ended once the batch running (if any) is."""
        if self._lock.acquire(timeout=timeout):
            try:
                self._finish(PipelineClosedError("the pipeline was closed"))
            finally:
                self._lock.release()
