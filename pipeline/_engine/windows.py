"""Registered windows: ``run()``'s arrays page-locked where they lie, a window at a time.

NOTE [ registered windows ]: a copy engine reads only page-locked host
memory, so each batch of an ordinary numpy array is first copied into a
pinned slot (the ``stage`` stage): on a fast link that copy, not the link,
bounds large batches (the H200 run's staging ran at well under half the
link's speed: docs/results.md).  ``Pipeline.run`` knows its whole input up front, so instead it asks
the device to page-lock the caller's memory where it lies
(``Device.register_host``: ``cudaHostRegister``, read-only for a read-only
memory map) and the h2d copies read each batch straight from it: no staging
copy.  Registration costs time per page and holds memory locked, so it goes
a window of :attr:`HostRegistering.window_bytes` at a time, only for inputs of
at least :attr:`HostRegistering.min_bytes`.

The rule (the host device models it, and its chaos mode proves it in the
tests): a window is unregistered only once the last copy that reads it has
completed - the engine hands :meth:`HostWindows.copied` each such copy's
event, and moving to the next window (or closing) waits for the last one
first.  One window is live at a time, so two windows of an array never
share a page while both are registered.  Where the device refuses (a
locked-memory limit, memory it cannot lock), the batches are staged as
before and :attr:`HostWindows.refused` says why (``Stats.host_inputs``).

The outputs likewise (:class:`ResultWindows`): ``run()`` knows how many rows
its results have, so once the first batch's output shapes are planned it
makes the whole result arrays, registers them a window at a time, and each
batch's d2h writes its rows straight into them - no copy out of a pinned-out
slot.  The same rule holds for them: a window is unregistered only once the
last d2h that writes it has completed.  A batch whose outputs ORT allocates
(NOTE [ data-dependent outputs ]) is copied through its pinned-out slot as
before, into the same arrays.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..devices import Device, Event, Registration, RegistrationRefused
from ..session import Shape


@dataclass(frozen=True)
class HostRegistering:
    """When ``run()`` registers its inputs in place instead of staging them
    (``PipelineOptions(registering=None)``: never)."""

    #: inputs smaller than this are staged: registering costs more than it saves
    min_bytes: int = 16 << 20
    #: bytes of the inputs registered at once (whole batches; at least one)
    window_bytes: int = 256 << 20

    def __post_init__(self) -> None:
        for name in ("min_bytes", "window_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"HostRegistering.{name} must be an int >= 1, got {value!r}")


class _OneWindowAtATime:
    """Windows of whole arrays registered one at a time, each released only once
    the last copy that uses it has completed (:meth:`copied`)."""

    def __init__(self, device: Device, poll_s: float) -> None:
        self._device = device
        self._poll_s = poll_s
        self._registered: list[Registration] = []
        self._in_place = False  # the live window's memory is page-locked: registered, or already
        self._last_copy: Event | None = None
        #: why the device refused (None: every window asked for was registered)
        self.refused: str | None = None
        #: windows registered so far
        self.windows = 0

    @property
    def live(self) -> bool:
        """Whether a window is page-locked now (registered, or locked already), read where it lies."""
        return self._in_place

    def copied(self, event: Event) -> None:
        """A copy that uses the live window was enqueued; ``event`` completes after it."""
        self._last_copy = event

    def _register(self, views: list[np.ndarray]) -> bool:
        """Release the live window, then register ``views`` as the next; False where the device refuses."""
        self._release()
        if self.refused is not None:
            return False
        try:
            for span in _spans(views):
                if not self._device.host_locked(span):  # pinned already, or another's registration
                    self._registered.append(self._device.register_host(span))
        except RegistrationRefused as exc:
            self._release()
            self.refused = str(exc)
            return False
        self._in_place = True
        self.windows += 1
        return True

    def _release(self) -> None:
        """Unregister the live window once the last copy that uses it has completed."""
        last, self._last_copy = self._last_copy, None
        registered, self._registered = self._registered, []
        self._in_place = False
        try:
            # the streams finish their work, also when the run is closing; a failed
            # stream's event completes too (raising its failure)
            while last is not None and not last.synchronize(self._poll_s):
                pass
        finally:
            for registration in registered:
                registration.release()

    def close(self) -> None:
        """Release the live window (after its last copy); call once the run has ended."""
        self._release()


def _own_pages(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An empty array on pages no other array shares: registered while the inputs' windows
    are, it must not share a page with them (the driver refuses a page twice), which memory
    from the heap may (below glibc's mmap threshold, 32 MiB at most)."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    raw = np.empty(nbytes + -nbytes % _PAGE + _PAGE, np.uint8)
    start = -raw.ctypes.data % _PAGE
    return raw[start : start + nbytes].view(dtype).reshape(shape)


def _spans(views: list[np.ndarray]) -> list[np.ndarray]:
    """The memory of ``views`` as ranges to register, each once: views whose pages overlap (the
    same array given as two inputs, two views of one buffer) become one byte view of their span -
    the driver refuses a page registered twice - read-only where any of them is."""
    ordered = sorted((view for view in views if view.nbytes), key=lambda view: view.ctypes.data)
    groups: list[list[np.ndarray]] = []
    for view in ordered:
        if groups and view.ctypes.data // _PAGE <= _end(groups[-1]) // _PAGE:
            groups[-1].append(view)
        else:
            groups.append([view])
    return [group[0] if len(group) == 1 else _span_of(group) for group in groups]


#: the page size registration locks in
_PAGE = 4096


def _end(group: list[np.ndarray]) -> int:
    """The last byte's address of a group of views (inclusive)."""
    return max(view.ctypes.data + view.nbytes for view in group) - 1


def _span_of(group: list[np.ndarray]) -> np.ndarray:
    """One byte view from the first view's first byte to the group's last (the views keep the memory alive)."""
    start = group[0].ctypes.data
    span = np.ctypeslib.as_array((ctypes.c_uint8 * (_end(group) + 1 - start)).from_address(start))
    span.flags.writeable = all(view.flags.writeable for view in group)
    return span


class HostWindows(_OneWindowAtATime):
    """The batches of whole arrays, ``batch_size`` rows each, each in a registered
    window where the device allows it (:attr:`live`), one window at a time."""

    def __init__(
        self,
        device: Device,
        arrays: dict[str, np.ndarray],
        batch_size: int,
        how: HostRegistering,
        poll_s: float = 0.05,
    ) -> None:
        super().__init__(device, poll_s)
        self._arrays = arrays
        self._batch_size = batch_size
        self._total = next(iter(arrays.values())).shape[0]
        batch_bytes = sum(array[:batch_size].nbytes for array in arrays.values())
        self._window_rows = batch_size * max(1, how.window_bytes // max(1, batch_bytes))

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for start in range(0, self._total, self._batch_size):
            if start % self._window_rows == 0:
                self._register([array[start : start + self._window_rows] for array in self._arrays.values()])
            yield {name: array[start : start + self._batch_size] for name, array in self._arrays.items()}

    def describe(self) -> str:
        """What ``Stats.host_inputs`` says of these inputs."""
        if self.refused is None:
            return f"registered in place, {self.windows} window(s), no staging copy"
        registered = f" after {self.windows} window(s) registered" if self.windows else ""
        return f"staged into pinned memory{registered}: {self.refused}"


class ResultWindows(_OneWindowAtATime):
    """``run()``'s whole outputs, ``total`` rows, made once their row shapes are known
    (:meth:`arrays_for`) and registered a window at a time, so that each batch's d2h
    writes its rows straight into them (:meth:`destination`)."""

    def __init__(self, device: Device, total: int, batch_size: int, how: HostRegistering, poll_s: float = 0.05) -> None:
        super().__init__(device, poll_s)
        self._total = total
        self._batch_size = batch_size
        self._how = how
        self._lock = threading.Lock()  # the consumer and the thread issuing d2h both may make the arrays
        #: the whole outputs, once made
        self.arrays: dict[str, np.ndarray] | None = None
        self._rows = (0, 0)  # the rows [start, stop) of the live window
        self._window_rows = 0
        self._checked: dict[str, tuple[np.dtype, Shape]] | None = None  # a layout seen to fit the arrays
        self._small = False  # the outputs are too small to be worth registering

    def arrays_for(self, rows: dict[str, tuple[np.dtype, Shape]]) -> dict[str, np.ndarray]:
        """The whole outputs, made on the first call from ``rows``: each output's
        dtype and the shape of one of its rows."""
        with self._lock:
            if self.arrays is None:
                self.arrays = {name: _own_pages((self._total, *shape), dtype) for name, (dtype, shape) in rows.items()}
            return self.arrays

    def destination(
        self, index: int, rows: int, bound_rows: int, layout: dict[str, tuple[np.dtype, Shape]]
    ) -> dict[str, np.ndarray] | None:
        """Where batch ``index``'s d2h writes its ``rows`` rows: views of the whole
        outputs in a registered window; None where it goes through a pinned-out slot
        (outputs too small to register, the device refused, not one row per row)."""
        if self.refused is not None or self._small or not self._fits(layout, bound_rows):
            return None
        start = index * self._batch_size
        if not self._rows[0] <= start < self._rows[1] and not self._next_window(start):
            return None
        if start + rows > self._rows[1]:
            return None  # not the batch run() cut here: never, but never written past a window
        arrays = self.arrays
        assert arrays is not None
        return {name: array[start : start + rows] for name, array in arrays.items()}

    def _fits(self, layout: dict[str, tuple[np.dtype, Shape]], bound_rows: int) -> bool:
        """Every output one row per row, as the arrays hold them (made here if not yet)."""
        if layout is self._checked:  # the engine plans one layout a batch size: checked once
            return True
        if any(not shape or shape[0] != bound_rows for _, shape in layout.values()):
            return False
        rows = {name: (dtype, shape[1:]) for name, (dtype, shape) in layout.items()}
        arrays = self.arrays_for(rows)
        if {name: (array.dtype, array.shape[1:]) for name, array in arrays.items()} != rows:
            return False
        if not self._window_rows:
            row_bytes = sum(array[:1].nbytes for array in arrays.values())
            self._small = row_bytes * self._total < self._how.min_bytes
            batch_bytes = max(1, row_bytes * self._batch_size)
            self._window_rows = self._batch_size * max(1, self._how.window_bytes // batch_bytes)
        self._checked = layout
        return not self._small

    def _next_window(self, start: int) -> bool:
        first = start - start % self._window_rows
        stop = min(first + self._window_rows, self._total)
        arrays = self.arrays
        assert arrays is not None
        if not self._register([array[first:stop] for array in arrays.values()]):
            self._rows = (0, 0)
            return False
        self._rows = (first, stop)
        return True

    def describe(self) -> str | None:
        """What ``Stats.host_outputs`` says of these outputs (None: too small to register)."""
        if self.refused is None:
            return f"written in place, {self.windows} window(s), no copy out of pinned memory" if self.windows else None
        registered = f" after {self.windows} window(s) registered" if self.windows else ""
        return f"copied out of pinned memory{registered}: {self.refused}"


@dataclass(frozen=True)
class InPlace:
    """What of ``run()``'s whole arrays lies registered in place (NOTE [ registered windows ])."""

    inputs: HostWindows | None = None
    outputs: ResultWindows | None = None
