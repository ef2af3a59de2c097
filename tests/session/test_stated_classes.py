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
