"""Score a data set in shards that can be stopped and resumed: a cluster array job's task.

    python examples/resumable_scoring.py OUTDIR [K/N]

Task K of N scores the K-th of N contiguous windows of a folder of Parquet
files into ``OUTDIR/scores/shard=000K/``, a data set of part files of its own.
Run again after a SIGTERM (a scheduler's pre-emption) or even a kill, it keeps
the parts already written and goes on after their rows; run again once done, it
has nothing left to do; run again while it still runs (a task retried too
soon), it is refused (``output_lock``).  The shards' folders read back as one
table in input order: ``pq.read_table(OUTDIR / "scores")``.  With no K/N,
every shard in turn.
"""

from __future__ import annotations

import signal
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import Pipeline, models
from pipeline.jobs import JobSummary, output_lock, resumed, run_job, shard_rows
from pipeline.sinks import ParquetDatasetSink
from pipeline.sources import ParquetDatasetSource


def make_features(folder: Path, files: int = 4, rows: int = 25_000, features: int = 64) -> Path:
    """A data set of feature rows, as a Spark job would leave it."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for number in range(files):
        values = rng.standard_normal((rows, features)).astype(np.float32)
        pq.write_table(pa.table({f"f{i}": values[:, i] for i in range(features)}), folder / f"part-{number}.parquet")
    return folder


def score_shard(
    features: Path, scores: Path, shard: int, shards: int, stop: threading.Event | None = None
) -> JobSummary:
    """Shard ``shard`` of ``shards`` of ``features`` into ``scores/shard=000K``, after the rows already there."""
    output = scores / f"shard={shard:04d}"
    # a task retried while its first try still runs is refused, instead of both writing the same parts
    with output_lock(output), Pipeline(models.mlp(), device="auto", depth=3) as pipe:
        source = ParquetDatasetSource(features, 4096, pipe.source_inputs)  # every row keeps its file and row
        start, end = shard_rows(len(source), shard, shards)
        sink = ParquetDatasetSink(output, resume=True, part_rows=20_000)
        rows = resumed(source, sink, start, end)  # after the rows written before, checked against the last one
        summary = run_job(pipe, rows, sink, stop=stop)  # a data set gets _SUCCESS once its window is done
    print(f"shard {shard}/{shards}: {sink.kept_rows} rows kept, {summary}")
    return summary


def stop_on_sigterm() -> threading.Event:
    """An event the first SIGTERM sets: the job writes the batches in flight and closes its parts."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    return stop


def main(outdir: str | None = None, task: str | None = None, stop: threading.Event | None = None) -> Path:
    """Task ``task`` ("K/N"), or every shard of two in turn; the features are made first if missing."""
    folder = Path(outdir or tempfile.mkdtemp(prefix="ortpipe-shards-"))
    features, scores = folder / "features", folder / "scores"
    if not features.exists():
        make_features(features)
    scores.mkdir(exist_ok=True)
    shard, shards = (int(n) for n in task.split("/")) if task else (None, 2)
    for k in [shard] if shard is not None else range(shards):
        score_shard(features, scores, k, shards, stop)
    table = pq.read_table(scores)  # the shards' folders as one table, in input order
    print(f"{scores}: {table.num_rows} rows so far, from {table['file'][0]} row {table['row_id'][0]} on")
    return scores


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None, sys.argv[2] if len(sys.argv) > 2 else None, stop_on_sigterm())
