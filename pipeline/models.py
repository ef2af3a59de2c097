"""Small real ONNX models, built with onnx.helper from fixed-seed weights.

They let every command and test run with no model file:

* ``identity`` - Identity over ``[N, F]`` float32: nothing but the pipeline's
  own overhead and the copies.
* ``mlp`` - two Gemm layers with ReLU over feature rows ``[N, 64]`` -> ``[N, 16]``.
* ``convnet`` - conv/ReLU/conv/global-pool/Gemm over NCHW frames
  ``[N, 3, H, W]`` -> logits ``[N, 10]``.
* ``multi_io`` - four inputs and four outputs of float32, int64, uint8 and
  float16, for binding tests.
* ``busy`` - a chain of ``[F, F]`` MatMul+Tanh layers whose compute time is
  set by ``layers`` and ``features``: for balanced-stage studies.
* ``detect`` - a stand-in for a detector with NMS in its graph: outputs whose
  shapes depend on the data (``hits`` ``[K, 2]``, the row and feature of every
  score over a threshold, and their ``hit_scores`` ``[K]``) beside a per-row
  ``best`` ``[N]``.

Each builder takes ``batch`` = an int (a fixed batch dim) or a name (a
dynamic one).

NOTE [ IR version ]: onnx 1.23 writes IR 14 by default, which
onnxruntime 1.31 rejects; every model here is written as IR 10, opset 17.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import onnx

IR_VERSION = 10
OPSET = 17
#: ``onnx.TensorProto.FLOAT``, as a default value that imports nothing
FLOAT = 1


def _onnx() -> tuple[Any, Any, Any]:
    """onnx's helper, numpy_helper and TensorProto, imported when a model is
    built, not with ``import pipeline`` (onnx takes most of a second to import)."""
    from onnx import TensorProto, helper, numpy_helper

    return helper, numpy_helper, TensorProto


Dim = int | str


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    import onnx

    helper, _, _ = _onnx()
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    model.producer_name = "ortpipe"
    onnx.checker.check_model(model)
    return model


def _weights(rng: np.random.Generator, name: str, shape: tuple[int, ...], fan_in: int) -> onnx.TensorProto:
    _, numpy_helper, _ = _onnx()
    values = rng.standard_normal(shape).astype(np.float32) * np.float32(1.0 / np.sqrt(fan_in))
    return numpy_helper.from_array(values, name)


def identity(batch: Dim = "N", features: int = 1024, dtype: int = FLOAT) -> onnx.ModelProto:
    helper, _, _ = _onnx()
    x = helper.make_tensor_value_info("x", dtype, [batch, features])
    y = helper.make_tensor_value_info("y", dtype, [batch, features])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity", [x], [y])
    return _model(graph)


def mlp(batch: Dim = "N", features: int = 64, hidden: int = 128, classes: int = 16, seed: int = 0) -> onnx.ModelProto:
    helper, numpy_helper, TensorProto = _onnx()
    rng = np.random.default_rng(seed)
    inits = [
        _weights(rng, "w1", (features, hidden), features),
        numpy_helper.from_array(np.zeros(hidden, np.float32), "b1"),
        _weights(rng, "w2", (hidden, classes), hidden),
        numpy_helper.from_array(np.zeros(classes, np.float32), "b2"),
    ]
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Gemm", ["r", "w2", "b2"], ["scores"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, features])
    y = helper.make_tensor_value_info("scores", TensorProto.FLOAT, [batch, classes])
    return _model(helper.make_graph(nodes, "mlp", [x], [y], inits))


def convnet(batch: Dim = "N", height: Dim = "H", width: Dim = "W", classes: int = 10, seed: int = 0) -> onnx.ModelProto:
    helper, numpy_helper, TensorProto = _onnx()
    rng = np.random.default_rng(seed)
    inits = [
        _weights(rng, "c1_w", (8, 3, 3, 3), 27),
        numpy_helper.from_array(np.zeros(8, np.float32), "c1_b"),
        _weights(rng, "c2_w", (16, 8, 3, 3), 72),
        numpy_helper.from_array(np.zeros(16, np.float32), "c2_b"),
        _weights(rng, "fc_w", (16, classes), 16),
        numpy_helper.from_array(np.zeros(classes, np.float32), "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["frames", "c1_w", "c1_b"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "c2_w", "c2_b"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"]),
    ]
    x = helper.make_tensor_value_info("frames", TensorProto.FLOAT, [batch, 3, height, width])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])
    return _model(helper.make_graph(nodes, "convnet", [x], [y], inits))


def multi_io(batch: Dim = "N") -> onnx.ModelProto:
    """Inputs a:f32[N,4] b:i64[N,3] c:u8[N,2,5] d:f16[N,4]; four outputs, one per dtype."""
    helper, numpy_helper, TensorProto = _onnx()
    inputs = [
        helper.make_tensor_value_info("a", TensorProto.FLOAT, [batch, 4]),
        helper.make_tensor_value_info("b", TensorProto.INT64, [batch, 3]),
        helper.make_tensor_value_info("c", TensorProto.UINT8, [batch, 2, 5]),
        helper.make_tensor_value_info("d", TensorProto.FLOAT16, [batch, 4]),
    ]
    outputs = [
        helper.make_tensor_value_info("sum", TensorProto.FLOAT, [batch, 4]),
        helper.make_tensor_value_info("square", TensorProto.INT64, [batch, 3]),
        helper.make_tensor_value_info("flipped", TensorProto.UINT8, [batch, 2, 5]),
        helper.make_tensor_value_info("half", TensorProto.FLOAT16, [batch, 4]),
    ]
    inits = [
        numpy_helper.from_array(np.array([-1], np.int64), "starts"),
        numpy_helper.from_array(np.array([np.iinfo(np.int64).min], np.int64), "ends"),
        numpy_helper.from_array(np.array([2], np.int64), "axes"),
        numpy_helper.from_array(np.array([-1], np.int64), "steps"),
    ]
    nodes = [
        helper.make_node("Cast", ["d"], ["d32"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["a", "d32"], ["sum"]),
        helper.make_node("Mul", ["b", "b"], ["square"]),
        helper.make_node("Slice", ["c", "starts", "ends", "axes", "steps"], ["flipped"]),
        helper.make_node("Cast", ["a"], ["half"], to=TensorProto.FLOAT16),
    ]
    return _model(helper.make_graph(nodes, "multi_io", inputs, outputs, inits))


def busy(batch: Dim = "N", features: int = 256, layers: int = 8, seed: int = 0) -> onnx.ModelProto:
    helper, _, TensorProto = _onnx()
    rng = np.random.default_rng(seed)
    inits, nodes, previous = [], [], "x"
    for index in range(layers):
        inits.append(_weights(rng, f"w{index}", (features, features), features))
        nodes.append(helper.make_node("MatMul", [previous, f"w{index}"], [f"m{index}"]))
        out = "y" if index == layers - 1 else f"t{index}"
        nodes.append(helper.make_node("Tanh", [f"m{index}"], [out]))
        previous = out
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, features])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, features])
    return _model(helper.make_graph(nodes, "busy", [x], [y], inits))


def detect(batch: Dim = "N", features: int = 64, threshold: float = 1.5) -> onnx.ModelProto:
    """Every score of ``x`` over ``threshold``: like a detector's output after NMS,
    one row per hit carrying its batch row, so K depends on the data."""
    helper, numpy_helper, TensorProto = _onnx()
    inits = [numpy_helper.from_array(np.array(threshold, np.float32), "threshold")]
    nodes = [
        helper.make_node("Greater", ["x", "threshold"], ["over"]),
        helper.make_node("NonZero", ["over"], ["where"]),
        helper.make_node("Transpose", ["where"], ["hits"], perm=[1, 0]),
        helper.make_node("GatherND", ["x", "hits"], ["hit_scores"]),
        helper.make_node("ReduceMax", ["x"], ["best"], axes=[1], keepdims=0),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, features])
    outputs = [
        helper.make_tensor_value_info("hits", TensorProto.INT64, ["K", 2]),
        helper.make_tensor_value_info("hit_scores", TensorProto.FLOAT, ["K"]),
        helper.make_tensor_value_info("best", TensorProto.FLOAT, [batch]),
    ]
    return _model(helper.make_graph(nodes, "detect", [x], outputs, inits))


@dataclass(frozen=True)
class BuiltinModel:
    """A registry entry: how to build the model and what a synthetic batch looks like."""

    name: str
    build: Callable[..., onnx.ModelProto]
    example: Callable[[int, np.random.Generator], dict[str, np.ndarray]]
    summary: str
    #: outputs whose shape depends on the data, not only on the rows
    data_dependent: tuple[str, ...] = ()


def _features(name: str, width: int) -> Callable[[int, np.random.Generator], dict[str, np.ndarray]]:
    return lambda rows, rng: {name: rng.standard_normal((rows, width)).astype(np.float32)}


def _frames(rows: int, rng: np.random.Generator, size: int = 64) -> dict[str, np.ndarray]:
    return {"frames": rng.random((rows, 3, size, size), dtype=np.float32)}


def _multi(rows: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "a": rng.standard_normal((rows, 4)).astype(np.float32),
        "b": rng.integers(-1000, 1000, (rows, 3), dtype=np.int64),
        "c": rng.integers(0, 256, (rows, 2, 5), dtype=np.uint8),
        "d": rng.standard_normal((rows, 4)).astype(np.float16),
    }


BUILTIN: dict[str, BuiltinModel] = {
    entry.name: entry
    for entry in (
        BuiltinModel("identity", identity, _features("x", 1024), "Identity over [N, 1024] float32"),
        BuiltinModel("mlp", mlp, _features("x", 64), "Gemm-ReLU-Gemm, [N, 64] -> [N, 16]"),
        BuiltinModel("convnet", convnet, _frames, "2 conv layers + pool + Gemm, [N, 3, H, W] -> [N, 10]"),
        BuiltinModel("multi_io", multi_io, _multi, "4 inputs/outputs: float32, int64, uint8, float16"),
        BuiltinModel("busy", busy, _features("x", 256), "8 x (MatMul 256x256 + Tanh)"),
        BuiltinModel(
            "detect", detect, _features("x", 64), "scores over 1.5 of [N, 64] -> hits [K, 2]", ("hits", "hit_scores")
        ),
    )
}


def get(name: str, **kwargs: object) -> onnx.ModelProto:
    """Build built-in model ``name`` (keyword arguments go to its builder)."""
    try:
        entry = BUILTIN[name]
    except KeyError:
        raise KeyError(f"no built-in model {name!r}; choose from {sorted(BUILTIN)}") from None
    return entry.build(**kwargs)


def example_batch(name: str, rows: int, seed: int = 0) -> dict[str, np.ndarray]:
    """A synthetic batch of ``rows`` for built-in model ``name`` (default sizes)."""
    return BUILTIN[name].example(rows, np.random.default_rng(seed))
