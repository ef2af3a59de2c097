"""A producer that makes each batch (a decode, a feature computation) writing it
where the h2d copy reads (``map_filled``) against making an array of its own
that the engine then stages into pinned memory (``map``).

Identity over 64 x 65,536 float32 (16 MiB) batches on an emulated 24 GB/s
link (about 0.7 ms a copy each way), depth 3, the caller's thread: the
producer's work (a multiply over the batch) is the same both ways; ``map``
adds the staging copy of 16 MiB a batch.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from pipeline import HostDevice, Pipeline, PipelineOptions, models

ROWS, FEATURES, BATCHES = 64, 65_536, 40


@pytest.mark.parametrize("way", ["map", "map_filled"])
def test_a_producer_writing_into_the_slot(benchmark, way):
    raw = np.random.default_rng(0).standard_normal((ROWS, FEATURES)).astype(np.float32)
    device = HostDevice(link_gbps=24.0, latency_us=5)
    options = PipelineOptions(stage_threads=False, copy_threads=1)
    with Pipeline(models.identity(features=FEATURES), device=device, depth=3, batch_size=ROWS, options=options) as pipe:

        def made():  # the producer's batch in an array of its own
            for _ in range(BATCHES):
                yield np.multiply(raw, 0.5)

        def fill(index, slot):  # the same work, written into the slot
            if index == BATCHES:
                return None
            np.multiply(raw, 0.5, out=slot["x"])
            return ROWS

        seconds: list[float] = []

        def run() -> None:
            start = time.perf_counter()
            results = pipe.map_with(made(), _drop) if way == "map" else pipe.map_filled(fill, take=_drop)
            for _ in results:
                pass
            seconds.append(time.perf_counter() - start)

        run()  # warm
        benchmark.pedantic(run, rounds=5, iterations=1)
        stats = pipe.stats.to_dict()
    device.close()
    per_batch = min(seconds[1:]) / BATCHES * 1e3  # the warm-up round left out
    benchmark.extra_info.update(way=way, ms_per_batch=per_batch, stage_ms=stats["stage_ms"])
    print(
        f"\n{way}: fastest {per_batch:.2f} ms a batch; source {stats['stage_ms']['source']:.2f} ms, "
        f"stage {stats['stage_ms']['stage']:.2f} ms, h2d {stats['stage_ms']['h2d']:.2f} ms"
    )


def _drop(index, rows, views):
    return None
