"""Host copies split across threads: staging into pinned memory, outputs out of it.

NOTE [ parallel host copies ]: every batch is copied twice on the host — into
pinned-in before its h2d (the ``stage`` stage) and, with ``map()``'s default,
out of pinned-out into arrays of its own — and one core copies at a fraction
of what a PCIe 5 x16 link moves (a core's memcpy reaches roughly 10-20 GB/s,
the link about 50).  For large batches those copies, not the link, would bound
a copy-bound run.  numpy releases the GIL while it copies, so a few threads
copying disjoint parts of one array scale with the memory system, as far as
it goes: on a 2-CPU VM one core already takes all there is, while a 16-CPU GPU
machine's copies kept scaling to 8 threads (docs/results.md, "On a GPU: NVIDIA
H200, 2026-12-04"): so ``"auto"`` uses one thread per two CPUs, up to 8.  A
``MultiPipeline`` of N pipelines gives each the threads of its share of the
CPUs (1/N).  Copies under ``MIN_SPLIT_BYTES`` stay on the
calling thread: a hand-off to another thread costs tens of microseconds.

A :class:`HostCopier` belongs to one engine run: its worker threads start on
the first split copy and are joined when the run closes, so no thread
outlives the run.  The caller copies one part itself and returns only when
every part is written, so the copy is synchronous to whoever called it —
the rings' rules (NOTE [ buffer reuse ]) are unchanged.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
from typing import Literal

import numpy as np

from ..util.cpus import usable_cpus

#: copies smaller than this are not split (the hand-off would cost more than it saves)
MIN_SPLIT_BYTES = 4 << 20
#: no part of a split copy is smaller than this
MIN_PART_BYTES = 1 << 20
#: "auto" never uses more threads than this (memory bandwidth saturates first)
AUTO_MAX_THREADS = 8

CopyThreads = int | Literal["auto"]


def auto_copy_threads(cpus: int | None = None) -> int:
    """Threads for host copies on a machine with ``cpus`` usable CPUs (default:
    this process's): one per two CPUs, at most ``AUTO_MAX_THREADS``, at least 1
    — the stages, ORT and the user's loop keep the other CPUs busy."""
    if cpus is None:
        cpus = usable_cpus()
    return max(1, min(AUTO_MAX_THREADS, cpus // 2))


def resolve_copy_threads(value: CopyThreads) -> int:
    """``PipelineOptions.copy_threads`` as a number of threads, checked."""
    if value == "auto":
        return auto_copy_threads()
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"copy_threads must be an int >= 1 or 'auto', got {value!r}")
    return value


class HostCopier:
    """``copy(dst, src)`` with large copies split over ``threads`` threads (the caller's included)."""

    def __init__(self, threads: int, name: str = "ortpipe-copy") -> None:
        if threads < 1:
            raise ValueError(f"a HostCopier needs at least 1 thread, got {threads}")
        self.threads = threads
        self._name = name
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()  # makes the pool once, and orders that against close()
        self._closed = False

    def copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        """``np.copyto(dst, src, casting="equiv")``, in parts when it is large."""
        parts = self._parts(dst, src)
        if len(parts) == 1:
            np.copyto(dst, src, casting="equiv")
            return
        pool = self._pool_or_none()
        if pool is None:  # closed: copy it all here
            np.copyto(dst, src, casting="equiv")
            return
        futures: list[concurrent.futures.Future[None]] = []
        here = parts[:1]
        for at, (d, s) in enumerate(parts[1:], start=1):
            try:
                futures.append(pool.submit(np.copyto, d, s, casting="equiv"))
            except RuntimeError:  # closed since: the rest is copied here
                here = [parts[0], *parts[at:]]
                break
        try:
            for d, s in here:
                np.copyto(d, s, casting="equiv")
        finally:
            # never return (or raise) while another thread still writes into dst
            concurrent.futures.wait(futures)
        for future in futures:
            future.result()  # a worker's failure is the caller's

    def copied(self, array: np.ndarray) -> np.ndarray:
        """A new array equal to ``array`` (``array.copy()``, in parts when it is large)."""
        if array.nbytes < MIN_SPLIT_BYTES or self.threads == 1:
            return array.copy()
        out = np.empty(array.shape, array.dtype)
        self.copy(out, array)
        return out

    def _parts(self, dst: np.ndarray, src: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """(dst, src) pairs that together are the copy: one when it is not worth splitting."""
        nbytes = dst.nbytes
        count = min(self.threads, nbytes // MIN_PART_BYTES)
        if count < 2 or nbytes < MIN_SPLIT_BYTES or dst.shape != src.shape:
            return [(dst, src)]  # small, or broadcast by copyto: one piece
        if dst.shape[0] < count:
            if not (dst.flags.c_contiguous and src.flags.c_contiguous):
                return [(dst, src)]
            dst, src = dst.reshape(-1), src.reshape(-1)  # few large rows: split the elements
        rows = dst.shape[0]
        edges = [rows * k // count for k in range(count + 1)]
        return [(dst[a:b], src[a:b]) for a, b in itertools.pairwise(edges)]

    def _pool_or_none(self) -> concurrent.futures.ThreadPoolExecutor | None:
        with self._lock:
            if self._closed:
                return None
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(self.threads - 1, thread_name_prefix=self._name)
            return self._pool

    def close(self) -> None:
        """Join the worker threads (after the copy in progress, if any). Idempotent."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
