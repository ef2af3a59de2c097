"""Score a Parquet data set on Ray Data: one ortpipe pipeline per actor.

python examples/ray_scoring.py [OUTDIR]

On one machine this starts a local Ray cluster. On a cluster, start Ray on each
machine (``ray start --head`` / ``ray start --address=HEAD:6379``), point
``ray.init(address="auto")`` at it, read from storage every node sees (S3, NFS),
and give the pool ``num_gpus=1`` actors: see docs/scale-out.md.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import ray

from pipeline import models
from pipeline.ray import predict


def make_data_set(folder: Path, files: int = 4, rows: int = 25_000, features: int = 64) -> Path:
    """A folder of Parquet files of an id and ``features`` float32 columns."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for number in range(files):
        values = rng.standard_normal((rows, features)).astype(np.float32)
        ids = np.arange(number * rows, (number + 1) * rows, dtype=np.int64)
        pq.write_table(
            pa.table({"id": ids, **{f"f{i}": values[:, i] for i in range(features)}}), folder / f"{number}.parquet"
        )
    return folder


def main(out: Path) -> Path:
    features = make_data_set(out / "features")
    model = out / "mlp.onnx"
    model.write_bytes(models.mlp(features=64).SerializeToString())
    ray.init(include_dashboard=False, logging_level="ERROR")  # address="auto" on a cluster
    try:
        dataset = ray.data.read_parquet(str(features))
        scored = predict(
            dataset, str(model), workers=1, keep_columns=["id"], id_column="id"
        )  # gpus_per_worker=1 on GPUs
        scored.write_parquet(str(out / "scores"))
    finally:
        ray.shutdown()
    table = pq.read_table(out / "scores")
    print(f"{table.num_rows:,} rows scored into {out / 'scores'}: columns {table.column_names}")
    return out / "scores"


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()))
