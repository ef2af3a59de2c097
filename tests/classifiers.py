"""Real classifiers, exported by their converters with their defaults (ZipMap probabilities),
for the tests of bulk scoring; each made once per test session."""

from __future__ import annotations

import functools

import numpy as np
import pytest

FEATURES = 4


def training_data(rows: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, FEATURES)).astype(np.float32)
    return x, (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)


@functools.cache
def exported(kind: str) -> bytes:
    """``kind``'s model, trained on :func:`training_data` and exported with its converter's defaults."""
    x, y = training_data()
    if kind in ("logreg", "forest_in_pipeline", "strings_in_pipeline", "regressor"):
        pytest.importorskip("skl2onnx")
        from skl2onnx import to_onnx
        from sklearn.ensemble import RandomForestClassifier
        from sklearn.linear_model import LinearRegression, LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        if kind == "logreg":
            model = LogisticRegression().fit(x, y)
        elif kind == "forest_in_pipeline":
            model = make_pipeline(StandardScaler(), RandomForestClassifier(n_estimators=5, max_depth=4, random_state=0))
            model.fit(x, y)
        elif kind == "regressor":
            model = LinearRegression().fit(x, x @ np.arange(1, FEATURES + 1, dtype=np.float32))
        else:
            model = make_pipeline(StandardScaler(), LogisticRegression())
            model.fit(x, np.array(["low", "mid", "high"])[y])
        return to_onnx(model, x[:1]).SerializeToString()
    if kind == "onehot_strings":  # the most common tabular pipeline: a string column one-hot encoded
        pytest.importorskip("skl2onnx")
        pandas = pytest.importorskip("pandas")
        from skl2onnx import to_onnx
        from sklearn.compose import ColumnTransformer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import OneHotEncoder, StandardScaler

        frame = colour_frame(x)
        encoded = ColumnTransformer([("cat", OneHotEncoder(), ["colour"]), ("num", StandardScaler(), ["f0", "f1"])])
        model = make_pipeline(encoded, LogisticRegression()).fit(frame, y)
        return to_onnx(model, frame[:1]).SerializeToString()
    if kind == "columns_by_name":  # a ColumnTransformer over named columns: an input each, [N, 1]
        pytest.importorskip("skl2onnx")
        pandas = pytest.importorskip("pandas")
        from skl2onnx import to_onnx
        from sklearn.compose import ColumnTransformer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        frame = pandas.DataFrame({f"f{i}": x[:, i] for i in range(FEATURES)})
        scaled = ColumnTransformer([("num", StandardScaler(), list(frame.columns))])
        model = make_pipeline(scaled, LogisticRegression()).fit(frame, y)
        return to_onnx(model, frame[:1]).SerializeToString()
    pytest.importorskip("onnxmltools")
    from onnxmltools.convert import convert_lightgbm, convert_xgboost
    from onnxmltools.convert.common.data_types import FloatTensorType

    types = [("input", FloatTensorType([None, FEATURES]))]
    if kind == "lightgbm":
        import lightgbm

        model = lightgbm.LGBMClassifier(n_estimators=10, num_leaves=7, verbose=-1).fit(x, y)
        return convert_lightgbm(model, initial_types=types).SerializeToString()
    if kind == "lightgbm_no_zipmap":
        import lightgbm

        model = lightgbm.LGBMClassifier(n_estimators=10, num_leaves=7, verbose=-1).fit(x, y)
        return convert_lightgbm(model, initial_types=types, zipmap=False).SerializeToString()
    if kind == "xgboost":
        import xgboost

        model = xgboost.XGBClassifier(n_estimators=10, max_depth=3).fit(x, y)
        return convert_xgboost(model, initial_types=types).SerializeToString()
    raise ValueError(kind)


def zipmap_reference(model: bytes, x: np.ndarray) -> tuple[np.ndarray, list[dict]]:
    """What ``session.run`` gives: the labels, and a dict a row of probabilities."""
    import onnxruntime as ort

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    labels, probabilities = session.run(None, {name: x})
    return labels, probabilities


COLOURS = np.array(["red", "green", "blue"], dtype=object)


def colour_frame(x: np.ndarray):
    """A table of a string column and two numbers, made from ``x``: the colour from its last feature."""
    import pandas

    colour = COLOURS[np.digitize(x[:, 3], [-0.5, 0.5])]
    return pandas.DataFrame({"colour": colour, "f0": x[:, 0], "f1": x[:, 1]})
