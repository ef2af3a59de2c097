"""A model's ONNX graph read without ``import onnx``.

``import onnx`` takes most of a second on the project machine, nearly all of it in
loading ml_dtypes' extension (onnx imports it for its float8 and float4 types), which
reading a graph's inputs, outputs and nodes does not need: a short job paid more for
that import than for its rows.  The graph's classes are protobuf's, generated into
onnx's ``onnx_ml_pb2`` module, which imports nothing of onnx.  So that module is
loaded by itself, under its own name: a later ``import onnx`` finds it loaded and
uses the same classes (one ``ModelProto``, registered once in protobuf's pool).  Where
onnx is imported already, its module is used as it is.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

_PB2 = "onnx.onnx_ml_pb2"

#: ``TensorProto.DataType`` -> numpy, for the types numpy has itself (the rest: onnx's helper)
_NUMPY_TYPES = {
    1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64, 8: np.object_,
    9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64, 14: np.complex64, 15: np.complex128,
}  # fmt: skip


def _pb2() -> ModuleType:
    loaded = sys.modules.get(_PB2)
    if loaded is not None:
        return loaded
    spec = importlib.util.find_spec("onnx")
    if spec is None or spec.origin is None:
        raise ImportError("onnx is not installed: pip install onnx")
    pb2 = importlib.util.spec_from_file_location(_PB2, Path(spec.origin).parent / "onnx_ml_pb2.py")
    if pb2 is None or pb2.loader is None:
        raise ImportError(f"onnx's {_PB2} module was not found beside {spec.origin}")
    module = importlib.util.module_from_spec(pb2)
    sys.modules[_PB2] = module
    try:
        pb2.loader.exec_module(module)
    except BaseException:
        del sys.modules[_PB2]
        raise
    return module


def is_model_proto(model: object) -> bool:
    """Whether ``model`` is an ``onnx.ModelProto`` (told without importing onnx: one class, whichever
    module loaded it)."""
    return type(model).__name__ == "ModelProto"


def parsed_model(data: bytes) -> Any:
    """An ``onnx.ModelProto`` of a model's bytes (tensors stored outside it stay where they are)."""
    proto = _pb2().ModelProto()
    proto.ParseFromString(data)
    return proto


def read_model(path: str | Path) -> Any:
    """:func:`parsed_model` of a model file, its external weights left on disk."""
    return parsed_model(Path(path).read_bytes())


def numpy_dtype(elem_type: int) -> np.dtype:
    """The numpy dtype of an ONNX tensor's element type."""
    known = _NUMPY_TYPES.get(elem_type)
    if known is not None:
        return np.dtype(known)
    from onnx import helper  # bfloat16, float8 and smaller: ml_dtypes' types, onnx's to map

    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def has_external_data(proto: Any) -> bool:
    """Whether the graph keeps a weight in a file beside the model (``data_location`` EXTERNAL)."""
    return any(tensor.data_location == 1 for tensor in proto.graph.initializer)


def node(op_type: str, inputs: list[str], outputs: list[str], **attributes: int | float | list[int]) -> Any:
    """A ``NodeProto`` of the default domain; attributes of an int, a float or ints, as onnx's
    ``helper.make_node`` makes them."""
    pb2 = _pb2()
    made = pb2.NodeProto(op_type=op_type, input=inputs, output=outputs)
    kinds = pb2.AttributeProto
    for name, value in sorted(attributes.items()):
        if isinstance(value, int):
            made.attribute.append(kinds(name=name, type=kinds.INT, i=int(value)))
        elif isinstance(value, float):
            made.attribute.append(kinds(name=name, type=kinds.FLOAT, f=value))
        else:
            made.attribute.append(kinds(name=name, type=kinds.INTS, ints=list(value)))
    return made


def tensor(name: str, values: np.ndarray, elem_type: int) -> Any:
    """A ``TensorProto`` of ``values`` (C order, little-endian) as ONNX type ``elem_type``."""
    data = np.asarray(values, dtype=numpy_dtype(elem_type).newbyteorder("<"))  # a scalar stays one: dims []
    return _pb2().TensorProto(name=name, dims=list(data.shape), data_type=elem_type, raw_data=data.tobytes("C"))


def tensor_value(name: str, elem_type: int, dims: list[int | str | None] | None) -> Any:
    """A ``ValueInfoProto`` of a tensor: its element type and dims (an int, a name, or unknown)."""
    pb2 = _pb2()
    value = pb2.ValueInfoProto(name=name)
    value.type.tensor_type.elem_type = elem_type
    if dims is not None:
        shape = value.type.tensor_type.shape
        shape.SetInParent()
        for dim in dims:
            entry = shape.dim.add()
            if isinstance(dim, int):
                entry.dim_value = dim
            elif isinstance(dim, str):
                entry.dim_param = dim
    return value
