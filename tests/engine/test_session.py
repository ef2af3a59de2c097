"""The ORT binding layer: specs, probes, run options."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from pipeline import HostDevice, ModelError, OrtSession, Pipeline, PipelineOptions, models
from pipeline.models import IR_VERSION, OPSET

from ..helpers import renamed_dims_model


def test_specs_from_the_model():
    session = OrtSession(models.multi_io(), HostDevice())
    assert [s.name for s in session.inputs] == ["a", "b", "c", "d"]
    assert [s.dtype for s in session.inputs] == [np.float32, np.int64, np.uint8, np.float16]
    assert session.inputs[2].shape == ("N", 2, 5)
    assert session.fixed_batch() is None
    assert OrtSession(models.mlp(batch=4), HostDevice()).fixed_batch() == 4


def test_output_layout_is_probed_per_input_shape_and_cached():
    """Rows twice over (``y = concat(x, x)``) follow no input dim: every new shape is probed."""
    session = OrtSession(renamed_dims_model(), HostDevice())
    assert session.output_layout({"x": (3, 4)}) == {"y": (np.dtype(np.float32), (6, 4))}
    assert session.output_layout({"x": (5, 4)})["y"][1] == (10, 4)
    assert session.foretold_layouts == 0
    runs = session.probe_runs
    session.output_layout({"x": (3, 4)})
    assert session.probe_runs == runs


def test_shapes_that_follow_the_inputs_are_foretold_from_two_small_probes():
    """NOTE [ shapes foretold ]: token batches, a new shape nearly each, cost no probe at their own
    shape: two probes at small shapes, then every layout foretold - and equal to a probe's."""
    from ..text_models import encoder

    session = OrtSession(encoder(hidden=16), HostDevice())
    shapes = [(rows, tokens) for rows, tokens in ((64, 16), (40, 24), (17, 56), (3, 200))]
    for rows, tokens in shapes:
        feeds = {name: (rows, tokens) for name in ("input_ids", "attention_mask", "token_type_ids")}
        assert session.output_layout(feeds) == {"last_hidden_state": (np.dtype(np.float32), (rows, tokens, 16))}
        assert session._probe(feeds) == session.output_layout(feeds)  # what a probe says
    assert session.foretold_layouts == len(shapes)


def test_probe_failure_says_which_shapes():
    session = OrtSession(models.convnet(), HostDevice())
    with pytest.raises(ModelError, match=r"cannot run on input shapes frames\[1, 3, 0, 0\]"):
        session._probe({"frames": (1, 3, 0, 0)})


def _string_identity():
    graph = helper.make_graph(
        [helper.make_node("Identity", ["s"], ["t"])],
        "strings",
        [helper.make_tensor_value_info("s", TensorProto.STRING, ["N"])],
        [helper.make_tensor_value_info("t", TensorProto.STRING, ["N"])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def test_string_tensors_are_object_arrays_and_run_on_the_direct_path():
    """NOTE [ string tensors ]."""
    session = OrtSession(_string_identity(), HostDevice())
    assert session.string_tensors == ["s", "t"]
    words = np.array(["a", "bc", "", "déjà"], dtype=object)
    with Pipeline(_string_identity(), device="cpu") as pipe:
        got = pipe.run({"s": words}, batch_size=3)["t"]
    assert got.dtype == object and got.tolist() == words.tolist()


def test_the_engine_refuses_string_tensors_saying_where_they_run():
    with Pipeline(_string_identity(), device="cpu", options=PipelineOptions(direct=False)) as pipe:
        with pytest.raises(ModelError, match=r"string tensors \('s', 't'\).*direct path"):
            pipe.run({"s": np.array(["a"], dtype=object)})


def test_model_from_path_and_bytes(tmp_path):
    path = tmp_path / "mlp.onnx"
    path.write_bytes(models.mlp().SerializeToString())
    assert OrtSession(path, HostDevice()).input_names == ["x"]
    assert OrtSession(str(path), HostDevice()).output_names == ["scores"]
    assert OrtSession(path.read_bytes(), HostDevice()).output_names == ["scores"]


def test_run_options_skip_graph_lookup_cost_and_cpu_does_not_disable_sync():
    session = OrtSession(models.mlp(), HostDevice())
    assert session.run_options.get_run_config_entry("gpu_graph_id") == "-1"
    with pytest.raises(RuntimeError):
        session.run_options.get_run_config_entry("disable_synchronize_execution_providers")


@pytest.mark.parametrize("name", ["multi_io", "convnet", "mlp"])
def test_declared_inputs_match_the_session_without_building_one(name):
    from pipeline.session import declared_inputs

    model = models.get(name)
    assert declared_inputs(model) == OrtSession(model, HostDevice()).inputs  # weights are not inputs


def test_declared_inputs_of_garbage():
    from pipeline.session import declared_inputs

    with pytest.raises(ModelError, match="not a readable ONNX model"):
        declared_inputs(b"garbage")


def test_a_model_with_external_weights_loads_from_its_path(tmp_path, monkeypatch):
    """Large models keep their weights in files beside the .onnx; ORT finds them
    relative to the model's path, which a model handed over as bytes does not have."""
    import onnx

    from pipeline.session import declared_inputs

    proto = models.mlp()
    in_memory = proto.SerializeToString()  # save_model moves the weights out of proto itself
    onnx.save_model(proto, tmp_path / "m.onnx", save_as_external_data=True, location="m.weights", size_threshold=0)
    assert (tmp_path / "m.weights").stat().st_size > 0
    monkeypatch.chdir(tmp_path.parent)  # not the model's folder: paths resolve from the file
    session = OrtSession(tmp_path / "m.onnx", HostDevice())
    x = np.random.default_rng(0).standard_normal((3, *session.inputs[0].shape[1:])).astype(np.float32)
    expected = OrtSession(in_memory, HostDevice()).run({"x": x})
    np.testing.assert_array_equal(session.run({"x": x})["scores"], expected["scores"])
    assert declared_inputs(tmp_path / "m.onnx") == session.inputs
