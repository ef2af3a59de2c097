"""NOTE [ stated classes ]: a classifier node's classes name its probabilities' columns
where no ZipMap follows it."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import Pipeline
from pipeline.session.classifiers import stated_classes


@pytest.mark.parametrize("estimator", ["logreg", "forest"])
def test_string_classes_of_an_export_without_zipmap_are_read_and_used(estimator):
    pytest.importorskip("skl2onnx")
    from skl2onnx import to_onnx
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 4)).astype(np.float32)
    y = np.array(["low", "mid", "high"])[(x[:, 0] > 0).astype(int) + (x[:, 1] > 0.5)]
    model = LogisticRegression() if estimator == "logreg" else RandomForestClassifier(n_estimators=3, random_state=0)
    proto = to_onnx(model.fit(x, y), x[:1], options={"zipmap": False})
    assert stated_classes(proto) == {"probabilities": ("high", "low", "mid")}
    with Pipeline(proto.SerializeToString(), device="cpu") as pipe:
        assert pipe.class_labels == {"probabilities": ("high", "low", "mid")}
        probabilities = pipe.run({"X": x})["probabilities"]
    np.testing.assert_allclose(probabilities, model.predict_proba(x), rtol=1e-5, atol=1e-6)


def test_a_regressor_states_no_classes():
    pytest.importorskip("skl2onnx")
    from skl2onnx import to_onnx
    from sklearn.linear_model import LinearRegression

    x = np.random.default_rng(0).standard_normal((20, 3)).astype(np.float32)
    proto = to_onnx(LinearRegression().fit(x, x[:, 0]), x[:1])
    assert stated_classes(proto) == {}


def test_a_classifier_whose_classes_are_not_stated_is_said_once(tmp_path, capsys):
    """A label a row beside float probabilities, no node naming the classes: said, not guessed."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from onnx import TensorProto, helper

    from pipeline.cli import main

    graph = helper.make_graph(
        [
            helper.make_node("Softmax", ["x"], ["probabilities"], axis=1),
            helper.make_node("ArgMax", ["x"], ["label"], axis=1, keepdims=0),
        ],
        "softmaxed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 3]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    with Pipeline(model.SerializeToString(), device="cpu") as pipe:
        assert pipe.class_labels == {} and pipe.unstated_classes == ("probabilities",)
    (tmp_path / "m.onnx").write_bytes(model.SerializeToString())
    pq.write_table(pa.table({f"f{i}": np.ones(4) for i in range(3)}), tmp_path / "t.parquet")
    argv = ["run", str(tmp_path / "m.onnx"), "--input", str(tmp_path / "t.parquet"), "--no-progress"]
    assert main([*argv, "--output", str(tmp_path / "o.parquet")]) == 0
    out = capsys.readouterr().out
    assert out.count("classes: output 'probabilities' is a classifier's probabilities, but the model states no") == 1
