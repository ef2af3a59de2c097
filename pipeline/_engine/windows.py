"""Registered windows: ``run()``'s arrays page-locked where they lie, a window at a time.

NOTE [ registered windows ]: a copy engine reads only page-locked host
memory, so each batch of an ordinary numpy array is first copied into a
pinned slot (the ``stage`` stage): on a fast link that copy, not the link,
bounds large batches (the H200 run: 20-23 GB/s of staging against a 55 GB/s
link).  ``Pipeline.run`` knows its whole input up front, so instead it asks
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
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..devices import Device, Event, Registration, RegistrationRefused


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


class HostWindows:
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
        self._device = device
        self._arrays = arrays
        self._batch_size = batch_size
        self._poll_s = poll_s
        self._total = next(iter(arrays.values())).shape[0]
        batch_bytes = sum(array[:batch_size].nbytes for array in arrays.values())
        self._window_rows = batch_size * max(1, how.window_bytes // max(1, batch_bytes))
        self._registered: list[Registration] = []
        self._last_copy: Event | None = None
        #: why the batches are staged instead (None: every window was registered)
        self.refused: str | None = None
        #: windows registered so far
        self.windows = 0

    @property
    def live(self) -> bool:
        """Whether the batch given last lies in a registered window."""
        return bool(self._registered)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for start in range(0, self._total, self._batch_size):
            if start % self._window_rows == 0:
                self._next_window(start)
            yield {name: array[start : start + self._batch_size] for name, array in self._arrays.items()}

    def copied(self, event: Event) -> None:
        """An h2d that reads the live window was enqueued; ``event`` completes after it."""
        self._last_copy = event

    def _next_window(self, start: int) -> None:
        self._release()
        if self.refused is not None:
            return
        stop = start + self._window_rows
        try:
            for array in self._arrays.values():
                self._registered.append(self._device.register_host(array[start:stop]))
        except RegistrationRefused as exc:
            self._release()
            self.refused = str(exc)
            return
        self.windows += 1

    def _release(self) -> None:
        """Unregister the live window once the last copy that reads it has completed."""
        last, self._last_copy = self._last_copy, None
        registered, self._registered = self._registered, []
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

    def describe(self) -> str:
        """What ``Stats.host_inputs`` says of these inputs."""
        if self.refused is None:
            return f"registered in place, {self.windows} window(s), no staging copy"
        registered = f" after {self.windows} window(s) registered" if self.windows else ""
        return f"staged into pinned memory{registered}: {self.refused}"
