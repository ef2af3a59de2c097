"""A ``concurrent.futures.Future`` born done: what a submit that ran its batch inline
hands back (NOTE [ submitted batches run inline ]).

NOTE [ futures born done ]: ``Future()`` makes a ``threading.Condition`` (an RLock,
a deque, bound methods) for waiters a done future never has, and ``set_result``
takes it and notifies nobody: a few microseconds a future, and more objects for
the garbage collector to walk while the caller holds its futures - as much as a
cheap model's whole batch costs on the CPU (docs/results.md).  :func:`done_future`
makes one with its result in place and no condition, no lists of waiters or
callbacks: each is made on its first use (``concurrent.futures.wait``,
``as_completed``, a callback), so every use of a Future works on it as on any
other.  A done future never changes state again (``cancel`` says False,
``set_result`` refuses), so two threads that made the condition at once could
only disagree on who guards a list append that the GIL guards anyway;
``setdefault`` makes them agree.

It sets the attributes ``Future.__init__`` sets, which are CPython's own: where
a Python's Future has others (checked once, at import), it is a plain Future,
made done - slower, never wrong.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures._base import FINISHED
from typing import Any, TypeVar

T = TypeVar("T")

#: what ``Future.__init__`` sets, on the Pythons this module was written against (3.10 to 3.14)
_FUTURE_FIELDS = frozenset({"_condition", "_state", "_result", "_exception", "_waiters", "_done_callbacks"})


#: what a done future needs only when it is waited on (``wait``, ``as_completed``) or given a callback
_MADE_WHEN_USED: dict[str, Callable[[], Any]] = {
    "_condition": threading.Condition,
    "_waiters": list,
    "_done_callbacks": list,
}


class _BornDone(Future[Any]):
    """A Future made done with its result; its condition made when first used.

    Made by :func:`done_future` without an ``__init__`` (Future's is skipped: what it
    makes is what this saves): the state and the absent exception, the same for every
    one, are the class's; only the result is the instance's own."""

    _state = FINISHED
    _exception = None

    def __getattr__(self, name: str) -> Any:
        # called only for attributes not set, each once (it is then in the instance's dict)
        made = _MADE_WHEN_USED.get(name)
        if made is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return self.__dict__.setdefault(name, made())

    def result(self, timeout: float | None = None) -> Any:
        return self._result  # done: no wait, no lock


def _born_done_fits() -> bool:
    """The Future of this Python sets what :class:`_BornDone` sets (NOTE [ futures born done ])."""
    try:
        return set(vars(Future())) == _FUTURE_FIELDS
    except TypeError:  # no instance dict (slots)
        return False


_FITS = _born_done_fits()


#: an instance with nothing set (its class's ``__new__``: a C call, no ``__init__`` frame)
_new = object.__new__


def _born_done(result: T) -> Future[T]:
    future = _new(_BornDone)
    future._result = result
    return future


def _made_done(result: T) -> Future[T]:
    future: Future[T] = Future()
    future.set_result(result)
    return future


#: A Future already done with ``result`` (NOTE [ futures born done ]): where this Python's
#: Future fits, one born done, else a plain one made done
done_future: Callable[[T], Future[T]] = _born_done if _FITS else _made_done
