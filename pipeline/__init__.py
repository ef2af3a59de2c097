"""ortpipe: stream batches through ONNX Runtime with copies and compute overlapped.

``import pipeline`` works on a machine with no GPU and no CuPy: the CUDA
device is imported only when asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .util.lazy import lazy_names

if TYPE_CHECKING:
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
    from .frontends.multi import MultiPipeline
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

__version__ = "0.1.0"

#: every name the package exports, imported on first use (PEP 562): ``import pipeline`` - and
#: the ``ortpipe`` command's start, until its Ctrl-C handling is in place - imports none of
#: numpy, ONNX Runtime or the engine
_LAZY = {
    "models": ".models",
    **dict.fromkeys(("BatchTrace", "Layout"), "._engine"),
    **dict.fromkeys(
        (
            "ChaosOptions",
            "Device",
            "DeviceArray",
            "HostDevice",
            "LinkModel",
            "cuda_unavailable_reason",
            "device_specs",
            "resolve_device",
        ),
        ".devices",
    ),
    **dict.fromkeys(("Feed", "FeedClosed"), ".frontends.feed"),
    "MultiPipeline": ".frontends.multi",
    **dict.fromkeys(("Pipeline", "PipelineOptions"), ".frontends.pipeline"),
    **dict.fromkeys(("OrtSession", "Preprocess", "SessionConfig", "TensorSpec"), ".session"),
    **dict.fromkeys(("MultiStats", "Stats"), ".stats"),
    **dict.fromkeys(
        (
            "DeviceError",
            "DeviceUnavailableError",
            "ModelError",
            "PipelineClosedError",
            "PipelineError",
            "PipelineInputError",
            "PipelineStageError",
            "RuntimeMissingError",
            "SinkError",
            "SourceError",
        ),
        ".util.errors",
    ),
}


__getattr__ = lazy_names(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


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
