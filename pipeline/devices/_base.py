"""The device interface: the only vocabulary the rest of ortpipe uses.

It mirrors CUDA's own semantics so that the host implementation can stand in
for a GPU in tests:

* a :class:`Stream` runs its operations in the order they were enqueued;
* an :class:`Event` recorded on a stream completes when the stream reaches it;
  a later ``record`` re-arms it, and waits always refer to the latest record
  made *before* the wait was enqueued (``cudaStreamWaitEvent`` semantics);
* ``stream.wait_event(e)`` makes the stream (not the host) wait;
* copies are asynchronous with respect to the host.

NOTE [ buffer ownership ]: a :class:`DeviceBuffer` is a raw pointer plus the
object that keeps its memory alive.  Streams and ORT bindings only see the
pointer, so whoever enqueues work on a buffer must keep the buffer referenced
until the event of that work has completed.  The engine's rings do this.

NOTE [ device arrays ]: a batch may hand over an input that already lives in
the pipeline's device memory (a GPU decoder's frames, an earlier model's
output: a CuPy array, a PyTorch CUDA tensor, anything with the CUDA array
interface) as a :class:`DeviceArray`.  The copy stream waits for the stream
its producer wrote it on, then copies it device-to-device into the slot (a
pipeline's slots are its own: no foreign pointer is ever bound to ORT).  The
engine keeps the array referenced until its batch is delivered; the caller
must not write it again before then.  The host device makes them with
:meth:`~pipeline.HostDevice.to_device`, so the engine's handling is tested
without a GPU.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..util.errors import DeviceError
from ._memory import gib, host_memory_available
from .buffer import DeviceBuffer

if TYPE_CHECKING:
    from ._normalize import NormalizeOp
    from ._nv12 import ColourSpace, Nv12Frame, Nv12Op


def c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """The byte strides of a C-ordered array of ``shape``."""
    strides, step = [], itemsize
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))


@dataclass(frozen=True)
class DeviceArray:
    """An array in a device's memory, C order, handed over by the caller (NOTE [ device arrays ])."""

    buffer: DeviceBuffer  # where it is; ``owner`` keeps it alive
    shape: tuple[int, ...]
    dtype: np.dtype
    #: the device whose memory it is
    home: Any
    #: the CUDA stream its producer wrote it on (the CUDA array interface's
    #: ``stream``: 1 legacy, 2 per-thread, else a handle); None: it is ready
    stream: int | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self.buffer.nbytes

    def __getitem__(self, rows: slice) -> DeviceArray:
        """Rows ``start:stop`` (axis 0, step 1): the same memory, from an offset."""
        if not isinstance(rows, slice) or rows.step not in (None, 1):
            raise TypeError(f"a DeviceArray is cut by rows only (array[start:stop]), got {rows!r}")
        start, stop, _ = rows.indices(self.shape[0])
        stop = max(start, stop)
        row_bytes = self.buffer.nbytes // self.shape[0] if self.shape[0] else 0
        offset, nbytes = start * row_bytes, (stop - start) * row_bytes
        owner = self.buffer.owner
        if isinstance(owner, np.ndarray):  # the host device's memory: the bytes themselves
            owner = owner[offset : offset + nbytes]
        buffer = DeviceBuffer(ptr=self.buffer.ptr + offset, nbytes=nbytes, owner=owner)
        return DeviceArray(buffer, (stop - start, *self.shape[1:]), self.dtype, self.home, self.stream)

    def __repr__(self) -> str:
        return f"DeviceArray({list(self.shape)}, {self.dtype.name}, on {getattr(self.home, 'name', self.home)})"


class RegistrationRefused(DeviceError):
    """The device cannot page-lock this host memory where it lies
    (NOTE [ registered windows ]); the message says why, and the caller stages
    the batches instead."""


#: NOTE [ registered windows ]: why a read-only array (a memory-mapped ``.npy``) is staged where the
#: device cannot register read-only memory (CUDA's ``cudaDevAttrHostRegisterReadOnlySupported`` 0)
READ_ONLY_UNSUPPORTED = (
    "this device cannot register read-only host memory (hostRegisterReadOnlySupported is 0): "
    "a read-only array, a memory-mapped .npy, is staged"
)


class Registration(abc.ABC):
    """A window of the caller's host memory page-locked where it lies, so that copies
    read it straight, with no staging copy (NOTE [ registered windows ] in ``_engine/windows``).

    Release it only once the last copy that reads it has completed (its event):
    the device may move or reuse the pages afterwards."""

    #: the registered memory (a view of the caller's array)
    array: np.ndarray

    @abc.abstractmethod
    def release(self) -> None:
        """Unregister the memory; idempotent."""


class Event(abc.ABC):
    """A point in a stream's order; completes when the stream reaches it."""

    @abc.abstractmethod
    def record(self, stream: Stream) -> None:
        """Enqueue this event on ``stream`` (re-arming it)."""

    @abc.abstractmethod
    def query(self) -> bool:
        """True if the latest record has completed (or the event was never recorded)."""

    @abc.abstractmethod
    def synchronize(self, timeout: float | None = None) -> bool:
        """Block the host until the latest record completes; False on timeout."""

    @abc.abstractmethod
    def elapsed_s(self, since: Event) -> float:
        """Seconds from ``since`` to this event; both must have completed."""


class Stream(abc.ABC):
    """An in-order queue of device work."""

    name: str
    #: True when every operation is done when its call returns - a copy, so its
    #: host side may be any array the caller keeps only that long; a launch, so
    #: nothing overlaps the caller's waits (the host device's inline streams:
    #: NOTE [ inline h2d ], [ borrowed inputs ], [ inline issue ] in the engine);
    #: False where operations run later (CUDA, host streams with workers)
    copies_inline: bool = False

    @abc.abstractmethod
    def copy_h2d(self, dst: DeviceBuffer, src: np.ndarray, nbytes: int) -> None:
        """Copy the first ``nbytes`` of host array ``src`` (page-locked) into ``dst``."""

    @abc.abstractmethod
    def copy_d2h(self, dst: np.ndarray, src: DeviceBuffer, nbytes: int) -> None:
        """Copy the first ``nbytes`` of ``src`` into host array ``dst`` (page-locked)."""

    @abc.abstractmethod
    def copy_d2d(self, dst: DeviceBuffer, src: DeviceArray, nbytes: int) -> None:
        """Copy the first ``nbytes`` of a device array into ``dst`` (NOTE [ device arrays ])."""

    @abc.abstractmethod
    def zero(self, dst: DeviceBuffer, offset: int, nbytes: int) -> None:
        """Set ``nbytes`` of ``dst`` from ``offset`` to zero (padding rows)."""

    @abc.abstractmethod
    def wait_producer(self, handle: int | None) -> None:
        """Make later work wait for what is enqueued now on another CUDA stream
        (a device array's producer); None: nothing to wait for."""

    @abc.abstractmethod
    def launch(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` in stream order.

        On CUDA ``fn`` is called at once and must only *enqueue* GPU work on
        this stream (an ORT run bound to it); on the host device ``fn`` is the
        work itself.
        """

    @abc.abstractmethod
    def wait_event(self, event: Event) -> None:
        """Make later work on this stream wait for ``event``'s latest record."""

    @abc.abstractmethod
    def synchronize(self, timeout: float | None = None) -> bool:
        """Block until all enqueued work is done. Shutdown and baselines only."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the stream's resources (idempotent)."""


class Device(abc.ABC):
    """Allocates buffers, streams and events, and tells ORT how to run on it."""

    #: "cpu" or "cuda"
    kind: str
    #: ORT memory location for bindings: ("cpu", 0) or ("cuda", N)
    ort_device: tuple[str, int]
    #: whether page-locked host memory costs no more to allocate than any: then a batch's
    #: output arrays are handed to the caller and replaced, not copied
    #: (NOTE [ outputs handed over ] in the engine); cudaHostAlloc costs
    #: milliseconds, so not on CUDA
    cheap_pinned: bool = False
    #: whether :meth:`charge_transfer` charges anything (the host device's emulated link):
    #: where not, ``bench``'s naive loop neither counts its bytes nor calls it
    charges_transfers: bool = False
    #: bytes of inputs a batch is picked to hold where no batch size is given
    #: (NOTE [ picked batch size ] in ``_engine/batch_size``): enough that per-batch costs vanish
    batch_bytes: int = 2 << 20

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """Human-readable name, e.g. "NVIDIA H200 (cuda:0)"."""

    @abc.abstractmethod
    def pinned_empty(self, nbytes: int) -> np.ndarray:
        """A flat uint8 host array of ``nbytes`` in page-locked memory."""

    @abc.abstractmethod
    def device_empty(self, nbytes: int) -> DeviceBuffer:
        """``nbytes`` of device memory."""

    def memory_shortfall(self, pinned_bytes: int, device_bytes: int) -> str | None:
        """Why ``pinned_bytes`` of page-locked host memory and ``device_bytes`` of device
        memory cannot be had now, as what they "need" against what there is
        (NOTE [ buffers that do not fit ]); None where they can, or nothing says
        how much there is.  Here both are host memory."""
        available = host_memory_available()
        needed = pinned_bytes + device_bytes
        if available is None or needed <= available:
            return None
        return f"need {gib(needed)} of host memory, and {gib(available)} is available"

    def out_of_memory(self, error: BaseException) -> bool:
        """Whether ``error`` is this device's failure to allocate memory."""
        return isinstance(error, MemoryError)

    def context_lost(self, error: BaseException) -> bool:
        """Whether ``error`` left this device unusable by this process (a CUDA error that
        poisons the context: an illegal address, a launch failure): only a new process
        recovers (a Ray actor ends its own, so that Ray restarts it)."""
        return False

    #: whether copies gain from host memory registered in place (:meth:`register_host`):
    #: a device whose copies run while the host goes on reads it without a staging copy
    registers_host: bool = False

    def host_locked(self, array: np.ndarray) -> bool:
        """Whether ``array``'s memory is page-locked already (pinned, or registered by another):
        a copy reads it where it lies, and registering it again would be refused."""
        return False

    def register_host(self, array: np.ndarray) -> Registration:
        """Page-lock ``array`` (C-contiguous) where it lies, read-only where it is
        (a read-only memory map); RegistrationRefused says why it cannot be."""
        raise RegistrationRefused(f"{self.name} reads host memory where it lies: nothing to register")

    def device_array(self, value: object) -> DeviceArray | None:
        """``value`` as an array in this device's memory (NOTE [ device arrays ]),
        None if it is not one; ValueError if it is one this device cannot take
        (another device's, strided)."""
        return None

    @abc.abstractmethod
    def stream(self, name: str) -> Stream:
        """A new stream (never a default/legacy stream)."""

    @abc.abstractmethod
    def event(self, timing: bool = True) -> Event:
        """A new event; ``timing=False`` is cheaper where no time is read."""

    @abc.abstractmethod
    def ort_providers(self, compute_stream: Stream | None, cuda_graph: bool = False) -> list[Any]:
        """The ``providers`` argument for an ORT session on this device.

        With ``compute_stream`` the session's work is bound to that stream;
        ``cuda_graph``: ORT captures runs as CUDA graphs (a CUDA device's own).
        """

    @abc.abstractmethod
    def ort_output_buffer(self, value: Any, nbytes: int) -> DeviceBuffer:
        """The memory of an output ORT allocated on this device (an ``OrtValue``
        whose shape depended on the data), for a d2h copy out of it.  ORT frees it
        with the value, so the caller keeps ``value`` referenced until the copy's
        event has completed (See NOTE [ buffer ownership ])."""

    def verify_session(self, session: Any, compute_stream: Stream | None) -> None:  # noqa: B027
        """Raise if ORT did not take this device's provider as asked."""

    def normalize(self, stream: Stream, op: NormalizeOp) -> None:
        """Enqueue ``op`` (``dst = float(src) * mul[c] + add[c]``, NHWC -> NCHW if asked)
        on ``stream``; ``devices/_normalize.py`` has the exact arithmetic."""
        raise NotImplementedError(f"{type(self).__name__} has no device-side preprocessing")

    #: how a decoder's frames reach :meth:`convert_nv12` (NOTE [ NV12 on the device ]):
    #: "hw" - a hardware decoder leaves them in this device's memory (NVDEC on CUDA);
    #: "host" - decoded on the CPU, written into the device's model of a decoder's
    #: surfaces (the host device); None - this device converts no decoded frames
    nv12_frames: str | None = None

    def hw_decoder_context(self) -> tuple[str, dict[str, str]]:
        """Where a hardware decoder ("hw" :attr:`nv12_frames`) opened in the calling thread leaves
        its frames in this device's own memory: the decoder's device index and FFmpeg's options
        for its device context.  See NOTE [ one context for the decoder ] in ``cuda``."""
        raise DeviceError(f"{self.name} has no hardware decoder")

    def nv12_frame(self, luma: Any, chroma: Any, colour: ColourSpace) -> Nv12Frame:
        """A decoder's frame as this device's :class:`~pipeline.devices._nv12.Nv12Frame`: on
        "hw" devices its two planes where they lie (objects that export DLPack: PyAV's
        hardware frames' planes); on "host" ones the CPU decoder's planes as arrays."""
        raise DeviceError(f"{self.name} converts no decoded frames on the device")

    def convert_nv12(self, stream: Stream, op: Nv12Op) -> None:
        """Enqueue ``op`` on ``stream``: a decoded NV12 frame made one row of a model's
        input, in one kernel (NOTE [ NV12 on the device ])."""
        raise DeviceError(f"{self.name} converts no decoded frames on the device")

    def charge_transfer(self, nbytes: int, direction: str) -> None:  # noqa: B027 - optional hook
        """Make the host pay what an emulated link would charge for a copy the
        baselines do outside our streams (a no-op on real hardware)."""

    def annotate(self, stage: str, index: int) -> contextlib.AbstractContextManager[None]:
        """A range named "{stage} {index}" for profilers (NVTX on CUDA when ``nvtx``
        is installed); the name is only formatted where a profiler will see it."""
        return _NO_RANGE

    def activate(self) -> None:  # noqa: B027 - optional hook
        """Make this device current in the calling thread."""

    def describe(self) -> dict[str, Any]:
        """Facts about the device for reports."""
        return {"kind": self.kind, "name": self.name}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release device resources (idempotent)."""


_NO_RANGE = contextlib.nullcontext()
