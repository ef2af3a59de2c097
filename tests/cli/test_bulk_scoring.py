"""``ortpipe run`` on the models users bring for bulk scoring, as their converters export them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from tests.classifiers import FEATURES, exported, training_data, zipmap_reference
from tests.helpers import read_table, write_table

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ROWS = 300


@pytest.fixture
def features(tmp_path):
    x, _ = training_data(rows=ROWS, seed=5)
    path = tmp_path / "features.parquet"
    pq.write_table(pa.table({f"f{i}": x[:, i] for i in range(FEATURES)}), path)
    return x, path


def _run(tmp_path, kind, source, output, *more):
    model = tmp_path / f"{kind}.onnx"
    model.write_bytes(exported(kind))
    args = ["run", str(model), "--input", str(source), "--output", str(output), "--no-progress", *more]
    assert main(args) == 0


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_a_classifier_gets_a_column_a_class_and_its_labels(tmp_path, features, suffix):
    x, source = features
    output = tmp_path / f"scores{suffix}"
    _run(tmp_path, "logreg", source, output, "--batch-size", "64")
    table = read_table(output)
    labels, maps = zipmap_reference(exported("logreg"), x)
    classes = sorted(maps[0])
    assert table.column_names == ["row_id", "output_label", *[f"output_probability_{c}" for c in classes]]
    np.testing.assert_array_equal(table["output_label"].to_numpy(), labels)
    for c in classes:
        want = np.array([row[c] for row in maps], np.float32)
        np.testing.assert_allclose(table[f"output_probability_{c}"].to_numpy(), want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kind", ["xgboost", "lightgbm_no_zipmap"])
@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_a_classifier_without_zipmap_gets_a_column_a_class_its_node_states(tmp_path, features, kind, suffix):
    """NOTE [ stated classes ]: XGBoost as onnxmltools exports it ends in a TreeEnsembleClassifier
    with no ZipMap; its classlabels_int64s name the probabilities' columns."""
    import onnxruntime as ort

    x, source = features
    output = tmp_path / f"scores{suffix}"
    _run(tmp_path, kind, source, output)
    table = read_table(output)
    session = ort.InferenceSession(exported(kind), providers=["CPUExecutionProvider"])
    labels, probabilities = session.run(None, {"input": x})
    classes = range(probabilities.shape[1])
    assert table.column_names == ["row_id", "label", *[f"probabilities_{c}" for c in classes]]
    np.testing.assert_array_equal(table["label"].to_numpy(), labels)
    for c in classes:
        np.testing.assert_allclose(table[f"probabilities_{c}"].to_numpy(), probabilities[:, c], rtol=1e-6, atol=1e-7)


def test_a_lightgbm_classifier_scores_a_row_each_with_its_ids(tmp_path, features):
    """onnxmltools declares LightGBM's label [1]; the labels come a row each, beside the ids."""
    x, source = features
    output = tmp_path / "scores.parquet"
    _run(tmp_path, "lightgbm", source, output, "--batch-size", "100")
    table = pq.read_table(output)
    labels, maps = zipmap_reference(exported("lightgbm"), x)
    assert table.num_rows == ROWS
    np.testing.assert_array_equal(table["row_id"].to_numpy(), np.arange(ROWS))
    np.testing.assert_array_equal(table["label"].to_numpy(), labels)
    want = np.array([row[1] for row in maps], np.float32)
    np.testing.assert_allclose(table["probabilities_1"].to_numpy(), want, rtol=1e-6, atol=1e-7)


def test_npy_keeps_the_probabilities_as_one_array(tmp_path, features):
    x, source = features
    output = tmp_path / "scores.npy"
    _run(tmp_path, "forest_in_pipeline", source, output)
    _, maps = zipmap_reference(exported("forest_in_pipeline"), x)
    got = np.load(tmp_path / "scores.output_probability.npy")
    np.testing.assert_allclose(got, [[row[c] for c in sorted(maps[0])] for row in maps], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_one_value_a_row_is_a_plain_column(tmp_path, features, suffix):
    """A regressor's [N, 1] prediction: a scalar column named after the output, in every format."""
    x, source = features
    output = tmp_path / f"predictions{suffix}"
    _run(tmp_path, "regressor", source, output)
    table = read_table(output)
    assert table.column_names == ["row_id", "variable"]
    assert pa.types.is_floating(table.schema.field("variable").type)
    np.testing.assert_allclose(table["variable"].to_numpy(), x @ np.arange(1, FEATURES + 1), rtol=1e-4, atol=1e-4)


def _with_ids(tmp_path, ids, suffix=".parquet"):
    x, _ = training_data(rows=len(ids), seed=6)
    table = pa.table({"id": ids, **{f"f{i}": x[:, i] for i in range(FEATURES)}})
    path = tmp_path / f"with_ids{suffix}"
    (pq.write_table if suffix == ".parquet" else pacsv.write_csv)(table, path)
    return x, path


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_an_id_column_left_over_is_kept_as_the_id_and_said(tmp_path, capsys, suffix):
    x, source = _with_ids(tmp_path, np.arange(5000, 5000 + ROWS), suffix)
    output = tmp_path / "scores.parquet"
    _run(tmp_path, "logreg", source, output)
    assert "plan: id: 'id' (named like an id), written back exactly" in capsys.readouterr().out
    table = pq.read_table(output)
    np.testing.assert_array_equal(table["id"].to_numpy(), np.arange(5000, 5000 + ROWS))
    labels, _ = zipmap_reference(exported("logreg"), x)
    np.testing.assert_array_equal(table["output_label"].to_numpy(), labels)


def test_a_column_named_like_an_id_is_never_a_feature_unless_mapped(tmp_path, capsys):
    """NOTE [ the table plan ]: even where it repeats, an ``id`` column is the rows' id."""
    x, source = _with_ids(tmp_path, np.arange(ROWS) % 7)
    output = tmp_path / "o.parquet"
    _run(tmp_path, "logreg", source, output)
    assert "plan: id: 'id' (named like an id)" in capsys.readouterr().out
    table = pq.read_table(output)
    np.testing.assert_array_equal(table["id"].to_numpy(), np.arange(ROWS) % 7)
    labels, _ = zipmap_reference(exported("logreg"), x)
    np.testing.assert_array_equal(table["output_label"].to_numpy(), labels)


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_inputs_named_like_columns_are_fed_by_name_and_said(tmp_path, capsys, suffix):
    """skl2onnx gives each column of a ColumnTransformer its own [N, 1] input."""
    x, _ = training_data(rows=ROWS, seed=7)
    columns = {f"f{i}": x[:, i] for i in reversed(range(FEATURES))}  # not in the model's order
    source = tmp_path / f"named{suffix}"
    (pq.write_table if suffix == ".parquet" else pacsv.write_csv)(pa.table(columns), source)
    output = tmp_path / "scores.parquet"
    _run(tmp_path, "columns_by_name", source, output)
    out = capsys.readouterr().out
    assert all(f"plan: input 'f{i}' <- f{i} (by name" in out for i in range(FEATURES))
    import onnxruntime as ort

    session = ort.InferenceSession(exported("columns_by_name"), providers=["CPUExecutionProvider"])
    labels, maps = session.run(None, {f"f{i}": x[:, i : i + 1] for i in range(FEATURES)})
    table = pq.read_table(output)
    np.testing.assert_array_equal(table["output_label"].to_numpy(), labels)
    want = np.array([row[1] for row in maps], np.float32)
    np.testing.assert_allclose(table["output_probability_1"].to_numpy(), want, rtol=1e-6, atol=1e-7)


def _one_dim_model():
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["y"])],
        "one_dim",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


@pytest.mark.parametrize("suffix", [".parquet", ".csv"])
def test_a_one_dim_input_takes_one_column(tmp_path, suffix):
    import onnx

    values = np.arange(ROWS, dtype=np.float32) / 7
    source = tmp_path / f"one{suffix}"
    (pq.write_table if suffix == ".parquet" else pacsv.write_csv)(pa.table({"v": values}), source)
    model = tmp_path / "one_dim.onnx"
    onnx.save(_one_dim_model(), model)
    output = tmp_path / "doubled.jsonl"
    assert main(["run", str(model), "--input", str(source), "--output", str(output), "--no-progress"]) == 0
    table = read_table(output)
    np.testing.assert_allclose(table["y"].to_numpy(), values * 2, rtol=1e-6)


def test_python_sources_feed_inputs_by_name_and_one_dim_inputs(tmp_path):
    from pipeline import Pipeline
    from pipeline.sources import ParquetSource

    x, _ = training_data(rows=ROWS, seed=8)
    source = tmp_path / "named.parquet"
    pq.write_table(pa.table({f"f{i}": x[:, i] for i in range(FEATURES)}), source)
    with Pipeline(exported("columns_by_name"), outputs=["output_label"]) as pipe:
        table = ParquetSource(source, 64, pipe.source_inputs)
        assert table.plan.how == "by name"
        got = np.concatenate([out["output_label"] for out in pipe.map(batch.inputs for batch in table)])
    import onnxruntime as ort

    session = ort.InferenceSession(exported("columns_by_name"), providers=["CPUExecutionProvider"])
    want = session.run(["output_label"], {f"f{i}": x[:, i : i + 1] for i in range(FEATURES)})[0]
    np.testing.assert_array_equal(got, want)
    values = tmp_path / "one.parquet"
    pq.write_table(pa.table({"v": x[:, 0]}), values)
    with Pipeline(_one_dim_model()) as pipe:
        batches = (batch.inputs for batch in ParquetSource(values, 50, pipe.source_inputs))
        got = np.concatenate([out["y"] for out in pipe.map(batches)])
    np.testing.assert_allclose(got, x[:, 0] * 2, rtol=1e-6)


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_string_classes_are_written_as_strings(tmp_path, features, suffix):
    """NOTE [ string tensors ]: a classifier of string classes, its labels and a column a class."""
    x, source = features
    output = tmp_path / f"scores{suffix}"
    _run(tmp_path, "strings_in_pipeline", source, output)
    labels, maps = zipmap_reference(exported("strings_in_pipeline"), x)
    table = read_table(output)
    assert table.column_names == [
        "row_id",
        "output_label",
        *[f"output_probability_{c}" for c in ("high", "low", "mid")],
    ]
    assert table["output_label"].to_pylist() == list(labels)
    want = np.array([row["mid"] for row in maps], np.float32)
    np.testing.assert_allclose(table["output_probability_mid"].to_numpy(), want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_a_string_column_feeds_a_one_hot_encoder(tmp_path, suffix):
    """The most common tabular pipeline: a ColumnTransformer with a OneHotEncoder over a string column."""
    from tests.classifiers import colour_frame

    x, _ = training_data(rows=ROWS, seed=9)
    frame = colour_frame(x)
    source = tmp_path / f"mixed{suffix}"
    write_table(pa.Table.from_pandas(frame, preserve_index=False), source)
    output = tmp_path / "scores.parquet"
    _run(tmp_path, "onehot_strings", source, output)
    import onnxruntime as ort

    session = ort.InferenceSession(exported("onehot_strings"), providers=["CPUExecutionProvider"])
    feeds = {name: frame[name].to_numpy().reshape(-1, 1) for name in ("colour", "f0", "f1")}
    labels, _ = session.run(None, feeds)
    np.testing.assert_array_equal(pq.read_table(output)["output_label"].to_numpy(), labels)


def test_python_takes_numpy_str_and_object_arrays():
    from pipeline import Pipeline
    from tests.classifiers import colour_frame

    x, _ = training_data(rows=50, seed=10)
    frame = colour_frame(x)
    numbers = {name: frame[name].to_numpy().reshape(-1, 1) for name in ("f0", "f1")}
    import onnxruntime as ort

    session = ort.InferenceSession(exported("onehot_strings"), providers=["CPUExecutionProvider"])
    want = session.run(["output_label"], {**numbers, "colour": frame["colour"].to_numpy().reshape(-1, 1)})[0]
    with Pipeline(exported("onehot_strings")) as pipe:
        for colour in (frame["colour"].to_numpy(), frame["colour"].to_numpy().astype(str)):  # object, then <U5
            got = pipe.run({**numbers, "colour": colour.reshape(-1, 1)}, batch_size=16)
            np.testing.assert_array_equal(got["output_label"], want)


def test_string_tensors_run_on_every_device_and_issuing_by_the_direct_path(device, stage_threads):
    """NOTE [ string tensors ]: a string-class classifier on the emulated link, in chaos and on
    CUDA too - ORT keeps its strings in host memory - equal to session.run, each batch as it came."""
    import onnxruntime as ort

    from pipeline import Pipeline, PipelineOptions

    x = training_data(rows=50, seed=3)[0]
    session = ort.InferenceSession(exported("strings_in_pipeline"), providers=["CPUExecutionProvider"])
    want = session.run(["output_label"], {"X": x})[0]
    options = PipelineOptions(stage_threads=stage_threads)
    with Pipeline(exported("strings_in_pipeline"), device=device, options=options) as pipe:
        whole = pipe.run(x, batch_size=16)
        batches = [out["output_label"] for out in pipe.map([x[:20], x[20:], x[:7]])]
    np.testing.assert_array_equal(whole["output_label"], want)
    np.testing.assert_array_equal(np.concatenate(batches), np.concatenate([want, want[:7]]))
    assert whole["output_label"].dtype == object


def test_what_needs_the_engine_is_refused_for_string_tensors_and_the_engine_refuses_them():
    from pipeline import HostDevice, ModelError, OrtSession, Pipeline, PipelineOptions
    from pipeline._engine.rings import refuse_strings

    with pytest.raises(ModelError, match=r"string tensors \('output_label'\).*on_batch"):
        Pipeline(exported("strings_in_pipeline"), device="cpu", options=PipelineOptions(on_batch=print))
    with pytest.raises(ModelError, match=r"string tensors \('output_label'\).*direct path"):
        refuse_strings(OrtSession(exported("strings_in_pipeline"), HostDevice()))


def test_shapes_come_from_the_runs_where_a_probe_on_zeros_cannot_run(device, stage_threads):
    """A model that divides by an input (``price // pack``): zeros divide by zero.  The direct
    path takes the plan from the first batch; the engine leaves every output to ORT."""
    from onnx import TensorProto, helper

    from pipeline import Pipeline, PipelineOptions

    graph = helper.make_graph(
        [helper.make_node("Div", ["price", "pack"], ["per"])],
        "per_pack",
        [helper.make_tensor_value_info(name, TensorProto.INT64, ["N"]) for name in ("price", "pack")],
        [helper.make_tensor_value_info("per", TensorProto.INT64, ["N"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    price, pack = np.arange(10, 110, dtype=np.int64), np.arange(100, dtype=np.int64) % 7 + 1
    with Pipeline(model, device=device, depth=2, options=PipelineOptions(stage_threads=stage_threads)) as pipe:
        np.testing.assert_array_equal(pipe.run({"price": price, "pack": pack}, batch_size=32)["per"], price // pack)
        halves = [{"price": price[:40], "pack": pack[:40]}, {"price": price[40:], "pack": pack[40:]}]
        got = np.concatenate([out["per"] for out in pipe.map(halves)])
        assert pipe.data_dependent_outputs == frozenset()  # a row each
    np.testing.assert_array_equal(got, price // pack)


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_bool_columns_feed_a_bool_input(tmp_path, suffix):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Not", ["flag"], ["negated"])],
        "flags",
        [helper.make_tensor_value_info("flag", TensorProto.BOOL, ["N"])],
        [helper.make_tensor_value_info("negated", TensorProto.BOOL, ["N"])],
    )
    model = tmp_path / "not.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), model)
    flags = np.random.default_rng(11).random(ROWS) > 0.5
    source = tmp_path / f"flags{suffix}"
    write_table(pa.table({"flag": flags}), source)
    output = tmp_path / "negated.parquet"
    assert main(["run", str(model), "--input", str(source), "--output", str(output), "--no-progress"]) == 0
    assert pq.read_table(output)["negated"].to_pylist() == list(~flags)


def test_a_json_lines_table_scores_as_its_parquet_does_and_resumes(tmp_path):
    """JSON Lines in (issue 37, item 2): the same rows as from Parquet; a resumed run keeps its ids."""
    x, _ = training_data(rows=ROWS, seed=14)
    table = pa.table({"id": np.arange(ROWS) + 7, **{f"f{i}": x[:, i] for i in range(FEATURES)}})
    write_table(table, tmp_path / "rows.jsonl")
    write_table(table, tmp_path / "rows.parquet")
    for suffix in (".jsonl", ".parquet"):
        _run(tmp_path, "logreg", tmp_path / f"rows{suffix}", tmp_path / f"from{suffix}.parquet", "--batch-size", "64")
    got, want = pq.read_table(tmp_path / "from.jsonl.parquet"), pq.read_table(tmp_path / "from.parquet.parquet")
    assert got.column_names == want.column_names and got["id"].to_pylist() == list(range(7, 7 + ROWS))
    np.testing.assert_array_equal(got["output_label"].to_numpy(), want["output_label"].to_numpy())
    np.testing.assert_allclose(got["output_probability_1"].to_numpy(), want["output_probability_1"].to_numpy())
    first = tmp_path / "first.parquet"
    _run(tmp_path, "logreg", tmp_path / "rows.jsonl", first, "--batch-size", "64", "--limit", "100")
    _run(tmp_path, "logreg", tmp_path / "rows.jsonl", first, "--batch-size", "64", "--resume")
    assert pq.read_table(first)["id"].to_pylist() == list(range(7, 7 + ROWS))
