"""NOTE [ ZipMap ]: classifiers exported with their converters' defaults score as they come."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import Pipeline
from tests.classifiers import exported, training_data, zipmap_reference

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.parametrize(
    ("kind", "label", "probabilities"),
    [
        ("logreg", "output_label", "output_probability"),
        ("forest_in_pipeline", "output_label", "output_probability"),
        ("lightgbm", "label", "probabilities"),
    ],
)
def test_zipmap_probabilities_come_as_a_float_array_with_their_classes(kind, label, probabilities):
    model = exported(kind)
    x, _ = training_data(rows=257, seed=1)
    want_labels, want_maps = zipmap_reference(model, x)
    with Pipeline(model, batch_size=64) as pipe:
        classes = pipe.class_labels[probabilities]
        got = pipe.run(x)
    assert got[probabilities].dtype == np.float32 and got[probabilities].shape == (257, len(classes))
    want = np.array([[row[c] for c in classes] for row in want_maps], np.float32)
    np.testing.assert_allclose(got[probabilities], want, rtol=1e-6, atol=1e-7)  # batches of 64 and one of 257: SIMD
    np.testing.assert_array_equal(got[label].reshape(-1), want_labels.reshape(-1))
    assert set(classes) == set(want_maps[0])


def test_the_engine_gives_the_same_probabilities_on_every_device(device):
    model = exported("forest_in_pipeline")
    x, _ = training_data(rows=300, seed=2)
    _, want_maps = zipmap_reference(model, x)
    with Pipeline(model, device=device, batch_size=50, depth=3) as pipe:
        classes = pipe.class_labels["output_probability"]
        batches = [x[start : start + 50] for start in range(0, 300, 50)]
        got = np.concatenate([out["output_probability"] for out in pipe.map(batches)])
    np.testing.assert_allclose(got, [[row[c] for c in classes] for row in want_maps], rtol=1e-6, atol=1e-7)


def test_string_classes_are_kept_as_strings():
    model = exported("strings_in_pipeline")
    x, _ = training_data(rows=40, seed=3)
    _, want_maps = zipmap_reference(model, x)
    with Pipeline(model, outputs=["output_probability"]) as pipe:
        assert pipe.class_labels == {"output_probability": ("high", "low", "mid")}
        got = pipe.run(x)["output_probability"]
    np.testing.assert_allclose(got, [[row[c] for c in ("high", "low", "mid")] for row in want_maps], rtol=1e-6)


def test_a_model_without_zipmap_has_the_classes_its_tree_ensemble_states():
    """NOTE [ stated classes ]: XGBoost's TreeEnsembleClassifier names its probabilities' columns."""
    with Pipeline(exported("xgboost")) as pipe:
        assert pipe.class_labels == {"probabilities": (0, 1, 2)}


def test_choosing_only_the_labels_leaves_the_model_as_it_is():
    with Pipeline(exported("logreg"), outputs=["output_label"]) as pipe:
        assert pipe.class_labels == {} and pipe.output_names == ["output_label"]
