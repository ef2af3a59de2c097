"""A model's graph read without ``import onnx`` (``session/onnx_proto.py``): the same classes
a later ``import onnx`` gives, and a plain run that never imports onnx at all."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

SCRIPT = """
import sys
import numpy as np
from pipeline.cli import main
from pipeline.session import declared_inputs
assert "onnx" not in sys.modules, "imported before the run"
print([s.name for s in declared_inputs(sys.argv[1])], [s.dtype for s in declared_inputs(sys.argv[1])])
assert main(["run", sys.argv[1], "--input", sys.argv[2], "--output", sys.argv[3], "--no-progress"]) == 0
print("onnx imported:", "onnx" in sys.modules, "ml_dtypes imported:", "ml_dtypes" in sys.modules)
import onnx
from pipeline.session import graph_of
assert isinstance(graph_of(sys.argv[1]), onnx.ModelProto)  # one class, whichever came first
onnx.checker.check_model(graph_of(sys.argv[1]))
print("same classes")
"""


def test_a_run_of_a_model_file_reads_its_graph_without_importing_onnx(tmp_path):
    from pipeline import models

    model, source = tmp_path / "m.onnx", tmp_path / "x.npy"
    model.write_bytes(models.mlp().SerializeToString())
    np.save(source, np.random.default_rng(0).random((10, 64), np.float32))
    said = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(model), str(source), str(tmp_path / "o.parquet")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert said.returncode == 0, said.stderr
    assert "['x'] [dtype('float32')]" in said.stdout
    assert "onnx imported: False ml_dtypes imported: False" in said.stdout
    assert "same classes" in said.stdout


def test_every_element_type_numpy_has_maps_as_onnx_maps_it():
    from onnx import TensorProto, helper

    from pipeline.session.onnx_proto import numpy_dtype

    for name, number in TensorProto.DataType.items():
        if name == "UNDEFINED":
            continue
        try:
            want = np.dtype(helper.tensor_dtype_to_np_dtype(number))
        except (KeyError, ValueError, TypeError):
            continue
        assert numpy_dtype(number) == want, name


def test_nodes_tensors_and_values_are_made_as_onnx_helper_makes_them():
    from onnx import TensorProto, helper, numpy_helper

    from pipeline.session import onnx_proto

    made = onnx_proto.node("ReduceSum", ["a", "b"], ["c"], keepdims=0, axes=[1, 2], alpha=0.5)
    want = helper.make_node("ReduceSum", ["a", "b"], ["c"], keepdims=0, axes=[1, 2], alpha=0.5)
    assert made.SerializeToString() == want.SerializeToString()
    for values, elem in ((np.array(0, np.int64), TensorProto.INT64), (np.array([3, -1], np.int64), TensorProto.INT64),
                         (np.array(1e-12), TensorProto.FLOAT), (np.array(1e-9), TensorProto.FLOAT16)):  # fmt: skip
        tensor = onnx_proto.tensor("t", values, elem)
        assert list(tensor.dims) == list(values.shape)
        np.testing.assert_array_equal(numpy_helper.to_array(tensor), values.astype(numpy_helper.to_array(tensor).dtype))
    value = onnx_proto.tensor_value("e", TensorProto.FLOAT, ["batch", 384, None])
    want_value = helper.make_tensor_value_info("e", TensorProto.FLOAT, ["batch", 384, None])
    assert value.SerializeToString() == want_value.SerializeToString()
