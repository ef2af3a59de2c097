"""``ortpipe info``: what this machine has for ortpipe - versions, providers, readers, devices, threads."""

from __future__ import annotations

import argparse

from .._engine import auto_copy_threads
from ..devices import HostDevice, cuda_unavailable_reason, gib, host_memory_available
from ..util.cpus import usable_cpus
from .bench import describe_device, device_facts


def _auto_threads_line() -> str:
    """The threads "auto" gives each kind of host work on this machine (what to tune from)."""
    from ..sources import auto_convert_threads, decode_threads_of, videos_at_once_of

    counts = {
        "host copies": auto_copy_threads(),
        "video frames converted": auto_convert_threads(),
        "videos decoded at once": videos_at_once_of(None),
        "image decoding": decode_threads_of(None),
    }
    return f"host threads, auto on {usable_cpus()} usable CPU(s): " + ", ".join(f"{k} {v}" for k, v in counts.items())


#: what each optional package reads, and the extra that installs it
_IO_PACKAGES = (
    ("av", "video", "videos and streams"),
    ("pyarrow", "parquet", "Parquet, CSV"),
    ("PIL", "images", "images"),
    ("deltalake", "tables", "Delta Lake tables"),
)


def _io_lines() -> list[str]:
    """One line per optional reader: its version (PyAV's FFmpeg too), or how to install it."""
    import importlib

    lines = []
    for module, extra, reads in _IO_PACKAGES:
        try:
            package = importlib.import_module(module)
        except ImportError:
            lines.append(f"{reads}: not installed (pip install '.[{extra}]' in a checkout of ortpipe)")
            continue
        version = f"{module} {package.__version__}"
        ffmpeg = getattr(package, "ffmpeg_version_info", None)
        lines.append(f"{reads}: {version}" + (f" (FFmpeg {ffmpeg})" if ffmpeg else ""))
        if module == "av":
            nvdec = _nvdec_line()
            lines.append(f"video decoding on a GPU (--hwaccel cuda): {nvdec}")
            lines.append(f"frames converted where NVDEC leaves them: {_frames_on_gpu_line(nvdec)}")
    return lines


def _frames_on_gpu_line(nvdec: str) -> str:
    """Whether NVDEC's frames can stay in GPU memory and be converted there: NVDEC usable,
    and a PyAV that keeps hardware frames; else why not (the frames are then downloaded
    and converted on the CPU).  See NOTE [ NV12 on the device ]."""
    if not nvdec.startswith("yes"):
        return "no: NVDEC cannot be used here (the line above)"
    from ..devices import CudaDevice
    from ..sources import SourceError
    from ..sources.device_frames import hw_frames_decoding, nvdec_context_refused

    try:
        hw_frames_decoding("cuda")
    except SourceError as exc:
        return f"no: {exc}"
    device = CudaDevice(0)  # its context started, as a pipeline's is before a decoder opens
    try:
        device.activate()
        refused = nvdec_context_refused(device)
    finally:
        device.close()
    return "yes (--hwaccel cuda converts them on the GPU by default)" if refused is None else f"no: {refused}"


def _nvdec_line() -> str:
    """Whether FFmpeg can decode on the first CUDA device (NOTE [ decoding on the GPU ]), and why not."""
    from ..sources import SourceError, hw_api, hw_device_unusable

    try:
        available = hw_api().hwdevices_available()
    except SourceError as exc:  # a PyAV too old
        return f"no: {exc}"
    if "cuda" not in available:
        return "this FFmpeg has no CUDA support"
    unusable = hw_device_unusable("cuda")
    return "yes (NVDEC)" if unusable is None else f"no: {unusable}"


def _providers_line(built_in: list[str]) -> str:
    """ORT's providers: those built into the wheel, and which of them can run here (a GPU wheel
    lists CUDA and TensorRT on a machine with no GPU)."""
    line = f"providers built in {built_in}"
    on_gpu = [name for name in built_in if name in _GPU_PROVIDERS]
    reason = cuda_unavailable_reason(0) if on_gpu else None
    if reason is None:
        return line
    usable = [name for name in built_in if name not in _GPU_PROVIDERS]
    return f"{line}; usable here: {usable} ({', '.join(on_gpu)} need an NVIDIA GPU: {reason})"


#: the providers of ORT's GPU wheel that run on an NVIDIA GPU (Azure's calls a served model: no GPU)
_GPU_PROVIDERS = frozenset({"CUDAExecutionProvider", "TensorrtExecutionProvider", "NvTensorRTRTXExecutionProvider"})


def cmd_info(args: argparse.Namespace) -> int:
    from .. import __version__
    from ..util.ort import onnxruntime

    ort = onnxruntime()

    print(f"ortpipe {__version__}")
    print(f"onnxruntime {ort.__version__}: {_providers_line(ort.get_available_providers())}")
    try:
        import cupy

        print(f"cupy {cupy.__version__}")
    except ImportError:
        print("cupy: not installed (pip install '.[cuda]' in a checkout of ortpipe)")
    for line in _io_lines():
        print(line)
    available = host_memory_available()
    if available is not None:  # what a pipeline's buffers are checked against (NOTE [ buffers that do not fit ])
        print(f"host memory: {gib(available)} available")
    print(_auto_threads_line())
    reason = cuda_unavailable_reason(0)
    if reason is not None:
        print(f"cuda: not available ({reason})")
        host = HostDevice()
        print(f"device: {describe_device(device_facts(host))}")
        return 0
    import cupy

    from ..devices import CudaDevice

    print(f"cuda runtime {cupy.cuda.runtime.runtimeGetVersion()}, driver {cupy.cuda.runtime.driverGetVersion()}")
    for index in range(cupy.cuda.runtime.getDeviceCount()):
        device = CudaDevice(index)
        print(f"device: {describe_device(device_facts(device))}")
    return 0
