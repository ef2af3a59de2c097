"""Scoring into the tables data teams keep (issue 57's figures): the same job into a Parquet data
set, a Delta table and an Iceberg table (the embedded SQLite catalog), whole commands alternated.

1,000,000 rows of 8 float64 features and an id, a linear model, parts of 250,000 rows (four
commits or snapshots a run); the ratio printed is each table's median seconds over the data
set's, every round beside it.  What a table adds is its commits: the log's or the catalog's
writes, and (Iceberg) the rows held until their part is appended.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys

import numpy as np
import pytest
from commands import alternated  # benchmarks/commands.py

ROWS, FEATURES, ROUNDS = 1_000_000, 8, 3


def test_a_million_rows_into_a_data_set_a_delta_table_and_an_iceberg_table(benchmark, tmp_path, capsys):
    pytest.importorskip("deltalake")
    pytest.importorskip("pyiceberg")
    import pyarrow as pa
    import pyarrow.parquet as pq
    from onnx import save

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent))
    from tests.helpers import linear_model

    rng = np.random.default_rng(0)
    source = tmp_path / "rows.parquet"
    pq.write_table(
        pa.table({"id": np.arange(ROWS), **{f"f{i}": rng.standard_normal(ROWS) for i in range(FEATURES)}}), source
    )
    model = tmp_path / "linear.onnx"
    save(linear_model(FEATURES), str(model))
    os.environ["ORTPIPE_ICEBERG_HOME"] = str(tmp_path / "iceberg")
    base = [sys.executable, "-m", "pipeline.cli", "run", str(model), "--input", str(source), "--no-progress",
            "--device", "cpu", "--part-rows", "250000", "--overwrite"]  # fmt: skip
    commands = {
        "data set": [*base, "--output", str(tmp_path / "set")],
        "delta": [*base, "--output", str(tmp_path / "delta"), "--output-format", "delta"],
        "iceberg": [*base, "--output", "bench.scores", "--output-format", "iceberg"],
    }
    try:
        seconds = benchmark.pedantic(alternated, args=(commands, ROUNDS), rounds=1, iterations=1)
    finally:
        shutil.rmtree(tmp_path / "iceberg", ignore_errors=True)
    base_s = statistics.median(seconds["data set"])
    lines = [
        f"{name}: {ROWS / statistics.median(s):,.0f} rows/s ({' / '.join(f'{v:.2f}' for v in s)} s), "
        f"{statistics.median(s) / base_s:.2f}x the data set's seconds"
        for name, s in seconds.items()
    ]
    benchmark.extra_info.update(seconds=seconds)
    with capsys.disabled():
        print(f"\n{ROWS:,} rows, a linear model, parts of 250,000 rows:\n" + "\n".join(lines))
