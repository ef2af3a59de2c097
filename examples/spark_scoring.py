"""Score a Parquet data set with Spark's mapInArrow: one ortpipe pipeline per Python worker.

python examples/spark_scoring.py [OUTDIR]

Runs Spark in local mode (Java 17 or later needed). On a cluster, give the
session your master's URL, ship ortpipe and the model to the executors (an
environment with ortpipe installed, the model on storage every node sees),
and ask for GPUs per task: see docs/scale-out.md.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession

from pipeline import models
from pipeline.spark import output_schema, scorer

sys.path.insert(0, str(Path(__file__).parent))
from ray_scoring import make_data_set


def main(out: Path) -> Path:
    features = make_data_set(out / "features")
    model = out / "mlp.onnx"
    model.write_bytes(models.mlp(features=64).SerializeToString())
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers import ortpipe from this environment
    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    try:
        frame = spark.read.parquet(str(features))
        schema = output_schema(str(model), frame.schema, keep_columns=["id"])
        scored = frame.mapInArrow(scorer(str(model), keep_columns=["id"], id_column="id", device="cpu"), schema)
        scored.write.mode("overwrite").parquet(str(out / "scores"))
        print(f"{spark.read.parquet(str(out / 'scores')).count():,} rows scored into {out / 'scores'}")
    finally:
        spark.stop()
    return out / "scores"


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()))
