"""The session layer (DESIGN.md's layer 2): a model's declared tensors (:mod:`.specs`) and
the ORT session built for a device, with IOBindings to the engine's buffers and the
output shapes a run makes (:mod:`.ort_session`).  The engine, the sources, the jobs, the
CLI and the integrations import it; it imports only the device layer below it."""

from .ort_session import GRAPH_OPTIMIZATION, ORT_LOG_LEVELS, OrtSession, SessionConfig
from .specs import (
    ORT_TO_NUMPY,
    ModelSource,
    Shape,
    TensorSpec,
    declared_inputs,
    declared_outputs,
    graph_of,
    nbytes_of,
    ort_model_arg,
)

__all__ = [
    "GRAPH_OPTIMIZATION",
    "ORT_LOG_LEVELS",
    "ORT_TO_NUMPY",
    "ModelSource",
    "OrtSession",
    "SessionConfig",
    "Shape",
    "TensorSpec",
    "declared_inputs",
    "declared_outputs",
    "graph_of",
    "nbytes_of",
    "ort_model_arg",
]
