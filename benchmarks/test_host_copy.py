"""Host copies split across threads (NOTE [ parallel host copies ]).

Two figures: the staging copy alone (an ordinary array into page-locked
memory, 64 MiB) by number of threads, and a copy-bound run of the engine
(identity over 16 MiB batches on the plain host device, ``map()``'s outputs
handed over, not copied out: NOTE [ outputs handed over ]) with 1, 2 and 4
copy threads.  On the host device every stage is a memcpy, so the second
shows what splitting gains when all the copies of a batch share one memory
system; on a GPU host the h2d and d2h are DMA and the staging copy competes
with much less.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from pipeline import HostDevice, Pipeline, PipelineOptions, models
from pipeline.bench import measure_host_copy_gbps

THREADS = (1, 2, 4)
FEATURES, ROWS = 4096, 1024  # 16 MiB of float32 a batch


@pytest.mark.parametrize("threads", THREADS)
def test_staging_copy_gbps(benchmark, threads):
    device = HostDevice()
    gbps = benchmark.pedantic(
        lambda: measure_host_copy_gbps(device, 64 << 20, (threads,), repeats=3)[threads], rounds=5, iterations=1
    )
    benchmark.extra_info.update(threads=threads, gbps=gbps)
    print(f"\nstaging copy of 64 MiB into pinned memory, {threads} thread(s): best {gbps:.1f} GB/s", end="")


@pytest.mark.parametrize("threads", THREADS)
def test_copy_bound_engine_ms_per_batch(benchmark, threads):
    batches = [np.random.default_rng(i).random((ROWS, FEATURES), np.float32) for i in range(4)]
    options = PipelineOptions(copy_threads=threads)
    with Pipeline(models.identity(features=FEATURES), device=HostDevice(), depth=3, options=options) as pipe:
        for _ in pipe.map(batches):  # warm-up: buffers, probes, copy threads
            pass

        def run() -> float:
            start = time.perf_counter()
            for _ in pipe.map(batches * 5):
                pass
            return (time.perf_counter() - start) / 20

        benchmark.pedantic(run, rounds=5, iterations=1)
        stage_ms = pipe.stats.to_dict()["stage_ms"]["stage"]
    ms = benchmark.stats.stats.min / 20 * 1e3
    benchmark.extra_info.update(threads=threads, ms_per_batch=ms, stage_ms=stage_ms)
    print(
        f"\ncopy-bound identity, 16 MiB batches, {threads} copy thread(s): fastest {ms:.2f} ms/batch, "
        f"staging {stage_ms:.2f} ms",
        end="",
    )


def test_numpy_copies_leave_the_gil(benchmark):
    """Why copy threads scale (NOTE [ parallel host copies ]): ``np.copyto`` of a
    large block releases the GIL.  A pure-Python loop counts on a thread of its
    own while the main thread copies 64 MiB twenty times; its count against the
    same loop alone for as long says how much of the GIL the copies left it
    (near 1: all of it; near 0: held)."""
    import threading

    src = np.ones(64 << 20, np.uint8)
    dst = np.empty_like(src)

    def count(stop: threading.Event, out: list[int]) -> None:
        n = 0
        while not stop.is_set():
            n += 1
        out.append(n)

    def copying() -> tuple[int, float]:
        stop, beside = threading.Event(), []
        thread = threading.Thread(target=count, args=(stop, beside))
        thread.start()
        start = time.perf_counter()
        for _ in range(20):
            np.copyto(dst, src)
        seconds = time.perf_counter() - start
        stop.set()
        thread.join()
        return beside[0], seconds

    beside, seconds = benchmark.pedantic(copying, rounds=1, iterations=1)
    alone: list[int] = []
    stop = threading.Event()
    threading.Timer(seconds, stop.set).start()
    count(stop, alone)
    benchmark.extra_info.update(python_loop_share_while_copying=beside / alone[0], copy_s=seconds)
    print(f"\na Python loop beside the copies counted {beside / alone[0]:.2f} of what it counts alone")
