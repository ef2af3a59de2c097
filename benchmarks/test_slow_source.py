"""When the stage threads pay off: a source as slow as the model, on the CPU backend.

The source sleeps 2 ms a batch (reading or decoding releases the GIL, as PyAV
and file reads do) and the model computes about as long.  With stage threads
the producer reads batch i+1 while ORT runs batch i: about max(source,
compute) a batch.  Issued from the caller's thread, the two take turns: about
their sum.  The default, ``auto``, starts as the latter and hands over to the
threads after its first window of batches.  The per-batch overhead benchmark
shows the other side of the trade.
"""

from __future__ import annotations

import time

import numpy as np

from pipeline import Pipeline, PipelineOptions, models

BATCHES = 100
SOURCE_S = 0.002


def _source(count: int, batch: dict[str, np.ndarray], delay_s: float):
    for _ in range(count):
        time.sleep(delay_s)
        yield batch


def test_slow_source_beside_the_model(benchmark, issuing):
    model = models.busy(features=256, layers=8)
    batch = {"x": np.random.default_rng(0).standard_normal((128, 256)).astype(np.float32)}
    options = PipelineOptions(stage_threads=issuing.option, intra_op_threads=1)
    with Pipeline(model, device="cpu", depth=3, options=options) as pipe:
        list(pipe.map(_source(3, batch, 0.0)))

        def run() -> None:
            for _ in pipe.map_with(_source(BATCHES, batch, SOURCE_S), lambda i, r, v: None):
                pass

        benchmark.pedantic(run, rounds=3, iterations=1)
        means = pipe.stats.stage_mean_s()
        issued_by = pipe.stats.issuing
    per_batch_ms = benchmark.stats.stats.median / BATCHES * 1e3
    benchmark.extra_info.update(per_batch_ms=per_batch_ms, source_ms=means["source"] * 1e3, issuing=issued_by)
    print(
        f"\n{issuing.label}: {per_batch_ms:.2f} ms a batch "
        f"(source {means['source'] * 1e3:.2f} ms, compute {means['compute'] * 1e3:.2f} ms) [issued by: {issued_by}]"
    )
