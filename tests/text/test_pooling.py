"""NOTE [ pooling in the graph ]: mean, cls and last pooling and L2 normalizing, against numpy."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from pipeline import ModelError
from pipeline.text import EMBEDDING, default_pooling, folder_settings, with_pooling

from ..text_models import HIDDEN, encoder


def _run(model, ids, mask):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    return session.run(None, feeds)


@pytest.mark.parametrize("pooling", ["mean", "cls", "last", "none"])
@pytest.mark.parametrize("normalize", [False, True])
def test_pooling_in_the_graph_equals_numpy_over_the_masked_tokens(pooling, normalize):
    rng = np.random.default_rng(1)
    ids = rng.integers(5, 100, (3, 8))
    mask = np.array([[1] * 8, [1] * 5 + [0] * 3, [1] * 2 + [0] * 6])
    (hidden,) = _run(encoder(), ids, mask)
    pooled_model = with_pooling(encoder(), pooling, normalize)
    kept = pooling == "none" and not normalize  # nothing appended: the model as it is
    assert [o.name for o in pooled_model.graph.output] == (["last_hidden_state"] if kept else [EMBEDDING])
    (got,) = _run(pooled_model, ids, mask)
    lengths = mask.sum(axis=1)
    if pooling == "mean":
        want = np.stack([hidden[i, : lengths[i]].mean(axis=0) for i in range(3)])
    elif pooling == "cls":
        want = hidden[:, 0]
    elif pooling == "last":
        want = np.stack([hidden[i, lengths[i] - 1] for i in range(3)])
    else:
        want = hidden
    if normalize:
        want = want / np.linalg.norm(want, axis=-1, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert got.shape == ((3, HIDDEN) if pooling != "none" else (3, 8, HIDDEN))


def test_the_defaults_and_sentence_transformers_config(tmp_path):
    assert default_pooling(encoder()) == "mean"
    pooled = with_pooling(encoder(), "cls")
    assert default_pooling(pooled) == "none"  # a model that pools itself
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(
        '{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}'
    )
    assert folder_settings(tmp_path).pooling == "cls" and folder_settings(tmp_path / "1_Pooling").pooling is None


def test_poolings_a_model_cannot_take_are_refused_with_why():
    with pytest.raises(ModelError, match="pooling must be one of"):
        with_pooling(encoder(), "max")
    with pytest.raises(ModelError, match="choose --pooling none for a model that pools itself"):
        with_pooling(with_pooling(encoder(), "cls"), "mean")
