"""Devices: the only layer that knows CUDA from CPU.

``resolve_device(spec)`` turns what a user writes ("auto", "cpu", "cuda",
"cuda:1", or a device object) into a :class:`Device`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._base import Device, DeviceArray, DeviceBuffer, Event, Registration, RegistrationRefused, Stream
from ._memory import gib, host_memory_available
from ._normalize import NormalizeOp, normalize_numpy
from ._nv12 import ColourSpace, Nv12Op
from .host import ChaosOptions, HostDevice, HostEvent, HostStream, LinkModel, typed_view

__all__ = [
    "ChaosOptions",
    "ColourSpace",
    "CudaDevice",
    "Device",
    "DeviceArray",
    "DeviceBuffer",
    "Event",
    "HostDevice",
    "HostEvent",
    "HostStream",
    "LinkModel",
    "NormalizeOp",
    "Nv12Op",
    "Registration",
    "RegistrationRefused",
    "Stream",
    "cuda_unavailable_reason",
    "device_specs",
    "gib",
    "host_memory_available",
    "normalize_numpy",
    "resolve_device",
    "typed_view",
]


def cuda_unavailable_reason(device_id: int = 0) -> str | None:
    """None when CUDA device ``device_id`` can run ORT here, else the reason it cannot."""
    from .cuda import cuda_unavailable_reason as reason

    return reason(device_id)


def __getattr__(name: str) -> Any:
    if name == "CudaDevice":  # lazy: keeps cupy out of `import pipeline`
        from .cuda import CudaDevice

        return CudaDevice
    raise AttributeError(name)


def resolve_device(spec: str | Device = "auto", provider_options: Mapping[str, object] | None = None) -> Device:
    """A device from a spec: "auto" (CUDA if usable, else host), "cpu", "cuda", "cuda:N".

    ``provider_options`` are options of ORT's CUDA execution provider: they
    need a CUDA device made here (a device object carries its own)."""
    if isinstance(spec, Device):
        if provider_options:
            raise ValueError(
                f"provider options go to CudaDevice(provider_options=...) when a device object is given, got {spec!r}"
            )
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"device must be 'auto', 'cpu', 'cuda', 'cuda:N' or a Device, got {spec!r}")
    text = spec.strip().lower()
    if text in ("cpu", "host"):
        _no_provider_options(spec, provider_options, "the host device runs ORT's CPU provider with its defaults")
        return HostDevice()
    if text == "auto":
        reason = cuda_unavailable_reason(0)
        if reason is None:
            from .cuda import CudaDevice

            return CudaDevice(0, provider_options)
        _no_provider_options(spec, provider_options, f"no CUDA device here ({reason})")
        return HostDevice()
    if text == "cuda" or text.startswith("cuda:"):
        index_text = text.partition(":")[2] or "0"
        if not index_text.isdigit():
            raise ValueError(f"device {spec!r}: the CUDA index must be a whole number, as in 'cuda:0'")
        from .cuda import CudaDevice

        return CudaDevice(int(index_text), provider_options)
    raise ValueError(f"unknown device {spec!r}: expected 'auto', 'cpu', 'cuda', 'cuda:N' or a Device object")


def device_specs(spec: str | Device | Sequence[str | Device]) -> list[str | Device]:
    """The devices a spec names, one entry each, for :func:`resolve_device`:
    a list of specs or devices, "cuda:0,cuda:1" (commas), "cuda:all" (every GPU
    this process sees).  A name given twice is two devices of its own (two
    sessions and stream sets on one GPU).  One spec names one device."""
    if isinstance(spec, Device):
        return [spec]
    if isinstance(spec, str):
        parts = [part.strip() for part in spec.split(",")]
        if any(not part for part in parts):
            raise ValueError(f"devices {spec!r}: an empty name between commas; expected e.g. 'cuda:0,cuda:1'")
        if len(parts) == 1 and parts[0].lower() == "cuda:all":
            from .cuda import cuda_device_count

            return [f"cuda:{index}" for index in range(cuda_device_count())]
        return list(parts)
    if isinstance(spec, Sequence):
        items = list(spec)
        for item in items:
            if not isinstance(item, str | Device):
                raise TypeError(f"each device is a name such as 'cuda:1' or a Device, got {item!r}")
        if not items:
            raise ValueError("no devices given: name at least one, e.g. ['cuda:0', 'cuda:1']")
        return items
    raise TypeError(f"devices are a name, a comma-separated list of names, or a list of them; got {spec!r}")


def _no_provider_options(spec: str, provider_options: Mapping[str, object] | None, why: str) -> None:
    if provider_options:
        raise ValueError(
            f"provider options {dict(provider_options)} are options of ORT's CUDA execution provider, "
            f"but device {spec!r} is the host: {why}"
        )
