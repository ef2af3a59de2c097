"""What Pipeline and MultiPipeline share of their lifecycle: one ``map()`` or
``run()`` at a time, a context manager, and a ``close()`` that stops the
running one, joins its threads and then releases what the object holds."""

from __future__ import annotations

import threading
from typing import TypeVar

from ..util.closing import Closable
from ..util.errors import PipelineClosedError

#: what a call on a closed pipeline is told
CLOSED = "this pipeline is closed"
#: a second map()/run() while one is running (a broken-out-of iterator still referenced is running)
ANOTHER_RUN = (
    "another map()/run() is still running on this pipeline: finish it, or end it with its iterator's "
    "close() (an iterator left by a break stays running while it is referenced: `it = pipe.map(...)`, "
    "then `it.close()`, or iterate in a `with contextlib.closing(pipe.map(...)) as it:`), or close the pipeline"
)

Self = TypeVar("Self", bound="OneRunAtATime")


class OneRunAtATime:
    """Subclasses call :meth:`_start_lifecycle` once built, set ``_active`` (under
    ``_lock``) to the running map, and say in :meth:`_release` what closing frees."""

    _active: Closable | None
    _closed: bool

    def _start_lifecycle(self) -> None:
        self._lock = threading.Lock()
        self._active = None
        self._closed = False

    def __enter__(self: Self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop any running ``map()``, join its threads, release what this holds. Idempotent."""
        if self._closed:
            return
        self._closed = True
        active, self._active = self._active, None
        try:
            if active is not None:
                active.close()
        finally:
            self._release()

    def _release(self) -> None:
        raise NotImplementedError

    def _check_open(self) -> None:
        if self._closed:
            raise PipelineClosedError(CLOSED)
