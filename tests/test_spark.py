"""pipeline.spark in Spark's local mode (one session for the module): mapInArrow with
scorer() and output_schema() gives what Pipeline.run gives, one engine per worker."""

from __future__ import annotations

import gc
import importlib.util
import os
import shutil
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import Pipeline, models
from pipeline.spark import output_schema, scorer

# PySpark is imported by the session's fixture, not when the suite is collected
if importlib.util.find_spec("pyspark") is None:
    pytest.skip("PySpark is not installed: pip install '.[spark]' in a checkout of ortpipe", allow_module_level=True)
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs Java (a JDK 17 or later on PATH, or JAVA_HOME)", allow_module_level=True)

ROWS, FEATURES = 4000, 8


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable  # the workers import ortpipe from this environment
    session = (
        SparkSession.builder.master("local[2]")
        .appName("ortpipe-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    gc.freeze()  # PySpark's objects out of every later collection
    yield session
    session.stop()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("spark")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((ROWS, FEATURES)).astype(np.float32)
    table = pa.table({"id": np.arange(ROWS) + 500, **{f"f{i}": x[:, i] for i in range(FEATURES)}})
    pq.write_table(table, folder / "x.parquet", row_group_size=ROWS // 4)
    model = folder / "mlp.onnx"
    model.write_bytes(models.mlp(features=FEATURES).SerializeToString())
    with Pipeline(model, device="cpu") as pipe:
        expected = pipe.run({"x": x})
    return folder, model, expected


def test_map_in_arrow_equals_pipeline_run(spark, data):
    folder, model, expected = data
    frame = spark.read.parquet(str(folder / "x.parquet")).repartition(2)
    schema = output_schema(str(model), frame.schema, keep_columns=["id"])
    assert schema.fieldNames() == ["id", "scores"]
    scored = frame.mapInArrow(scorer(str(model), keep_columns=["id"], id_column="id", device="cpu"), schema)
    table = scored.toArrow().sort_by("id")
    assert table.num_rows == ROWS
    np.testing.assert_array_equal(table["id"].to_numpy(), np.arange(ROWS) + 500)
    np.testing.assert_allclose(np.stack(table["scores"].to_numpy(zero_copy_only=False)), expected["scores"], rtol=1e-6)


def test_columns_named_and_outputs_chosen(spark, data):
    folder, model, expected = data
    frame = spark.read.parquet(str(folder / "x.parquet"))
    columns = {"x": [f"f{i}" for i in range(FEATURES)]}
    schema = output_schema(str(model), frame.schema, keep_columns=["id", "f0"], outputs=["scores"])
    fn = scorer(str(model), input_columns=columns, keep_columns=["id", "f0"], outputs=["scores"], device="cpu")
    table = frame.mapInArrow(fn, schema).toArrow().sort_by("id")
    assert table.column_names == ["id", "f0", "scores"]
    np.testing.assert_allclose(np.stack(table["scores"].to_numpy(zero_copy_only=False)), expected["scores"], rtol=1e-6)


def test_a_classifier_as_its_converter_exports_it_gets_a_column_a_class(spark, tmp_path):
    """Issue 37: a LightGBM classifier exported by onnxmltools (a ZipMap, a label declared [1])."""
    from tests.classifiers import FEATURES as F
    from tests.classifiers import exported, training_data, zipmap_reference

    x, _ = training_data(rows=500, seed=12)
    pq.write_table(pa.table({"id": np.arange(500), **{f"f{i}": x[:, i] for i in range(F)}}), tmp_path / "x.parquet")
    model = tmp_path / "lightgbm.onnx"
    model.write_bytes(exported("lightgbm"))
    frame = spark.read.parquet(str(tmp_path / "x.parquet"))
    schema = output_schema(str(model), frame.schema, keep_columns=["id"])
    assert schema.fieldNames() == ["id", "label", "probabilities_0", "probabilities_1", "probabilities_2"]
    fn = scorer(str(model), keep_columns=["id"], id_column="id", device="cpu")
    table = frame.mapInArrow(fn, schema).toArrow().sort_by("id")
    labels, maps = zipmap_reference(exported("lightgbm"), x)
    np.testing.assert_array_equal(table["label"].to_numpy(), labels)
    want = np.array([row[2] for row in maps], np.float32)
    np.testing.assert_allclose(table["probabilities_2"].to_numpy(), want, rtol=1e-6, atol=1e-7)


def test_a_column_of_texts_is_embedded_in_the_rows_order(spark, tmp_path):
    """Issue 39: a text column through mapInArrow, each vector its text's alone."""
    pytest.importorskip("tokenizers")
    from pipeline.text import TextOptions
    from tests.text_models import HIDDEN, alone, corpus, model_folder

    folder = model_folder(tmp_path / "encoder")
    texts = corpus(50, seed=12)
    pq.write_table(pa.table({"id": np.arange(50), "text": texts}), tmp_path / "docs.parquet")
    frame = spark.read.parquet(str(tmp_path / "docs.parquet"))
    text = TextOptions("text", max_batch_tokens=128)
    schema = output_schema(str(folder), frame.schema, keep_columns=["id"], text=text)
    assert schema.fieldNames() == ["id", "embedding"]
    fn = scorer(str(folder), keep_columns=["id"], id_column="id", device="cpu", text=text)
    table = frame.mapInArrow(fn, schema).toArrow().sort_by("id")
    vectors = np.stack(table["embedding"].to_numpy(zero_copy_only=False))
    assert vectors.shape == (50, HIDDEN)
    np.testing.assert_allclose(vectors, alone(folder, texts), rtol=1e-4, atol=1e-5)
