"""Classifiers as their converters export them: ZipMap probabilities made a tensor.

NOTE [ ZipMap ]: skl2onnx's default for every classifier, and onnxmltools'
for LightGBM and XGBoost, ends the graph with a ``ZipMap`` node
(``ai.onnx.ml``): its input is the probabilities, a float tensor
``[N, classes]``; its output, ``seq(map(int64|string, float))``, is one
Python dict a row.  Nothing can bind a sequence of maps, and a dict a row is
what bulk scoring must not make.  So a model with such an output is loaded
with each ZipMap that makes one replaced by an ``Identity`` of its input,
under the output's own name: the output becomes the probabilities' tensor,
``[N, classes]`` of float32, and the classes - ZipMap's
``classlabels_int64s`` or ``classlabels_strings``, in the columns' order -
are kept as :attr:`Unzipped.labels`.  Nothing else of the graph changes, so
the probabilities are the ones ZipMap would have mapped.  Writers put each
class's probability in a column of its own, named after the output and the
class (NOTE [ class columns ] in ``sinks``).  Only models that have such an
output are loaded and rewritten, once, when their session is made."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..util.errors import ModelError
from .specs import ModelSource, ort_model_arg

#: ORT's type of a ZipMap's output (int64 or string keys)
ZIPMAP_TYPES = ("seq(map(int64,tensor(float)))", "seq(map(string,tensor(float)))")


@dataclass(frozen=True)
class Unzipped:
    """A model whose ZipMap outputs are probability tensors, and each one's classes."""

    model: bytes
    #: output name -> its classes, in its columns' order
    labels: dict[str, tuple[int | str, ...]]


def classifier_like(outputs: Sequence[Any]) -> bool:
    """Whether a session's outputs (ORT's NodeArgs) look like a classifier's: a label tensor a
    row (int64 or string) and a float one of a row of values (worth reading the graph for)."""
    types = sorted(arg.type for arg in outputs)
    ranks = sorted(len(arg.shape or ()) for arg in outputs)
    return (
        len(outputs) == 2
        and ranks == [1, 2]
        and "tensor(float)" in types
        and ("tensor(int64)" in types or "tensor(string)" in types)
    )


def has_zipmap_output(output_types: dict[str, str]) -> list[str]:
    """The outputs (name -> ORT type) that a ZipMap makes, by their type."""
    return [name for name, ort_type in output_types.items() if ort_type in ZIPMAP_TYPES]


def unzipped(model: ModelSource, outputs: list[str]) -> Unzipped:
    """``model`` with the ZipMaps that make ``outputs`` replaced by their probabilities
    (NOTE [ ZipMap ]); a model given as a proto is left as it is."""
    import onnx

    loadable = ort_model_arg(model)
    proto = onnx.load_model(loadable) if isinstance(loadable, str) else onnx.load_model_from_string(loadable)
    graph = proto.graph
    labels = {name: classes for name, classes in declared_classes(proto).items() if name in outputs}
    for node in graph.node:
        if node.op_type == "ZipMap" and node.output[0] in labels:
            node.CopyFrom(onnx.helper.make_node("Identity", [node.input[0]], [node.output[0]], name=node.name))
    missing = [name for name in outputs if name not in labels]
    if missing:
        raise ModelError(
            f"outputs {missing} are sequences of maps that no ZipMap node makes: ortpipe binds tensors only; "
            "choose the tensor outputs with --output-names (outputs= in Python)"
        )
    for value in graph.output:
        if value.name in labels:
            value.type.CopyFrom(
                onnx.helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, [None, len(labels[value.name])])
            )
    return Unzipped(proto.SerializeToString(), labels)


def declared_classes(proto: Any) -> dict[str, tuple[int | str, ...]]:
    """Each graph output a ZipMap makes, and each a classifier node's probabilities reach
    as they are (NOTE [ stated classes ]), with its classes, read from the graph (no session:
    for a schema made before any run, Spark's)."""
    outputs = {value.name for value in proto.graph.output}
    zipped = {
        node.output[0]: _classes(node)
        for node in proto.graph.node
        if node.op_type == "ZipMap" and node.output[0] in outputs
    }
    return {**stated_classes(proto), **zipped}


#: the ai.onnx.ml classifiers: their second output is the probabilities, a column a class
_CLASSIFIERS = ("TreeEnsembleClassifier", "LinearClassifier", "SVMClassifier")
#: nodes that keep a tensor's columns where they are (LightGBM's export multiplies by one)
_COLUMNS_KEPT = ("Identity", "Cast", "Normalizer", "Mul", "Div", "Add", "Sub")


def stated_classes(proto: Any) -> dict[str, tuple[int | str, ...]]:
    """The graph outputs that are a classifier node's probabilities with no ZipMap after them.

    NOTE [ stated classes ]: XGBoost as onnxmltools exports it, and LightGBM or scikit-learn
    exported without ZipMap, end in a ``TreeEnsembleClassifier`` (``LinearClassifier``,
    ``SVMClassifier``) whose second output, ``[N, classes]``, reaches a graph output directly
    or through nodes that keep its columns (Identity, Cast, Normalizer, arithmetic).
    Its ``classlabels_*`` attribute states the classes in the columns' order, as a ZipMap's
    does, so the output gets a column a class (NOTE [ class columns ] in ``sinks``)."""
    outputs = {value.name for value in proto.graph.output}
    consumers: dict[str, list[Any]] = {}
    for node in proto.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    stated = {}
    for node in proto.graph.node:
        if node.op_type not in _CLASSIFIERS or len(node.output) < 2:
            continue
        classes = _labels_of(node)
        name = node.output[1]
        while name not in outputs and len(consumers.get(name, [])) == 1:
            following = consumers[name][0]
            if following.op_type not in _COLUMNS_KEPT:
                break
            name = following.output[0]
        if name in outputs and classes:
            stated[name] = classes
    return stated


def _labels_of(node: Any) -> tuple[int | str, ...]:
    for attribute in node.attribute:
        if attribute.name == "classlabels_int64s" and attribute.ints:
            return tuple(int(value) for value in attribute.ints)
        if attribute.name == "classlabels_strings" and attribute.strings:
            return tuple(value.decode("utf-8") for value in attribute.strings)
    return ()


def _classes(node: Any) -> tuple[int | str, ...]:
    classes = _labels_of(node)
    if classes:
        return classes
    raise ModelError(f"ZipMap node {node.name!r} names no classes (classlabels_int64s or classlabels_strings)")
