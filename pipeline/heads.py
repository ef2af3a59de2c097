"""Heads: a few nodes appended to a model's graph, so that what is kept of an
output is worked out on the device and only that crosses the link.

NOTE [ top k ]: a classifier scoring a data set answers with a score for every
class of every row - 1,000 floats a row for ImageNet, 4 KB, 4 GB a million rows
- where its users keep the best few.  Taking them on the host costs the whole
d2h, a host pass over every score, and a file that large or a post-processing
step of one's own.  :func:`with_top_k` appends ONNX's ``TopK`` (after a
``Softmax`` where asked) to the graph: ORT runs it on the GPU in the same
stream, inside the compute stage, and the pipeline copies back and writes the
k values and their class indices a row (``--top-k``): 40 bytes instead of
4,000 at k = 5.

The model is loaded whole (a path's external weights too, read from beside
it) and handed to ORT serialized: a model beyond protobuf's 2 GB cannot be, and
is refused with what to do instead.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

from .session import ort_model_arg
from .util.errors import ModelError

#: the first opset whose TopK takes k as an input (a tensor), not as an attribute
TOP_K_OPSET = 10
#: protobuf's limit on a message: a serialized model cannot be larger
_PROTOBUF_LIMIT = 2**31 - 1
#: the model metadata entry that says what :func:`with_top_k` appended (:func:`top_k_of`)
TOP_K_METADATA = "ortpipe.top_k"


def top_k_names(output: str, k: int) -> tuple[str, str]:
    """The outputs :func:`with_top_k` adds for ``output``: its ``k`` best values
    (``{output}_top{k}``) and their indices along its last axis (``..._index``)."""
    return f"{output}_top{k}", f"{output}_top{k}_index"


def with_top_k(model: Any, output: str | None, k: int, *, softmax: bool = False, keep: bool = False) -> Any:
    """``model`` (a path, bytes or an ``onnx.ModelProto``; not changed) as a new
    ``ModelProto`` that also gives ``output``'s (None: the model's only output's)
    ``k`` largest values along its last axis, largest first, and their int64
    indices (:func:`top_k_names`), after a softmax over that axis where
    ``softmax`` (probabilities, not logits).
    ``output`` itself is no longer an output of the graph unless ``keep``: it is
    then not copied back at all (NOTE [ top k ]).  The model's metadata says
    what was appended (:func:`top_k_of`)."""
    import onnx

    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ModelError(f"top k takes a whole number of values >= 1, got {k!r}")
    proto = loaded_model(model)
    value = _taken_output(proto, output, k, softmax)
    output = value.name
    last = _last_dim(value)
    facts = {"output": output, "k": k, "softmax": softmax, "classes": last if isinstance(last, int) else None}
    _append_top_k(proto.graph, value, k, softmax)
    if not keep:
        proto.graph.output.remove(value)
    proto.metadata_props.add(key=TOP_K_METADATA, value=json.dumps(facts))
    if proto.ByteSize() > _PROTOBUF_LIMIT:
        raise ModelError(
            f"top k of {output!r}: the model with its weights is over protobuf's 2 GB, so it cannot be handed to "
            "ORT rebuilt in memory; add TopK to the model file itself (onnx.save(..., save_as_external_data=True))"
        )
    onnx.checker.check_model(proto)  # what was appended fits the graph, before ORT reads it
    return proto


def _taken_output(proto: Any, output: str | None, k: int, softmax: bool) -> Any:
    """The graph output ``output`` (None: the only one), checked to take ``k`` values from."""
    from onnx import TensorProto

    outputs = {value.name: value for value in proto.graph.output}
    if output is None:
        if len(outputs) != 1:
            raise ModelError(f"top k: the model has {len(outputs)} outputs ({sorted(outputs)}): name the one to take")
        output = next(iter(outputs))
    if output not in outputs:
        raise ModelError(f"top k of {output!r}: not an output of the model (its outputs: {sorted(outputs)})")
    _check_opset(proto, output)
    value = outputs[output]
    kind = value.type.tensor_type.elem_type
    if kind not in _NUMERIC:
        raise ModelError(f"top k of {output!r}: its values are {TensorProto.DataType.Name(kind)}, TopK takes numbers")
    if softmax and kind not in _FLOATS:
        name = TensorProto.DataType.Name(kind)
        raise ModelError(f"top k of {output!r}: a softmax of {name} values: Softmax takes floats")
    last = _last_dim(value)
    if isinstance(last, int) and last < k:
        raise ModelError(f"top k of {output!r}: k = {k} is more than the {last} values along its last axis")
    return value


def _append_top_k(graph: Any, value: Any, k: int, softmax: bool) -> None:
    """Softmax (where asked) and TopK after output ``value``, their two outputs added to the graph's."""
    from onnx import TensorProto, helper

    output = value.name
    values_name, index_name = top_k_names(output, k)
    k_name, probabilities = f"{values_name}_k", f"{output}_softmax"
    check_free(graph, (values_name, index_name, k_name, probabilities))
    scored = output
    if softmax:
        graph.node.append(helper.make_node("Softmax", [output], [probabilities], axis=-1))
        scored = probabilities
    graph.initializer.append(helper.make_tensor(k_name, TensorProto.INT64, [1], [k]))
    graph.node.append(helper.make_node("TopK", [scored, k_name], [values_name, index_name], axis=-1))
    dims = declared_dims(value)
    new_dims = None if dims is None else [*dims[:-1], k]
    graph.output.append(helper.make_tensor_value_info(values_name, value.type.tensor_type.elem_type, new_dims))
    graph.output.append(helper.make_tensor_value_info(index_name, TensorProto.INT64, new_dims))


def top_k_of(model: Any) -> dict[str, Any] | None:
    """What :func:`with_top_k` appended to ``model`` (an ``onnx.ModelProto``): the
    ``output``, ``k``, ``softmax``, and the ``classes`` along its last axis (None
    where the model leaves that dim free); None where it appended nothing."""
    entries = [entry.value for entry in model.metadata_props if entry.key == TOP_K_METADATA]
    return json.loads(entries[-1]) if entries else None


#: ONNX element types TopK takes: the integers and the floats
_NUMERIC = {1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 16}
#: those Softmax takes: float, float16, double, bfloat16
_FLOATS = {1, 10, 11, 16}


def loaded_model(model: Any) -> Any:
    """A copy of ``model`` as a ModelProto, a file's external weights read in."""
    from .session.onnx_proto import has_external_data, is_model_proto, parsed_model, read_model

    if is_model_proto(model):
        return copy.deepcopy(model)
    loadable = ort_model_arg(model)  # a path that is a file, or bytes; a ModelError for anything else
    try:
        if not isinstance(loadable, str):
            return parsed_model(loadable)
        proto = read_model(loadable)  # without onnx's import (session/onnx_proto.py) where it can
        if has_external_data(proto):  # its weights read in from beside the file, as ORT reads them
            from onnx.external_data_helper import load_external_data_for_model

            load_external_data_for_model(proto, os.path.dirname(os.path.abspath(loadable)))
        return proto
    except Exception as exc:
        which = f"{loadable!r} is " if isinstance(loadable, str) else ""
        raise ModelError(f"{which}not a readable ONNX model: {exc}") from exc


def _check_opset(proto: Any, output: str) -> None:
    opset = next((entry.version for entry in proto.opset_import if entry.domain in ("", "ai.onnx")), None)
    if opset is None or opset < TOP_K_OPSET:
        raise ModelError(
            f"top k of {output!r}: the model is of opset {opset}, and TopK with k as an input needs {TOP_K_OPSET} "
            "or later (onnx.version_converter.convert_version can raise it)"
        )


def declared_dims(value: Any) -> list[int | str | None] | None:
    """An output's declared dims (an int, a name, or None where neither), None where its rank is not declared."""
    tensor = value.type.tensor_type
    if not tensor.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim]


def _last_dim(value: Any) -> int | str | None:
    """The last dim of a batched output: its first is the rows', so it needs a second."""
    dims = declared_dims(value)
    if dims is not None and len(dims) < 2:
        raise ModelError(
            f"top k of {value.name!r}: it is {dims or 'a scalar'}, one value a row at most: there is no axis of a "
            "row's values to take the largest along"
        )
    return None if dims is None else dims[-1]


def check_free(graph: Any, names: tuple[str, ...], what: str = "top k") -> None:
    """The names to be added are not taken by a value of the graph already (``what``: who adds them)."""
    taken = {value.name for value in (*graph.input, *graph.output, *graph.value_info)}
    taken.update(init.name for init in graph.initializer)
    taken.update(name for node in graph.node for name in node.output)
    clash = [name for name in names if name in taken]
    if clash:
        raise ModelError(f"{what}: the model already has values named {clash}, the names of what it would add")
