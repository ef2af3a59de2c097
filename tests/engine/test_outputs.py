"""Choosing the outputs a pipeline binds and copies back (``Pipeline(outputs=...)``)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from pipeline import ModelError, Pipeline, PipelineOptions, PipelineStageError, models
from pipeline.models import IR_VERSION, OPSET

from ..conftest import assert_outputs_equal, reference


def zipmap_classifier():
    """What skl2onnx makes of a classifier by default: a label tensor and a ZipMap of probabilities."""
    probs_type = helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, []))
    )
    graph = helper.make_graph(
        [
            helper.make_node("ArgMax", ["p"], ["label"], axis=1, keepdims=0),
            helper.make_node("ZipMap", ["p"], ["probabilities"], domain="ai.onnx.ml", classlabels_int64s=[0, 1, 2]),
        ],
        "classifier",
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, ["N", 3])],
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
            helper.make_value_info("probabilities", probs_type),
        ],
    )
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid("ai.onnx.ml", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION)


def test_chosen_outputs_alone_come_back_and_alone_cross_the_link(device):
    model = models.multi_io()
    batches = [models.example_batch("multi_io", 8, seed=i) for i in range(6)] + [models.example_batch("multi_io", 3)]
    engine = PipelineOptions(direct=False)  # what crosses the link: the engine's copies
    with Pipeline(model, device=device, depth=2, outputs=["half", "square"], options=engine) as pipe:
        assert pipe.output_names == ["square", "half"]  # the model's order
        for batch, out in zip(batches, pipe.map(batches), strict=True):
            want = reference(model, batch)
            assert_outputs_equal(out, {name: want[name] for name in ("square", "half")}, device)
        per_row = 3 * 8 + 4 * 2  # int64 [3] + float16 [4]
        assert [t.d2h_bytes for t in pipe.stats.timings] == [8 * per_row] * 6 + [3 * per_row]


def test_a_model_with_a_zipmap_output_runs_as_it_comes(fast_device):
    """NOTE [ ZipMap ]: its probabilities come as a float tensor, its classes from the pipeline."""
    x = np.random.default_rng(0).random((50, 3)).astype(np.float32)
    with Pipeline(zipmap_classifier(), device=fast_device, options=PipelineOptions(direct=False)) as pipe:
        assert pipe.class_labels == {"probabilities": (0, 1, 2)}
        out = pipe.run(x, batch_size=16)
    np.testing.assert_array_equal(out["probabilities"], x)
    np.testing.assert_array_equal(out["label"], x.argmax(axis=1))


def test_an_output_of_sequences_that_no_zipmap_makes_says_how_to_run_the_model():
    graph = helper.make_graph(
        [helper.make_node("SequenceConstruct", ["x", "x"], ["both"]), helper.make_node("Identity", ["x"], ["y"])],
        "sequences",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [
            helper.make_value_info("both", helper.make_sequence_type_proto(helper.make_tensor_type_proto(1, None))),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    with pytest.raises(ModelError, match=r"'both' has type seq\(tensor\(float\)\).*outputs=\['y'\]"):
        Pipeline(model, device="cpu")
    with Pipeline(model, device="cpu", outputs=["y"]) as pipe:
        np.testing.assert_array_equal(pipe.run(np.ones((4, 3), np.float32))["y"], np.ones((4, 3)))


@pytest.mark.parametrize(
    ("outputs", "error", "words"),
    [
        (["sum", "total"], ModelError, r"outputs \['total'\] are not outputs of the model; it has \['sum', 'square'"),
        ("sum", ValueError, "a non-empty list of output names, got 'sum'"),
        ([], ValueError, "a non-empty list of output names"),
    ],
)
def test_bad_output_choices_say_what_the_model_has(outputs, error, words):
    with pytest.raises(error, match=words):
        Pipeline(models.multi_io(), device="cpu", outputs=outputs)


def test_ort_still_runs_the_branches_of_outputs_not_chosen():
    """What docs/python-api.md says: choosing outputs saves their copies, not their compute."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Reshape", ["x", "shape"], ["z"])],
        "two_branches",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
        ],
        [helper.make_tensor("shape", TensorProto.INT64, [2], [7, -1])],  # fails unless 7 divides the size
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    # the z branch fails: in the probe run, or on the direct path in the run itself
    with pytest.raises((ModelError, PipelineStageError), match="cannot run on input shapes|Reshape"):
        with Pipeline(model, device="cpu", outputs=["y"]) as pipe:
            pipe.run(np.ones((1, 4), np.float32))
    with Pipeline(model, device="cpu", outputs=["y"]) as pipe:  # 7 rows: the z branch can run
        np.testing.assert_array_equal(pipe.run(np.ones((7, 4), np.float32), batch_size=7)["y"], np.ones((7, 4)))
