"""Score a Parquet table of feature rows with the built-in MLP, row ids kept.

python examples/bulk_scoring.py [OUTDIR]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import Pipeline, models
from pipeline.jobs import run_job
from pipeline.sinks import ParquetSink
from pipeline.sources import ParquetSource


def make_table(path: Path, rows: int = 100_000, features: int = 64) -> Path:
    rng = np.random.default_rng(0)
    values = rng.standard_normal((rows, features)).astype(np.float32)
    columns = {"row_id": pa.array(np.arange(rows, dtype=np.int64) * 7 + 1000)}  # ids that are not positions
    columns.update({f"f{i}": pa.array(values[:, i]) for i in range(features)})
    pq.write_table(pa.table(columns), path, row_group_size=25_000)
    return path


def main(outdir: str | None = None) -> Path:
    folder = Path(outdir or tempfile.mkdtemp(prefix="ortpipe-scoring-"))
    table = make_table(folder / "features.parquet")
    output = folder / "scores.parquet"
    with Pipeline(models.mlp(), device="auto", depth=3) as pipe:
        source = ParquetSource(table, batch_size=4096, inputs=pipe.source_inputs)  # f0..f63 in order
        summary = run_job(pipe, source, ParquetSink(output))
    print(f"scored {table.name}: {summary}")
    print(f"wrote {output}: {pq.read_metadata(output).num_rows} rows")
    return output


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
