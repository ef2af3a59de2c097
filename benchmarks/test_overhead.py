"""Per-batch overhead of the engine over a bare ``run_with_iobinding`` loop.

Identity model, one row of 4 floats: what is left is the engine's own cost
(hand-offs between its threads, events, bookkeeping).  Goal: <= 40 us.
"""

from __future__ import annotations

import time

import numpy as np
import onnxruntime as ort

from pipeline import HostDevice, Pipeline, PipelineOptions, models

BATCHES = 3000


def _bare_loop_us(model) -> float:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x, y = np.ones((1, 4), np.float32), np.empty((1, 4), np.float32)
    binding = session.io_binding()
    binding.bind_input("x", "cpu", 0, np.float32, [1, 4], x.ctypes.data)
    binding.bind_output("y", "cpu", 0, np.float32, [1, 4], y.ctypes.data)
    for _ in range(200):
        session.run_with_iobinding(binding)
    start = time.perf_counter()
    for _ in range(BATCHES):
        session.run_with_iobinding(binding)
    return (time.perf_counter() - start) / BATCHES * 1e6


def test_engine_overhead_per_batch(benchmark):
    model = models.identity(features=4)
    batches = [np.ones((1, 4), np.float32)] * BATCHES
    bare_us = _bare_loop_us(model)
    with Pipeline(model, device=HostDevice(), depth=3, options=PipelineOptions(timing=False)) as pipe:
        for _ in pipe.map(batches[:200]):
            pass

        def run() -> None:
            for _ in pipe.map_with(batches, lambda i, r, v: None):
                pass

        benchmark.pedantic(run, rounds=5, iterations=1)
    engine_us = benchmark.stats.stats.median / BATCHES * 1e6
    benchmark.extra_info.update(bare_us=bare_us, engine_us=engine_us, overhead_us=engine_us - bare_us)
    print(
        f"\nbare run_with_iobinding {bare_us:.1f} us/batch, engine {engine_us:.1f} us/batch, "
        f"overhead {engine_us - bare_us:.1f} us/batch"
    )
