"""TopK (after a Softmax where asked) appended to a model's graph (NOTE [ top k ]):
what it gives against numpy on the whole output, a model file with its weights
beside it, what it refuses, and ``ortpipe run --top-k``."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from pipeline import ModelError, Pipeline, models
from pipeline.cli import main
from pipeline.heads import with_top_k

ROWS = 50


@pytest.fixture(scope="module")
def scored():
    """Rows, and the mlp's 16 scores a row as a plain ORT session gives them."""
    x = np.random.default_rng(0).standard_normal((ROWS, 64)).astype(np.float32)
    session = ort.InferenceSession(models.mlp().SerializeToString(), providers=["CPUExecutionProvider"])
    return x, session.run(None, {"x": x})[0]


def _softmax(scores: np.ndarray) -> np.ndarray:
    shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def _top(values: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    index = np.argsort(-values, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(values, index, axis=1), index


@pytest.mark.parametrize("softmax", [False, True], ids=["scores", "probabilities"])
def test_the_k_best_of_each_row_largest_first_with_their_indices(scored, softmax, fast_device):
    x, scores = scored
    model = models.mlp()
    before = model.SerializeToString()
    with Pipeline(with_top_k(model, "scores", 5, softmax=softmax), device=fast_device, depth=2) as pipe:
        assert pipe.output_names == ["scores_top5", "scores_top5_index"]  # the whole scores are not copied back
        got = pipe.run(x, batch_size=16)
    assert model.SerializeToString() == before  # the model given is not changed
    reference = _softmax(scores) if softmax else scores
    want_values, want_index = _top(reference, 5)
    tolerance = {"rtol": 1e-5, "atol": 1e-6} if fast_device.kind == "host" else {"rtol": 2e-3, "atol": 2e-3}  # TF32
    np.testing.assert_allclose(got["scores_top5"], want_values, **tolerance)
    # the values the indices point at are the best five (on a GPU two near-equal scores may trade places)
    np.testing.assert_allclose(
        np.take_along_axis(reference, got["scores_top5_index"], axis=1), want_values, **tolerance
    )
    if fast_device.kind == "host":
        np.testing.assert_array_equal(got["scores_top5_index"], want_index)
    assert got["scores_top5_index"].dtype == np.int64 and got["scores_top5"].shape == (ROWS, 5)


def test_keep_leaves_the_whole_output_beside_its_best(scored):
    x, scores = scored
    with Pipeline(with_top_k(models.mlp(), None, 1, keep=True), device="cpu") as pipe:
        got = pipe.run(x, batch_size=16)
    np.testing.assert_allclose(got["scores"], scores, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got["scores_top1_index"][:, 0], scores.argmax(axis=1))


def test_a_model_file_with_its_weights_beside_it_is_read_whole(tmp_path, monkeypatch, scored):
    x, scores = scored
    folder = tmp_path / "model"
    folder.mkdir()
    onnx.save(models.mlp(), folder / "mlp.onnx", save_as_external_data=True, location="weights.bin", size_threshold=0)
    assert (folder / "weights.bin").stat().st_size > 64 * 128 * 4
    monkeypatch.chdir(tmp_path)  # not the model's folder: its weights are found beside it all the same
    with Pipeline(with_top_k(folder / "mlp.onnx", "scores", 3), device="cpu") as pipe:
        got = pipe.run(x, batch_size=16)
    np.testing.assert_array_equal(got["scores_top3_index"], _top(scores, 3)[1])


def _opset_9_model() -> onnx.ModelProto:
    model = models.identity(features=4)
    model.opset_import[0].version = 9
    return model


def _clashing_model() -> onnx.ModelProto:
    model = models.mlp()
    model.graph.output.append(onnx.helper.make_tensor_value_info("scores_top2", onnx.TensorProto.FLOAT, ["N", 16]))
    model.graph.node.append(onnx.helper.make_node("Identity", ["scores"], ["scores_top2"]))
    return model


@pytest.mark.parametrize(
    ("model", "output", "k", "softmax", "words"),
    [
        (models.mlp(), "logits", 2, False, r"top k of 'logits': not an output of the model \(its outputs: \['scores'"),
        (models.multi_io(), None, 2, False, "the model has 4 outputs .*: name the one to take"),
        (models.mlp(), "scores", 0, False, "top k takes a whole number of values >= 1, got 0"),
        (models.mlp(), "scores", True, False, "top k takes a whole number of values >= 1, got True"),
        (models.mlp(), "scores", 17, False, "k = 17 is more than the 16 values along its last axis"),
        (models.multi_io(), "square", 2, True, "a softmax of INT64 values: Softmax takes floats"),
        (models.detect(), "best", 1, False, r"it is \['N'\], one value a row at most"),
        (_opset_9_model(), "y", 2, False, "the model is of opset 9, and TopK with k as an input needs 10"),
        (_clashing_model(), "scores", 2, False, r"already has values named \['scores_top2'\]"),
        (b"not a model", None, 2, False, "not a readable ONNX model"),
        ("no/such/model.onnx", None, 2, False, "model file not found: 'no/such/model.onnx'"),
    ],
    ids=[
        "no-such-output",
        "which-output",
        "k-0",
        "k-bool",
        "k-too-large",
        "softmax-of-ints",
        "a-value-a-row",
        "opset-9",
        "names-taken",
        "bytes",
        "missing-file",
    ],
)
def test_what_cannot_be_taken_says_why(model, output, k, softmax, words):
    with pytest.raises(ModelError, match=words):
        with_top_k(model, output, k, softmax=softmax)


def test_ortpipe_run_top_k_writes_the_k_best_probabilities_and_their_classes(tmp_path, scored, capsys):
    import pyarrow.parquet as pq

    x, scores = scored
    np.save(tmp_path / "x.npy", x)
    argv = ["run", "mlp", "--input", str(tmp_path / "x.npy"), "--batch-size", "16", "--no-progress", "--output"]
    assert main([*argv, str(tmp_path / "top.parquet"), "--top-k", "scores=3", "--softmax"]) == 0
    table = pq.read_table(tmp_path / "top.parquet")
    assert table.column_names == ["row_id", "scores_top3", "scores_top3_index"]
    want_values, want_index = _top(_softmax(scores), 3)
    np.testing.assert_array_equal(np.stack(table["scores_top3_index"].to_numpy(zero_copy_only=False)), want_index)
    np.testing.assert_allclose(np.stack(table["scores_top3"].to_numpy(zero_copy_only=False)), want_values, rtol=1e-5)
    assert main([*argv, str(tmp_path / "soft.parquet"), "--softmax"]) == 1
    assert "--softmax takes the top K probabilities: give --top-k too" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*argv, str(tmp_path / "bad.parquet"), "--top-k", "scores=none"])
    assert "--top-k takes [OUTPUT=]K" in capsys.readouterr().err


def test_the_model_says_what_was_appended(scored):
    from pipeline.heads import top_k_of

    assert top_k_of(models.mlp()) is None
    edited = with_top_k(models.mlp(), None, 4, softmax=True)
    assert top_k_of(edited) == {"output": "scores", "k": 4, "softmax": True, "classes": 16}
    with Pipeline(edited, device="cpu") as pipe:  # ORT reads the model's metadata, and so would a later reader
        assert "ortpipe.top_k" in pipe.session.session.get_modelmeta().custom_metadata_map


@pytest.fixture
def labels_file(tmp_path):
    path = tmp_path / "classes.txt"
    path.write_text("".join(f"class {i}\n" for i in range(16)))
    return path


def test_ortpipe_run_labels_name_the_top_k_classes_and_resume_alike(tmp_path, scored, labels_file):
    import pyarrow.parquet as pq

    x, scores = scored
    np.save(tmp_path / "x.npy", x)
    output = tmp_path / "top.parquet"
    argv = ["run", "mlp", "--input", str(tmp_path / "x.npy"), "--output", str(output), "--batch-size", "16"]
    argv += ["--no-progress", "--top-k", "2", "--labels", str(labels_file)]
    assert main([*argv, "--limit", "20"]) == 0
    assert main([*argv, "--resume"]) == 0  # the rest appended, labels and all
    table = pq.read_table(output)
    assert table.column_names == ["row_id", "scores_top2", "scores_top2_index", "scores_top2_label"]
    index = np.stack(table["scores_top2_index"].to_numpy(zero_copy_only=False))
    np.testing.assert_array_equal(index, _top(scores, 2)[1])
    names = np.stack(table["scores_top2_label"].to_numpy(zero_copy_only=False))
    assert names.tolist() == [[f"class {i}" for i in row] for row in index]


def test_ortpipe_run_labels_are_refused_where_they_cannot_name_the_classes(tmp_path, scored, labels_file, capsys):
    np.save(tmp_path / "x.npy", scored[0])
    argv = ["run", "mlp", "--input", str(tmp_path / "x.npy"), "--no-progress", "--labels"]
    short = tmp_path / "short.txt"
    short.write_text("".join(f"class {i}\n" for i in range(15)))
    for more, words in [
        ([str(short), "--top-k", "2", "--output", str(tmp_path / "a.csv")], "names 15 classes, but 'scores' has 16"),
        ([str(labels_file), "--output", str(tmp_path / "b.csv")], "--labels names the classes --top-k finds"),
        ([str(labels_file), "--top-k", "2", "--output", str(tmp_path / "c.npy")], "write a table"),
        ([str(tmp_path / "none.txt"), "--top-k", "2", "--output", str(tmp_path / "d.csv")], "cannot be read as text"),
    ]:
        assert main([*argv, *more]) == 1
        assert words in capsys.readouterr().err
    assert not list(tmp_path.glob("[abcd].*"))  # refused before any output was written
