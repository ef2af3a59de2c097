"""Several streams of items made at once by threads, read in order.

NOTE [ videos decoded at once ]: a folder of short clips is decoded one clip
after another, and each clip's decoder winds up and down - FFmpeg's frame
threads wait for the first frames, drain at the end - so the CPUs idle between
clips: decoding two or three at once ran 1.3-1.5x one at a time on the
project's two vCPUs (docs/results.md, ``benchmarks/test_video.py``).
:func:`in_order` has up to ``ahead`` streams (a clip's chunks each) made by
threads of their own while the caller reads the first, each into a queue of
at most ``room`` items, so memory stays bounded.  The caller sees each stream
as it would have read it itself: its items in order, then its end, or the
exception that ended it, raised where it was raised - so what follows from a
clip's end or failure (a list of clips cut short, one left out) happens in
the caller's thread, in the clips' order.  Streams are started as the caller
reaches them, ``ahead`` at a time, and everything is stopped and joined when
the caller's iteration ends, however it ends.
"""

from __future__ import annotations

import collections
import functools
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..util.rows import close_iteration

K = TypeVar("K")
T = TypeVar("T")

#: how often a thread whose queue is full looks whether it has been stopped
_POLL_S = 0.05


def put_until_stopped(items: queue.Queue[Any], item: Any, stopped: threading.Event, poll_s: float = _POLL_S) -> bool:
    """``item`` into the bounded queue ``items`` once there is room, looking every ``poll_s``
    whether ``stopped`` was set (its reader gone); False where it was, first."""
    while not stopped.is_set():
        try:
            items.put(item, timeout=poll_s)
            return True
        except queue.Full:
            continue
    return False


@dataclass(frozen=True)
class _Ended:
    """The end of a stream: ``error`` where an exception ended it."""

    error: BaseException | None = None


class _Stream(Generic[T]):
    """One stream made by a thread of its own into a bounded queue."""

    def __init__(self, make: Callable[[], Iterator[T]], room: int, name: str) -> None:
        self._make = make
        self._items: queue.Queue[T | _Ended] = queue.Queue(maxsize=room)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            items = self._make()
            try:
                for item in items:
                    if not self._put(item):
                        return
            finally:
                close_iteration(items)
        except BaseException as exc:  # noqa: BLE001 - handed to the reader, raised there
            self._put(_Ended(exc))
            return
        self._put(_Ended())

    def _put(self, item: T | _Ended) -> bool:
        return put_until_stopped(self._items, item, self._stopped)

    def items(self) -> Iterator[T]:
        """The stream's items as they come; its end, or its exception raised here."""
        while True:
            item = self._items.get()
            if isinstance(item, _Ended):
                if item.error is not None:
                    raise item.error
                return
            yield item

    def stop(self) -> None:
        """Stop the thread (its iterator closed) and wait for it."""
        self._stopped.set()
        self._thread.join()


def in_order(
    keys: Iterator[K], make: Callable[[K], Iterator[T]], ahead: int, room: int = 2, name: str = "ortpipe-decode"
) -> Iterator[tuple[K, Iterator[T]]]:
    """``(key, stream)`` for each of ``keys``, the stream ``make(key)``'s items.  With
    ``ahead`` > 1 up to that many streams are made at once by threads, ``room`` items
    ahead each (NOTE [ videos decoded at once ]); with 1, each is made as it is read.
    A stream must be read before the next is asked for.  An exception ``keys`` raises
    comes after the streams before it."""
    if ahead <= 1:
        for key in keys:
            yield key, make(key)
        return
    started: collections.deque[tuple[K, _Stream[T]]] = collections.deque()
    pending: BaseException | None = None  # raised by keys while they were read ahead: raised in its turn

    def start_more() -> None:
        nonlocal pending
        while pending is None and len(started) < ahead:
            try:
                key = next(keys)
            except StopIteration:
                return
            except Exception as exc:  # noqa: BLE001 - raised after the streams started before it
                pending = exc
                return
            started.append((key, _Stream(functools.partial(make, key), room, name)))

    try:
        start_more()
        while started:
            key, stream = started[0]
            yield key, stream.items()
            started.popleft()
            stream.stop()
            start_more()
        if pending is not None:
            raise pending
    finally:
        for _, stream in started:
            stream.stop()
