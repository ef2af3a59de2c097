"""NOTE [ rows that interact ]: padding a short batch never changes a real row's result silently."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

from pipeline import ModelError, Pipeline, PipelineOptions, PipelineStageError
from pipeline.models import IR_VERSION, OPSET

from ..conftest import assert_outputs_equal, reference


def _model(batch: int | str, centred: bool):
    """``y = x - mean(x, axis 0)`` (rows that interact) or ``y = 2 x`` (rows alone), x [batch, 3]."""
    if centred:
        nodes = [
            helper.make_node("ReduceMean", ["x"], ["m"], keepdims=1, axes=[0]),
            helper.make_node("Sub", ["x", "m"], ["y"]),
        ]
        opset = 17  # ReduceMean's axes an attribute
    else:
        nodes = [helper.make_node("Add", ["x", "x"], ["y"])]
        opset = OPSET
    graph = helper.make_graph(
        nodes,
        "padding",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=IR_VERSION)


def _rows(count: int) -> np.ndarray:
    return np.random.default_rng(count).standard_normal((count, 3)).astype(np.float32)


def _refused(error: PipelineStageError) -> ModelError:
    """The batch's compute refused, on every path alike, for the model's doing."""
    assert error.stage == "compute" and isinstance(error.__cause__, ModelError), repr(error)
    return error.__cause__


@pytest.mark.parametrize("stage_threads", [False, True, "auto"], ids=["caller-thread", "stage-threads", "auto"])
def test_a_fixed_batch_whose_rows_interact_is_refused_before_a_padded_batch_runs(stage_threads):
    model = _model(4, centred=True)
    x = _rows(8)
    with Pipeline(model, device="cpu", options=PipelineOptions(stage_threads=stage_threads)) as pipe:
        whole = list(pipe.map([x[:4], x[4:]]))  # whole batches: nothing padded, nothing checked
        for batch, out in zip((x[:4], x[4:]), whole, strict=True):
            assert_outputs_equal(out, reference(model, {"x": batch}))
        with pytest.raises(PipelineStageError) as caught:
            pipe.run(_rows(6))
    message = str(_refused(caught.value))
    assert "padded to 4" in message and "rows interact" in message and "'y'" in message
    assert "whole batches of 4 rows" in message


def test_static_shapes_over_rows_that_interact_say_to_run_without_them(device):
    model = _model("N", centred=True)
    with Pipeline(model, device=device, batch_size=4, options=PipelineOptions(static_shapes=True)) as pipe:
        results = pipe.map([_rows(4), _rows(3)])
        first = next(results)
        assert_outputs_equal(first, reference(model, {"x": _rows(4)}), device)
        with pytest.raises(PipelineStageError) as caught:
            next(results)
    assert caught.value.stage == "compute" and caught.value.batch_index == 1
    assert "static_shapes=False" in str(_refused(caught.value))


def test_rows_alone_are_padded_as_before_and_checked_once(device, stage_threads):
    model = _model(4, centred=False)
    bound: list[int] = []
    options = PipelineOptions(stage_threads=stage_threads, on_batch=lambda trace: bound.append(trace.bound_rows))
    batches = [_rows(3), _rows(4), _rows(1), _rows(3)]
    with Pipeline(model, device=device, options=options) as pipe, warnings.catch_warnings():
        warnings.simplefilter("error")
        outs = list(pipe.map(batches))
        assert len(pipe.session._padding_checked) == 1  # one padded shape: one check
    assert bound == [4, 4, 4, 4]
    for batch, out in zip(batches, outs, strict=True):
        assert_outputs_equal(out, {"y": 2 * batch}, device)


def test_a_model_that_cannot_run_on_made_up_rows_is_warned_of_and_runs_padded():
    """Indices into a one-element table: the check's rows of ones fall outside it; the real
    zeros, and the zero padding, do not."""
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "i"], ["y"], axis=0)],
        "gather",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        initializer=[helper.make_tensor("table", TensorProto.FLOAT, [1], [7.5])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    with Pipeline(model, device="cpu") as pipe, pytest.warns(UserWarning, match="could not check whether padding"):
        got = pipe.run(np.zeros(6, np.int64))
    np.testing.assert_array_equal(got["y"], np.full(6, 7.5, np.float32))


def test_the_check_finds_rows_that_interact_and_passes_rows_alone():
    from pipeline import HostDevice, OrtSession
    from pipeline.session.padding import changed_by_padding

    interact = ["'y' of a row changes with the other rows of its batch: the rows interact"]
    for centred, changed in ((True, interact), (False, [])):
        session = OrtSession(_model(4, centred), HostDevice())

        def run(feeds, session=session):
            return session.session.run(None, feeds)

        assert changed_by_padding(run, session.inputs, {"x": (4, 3)}, ["y"]) == changed


def _mean_of_all_model():
    """``y = 2 x`` a row, and ``m = mean(x)`` over the whole batch: an output with no row each."""
    nodes = [
        helper.make_node("Add", ["x", "x"], ["y"]),
        helper.make_node("ReduceMean", ["x"], ["m"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "reduced",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3]),
            helper.make_tensor_value_info("m", TensorProto.FLOAT, []),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=IR_VERSION)


@pytest.mark.parametrize("stage_threads", [False, True], ids=["caller-thread", "stage-threads"])
def test_static_shapes_never_pad_an_output_of_no_row_each(stage_threads):
    """Issue 53, item 9: a reduction over the batch would hold the padding rows' zeros (it came out
    0.13-0.16 off, silently): the padded batch is refused naming the output, and why."""
    model = _mean_of_all_model()
    x = _rows(8)
    options = PipelineOptions(static_shapes=True, stage_threads=stage_threads)
    with Pipeline(model, device="cpu", batch_size=4, options=options) as pipe:
        (whole,) = list(pipe.map([x[:4]]))  # a whole batch: nothing padded
        np.testing.assert_allclose(whole["m"], x[:4].mean(), rtol=1e-6)
        with pytest.raises(PipelineStageError) as caught:
            list(pipe.map([x[:3]]))
    message = str(_refused(caught.value))
    assert "padded to 4" in message and "'m' has no row each" in message and "without static shapes" in message
