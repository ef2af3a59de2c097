"""ortpipe: stream batches through ONNX Runtime with copies and compute overlapped.

``import pipeline`` works on a machine with no GPU and no CuPy: the CUDA
device is imported only when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import models
from ._engine import BatchTrace, Layout
from .devices import (
    ChaosOptions,
    Device,
    DeviceArray,
    HostDevice,
    LinkModel,
    cuda_unavailable_reason,
    device_specs,
    resolve_device,
)
from .frontends.feed import Feed, FeedClosed
from .frontends.pipeline import Pipeline, PipelineOptions
from .session import OrtSession, Preprocess, SessionConfig, TensorSpec
from .stats import MultiStats, Stats
from .util.errors import (
    DeviceError,
    DeviceUnavailableError,
    ModelError,
    PipelineClosedError,
    PipelineError,
    PipelineInputError,
    PipelineStageError,
    RuntimeMissingError,
    SinkError,
    SourceError,
)
from .util.lazy import lazy_names

if TYPE_CHECKING:
    from .frontends.multi import MultiPipeline

__version__ = "0.1.0"

#: names imported on first use (PEP 562): what a single-device run never needs
_LAZY = {"MultiPipeline": ".frontends.multi"}


__getattr__ = lazy_names(__name__, _LAZY)

__all__ = [
    "BatchTrace",
    "ChaosOptions",
    "Device",
    "DeviceArray",
    "DeviceError",
    "DeviceUnavailableError",
    "Feed",
    "FeedClosed",
    "HostDevice",
    "Layout",
    "LinkModel",
    "ModelError",
    "MultiPipeline",
    "MultiStats",
    "OrtSession",
    "Pipeline",
    "PipelineClosedError",
    "PipelineError",
    "PipelineInputError",
    "PipelineOptions",
    "PipelineStageError",
    "Preprocess",
    "RuntimeMissingError",
    "SessionConfig",
    "SinkError",
    "SourceError",
    "Stats",
    "TensorSpec",
    "cuda_unavailable_reason",
    "device_specs",
    "models",
    "resolve_device",
]
