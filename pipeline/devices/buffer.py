"""A span of device memory: what the device layer's parts (``_base``, the NV12 and
normalize kernels' ops, the surfaces) all name, in a module of its own so that none
of them imports another for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DeviceBuffer:
    """``nbytes`` of device memory at ``ptr``; ``owner`` keeps it alive."""

    ptr: int
    nbytes: int
    owner: Any
