"""The best five of 1,000 class scores a row: taken in the graph or on the host.

A classifier's head (``[N, 256]`` features -> Gemm -> ``[N, 1000]`` scores)
over 20,480 rows in batches of 512, on the host device behind an emulated
12 GB/s link, the rows written to Parquet:

* ``whole``: every score copied back and written (4,000 bytes a row);
* ``host``: every score copied back, the best five taken with numpy
  (``argpartition``, then sorted) and written;
* ``graph``: ``with_top_k(model, "scores", 5)`` - TopK runs inside the compute
  stage, five values and five indices a row are copied back and written.

items/s (fastest of 3 jobs) and the file's size.  On this CPU backend the
TopK and the host's numpy run on the same cores; on a GPU the graph's runs on
the device, beside the copies.
"""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import HostDevice, Pipeline, models
from pipeline.heads import with_top_k
from pipeline.jobs import run_job
from pipeline.sinks import ParquetSink
from pipeline.sources import SourceBatch

ROWS, BATCH, FEATURES, CLASSES, K = 20_480, 512, 256, 1000, 5


def _head():
    return models.mlp(features=FEATURES, hidden=FEATURES, classes=CLASSES)


def _batches(x: np.ndarray):
    for start in range(0, ROWS, BATCH):
        yield SourceBatch({"x": x[start : start + BATCH]}, {"row_id": np.arange(start, start + BATCH)})


class _TopOnHost(ParquetSink):
    """A Parquet sink that writes the best K scores of a row and their indices, taken with numpy."""

    def write(self, index, rows, outputs, meta):
        scores = outputs["scores"][:rows]
        best = np.argpartition(scores, -K, axis=1)[:, -K:]
        values = np.take_along_axis(scores, best, axis=1)
        order = np.argsort(-values, axis=1)
        top = {"scores_top5": np.take_along_axis(values, order, axis=1)}
        top["scores_top5_index"] = np.take_along_axis(best, order, axis=1).astype(np.int64)
        super().write(index, rows, top, meta)


@pytest.mark.parametrize("where", ["whole", "host", "graph"])
def test_top_5_of_1000_items_per_s(benchmark, tmp_path, where):
    x = np.random.default_rng(0).standard_normal((ROWS, FEATURES)).astype(np.float32)
    model = with_top_k(_head(), "scores", K) if where == "graph" else _head()
    device = HostDevice(link_gbps=12.0, latency_us=10)
    rounds = iter(range(100))
    with Pipeline(model, device=device, depth=3) as pipe:

        def job() -> str:
            path = tmp_path / f"{where}-{next(rounds)}.parquet"
            sink = _TopOnHost(path) if where == "host" else ParquetSink(path)
            run_job(pipe, _batches(x), sink)
            return str(path)

        job()
        path = benchmark.pedantic(job, rounds=3, iterations=1)
    best = ROWS / benchmark.stats.stats.min
    size_mb = (tmp_path / path).stat().st_size / 1e6
    benchmark.extra_info.update(where=where, items_per_s=best, file_mb=size_mb)
    print(f"\ntop 5 of 1000, {where}: fastest {best:,.0f} rows/s, file {size_mb:.1f} MB", end="")
