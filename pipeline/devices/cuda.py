"""The CUDA device, on CuPy: the only module of ortpipe that imports cupy.

Streams are non-blocking (never the legacy default stream: ORT reads stream
pointer 0 as "no user stream" and would then run on a stream of its own,
racing our copies).  Copies are ``cudaMemcpyAsync`` between page-locked host
memory and device memory on an explicit stream.  ``launch(fn)`` calls ``fn``
at once: ``fn`` enqueues GPU work (an ORT run bound to this stream) and
returns.  Events time with CUDA's own clock.

CuPy is imported lazily, so that ``import pipeline`` works on a machine with
neither a GPU nor CuPy; a missing driver or GPU only shows when a device is
made, and is reported as :class:`DeviceUnavailableError` with the reason.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..util.errors import DeviceError, DeviceUnavailableError, RuntimeMissingError
from ..util.ort import onnxruntime
from ._base import (
    READ_ONLY_UNSUPPORTED,
    Device,
    DeviceArray,
    DeviceBuffer,
    Event,
    Registration,
    RegistrationRefused,
    Stream,
    c_strides,
)
from ._memory import gib, host_memory_available
from ._normalize import CUDA_SOURCE, NormalizeOp
from ._nv12 import SAMPLE_TYPES, ColourSpace, Nv12Frame, Nv12Op, cuda_source

try:  # NVTX ranges show the stages in Nsight Systems; optional
    import nvtx as _nvtx
except ImportError:  # pragma: no cover - depends on the machine
    _nvtx = None

_SPIN_CHECKS = 8  # a spinning loop keeps the GIL from the stage threads: brief, then sleep
_SLEEP_S = 50e-6


def _import_cupy() -> Any:
    try:
        import cupy
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise DeviceUnavailableError(
            "CUDA needs CuPy: pip install '.[cuda]' in a checkout of ortpipe "
            "(cupy-cuda13x, matching onnxruntime-gpu 1.31's CUDA 13)"
        ) from exc
    return cupy


def cuda_unavailable_reason(device_id: int = 0) -> str | None:
    """None when a CUDA device ``device_id`` and ORT's CUDA EP can be used, else why not."""
    try:
        cupy = _import_cupy()
    except DeviceUnavailableError as exc:
        return str(exc)
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - CUDARuntimeError: no driver, no device
        return f"no usable CUDA device: {exc}"
    if device_id >= count:
        return f"cuda:{device_id} requested but {count} CUDA device(s) found"
    try:
        ort = onnxruntime()
    except RuntimeMissingError as exc:
        return str(exc)
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return (
            "this onnxruntime has no CUDAExecutionProvider (available: "
            f"{ort.get_available_providers()}): the CPU build is installed; for NVIDIA GPUs, "
            "pip uninstall -y onnxruntime && pip install '.[cuda]' in a checkout of ortpipe"
        )
    return None


def cuda_device_count() -> int:
    """How many CUDA devices this process sees, or DeviceUnavailableError saying why none."""
    reason = cuda_unavailable_reason(0)
    if reason is not None:
        raise DeviceUnavailableError(f"no CUDA device to use: {reason}")
    return int(_import_cupy().cuda.runtime.getDeviceCount())


#: provider options ortpipe sets itself: the device and the compute stream are the pipeline's
_OWN_PROVIDER_OPTIONS = ("device_id", "user_compute_stream", "has_user_compute_stream")


def checked_provider_options(options: Mapping[str, object]) -> dict[str, str]:
    """CUDA EP options as ORT takes them (strings; a bool as "1"/"0"), refusing
    the ones ortpipe sets itself and the ones its engine cannot honour.

    ORT itself rejects an unknown option name when the session is made."""
    checked: dict[str, str] = {}
    for key, value in options.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"a provider option is named by a non-empty string, got {key!r}")
        if key in _OWN_PROVIDER_OPTIONS:
            raise ValueError(
                f"provider option {key!r} is set by ortpipe (the device's index and the pipeline's compute stream); "
                "choose the GPU with device='cuda:N'"
            )
        if isinstance(value, bool):
            value = "1" if value else "0"
        if not isinstance(value, str | int | float):
            raise ValueError(f"provider option {key!r} takes a string or a number, got {value!r}")
        checked[key] = str(value)
    if checked.get("enable_cuda_graph", "0").strip().lower() not in ("0", "false"):
        # Every slot has buffers of its own: one captured graph would replay into
        # the first slot's addresses.  The pipeline gives each slot its own graph.
        raise ValueError(
            "provider option enable_cuda_graph is set by ortpipe: ask for PipelineOptions(cuda_graph=True) "
            "(--cuda-graph), which captures one graph per slot"
        )
    return checked


class CudaEvent(Event):
    __slots__ = ("_event",)

    def __init__(self, cupy: Any, timing: bool) -> None:
        self._event = cupy.cuda.Event(block=False, disable_timing=not timing)

    def record(self, stream: Stream) -> None:
        if not isinstance(stream, CudaStream):
            raise TypeError(f"a CUDA event can only be recorded on a CUDA stream, got {stream!r}")
        self._event.record(stream.raw)

    def query(self) -> bool:
        return bool(self._event.done)

    def synchronize(self, timeout: float | None = None) -> bool:
        # Poll instead of cudaEventSynchronize so that the wait has a timeout and
        # the caller can re-check its stop flag (and Ctrl-C gets through).
        event = self._event
        for _ in range(_SPIN_CHECKS):
            if event.done:
                return True
        deadline = None if timeout is None else time.perf_counter() + timeout
        while not event.done:
            if deadline is not None and time.perf_counter() >= deadline:
                return False
            time.sleep(_SLEEP_S)
        return True

    def elapsed_s(self, since: Event) -> float:
        if not isinstance(since, CudaEvent):
            raise TypeError(f"elapsed_s needs two CUDA events, got {since!r}")
        import cupy

        return cupy.cuda.get_elapsed_time(since._event, self._event) * 1e-3


class CudaStream(Stream):
    def __init__(self, cupy: Any, device_id: int, name: str) -> None:
        self.name = name
        self._cupy = cupy
        with cupy.cuda.Device(device_id):
            self.raw = cupy.cuda.Stream(non_blocking=True)
        if self.raw.ptr == 0:  # pragma: no cover - guarded by CuPy itself
            raise DeviceError("CuPy returned the default stream; ORT would treat it as 'no user stream'")
        self.ptr: int = self.raw.ptr

    def _memcpy(self, dst: int, src: int, nbytes: int, kind: int) -> None:
        self._cupy.cuda.runtime.memcpyAsync(dst, src, nbytes, kind, self.ptr)

    def copy_h2d(self, dst: DeviceBuffer, src: np.ndarray, nbytes: int) -> None:
        if nbytes > dst.nbytes or nbytes > src.nbytes:
            raise DeviceError(f"h2d copy of {nbytes} bytes overruns a buffer ({src.nbytes} -> {dst.nbytes})")
        self._memcpy(dst.ptr, src.ctypes.data, nbytes, self._cupy.cuda.runtime.memcpyHostToDevice)

    def copy_d2h(self, dst: np.ndarray, src: DeviceBuffer, nbytes: int) -> None:
        if nbytes > dst.nbytes or nbytes > src.nbytes:
            raise DeviceError(f"d2h copy of {nbytes} bytes overruns a buffer ({src.nbytes} -> {dst.nbytes})")
        self._memcpy(dst.ctypes.data, src.ptr, nbytes, self._cupy.cuda.runtime.memcpyDeviceToHost)

    def copy_d2d(self, dst: DeviceBuffer, src: DeviceArray, nbytes: int) -> None:
        if nbytes > dst.nbytes or nbytes > src.nbytes:
            raise DeviceError(f"d2d copy of {nbytes} bytes overruns a buffer ({src.nbytes} -> {dst.nbytes})")
        self._memcpy(dst.ptr, src.buffer.ptr, nbytes, self._cupy.cuda.runtime.memcpyDeviceToDevice)

    def zero(self, dst: DeviceBuffer, offset: int, nbytes: int) -> None:
        if offset + nbytes > dst.nbytes:
            raise DeviceError(f"zeroing {nbytes} bytes at {offset} overruns a buffer of {dst.nbytes}")
        self._cupy.cuda.runtime.memsetAsync(dst.ptr + offset, 0, nbytes, self.ptr)

    def wait_producer(self, handle: int | None) -> None:
        if handle is None:
            return
        # An event recorded now on the producer's stream (1 and 2 are CUDA's
        # legacy and per-thread default streams, valid handles as they are).
        # (recorded through the runtime: CuPy 14 deprecates ExternalStream)
        marker = self._cupy.cuda.Event(block=False, disable_timing=True)
        self._cupy.cuda.runtime.eventRecord(marker.ptr, handle)
        self.raw.wait_event(marker)

    def launch(self, fn: Callable[[], None]) -> None:
        fn()

    def wait_event(self, event: Event) -> None:
        if not isinstance(event, CudaEvent):
            raise TypeError(f"a CUDA stream can only wait on a CUDA event, got {event!r}")
        self.raw.wait_event(event._event)

    def synchronize(self, timeout: float | None = None) -> bool:
        marker = CudaEvent(self._cupy, timing=False)
        marker.record(self)
        return marker.synchronize(timeout)

    def __repr__(self) -> str:
        return f"CudaStream({self.name!r}, ptr=0x{self.ptr:x})"


#: cudaHostRegister's flags: cudaHostRegisterDefault, and cudaHostRegisterReadOnly
#: (the device only reads the memory: a read-only mapping can be registered)
_REGISTER_DEFAULT, _REGISTER_READ_ONLY = 0, 8

#: cudaDevAttrHostRegisterReadOnlySupported: whether cudaHostRegisterReadOnly is taken
_ATTR_HOST_REGISTER_READ_ONLY = 113

#: cudaPointerAttributes.type of page-locked host memory (cudaMemoryTypeHost)
_MEMORY_TYPE_HOST = 1


class CudaRegistration(Registration):
    """Host memory page-locked in place with ``cudaHostRegister`` (NOTE [ registered windows ])."""

    def __init__(self, cupy: Any, device_id: int, array: np.ndarray) -> None:
        self.array = array
        self._cupy, self._device_id, self._ptr = cupy, device_id, array.ctypes.data
        flags = _REGISTER_DEFAULT if array.flags.writeable else _REGISTER_READ_ONLY
        try:
            with cupy.cuda.Device(device_id):
                cupy.cuda.runtime.hostRegister(self._ptr, array.nbytes, flags)
        except Exception as exc:
            raise RegistrationRefused(f"cudaHostRegister of {array.nbytes:,} bytes failed: {exc}") from exc
        self._released = False

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        with self._cupy.cuda.Device(self._device_id):
            self._cupy.cuda.runtime.hostUnregister(self._ptr)


class CudaDevice(Device):
    """An NVIDIA GPU through CuPy, with ORT's CUDA execution provider."""

    kind = "cuda"
    #: NOTE [ registered windows ]: copies from registered memory skip the staging copy
    registers_host = True
    #: NOTE [ picked batch size ]: a batch's copy hides the host's per-batch work behind the link
    batch_bytes = 32 << 20

    def __init__(self, device_id: int = 0, provider_options: Mapping[str, object] | None = None) -> None:
        checked = checked_provider_options(provider_options or {})  # a bad option says so, GPU or not
        reason = cuda_unavailable_reason(device_id)
        if reason is not None:
            raise DeviceUnavailableError(f"cuda:{device_id} is not usable: {reason}")
        self._cupy = _import_cupy()
        self.device_id = device_id
        self.ort_device = ("cuda", device_id)
        self._read_only_registration: bool | None = None  # cudaDevAttrHostRegisterReadOnlySupported, once asked
        #: options of ORT's CUDA execution provider, as strings (ORT's own names)
        self.provider_options = checked
        _preload_cuda_libraries()
        props = self._cupy.cuda.runtime.getDeviceProperties(device_id)
        raw_name = props.get("name", b"GPU")
        self._gpu_name = raw_name.decode() if isinstance(raw_name, bytes) else str(raw_name)
        self._props = props
        self._constants: dict[bytes, Any] = {}

    @property
    def name(self) -> str:
        return f"{self._gpu_name} (cuda:{self.device_id})"

    def activate(self) -> None:
        self._cupy.cuda.Device(self.device_id).use()

    def hw_decoder_context(self) -> tuple[str, dict[str, str]]:
        """Where NVDEC opened in the calling thread leaves its frames: this GPU, this context.

        NOTE [ one context for the decoder ]: NVDEC's frames must live in the context the
        pipeline's streams and ORT's session use - this GPU's primary context.  FFmpeg asked for
        the primary context (``primary_ctx=1``, what PyAV's ``is_hw_owned`` sets) refuses one
        already active with other flags than ``CU_CTX_SCHED_BLOCKING_SYNC`` ("Primary context
        already active with incompatible flags"), and the pipeline has always started it; with
        neither option it makes a context of its own, whose pointers the kernel cannot read.  So
        the decoder is opened on the current context (``current_ctx=1``; FFmpeg 6.1 and later),
        which this makes the primary one in the calling thread (``cudaFree(0)`` starts it where
        no runtime call did); FFmpeg neither retains nor destroys a context it only borrowed."""
        self._cupy.cuda.Device(self.device_id).use()
        self._cupy.cuda.runtime.free(0)
        return str(self.device_id), {"primary_ctx": "0", "current_ctx": "1"}

    def annotate(self, stage: str, index: int) -> contextlib.AbstractContextManager[None]:
        if _nvtx is None:
            return contextlib.nullcontext()
        return _nvtx.annotate(f"{stage} {index}", domain="ortpipe")

    def normalize(self, stream: Stream, op: NormalizeOp) -> None:
        if not isinstance(stream, CudaStream):
            raise TypeError(f"normalize needs a CUDA stream, got {stream!r}")
        cp = self._cupy
        with cp.cuda.Device(self.device_id), stream.raw:
            source = self._wrap(op.src, op.src_dtype, op.src_shape)
            out = self._wrap(op.dst, op.dst_dtype, op.dst_shape)
            mul, add = self._coefficients(op.mul), self._coefficients(op.add)
            channels, height, width = _chw(op.dst_shape)
            per_channel = op.mul.size > 1
            _normalize_kernel(cp)(source, mul, add, channels, height, width, op.to_nchw, per_channel, out)

    def _wrap(self, buffer: DeviceBuffer, dtype: np.dtype, shape: tuple[int, ...]) -> Any:
        cp = self._cupy
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        memory = cp.cuda.UnownedMemory(buffer.ptr, nbytes, buffer.owner, self.device_id)
        return cp.ndarray(shape, dtype, cp.cuda.MemoryPointer(memory, 0))

    def _coefficients(self, values: np.ndarray) -> Any:
        return self._constant(values.astype(np.float32))

    def _constant(self, values: np.ndarray) -> Any:
        key = values.dtype.str.encode() + values.tobytes()
        cached = self._constants.get(key)
        if cached is None:  # first use of these values: a tiny copy, then kept
            cached = self._constants[key] = self._cupy.asarray(values)
        return cached

    nv12_frames = "hw"

    def nv12_frame(self, luma: Any, chroma: Any, colour: ColourSpace) -> Nv12Frame:
        """PyAV's hardware frame's planes taken where NVDEC left them, through DLPack:
        each view holds a reference to the frame, so its surface is the decoder's again
        once the frame is released and the views dropped (NOTE [ decoded surfaces ])."""
        cp = self._cupy
        with cp.cuda.Device(self.device_id):
            # the planes' capsules themselves: PyAV exports a hardware frame for no stream (it
            # refuses one), and CuPy takes a bare capsule as it is; the conversion then waits
            # for the decoder's stream itself (``Nv12Frame.stream``)
            y, uv = cp.from_dlpack(luma.__dlpack__()), cp.from_dlpack(chroma.__dlpack__())
        height, width = int(y.shape[0]), int(y.shape[1])
        luma_pitch, chroma_pitch = int(y.strides[0]), int(uv.strides[0])
        kind = np.dtype(y.dtype)
        if kind.name not in SAMPLE_TYPES or uv.dtype != kind or int(y.strides[1]) != kind.itemsize:
            raise DeviceError(f"a decoded frame of {kind} planes, strides {y.strides}: NV12 and P010 are converted")
        chroma_rows = (height + 1) // 2
        return Nv12Frame(
            luma=DeviceBuffer(int(y.data.ptr), luma_pitch * height, y),
            luma_pitch=luma_pitch,
            chroma=DeviceBuffer(int(uv.data.ptr), chroma_pitch * chroma_rows, uv),
            chroma_pitch=chroma_pitch,
            width=width,
            height=height,
            colour=colour,
            sample=kind.name,
            stream=_LEGACY_STREAM,
        )

    def convert_nv12(self, stream: Stream, op: Nv12Op) -> None:
        if not isinstance(stream, CudaStream):
            raise TypeError(f"convert_nv12 needs a CUDA stream, got {stream!r}")
        if op.dst.nbytes < op.dst_nbytes:
            raise DeviceError(f"an NV12 conversion of {op.dst_nbytes} bytes overruns its row ({op.dst.nbytes})")
        cp, frame = self._cupy, op.frame
        width, height = op.size
        total = width * height * 3
        kernel = _nv12_kernel(cp, "float32" if op.nchw else "uint8", frame.sample)
        itemsize = np.dtype(frame.sample).itemsize  # the kernel's pitches count samples
        with cp.cuda.Device(self.device_id), stream.raw:
            stream.wait_producer(frame.stream)  # the decoder's own copy into the surface first
            args = (
                self._pointer(frame.luma), np.int32(frame.luma_pitch // itemsize),
                self._pointer(frame.chroma), np.int32(frame.chroma_pitch // itemsize),
                np.int32(frame.width), np.int32(frame.height), np.int32(width), np.int32(height),
                np.int32(op.nchw), np.int32(op.bgr),
                self._constant(np.asarray(op.fit, np.int32)), self._constant(frame.colour.coefficients()),
                self._coefficients(op.mul), self._coefficients(op.add), np.int32(op.mul.size > 1),
                self._pointer(op.dst), np.int64(total),
            )  # fmt: skip
            threads = 256
            kernel((min(-(-total // threads), 65535),), (threads,), args)

    def _pointer(self, buffer: DeviceBuffer) -> Any:
        memory = self._cupy.cuda.UnownedMemory(buffer.ptr, buffer.nbytes, buffer.owner, self.device_id)
        return self._cupy.cuda.MemoryPointer(memory, 0)

    def memory_shortfall(self, pinned_bytes: int, device_bytes: int) -> str | None:
        host = host_memory_available()
        if host is not None and pinned_bytes > host:
            return f"need {gib(pinned_bytes)} of page-locked host memory, and {gib(host)} is available"
        with self._cupy.cuda.Device(self.device_id):  # both figures are the current device's
            free, _total = self._cupy.cuda.runtime.memGetInfo()
            free += self._cupy.get_default_memory_pool().free_bytes()  # blocks CuPy's pool keeps for reuse
        if device_bytes > free:
            return f"need {gib(device_bytes)} of GPU memory, and {gib(free)} is free"
        return None

    def out_of_memory(self, error: BaseException) -> bool:
        # CuPy's OutOfMemoryError is a MemoryError; page-locked memory fails with
        # CUDARuntimeError cudaErrorMemoryAllocation (2)
        return isinstance(error, MemoryError) or getattr(error, "status", None) == 2

    def context_lost(self, error: BaseException) -> bool:
        # CUDA's sticky errors: every later call in this context fails the same way
        words = str(error).lower()
        seen: set[int] = set()
        while error is not None and id(error) not in seen:  # the chain: ORT's, CuPy's, ours
            seen.add(id(error))
            words += " " + str(error).lower()
            error = error.__cause__ or error.__context__  # type: ignore[assignment]
        return any(sticky in words for sticky in _STICKY_CUDA_ERRORS)

    def pinned_empty(self, nbytes: int) -> np.ndarray:
        import cupyx

        return cupyx.empty_pinned((nbytes,), dtype=np.uint8)

    def device_empty(self, nbytes: int) -> DeviceBuffer:
        with self._cupy.cuda.Device(self.device_id):
            memory = self._cupy.cuda.alloc(max(nbytes, 1))
        return DeviceBuffer(ptr=memory.ptr, nbytes=nbytes, owner=memory)

    def ort_output_buffer(self, value: Any, nbytes: int) -> DeviceBuffer:
        return DeviceBuffer(ptr=value.data_ptr(), nbytes=nbytes, owner=value)

    def host_locked(self, array: np.ndarray) -> bool:
        """Page-locked already (``cudaPointerGetAttributes``: host memory the driver knows: a
        CuPy pinned array, another's registration); numpy's own memory is unknown to it."""
        try:
            with self._cupy.cuda.Device(self.device_id):
                kind = self._cupy.cuda.runtime.pointerGetAttributes(array.ctypes.data).type
        except Exception:  # noqa: BLE001 - not memory the driver knows (older drivers raise for it)
            return False
        return bool(kind == _MEMORY_TYPE_HOST)

    def register_host(self, array: np.ndarray) -> CudaRegistration:
        if not array.flags.c_contiguous:
            raise RegistrationRefused("the array is not C-contiguous")
        if not array.flags.writeable and not self._registers_read_only():
            raise RegistrationRefused(READ_ONLY_UNSUPPORTED)
        return CudaRegistration(self._cupy, self.device_id, array)

    def _registers_read_only(self) -> bool:
        """Whether this GPU takes cudaHostRegisterReadOnly (asked once)."""
        if self._read_only_registration is None:
            with self._cupy.cuda.Device(self.device_id):
                attribute = self._cupy.cuda.runtime.deviceGetAttribute(_ATTR_HOST_REGISTER_READ_ONLY, self.device_id)
            self._read_only_registration = bool(attribute)
        return self._read_only_registration

    def device_array(self, value: object) -> DeviceArray | None:
        """An array with the CUDA array interface (CuPy, PyTorch, Numba) in this GPU's memory."""
        interface = getattr(value, "__cuda_array_interface__", None)
        if interface is None:
            return None
        shape = tuple(int(dim) for dim in interface["shape"])
        dtype = np.dtype(interface["typestr"])
        strides = interface.get("strides")
        if strides is not None and tuple(strides) != c_strides(shape, dtype.itemsize):
            raise ValueError(f"a strided GPU array (strides {tuple(strides)}): make it C-contiguous first")
        if interface.get("mask") is not None:
            raise ValueError("a masked GPU array: the pipeline takes plain arrays")
        ptr = int(interface["data"][0])
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes:
            where = self._cupy.cuda.runtime.pointerGetAttributes(ptr).device
            if where != self.device_id:
                raise ValueError(f"an array in the memory of cuda:{where}, not of {self.name}")
        stream = interface.get("stream")
        return DeviceArray(DeviceBuffer(ptr, nbytes, value), shape, dtype, home=self, stream=stream)

    def stream(self, name: str) -> CudaStream:
        return CudaStream(self._cupy, self.device_id, name)

    def event(self, timing: bool = True) -> CudaEvent:
        with self._cupy.cuda.Device(self.device_id):
            return CudaEvent(self._cupy, timing)

    def ort_providers(self, compute_stream: Stream | None, cuda_graph: bool = False) -> list[Any]:
        # device 0 is ORT's default: naming it anyway makes ORT 1.26+ look for a
        # plugin EP device first and log a warning for every session it makes
        options = {"device_id": str(self.device_id)} if self.device_id else {}
        options.update(self.provider_options)
        if cuda_graph:  # NOTE [ CUDA graphs ]: one graph per slot, by its gpu_graph_id run option
            options["enable_cuda_graph"] = "1"
        if compute_stream is not None:
            if not isinstance(compute_stream, CudaStream):
                raise TypeError(f"the compute stream of a CUDA session must be a CUDA stream, got {compute_stream!r}")
            # Decimal string of the pointer; has_user_compute_stream is implied.
            options["user_compute_stream"] = str(compute_stream.ptr)
        return [("CUDAExecutionProvider", options), "CPUExecutionProvider"]

    def verify_session(self, session: Any, compute_stream: Stream | None) -> None:
        providers = session.get_providers()
        if not providers or providers[0] != "CUDAExecutionProvider":
            raise DeviceUnavailableError(
                f"ORT did not take CUDAExecutionProvider for {self.name} (session providers: {providers}); "
                "it falls back to CPU silently when the CUDA libraries are missing: "
                "check the ORT log above, and onnxruntime.preload_dlls()"
            )
        if compute_stream is not None:
            taken = session.get_provider_options().get("CUDAExecutionProvider", {}).get("user_compute_stream")
            expected = str(compute_stream.ptr)  # type: ignore[attr-defined]
            if taken != expected:
                raise DeviceUnavailableError(
                    f"ORT did not accept the compute stream: user_compute_stream is {taken!r}, expected {expected!r}"
                )

    def describe(self) -> dict[str, Any]:
        props = self._props
        return {
            "kind": self.kind,
            "name": self.name,
            "compute_capability": f"{props.get('major')}.{props.get('minor')}",
            "memory_gib": round(props.get("totalGlobalMem", 0) / 2**30, 1),
            "cuda_runtime": self._cupy.cuda.runtime.runtimeGetVersion(),
            "provider_options": dict(self.provider_options),
        }

    def __repr__(self) -> str:
        return f"CudaDevice({self.name!r})"


def _chw(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """C, H, W of an NCHW output (a channel-free tensor is one channel of W = everything)."""
    if len(shape) == 4:
        return shape[1], shape[2], shape[3]
    return 1, 1, math.prod(shape[1:])


_KERNEL: Any = None


def _normalize_kernel(cp: Any) -> Any:
    global _KERNEL
    if _KERNEL is None:
        _KERNEL = cp.ElementwiseKernel(
            "raw S src, raw float32 mul, raw float32 add, int32 C, int32 H, int32 W, bool to_nchw, bool per_channel",
            "O out",
            CUDA_SOURCE,
            "ortpipe_normalize",
        )
    return _KERNEL


#: CUDA's legacy default stream, as DLPack names it: where FFmpeg's NVDEC copies a frame
#: into its surface unless given a stream of its own
_LEGACY_STREAM = 1

_NV12_KERNELS: dict[tuple[str, str], Any] = {}


def _nv12_kernel(cp: Any, output: str, sample: str) -> Any:
    """The kernel of NOTE [ NV12 on the device ] for ``output`` ("uint8", "float32") from
    ``sample`` planes ("uint8" NV12, "uint16" P010), compiled once."""
    found = _NV12_KERNELS.get((output, sample))
    if found is None:
        found = _NV12_KERNELS[(output, sample)] = cp.RawKernel(cuda_source(output, sample), "nv12_to_input")
    return found


def _preload_cuda_libraries() -> None:
    """Load the CUDA/cuDNN libraries of the nvidia-* wheels before ORT needs them."""
    preload = getattr(onnxruntime(), "preload_dlls", None)
    if preload is not None:
        with contextlib.suppress(Exception):  # best effort; verify_session reports the outcome
            preload()


#: the words of CUDA errors that leave the context unusable (cudaErrorIllegalAddress,
#: cudaErrorLaunchFailure, cudaErrorHardwareStackError, cudaErrorIllegalInstruction,
#: cudaErrorMisalignedAddress, cudaErrorInvalidPc, cudaErrorAssert, ECC errors)
_STICKY_CUDA_ERRORS = (
    "illegal memory access",
    "illegal address",
    "unspecified launch failure",
    "hardware stack error",
    "illegal instruction",
    "misaligned address",
    "invalid program counter",
    "device-side assert",
    "uncorrectable ecc error",
    "cudaerrorillegaladdress",
    "cudaerrorlaunchfailure",
)
