"""Issue 37, items 9 and 10: inputs that are not rows of one batch are said, by name, with what to do."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from pipeline import ModelError, Pipeline, PipelineInputError, TensorSpec
from pipeline.models import IR_VERSION, OPSET
from pipeline.session.specs import own_batch_dims


def _model(nodes, inputs, outputs):
    graph = helper.make_graph(
        nodes,
        "axes",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in inputs],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in outputs],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def _scores(output_shape=("n", "m")):
    """Attention's scores: ``S = Q K^T``, Q [n, 4], K [m, 4]."""
    return _model(
        [helper.make_node("Transpose", ["K"], ["Kt"]), helper.make_node("MatMul", ["Q", "Kt"], ["S"])],
        [("Q", ["n", 4]), ("K", ["m", 4])],
        [("S", list(output_shape))],
    )


def _floats(rows: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 4)).astype(np.float32)


def test_inputs_of_their_own_dim_are_not_cut_alike_and_the_message_names_them():
    q, k = _floats(6, 1), _floats(6, 2)
    with Pipeline(_scores(), device="cpu") as pipe:
        for call in (lambda: pipe.run({"Q": q, "K": k}, batch_size=2), lambda: list(pipe.map_arrays({"Q": q, "K": k}))):
            with pytest.raises(PipelineInputError) as caught:
                call()
            message = str(caught.value)
            assert "['K'] have dim 0 'm'" in message and "output 'S' declares on axis 1" in message
            assert "constant" in message
        # batches the caller made are the caller's: each runs as it is
        (out,) = pipe.map([{"Q": q[:3], "K": k[:3]}])
        np.testing.assert_allclose(out["S"], q[:3] @ k[:3].T, rtol=1e-5)


def test_such_an_input_given_as_a_constant_runs_the_others_in_batches():
    q, k = _floats(7, 1), _floats(5, 2)
    with Pipeline(_scores(), device="cpu", constants={"K": k}) as pipe:
        got = pipe.run(q, batch_size=3)
    np.testing.assert_allclose(got["S"], q @ k.T, rtol=1e-5)


def test_names_that_differ_alone_prove_nothing():
    """tf2onnx names each input's batch dim apart (``unk__0``, ``unk__1``): cut alike."""
    a, b = TensorSpec("a", np.dtype(np.float32), ("unk__0", 4)), TensorSpec("b", np.dtype(np.float32), ("unk__1", 4))
    y = TensorSpec("y", np.dtype(np.float32), ("unk__2", 4))
    assert own_batch_dims((a, b), (y,)) is None
    assert own_batch_dims((a, b), (TensorSpec("s", np.dtype(np.float32), ("unk__0", "unk__1")),)) is not None


def test_outputs_whose_rows_change_shape_between_batches_are_refused_by_run_with_a_message():
    """Declared dims that do not show it (``S [n, k]``): the joined rows would not fit together."""
    q, k = _floats(6, 1), _floats(6, 2)
    with Pipeline(_scores(("n", "k")), device="cpu") as pipe:
        with pytest.raises(PipelineInputError, match="no batch dim to concatenate along"):
            pipe.run({"Q": q, "K": k}, batch_size=4)


def test_a_state_batched_on_another_axis_is_named():
    """silero-vad's ``state [2, N, 128]`` beside ``input [N, 512]``."""
    model = _model(
        [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Identity", ["state"], ["state_out"])],
        [("x", ["N", 4]), ("state", [2, "N", 3])],
        [("y", ["N", 4]), ("state_out", [2, "N", 3])],
    )
    x, state = _floats(5), np.zeros((2, 5, 3), np.float32)
    with Pipeline(model, device="cpu") as pipe, pytest.raises(PipelineInputError) as caught:
        list(pipe.map([{"x": x, "state": state}]))
    message = str(caught.value)
    assert "'state' [2, N, 3] with a fixed dim 0 beside 'x' [N, 4]" in message and "constant" in message


def test_inputs_that_fix_different_batch_dims_say_what_a_constant_is():
    model = _model([helper.make_node("Identity", ["a"], ["y"])], [("a", [3, 4]), ("b", [5, 4])], [("y", [3, 4])])
    with pytest.raises(ModelError) as caught:
        Pipeline(model, device="cpu")
    assert "{'a': 3, 'b': 5}" in str(caught.value) and "constants=" in str(caught.value)
