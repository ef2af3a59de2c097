"""``Feed``: batches pushed from other threads, as the source of one ``map()``.

::

    feed = Feed(maxsize=8)
    camera.on_frames(feed.put)          # a callback on the camera's thread
    for out in pipe.map(feed):          # ends after feed.close()
        ...

A camera callback, a network reader or a decoder thread hands batches over
with ``put`` (which blocks while ``maxsize`` batches wait: back-pressure, not
an unbounded queue) and ends the stream with ``close``, or ``fail(error)``,
which the pipeline raises as a failure of the source at that batch, after
every batch put before it.

NOTE [ interrupted feed ]: when the pipeline
stops taking batches (the loop broke out, ``close()``, a failure elsewhere)
it calls :meth:`Feed.interrupt`: a stage thread waiting for a batch wakes
up at once instead of holding ``close()`` up, and a producer blocked in
``put`` gets :class:`FeedClosed`.  A feed serves one ``map()``.

A batch put is the pipeline's until its result comes back: it waits in the
queue, and on the CPU backend its run may read it where it lies
(NOTE [ borrowed inputs ]).  A producer that refills one buffer puts a copy.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

from ..util.errors import PipelineError

_POLL_S = 0.1


class FeedClosed(PipelineError):
    """``put`` on a feed that was closed, failed, or interrupted by its pipeline."""


class Feed:
    """A bounded, thread-safe source of batches for ``Pipeline.map``."""

    def __init__(self, maxsize: int = 8) -> None:
        if not isinstance(maxsize, int) or maxsize < 1:
            raise ValueError(f"maxsize must be an int >= 1, got {maxsize!r}")
        self.maxsize = maxsize
        self._items: collections.deque[Any] = collections.deque()
        self._changed = threading.Condition(threading.Lock())
        self._ended = False  # close(): no more puts, the map ends once the items are taken
        self._error: BaseException | None = None  # fail(): raised once the items before it are taken
        self._interrupted = False  # the pipeline stopped taking batches

    # -- the producer's side --------------------------------------------------
    def put(self, batch: Any, timeout: float | None = None) -> None:
        """Add a batch, waiting while ``maxsize`` batches wait; TimeoutError after ``timeout`` s."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._refusing() or len(self._items) < self.maxsize, timeout):
                raise TimeoutError(f"the feed stayed full ({self.maxsize} batches) for {timeout} s")
            self._check_open()
            self._items.append(batch)
            self._changed.notify_all()

    def close(self) -> None:
        """No more batches: the map ends after the ones already put. Idempotent."""
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def fail(self, error: BaseException) -> None:
        """End the stream with ``error``: the map raises it (as the source's) after the batches put before."""
        with self._changed:
            if self._error is None and not self._ended:
                self._error = error
            self._ended = True
            self._changed.notify_all()

    # -- the pipeline's side ----------------------------------------------------
    def __iter__(self) -> Feed:
        return self

    def __next__(self) -> Any:
        with self._changed:
            while not self._changed.wait_for(lambda: self._items or self._ended or self._interrupted, _POLL_S):
                pass  # a bounded wait each time round: Ctrl-C gets through
            if self._interrupted:
                raise StopIteration
            if self._items:
                batch = self._items.popleft()
                self._changed.notify_all()
                return batch
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            raise StopIteration

    def interrupt(self) -> None:
        """See NOTE [ interrupted feed ]: the pipeline takes no more batches."""
        with self._changed:
            self._interrupted = True
            self._changed.notify_all()

    @property
    def waiting(self) -> int:
        """Batches put and not yet taken."""
        with self._changed:
            return len(self._items)

    def _refusing(self) -> bool:
        return self._ended or self._interrupted

    def _check_open(self) -> None:
        if self._interrupted:
            raise FeedClosed("the pipeline stopped taking batches from this feed")
        if self._ended:
            raise FeedClosed("put() after close() or fail()")
