"""The built-in models: real graphs ORT loads, at IR 10, each with its check."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from pipeline import models


def _session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name", sorted(models.BUILTIN))
def test_builtin_loads_runs_and_is_deterministic(name):
    model = models.get(name)
    assert model.ir_version == models.IR_VERSION  # onnx's default IR 14 is rejected by ORT 1.31
    batch = models.example_batch(name, 3)
    first = _session(model).run(None, batch)
    second = _session(models.get(name)).run(None, batch)  # fixed seeds: same weights
    names = [output.name for output in model.graph.output]
    for output, a, b in zip(names, first, second, strict=True):
        if output not in models.BUILTIN[name].data_dependent:
            assert a.shape[0] == 3
        np.testing.assert_array_equal(a, b)


def test_mlp_computes_what_its_weights_say():
    model = models.mlp()
    weights = {t.name: np.frombuffer(t.raw_data, np.float32).reshape(t.dims) for t in model.graph.initializer}
    x = models.example_batch("mlp", 5)["x"]
    hidden = np.maximum(x @ weights["w1"] + weights["b1"], 0)
    want = hidden @ weights["w2"] + weights["b2"]
    np.testing.assert_allclose(_session(model).run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-5)


def test_identity_is_identity():
    x = models.example_batch("identity", 2)["x"]
    np.testing.assert_array_equal(_session(models.identity()).run(None, {"x": x})[0], x)


def test_multi_io_outputs():
    batch = models.example_batch("multi_io", 4)
    total, square, flipped, half = _session(models.multi_io()).run(None, batch)
    np.testing.assert_allclose(total, batch["a"] + batch["d"].astype(np.float32))
    np.testing.assert_array_equal(square, batch["b"] * batch["b"])
    np.testing.assert_array_equal(flipped, batch["c"][:, :, ::-1])
    np.testing.assert_array_equal(half, batch["a"].astype(np.float16))


def test_fixed_batch_variant_declares_its_dim():
    session = _session(models.convnet(batch=8, height=32, width=32))
    assert session.get_inputs()[0].shape == [8, 3, 32, 32]


def test_unknown_model_lists_the_choices():
    with pytest.raises(KeyError, match="choose from"):
        models.get("resnet")


def test_detect_finds_every_score_over_its_threshold():
    x = models.example_batch("detect", 6)["x"]
    hits, scores, best = _session(models.detect()).run(None, {"x": x})
    np.testing.assert_array_equal(hits, np.argwhere(x > 1.5))
    np.testing.assert_array_equal(scores, x[x > 1.5])
    np.testing.assert_array_equal(best, x.max(axis=1))
    assert 0 < len(hits) < x.size  # the data decides K
