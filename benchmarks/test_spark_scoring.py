"""Spark: ``mapInArrow`` with :func:`pipeline.spark.scorer` against Spark's documented
pattern for model inference, ``pyspark.ml.functions.predict_batch_udf`` (a
``make_predict_fn`` that makes an ORT session once per worker and runs
``session.run`` on each batch of the columns joined with ``array()``), over the
same 1,000,000-row, 20-column float32 Parquet file and linear model as
``test_scale_out``, in local mode on this machine's CPUs, each job written to
Spark's ``noop`` sink (the scoring measured, not a format's writing).
Contenders alternate (A B A B ...), their ratio and spread in ``extra_info``.
Goal: >= 1.0x.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import onnx
import pytest

pytest.importorskip("pyspark")

from test_host_share import FEATURES, ROWS, _alternated, _report, logistic_regression  # beside this file

BATCH = 65536
ROUNDS = 3


@pytest.fixture(scope="module")
def spark():
    import shutil

    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java 17 or later")
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable  # the workers import ortpipe from this environment
    session = (
        SparkSession.builder.master("local[2]")
        .appName("ortpipe-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(BATCH))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path_factory.mktemp("spark_scoring")
    x = np.random.default_rng(3).standard_normal((ROWS, FEATURES)).astype(np.float32)
    pq.write_table(pa.table({f"f{i}": x[:, i] for i in range(FEATURES)}), folder / "features.parquet")
    onnx.save(logistic_regression(), folder / "logreg.onnx")
    return folder


def _documented(model: str):
    """Spark's pattern: ``predict_batch_udf`` over the feature columns joined into one array column."""
    from pyspark.ml.functions import predict_batch_udf
    from pyspark.sql.types import FloatType

    def make_predict_fn():
        import onnxruntime as ort

        session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])

        def predict(x: np.ndarray) -> np.ndarray:
            (prob,) = session.run(None, {"x": x})
            return prob[:, 0]

        return predict

    return predict_batch_udf(
        make_predict_fn, return_type=FloatType(), batch_size=BATCH, input_tensor_shapes=[[FEATURES]]
    )


def test_scorer_against_sparks_predict_batch_udf(benchmark, spark, data):
    from pyspark.sql.functions import array, col

    from pipeline.spark import output_schema, scorer

    model = str(data / "logreg.onnx")
    frame = spark.read.parquet(str(data / "features.parquet"))
    udf = _documented(model)
    columns = [col(f"f{i}") for i in range(FEATURES)]
    fn, schema = scorer(model, device="cpu", intra_op_threads=1), output_schema(model, frame.schema)

    def theirs() -> float:
        start = time.perf_counter()
        frame.select(udf(array(*columns)).alias("prob")).write.format("noop").mode("overwrite").save()
        return time.perf_counter() - start

    def ours() -> float:
        start = time.perf_counter()
        frame.mapInArrow(fn, schema).write.format("noop").mode("overwrite").save()
        return time.perf_counter() - start

    theirs(), ours()  # the workers started, their sessions made
    a, b = _alternated(theirs, ours, rounds=ROUNDS)
    benchmark.pedantic(ours, rounds=1, iterations=1)
    _report(benchmark, "spark_scorer", a, b)
