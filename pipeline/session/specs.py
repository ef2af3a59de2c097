"""What a model declares: its inputs' and outputs' names, dtypes and shapes, read from the
graph without a session (:func:`declared_inputs`) or from a session's own (:class:`TensorSpec`).

Layer 2 of docs/how-it-works.md (the session layer), below the engine: every layer above - the
engine, the sources, the jobs, the CLI, the integrations - names a model's tensors
with these."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..util.errors import ModelError

if TYPE_CHECKING:
    pass


ORT_TO_NUMPY: dict[str, np.dtype] = {
    "tensor(float)": np.dtype(np.float32),
    "tensor(float16)": np.dtype(np.float16),
    "tensor(double)": np.dtype(np.float64),
    "tensor(uint8)": np.dtype(np.uint8),
    "tensor(int8)": np.dtype(np.int8),
    "tensor(uint16)": np.dtype(np.uint16),
    "tensor(int16)": np.dtype(np.int16),
    "tensor(int32)": np.dtype(np.int32),
    "tensor(uint32)": np.dtype(np.uint32),
    "tensor(int64)": np.dtype(np.int64),
    "tensor(uint64)": np.dtype(np.uint64),
    "tensor(bool)": np.dtype(np.bool_),
    # NOTE [ string tensors ]: a string tensor is a numpy object array of str, which ORT
    # takes and gives in host memory only (a OneHotEncoder's category column, a
    # LabelEncoder's or a string-class classifier's labels). Tables read string columns
    # as such arrays, and sinks write them as strings. The engine's slots are bytes in
    # device or page-locked memory and cannot hold them: a model with one runs on the
    # direct path (session.run) on every device - on a GPU, ORT keeps the strings in host
    # memory and copies the numeric inputs within the run (the operators that read or
    # make strings, and the tree ensembles beside them, are ORT's CPU EP's anyway), with
    # no overlap of copies; device-side preprocessing and on_batch, which need the
    # engine, are refused for it, and the engine itself refuses it, saying so.
    "tensor(string)": np.dtype(object),
}


Shape = tuple[int, ...]


def nbytes_of(dtype: np.dtype, shape: Shape) -> int:
    """Bytes of a dense tensor (math.prod: np.prod costs microseconds per call)."""
    return math.prod(shape) * dtype.itemsize


ModelSource = str | os.PathLike | bytes | Any  # Any: an onnx.ModelProto


@dataclass(frozen=True)
class TensorSpec:
    """A model input or output as ORT declares it; symbolic dims are str or None."""

    name: str
    dtype: np.dtype
    shape: tuple[int | str | None, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    def describe_shape(self) -> str:
        return "[" + ", ".join("?" if d is None else str(d) for d in self.shape) + "]"

    def accepts(self, shape: Sequence[int]) -> bool:
        """Whether an array of ``shape`` fits: this rank, and every dim the model fixes."""
        return len(shape) == self.rank and all(
            not isinstance(want, int) or want == got for want, got in zip(self.shape, shape, strict=True)
        )

    def row(self) -> TensorSpec:
        """The spec of one row: the dims beyond the batch dim."""
        return TensorSpec(self.name, self.dtype, self.shape[1:])


def own_batch_dims(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> str | None:
    """Why these batched inputs cannot be cut into batches alike, or None.

    An input whose dim 0 is a name of its own that an output declares on another axis
    (attention's ``Q[n, d]``, ``K[m, d]`` giving ``S[n, m]``) is not a batch of rows beside
    the others: cutting it with them would give each batch a part of it.  Names that
    differ alone prove nothing (tf2onnx names every input's batch dim ``unk__N``)."""
    names = {spec.name: spec.shape[0] for spec in inputs if spec.rank and isinstance(spec.shape[0], str)}
    if len(set(names.values())) < 2:
        return None
    for output in outputs:
        for axis, dim in enumerate(output.shape[1:], start=1):
            own = [name for name, dim0 in names.items() if dim0 == dim]
            if own:
                return (
                    f"input(s) {own} have dim 0 {dim!r}, which output {output.name!r} declares on axis {axis} "
                    f"({output.describe_shape()}): not rows of a batch beside input(s) "
                    f"{[name for name, dim0 in names.items() if dim0 != dim]}"
                )
    return None


def ort_model_arg(model: ModelSource) -> str | bytes:
    """What ``InferenceSession`` is given: a file's path (so that ORT finds the
    weights a large model keeps beside it, in external data files, relative to
    the model file), else the serialized model."""
    if isinstance(model, bytes | bytearray | memoryview):
        return bytes(model)
    if isinstance(model, str | os.PathLike):
        path = Path(model)
        if path.is_dir():  # an exporter's folder (Optimum's holds model.onnx beside its config)
            inside = sorted(found.name for found in path.glob("*.onnx"))
            which = f"it holds {', '.join(inside)}: give the file" if inside else "it holds no .onnx file"
            raise ModelError(f"model {str(path)!r} is a folder, not an ONNX file; {which}")
        if not path.is_file():
            raise ModelError(f"model file not found: {str(path)!r}")
        return str(path)
    serialize = getattr(model, "SerializeToString", None)
    if serialize is None:
        raise ModelError(f"model must be a path, bytes or an onnx.ModelProto, got {type(model).__name__}")
    return serialize()


def declared_inputs(model: ModelSource) -> tuple[TensorSpec, ...]:
    """The graph's inputs as the ONNX file declares them, without building a session
    (for decisions made before the real session exists)."""
    proto = graph_of(model)
    weights = {init.name for init in proto.graph.initializer}
    return tuple(_declared(value) for value in proto.graph.input if value.name not in weights)


def declared_outputs(model: ModelSource, names: Sequence[str] | None = None) -> tuple[TensorSpec, ...]:
    """The graph's outputs (those ``names``, else every one) as the ONNX file declares them
    (a schema made before any run)."""
    values = graph_of(model).graph.output
    return tuple(_declared(value) for value in values if names is None or value.name in names)


def graph_of(model: ModelSource) -> Any:
    """The model's ONNX proto, its external weights left on disk."""
    from .onnx_proto import is_model_proto, parsed_model, read_model

    if is_model_proto(model):  # read where it lies: serializing a large one to parse it is seconds
        return model
    loadable = ort_model_arg(model)  # a ModelError of its own when the model cannot be read
    try:
        if isinstance(loadable, str):  # the graph only: external weights stay on disk
            return read_model(loadable)
        return parsed_model(loadable)
    except Exception as exc:
        raise ModelError(f"not a readable ONNX model: {exc}") from exc


def _declared(value: Any) -> TensorSpec:
    from .onnx_proto import numpy_dtype

    tensor = value.type.tensor_type
    dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim)
    return TensorSpec(value.name, numpy_dtype(tensor.elem_type), dims)


def output_specs(args: Sequence[Any], chosen: Sequence[str] | None) -> tuple[TensorSpec, ...]:
    """The specs of the chosen outputs (every one when None), in the model's order."""
    names = [arg.name for arg in args]
    if chosen is not None:
        if isinstance(chosen, str) or not chosen:
            raise ValueError(f"outputs must be a non-empty list of output names, got {chosen!r}")
        unknown = [name for name in chosen if name not in names]
        if unknown:
            raise ModelError(f"outputs {unknown} are not outputs of the model; it has {names}")
        wanted = set(chosen)
        args = [arg for arg in args if arg.name in wanted]
    tensors = [arg.name for arg in args if arg.type in ORT_TO_NUMPY]
    return tuple(spec_of(arg, "output", _output_advice(arg.type, tensors, chosen)) for arg in args)


def _output_advice(ort_type: str, tensors: list[str], chosen: Sequence[str] | None) -> tuple[str, str]:
    """What an output that ortpipe cannot bind is (a hint) and how to run the model anyway (a fix)."""
    hint = ""
    if ort_type.startswith(("seq(", "map(")):
        hint = " (a sequence or a map, which no ZipMap makes: only a ZipMap's is made a tensor, NOTE [ ZipMap ])"
    fix = ""
    if tensors and chosen is None:
        fix = f"; choose the outputs to copy back with outputs={tensors} (--output-names on the command line)"
    return hint, fix


def spec_of(arg: Any, kind: str, advice: tuple[str, str] = ("", "")) -> TensorSpec:
    """``advice``: (after the type, after the message) for a type ortpipe cannot bind."""
    dtype = ORT_TO_NUMPY.get(arg.type)
    if dtype is None:
        hint, fix = advice
        raise ModelError(
            f"{kind} {arg.name!r} has type {arg.type}{hint}; ortpipe binds tensors of {sorted(ORT_TO_NUMPY)}{fix}"
        )
    return TensorSpec(arg.name, dtype, tuple(arg.shape))
