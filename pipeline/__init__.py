"""ortpipe: stream batches through ONNX Runtime with copies and compute overlapped.

``import pipeline`` works on a machine with no GPU and no CuPy: the CUDA
device is imported only when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import models
from ._engine import BatchTrace, Layout, Preprocess
from ._errors import (
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
from ._feed import Feed, FeedClosed
from ._lazy import lazy_names
from ._pipeline import Pipeline, PipelineOptions
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
from .session import OrtSession, SessionConfig, TensorSpec
from .stats import MultiStats, Stats

if TYPE_CHECKING:
    from ._multi import MultiPipeline

__version__ = "0.1.0"

#: names imported on first use (PEP 562): what a single-device run never needs
_LAZY = {"MultiPipeline": "._multi"}


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
