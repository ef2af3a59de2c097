"""The session layer (docs/how-it-works.md's layer 2): what a model declares and how it is run.

* ``specs`` - a model's declared tensors, their dtypes and shapes;
* ``casting`` - which casts of an input to the model's dtype are made, and which refused;
* ``preprocess`` - the uint8 -> float conversion a model input asks for (its spec and host reference);
* ``classifiers`` - converter-made classifiers: ZipMap outputs and their class labels;
* ``ort_session`` - the ORT session built for a device, with IOBindings to the engine's
  buffers and the output shapes a run makes.

The engine, the sources, the jobs, the CLI and the integrations import it; it imports
only the device layer below it."""

from .casting import castable, exact_cast_refusal, refused_at
from .ort_session import GRAPH_OPTIMIZATION, ORT_LOG_LEVELS, OrtSession, SessionConfig
from .preprocess import Preprocess
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
    "Preprocess",
    "SessionConfig",
    "Shape",
    "TensorSpec",
    "castable",
    "declared_inputs",
    "declared_outputs",
    "exact_cast_refusal",
    "refused_at",
    "graph_of",
    "nbytes_of",
    "ort_model_arg",
]
