"""Issue 40's figure: 1,000,000 rows scored from object storage into object storage against the
same job local to local, on the same machine, as whole ``ortpipe run`` commands taking turns.

The store is a SeaweedFS S3 server on 127.0.0.1 (``tests/object_store.py``): no network
between them, so what the ratio shows is the cost of going through S3's API (requests,
multipart uploads, the server's own work on the same CPUs), not a network's.  Each run's
``--stats`` says where its time went (the source's reads, the take's writes).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from test_host_share import FEATURES, logistic_regression  # benchmarks/ is on the path (rootdir conftest)

ROOT = Path(__file__).resolve().parents[1]
ROWS = 1_000_000
ROUNDS = 3


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    sys.path.insert(0, str(ROOT))
    from tests.object_store import object_store

    with object_store(tmp_path_factory.mktemp("store")) as server:
        server.bucket("bench")
        yield server


def _command(model: Path, source: str, output: str, stats: Path) -> list[str]:
    return [sys.executable, "-m", "pipeline.cli", "run", str(model), "--input", source, "--output", output,
            "--overwrite", "--no-progress", "--stats", str(stats)]  # fmt: skip


def test_s3_to_s3_against_local_to_local(benchmark, store, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    x = np.random.default_rng(2).standard_normal((ROWS, FEATURES)).astype(np.float32)
    table = pa.table({"id": np.arange(ROWS), **{f"f{i}": x[:, i] for i in range(FEATURES)}})
    pq.write_table(table, tmp_path / "x.parquet")
    pq.write_table(table, "bench/x.parquet", filesystem=store.filesystem())
    model = tmp_path / "logreg.onnx"
    onnx.save(logistic_regression(), model)
    env = {**os.environ, **store.environment, "PYTHONPATH": str(ROOT)}
    runs = {
        "local": _command(model, str(tmp_path / "x.parquet"), str(tmp_path / "out"), tmp_path / "local.json"),
        "s3": _command(model, "s3://bench/x.parquet", "s3://bench/out/", tmp_path / "s3.json"),
    }
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    stages: dict[str, list[dict[str, float]]] = {name: [] for name in runs}
    for command in runs.values():  # warmed up: the page cache, the server's first volume
        subprocess.run(command, check=True, capture_output=True, env=env)
    for _ in range(ROUNDS):
        for name, command in runs.items():
            start = time.perf_counter()
            subprocess.run(command, check=True, capture_output=True, env=env)
            seconds[name].append(time.perf_counter() - start)
            stats = json.loads(Path(command[command.index("--stats") + 1]).read_text())
            stages[name].append({stage: ms * stats["batches"] / 1e3 for stage, ms in stats["stage_ms"].items() if ms})
    assert pq.read_table("bench/out", filesystem=store.filesystem()).num_rows == ROWS
    ratios = sorted(s3 / local for s3, local in zip(seconds["s3"], seconds["local"], strict=True))
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    benchmark.extra_info.update(
        s3_over_local_median=statistics.median(ratios),
        s3_over_local_range=[ratios[0], ratios[-1]],
        seconds=seconds,
        stage_seconds={name: stages[name][-1] for name in runs},
    )
    print(f"\ns3->s3 / local->local: {statistics.median(ratios):.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f}); {seconds}")
    for name in runs:
        print(f"{name}: seconds in each stage (last round): {stages[name][-1]}")
