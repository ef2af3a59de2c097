"""Pooling on the device: an encoder's token vectors made one vector a text, inside the graph.

NOTE [ pooling in the graph ]: an encoder answers with a vector a token, ``[batch, tokens,
hidden]`` - at 512 tokens of 768 floats, 1.5 MB a text - where a corpus's embedding keeps one
vector a text.  As ``--top-k`` does (NOTE [ top k ]), :func:`with_pooling` appends the
pooling to the graph as ONNX operators, so that ORT computes it where the model runs and
only the pooled vector crosses the link, under the name ``embedding``:

* ``mean``: the mean of the token vectors the attention mask keeps (sentence-transformers'
  default), their sum over the mask's count;
* ``cls``: the first token's vector;
* ``last``: the last real token's (a decoder's), where the mask says each text ends;
* ``normalize``: each vector divided by its L2 norm (at least 1e-12, as
  ``torch.nn.functional.normalize``), for cosine similarity by dot product.

Nothing is appended for ``none``: a model that pools itself (``[batch, hidden]``) keeps its
output.  sentence-transformers' own choice (``1_Pooling/config.json``) is taken where present.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..heads import check_free, declared_dims, loaded_model
from ..session import onnx_proto
from ..util.errors import ModelError

POOLINGS = ("mean", "cls", "last", "none")
EMBEDDING = "embedding"
#: the first opset whose ReduceSum, Unsqueeze and Squeeze take their axes as inputs
POOLING_OPSET = 13
_PREFIX = "ortpipe_pooling"
_INT64 = 7  # TensorProto.INT64


def default_pooling(model: Any, output: str | None = None) -> str:
    """``mean`` where the (first, or ``output``) output is ``[batch, tokens, hidden]``, else ``none``."""
    proto = loaded_model(model)
    value = _output(proto, output)
    dims = declared_dims(value)
    return "mean" if dims is not None and len(dims) == 3 else "none"


def with_pooling(
    model: Any, pooling: str, normalize: bool = False, output: str | None = None, mask: str = "attention_mask"
) -> Any:
    """``model`` as a new ``ModelProto`` whose only output is ``embedding``: ``output`` (None:
    the first) pooled over its tokens as ``pooling`` says, L2-normalized where ``normalize``."""
    if pooling not in POOLINGS:
        raise ModelError(f"pooling must be one of {list(POOLINGS)}, got {pooling!r}")
    proto = loaded_model(model)
    value = _output(proto, output)
    opset = next((entry.version for entry in proto.opset_import if entry.domain in ("", "ai.onnx")), 0)
    if opset < POOLING_OPSET:
        raise ModelError(
            f"pooling in the graph needs opset {POOLING_OPSET} or later, the model is of {opset} "
            "(onnx.version_converter.convert_version can raise it)"
        )
    if pooling == "none" and not normalize:
        return proto
    graph = proto.graph
    if mask not in {item.name for item in graph.input} and pooling in ("mean", "last"):
        raise ModelError(f"{pooling} pooling reads the attention mask, and the model has no input {mask!r}")
    dims = declared_dims(value)
    if pooling != "none" and (dims is None or len(dims) != 3):
        raise ModelError(
            f"{pooling} pooling takes an output of [batch, tokens, hidden]; {value.name!r} is {dims}: "
            "choose --pooling none for a model that pools itself"
        )
    check_free(graph, (EMBEDDING,), "pooling")
    elem = value.type.tensor_type.elem_type
    build = _Builder(graph, elem)
    pooled = build.pooled(pooling, value.name, mask)
    if normalize:
        pooled = build.normalized(pooled)
    graph.node.append(onnx_proto.node("Identity", [pooled], [EMBEDDING]))
    out_dims = None if dims is None else ([dims[0], dims[2]] if pooling != "none" else dims)
    del graph.output[:]
    graph.output.append(onnx_proto.tensor_value(EMBEDDING, elem, out_dims))
    return proto


def _output(proto: Any, output: str | None) -> Any:
    outputs = {value.name: value for value in proto.graph.output}
    if output is None:
        return proto.graph.output[0]
    if output not in outputs:
        raise ModelError(f"pooling: the model has no output {output!r}; it has {list(outputs)}")
    return outputs[output]


class _Builder:
    """Nodes and constants appended to ``graph``, each named apart."""

    def __init__(self, graph: Any, elem: int) -> None:
        self.graph, self.elem, self._count = graph, elem, 0

    def name(self, what: str) -> str:
        self._count += 1
        return f"{_PREFIX}_{what}_{self._count}"

    def node(self, op: str, inputs: list[str], **attributes: Any) -> str:
        out = self.name(op.lower())
        self.graph.node.append(onnx_proto.node(op, inputs, [out], **attributes))
        return out

    def ints(self, values: list[int]) -> str:
        name = self.name("const")
        self.graph.initializer.append(onnx_proto.tensor(name, np.array(values, np.int64), _INT64))
        return name

    def scalar(self, value: float) -> str:
        name = self.name("const")
        self.graph.initializer.append(onnx_proto.tensor(name, np.array(value), self.elem))
        return name

    def pooled(self, pooling: str, hidden: str, mask: str) -> str:
        if pooling == "none":
            return hidden
        if pooling == "cls":
            first = self.name("const")
            self.graph.initializer.append(onnx_proto.tensor(first, np.array(0, np.int64), _INT64))
            return self.node("Gather", [hidden, first], axis=1)
        if pooling == "mean":
            weights = self.node("Unsqueeze", [self.node("Cast", [mask], to=self.elem), self.ints([-1])])
            summed = self.node("ReduceSum", [self.node("Mul", [hidden, weights]), self.ints([1])], keepdims=0)
            counts = self.node("ReduceSum", [weights, self.ints([1])], keepdims=0)
            return self.node("Div", [summed, self.node("Max", [counts, self.scalar(1e-9)])])
        # last: each row's last real token, where its mask's count says it is
        ends = self.node("Sub", [self.node("ReduceSum", [mask, self.ints([1])], keepdims=1), self.ints([1])])
        shape = self.node("Shape", [hidden])
        rows = self.node("Slice", [shape, self.ints([0]), self.ints([1])])
        width = self.node("Slice", [shape, self.ints([2]), self.ints([3])])
        target = self.node("Concat", [rows, self.ints([1]), width], axis=0)
        index = self.node("Expand", [self.node("Unsqueeze", [ends, self.ints([-1])]), target])
        taken = self.node("GatherElements", [hidden, index], axis=1)
        return self.node("Squeeze", [taken, self.ints([1])])

    def normalized(self, pooled: str) -> str:
        squares = self.node("ReduceSum", [self.node("Mul", [pooled, pooled]), self.ints([-1])], keepdims=1)
        norm = self.node("Max", [self.node("Sqrt", [squares]), self.scalar(1e-12)])
        return self.node("Div", [pooled, norm])
