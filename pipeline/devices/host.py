"""The host device: CUDA's stream/event semantics implemented with threads.

Two uses:

* **CPU backend.**  With no link model and no chaos, every stream runs its
  operations inline in the calling thread (NOTE [ threads are not stages ]:
  the engine's stage threads already overlap loading, ORT's CPU run and
  post-processing; a worker per stream would only add hand-offs).
* **A GPU stand-in for tests and studies.**  With a :class:`LinkModel`, or
  with chaos on, each stream gets a worker thread that runs its operations in
  FIFO order.  Copies take as long as the modelled PCIe link would (one copy
  engine per direction, shared by all streams of the device), and chaos
  sleeps a random time before any operation, so that a missing event wait
  shows up as a wrong result instead of passing by luck.
"""

from __future__ import annotations

import functools
import math
import queue
import random
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..util.errors import DeviceError
from ._base import (
    READ_ONLY_UNSUPPORTED,
    Device,
    DeviceArray,
    DeviceBuffer,
    Event,
    Registration,
    RegistrationRefused,
    Stream,
)
from ._normalize import NormalizeOp, normalize_numpy
from ._nv12 import ColourSpace, Nv12Frame, Nv12Op, convert_numpy
from .surfaces import HostSurfaces

_POLL_S = 0.05
_ALIGN = 64
#: the page size registration works in (cudaHostRegister locks whole pages)
PAGE = 4096


@dataclass(frozen=True)
class LinkModel:
    """A PCIe-like link: bandwidth per direction (GB/s, 1e9 bytes) and latency."""

    h2d_gbps: float
    d2h_gbps: float
    latency_us: float = 0.0

    def __post_init__(self) -> None:
        for field, value in (("h2d_gbps", self.h2d_gbps), ("d2h_gbps", self.d2h_gbps)):
            if not value > 0:
                raise ValueError(f"LinkModel.{field} must be > 0 GB/s, got {value!r}")
        if self.latency_us < 0:
            raise ValueError(f"LinkModel.latency_us must be >= 0, got {self.latency_us!r}")

    def seconds(self, nbytes: int, direction: str) -> float:
        """How long a copy of ``nbytes`` takes in ``direction`` ("h2d" or "d2h")."""
        gbps = self.h2d_gbps if direction == "h2d" else self.d2h_gbps
        return self.latency_us * 1e-6 + nbytes / (gbps * 1e9)


@dataclass(frozen=True)
class ChaosOptions:
    """Random delays before stream operations (tests of buffer-reuse safety)."""

    probability: float = 0.5
    max_delay_s: float = 0.0004
    seed: int = 0


class _Signal:
    """One condition variable for all events of a device, and how many threads
    sleep on it: recording an event then notifies only when someone waits."""

    __slots__ = ("cond", "sleepers")

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.sleepers = 0


_SHARED_SIGNAL = _Signal()


def _aligned_bytes(nbytes: int, align: int = _ALIGN) -> np.ndarray:
    """``nbytes`` starting on an ``align`` boundary; with ``align`` a page, their pages are
    wholly inside the allocation (the rest of the last one is spare)."""
    spare = -nbytes % align if align >= PAGE else 0
    raw = np.empty(nbytes + spare + align, dtype=np.uint8)
    offset = (-raw.ctypes.data) % align
    return raw[offset : offset + nbytes]


def _pages(start: int, nbytes: int) -> tuple[int, int]:
    """The first and last page a range of ``nbytes`` from ``start`` touches."""
    return start // PAGE, (start + max(nbytes, 1) - 1) // PAGE


def typed_view(flat: np.ndarray, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """A typed view of the first bytes of a flat uint8 host buffer (pinned slots, host device memory)."""
    return flat[: math.prod(shape) * dtype.itemsize].view(dtype).reshape(shape)


def _as_bytes(array: np.ndarray) -> np.ndarray:
    if array.dtype == np.uint8 and array.strides == (1,):
        return array  # already flat bytes: every slot buffer, so the common case
    if not array.flags.c_contiguous:
        raise DeviceError(f"host copy needs a C-contiguous array, got strides {array.strides}")
    return array.reshape(-1).view(np.uint8)


class HostEvent(Event):
    """A completion flag with a generation count and a perf_counter timestamp.

    Events of one device share one condition variable: creating a Condition
    per event would cost more than the rest of a batch's bookkeeping, and the
    few waiters a pipeline has make a shared notify_all cheap.
    """

    __slots__ = ("_completed", "_fault", "_recorded", "_signal", "_time")

    def __init__(self, signal: _Signal | None = None) -> None:
        self._signal = signal if signal is not None else _SHARED_SIGNAL
        self._recorded = 0
        self._completed = 0
        self._time: float | None = None
        self._fault: BaseException | None = None

    def record(self, stream: Stream) -> None:
        if not isinstance(stream, HostStream):
            raise TypeError(f"a host event can only be recorded on a host stream, got {stream!r}")
        if not stream._threaded:  # inline: the stream has reached this point already
            stream._check_open()
            # No lock: only this thread records this event now (CUDA's rule too),
            # and _reach publishes safely without it (see there).
            self._recorded += 1
            self._reach(self._recorded, stream._fault)
            return
        with self._signal.cond:
            self._recorded += 1
            generation = self._recorded
        stream._enqueue(lambda: self._complete(generation, stream._fault))

    def _complete(self, generation: int, fault: BaseException | None) -> None:
        # On a stream's worker: under the lock, as workers of several streams
        # may complete records of one event at once.
        signal = self._signal
        with signal.cond:
            self._publish(generation, fault)
            if signal.sleepers:
                signal.cond.notify_all()

    def _reach(self, generation: int, fault: BaseException | None) -> None:
        # Inline, in the recording thread, without the lock.  A waiter counts
        # itself in ``sleepers`` under the lock before it checks the count and
        # sleeps: if we read 0 here it has not checked yet and will see the new
        # count; if not, we notify under the lock, which it gives up only by
        # sleeping.
        self._publish(generation, fault)
        signal = self._signal
        if signal.sleepers:
            with signal.cond:
                signal.cond.notify_all()

    def _publish(self, generation: int, fault: BaseException | None) -> None:
        # time and fault first: a lock-free reader that sees the new count sees them too
        if generation > self._completed:
            self._time = time.perf_counter()
            self._fault = fault
            self._completed = generation

    # The counters are ints, each written by one thread at a time (see
    # record); reading one is atomic, so the checks below take the lock only
    # to sleep on it.
    def _target(self) -> int:
        return self._recorded

    def _wait_for(self, generation: int, timeout: float | None) -> bool:
        if self._completed >= generation:
            return True
        signal = self._signal
        with signal.cond:
            signal.sleepers += 1
            try:
                return signal.cond.wait_for(lambda: self._completed >= generation, timeout)
            finally:
                signal.sleepers -= 1

    def query(self) -> bool:
        return self._completed >= self._recorded

    def synchronize(self, timeout: float | None = None) -> bool:
        if not self._wait_for(self._target(), timeout):
            return False
        if self._fault is not None:
            raise DeviceError(f"an earlier operation on the stream failed: {self._fault!r}") from self._fault
        return True

    def elapsed_s(self, since: Event) -> float:
        if not isinstance(since, HostEvent):
            raise TypeError(f"elapsed_s needs two host events, got {since!r}")
        if self._time is None or since._time is None:
            raise DeviceError("elapsed_s on an event that has not completed")
        return self._time - since._time

    @property
    def timestamp(self) -> float | None:
        """perf_counter() when the latest record completed."""
        return self._time


class HostRegistration(Registration):
    """See NOTE [ registered windows ], on the host device: nothing is locked, but the
    device keeps the window's address range until it is released, and a copy
    that reads it checks, when it runs, that it still is (chaos mode delays it):
    a window released while a copy may still read it fails the run."""

    def __init__(self, device: HostDevice, array: np.ndarray) -> None:
        self.array = array
        self.start = array.ctypes.data
        self.end = self.start + array.nbytes
        self._device = device
        self.released = False

    def holds(self, array: np.ndarray) -> bool:
        start = array.ctypes.data
        return self.start <= start and start + array.nbytes <= self.end

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._device._unregistered(self)


class HostStream(Stream):
    """Runs operations in order: inline, or on a worker thread of its own."""

    def __init__(self, device: HostDevice, name: str, threaded: bool, seed: int) -> None:
        self.name = name
        self._device = device
        self._threaded = threaded
        self.copies_inline = not threaded
        self._fault: BaseException | None = None
        self._closed = False
        self._rng = random.Random(seed)
        self._chaos = device.chaos
        self._lock = threading.Condition(threading.Lock())
        self._submitted = 0
        self._done = 0
        self._queue: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        if threaded:
            self._worker = threading.Thread(target=self._work, name=f"ortpipe-stream-{name}", daemon=True)
            self._worker.start()

    # -- running operations -------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise DeviceError(f"stream {self.name!r} is closed")

    def _enqueue(self, op: Callable[..., None], *args: Any) -> None:
        """Run ``op(*args)`` in stream order: now (inline) or on the worker."""
        self._check_open()
        if not self._threaded:
            op(*args)
            return
        with self._lock:
            self._submitted += 1
        self._queue.put(functools.partial(op, *args) if args else op)

    def _work(self) -> None:
        while True:
            try:
                op = self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                if self._closed:
                    return
                continue
            if op is None:
                return
            try:
                self._maybe_delay()
                op()
            except BaseException as exc:  # noqa: BLE001 - kept as the stream's sticky fault
                if self._fault is None:
                    self._fault = exc
            finally:
                with self._lock:
                    self._done += 1
                    self._lock.notify_all()

    def _maybe_delay(self) -> None:
        chaos = self._chaos
        if chaos is not None and self._rng.random() < chaos.probability:
            time.sleep(self._rng.uniform(0.0, chaos.max_delay_s))

    # -- the Stream interface ----------------------------------------------
    def copy_h2d(self, dst: DeviceBuffer, src: np.ndarray, nbytes: int) -> None:
        window = self._device._window_of(src)
        if window is None:
            self._enqueue(self._device._copy, _as_bytes(dst.owner), _as_bytes(src), nbytes, "h2d")
            return
        self._device.registered_reads += 1
        self._enqueue(self._checked_copy, window, _as_bytes(dst.owner), _as_bytes(src), nbytes, "h2d")

    def copy_d2h(self, dst: np.ndarray, src: DeviceBuffer, nbytes: int) -> None:
        window = self._device._window_of(dst)
        if window is None:
            self._enqueue(self._device._copy, _as_bytes(dst), _as_bytes(src.owner), nbytes, "d2h")
            return
        self._device.registered_writes += 1
        self._enqueue(self._checked_copy, window, _as_bytes(dst), _as_bytes(src.owner), nbytes, "d2h")

    def _checked_copy(self, window: HostRegistration, dst: np.ndarray, src: np.ndarray, nbytes: int, way: str) -> None:
        """NOTE [ registered windows ]: a copy of registered host memory, whose window
        must still be registered when the copy runs (chaos mode runs it late)."""
        if window.released:
            what = "an h2d copy read" if way == "h2d" else "a d2h copy wrote"
            raise DeviceError(f"{what} host memory whose registration was released before it ran")
        self._device._copy(dst, src, nbytes, way)

    def copy_d2d(self, dst: DeviceBuffer, src: DeviceArray, nbytes: int) -> None:
        def copy() -> None:  # device memory to device memory: no link to cross
            np.copyto(dst.owner[:nbytes], _as_bytes(src.buffer.owner)[:nbytes])

        self._enqueue(copy)

    def zero(self, dst: DeviceBuffer, offset: int, nbytes: int) -> None:
        def clear() -> None:
            dst.owner[offset : offset + nbytes] = 0

        self._enqueue(clear)

    def wait_producer(self, handle: int | None) -> None:
        """Nothing: the host device's arrays are written before they are handed over."""

    def launch(self, fn: Callable[[], None]) -> None:
        self._enqueue(fn)

    def wait_event(self, event: Event) -> None:
        if not isinstance(event, HostEvent):
            raise TypeError(f"a host stream can only wait on a host event, got {event!r}")
        generation = event._target()  # captured now: cudaStreamWaitEvent semantics
        if not self._threaded:
            self._check_open()
            if event._completed < generation:  # inline: nothing to do for an event already reached
                self._block_on(event, generation)
            self._inherit(event)
            return
        self._enqueue(lambda: self._block_on(event, generation))

    def _block_on(self, event: HostEvent, generation: int) -> None:
        while not event._wait_for(generation, _POLL_S):
            if self._closed:
                raise DeviceError(f"stream {self.name!r} closed while waiting on an event")
        self._inherit(event)

    def _inherit(self, event: HostEvent) -> None:
        """A stream that waited on work that failed fails too, as a CUDA context's
        sticky error does: the failure reaches whoever waits on this stream's events."""
        if event._fault is not None and self._fault is None:
            self._fault = event._fault

    def synchronize(self, timeout: float | None = None) -> bool:
        with self._lock:
            target = self._submitted
            return self._lock.wait_for(lambda: self._done >= target, timeout)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._worker is not None:
            self._queue.put(None)
            self._worker.join(timeout=5.0)

    def __repr__(self) -> str:
        mode = "worker" if self._threaded else "inline"
        return f"HostStream({self.name!r}, {mode})"


class HostDevice(Device):
    """The CPU as a device, optionally behind an emulated PCIe link.

    ``HostDevice()`` is the CPU backend.  ``HostDevice(link_gbps=12.0,
    latency_us=10)`` makes every copy take as long as a 12 GB/s link would
    (h2d and d2h are independent copy engines); ``h2d_gbps``/``d2h_gbps``
    set the directions apart.  ``chaos=True`` (or a :class:`ChaosOptions`)
    adds random delays before every stream operation.
    """

    kind = "cpu"
    ort_device = ("cpu", 0)
    cheap_pinned = True  # "page-locked" memory is plain memory here

    def __init__(
        self,
        link_gbps: float | None = None,
        latency_us: float = 0.0,
        *,
        h2d_gbps: float | None = None,
        d2h_gbps: float | None = None,
        chaos: bool | ChaosOptions = False,
        locked_limit_bytes: int | None = None,
        decoder_surfaces: int = 8,
        read_only_registration: bool = True,
    ) -> None:
        """``locked_limit_bytes``: host memory that may be registered at once
        (NOTE [ registered windows ]), as a locked-memory limit caps it; None: no limit.
        ``read_only_registration``: whether read-only memory can be registered (False: a GPU
        whose ``hostRegisterReadOnlySupported`` is 0).
        ``decoder_surfaces``: the surfaces of the modelled hardware decoder's pool
        (NOTE [ decoded surfaces ])."""
        h2d = h2d_gbps if h2d_gbps is not None else link_gbps
        d2h = d2h_gbps if d2h_gbps is not None else link_gbps
        if (h2d is None) != (d2h is None):
            raise ValueError("give link_gbps, or both h2d_gbps and d2h_gbps")
        self.link: LinkModel | None = None
        if h2d is not None and d2h is not None:
            self.link = LinkModel(h2d, d2h, latency_us)
        if chaos is True:
            chaos = ChaosOptions()
        self.chaos: ChaosOptions | None = chaos or None
        self.threaded = self.link is not None or self.chaos is not None
        self.charges_transfers = self.link is not None
        self._engines = {"h2d": threading.Lock(), "d2h": threading.Lock()}
        self._streams: list[HostStream] = []
        self._signal = _Signal()
        # See NOTE [ registered windows ]: modelled where copies run apart from the host (a
        # link, chaos); the CPU backend reads the caller's memory where it lies anyway
        self.registers_host = self.threaded
        self.locked_limit_bytes = locked_limit_bytes
        self.read_only_registration = read_only_registration
        self._registered: list[HostRegistration] = []
        #: (start, end) of the page-locked buffers this device made (pinned_empty), while they live
        self._pinned: dict[int, tuple[int, int]] = {}
        self._registry_lock = threading.Lock()
        #: h2d copies that read registered memory, d2h copies that wrote it, and
        #: registrations made (counted for tests)
        self.registered_reads = 0
        self.registered_writes = 0
        self.registrations = 0
        #: the modelled decoder's surfaces, which decoded frames are written into (NOTE [ decoded surfaces ])
        self.surfaces = HostSurfaces(decoder_surfaces)

    @property
    def name(self) -> str:
        parts = ["host"]
        if self.link is not None:
            link = self.link
            parts.append(f"emulated link h2d {link.h2d_gbps:g} GB/s, d2h {link.d2h_gbps:g} GB/s")
            if link.latency_us:
                parts.append(f"{link.latency_us:g} us latency")
        if self.chaos is not None:
            parts.append("chaos")
        return parts[0] if len(parts) == 1 else f"{parts[0]} ({', '.join(parts[1:])})"

    def _copy(self, dst: np.ndarray, src: np.ndarray, nbytes: int, direction: str) -> None:
        if nbytes > dst.nbytes or nbytes > src.nbytes:
            raise DeviceError(f"{direction} copy of {nbytes} bytes overruns a buffer ({src.nbytes} -> {dst.nbytes})")
        if self.link is None:
            np.copyto(dst[:nbytes], src[:nbytes])
            return
        with self._engines[direction]:  # one copy engine per direction
            start = time.perf_counter()
            np.copyto(dst[:nbytes], src[:nbytes])
            remaining = self.link.seconds(nbytes, direction) - (time.perf_counter() - start)
            if remaining > 0:
                time.sleep(remaining)

    def host_locked(self, array: np.ndarray) -> bool:
        """In pinned memory this device made, or in a live registration (the driver's answer)."""
        start, end = array.ctypes.data, array.ctypes.data + array.nbytes
        with self._registry_lock:
            pinned = self._pinned.values()
            ranges = [*pinned, *((window.start, window.end) for window in self._registered)]
        return any(low <= start and end <= high for low, high in ranges)

    def register_host(self, array: np.ndarray) -> HostRegistration:
        if not self.registers_host:
            return super().register_host(array)  # type: ignore[return-value] # raises
        if not array.flags.c_contiguous:
            raise RegistrationRefused("the array is not C-contiguous")
        if not array.flags.writeable and not self.read_only_registration:
            raise RegistrationRefused(READ_ONLY_UNSUPPORTED)
        with self._registry_lock:
            self._refuse_locked_pages(array)
            locked = sum(window.array.nbytes for window in self._registered)
            limit = self.locked_limit_bytes
            if limit is not None and locked + array.nbytes > limit:
                raise RegistrationRefused(
                    f"the locked-memory limit ({limit:,} bytes) is reached: {locked:,} registered, "
                    f"{array.nbytes:,} more asked"
                )
            window = HostRegistration(self, array)
            self._registered.append(window)
            self.registrations += 1
        return window

    def _refuse_locked_pages(self, array: np.ndarray) -> None:
        """As the driver does (cudaErrorHostMemoryAlreadyRegistered): memory on a page that is
        page-locked already - registered, or pinned - cannot be registered again."""
        first, last = _pages(array.ctypes.data, array.nbytes)
        held = [*self._pinned.values(), *((window.start, window.end) for window in self._registered)]
        for start, end in held:
            low, high = _pages(start, end - start)
            if first <= high and low <= last:
                raise RegistrationRefused(
                    f"cudaHostRegister of {array.nbytes:,} bytes failed: cudaErrorHostMemoryAlreadyRegistered "
                    "(part of the range is page-locked already)"
                )

    def _unregistered(self, window: HostRegistration) -> None:
        with self._registry_lock:
            self._registered.remove(window)

    def _window_of(self, array: np.ndarray) -> HostRegistration | None:
        """The live registration ``array`` lies in, if any."""
        if not self._registered:
            return None
        with self._registry_lock:
            return next((window for window in self._registered if window.holds(array)), None)

    def link_seconds(self, nbytes: int, direction: str) -> float:
        """What a transfer of ``nbytes`` costs on the emulated link (0 with none)."""
        return 0.0 if self.link is None else self.link.seconds(nbytes, direction)

    def charge_transfer(self, nbytes: int, direction: str) -> None:
        seconds = self.link_seconds(nbytes, direction)
        if seconds > 0:
            with self._engines[direction]:
                time.sleep(seconds)

    nv12_frames = "host"

    def nv12_frame(self, luma: Any, chroma: Any, colour: ColourSpace) -> Nv12Frame:
        return self.surfaces.frame(np.asarray(luma), np.asarray(chroma), colour)

    def convert_nv12(self, stream: Stream, op: Nv12Op) -> None:
        frame = op.frame
        if op.dst.nbytes < op.dst_nbytes:
            raise DeviceError(f"an NV12 conversion of {op.dst_nbytes} bytes overruns its row ({op.dst.nbytes})")

        def run() -> None:  # NOTE [ decoded surfaces ]: its frame must still be held now
            if frame.released:
                raise DeviceError("a conversion read a decoded frame whose surface was released before it ran")
            convert_numpy(op, frame.luma.owner, frame.chroma.owner, op.dst.owner)

        stream.launch(run)

    def normalize(self, stream: Stream, op: NormalizeOp) -> None:
        def run() -> None:
            source = typed_view(op.src.owner, op.src_dtype, op.src_shape)
            out = typed_view(op.dst.owner, op.dst_dtype, op.dst_shape)
            normalize_numpy(source, op.mul, op.add, op.to_nchw, out)

        stream.launch(run)

    def pinned_empty(self, nbytes: int) -> np.ndarray:
        # whole pages of their own, as cudaHostAlloc's are: no other array shares a page with them
        buffer = _aligned_bytes(nbytes, PAGE)
        if not self.registers_host:  # the CPU backend registers nothing: no pages to keep track of
            return buffer
        key = id(buffer.base)
        with self._registry_lock:  # page-locked while it lives (host_locked, _refuse_locked_pages)
            self._pinned[key] = (buffer.ctypes.data, buffer.ctypes.data + max(nbytes, 1))
        weakref.finalize(buffer.base, self._unpinned, key)
        return buffer

    def _unpinned(self, key: int) -> None:
        with self._registry_lock:
            self._pinned.pop(key, None)

    def device_empty(self, nbytes: int) -> DeviceBuffer:
        owner = _aligned_bytes(nbytes)
        return DeviceBuffer(ptr=owner.ctypes.data, nbytes=nbytes, owner=owner)

    def to_device(self, array: np.ndarray) -> DeviceArray:
        """A copy of ``array`` in this device's memory: what a GPU decoder or an
        earlier model hands over on CUDA (NOTE [ device arrays ]), for the host."""
        array = np.ascontiguousarray(array)
        buffer = self.device_empty(array.nbytes)
        np.copyto(buffer.owner[: array.nbytes], array.reshape(-1).view(np.uint8))
        return DeviceArray(buffer, tuple(array.shape), array.dtype, home=self)

    def device_array(self, value: object) -> DeviceArray | None:
        if not isinstance(value, DeviceArray):
            return None
        if value.home is not self:
            raise ValueError(f"an array in the memory of {getattr(value.home, 'name', value.home)}, not of {self.name}")
        return value

    def ort_output_buffer(self, value: Any, nbytes: int) -> DeviceBuffer:
        # ORT's CPU memory seen as numpy without a copy: the host streams copy arrays.
        flat = value.numpy().reshape(-1).view(np.uint8) if nbytes else np.empty(0, np.uint8)
        return DeviceBuffer(ptr=value.data_ptr(), nbytes=nbytes, owner=flat)

    def stream(self, name: str) -> HostStream:
        stream = HostStream(self, name, self.threaded, seed=(self.chaos.seed if self.chaos else 0) + len(self._streams))
        self._streams.append(stream)
        return stream

    def event(self, timing: bool = True) -> HostEvent:
        return HostEvent(self._signal)

    def ort_providers(self, compute_stream: Stream | None, cuda_graph: bool = False) -> list[Any]:
        if cuda_graph:
            raise ValueError(
                "CUDA graphs need a CUDA device: the host device runs ORT's CPU provider (static_shapes=True "
                "gives the same one-shape runs here)"
            )
        return ["CPUExecutionProvider"]

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"kind": self.kind, "name": self.name}
        if self.link is not None:
            info["link"] = {
                "h2d_gbps": self.link.h2d_gbps,
                "d2h_gbps": self.link.d2h_gbps,
                "latency_us": self.link.latency_us,
            }
        return info

    def close(self) -> None:
        for stream in self._streams:
            stream.close()
        self._streams.clear()

    def __repr__(self) -> str:
        return f"HostDevice({self.name!r})"
